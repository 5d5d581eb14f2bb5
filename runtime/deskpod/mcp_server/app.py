"""Run ``deskpod mcp``: the controller it goes through, then the MCP server over stdio or HTTP.

The controller is the operator's ``deskpod serve`` (``controller_url``) or, by
default, a :class:`~deskpod.service.server.service_state.ControllerService` this process serves
on ``127.0.0.1``, on a free port unless one is given (any number of ``deskpod mcp`` run side
by side on one host): its agent token is made here and never leaves the process (only the
MCP sessions use it), and its approver token is ``DESKPOD_SERVE_APPROVER_TOKEN`` (or its
SHA-256), so that a person signs in to its console with that token (or connects an
approver's client) to answer the runs' confirmations and pauses. The console's address is
printed on standard error when it starts. When it cannot start, the MCP server still
answers, and every tool call fails saying why (as standard error does): an MCP client
otherwise sees only a closed connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.egress import EgressControl
from deskpod.errors import DeskpodError
from deskpod.service.console.auth import ConsoleSettings, default_origins, load_users
from deskpod.service.server.app import serve
from deskpod.service.server.service_state import ControllerService
from deskpod.service.messages import SERVICE_PATH
from deskpod.mcp_server.server import build_server
from deskpod.mcp_server.sessions import McpConfig, SessionRegistry
from deskpod.settings import get_settings
from deskpod.tokens import bearer_refusal, token_sha256

__all__ = ["EmbeddedController", "bearer_middleware", "embedded_controller", "serve_mcp"]

log = logging.getLogger(__name__)

CONTROLLER_START_TIMEOUT_S = 15.0
"""Seconds the embedded controller service may take to listen."""

Say = Callable[[str], None]
"""Tells the person who started ``deskpod mcp`` something (a line on standard error)."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class EmbeddedController:
    """Settings of the controller service ``deskpod mcp`` embeds.

    ``port``: its port on 127.0.0.1 (0: a free one). ``approver_token_sha256``: its
    approvers' token (``None``: nobody can approve, and confirmations time out as denials).
    ``egress_control`` / ``egress_sandbox_url``: the stack's proxy, for sessions on the
    stack's sandbox. ``console``: serve the web console under ``/console/``.
    """

    port: int
    approver_token_sha256: str | None
    audit_dir: str
    egress_control: EgressControl | None = None
    egress_sandbox_url: str | None = None
    console: bool = True


def _console(port: int, approver_token_sha256: str | None) -> ConsoleSettings | None:
    """The embedded console's settings: the approver token's user (and ``DESKPOD_CONSOLE_TOKENS_FILE``'s),
    at ``http://127.0.0.1:PORT``; ``None`` when the console cannot be served (Jinja2 missing)."""
    try:
        import jinja2  # noqa: F401 - the console's templates
    except ImportError:
        return None
    return ConsoleSettings(load_users(get_settings().console_tokens_file, approver_token_sha256),
                           default_origins("127.0.0.1", port))


