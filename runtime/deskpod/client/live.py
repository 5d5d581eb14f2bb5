"""The client of a sandbox daemon's live stream (:mod:`deskpod.protocol.live`).

:class:`LiveClient` opens ``/v1/live`` beside the control channel's ``/v1/ws`` with the
same token, asks for the stream and yields what the daemon pushes: :class:`LiveImage`
(a frame's header and its JPEG), :class:`~deskpod.protocol.live.LivePointer` and, last,
:class:`~deskpod.protocol.live.LiveEnd`. The daemon is untrusted: every message must be
one of the stream's models, a frame no larger than the screen, its JPEG exactly as
long as announced and within :data:`~deskpod.protocol.live.MAX_LIVE_FRAME_BYTES`,
frames numbered upwards, the pointer on the screen. Anything else raises
:class:`~deskpod.errors.BadReplyError` and closes the stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import websockets
from pydantic import TypeAdapter, ValidationError

from deskpod.errors import BadReplyError, InvalidRequestError, SandboxError, UnauthorizedError, error_from_wire
from deskpod.protocol import ErrorReply, Hello, PROTOCOL_VERSION, first_error, parse_server_message
from deskpod.protocol.live import (
    DEFAULT_LIVE_FPS,
    DEFAULT_LIVE_QUALITY,
    LIVE_PATH,
    MAX_LIVE_FRAME_BYTES,
    MAX_LIVE_HEADER_BYTES,
    LiveEnd,
    LiveFrame,
    LivePointer,
    WatchRequest,
    Watching,
    unpack_frame,
)

__all__ = ["LIVE_CONNECT_TIMEOUT_S", "LiveClient", "LiveImage", "live_url"]

LIVE_CONNECT_TIMEOUT_S: Final = 10.0
"""Seconds to wait for the daemon to accept the stream, greet and start it."""

_MAX_STREAM_MESSAGE_BYTES: Final = 4 + MAX_LIVE_HEADER_BYTES + MAX_LIVE_FRAME_BYTES
"""The longest message of a stream: a frame's length prefix, header and JPEG."""

_TEXT: TypeAdapter[Any] = TypeAdapter(Watching | LivePointer | LiveEnd | ErrorReply)


@dataclass(frozen=True)
class LiveImage:
    """One frame: its header (size, pointer, number) and its JPEG bytes."""

    header: LiveFrame
    jpeg: bytes


