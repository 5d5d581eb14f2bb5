"""The web console of ``deskpod serve``: a person watches the sessions and answers their questions.

:func:`mount_console` adds the console to the service's FastAPI app, under ``/console``:

- ``GET /console/`` the page (a static shell: every string from a sandbox or a page
  is put in by ``static/console.js`` as text, never as HTML), ``GET /console/signin``
  the sign-in form, ``POST /console/signin`` (form field ``token``; its answer, the only
  one that holds the session's page secret, is a page whose script
  ``static/secret.js`` keeps the secret in the origin's ``localStorage`` and opens the
  console) and ``POST /console/signout`` (form field ``page_secret``), ``GET /console/me``
  the signed-in user (JSON);
- ``/console/ws``: the browser's websocket, an in-process connection to the
  :class:`~deskpod.service.server.service_state.ControllerService` speaking the same JSON messages
  as ``/v1/controller``, with the signed-in user's role (``viewer`` or ``approver``)
  and name (the ``principal`` of the connection), authenticated by the session cookie,
  the ``Origin`` check and the page secret instead of a bearer token
  (:meth:`~deskpod.service.console.auth.ConsoleAuth.authorize_websocket`);
- ``/console/static/``: the page's scripts and style sheet (no data, no session needed);
- the routers given (the live view, the run history), which authorize with
  :meth:`~deskpod.service.console.auth.ConsoleAuth.authorize_request` and
  :meth:`~deskpod.service.console.auth.ConsoleAuth.authorize_websocket`.

Every response under ``/console`` carries :data:`CONTENT_SECURITY_POLICY` (scripts,
styles, connections and images from the console's own origin only, and screenshots as
``data:`` images; no inline script, no framing) and the headers of
:data:`SECURITY_HEADERS`. :class:`ConsoleGuard` refuses, before any route runs, a
request for a host that is not the console's (HTTP 421) and any request whose query
string has a ``token`` (HTTP 400: a token in a URL is a leaked token).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from deskpod.service.console.auth import PAGE_SECRET_FIELD, ConsoleAuth, websocket_subprotocol
from deskpod.service.server.connection import serve_connection
from deskpod.service.server.service_state import ControllerService

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
    from starlette.websockets import WebSocket

__all__ = [
    "CONSOLE_PATH",
    "CONTENT_SECURITY_POLICY",
    "ConsoleGuard",
    "MAX_FORM_BYTES",
    "SECURITY_HEADERS",
    "STATIC_DIR",
    "mount_console",
]

log = logging.getLogger(__name__)

CONSOLE_PATH = "/console"
"""Where the console is mounted on the service's app."""

STATIC_DIR = Path(__file__).parent / "static"
"""The console's static files: the page shells, scripts and style sheet."""

MAX_FORM_BYTES = 4096
"""Largest sign-in or sign-out form body accepted (bytes)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The console's Content-Security-Policy: nothing inline, nothing from another origin."""

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # not no-referrer: a form POST would then send Origin: null
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
"""Headers added to every HTTP response under :data:`CONSOLE_PATH`."""


class ConsoleGuard:
    """ASGI middleware for :data:`CONSOLE_PATH`: Host and token-in-URL refusals, security headers.

    Args:
        app: the application it wraps.
        auth: the console's host check.
    """

    def __init__(self, app: ASGIApp, auth: ConsoleAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket") or not (path == CONSOLE_PATH or path.startswith(CONSOLE_PATH
                                                                                                    + "/")):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        refusal: tuple[int, str] | None = None
        if not self.auth.host_allowed(headers.get("host")):
            refusal = (421, "this console is not served under that host name\n")
        elif "token" in query:
            refusal = (400, "never put a token in a URL: sign in with the form\n")
        if refusal is not None:
            log.warning("console: refused %s %s (%s)", scope["type"], path, refusal[1].strip())
            if scope["type"] == "websocket":
                await send({"type": "websocket.http.response.start", "status": refusal[0],
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS]})
                await send({"type": "websocket.http.response.body", "body": refusal[1].encode()})
                return
            await send({"type": "http.response.start", "status": refusal[0],
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS]})
            await send({"type": "http.response.body", "body": refusal[1].encode()})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": [*kept, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _page(name: str, status_code: int = 200) -> Response:
    from starlette.responses import HTMLResponse

    return HTMLResponse((STATIC_DIR / name).read_text(encoding="utf-8"), status_code=status_code)


