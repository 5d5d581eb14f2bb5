"""The FastAPI application of ``deskpod serve`` (:func:`create_app`) and its uvicorn server (:func:`serve`).

``GET /healthz`` answers the status (:class:`~deskpod.service.messages.ServiceHealth`);
the websocket route :data:`~deskpod.service.messages.SERVICE_PATH` admits agents and
approvers by their bearer token and hands each connection to
:func:`~deskpod.service.server.connection.serve_connection`; the web console
(:mod:`deskpod.service.console`) is mounted under ``/console`` when its settings are given.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from deskpod.service.console.app import mount_console
from deskpod.service.console.auth import ConsoleAuth, ConsoleSettings
from deskpod.service.messages import APPROVER_ROLE_HEADER, MAX_MESSAGE_BYTES, SERVICE_PATH, ServiceHealth
from deskpod.service.server.connection import serve_connection
from deskpod.service.server.service_state import ControllerService

if TYPE_CHECKING:  # FastAPI and uvicorn (the ``serve`` extra) are imported when the app is built
    from fastapi import FastAPI
    from starlette.websockets import WebSocket

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)


def create_app(service: ControllerService, console: ConsoleSettings | None = None) -> FastAPI:
    """Build the service's FastAPI application.

    ``GET /healthz`` answers the status (:meth:`ControllerService.health`); the
    websocket route :data:`~deskpod.service.messages.SERVICE_PATH` refuses, before the
    handshake, a request with an ``Origin`` header (a browser: HTTP 403) or without the
    bearer token (HTTP 401; the token decides whether the connection is an agent's or an
    approver's, see :data:`~deskpod.service.messages.APPROVER_ROLE_HEADER`). Stopping the
    app cancels the sessions still open.

    Args:
        service: the sessions' state, token and policy.
        console: serve the web console under ``/console`` with these users and origins
            (:func:`deskpod.service.console.app.mount_console`); ``None``: no console.

    Returns:
        The application.

    Raises:
        ImportError: FastAPI (or, with a console, Jinja2) is not installed.
    """
    from fastapi import FastAPI
    from starlette.responses import PlainTextResponse
    from starlette.routing import WebSocketRoute

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.close()

    app = FastAPI(title="deskpod serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    async def healthz() -> ServiceHealth:
        return service.health()

    async def controller(websocket: WebSocket) -> None:
        if websocket.headers.get("origin") is not None:
            log.warning("refused a connection from a browser (Origin header)")
            await websocket.send_denial_response(PlainTextResponse("browsers may not connect\n", status_code=403))
            return
        role = service.role(websocket.headers.get("authorization"))
        expected = websocket.headers.get(APPROVER_ROLE_HEADER)
        if role is None or (expected is not None and expected != role):
            log.warning("refused a connection: missing or wrong bearer token (or not the role it expects)")
            await websocket.send_denial_response(
                PlainTextResponse("missing or wrong bearer token\n", status_code=401))
            return
        await websocket.accept()
        await serve_connection(service, websocket, role)

    # /healthz through FastAPI, so that it is in the service's OpenAPI document
    # (:func:`deskpod.schema.write_schemas`); the websocket as a plain Starlette route:
    # its endpoint takes the websocket itself, and its messages have JSON Schemas.
    app.add_api_route("/healthz", healthz, methods=["GET"], response_model=ServiceHealth, summary="service status")
    app.router.routes.append(WebSocketRoute(SERVICE_PATH, controller))
    if console is not None:
        # The console's routes need FastAPI and Jinja2 at import (the serve extra): loaded
        # only by a service that serves the console.
        from deskpod.service.console.history import history_router
        from deskpod.service.console.live_view import live_router

        auth = ConsoleAuth(console)
        mount_console(app, service, auth, routers=[live_router(service, auth.authorize_websocket),
                                                   history_router(service.audit_dir, auth.authorize_request,
                                                                  public_key=service.seal_key)])
    return app


async def serve(service: ControllerService, host: str, port: int, ready: asyncio.Event | None = None,
                console: ConsoleSettings | None = None, sock: socket.socket | None = None) -> None:
    """Run ``service`` on ``host:port`` until cancelled.

    Args:
        service: the service to run.
        host: the address to listen on.
        port: the TCP port.
        ready: set once the socket listens (tests wait on it).
        console: the web console's settings (``None``: no console), see :func:`create_app`.
        sock: a socket already bound (``host`` and ``port`` then only name it in the log): a
            caller that needs the port before the app is built binds port 0 itself.

    Raises:
        OSError: the socket could not listen.
    """
    import uvicorn

    config = uvicorn.Config(create_app(service, console), host=host, port=port, ws="websockets-sansio",
                            ws_max_size=MAX_MESSAGE_BYTES, ws_ping_interval=20.0, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    running = asyncio.get_running_loop().create_task(server.serve(sockets=[sock] if sock is not None else None))
    try:
        while not server.started:
            if running.done():
                await running  # startup failed: raise its error
                raise OSError(f"deskpod serve could not listen on {host}:{port}")
            await asyncio.sleep(0.05)
        log.info("deskpod serve on %s:%d", host, port)
        if ready is not None:
            ready.set()
        await asyncio.shield(running)
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)
