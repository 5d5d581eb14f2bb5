"""The live view on a real sandbox: the daemon pushes frames on X damage, the controller
fans one stream out to every viewer, the console route refuses whoever it must, and
live.js draws the frames in a real browser.

The controller service runs in this process (its FastAPI app with the live router, a
stand-in for the console's sign-in: a cookie); the agent is a plain websocket client
of ``/v1/controller`` driving the integration stack's sandbox; viewers are websocket
clients of ``/console/live/{session}`` and, last, Debian's Chromium under Playwright.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deskpod_stack import Stack
from running_service import free_port
from deskpod.client.live import LiveClient
from deskpod.console.live import live_router
from deskpod.service.live_hub import LiveHub
from deskpod.service.server.app import create_app
from deskpod.service.server.service_state import ControllerService
from deskpod.errors import InvalidRequestError, UnauthorizedError
from deskpod.protocol.live import MAX_LIVE_STREAMS

pytestmark = pytest.mark.integration

STATIC = Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "service" / "console" / "static"
PAGE = "http://demo.test/fixtures/live-screen"
COLOUR = {"type": "click", "x": 640, "y": 250}
"""The fixture's "Colour" band: the whole background changes on every frame for 1.5 s."""
NOISE = {"type": "click", "x": 640, "y": 550}
"""The fixture's "Noise" band: random pixels (large JPEGs) on every frame for 5 s."""
COOKIE = "deskpod_test_viewer"
"""The test's stand-in for the console's session cookie."""


@dataclass
class Live:
    """The running service: its port, hub, the agent's connection and its session."""

    port: int
    hub: LiveHub
    agent: Any
    session: str
    viewer_cookie: str

    def url(self, session: str | None = None) -> str:
        return f"ws://127.0.0.1:{self.port}/console/live/{session or self.session}"

    def viewer(self, session: str | None = None, cookie: str | None = None) -> Any:
        value = self.viewer_cookie if cookie is None else cookie
        return connect(self.url(session), additional_headers={"Cookie": f"{COOKIE}={value}"}, max_size=None)

    async def submit(self, action: dict) -> dict:
        """Send one step and return its observation reply; once more when the screen the
        agent saw had changed (a fresh stack may still be drawing its first page)."""
        for _ in range(2):
            await self.agent.send(json.dumps({"type": "submit", "id": secrets.token_hex(4), "session": self.session,
                                              "actions": [action]}))
            reply = await next_of(self.agent, "observation")
            if not (reply["status"] == "denied" and (reply.get("error") or {}).get("code") == "screen_changed"):
                break
        return reply


async def next_of(ws: Any, kind: str) -> dict:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if message["type"] == kind:
            return message


def non_loopback_address() -> str:
    """An IPv4 address of this host that is not a loopback address (the one its default
    route leaves from; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    assert not address.startswith("127."), address
    return str(address)


@contextlib.asynccontextmanager
async def live_service(stack: Stack, tmp_path: Path, host: str = "127.0.0.1") -> AsyncIterator[Live]:
    """The service with the live router, listening on ``host``, and a session on the
    stack's sandbox at :data:`PAGE`."""
    from fastapi.responses import HTMLResponse
    from starlette.staticfiles import StaticFiles

    token = secrets.token_urlsafe(32)
    cookie = secrets.token_urlsafe(16)
    service = ControllerService(hashlib.sha256(token.encode()).hexdigest(), audit_dir=str(tmp_path / "audit"))

    async def authorize(websocket: Any) -> str | None:
        return "tester" if websocket.cookies.get(COOKIE) == cookie else None

    app = create_app(service)
    hub = LiveHub(service.session_sandbox)
    app.include_router(live_router(service, authorize, hub))
    app.mount("/console/static", StaticFiles(directory=STATIC), name="static")

    async def page(session: str) -> HTMLResponse:
        # The console branch writes the real page; this one only mounts live.js on a canvas.
        return HTMLResponse(f'<!doctype html><html><body><canvas id="live" width="1280" height="800" '
                            f'data-live-session="{session}"></canvas>'
                            '<script src="/console/static/live.js"></script></body></html>')

    app.add_api_route("/test/live/{session}", page, methods=["GET"])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, ws="websockets-sansio",
                                           log_level="warning", lifespan="on"))
    running = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not running.done(), "the service did not start"
            await asyncio.sleep(0.05)
        async with connect(f"ws://127.0.0.1:{port}/v1/controller", max_size=None,
                           additional_headers={"Authorization": f"Bearer {token}"}) as agent:
            await agent.send(json.dumps({
                "type": "open", "id": "o", "sandbox": {"url": stack.ws_url, "token": stack.token},
                "task": {"name": "live", "start_url": PAGE, "allowed_domains": ["demo.test"],
                         "success": {"timeout_s": 1, "page_text_contains": "never on this page"}}}))
            session = (await next_of(agent, "opened"))["session"]
            await next_of(agent, "observation")
            yield Live(port, hub, agent, session, cookie)
            await hub.close()
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)


