"""Who may use the console: users with tokens, session cookies, Origin and Host checks.

A console user signs in by pasting a token into the sign-in form (a POST body, never a
URL: any console request with a ``token`` query parameter is refused, so a token never
lands in a browser's history, a proxy's log or a ``Referer``). The service holds only
each token's SHA-256 (:class:`ConsoleUser`): from ``DESKPOD_CONSOLE_TOKENS_FILE``
(lines ``NAME ROLE SHA256``) and the approver token of ``deskpod serve``, which signs in
as the approver ``approver``. A user's role is ``viewer`` (sees everything, answers
nothing) or ``approver`` (also approves, denies, resumes, cancels and takes over).

A sign-in makes a session: a 256-bit random id, kept in memory on the service and sent
to the browser as a cookie that is ``HttpOnly`` (page scripts never read it),
``SameSite=Strict`` (no other site's page sends it) and, behind TLS, ``Secure`` with the
``__Host-`` prefix; its name carries the console's port (:func:`cookie_name`), so that two
consoles on one host name keep apart. Sessions end on sign-out, after :data:`SESSION_TTL_S`, or when the
service restarts.

The cookie alone is not enough to act. A browser sends a host's cookies to every port of
that host (RFC 6265, section 8.5: https://www.rfc-editor.org/rfc/rfc6265#section-8.5),
``Secure`` ones included, so any server on another port of the console's host name that
the person's browser visits receives the cookie, and a client that is no browser can
send it back with any ``Origin`` it likes. So each session also has a *page secret*
(256 random bits, :attr:`SignIn.page_secret`), given once, in the answer to the sign-in
form, to the console's page, which keeps it in its origin's ``localStorage`` (which,
unlike a cookie, belongs to one scheme, host and port). Every websocket handshake
(:meth:`ConsoleAuth.authorize_websocket`: the console's and the live view's) must offer
it as the subprotocol ``deskpod-page-secret.<secret>`` beside :data:`WEBSOCKET_PROTOCOL`,
and every state-changing request must carry it (the sign-out form's ``page_secret``
field, :data:`PAGE_SECRET_HEADER` for other routes). What a stolen cookie still opens:
the ``GET`` pages (the console's shell, ``/console/me``, the run history), which a
browser's navigation cannot send a secret with.

Cross-site requests are refused by Origin: every state-changing request (the sign-in
and sign-out forms) and every websocket handshake must carry an ``Origin`` that is one
of the console's own origins (:class:`ConsoleSettings`); every request must name one of
their hosts in ``Host`` (a page of another site that rebinds its DNS name to the
loopback address reaches the service under its own name, and is refused).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from deskpod.errors import SettingsError
from deskpod.settings import get_settings

if TYPE_CHECKING:  # Starlette (the ``serve`` extra) is imported when the service starts
    from starlette.requests import Request
    from starlette.websockets import WebSocket

__all__ = [
    "ConsoleAuth",
    "ConsoleRole",
    "ConsoleSettings",
    "ConsoleUser",
    "MAX_SIGNED_IN",
    "PAGE_SECRET_FIELD",
    "PAGE_SECRET_HEADER",
    "PAGE_SECRET_PROTOCOL_PREFIX",
    "SESSION_TTL_S",
    "SignIn",
    "WEBSOCKET_PROTOCOL",
    "cookie_name",
    "default_origins",
    "load_users",
    "websocket_subprotocol",
]

SESSION_TTL_S = 12 * 3600.0
"""Seconds a console session lasts after its sign-in."""

MAX_SIGNED_IN = 1000
"""Most console sessions held at once; a sign-in beyond it ends the oldest."""

WEBSOCKET_PROTOCOL = "deskpod-console"
"""The subprotocol the console's websockets speak, and the one the service selects."""

PAGE_SECRET_PROTOCOL_PREFIX = "deskpod-page-secret."
"""A websocket handshake offers the session's page secret as the subprotocol ``<prefix><secret>``
(browsers let a page set no other header on a websocket; the service never selects it)."""

