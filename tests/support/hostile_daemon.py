"""A hostile sandbox daemon for the controller's tests: a real websocket server on 127.0.0.1.

It speaks the daemon's protocol (:mod:`deskpod.protocol`): a ``hello`` on connect,
then one reply per request, built as a well-behaved daemon would (an observation
with a real PNG screenshot, workspace outputs of the right kind). A test passes a
``tamper`` function that may rewrite any reply (or the hello) before it is sent:
change fields, send other bytes, or send nothing. That is what code that took over
the real daemon could do, so the controller must survive all of it.

It has no live stream: ``/v1/live`` is refused (HTTP 404, as a daemon from before the live
view), so the recorder of a run against it connects to nothing and the tampered replies are
the control channel's alone.

The server runs its own event loop in a thread, so the controller under test may
call ``asyncio.run`` (as the ``deskpod`` CLI does) in the test's thread.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from deskpod.protocol.live import LIVE_PATH

__all__ = ["HostileDaemon", "Reply", "SILENT", "png", "screenshot"]

SILENT = object()
"""What a ``tamper`` function returns to send no reply at all."""

Reply = dict[str, Any] | str | bytes | object
"""A reply as ``tamper`` returns it: a JSON object (sent as JSON text, lone surrogates
escaped), raw text or bytes (sent as they are), or :data:`SILENT`."""

SCREEN = {"width": 64, "height": 40}


def png(width: int = SCREEN["width"], height: int = SCREEN["height"], mode: str = "RGB") -> bytes:
    """A PNG of ``width`` × ``height`` pixels."""
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, format="PNG")
    return out.getvalue()


def screenshot(data: bytes | None = None, **fields: Any) -> dict[str, Any]:
    """A screenshot object as the daemon sends it: ``data`` (default a real 64x40 PNG),
    its true SHA-256, and the sizes; ``fields`` override any field."""
    data = png() if data is None else data
    shot = {"id": "s-1", "format": "png", **SCREEN, "screen_width": SCREEN["width"],
            "screen_height": SCREEN["height"], "scale_x": 1.0, "scale_y": 1.0, "offset_x": 0, "offset_y": 0,
            "sha256": hashlib.sha256(data).hexdigest(), "data": base64.b64encode(data).decode("ascii"),
            "perceptual_hash": "0" * 16}
    return shot | fields


def _observation(url: str, request: dict[str, Any]) -> dict[str, Any]:
    observe = request.get("observe") or {}
    obs: dict[str, Any] = {
        "settled": True, "url": url, "title": "Demo", "events": [],
        "tabs": [{"id": "t1", "url": url, "title": "Demo", "active": True}],
    }
    if observe.get("screenshot", True):
        obs["screenshot"] = screenshot()
    if observe.get("page_text"):
        obs["page_text"] = "hello"
    return obs


_GIT_HEAD = "a" * 40


def _no_live(connection: ServerConnection, request: Request) -> Response | None:
    """Refuse the live stream's path (HTTP 404); accept every other."""
    return connection.respond(404, "no live stream\n") if request.path == LIVE_PATH else None