async def count_frames(viewer: Any, seconds: float) -> tuple[int, list[dict]]:
    """Frames (binary messages) and JSON messages a viewer receives in ``seconds``."""
    frames, texts = 0, []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(viewer.recv(), left)
        except TimeoutError:
            break
        if isinstance(message, bytes):
            assert message[:3] == b"\xff\xd8\xff", "a frame is a JPEG"
            frames += 1
        else:
            texts.append(json.loads(message))
    return frames, texts


async def first_frame(viewer: Any, timeout_s: float = 30.0) -> tuple[int, list[dict]]:
    """Read until the viewer's first frame (``(1, texts before it)``), at most ``timeout_s``."""
    texts: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(viewer.recv(), left)
        except TimeoutError:
            break
        if isinstance(message, bytes):
            return 1, texts
        texts.append(json.loads(message))
    return 0, texts


async def frames_during(viewers: list[Any], live: Live, action: dict, after_s: float = 0.2) -> list[int]:
    """Frames each viewer receives from the moment ``action`` is submitted until its
    observation is back (the daemon settles first: the animation is over by then)."""
    done = asyncio.Event()

    async def count(viewer: Any) -> int:
        frames = 0
        while not done.is_set():
            got, _ = await count_frames(viewer, 0.1)
            frames += got
        return frames + (await count_frames(viewer, after_s))[0]

    counters = [asyncio.create_task(count(v)) for v in viewers]
    reply = await live.submit(action)
    done.set()
    assert reply["status"] == "ok", (reply["status"], reply.get("error"))
    return list(await asyncio.gather(*counters))


async def quiet(viewer: Any, seconds: float = 0.4, timeout_s: float = 10.0) -> None:
    """Read until the viewer got no frame for ``seconds``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frames, _ = await count_frames(viewer, seconds)
        if frames == 0:
            return
    raise AssertionError("the screen never went quiet")


def test_frames_flow_while_the_screen_changes_none_while_idle_one_stream_for_every_viewer(
    stack: Stack, tmp_path: Path
) -> None:
    """More viewers than the daemon has streams all see the screen change: the controller
    holds one stream for the sandbox. While the page animates, frames flow; over an idle
    second, none. A reset ends the stream; the hub follows the rotated token."""

    async def body() -> dict:
        async with live_service(stack, tmp_path) as live:
            viewers = [await live.viewer() for _ in range(MAX_LIVE_STREAMS + 1)]
            try:
                firsts = await asyncio.gather(*(first_frame(v) for v in viewers))
                await asyncio.gather(*(quiet(v) for v in viewers))
                changing = await frames_during(viewers, live, COLOUR)
                await asyncio.gather(*(quiet(v) for v in viewers))
                idle = await asyncio.gather(*(count_frames(v, 1.0) for v in viewers))
                connects = live.hub.upstreams[live.session].connects
                # A reset after the run: the daemon ends the stream, the token rotates, the hub follows.
                await live.agent.send(json.dumps({"type": "finish", "id": "f", "session": live.session}))
                await next_of(live.agent, "finished")
                await live.agent.send(json.dumps({"type": "reset", "id": "r", "session": live.session,
                                                  "start_url": PAGE}))
                stack.token = (await next_of(live.agent, "reset_done"))["token"]
                after_reset, texts = await count_frames(viewers[0], 6.0)
                return {"firsts": firsts, "changing": changing, "idle": idle, "connects": connects,
                        "after_reset": after_reset, "texts": texts,
                        "reconnects": live.hub.upstreams[live.session].connects}
            finally:
                for v in viewers:
                    await v.close()

    outcome = asyncio.run(asyncio.wait_for(body(), 120))
    for frames, texts in outcome["firsts"]:
        assert frames >= 1, "a new viewer gets the screen at once"
        meta = [t for t in texts if t["type"] == "meta"][-1]
        assert meta["url"] == PAGE and meta["screen"] == {"width": 1280, "height": 800} and meta["stream"] == "live"
        assert meta["state"]
    assert outcome["connects"] == 1, "one daemon stream, however many viewers"
    # At least a few: the rate is the bench's to measure (BENCHMARKS.md), the machine is shared.
    assert all(frames >= 3 for frames in outcome["changing"]), outcome["changing"]
    assert all(frames <= 1 for frames, _ in outcome["idle"]), outcome["idle"]
    assert outcome["reconnects"] == 2 and outcome["after_reset"] >= 1, outcome
    assert "reconnecting" in [t.get("stream") for t in outcome["texts"]]


def test_a_viewer_that_never_reads_does_not_stall_another(stack: Stack, tmp_path: Path) -> None:
    """A viewer whose socket is never read (a tiny receive buffer) only loses frames; the other
    viewer sees the noise animation at full rate."""

    async def body() -> tuple[int, int, int]:
        async with live_service(stack, tmp_path) as live:
            loop = asyncio.get_running_loop()
            stalled = socket.socket()
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.setblocking(False)  # the service runs on this event loop
            await loop.sock_connect(stalled, ("127.0.0.1", live.port))
            key = base64.b64encode(os.urandom(16)).decode()
            await loop.sock_sendall(stalled, (f"GET /console/live/{live.session} HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
                             f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                             f"Sec-WebSocket-Version: 13\r\nCookie: {COOKIE}={live.viewer_cookie}\r\n\r\n").encode())
            assert await asyncio.wait_for(loop.sock_recv(stalled, 12), 10) == b"HTTP/1.1 101"
            try:
                async with live.viewer() as reader:
                    await quiet(reader)
                    upstream = live.hub.upstreams[live.session]
                    before = upstream.frames
                    (frames,) = await frames_during([reader], live, NOISE, after_s=1.5)
                    return frames, upstream.frames - before, len(upstream.viewers)
            finally:
                stalled.close()

    frames, pushed, attached = asyncio.run(asyncio.wait_for(body(), 90))
    assert pushed >= 3, f"the sandbox pushed only {pushed} frames of noise"
    # The reader may lose a frame of its own (a newer one replaces one not yet sent), never most of them.
    assert frames >= pushed * 3 // 4, f"the reading viewer got {frames} of the {pushed} frames: it was held back"
    assert attached == 2, "the stalled viewer was still watching throughout"


def test_the_live_view_refuses_the_unauthorized_and_viewers_cannot_act(stack: Stack, tmp_path: Path) -> None:
    """No sign-in (authorize None), a wrong cookie or an unknown session: refused before the
    handshake. A viewer that sends anything is closed. The daemon's stream endpoint wants the
    sandbox's token and takes no request but ``watch``."""

    async def body() -> dict:
        found: dict[str, Any] = {}
        async with live_service(stack, tmp_path) as live:
            for name, url, headers in [
                ("no_cookie", live.url(), {}),
                ("wrong_cookie", live.url(), {"Cookie": f"{COOKIE}=wrong"}),
                ("unknown_session", live.url("session-000000000000"), {"Cookie": f"{COOKIE}={live.viewer_cookie}"}),
            ]:
                try:
                    async with connect(url, additional_headers=headers):
                        found[name] = 101
                except InvalidStatus as exc:
                    found[name] = exc.response.status_code
            async with live.viewer() as viewer:
                await viewer.send(json.dumps({"type": "human_input", "action": COLOUR}))
                with contextlib.suppress(Exception):
                    while True:
                        await asyncio.wait_for(viewer.recv(), 20)
                found["viewer_close"] = viewer.close_code
            with contextlib.suppress(InvalidRequestError):
                async with live.hub.watch("no-such-session"):
                    pass
        try:
            await LiveClient.connect(stack.ws_url, "not-the-token-" + "x" * 20)
        except UnauthorizedError:
            found["daemon_wrong_token"] = True
        async with connect(stack.ws_url.replace("/v1/ws", "/v1/live"),
                           additional_headers={"Authorization": f"Bearer {stack.token}"}) as raw:
            await raw.recv()  # the hello
            await raw.send(json.dumps({"type": "act", "id": "a", "actions": [COLOUR]}))
            found["daemon_act"] = json.loads(await raw.recv())
            with contextlib.suppress(Exception):
                await asyncio.wait_for(raw.recv(), 5)
            found["daemon_close"] = raw.close_code
        return found

    found = asyncio.run(asyncio.wait_for(body(), 90))
    assert found["no_cookie"] == found["wrong_cookie"] == found["unknown_session"] == 403
    assert found["viewer_close"] == 1008
    assert found["daemon_wrong_token"] is True
    assert found["daemon_act"]["type"] == "error" and found["daemon_act"]["error"]["code"] == "invalid_request"
    assert found["daemon_close"] == 1008


