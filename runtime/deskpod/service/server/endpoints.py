"""Which sandbox a URL reaches, by the address it connects to, not by how it is spelled.

``deskpod serve`` treats some sandboxes differently from others: the stack's sandbox
(``DESKPOD_SANDBOX_URL``) sits behind the stack's egress proxy, which gets every run's
allowlist; the sandboxes of ``DESKPOD_SERVE_SANDBOXES`` are vouched for (host-held
secrets, a person's credentials). An opener names its sandbox by a URL of its own, and
one daemon answers at many spellings: ``?x=1``, ``#frag``, another path, ``:08765``, an
upper-case host, its IP address instead of its name. Compared as strings, those
spellings escaped the proxy's list and the vouching. Here a URL stands for its
*endpoint*: the websocket scheme's TCP port and the set of addresses its host resolves to
(``getaddrinfo``, as the connection itself resolves it); two URLs reach the same sandbox
when their ports are equal and their addresses meet. Path, query and fragment play no
part: a daemon serves one sandbox on one port.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from deskpod.errors import SandboxError

__all__ = ["Endpoint", "RESOLVE_TIMEOUT_S", "addresses_of", "endpoint", "matching"]

_DEFAULT_PORTS = {"ws": 80, "wss": 443, "http": 80, "https": 443}

RESOLVE_TIMEOUT_S = 5.0
"""Longest wait for one host name's addresses, seconds."""


@dataclass(frozen=True)
class Endpoint:
    """Where a URL connects: its TCP ``port`` and the ``addresses`` (normalized IP strings) of its host."""

    port: int
    addresses: frozenset[str]

    def meets(self, other: Endpoint) -> bool:
        """Whether both reach the same listener: equal ports, a common address."""
        return self.port == other.port and bool(self.addresses & other.addresses)


async def endpoint(url: str) -> Endpoint:
    """The endpoint of a ``ws://`` / ``wss://`` URL.

    Raises:
        SandboxError: no host, a bad port, or the host does not resolve in time (``detail``:
            ``reason`` ``"unresolvable"``).
    """
    parts = urlsplit(url)
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError as exc:
        raise _unresolvable(f"{url[:200]!r}: {exc}") from None
    if not parts.hostname or port is None:
        raise _unresolvable(f"{url[:200]!r} names no host and port")
    try:
        addresses = await asyncio.wait_for(addresses_of(parts.hostname, port), RESOLVE_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise _unresolvable(f"{parts.hostname!r} does not resolve: {exc}") from None
    if not addresses:
        raise _unresolvable(f"{parts.hostname!r} has no address")
    return Endpoint(port, addresses)


async def addresses_of(host: str, port: int) -> frozenset[str]:
    """The IP addresses ``host`` resolves to for a TCP connection to ``port`` (``getaddrinfo``,
    as a connection resolves it; an IPv6 zone id dropped).

    Raises:
        OSError: it does not resolve.
    """
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return frozenset(str(info[4][0]).split("%")[0] for info in infos)


async def matching(mine: Endpoint, others: list[str]) -> list[str]:
    """The URLs of ``others`` whose endpoint meets ``mine`` (one that does not resolve never does)."""
    found = []
    for other in others:
        try:
            if mine.meets(await endpoint(other)):
                found.append(other)
        except SandboxError:
            continue
    return found


def _unresolvable(message: str) -> SandboxError:
    return SandboxError(message, detail={"reason": "unresolvable"})
