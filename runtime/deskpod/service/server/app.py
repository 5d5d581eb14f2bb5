"""The FastAPI application of ``deskpod serve`` (:func:`create_app`) and its uvicorn server (:func:`serve`).

``GET /healthz`` answers the status (:class:`~deskpod.service.messages.ServiceHealth`);
the websocket route :data:`~deskpod.service.messages.SERVICE_PATH` admits agents and
approvers by their bearer token and hands each connection to
:func:`~deskpod.service.server.connection.serve_connection`; the web console
(:mod:`deskpod.service.console`) is mounted under ``/console`` when its settings are given;
``GET /metrics`` (:mod:`~deskpod.service.server.metrics_http`) is served as the metrics'
settings say.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from deskpod.service.console.app import mount_console
from deskpod.errors import InvalidRequestError
from deskpod.service.console.auth import ConsoleAuth, ConsoleSettings
from deskpod.service.messages import APPROVER_ROLE_HEADER, MAX_MESSAGE_BYTES, SERVICE_PATH, ServiceHealth
from deskpod.service.server.connection import serve_connection
from deskpod.service.server.metrics_settings import MetricsSettings
from deskpod.service.server.service_state import ControllerService

if TYPE_CHECKING:  # FastAPI and uvicorn (the ``serve`` extra) are imported when the app is built
    from fastapi import FastAPI
    from starlette.websockets import WebSocket

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)


def create_app(service: ControllerService, console: ConsoleSettings | None = None,
               metrics: MetricsSettings | None = None) -> FastAPI:
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
        metrics: count the service's metrics (:class:`~deskpod.service.server.metrics.ServiceMetrics`,
            then ``app.state.metrics``) and serve ``GET /metrics`` behind its token when it has one;
            ``None``: no metrics (``app.state.metrics`` is ``None``).

    Returns:
        The application.

    Raises:
        ImportError: FastAPI (or, with a console, Jinja2; with metrics, prometheus-client) is not installed.
        InvalidRequestError: the metrics token is the agents' or the approvers' token.
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
    app.state.metrics = None
    if metrics is not None:
        if metrics.token_sha256 in (service.token_sha256, service.approver_token_sha256):
            raise InvalidRequestError("the metrics token must differ from the service's and the approvers' tokens: "
                                      "a scraper must hold a token that reads the metrics and nothing else")
        # prometheus-client (the serve extra) is needed only by a service that counts.
        from deskpod.service.server.metrics import ServiceMetrics
        from deskpod.service.server.metrics_http import metrics_route

        app.state.metrics = ServiceMetrics(service)
        if metrics.token_sha256 is not None:
            app.router.routes.append(metrics_route(app.state.metrics, metrics.token_sha256))
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
                console: ConsoleSettings | None = None, sock: socket.socket | None = None,
                metrics: MetricsSettings | None = None) -> None:
    """Run ``service`` on ``host:port`` (and its metrics' loopback listener, if any) until cancelled.

    Args:
        service: the service to run.
        host: the address to listen on.
        port: the TCP port.
        ready: set once the sockets listen (tests wait on it).
        console: the web console's settings (``None``: no console), see :func:`create_app`.
        sock: a socket already bound (``host`` and ``port`` then only name it in the log): a
            caller that needs the port before the app is built binds port 0 itself.
        metrics: the metrics' settings (``None``: no metrics), see :func:`create_app`; with a
            ``listen``, ``/metrics`` is served there too, without a token.

    Raises:
        OSError: a socket could not listen.
        InvalidRequestError: the metrics token is the agents' or the approvers' token.
    """
    import uvicorn

    app = create_app(service, console, metrics)
    config = uvicorn.Config(app, host=host, port=port, ws="websockets-sansio",
                            ws_max_size=MAX_MESSAGE_BYTES, ws_ping_interval=20.0, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=5)
    servers = [(uvicorn.Server(config), sock, f"{host}:{port}")]
    if metrics is not None and metrics.listen is not None:
        from deskpod.service.server.metrics_http import metrics_app

        metrics_host, metrics_port = metrics.listen
        servers.append((uvicorn.Server(uvicorn.Config(metrics_app(app.state.metrics), host=metrics_host,
                                                      port=metrics_port, log_level="warning", lifespan="off")),
                        None, f"{metrics_host}:{metrics_port} (metrics)"))
    running: list[asyncio.Task[None]] = []
    try:
        for server, bound, where in servers:
            running.append(asyncio.get_running_loop().create_task(
                server.serve(sockets=[bound] if bound is not None else None)))
            while not server.started:
                if running[-1].done():
                    await running[-1]  # startup failed: raise its error
                    raise OSError(f"deskpod serve could not listen on {where}")
                await asyncio.sleep(0.05)
            log.info("deskpod serve on %s", where)
        if ready is not None:
            ready.set()
        await asyncio.shield(asyncio.gather(*running))
    finally:
        for server, _, _ in servers:
            server.should_exit = True
        await asyncio.gather(*running, return_exceptions=True)
