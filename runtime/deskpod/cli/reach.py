"""Before a run: is the sandbox URL a websocket URL, and does anything accept a TCP
connection there?

``deskpod run`` and ``deskpod code`` refuse a URL that is not ``ws://`` or ``wss://``
at once (exit 2) and report a sandbox that accepts no connection within
``--connect-timeout`` as unavailable (exit 3), so neither ends as a failed run (exit
1). Everything past the TCP connection (the token, the hello, the protocol) is the
run's to judge and log.
"""

from __future__ import annotations

import asyncio
import time

from websockets.exceptions import InvalidURI
from websockets.uri import parse_uri

__all__ = ["PROBE_INTERVAL_S", "check_sandbox_url", "wait_reachable"]

PROBE_INTERVAL_S = 0.5
"""Seconds between two connection attempts while the sandbox is not accepting yet."""

_ATTEMPT_TIMEOUT_S = 10.0


def check_sandbox_url(url: str) -> tuple[str, int]:
    """The host and port of a sandbox websocket URL.

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
    return parsed.host, parsed.port


async def wait_reachable(host: str, port: int, timeout_s: float) -> str | None:
    """Try to open a TCP connection to ``host:port`` until one succeeds or ``timeout_s`` passed.

    Args:
        host, port: from :func:`check_sandbox_url`.
        timeout_s: how long to keep trying (refused, unresolvable, timed out), seconds.

    Returns:
        ``None`` once a connection was accepted (it is closed at once), else the last
        failure, e.g. ``"ConnectionRefusedError: [Errno 111] ..."``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                               max(0.1, min(_ATTEMPT_TIMEOUT_S, remaining)))
        except (OSError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
            return None
        if time.monotonic() + PROBE_INTERVAL_S > deadline:
            return last
        await asyncio.sleep(PROBE_INTERVAL_S)
