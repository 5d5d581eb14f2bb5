"""Before a run: is the sandbox URL a websocket URL, and does anything accept a TCP
connection there?

``deskpod run`` and ``deskpod code`` refuse a URL that is not ``ws://`` or ``wss://``
at once (exit 2) and report a sandbox that accepts no connection within
``--connect-timeout`` as unavailable (exit 3), so neither ends as a failed run (exit
1); a host name that does not resolve is reported at once (a name does not start
resolving while we wait: ``sandbox`` is the stack's name for its container, known only
on its networks), not after the whole ``--connect-timeout``. Everything past the TCP connection (the token, the hello, the protocol) is the
run's to judge and log. Over ``ws://`` the probe asks ``GET /healthz`` (the daemon's
health endpoint, which the image's health check polls too) so the daemon sees an
ordinary request rather than a connection dropped mid-handshake; its answer is not
judged.
"""

from __future__ import annotations

import asyncio
import socket
import time

from websockets.exceptions import InvalidURI
from websockets.uri import parse_uri

__all__ = ["PROBE_INTERVAL_S", "RESOLVE_TIMEOUT_S", "check_sandbox_url", "unresolvable", "wait_reachable"]

PROBE_INTERVAL_S = 0.5
"""Seconds between two connection attempts while the sandbox is not accepting yet."""

_ATTEMPT_TIMEOUT_S = 10.0


def check_sandbox_url(url: str) -> tuple[str, int, bool]:
    """The host, port and whether it is ``wss://``, of a sandbox websocket URL.

    Args:
        url: e.g. ``ws://sandbox:8765/v1/ws``.

    Raises:
        ValueError: ``url`` is not a ``ws://`` or ``wss://`` URL with a host (the
            message says why, in one line).
    """
    try:
        parsed = parse_uri(url)
    except InvalidURI as exc:
        raise ValueError(f"--sandbox {url!r} is not a ws:// or wss:// URL ({exc})") from exc
    if not parsed.host:
        raise ValueError(f"--sandbox {url!r} names no host")
    return parsed.host, parsed.port, parsed.secure


_HEALTH_REPLY_TIMEOUT_S = 2.0

RESOLVE_TIMEOUT_S = 10.0
"""How long one look-up of the sandbox's host name may take, seconds."""

_NOT_A_NAME = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_SERVICE")
               if hasattr(socket, name)}
"""``getaddrinfo`` errors that say the name does not exist (a temporary failure, ``EAI_AGAIN``,
is left to the connection attempts' retries)."""


async def unresolvable(host: str, port: int) -> str | None:
    """Whether ``host`` is a name this machine cannot resolve at all.

    Args:
        host, port: from :func:`check_sandbox_url`.

    Returns:
        The resolver's reason (e.g. ``"[Errno -2] Name or service not known"``) when the
        name does not exist; ``None`` when it resolves, or the look-up failed in a way that
        may pass (a temporary DNS failure, no answer within :data:`RESOLVE_TIMEOUT_S`).
    """
    try:
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
                               RESOLVE_TIMEOUT_S)
    except socket.gaierror as exc:
        return str(exc) if exc.errno in _NOT_A_NAME else None
    except (OSError, TimeoutError, UnicodeError):
        return None
    return None


async def _say_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
    """Send ``GET /healthz`` and read the status line (any answer, or none, will do)."""
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        await asyncio.wait_for(reader.readline(), _HEALTH_REPLY_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError):
        pass


async def wait_reachable(host: str, port: int, timeout_s: float, *, secure: bool = False) -> str | None:
    """Try to open a TCP connection to ``host:port`` until one succeeds or ``timeout_s`` passed.

    Args:
        host, port: from :func:`check_sandbox_url`.
        secure: a ``wss://`` URL (the probe then only opens and closes the connection).
        timeout_s: how long to keep trying (refused, unresolvable, timed out), seconds.

    Returns:
        ``None`` once a connection was accepted (it is closed at once), else the last
        failure, e.g. ``"ConnectionRefusedError: [Errno 111] ..."``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                               max(0.1, min(_ATTEMPT_TIMEOUT_S, remaining)))
        except (OSError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if not secure:
                await _say_hello(reader, writer, host, port)
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
            return None
        if time.monotonic() + PROBE_INTERVAL_S > deadline:
            return last
        await asyncio.sleep(PROBE_INTERVAL_S)
