"""The daemon's live streams: JPEG frames pushed when the X server reports damage.

A stream (:mod:`deskpod.protocol.live`) waits on a
:class:`~deskpod.agentd.display.damage.DamageMonitor` instead of polling pixels: while nothing
is drawn it sends nothing (it only asks the X server where the pointer is, every
:data:`POINTER_POLL_S`, and sends a pointer message when it moved). After damage it
captures the screen, and sends the frame when its pixels differ from the last one sent,
at most ``max_fps`` a second: frames are captured on a cadence of ``1 / max_fps``
seconds (a frame captured late does not delay the next one's slot, though two frames are
never less than half an interval apart), and damage that arrives while a frame is
captured or before the next slot is coalesced into the next frame, which is captured
after it, so the last state drawn is always sent. The session's secrets are painted over each frame
before it is encoded (:attr:`LiveStreams.mask_plan`, as for screenshots).

Each stream owns its own X resources on its own thread (an mss capture object, an X
connection for the pointer, the damage monitor's connection): it never waits for the
executor's thread, so a batch of typing does not freeze the view, and it never sends
input. A reset or a display restart ends every stream (:meth:`LiveStreams.suspended`)
and closes those connections *before* the X server stops; new streams are refused
(``busy``) until the fresh display is up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, Final

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from deskpod.agentd.display.mask_paint import MaskPlan, no_mask, paint_mask
from deskpod.errors import BusyError, CaptureError, DeskpodError, InvalidRequestError
from deskpod.protocol import ErrorBody, ErrorReply, Size, encode_message, first_error
from deskpod.protocol.live import (
    MAX_LIVE_FRAME_BYTES,
    MAX_LIVE_STREAMS,
    LiveEnd,
    LiveFrame,
    LivePointer,
    WatchRequest,
    Watching,
    pack_frame,
)

__all__ = ["END_SEND_TIMEOUT_S", "LiveStreams", "POINTER_POLL_S", "WATCH_REQUEST_TIMEOUT_S"]

log = logging.getLogger(__name__)

POINTER_POLL_S: Final = 0.05
"""How often an idle stream asks where the pointer is (seconds); the pointer is not damage."""

WATCH_REQUEST_TIMEOUT_S: Final = 10.0
"""How long a new stream connection has to send its ``watch`` (seconds)."""

END_SEND_TIMEOUT_S: Final = 1.0
"""How long the daemon tries to tell a client why its stream ended before closing (seconds)."""

_MAX_WATCH_BYTES: Final = 4096
"""The longest ``watch`` request accepted (bytes)."""


class _Ended(Exception):
    """The stream ends for ``reason`` (one of :data:`~deskpod.protocol.live.LIVE_END_REASONS`)."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _Stream:
    """One client's stream: its thread, capture object, pointer connection and damage monitor."""

    def __init__(self, display: str, websocket: WebSocket, request: WatchRequest,
                 mask_plan: Callable[[], Awaitable[MaskPlan]]) -> None:
        self.display = display
        self.mask_plan = mask_plan
        self.websocket = websocket
        self.request = request
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="deskpod-live")
        self.capture: Any = None
        self.pointer_display: Any = None
        self.monitor: Any = None
        self.last_digest: tuple[bytes, MaskPlan, tuple[int, int] | None] | None = None
        self.last_pointer: tuple[int, int] | None = None
        self.frames = 0
        self.sender: asyncio.Task[None] | None = None
        self.end: _Ended | None = None

    async def _submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self.pool.submit(fn, *args))

    def _open(self) -> None:
        """Open the capture object, the pointer's X connection and the damage monitor (stream thread).

        Raises:
            CaptureError: the display cannot be opened or has no DAMAGE extension.
        """
        from Xlib.display import Display

        from deskpod.agentd.display.capture import ScreenCapture
        from deskpod.agentd.display.damage import DamageMonitor

        self.capture = ScreenCapture(self.display)
        try:
            self.pointer_display = Display(self.display)
        except Exception as exc:  # python-xlib raises several unrelated types here
            raise CaptureError(f"cannot open display {self.display!r} for the pointer: {exc}") from exc
        self.monitor = DamageMonitor(self.display)
        self.monitor.start()

    def _close(self) -> None:
        """Close every X resource of the stream (stream thread); never raises."""
        if self.monitor is not None:
            self.monitor.close()
        if self.capture is not None:
            self.capture.close()
        if self.pointer_display is not None:
            with suppress(Exception):
                self.pointer_display.close()
        self.monitor = self.capture = self.pointer_display = None

    def _pointer(self) -> tuple[int, int]:
        """The pointer, screen pixels (stream thread).

        Raises:
            CaptureError: the X server cannot be reached.
        """
        try:
            reply = self.pointer_display.screen().root.query_pointer()
        except Exception as exc:  # python-xlib and socket errors: the server went away
            raise CaptureError(f"cannot read the pointer on {self.display!r}: {exc}") from exc
        return int(reply.root_x), int(reply.root_y)

    def _shoot(self, mask: MaskPlan) -> tuple[bytes, tuple[int, int], tuple[int, int]] | None:
        """Capture, paint ``mask`` over it and encode it, when the pixels or the mask
        changed (stream thread).

        Returns:
            ``(jpeg, (width, height), pointer)``, or ``None`` when the pixels are those
            of the last frame sent.

        Raises:
            CaptureError: the capture or the encoding failed.
        """
        from deskpod.agentd.display.fit import base64_length, fit_encode

        frame = self.capture.grab_frame()
        pointer = self._pointer()
        key = (frame.digest, mask, pointer if mask.tooltip else None)
        if key == self.last_digest:
            return None
        image, _ = paint_mask(frame.image(), mask, pointer)
        fitted = fit_encode(image, "jpeg", self.request.quality, frame.size, base64_length(MAX_LIVE_FRAME_BYTES))
        self.last_digest = key
        return fitted.data, fitted.size, pointer

    async def run(self) -> None:
        """Send frames and pointer moves until cancelled or the display goes away.

        Raises:
            _Ended: the display went away or could not be captured.
        """
        try:
            await self._submit(self._open)
        except DeskpodError as exc:
            raise _Ended("capture_failed", exc.message[:400]) from exc
        interval_s = 1.0 / self.request.max_fps
        shown = -1  # the damage counter read before the last capture; -1: nothing captured yet
        next_at = 0.0
        while True:
            if self.monitor.damaged_since(shown):
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                shown = self.monitor.seq
                started = time.monotonic()
                mask = await self.mask_plan()
                try:
                    shot = await self._submit(self._shoot, mask)
                except DeskpodError as exc:
                    raise _Ended("capture_failed", exc.message[:400]) from exc
                # On a fixed cadence (a late frame does not push the next one back), but
                # never less than half an interval after this one: max_fps on average.
                next_at = max(next_at + interval_s, started + interval_s / 2)
                if shot is not None:
                    jpeg, (width, height), (px, py) = shot
                    self.frames += 1
                    self.last_pointer = (px, py)
                    header = LiveFrame(seq=self.frames, width=width, height=height, size_bytes=len(jpeg),
                                       pointer=LivePointer(x=px, y=py), damage_seq=max(shown, 0))
                    await self.websocket.send_bytes(pack_frame(header, jpeg))
                continue
            waited_from = time.monotonic()
            seen = await self.monitor.wait_for_change(shown, POINTER_POLL_S)
            if seen != shown:
                continue
            if time.monotonic() - waited_from < POINTER_POLL_S / 2:
                # The monitor answers at once only when it stopped: its X server went away.
                raise _Ended("display_gone", "the X server stopped reporting damage")
            try:
                pointer = await self._submit(self._pointer)
            except DeskpodError as exc:
                raise _Ended("display_gone", exc.message[:400]) from exc
            if pointer != self.last_pointer:
                self.last_pointer = pointer
                await self.websocket.send_text(LivePointer(x=pointer[0], y=pointer[1]).model_dump_json())

    async def release(self) -> None:
        """Close the stream's X resources and stop its thread (waits for a capture under way)."""
        with suppress(RuntimeError):
            await self._submit(self._close)
        self.pool.shutdown(wait=False)


