"""The X gate: the only way from the agent's zone to the sandbox's X server.

The X server listens on no network (its Unix socket is in the sandbox container's own
``/tmp``). The gate listens on TCP port 6000 + the configured display number (6099 for
``:99``) and carries an agent's X client through to the display in force only while a
display grant is live (:meth:`XGate.grant`, for one ``display: true`` command) and only
with that grant's cookie. The cookie is *untrusted*: the X server made it for this grant
through the SECURITY extension (:mod:`~deskpod.agentd.display.xtrusted`), so the server
keeps the client from reading other clients' windows, from every extension but
BIG-REQUESTS and XC-MISC (XTEST included) and from changing their windows; the gate
refuses, request by request, what the server would still allow
(:mod:`~deskpod.agentd.display.xfilter`: grabs, ``SendEvent`` to the browser, other
clients' selections, pointer warps...). When the grant ends its cookie is revoked: the
server disconnects every client that used it.

Connections are bounded: at most :data:`MAX_GATE_CONNECTIONS` at once (those still in
their setup included; one more is closed at once), and a setup must arrive within
:data:`SETUP_TIMEOUT_S`. A connection without a live grant's cookie never reaches the X
server: the gate answers its setup with a refusal, as the server would.

The daemon also asks the gate which of the agent's windows is on top at a point or has
the keyboard focus (:meth:`XGate.window_at`, :meth:`XGate.focus_window`): the controller
judges a click or a key there as going to the agent's program, not to the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from deskpod.agentd.display.xauth import COOKIE_SCHEME
from deskpod.agentd.display.xfilter import (
    SETUP_PREFIX_BYTES,
    ClientSetup,
    GateRules,
    Held,
    RequestStream,
    ServerSetup,
    client_setup_length,
    decide,
    parse_client_setup,
    parse_server_setup,
    selection_asked,
    server_setup_length,
    setup_refusal,
)
from deskpod.agentd.display.xtrusted import AgentWindowInfo, TrustedDisplay
from deskpod.agentd.runner_wire import X11Grant
from deskpod.errors import DisplayUnavailableError, SessionError

__all__ = ["MAX_GATE_CONNECTIONS", "SETUP_TIMEOUT_S", "XGate", "x_socket_path"]

log = logging.getLogger(__name__)

MAX_GATE_CONNECTIONS: Final = 32
"""Most connections the gate holds at once, setups in progress included."""

SETUP_TIMEOUT_S: Final = 5.0
"""How long a connection may take to send its whole X11 setup, seconds."""

_CHUNK_BYTES: Final = 1 << 16


def x_socket_path(display: str) -> str:
    """The Unix socket of display ``display`` (``":99"`` -> ``/tmp/.X11-unix/X99``)."""
    return f"/tmp/.X11-unix/X{display.lstrip(':').split('.')[0]}"


@dataclass(eq=False)
class _Client:
    """One agent client carried through: its setup's reply and both ends."""

    setup: ServerSetup
    ends: tuple[asyncio.StreamWriter, asyncio.StreamWriter]

    def close(self) -> None:
        for end in self.ends:
            end.close()


@dataclass(eq=False)
class _Grant:
    """A live display grant: its untrusted cookie, the server's ids and its clients."""

    cookie: bytes = field(repr=False)
    rules: GateRules
    trusted: TrustedDisplay
    source: str = "command"
    clients: set[_Client] = field(default_factory=set)