PAGE_SECRET_FIELD = "page_secret"
"""The form field that carries the page secret (the sign-out form)."""

PAGE_SECRET_HEADER = "x-deskpod-page-secret"
"""The header that carries the page secret on a state-changing request other than a form."""

ConsoleRole = Literal["viewer", "approver"]
"""``viewer``: sees the sessions and their questions; ``approver``: also answers them."""

_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ConsoleUser:
    """A person who may sign in: ``name`` (shown and audited), ``role``, and the SHA-256 (hex) of their token."""

    name: str
    role: ConsoleRole
    token_sha256: str = field(repr=False)


def load_users(tokens_file: Path | None, approver_token_sha256: str | None) -> tuple[ConsoleUser, ...]:
    """The console's users: ``tokens_file``'s and, when set, the approver token's (as ``approver``).

    Args:
        tokens_file: lines ``NAME ROLE SHA256`` (blank lines and ``#`` comments skipped), or ``None``.
        approver_token_sha256: the SHA-256 of ``deskpod serve``'s approver token, or ``None``.

    Returns:
        The users, the file's first.

    Raises:
        SettingsError: the file cannot be read, a line does not parse, or two users share a name or a token.
    """
    users: list[ConsoleUser] = []
    if tokens_file is not None:
        try:
            lines = tokens_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"DESKPOD_CONSOLE_TOKENS_FILE: cannot read {tokens_file}: {exc}") from exc
        for number, line in enumerate(lines, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"DESKPOD_CONSOLE_TOKENS_FILE {tokens_file}, line {number}"
            if len(words) != 3:
                raise SettingsError(f"{where}: expected NAME ROLE SHA256")
            name, role, digest = words[0], words[1], words[2].lower()
            if not _NAME.fullmatch(name):
                raise SettingsError(f"{where}: a name is 1-64 letters, digits or ._@-")
            if role not in ("viewer", "approver"):
                raise SettingsError(f"{where}: the role is viewer or approver, not {role[:20]!r}")
            if not _HEX64.fullmatch(digest):
                raise SettingsError(f"{where}: SHA256 must be 64 hexadecimal digits (the token's SHA-256)")
            users.append(ConsoleUser(name, "approver" if role == "approver" else "viewer", digest))
    if approver_token_sha256 is not None:
        users.append(ConsoleUser("approver", "approver", approver_token_sha256))
    names = [u.name for u in users]
    digests = [u.token_sha256 for u in users]
    if len(set(names)) != len(names) or len(set(digests)) != len(digests):
        raise SettingsError("console users: two users share a name or a token")
    return tuple(users)


def default_origins(host: str, port: int) -> tuple[str, ...]:
    """The origins a console on ``host:port`` is opened at by default.

    Args:
        host: the address the service listens on. port: its port.

    Returns:
        ``http://127.0.0.1:PORT`` and ``http://localhost:PORT`` (and ``http://HOST:PORT``
        when the service listens on another named address).
    """
    origins = [f"http://127.0.0.1:{port}", f"http://localhost:{port}"]
    if host not in ("", "0.0.0.0", "::", "127.0.0.1", "localhost"):
        shown = f"[{host}]" if ":" in host else host
        origins.append(f"http://{shown}:{port}")
    return tuple(origins)


def _origin(value: str) -> str:
    """``value`` as ``scheme://host[:port]`` (lower case, no path).

    Raises:
        SettingsError: not an http(s) origin.
    """
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
            or parts.query or parts.fragment or "@" in parts.netloc:
        raise SettingsError(f"DESKPOD_CONSOLE_ORIGINS: {value[:100]!r} is not an origin like http://127.0.0.1:8766")
    return f"{parts.scheme}://{parts.netloc.lower()}"


@dataclass(frozen=True)
class ConsoleSettings:
    """How the console is reached and who signs in.

    Args:
        users: who may sign in.
        origins: the console's own origins (``scheme://host:port``); other ``Origin``
            headers are refused on state-changing requests and websockets, other ``Host``
            headers on every request.
        secure_cookie: mark the session cookie ``Secure`` (and name it ``__Host-...``);
            ``None``: when every origin is ``https``.

    Raises:
        SettingsError: an origin is not ``http(s)://host[:port]``, or there is none.
    """

    users: tuple[ConsoleUser, ...]
    origins: tuple[str, ...]
    secure_cookie: bool | None = None

    def __post_init__(self) -> None:
        if not self.origins:
            raise SettingsError("DESKPOD_CONSOLE_ORIGINS: give at least one origin")
        object.__setattr__(self, "origins", tuple(_origin(o) for o in self.origins))
        if self.secure_cookie is None:
            object.__setattr__(self, "secure_cookie", all(o.startswith("https://") for o in self.origins))

    @classmethod
    def from_settings(cls, host: str, port: int, approver_token_sha256: str | None) -> ConsoleSettings:
        """The settings from ``DESKPOD_CONSOLE_*`` (:func:`deskpod.settings.get_settings`).

        Args:
            host: the address ``deskpod serve`` listens on. port: its port.
            approver_token_sha256: the approver token's SHA-256 (``None``: none).

        Raises:
            SettingsError: a console setting or the tokens file is invalid.
        """
        settings = get_settings()
        origins = tuple(o for o in (settings.console_origins or "").split(",") if o.strip()) \
            or default_origins(host, port)
        return cls(load_users(settings.console_tokens_file, approver_token_sha256), origins,
                   settings.console_secure_cookie)


def cookie_name(secure: bool, origin: str) -> str:
    """The session cookie's name, ``deskpod-console-PORT`` (``__Host-`` before it when ``Secure``).

    A browser keeps cookies by host name, not by port (RFC 6265, section 8.5:
    https://www.rfc-editor.org/rfc/rfc6265#section-8.5): two consoles on one host (two
    ``deskpod serve``, or ``deskpod mcp`` beside a stack, on 127.0.0.1) would overwrite each
    other's cookie and sign each other's user out. Named by the port of the console's first
    origin (``origin``; 80 or 443 when it names none), each keeps its own.
    """
    parts = urlsplit(origin)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{'__Host-' if secure else ''}deskpod-console-{port}"


@dataclass(frozen=True)
class SignIn:
    """A new console session: ``session`` (the cookie's value), its ``user``, and its
    ``page_secret``, given to the console's page only, in the answer to the sign-in form
    (see the module docstring)."""

    session: str = field(repr=False)
    user: ConsoleUser
    page_secret: str = field(repr=False)


@dataclass
class _SignedIn:
    user: ConsoleUser
    expires_monotonic_s: float
    page_secret: str = field(repr=False)


class ConsoleAuth:
    """Sign-ins, sessions and the Origin and Host checks of one console.

    Args:
        settings: who signs in and where the console is reached.
    """

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.cookie = cookie_name(bool(settings.secure_cookie), settings.origins[0])
        self._sessions: dict[str, _SignedIn] = {}
        self._hosts = frozenset(urlsplit(o).netloc for o in settings.origins)

    def sign_in(self, token: str) -> SignIn | None:
        """A new session for the user whose token is ``token``.

        Every user's hash is compared, in constant time, whatever matched first.

        Args:
            token: what the person typed.

        Returns:
            The session (its id, the cookie's value; its user; its page secret); ``None``: no
            user has that token.
        """
        digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        found: ConsoleUser | None = None
        for user in self.settings.users:
            if hmac.compare_digest(digest, user.token_sha256) and found is None:
                found = user
        if found is None:
            return None
        self._expire()
        while len(self._sessions) >= MAX_SIGNED_IN:
            self._sessions.pop(next(iter(self._sessions)))
        session, page_secret = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._sessions[session] = _SignedIn(found, time.monotonic() + SESSION_TTL_S, page_secret)
        return SignIn(session, found, page_secret)

    def _signed_in(self, cookies: Mapping[str, str]) -> _SignedIn | None:
        session = cookies.get(self.cookie)
        if not session:
            return None
        signed = self._sessions.get(session)
        if signed is None:
            return None
        if signed.expires_monotonic_s < time.monotonic():
            self._sessions.pop(session, None)
            return None
        return signed

    def user(self, cookies: Mapping[str, str]) -> ConsoleUser | None:
        """The signed-in user of a request's cookies (``None``: no live session).

        The cookie alone: enough to read a ``GET`` page, never to act (:meth:`acting_user`)."""
        signed = self._signed_in(cookies)
        return signed.user if signed is not None else None

    def acting_user(self, cookies: Mapping[str, str], page_secret: str | None) -> ConsoleUser | None:
        """The signed-in user of a request's cookies when ``page_secret`` is that session's page
        secret (compared in constant time); ``None``: no live session, or no or another secret."""
        signed = self._signed_in(cookies)
        if signed is None or not page_secret:
            return None
        if not hmac.compare_digest(page_secret.encode("utf-8", "replace"), signed.page_secret.encode("ascii")):
            return None
        return signed.user

    def sign_out(self, cookies: Mapping[str, str]) -> None:
        """End the session of a request's cookies, if any."""
        session = cookies.get(self.cookie)
        if session:
            self._sessions.pop(session, None)

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether an ``Origin`` header is one of the console's origins (a missing one is not)."""
        return origin is not None and origin.strip().lower() in self.settings.origins

    def host_allowed(self, host: str | None) -> bool:
        """Whether a ``Host`` header names one of the console's origins' hosts."""
        return host is not None and host.strip().lower() in self._hosts

    def _expire(self) -> None:
        now = time.monotonic()
        for session in [s for s, signed in self._sessions.items() if signed.expires_monotonic_s < now]:
            self._sessions.pop(session, None)

    async def authorize_request(self, request: Request) -> ConsoleUser | None:
        """The signed-in user of an HTTP request to a console route (for the routers of other console pages).

        A request that changes state (not ``GET``/``HEAD``) must also come from one of the
        console's origins and carry the session's page secret in :data:`PAGE_SECRET_HEADER`.

        Args:
            request: the request.

        Returns:
            The user; ``None``: refuse it (no session, a wrong ``Host`` or ``Origin``, or a
            state-changing request without the page secret).
        """
        if not self.host_allowed(request.headers.get("host")):
            return None
        if request.method in ("GET", "HEAD"):
            return self.user(request.cookies)
        if not self.origin_allowed(request.headers.get("origin")):
            return None
        return self.acting_user(request.cookies, request.headers.get(PAGE_SECRET_HEADER))

    async def authorize_websocket(self, websocket: WebSocket) -> ConsoleUser | None:
        """The signed-in user of a websocket handshake to a console route.

        The handshake must offer the subprotocols :data:`WEBSOCKET_PROTOCOL` and
        ``deskpod-page-secret.<the session's page secret>``; accept it with
        :func:`websocket_subprotocol`.

        Args:
            websocket: the connection, not yet accepted.

        Returns:
            The user; ``None``: refuse it (no session, a wrong ``Host``, an ``Origin`` that is
            missing or not the console's, or no or another page secret: a cookie alone).
        """
        if not self.host_allowed(websocket.headers.get("host")) or \
                not self.origin_allowed(websocket.headers.get("origin")):
            return None
        offered = [p for p in websocket.scope.get("subprotocols", []) if p.startswith(PAGE_SECRET_PROTOCOL_PREFIX)]
        if WEBSOCKET_PROTOCOL not in websocket.scope.get("subprotocols", []) or len(offered) != 1:
            return None
        return self.acting_user(websocket.cookies, offered[0][len(PAGE_SECRET_PROTOCOL_PREFIX):])


def websocket_subprotocol(websocket: WebSocket) -> str | None:
    """The subprotocol to accept a console websocket with: :data:`WEBSOCKET_PROTOCOL` when the
    handshake offered it (a browser fails a handshake whose answer names a subprotocol it
    did not offer, or none of those it did), else ``None``."""
    return WEBSOCKET_PROTOCOL if WEBSOCKET_PROTOCOL in websocket.scope.get("subprotocols", []) else None