class LiveStreams:
    """The daemon's running live streams, at most :data:`~deskpod.protocol.live.MAX_LIVE_STREAMS`.

    Args:
        display: the X display new streams watch, e.g. ``":99"`` (:attr:`display`: a reset
            that swaps a standby desktop in sets it to that desktop's).
    """

    def __init__(self, display: str) -> None:
        self.display = display
        self.mask_plan: Callable[[], Awaitable[MaskPlan]] = no_mask
        """Where the session's secrets show now, painted over every frame
        (:meth:`deskpod.agentd.secret_mask.SecretMask.plan`)."""
        self._streams: set[_Stream] = set()
        self._suspended = 0

    @property
    def count(self) -> int:
        """Streams running now."""
        return len(self._streams)

    async def serve(self, websocket: WebSocket, screen: Size, authorized: Callable[[], bool]) -> None:
        """Serve one accepted stream connection (the hello is sent) until it ends.

        Args:
            websocket: the connection, accepted and greeted.
            screen: the screen's size, pixels.
            authorized: whether the token the connection presented is still the one in
                force (a reset rotates it).
        """
        try:
            request = await self._read_watch(websocket)
            if self._suspended:
                raise BusyError("the sandbox is resetting or restarting its display; watch again in a moment")
            if len(self._streams) >= MAX_LIVE_STREAMS:
                raise BusyError(f"{MAX_LIVE_STREAMS} live streams already run on this sandbox",
                                detail={"max_streams": MAX_LIVE_STREAMS})
            if not authorized():
                raise BusyError("the control token was rotated; connect with the new one")
        except DeskpodError as exc:
            with suppress(RuntimeError, WebSocketDisconnect):
                await websocket.send_text(encode_message(
                    ErrorReply(id=None, error=ErrorBody(**exc.to_wire()))))
                await websocket.close(code=1008)
            return
        stream = _Stream(self.display, websocket, request, self.mask_plan)
        self._streams.add(stream)
        log.info("live stream started: %d fps at most, JPEG quality %d (%d running)",
                 request.max_fps, request.quality, len(self._streams))
        try:
            await websocket.send_text(Watching(id=request.id, screen=screen, max_fps=request.max_fps,
                                               quality=request.quality).model_dump_json())
            await self._run(stream)
        finally:
            self._streams.discard(stream)
            await stream.release()
            log.info("live stream ended after %d frames (%s)", stream.frames,
                     stream.end.reason if stream.end else "the client left")

    async def _read_watch(self, websocket: WebSocket) -> WatchRequest:
        """The connection's ``watch`` request.

        Raises:
            InvalidRequestError: none came in time, or it is not a valid ``watch``.
        """
        try:
            message = await asyncio.wait_for(websocket.receive(), WATCH_REQUEST_TIMEOUT_S)
        except TimeoutError as exc:
            raise InvalidRequestError(f"no watch request within {WATCH_REQUEST_TIMEOUT_S:g} s") from exc
        raw = message.get("text") if message.get("text") is not None else message.get("bytes")
        if raw is None or len(raw) > _MAX_WATCH_BYTES:
            raise InvalidRequestError("a live stream connection takes one watch request first")
        try:
            return WatchRequest.model_validate_json(raw)
        except ValidationError as exc:
            raise InvalidRequestError(f"bad watch request: {first_error(exc)}") from exc

    async def _run(self, stream: _Stream) -> None:
        """Run ``stream`` until the client leaves (or sends anything) or the daemon ends it."""

        async def client_left() -> None:
            with suppress(WebSocketDisconnect, RuntimeError):
                await stream.websocket.receive()  # a disconnect, or any message: the client ends it

        reader = asyncio.create_task(client_left())
        sender = stream.sender = asyncio.create_task(stream.run())
        try:
            await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            sender.cancel()
            await asyncio.gather(reader, sender, return_exceptions=True)
        if not sender.cancelled() and isinstance(sender.exception(), _Ended):
            stream.end = sender.exception()  # type: ignore[assignment]
        if stream.end is not None:
            await self._say_end(stream)

    async def _say_end(self, stream: _Stream) -> None:
        """Tell the client why its stream ended (best effort) and close the connection."""
        end = stream.end
        assert end is not None
        with suppress(RuntimeError, WebSocketDisconnect, TimeoutError):
            await asyncio.wait_for(stream.websocket.send_text(
                LiveEnd(reason=end.reason, message=end.message).model_dump_json()), END_SEND_TIMEOUT_S)  # type: ignore[arg-type]
        with suppress(RuntimeError, WebSocketDisconnect, TimeoutError):
            await asyncio.wait_for(stream.websocket.close(code=1001), END_SEND_TIMEOUT_S)

    async def end_all(self, reason: str, message: str = "") -> None:
        """End every stream for ``reason``; returns once their X connections are closed."""
        streams = list(self._streams)
        for stream in streams:
            stream.end = _Ended(reason, message)
            if stream.sender is not None:
                stream.sender.cancel()
        for stream in streams:
            await stream.release()

    @asynccontextmanager
    async def suspended(self, reason: str, message: str = "") -> AsyncIterator[None]:
        """End every stream and refuse new ones for the block (a reset, a display restart)."""
        self._suspended += 1
        try:
            await self.end_all(reason, message)
            yield
        finally:
            self._suspended -= 1
