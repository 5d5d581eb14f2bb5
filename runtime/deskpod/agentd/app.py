"""The daemon's HTTP and websocket surface (FastAPI).

- ``GET /healthz``: 200 when Xvfb, the window manager and Chromium run, else 503.
- ``WS /v1/ws``: the control channel of :mod:`deskpod.protocol`. The upgrade must
  carry ``Authorization: Bearer <token>``; a missing or wrong token, or an
  ``Origin`` not in ``DESKPOD_ALLOWED_ORIGINS``, is refused before the handshake
  completes (HTTP 403). The token is never logged.

The daemon executes; it never decides policy. Every request gets exactly one
reply; bad input gets a typed error and the connection stays open.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from deskpod.agentd.cdp import Browser
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.executor import Executor, validate_batch
from deskpod.agentd.observe import Observer
from deskpod.agentd.session import DesktopSession
from deskpod.agentd.workspace import Workspace, is_workspace_request
from deskpod.errors import BusyError, DeskpodError, ExecutionError, InternalError, ProtocolError
from deskpod.protocol import (
    ActRequest,
    ConfigureRequest,
    CoordinateMap,
    ErrorBody,
    ErrorReply,
    Hello,
    NavigateRequest,
    Result,
    Size,
    TakeScreenshot,
    fit_within,
    WorkspaceRequest,
    parse_request,
)

__all__ = ["create_app", "authorized", "MAX_PIPELINED_REQUESTS"]

BROWSER_CHECK_INTERVAL_S = 0.5
"""How often the daemon checks that Chromium still runs."""

MAX_PIPELINED_REQUESTS = 8
"""Requests a connection may have read but not yet answered; the daemon stops
reading from that socket until one is answered."""

log = logging.getLogger(__name__)


def authorized(headers: dict[str, str], config: AgentdConfig) -> tuple[bool, str]:
    """Decide whether a websocket upgrade may proceed.

    Args:
        headers: the upgrade request's headers, lower-case names.
        config: holds the token's SHA-256 and the accepted origins.

    Returns:
        ``(ok, reason)``; ``reason`` never contains the token.
    """
    origin = headers.get("origin")
    if origin is not None and origin not in config.allowed_origins:
        return False, "origin not allowed"
    auth = headers.get("authorization", "")
    scheme, _, presented = auth.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False, "missing token"
    digest = hashlib.sha256(presented.strip().encode()).hexdigest()
    if not hmac.compare_digest(digest, config.token_sha256):
        return False, "wrong token"
    return True, "ok"


class _Daemon:
    def __init__(self, config: AgentdConfig) -> None:
        self.config = config
        self.session = DesktopSession(config)
        self.executor = Executor(config.display)
        self.browser = Browser(config.cdp_port)
        self.observer = Observer(self.executor, self.browser)
        self.workspace = Workspace(config.workspace_dir, config.runtime_dir, config.proxy)
        self.screen = config.screen

    async def start(self) -> None:
        if self.config.manage_session:
            await asyncio.to_thread(self.session.start)
        width, height = await self.executor.start()
        self.screen = Size(width=width, height=height)

    async def watch_browser(self) -> None:
        """Restart Chromium whenever it exits (closed window, last tab closed, crash) and
        report ``browser_restarted`` in the next observation."""
        while True:
            await asyncio.sleep(BROWSER_CHECK_INTERVAL_S)
            if not self.session.browser_exited():
                continue
            log.warning("the browser exited; restarting it")
            await self.browser.close()
            try:
                await asyncio.to_thread(self.session.start_browser)
            except DeskpodError as exc:
                log.error("browser restart failed: %s", exc.message)
                continue
            self.browser.events.append("browser_restarted")

    async def stop(self) -> None:
        await self.browser.close()
        await self.executor.close()
        await asyncio.to_thread(self.session.stop)



class _Connection:
    def __init__(self, daemon: _Daemon) -> None:
        self.daemon = daemon
        self.coords = CoordinateMap(daemon.screen)
        self.cancel = threading.Event()

    async def handle(self, raw: str | bytes) -> str:
        request_id: str | None = None
        try:
            request = parse_request(raw)
            request_id = request.id
            # Workspace requests have their own lock: they never wait for the X11 executor.
            lock = self.daemon.workspace.lock if is_workspace_request(request) else self.daemon.executor.lock
            if lock.locked():
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with lock:
                self.cancel = threading.Event()
                reply = await self._dispatch(request)
            return reply.model_dump_json()
        except DeskpodError as exc:
            if request_id is None and isinstance(exc, ProtocolError):
                rid = exc.detail.get("id")
                request_id = rid if isinstance(rid, str) else None
            log.info("request %s failed: %s", request_id, exc.code)
            return ErrorReply(id=request_id, error=ErrorBody(**exc.to_wire())).model_dump_json()
        except Exception as exc:  # the daemon must survive anything a request triggers
            log.exception("request %s: internal error", request_id)
            err = InternalError(f"internal error: {type(exc).__name__}")
            return ErrorReply(id=request_id, error=ErrorBody(**err.to_wire())).model_dump_json()

    async def _dispatch(self, request: ActRequest | NavigateRequest | ConfigureRequest | WorkspaceRequest) -> Result:
        daemon = self.daemon
        started = time.perf_counter()
        if is_workspace_request(request):
            return Result(id=request.id, workspace=await daemon.workspace.handle(request, self.cancel))
        if isinstance(request, ConfigureRequest):
            model = request.model_size
            if request.max_dimension is not None:
                model = fit_within(daemon.screen, request.max_dimension)
            self.coords = CoordinateMap(daemon.screen, model)
            return Result(id=request.id, model_size=self.coords.model)
        if isinstance(request, NavigateRequest):
            await daemon.browser.navigate(request.url, request.timeout_s)
            observation = await daemon.observer.observe(request.observe, self.coords)
            log.info("request %s: navigate (%.3f s)", request.id, time.perf_counter() - started)
            return Result(id=request.id, observation=observation)
        validate_batch(request.actions, self.coords)
        outcome = await daemon.executor.run(
            request.actions, self.coords, request.timeout_s, self.cancel, daemon.observer.probe
        )
        if self.cancel.is_set():
            raise ExecutionError("request cancelled: the client went away", detail={"completed": len(outcome.timings)})
        wants_shot = any(isinstance(a, TakeScreenshot) for a in request.actions)
        observation = await daemon.observer.observe(request.observe, self.coords, wants_shot, outcome)
        log.info(
            "request %s: %s (%.3f s)",
            request.id,
            ",".join(a.type for a in request.actions) or "observe",
            time.perf_counter() - started,
        )
        return Result(id=request.id, observation=observation)


def create_app(config: AgentdConfig) -> FastAPI:
    """Build the daemon's FastAPI application.

    Starting the app starts the desktop session (unless ``manage_session`` is
    off) and grabs one frame; if either fails, startup fails with the reason
    (case C-21) and the process exits.
    """
    daemon = _Daemon(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await daemon.start()
        except DeskpodError as exc:
            log.error("startup health check failed: %s", exc.message)
            await daemon.stop()
            raise
        log.info("sandbox ready: screen %dx%d", daemon.screen.width, daemon.screen.height)
        watcher = asyncio.create_task(daemon.watch_browser())
        yield
        watcher.cancel()
        await daemon.stop()

    app = FastAPI(title="deskpod agentd", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        alive = daemon.session.alive()
        ok = all(alive.values())
        return JSONResponse({"ok": ok, "processes": alive}, status_code=200 if ok else 503)

    @app.websocket("/v1/ws")
    async def control(websocket: WebSocket) -> None:
        ok, reason = authorized({k.lower(): v for k, v in websocket.headers.items()}, config)
        if not ok:
            log.warning("refused a control connection: %s", reason)
            await websocket.close(code=1008)
            return
        await websocket.accept()
        conn = _Connection(daemon)
        await websocket.send_text(Hello(screen=daemon.screen, model_size=conn.coords.model).model_dump_json())
        await _serve(websocket, conn)

    return app


async def _serve(websocket: WebSocket, conn: _Connection) -> None:
    # Bounded: a client that pipelines faster than the sandbox answers is slowed down
    # by TCP back-pressure instead of growing the daemon's memory.
    inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=MAX_PIPELINED_REQUESTS)

    async def read() -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                await inbox.put(message.get("text") if message.get("text") is not None else message.get("bytes"))
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            conn.cancel.set()
            while True:  # unread requests of a client that left are dropped
                try:
                    inbox.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    inbox.get_nowait()

    reader = asyncio.create_task(read())
    try:
        while (raw := await inbox.get()) is not None:
            reply = await conn.handle(raw)
            try:
                await websocket.send_text(reply)
            except (WebSocketDisconnect, RuntimeError):
                break
    finally:
        conn.cancel.set()
        reader.cancel()
        await conn.daemon.executor.release_all()