def well_behaved(request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The reply a correct daemon would send to ``request`` (``state`` keeps the URL: a
    ``navigate`` request or action loads its URL)."""
    kind, rid = request.get("type"), request.get("id")
    if kind == "navigate":
        state["url"] = request["url"]
    for action in request.get("actions", []) if kind == "act" else []:
        if isinstance(action, dict) and action.get("type") == "navigate":
            state["url"] = action.get("url")
    if kind in ("act", "navigate", "reset"):
        return {"type": "result", "id": rid, "observation": _observation(state.get("url", "about:blank"), request)}
    if kind == "configure":
        return {"type": "result", "id": rid, "model_size": SCREEN}
    if kind == "egress":
        return {"type": "result", "id": rid, "egress": {"allowed_domains": request.get("allowed_domains")}}
    if kind == "permissions":
        return {"type": "result", "id": rid, "permissions": request.get("grants")}
    outputs: dict[str, dict[str, Any]] = {
        "seed_workspace": {"type": "workspace_seeded", "files": 3, "size": 100, "git_head": _GIT_HEAD},
        "list_dir": {"type": "dir_listing", "path": ".", "entries": [{"name": "billing.py", "kind": "file",
                                                                      "size": 10}]},
        "read_file": {"type": "file_content", "path": request.get("path", ""), "content": "x = 1\n", "size": 6,
                      "start_line": 1, "end_line": 1},
        "write_file": {"type": "file_written", "path": request.get("path", ""), "size": 1, "created": False},
        "edit_file": {"type": "file_written", "path": request.get("path", ""), "size": 1, "created": False},
        "apply_patch": {"type": "patch_applied", "files": ["billing.py"]},
        "exec": {"type": "exec_output", "exit_code": 0, "duration_s": 0.1, "stdout": "", "stderr": "",
                 "stdout_bytes": 0, "stderr_bytes": 0},
        "run_tests": {"type": "test_run", "passed": False, "exit_code": 1, "duration_s": 0.1, "tail": "1 failed",
                      "output_bytes": 8},
        "workspace_diff": {"type": "workspace_diff", "base": _GIT_HEAD, "files": [], "diff": "", "diff_bytes": 0},
        "workspace_manifest": {"type": "workspace_manifest", "entries": []},
        "clean_room": {"type": "clean_room_run", "exit_code": 0, "duration_s": 0.1,
                       "output": "tests/test_billing.py::test_ok\n", "output_bytes": 31},
    }
    if kind in outputs:
        return {"type": "result", "id": rid, "workspace": outputs[kind]}
    return {"type": "error", "id": rid, "error": {"code": "invalid_request", "message": "unknown", "detail": {}}}


Tamper = Callable[[int, dict[str, Any], dict[str, Any]], Reply]
"""``tamper(n, request, reply)``: the reply to send for the ``n``-th request (1-based)
of the connection, ``egress`` requests not counted (they are answered as sent); ``n`` is
0 for the hello (``request`` is then ``{}``)."""


@dataclass
class HostileDaemon:
    """The server; use as a context manager. :attr:`url` is its websocket URL.

    Args:
        tamper: rewrites replies (default: none, a well-behaved daemon).
    """

    tamper: Tamper = lambda n, request, reply: reply
    requests: list[Any] = field(default_factory=list)
    url: str = ""
    sandbox_id: str = field(default_factory=lambda: f"hostile-{secrets.token_hex(8)}")

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HostileDaemon:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile daemon did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(lambda: self._stop.set_result(None) if self._stop else None)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = self._loop.create_future()
        async with serve(self._handle, "127.0.0.1", 0, max_size=None, process_request=_no_live) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}/v1/ws"
            self._ready.set()
            await self._stop

    async def _send(self, ws: ServerConnection, reply: Reply) -> None:
        if reply is SILENT:
            return
        if isinstance(reply, (str, bytes)):
            await ws.send(reply)
        else:
            await ws.send(json.dumps(reply))

    async def _handle(self, ws: ServerConnection) -> None:
        state: dict[str, Any] = {}
        hello = {"type": "hello", "protocol_version": "1", "screen": SCREEN, "model_size": SCREEN,
                 "sandbox_id": self.sandbox_id}
        await self._send(ws, self.tamper(0, {}, hello))
        n = 0
        async for raw in ws:
            n += 1
            try:
                request = json.loads(raw)
            except ValueError:
                request = {}
            self.requests.append(request)
            if isinstance(request, dict) and request.get("type") == "egress":
                # A run's egress list, sent before its first navigation: answered as sent and
                # not counted, so ``n`` numbers the requests a tamper is about.
                n -= 1
                await self._send(ws, well_behaved(request, state))
                continue
            await self._send(ws, self.tamper(n, request, well_behaved(request, state)))
