"""What an agent's X client may ask of the sandbox's X server: the X gate's rules (pure, no I/O).

An agent command granted the display (:mod:`deskpod.agentd.display.xgate`) is an X
client the server knows as *untrusted* (the SECURITY extension: it cannot read other
clients' windows, use any extension but BIG-REQUESTS and XC-MISC, XTEST included,
set the input focus or change their windows). What that leaves open, the gate closes
on the way to the server, request by request. An agent client may not:

- grab the pointer or the keyboard (``GrabPointer``, ``GrabKeyboard``; the server lets an
  untrusted client grab them on a window of its own, and would then hand it every key the
  daemon types): the request becomes a ``QueryPointer`` whose reply reads as
  ``AlreadyGrabbed``; nor change the pointer's or keyboard's mapping (``SetPointerMapping``,
  ``SetModifierMapping``: the reply reads ``Busy``; ``ChangeKeyboardMapping``,
  ``ChangeKeyboardControl``, ``ChangePointerControl``);
- move the pointer (``WarpPointer``), grab the server (``GrabServer``, which freezes every
  other client), set the input focus (``SetInputFocus``), blank the screen
  (``ForceScreenSaver``) or keep its windows after it disconnects (``SetCloseDownMode``):
  each becomes a ``NoOperation`` of the same length; so does ringing the bell (``Bell``),
  not for safety but because the server refuses it to an untrusted client with
  ``BadAccess`` (the SECURITY extension grants an untrusted client no ``DixBellAccess`` on
  the keyboard), and Xlib's and GDK's default error handlers end the program on that
  error: a bell (a terminal's on a Tab completion that fails, GTK's when a key cannot move
  the cursor) closed the application;
- send an event (``SendEvent``) but to a window of the agent's clients, or to the root
  window as a ``ClientMessage`` about such a window (what EWMH asks of the window
  manager), other than ``_NET_ACTIVE_WINDOW`` (which gives a window the focus):
  the others become a ``NoOperation``. So no key, button, drag-and-drop message
  (XDND) or ``WM_DELETE_WINDOW`` reaches the browser;
- convert a selection (``ConvertSelection``: read the clipboard, ``PRIMARY``...) that a
  client other than the agent's owns: the request asks for a selection no one owns
  instead, and the server answers the client with no data (``SelectionNotify`` with
  property ``None``).

Each request the client sends stays one request, so the sequence numbers the client and
the server count stay equal. The stream is framed exactly as the X server frames it
(``ReadRequestFromClient`` in the server's ``os/io.c``): a request's length in 4-byte
units is in bytes 2-3; a length of 0 is a big request (an extra 32-bit length after the
header) once the client has enabled BIG-REQUESTS (``BigReqEnable`` of exactly one unit),
else a 4-byte request the server refuses. A big request shorter than two units or longer
than the server's largest (:data:`MAX_REQUEST_UNITS`) ends the connection. Windows and
atoms are X resource ids (32-bit); a window belongs to a client when its id, without the
client's ``resource-id-mask`` bits, is that client's ``resource-id-base`` (the connection
setup's reply).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "CONVERT_SELECTION",
    "ClientSetup",
    "GateRules",
    "Held",
    "MAX_AUTH_BYTES",
    "MAX_REQUEST_UNITS",
    "NO_OPERATION",
    "QUERY_POINTER",
    "RequestStream",
    "SEND_EVENT",
    "SETUP_PREFIX_BYTES",
    "ServerSetup",
    "client_setup_length",
    "decide",
    "parse_client_setup",
    "parse_server_setup",
    "selection_asked",
    "server_setup_length",
    "setup_refusal",
]

ByteOrder = Literal["<", ">"]
"""A client's byte order as a :mod:`struct` prefix: ``<`` (``l``, LSB first) or ``>`` (``B``)."""

SETUP_PREFIX_BYTES: Final = 12
"""The fixed part of a client's connection setup (byte order, version, auth lengths)."""

MAX_AUTH_BYTES: Final = 256
"""Longest authorization name or data a setup may carry (MIT-MAGIC-COOKIE-1: 18 and 16)."""

MAX_REQUEST_UNITS: Final = 4_194_303
"""The X server's largest request, in 4-byte units (``maxBigRequestSize``, 16 MiB)."""

CONVERT_SELECTION: Final = 24
SEND_EVENT: Final = 25
GRAB_POINTER: Final = 26
GRAB_KEYBOARD: Final = 31
GRAB_SERVER: Final = 36
QUERY_POINTER: Final = 38
WARP_POINTER: Final = 41
SET_INPUT_FOCUS: Final = 42
CHANGE_KEYBOARD_MAPPING: Final = 100
CHANGE_KEYBOARD_CONTROL: Final = 102
BELL: Final = 104
CHANGE_POINTER_CONTROL: Final = 105
SET_CLOSE_DOWN_MODE: Final = 112
FORCE_SCREEN_SAVER: Final = 115
SET_POINTER_MAPPING: Final = 116
SET_MODIFIER_MAPPING: Final = 118
NO_OPERATION: Final = 127