@contextlib.asynccontextmanager
async def embedded_controller(config: McpConfig, embedded: EmbeddedController,
                              say: Say = _stderr) -> AsyncIterator[ControllerService]:
    """Serve a controller service (and its console) on ``127.0.0.1:embedded.port`` (0: a free
    port) for the block, point ``config`` at it (a fresh agent token), and ``say`` where a
    person approves.

    Raises:
        OSError: the port cannot be bound.
        TimeoutError: it did not listen in time.
        DeskpodError: the service could not be made (its audit key, its console's users).
    """
    token = secrets.token_urlsafe(32)
    service = ControllerService(token_sha256(token), audit_dir=embedded.audit_dir, policy=config.policy,
                                signer=AuditSigner.load_or_create(),
                                approver_token_sha256=embedded.approver_token_sha256,
                                egress_control=embedded.egress_control,
                                egress_sandbox_url=embedded.egress_sandbox_url)
    sock = socket.create_server(("127.0.0.1", embedded.port))
    port = sock.getsockname()[1]
    console = _console(port, embedded.approver_token_sha256) if embedded.console else None
    ready = asyncio.Event()
    task = asyncio.get_running_loop().create_task(serve(service, "127.0.0.1", port, ready, console, sock=sock))
    try:
        waiting = asyncio.ensure_future(ready.wait())
        done, _ = await asyncio.wait({waiting, task}, timeout=CONTROLLER_START_TIMEOUT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiting.cancel()
            await task  # raises why it could not start
        if waiting not in done:
            raise TimeoutError("the embedded controller service did not start")
        config.controller_url = f"ws://127.0.0.1:{port}{SERVICE_PATH}"
        config.controller_token = token
        say(_where_to_approve(port, console, embedded.approver_token_sha256))
        yield service
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        sock.close()


def _where_to_approve(port: int, console: ConsoleSettings | None, approver_token_sha256: str | None) -> str:
    """The line that tells the person where this process's confirmations are answered."""
    approvers = f"approvers connect to ws://127.0.0.1:{port}{SERVICE_PATH} with DESKPOD_SERVE_APPROVER_TOKEN"
    if approver_token_sha256 is None:
        return (f"deskpod mcp: confirmations are DENIED when they time out: no DESKPOD_SERVE_APPROVER_TOKEN is set, "
                f"so nobody can approve (set it, then sign in at http://127.0.0.1:{port}/console/ with it)")
    if console is None:
        return f"deskpod mcp: {approvers} (the console needs Jinja2: pip install 'deskpod[mcp]')"
    return (f"deskpod mcp: approve this assistant's actions at http://127.0.0.1:{port}/console/ "
            "(sign in with DESKPOD_SERVE_APPROVER_TOKEN)")


def _ending_sessions(app: Any, registry: SessionRegistry) -> Any:
    """Wrap the streamable HTTP app: note each session's requests (in flight, last active) in
    ``registry`` for :func:`_end_idle_sessions`, and once a client's ``DELETE`` of its session
    is answered, end that session's run and give its sandbox back."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", [])) if scope["type"] == "http" else {}
        session = headers.get(b"mcp-session-id", b"").decode("latin-1")
        if not session:
            await app(scope, receive, send)
            return
        registry.request_began(session)
        try:
            await app(scope, receive, send)
        finally:
            registry.request_ended(session)
        if scope.get("method") == "DELETE":
            await registry.end(session)

    return wrapped


async def _end_idle_sessions(registry: SessionRegistry, idle_s: float) -> None:
    """End, every so often, the sessions idle for ``idle_s`` seconds (:meth:`SessionRegistry.end_idle`):
    a client that vanished without its ``DELETE`` holds no run and no sandbox for longer."""
    while True:
        await asyncio.sleep(min(idle_s / 4, 30.0))
        try:
            await registry.end_idle(idle_s)
        except Exception:  # noqa: BLE001 - a sandbox that cannot go back must not stop the sweeping
            log.exception("ending idle MCP sessions failed")


async def serve_mcp(config: McpConfig, transport: Literal["stdio", "http"], *, host: str = "127.0.0.1",
                    port: int = 8780, token_sha256_hex: str | None = None,
                    embedded: EmbeddedController | None = None, say: Say = _stderr,
                    session_idle_s: float = 1800.0) -> None:
    """Serve MCP until the input closes (stdio) or the process is stopped (HTTP).

    Args:
        config: the sessions' task, sandbox source and controller.
        transport: ``stdio`` or ``http`` (streamable HTTP at ``/mcp``).
        host, port: where HTTP listens (loopback by default).
        token_sha256_hex: the SHA-256 of the HTTP clients' bearer token (required for HTTP).
        embedded: serve a controller service here (``None``: ``config`` names one); when it
            cannot start, every tool call fails saying why.
        say: tells the person who started it where to approve, or why the service did not start.
        session_idle_s: HTTP: seconds a session may have no request in flight (no open stream
            either) before it ends as a ``DELETE`` ends it, and the MCP SDK forgets its id.

    Raises:
        ValueError: HTTP without a token.
    """
    if transport == "http" and not token_sha256_hex:
        raise ValueError("HTTP needs a bearer token: set DESKPOD_MCP_TOKEN (or DESKPOD_MCP_TOKEN_SHA256)")
    async with contextlib.AsyncExitStack() as stack:
        registry = SessionRegistry(config)
        if embedded is not None:
            try:
                await stack.enter_async_context(embedded_controller(config, embedded, say))
            except (OSError, TimeoutError, DeskpodError) as exc:
                registry.unavailable = (f"deskpod mcp could not start its controller service on 127.0.0.1:"
                                        f"{embedded.port or 'a free port'}: {exc}")
                say(f"deskpod mcp: {registry.unavailable}; every tool call fails saying so")
        server = build_server(config, registry)
        if transport == "stdio":
            await server.run_stdio_async()
            return
        import uvicorn

        assert token_sha256_hex is not None
        streamable = server.streamable_http_app(host=host, session_idle_timeout=session_idle_s)
        app = bearer_middleware(_ending_sessions(streamable, registry), token_sha256_hex)
        uv = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
        log.info("deskpod mcp on http://%s:%d/mcp", host, port)
        sweeper = asyncio.get_running_loop().create_task(_end_idle_sessions(registry, session_idle_s))
        try:
            await uv.serve()
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
            await registry.end_all()


def bearer_middleware(app: Any, token_sha256: str) -> Any:
    """Wrap an ASGI app: HTTP requests without the bearer token get 401 before the app sees them.

    Args:
        app: the streamable HTTP app.
        token_sha256: the hex SHA-256 of the token clients must present.
    """
    from starlette.responses import PlainTextResponse

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if bearer_refusal(headers.get("authorization"), token_sha256) is not None:
                await PlainTextResponse("missing or wrong bearer token\n", status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded
