"""The live stream on a real Xvfb with Chromium: the daemon's stream module pushes frames
on X damage and none while idle, ends streams for a reset and refuses new ones meanwhile,
caps the number of streams; the controller's hub and the console route carry it to
live.js in a real browser (Playwright on Debian's Chromium)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn
from fastapi import FastAPI, WebSocket
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from deskpod.agentd.display.live import LiveStreams
from deskpod.client.live import LiveClient, LiveImage
from deskpod.console.live import live_router
from deskpod.errors import BusyError
from deskpod.protocol import Hello, Size, encode_message
from deskpod.protocol.live import LIVE_PATH, MAX_LIVE_STREAMS, LiveEnd
from running_service import free_port

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop, Page

pytestmark = pytest.mark.display

STATIC = Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "service" / "console" / "static"
ANIMATE = ("(() => { const until = performance.now() + 1000; let n = 0; (function f() {"
           " document.documentElement.style.background = `hsl(${(n++ * 37) % 360}, 70%, 45%)`;"
           " if (performance.now() < until) requestAnimationFrame(f); })(); return true; })()")
"""Changes the whole page's background on every animation frame for one second."""
CALM = ("(() => { document.activeElement && document.activeElement.blur();"
        " document.body.innerHTML = ''; document.documentElement.style.background = '#204080'; return true; })()")
"""An idle page: nothing focused (no caret blinks), nothing moves."""


@dataclass
class FakeService:
    """What the live router needs of the controller service: one session on this desktop."""

    url: str
    record_listeners: list[Any] = field(default_factory=list)

    def session_sandbox(self, session: str) -> Any:
        return self if session == "s1" else None

    @property
    def token(self) -> str:
        return "display-test-token"


@contextlib.asynccontextmanager
async def daemon(desktop: Desktop) -> AsyncIterator[tuple[int, LiveStreams]]:
    """The daemon's stream endpoint on the desktop's display, and the console route on it."""
    width, height = desktop.size
    screen = Size(width=width, height=height)
    streams = LiveStreams(desktop.display_name)
    app = FastAPI()

    async def live(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(encode_message(Hello(screen=screen, model_size=screen, sandbox_id="sbx-display0")))
        await streams.serve(websocket, screen, lambda: True)

    async def authorize(websocket: WebSocket) -> str | None:
        return "tester" if websocket.cookies.get("viewer") == "yes" else None

    async def page() -> HTMLResponse:
        return HTMLResponse(f'<!doctype html><html><body style="margin:0"><canvas id="live" width="{width}" '
                            f'height="{height}" data-live-session="s1"></canvas>'
                            '<script src="/console/static/live.js"></script></body></html>')

    port = free_port()
    app.add_api_websocket_route(LIVE_PATH, live)
    app.include_router(live_router(FakeService(f"ws://127.0.0.1:{port}/v1/ws"), authorize))  # type: ignore[arg-type]
    app.mount("/console/static", StaticFiles(directory=STATIC), name="static")
    app.add_api_route("/page", page, methods=["GET"])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, ws="websockets-sansio",
                                           log_level="warning"))
    running = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not running.done(), "the test server did not start"
            await asyncio.sleep(0.05)
        yield port, streams
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)


async def frames_within(client: LiveClient, seconds: float) -> int:
    count = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            count += isinstance(await client.next(left), LiveImage)
        except TimeoutError:
            break
    return count


async def quiet(client: LiveClient) -> None:
    for _ in range(20):
        if await frames_within(client, 0.4) == 0:
            return
    raise AssertionError("the screen never went quiet")


def test_frames_come_on_damage_none_while_idle_and_a_reset_ends_the_stream(desktop: Desktop, page: Page) -> None:
    page.evaluate(CALM)

    async def main() -> dict[str, Any]:
        async with daemon(desktop) as (port, streams):
            url = f"ws://127.0.0.1:{port}/v1/ws"
            client = await LiveClient.connect(url, "t" * 20, max_fps=20)
            first = await client.next(5)
            await quiet(client)
            idle = await frames_within(client, 1.0)
            page.evaluate(ANIMATE)
            changing = await frames_within(client, 1.0)
            await quiet(client)
            others = [await LiveClient.connect(url, "t" * 20) for _ in range(MAX_LIVE_STREAMS - 1)]
            with contextlib.suppress(BusyError):
                await LiveClient.connect(url, "t" * 20)
                raise AssertionError("a stream over the cap was started")
            async with streams.suspended("reset"):
                ends = [await c.next(5) for c in [client, *others]]
                assert streams.count == 0
                with contextlib.suppress(BusyError):
                    await LiveClient.connect(url, "t" * 20)
                    raise AssertionError("a stream started during a reset")
            return {"first": first, "idle": idle, "changing": changing, "ends": ends}

    outcome = asyncio.run(asyncio.wait_for(main(), 60))
    assert isinstance(outcome["first"], LiveImage) and outcome["first"].header.width == desktop.size[0]
    assert outcome["idle"] == 0, "no frame while nothing is drawn"
    assert outcome["changing"] >= 10, f"only {outcome['changing']} frames in a second of animation"
    assert all(isinstance(e, LiveEnd) and e.reason == "reset" for e in outcome["ends"]), outcome["ends"]


def test_live_js_draws_the_screen_and_follows_it_in_a_real_browser(desktop: Desktop, page: Page) -> None:
    from playwright.async_api import async_playwright

    page.evaluate(CALM)
    pixel = ("(() => { const d = document.getElementById('live').getContext('2d')"
             ".getImageData(20, 700, 1, 1).data; return [d[0], d[1], d[2]]; })()")

    async def main() -> dict[str, Any]:
        async with daemon(desktop) as (port, _), async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium")
            try:
                context = await browser.new_context()
                await context.add_cookies([{"name": "viewer", "value": "yes", "domain": "127.0.0.1", "path": "/"}])
                viewer = await context.new_page()
                await viewer.add_init_script("window.__meta = []; document.addEventListener('deskpod-live-meta', "
                                             "e => window.__meta.push(e.detail), true);")
                await viewer.goto(f"http://127.0.0.1:{port}/page")
                await viewer.wait_for_function("Number(document.getElementById('live').dataset.liveFrames) >= 1",
                                               timeout=15_000)
                before = await viewer.evaluate(pixel)
                page.evaluate("document.documentElement.style.background = '#ff8000'")
                await viewer.wait_for_function(f"(() => {{ const p = {pixel}; return p[0] > 200 && p[2] < 60; }})()",
                                               timeout=15_000)
                return {"before": before, "meta": await viewer.evaluate("window.__meta")}
            finally:
                await browser.close()

    outcome = asyncio.run(asyncio.wait_for(main(), 60))
    assert outcome["before"][2] > outcome["before"][0], "the calm page's blue was drawn first"
    assert any(m["stream"] == "live" and m["screen"] == {"width": desktop.size[0], "height": desktop.size[1]}
               for m in outcome["meta"]), outcome["meta"]