def test_live_js_draws_the_sandbox_in_a_real_browser(stack: Stack, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A page that mounts live.js on a canvas shows the sandbox's pixels, changes when the
    sandbox's screen does, and fires deskpod-live-meta with the URL and the run's state.

    On a loopback address (a secure context) the view is H.264 decoded by WebCodecs; on a
    non-loopback ``http`` address (not a secure context: no WebCodecs) it is JPEG, and so
    it is where the controller cannot encode video (no PyAV)."""
    from deskpod.service.console import live_view

    from playwright.async_api import async_playwright

    pixel = "(() => { const d = document.getElementById('live').getContext('2d')" \
            ".getImageData(20, 780, 1, 1).data; return [d[0], d[1], d[2]]; })()"
    drawn = "Number(document.getElementById('live').dataset.liveFrames) >= 1"
    codec = "document.getElementById('live').dataset.liveCodec"
    insecure_host = non_loopback_address()

    async def body() -> dict:
        async with live_service(stack, tmp_path, host="0.0.0.0") as live, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium")
            try:
                context = await browser.new_context()
                await context.add_cookies([{"name": COOKIE, "value": live.viewer_cookie, "domain": domain,
                                            "path": "/"} for domain in ("127.0.0.1", insecure_host)])
                page = await context.new_page()
                await page.add_init_script(
                    "window.__meta = []; document.addEventListener('deskpod-live-meta', "
                    "e => window.__meta.push(e.detail), true);")
                await page.goto(f"http://127.0.0.1:{live.port}/test/live/{live.session}")
                await page.wait_for_function(drawn, timeout=15_000)
                before = await page.evaluate(pixel)
                step = asyncio.create_task(live.submit(COLOUR))
                shown = json.dumps(json.dumps(before, separators=(",", ":")))
                await page.wait_for_function(f"JSON.stringify({pixel}) !== {shown}", timeout=30_000)
                after = await page.evaluate(pixel)
                await step
                video_frames = await page.evaluate("Number(document.getElementById('live').dataset.liveFrames)")
                meta = await page.evaluate("window.__meta")
                secure_codec = await page.evaluate(codec)
                insecure = await context.new_page()
                await insecure.goto(f"http://{insecure_host}:{live.port}/test/live/{live.session}")
                await insecure.wait_for_function(drawn, timeout=15_000)
                pixels: list[list[int]] = []
                # Until the screen is still (an earlier test's animation may run on); the two
                # views are two lossy encodings of it (JPEG 60, H.264 CRF 26): 48 levels apart at most.
                for _ in range(50):
                    pixels = [await insecure.evaluate(pixel), await page.evaluate(pixel)]
                    if all(abs(a - b) < 24 for a, b in zip(*pixels, strict=True)):
                        break
                    await asyncio.sleep(0.2)
                monkeypatch.setattr(live_view, "video_available", lambda: False)
                no_encoder = await context.new_page()
                await no_encoder.goto(f"http://127.0.0.1:{live.port}/test/live/{live.session}")
                await no_encoder.wait_for_function(drawn, timeout=15_000)
                return {"before": before, "after": after, "meta": meta, "secure_codec": secure_codec,
                        "no_encoder_codec": await no_encoder.evaluate(codec),
                        "video_frames": video_frames, "insecure_codec": await insecure.evaluate(codec),
                        "insecure_secure_context": await insecure.evaluate("window.isSecureContext"),
                        "pixels": pixels}
            finally:
                await browser.close()

    outcome = asyncio.run(asyncio.wait_for(body(), 90))
    assert outcome["before"] != outcome["after"]
    assert any(m["url"] == PAGE and m["state"] and m["stream"] == "live" for m in outcome["meta"]), outcome["meta"]
    assert outcome["secure_codec"].startswith("avc1."), outcome
    assert outcome["video_frames"] >= 2, "the change was drawn from decoded video frames"
    assert outcome["insecure_secure_context"] is False and outcome["insecure_codec"] == "jpeg", outcome
    assert outcome["no_encoder_codec"] == "jpeg", outcome
    assert all(abs(a - b) < 24 for a, b in zip(*outcome["pixels"], strict=True)), \
        f"the JPEG view shows what the video view shows: {outcome['pixels']}"