_CLIENT_MESSAGE: Final = 33
_ANSWERED_AS_BUSY: Final = frozenset({GRAB_POINTER, GRAB_KEYBOARD, SET_POINTER_MAPPING, SET_MODIFIER_MAPPING})
"""Refused requests with a reply: replaced by a ``QueryPointer``, whose reply has the same
size and a 1 (``same-screen``) where theirs has its status: ``AlreadyGrabbed`` / ``Busy``."""
_DROPPED: Final = frozenset({GRAB_SERVER, WARP_POINTER, SET_INPUT_FOCUS, CHANGE_KEYBOARD_MAPPING,
                             CHANGE_KEYBOARD_CONTROL, CHANGE_POINTER_CONTROL, SET_CLOSE_DOWN_MODE,
                             FORCE_SCREEN_SAVER, BELL})
"""Refused requests without a reply: their opcode becomes ``NoOperation`` (any length)."""
_HELD_UNITS: Final = {CONVERT_SELECTION: 6, SEND_EVENT: 11}
"""Requests judged by what they name, with their only valid length (other lengths: dropped)."""


@dataclass(frozen=True)
class ClientSetup:
    """A client's connection setup. ``order``: its byte order; ``auth_name``/``auth_data``:
    the authorization it presents; ``raw``: the whole setup as sent."""

    order: ByteOrder
    auth_name: bytes
    auth_data: bytes = field(repr=False)
    raw: bytes = field(repr=False)


@dataclass(frozen=True)
class ServerSetup:
    """The server's answer to a setup. ``accepted``: status 1 (Success); ``resource_base`` and
    ``resource_mask``: the ids the client allocates (0 when refused)."""

    accepted: bool
    resource_base: int = 0
    resource_mask: int = 0

    def owns(self, resource: int) -> bool:
        """Whether ``resource`` (a window id) is one this client allocated."""
        return self.accepted and resource & ~self.resource_mask == self.resource_base


@dataclass(frozen=True)
class GateRules:
    """What the gate knows of the server while it judges requests.

    ``root``: the root window's id. ``big_requests_opcode``: the major opcode of
    BIG-REQUESTS (``None``: the server has none). ``unowned_selection``: an atom the gate
    interned for refused conversions, which no client of the sandbox owns.
    ``active_window_atom``: ``_NET_ACTIVE_WINDOW``.
    """

    root: int
    big_requests_opcode: int | None
    unowned_selection: int
    active_window_atom: int


@dataclass(frozen=True)
class Held:
    """A whole ``SendEvent`` or ``ConvertSelection`` request, waiting for :func:`decide`."""

    request: bytes


def _order(first: int) -> ByteOrder | None:
    return {0x6C: "<", 0x42: ">"}.get(first)  # type: ignore[return-value]


def _pad(n: int) -> int:
    return n + -n % 4


def client_setup_length(prefix: bytes) -> int | None:
    """The whole length of a client setup from its first :data:`SETUP_PREFIX_BYTES` bytes.

    Returns:
        Bytes, prefix included; ``None`` when the byte order is neither ``l`` nor ``B`` or
        an authorization field is longer than :data:`MAX_AUTH_BYTES`.
    """
    order = _order(prefix[0])
    if order is None:
        return None
    name_len, data_len = struct.unpack(order + "HH", prefix[6:10])
    if name_len > MAX_AUTH_BYTES or data_len > MAX_AUTH_BYTES:
        return None
    return SETUP_PREFIX_BYTES + _pad(name_len) + _pad(data_len)


def parse_client_setup(raw: bytes) -> ClientSetup:
    """A setup whose length :func:`client_setup_length` gave, read.

    Raises:
        ValueError: ``raw`` is not such a setup.
    """
    length = client_setup_length(raw[:SETUP_PREFIX_BYTES]) if len(raw) >= SETUP_PREFIX_BYTES else None
    order = _order(raw[0]) if raw else None
    if length is None or order is None or len(raw) != length:
        raise ValueError("not an X11 connection setup")
    name_len, data_len = struct.unpack(order + "HH", raw[6:10])
    name_end = SETUP_PREFIX_BYTES + name_len
    data_start = SETUP_PREFIX_BYTES + _pad(name_len)
    return ClientSetup(order, raw[SETUP_PREFIX_BYTES:name_end], raw[data_start:data_start + data_len], raw)