class XGate:
    """The gate (see the module).

    Args:
        port: the TCP port to listen on (6000 + the display number the grants name).
        grant_host: the host name the agent's zone reaches this container by.
        display: the display in force now (``":99"``, or the standby's after a reset).
    """

    def __init__(self, port: int, grant_host: str, display: Callable[[], str]) -> None:
        self.port = port
        self.grant_display = f"{grant_host}:{port - 6000}"
        self.display = display
        self._grants: list[_Grant] = []
        self._connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen on every address of the container, on :attr:`port`.

        Raises:
            SessionError: the port cannot be bound.
        """
        try:
            self._server = await asyncio.start_server(self._serve, host=None, port=self.port, reuse_address=True)
        except OSError as exc:
            raise SessionError(f"the X gate cannot listen on port {self.port}: {exc.strerror or exc}") from exc

    async def close(self) -> None:
        """Stop listening and end every grant's clients."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for grant in self._grants:
            for client in list(grant.clients):
                client.close()

    @contextlib.asynccontextmanager
    async def grant(self, lifetime_s: float, source: str = "command") -> AsyncIterator[X11Grant]:
        """A display grant for one command (or one desktop application): live inside the ``async with``.

        Args:
            lifetime_s: the command's longest run, seconds (the cookie expires that long
                after its last client left, should the revocation at the end fail).
            source: what its clients are, as :meth:`window_at` and :meth:`focus_window` name
                their windows: ``"command"`` (an agent's ``display: true`` command) or the name
                of the desktop application ``open_app`` started (``"terminal"``...).

        Yields:
            The display name (``<grant_host>:<port - 6000>``) and the untrusted cookie.

        Raises:
            DisplayUnavailableError: the X server could not make an untrusted cookie.
        """
        trusted = await asyncio.to_thread(TrustedDisplay, self.display())
        try:
            authid, cookie = await asyncio.to_thread(trusted.generate, lifetime_s)
            rules = await asyncio.to_thread(trusted.rules)
        except DisplayUnavailableError:
            trusted.close()
            raise
        live = _Grant(cookie, rules, trusted, source)
        self._grants.append(live)
        try:
            yield X11Grant(display=self.grant_display, cookie_hex=cookie.hex())
        finally:
            self._grants.remove(live)
            for client in list(live.clients):
                client.close()
            try:
                await asyncio.to_thread(trusted.revoke, authid)
            except DisplayUnavailableError as exc:
                log.info("the display grant was not revoked (the X server is gone?): %s", exc.message)
            trusted.close()

    def agent_window(self, window: int) -> bool:
        """Whether ``window`` (an X resource id) is one an agent's client made."""
        return self._grant_of(window) is not None

    def _grant_of(self, window: int) -> _Grant | None:
        """The grant whose client made ``window`` (``None``: no agent's client did)."""
        return next((grant for grant in self._grants for client in grant.clients if client.setup.owns(window)), None)

    async def window_at(self, x: int, y: int) -> AgentWindowInfo | None:
        """The agent's window on top at screen point (``x``, ``y``); ``None`` when no agent
        client is connected or the sandbox's own window is on top there.

        Raises:
            DisplayUnavailableError: the display could not be asked.
        """
        grant = self._connected()
        if grant is None:
            return None
        return self._sourced(await asyncio.to_thread(grant.trusted.window_at, x, y, self.agent_window))

    async def focus_window(self) -> AgentWindowInfo | None:
        """The agent's window with the keyboard focus; ``None`` when none has it.

        Raises:
            DisplayUnavailableError: the display could not be asked.
        """
        grant = self._connected()
        if grant is None:
            return None
        return self._sourced(await asyncio.to_thread(grant.trusted.focus_window, self.agent_window))

    def _sourced(self, info: AgentWindowInfo | None) -> AgentWindowInfo | None:
        """``info`` with the source of the grant whose client made its window."""
        if info is None:
            return None
        owner = self._grant_of(info.window)
        return dataclasses.replace(info, source=owner.source if owner is not None else "command")

    def _connected(self) -> _Grant | None:
        return next((grant for grant in self._grants if grant.clients), None)

    def _granted(self, setup: ClientSetup) -> _Grant | None:
        if setup.auth_name != COOKIE_SCHEME:
            return None
        return next((g for g in self._grants if hmac.compare_digest(g.cookie, setup.auth_data)), None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_GATE_CONNECTIONS:
            writer.close()
            return
        self._connections += 1
        try:
            await self._carry(reader, writer)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            log.debug("an agent X connection ended: %s", type(exc).__name__)
        finally:
            self._connections -= 1
            writer.close()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its setup, the grant's check, then both directions until one ends."""
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            prefix = await reader.readexactly(SETUP_PREFIX_BYTES)
            length = client_setup_length(prefix)
            if length is None:
                return
            setup = parse_client_setup(prefix + await reader.readexactly(length - SETUP_PREFIX_BYTES))
        grant = self._granted(setup)
        if grant is None:
            writer.write(setup_refusal(setup.order, "no display granted to this client"))
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_unix_connection(x_socket_path(self.display()))
        try:
            up_writer.write(setup.raw)
            header = await up_reader.readexactly(8)
            raw = header + await up_reader.readexactly(server_setup_length(header, setup.order) - 8)
            writer.write(raw)
            await writer.drain()
            answer = parse_server_setup(raw, setup.order)
            if not answer.accepted or grant not in self._grants:
                return
            client = _Client(answer, (writer, up_writer))
            grant.clients.add(client)
            try:
                await _first_of(self._requests(reader, up_writer, RequestStream(setup.order, grant.rules), grant),
                                _copy(up_reader, writer))
            finally:
                grant.clients.discard(client)
        finally:
            up_writer.close()

    async def _requests(self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter,
                        stream: RequestStream, grant: _Grant) -> None:
        """The client's requests to the server, through the rules."""
        while chunk := await reader.read(_CHUNK_BYTES):
            for piece in stream.feed(chunk):
                if isinstance(piece, Held):
                    piece = decide(piece, stream.order, grant.rules, self.agent_window,
                                   await self._owner(grant, selection_asked(piece.request, stream.order)))
                upstream.write(piece)
            if stream.closed is not None:
                log.info("an agent X client was cut off: %s", stream.closed)
                return
            await upstream.drain()

    @staticmethod
    async def _owner(grant: _Grant, selection: int | None) -> int | None:
        """The owner of ``selection`` now (``None``: not a selection, or it could not be
        read, which refuses the conversion)."""
        if selection is None:
            return None
        try:
            return await asyncio.to_thread(grant.trusted.selection_owner, selection)
        except DisplayUnavailableError:
            return None


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(_CHUNK_BYTES):
        writer.write(chunk)
        await writer.drain()


async def _first_of(*jobs: Coroutine[Any, Any, None]) -> None:
    """Run the coroutines ``jobs`` until the first ends; cancel the others."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