def live_url(url: str) -> str:
    """The live stream's URL of the daemon whose control channel is ``url``
    (``ws://sandbox:8765/v1/ws`` → ``ws://sandbox:8765/v1/live``).

    Raises:
        InvalidRequestError: ``url`` is not a ``ws://`` or ``wss://`` URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise InvalidRequestError(f"not a ws:// or wss:// URL: {url!r}"[:300])
    return urlunsplit((parts.scheme, parts.netloc, LIVE_PATH, "", ""))


class LiveClient:
    """One running live stream. Use :meth:`connect`; read with :meth:`next` or ``async for``.

    Attributes:
        hello: the daemon's greeting (its ``sandbox_id`` and screen).
        watching: the stream's start (rate and quality in force).
    """

    def __init__(self, ws: Any, hello: Hello, watching: Watching) -> None:
        self._ws = ws
        self.hello = hello
        self.watching = watching
        self._last_seq = 0
        self._ended = False

    @classmethod
    async def connect(cls, url: str, token: str, *, max_fps: int = DEFAULT_LIVE_FPS,
                      quality: int = DEFAULT_LIVE_QUALITY, timeout_s: float = LIVE_CONNECT_TIMEOUT_S) -> LiveClient:
        """Open the stream of the daemon whose control channel is ``url``.

        Args:
            url: the daemon's ``/v1/ws`` URL (:func:`live_url` derives the stream's).
            token: the sandbox's control token (a bearer header, never in the URL).
            max_fps: frames per second at most (1..30).
            quality: JPEG quality (1..95).
            timeout_s: how long the connection, the hello and the start may take.

        Raises:
            InvalidRequestError: a bad URL, rate or quality.
            UnauthorizedError: the daemon refused the token.
            BusyError: the daemon runs its most streams, or is resetting (from its error reply).
            SandboxError: the daemon cannot be reached in time.
            BadReplyError: the daemon did not answer as the protocol says.
        """
        try:
            request = WatchRequest(type="watch", id="watch-1", max_fps=max_fps, quality=quality)
        except ValidationError as exc:
            raise InvalidRequestError(f"bad watch: {first_error(exc)}") from exc
        target = live_url(url)
        try:
            ws = await asyncio.wait_for(websockets.connect(
                target, additional_headers={"Authorization": f"Bearer {token}"},
                max_size=_MAX_STREAM_MESSAGE_BYTES, open_timeout=timeout_s, proxy=None), timeout_s)
        except websockets.InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise UnauthorizedError("the sandbox refused the control token or origin") from exc
            raise SandboxError(f"the sandbox refused the live stream: HTTP {exc.response.status_code}") from exc
        except (TimeoutError, OSError, websockets.WebSocketException) as exc:
            raise SandboxError(f"live stream at {target} not reachable: {type(exc).__name__}: {exc}"[:300]) from exc
        try:
            hello = parse_server_message(await asyncio.wait_for(ws.recv(), timeout_s))
            if not isinstance(hello, Hello) or hello.protocol_version != PROTOCOL_VERSION:
                raise BadReplyError("the sandbox's live stream sent no hello", detail={"reason": "live_hello"})
            await ws.send(request.model_dump_json())
            started = cls._text(await asyncio.wait_for(ws.recv(), timeout_s))
            if isinstance(started, ErrorReply):
                raise error_from_wire(started.error.model_dump())
            if not isinstance(started, Watching) or started.id != request.id or started.screen != hello.screen:
                raise BadReplyError("the sandbox did not start the live stream it was asked for",
                                    detail={"reason": "live_start"})
        except (TimeoutError, websockets.WebSocketException) as exc:
            await ws.close()
            raise SandboxError(f"the sandbox's live stream did not start: {type(exc).__name__}") from exc
        except BaseException:
            await ws.close()
            raise
        return cls(ws, hello, started)

    @staticmethod
    def _text(raw: str | bytes) -> Watching | LivePointer | LiveEnd | ErrorReply:
        if not isinstance(raw, str) or len(raw) > MAX_LIVE_HEADER_BYTES:
            raise BadReplyError("the sandbox's live stream sent an unexpected message",
                                detail={"reason": "live_message"})
        try:
            message: Watching | LivePointer | LiveEnd | ErrorReply = _TEXT.validate_json(raw)
        except ValidationError as exc:
            raise BadReplyError(f"bad live stream message: {first_error(exc)}"[:500],
                                detail={"reason": "live_message"}) from exc
        return message

    def _on_screen(self, pointer: LivePointer | None) -> None:
        screen = self.hello.screen
        if pointer is not None and not (pointer.x < screen.width and pointer.y < screen.height):
            raise BadReplyError("the sandbox's live stream put the pointer off the screen",
                                detail={"reason": "live_pointer"})

    async def next(self, timeout_s: float | None = None) -> LiveImage | LivePointer | LiveEnd:
        """The next thing the daemon pushes.

        Args:
            timeout_s: how long to wait (``None``: as long as it takes).

        Returns:
            A frame, a pointer move, or the end of the stream (after which the
            connection is closed; a further call raises ``SandboxError``).

        Raises:
            TimeoutError: nothing came within ``timeout_s`` (the stream goes on).
            SandboxError: the connection closed without an end message.
            BadReplyError: a message that breaks the protocol (the stream is closed).
        """
        if self._ended:
            raise SandboxError("the live stream has ended")
        try:
            raw = await asyncio.wait_for(self._ws.recv(), timeout_s)
        except websockets.WebSocketException as exc:
            self._ended = True
            raise SandboxError(f"the live stream closed: {exc}"[:300]) from exc
        try:
            if isinstance(raw, bytes):
                header, jpeg = unpack_frame(raw)
                screen = self.hello.screen
                if header.width > screen.width or header.height > screen.height or header.seq <= self._last_seq:
                    raise BadReplyError("the sandbox's live frame is larger than the screen or out of order",
                                        detail={"reason": "live_frame"})
                self._on_screen(header.pointer)
                self._last_seq = header.seq
                return LiveImage(header, jpeg)
            message = self._text(raw)
            if isinstance(message, LivePointer):
                self._on_screen(message)
                return message
            if isinstance(message, LiveEnd):
                await self.close()
                return message
            raise BadReplyError("the sandbox's live stream sent an unexpected message",
                                detail={"reason": "live_message"})
        except BadReplyError:
            await self.close()
            raise

    def __aiter__(self) -> LiveClient:
        return self

    async def __anext__(self) -> LiveImage | LivePointer | LiveEnd:
        if self._ended:
            raise StopAsyncIteration
        return await self.next()

    async def close(self) -> None:
        """End the stream (the daemon stops capturing) and close the connection."""
        self._ended = True
        await self._ws.close()