_SIGNED_IN_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta name="deskpod-page-secret" content="{page_secret}">
<title>deskpod console: signed in</title>
<link rel="stylesheet" href="/console/static/console.css">
<script src="/console/static/secret.js"></script>
</head>
<body class="signin"><main><h1>deskpod console</h1><p>Signed in. <a href="/console/">Open the console</a>.</p></main></body>
</html>
"""
"""The answer to a sign-in, the only page that holds the session's page secret: not a file under
:data:`STATIC_DIR`, which any page could link to (a copy without a secret would overwrite it)."""


def _signed_in_page(page_secret: str) -> Response:
    """The answer to a sign-in: the session's page secret in the ``deskpod-page-secret`` meta,
    which ``static/secret.js`` keeps before it opens the console."""
    from starlette.responses import HTMLResponse

    return HTMLResponse(_SIGNED_IN_PAGE.format(page_secret=html.escape(page_secret, quote=True)))


def mount_console(app: FastAPI, service: ControllerService, auth: ConsoleAuth,
                  routers: Sequence[APIRouter] = ()) -> None:
    """Add the console's routes, static files and guard to ``app``.

    Args:
        app: the service's app (:func:`deskpod.service.server.app.create_app`).
        service: the sessions the console shows; its websocket connections are this service's.
        auth: who signs in and where the console is reached.
        routers: more console routes (the live view, the run history), included as they are.
    """
    from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles

    secure = bool(auth.settings.secure_cookie)

    async def index(request: Request) -> Response:
        if auth.user(request.cookies) is None:
            return RedirectResponse(f"{CONSOLE_PATH}/signin", status_code=303)
        return _page("index.html")

    async def root(request: Request) -> Response:
        return RedirectResponse(f"{CONSOLE_PATH}/", status_code=308)

    async def signin_form(request: Request) -> Response:
        return _page("signin.html")

    async def me(request: Request) -> Response:
        user = await auth.authorize_request(request)
        if user is None:
            return JSONResponse({"error": "sign in first"}, status_code=401)
        return JSONResponse({"name": user.name, "role": user.role})

    async def signin(request: Request) -> Response:
        if not auth.origin_allowed(request.headers.get("origin")):
            log.warning("console: refused a sign-in from origin %r", (request.headers.get("origin") or "")[:100])
            return PlainTextResponse("this form is only accepted from the console's own page\n", status_code=403)
        body = await _form(request)
        if body is None:
            return PlainTextResponse("the form is too large or not a form\n", status_code=400)
        token = (body.get("token") or [""])[0].strip()
        signed = auth.sign_in(token) if token else None
        if signed is None:
            log.warning("console: a sign-in with an unknown token")
            return RedirectResponse(f"{CONSOLE_PATH}/signin#failed", status_code=303)
        log.info("console: %s signed in (%s)", signed.user.name, signed.user.role)
        response = _signed_in_page(signed.page_secret)
        response.set_cookie(auth.cookie, signed.session, httponly=True, samesite="strict", secure=secure, path="/")
        return response

    async def signout(request: Request) -> Response:
        if not auth.origin_allowed(request.headers.get("origin")):
            return PlainTextResponse("this form is only accepted from the console's own page\n", status_code=403)
        body = await _form(request)
        page_secret = (body.get(PAGE_SECRET_FIELD) or [""])[0] if body is not None else ""
        if auth.acting_user(request.cookies, page_secret) is None:
            log.warning("console: refused a sign-out without the session's page secret")
            return PlainTextResponse("sign out from the console's own page\n", status_code=403)
        auth.sign_out(request.cookies)
        response = RedirectResponse(f"{CONSOLE_PATH}/signin", status_code=303)
        response.delete_cookie(auth.cookie, httponly=True, samesite="strict", secure=secure, path="/")
        return response

    async def console_ws(websocket: WebSocket) -> None:
        user = await auth.authorize_websocket(websocket)
        if user is None:
            await websocket.send_denial_response(
                PlainTextResponse("sign in on the console's own page first\n", status_code=403))
            return
        await websocket.accept(subprotocol=websocket_subprotocol(websocket))
        log.info("console: %s (%s) connected", user.name, user.role)
        await serve_connection(service, websocket, user.role, principal=user.name)

    # Plain Starlette routes: their endpoints take the request itself (none is in the OpenAPI document).
    app.router.routes.extend([
        Route(CONSOLE_PATH, root, methods=["GET"]),
        Route(f"{CONSOLE_PATH}/", index, methods=["GET"]),
        Route(f"{CONSOLE_PATH}/signin", signin_form, methods=["GET"]),
        Route(f"{CONSOLE_PATH}/signin", signin, methods=["POST"]),
        Route(f"{CONSOLE_PATH}/signout", signout, methods=["POST"]),
        Route(f"{CONSOLE_PATH}/me", me, methods=["GET"]),
    ])
    app.router.routes.append(WebSocketRoute(f"{CONSOLE_PATH}/ws", console_ws))
    for router in routers:
        app.include_router(router)
    app.mount(f"{CONSOLE_PATH}/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    app.add_middleware(ConsoleGuard, auth=auth)


async def _form(request: Request) -> dict[str, list[str]] | None:
    """An ``application/x-www-form-urlencoded`` body of at most :data:`MAX_FORM_BYTES` (``None``: not one)."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        return None