def setup_refusal(order: ByteOrder, reason: str) -> bytes:
    """A setup reply with status Failed and ``reason`` (ASCII, at most 255 bytes), as the
    X server sends one: what a client prints as "Can't open display: <reason>"."""
    text = reason.encode("ascii", "replace")[:255]
    padded = text + b"\0" * (-len(text) % 4)
    return struct.pack(order + "BBHHH", 0, len(text), 11, 0, len(padded) // 4) + padded


def server_setup_length(header: bytes, order: ByteOrder) -> int:
    """The whole length of the server's setup reply from its first 8 bytes (bytes)."""
    return 8 + 4 * struct.unpack(order + "H", header[6:8])[0]


def parse_server_setup(raw: bytes, order: ByteOrder) -> ServerSetup:
    """The server's setup reply (its whole length, :func:`server_setup_length`) read.

    Raises:
        ValueError: an accepted reply too short to hold its resource ids.
    """
    if raw[0] != 1:
        return ServerSetup(False)
    if len(raw) < 20:
        raise ValueError("an X11 setup reply too short")
    base, mask = struct.unpack(order + "II", raw[12:20])
    return ServerSetup(True, base, mask)


def selection_asked(request: bytes, order: ByteOrder) -> int | None:
    """The selection atom a held ``ConvertSelection`` asks for; ``None`` for other requests."""
    if request[0] != CONVERT_SELECTION:
        return None
    return int(struct.unpack(order + "I", request[8:12])[0])


def decide(held: Held, order: ByteOrder, rules: GateRules, agent_window: Callable[[int], bool],
           owner: int | None = None) -> bytes:
    """What to send the server for a held request (see the module for the rules).

    Args:
        held: a ``SendEvent`` or ``ConvertSelection``, as the client sent it.
        order: the client's byte order.
        rules: what the gate knows of the server.
        agent_window: whether a window id is one of the agent's clients'.
        owner: for ``ConvertSelection``, the selection's owner window asked of the server
            just before (0 or ``None``: none).

    Returns:
        The request as sent, or its refused form (same request count).
    """
    request = held.request
    if request[0] == SEND_EVENT:
        destination, = struct.unpack(order + "I", request[4:8])
        event = request[12:44]
        if agent_window(destination):
            return request
        if destination == rules.root and event[0] & 0x7F == _CLIENT_MESSAGE:
            about, message_type = struct.unpack(order + "II", event[4:12])
            if agent_window(about) and message_type != rules.active_window_atom:
                return request
        return bytes([NO_OPERATION]) + request[1:]
    if owner and agent_window(owner):
        return request
    return request[:8] + struct.pack(order + "I", rules.unowned_selection) + request[12:]


class RequestStream:
    """Frames one agent client's requests (after its setup) as the X server does and applies
    the rules that need no judgement; :class:`Held` requests are left to :func:`decide`.

    Args:
        order: the client's byte order.
        rules: what the gate knows of the server.
    """

    def __init__(self, order: ByteOrder, rules: GateRules) -> None:
        self.order: ByteOrder = order
        self.rules = rules
        self.big_requests = False
        self.closed: str | None = None
        """Why the stream must end (the server would kill the client), or ``None``."""
        self._buffer = bytearray()
        self._pass = 0  # bytes of the current request still to forward unchanged
        self._drop = 0  # bytes of the current (replaced) request still to swallow

    def feed(self, data: bytes) -> list[bytes | Held]:
        """Take the next bytes the client sent; return what to send the server, in order.

        Returns:
            Pieces in order: bytes to forward, or a :class:`Held` request to :func:`decide`
            first. Nothing more once :attr:`closed` is set.
        """
        if self.closed is not None:
            return []
        buffer = self._buffer
        buffer += data
        out: list[bytes | Held] = []
        while buffer:
            if self._pass or self._drop:
                n = min(self._pass or self._drop, len(buffer))
                if self._pass:
                    out.append(bytes(buffer[:n]))
                    self._pass -= n
                else:
                    self._drop -= n
                del buffer[:n]
                continue
            piece = self._next(buffer)
            if piece is None:
                break
            if piece:
                out.append(piece)
        return out

    def _next(self, buffer: bytearray) -> bytes | Held | None:
        """Frame the request at the head of ``buffer``; ``None``: more bytes are needed.
        Sets :attr:`_pass` or :attr:`_drop` for what of it has not been consumed."""
        if len(buffer) < 4:
            return None
        opcode, units = buffer[0], struct.unpack(self.order + "H", buffer[2:4])[0]
        big = units == 0 and self.big_requests
        if big:
            if len(buffer) < 8:
                return None
            units = struct.unpack(self.order + "I", buffer[4:8])[0]
            if units < 2 or units > MAX_REQUEST_UNITS:
                self.closed = f"a big request of {units} units"
                buffer.clear()
                return b""
        size = 4 * max(units, 1)
        if opcode in _ANSWERED_AS_BUSY:
            self._drop = size
            return struct.pack(self.order + "BBHI", QUERY_POINTER, 0, 2, self.rules.root)
        if opcode in _HELD_UNITS and not big and units == _HELD_UNITS[opcode]:
            if len(buffer) < size:
                return None
            request = bytes(buffer[:size])
            del buffer[:size]
            return Held(request)
        if opcode in _DROPPED or opcode in _HELD_UNITS:
            buffer[0] = NO_OPERATION
        elif opcode == self.rules.big_requests_opcode and not big and units == 1 and buffer[1] == 0:
            self.big_requests = True
        self._pass = size
        return b""
