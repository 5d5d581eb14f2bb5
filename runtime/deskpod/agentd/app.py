"""The daemon's HTTP and websocket surface (FastAPI).

- ``GET /healthz``: 200 when Xvfb, the window manager and Chromium run, else 503.
- ``WS /v1/ws``: the control channel of :mod:`deskpod.protocol`. The upgrade must
  carry ``Authorization: Bearer <token>``; a missing or wrong token, or an
  ``Origin`` not in ``DESKPOD_ALLOWED_ORIGINS``, is refused before the handshake
  completes (HTTP 403). The token is never logged.
- ``GET``/``PUT /v1/snapshot``: take and restore a browser snapshot (see
  :mod:`deskpod.protocol`, "Reset and snapshots"), with the same token check.
- ``WS /v1/live``: the live stream (:mod:`deskpod.protocol.live`, served by
  :mod:`deskpod.agentd.display.live`), with the control channel's token and Origin checks;
  it only watches (its one request is ``watch``).
- ``POST /v1/egress/check``: the egress proxy's question whether a credential is a
  live egress grant for a host (:mod:`deskpod.agentd.workspace.egress_grants`); no token, and
  the answer is only ``allowed`` true or false.

The daemon executes; it never decides policy. A control connection's requests are
served by :mod:`deskpod.agentd.connection` (one reply each, rate-limited); the parts
they run on, and their life (start, the session watcher, reset, snapshots), are
:mod:`deskpod.agentd.daemon`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from deskpod.agentd.browser import snapshot
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.connection import Connection, declared_message_bytes, serve
from deskpod.agentd.daemon import Daemon
from deskpod.agentd.session import EarlyStart
from deskpod.agentd.workspace.egress_grants import (
    EGRESS_CHECK_PATH,
    MAX_CHECK_BODY_BYTES,
    EgressCheck,
    EgressCheckAnswer,
)
from deskpod.errors import BusyError, DeskpodError, InvalidRequestError, SnapshotError
from deskpod.protocol import (
    MAX_SNAPSHOT_BYTES,
    MESSAGE_SIZE_HEADER,
    SNAPSHOT_PATH,
    SNAPSHOT_SHA256_HEADER,
    ErrorBody,
    Hello,
    RestoreQuery,
    SnapshotRestored,
    encode_message,
    first_error,
)
from deskpod.protocol.live import LIVE_PATH
from deskpod.tokens import bearer_refusal

__all__ = ["authorized", "create_app"]

_HTTP_STATUS = {
    "unauthorized": 401, "busy": 409, "invalid_request": 400, "snapshot_failed": 400, "snapshot_corrupt": 400,
}

log = logging.getLogger(__name__)


def authorized(headers: dict[str, str], config: AgentdConfig, token_sha256: str | None = None) -> tuple[bool, str]:
    """Decide whether a websocket upgrade (or a snapshot request) may proceed.

    Args:
        headers: the request's headers, lower-case names.
        config: holds the token's SHA-256 at start and the accepted origins.
        token_sha256: the SHA-256 in force (after a reset rotated it); ``None``: the
            configured one.

    Returns:
        ``(ok, reason)``; ``reason`` never contains the token.
    """
    origin = headers.get("origin")
    if origin is not None and origin not in config.allowed_origins:
        return False, "origin not allowed"
    refusal = bearer_refusal(headers.get("authorization"), token_sha256 or config.token_sha256)
    if refusal is not None:
        return False, refusal
    return True, "ok"


def create_app(config: AgentdConfig, early: EarlyStart | None = None) -> FastAPI:
    """Build the daemon's FastAPI application.

    Starting the app starts the desktop session (unless ``manage_session`` is
    off) and grabs one frame; if either fails, startup fails with the reason
    and the process exits.

    Args:
        config: the daemon's settings.
        early: a session already starting (:meth:`EarlyStart.begin`); the app's
            start then waits for it instead of starting one.
    """
    daemon = Daemon(config, early)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await daemon.start()
        except DeskpodError as exc:
            log.error("startup health check failed: %s", exc.message)
            await daemon.stop()
            raise
        log.info("sandbox ready: screen %dx%d", daemon.screen.width, daemon.screen.height)
        watcher = asyncio.create_task(daemon.watch_session())
        yield
        watcher.cancel()
        await daemon.stop()

    app = FastAPI(title="deskpod agentd", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def refused(request: Request) -> JSONResponse | None:
        ok, reason = authorized({k.lower(): v for k, v in request.headers.items()}, config, daemon.token_sha256)
        if ok:
            return None
        log.warning("refused a snapshot request: %s", reason)
        return _error_response(DeskpodError(reason), status=401, code="unauthorized")

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        alive = daemon.session.alive()
        ok = all(alive.values())
        return JSONResponse({"ok": ok, "processes": alive}, status_code=200 if ok else 503)

    @app.post(EGRESS_CHECK_PATH)
    async def egress_check(request: Request) -> JSONResponse:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_CHECK_BODY_BYTES:
                return JSONResponse(EgressCheckAnswer(allowed=False).model_dump(), status_code=413)
        try:
            check = EgressCheck.model_validate_json(bytes(body))
        except ValidationError:
            return JSONResponse(EgressCheckAnswer(allowed=False).model_dump(), status_code=400)
        allowed = daemon.egress.allows(check)
        if not allowed:
            log.info("egress check refused: host %s", check.host)
        return JSONResponse(EgressCheckAnswer(allowed=allowed).model_dump())

    @app.get(SNAPSHOT_PATH)
    async def take_snapshot(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            if daemon.executor.lock.locked() and not daemon.recovering:
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with daemon.executor.lock:
                data = await daemon.take_snapshot()
        except DeskpodError as exc:
            return _error_response(exc)
        digest = hashlib.sha256(data).hexdigest()
        log.info("snapshot taken: %d bytes", len(data))
        return Response(data, media_type="application/gzip", headers={SNAPSHOT_SHA256_HEADER: digest})

    @app.put(SNAPSHOT_PATH)
    async def restore_snapshot(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            try:
                query = RestoreQuery.model_validate(dict(request.query_params))
            except ValidationError as exc:
                raise InvalidRequestError(f"bad restore query: {first_error(exc)}") from exc
            body = bytearray()
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_SNAPSHOT_BYTES:
                    raise SnapshotError(
                        f"the snapshot exceeds {MAX_SNAPSHOT_BYTES} bytes", detail={"reason": "too_large"}
                    )
            checked = await asyncio.to_thread(snapshot.check, bytes(body))
            if daemon.executor.lock.locked() and not daemon.recovering:
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with daemon.executor.lock:
                await daemon.restore(checked, query.start_url)
        except DeskpodError as exc:
            return _error_response(exc)
        url = query.start_url or config.start_url
        return JSONResponse(SnapshotRestored(files=len(checked.files), size=checked.size, url=url).model_dump())

    @app.websocket("/v1/ws")
    async def control(websocket: WebSocket) -> None:
        digest = daemon.token_sha256
        headers = {k.lower(): v for k, v in websocket.headers.items()}
        ok, reason = authorized(headers, config, digest)
        max_reply_bytes = declared_message_bytes(headers)
        if ok and max_reply_bytes is None:
            ok, reason = False, f"{MESSAGE_SIZE_HEADER} out of range"
        if not ok or max_reply_bytes is None:
            log.warning("refused a control connection: %s", reason)
            await websocket.close(code=1008)
            return
        await websocket.accept()
        conn = Connection(daemon, digest, max_reply_bytes)
        daemon.connections[conn] = websocket
        try:
            await websocket.send_text(encode_message(Hello(screen=daemon.screen, model_size=conn.coords.model,
                                                          sandbox_id=daemon.sandbox_id,
                                                          max_message_bytes=max_reply_bytes)))
            await serve(websocket, conn)
        finally:
            daemon.connections.pop(conn, None)

    @app.websocket(LIVE_PATH)
    async def live(websocket: WebSocket) -> None:
        digest = daemon.token_sha256
        ok, reason = authorized({k.lower(): v for k, v in websocket.headers.items()}, config, digest)
        if not ok:
            log.warning("refused a live stream connection: %s", reason)
            await websocket.close(code=1008)
            return
        await websocket.accept()
        try:
            await websocket.send_text(encode_message(Hello(screen=daemon.screen, model_size=daemon.screen,
                                                          sandbox_id=daemon.sandbox_id)))
        except (RuntimeError, WebSocketDisconnect):
            return
        await daemon.live.serve(websocket, daemon.screen, lambda: hmac.compare_digest(digest, daemon.token_sha256))

    return app


def _error_response(exc: DeskpodError, status: int | None = None, code: str | None = None) -> JSONResponse:
    """An HTTP error answer carrying the closed error envelope."""
    body = exc.to_wire()
    if code is not None:
        body["code"] = code
    if status is None:
        status = 413 if exc.detail.get("reason") == "too_large" else _HTTP_STATUS.get(body["code"], 500)
    if status >= 500:
        log.error("snapshot endpoint failed: %s", exc.message)
    return JSONResponse(ErrorBody(**body).model_dump(), status_code=status)
