"""The daemon's live stream: screen frames pushed when the screen changes.

The stream has its own websocket, :data:`LIVE_PATH` (``/v1/live``) on the daemon,
authenticated exactly like the control channel (``Authorization: Bearer <token>``,
no foreign ``Origin``). It can only watch: the one request it accepts is
:class:`WatchRequest`, as the connection's first message; it carries no action,
navigation or workspace request, so a stream connection cannot act.

1. The daemon greets with the same :class:`~deskpod.protocol.Hello` as ``/v1/ws``.
2. The client sends ``{"type": "watch", "id", "max_fps", "quality"}``.
3. The daemon answers :class:`Watching` (or an :class:`~deskpod.protocol.ErrorReply`:
   ``busy`` when :data:`MAX_LIVE_STREAMS` streams already run or a reset is under way,
   ``invalid_request`` for a bad ``watch``), then sends, until the client ends it:

   - a frame: one binary message, :func:`pack_frame`'s layout: a 4-byte big-endian
     length N, N bytes of UTF-8 JSON (a :class:`LiveFrame` header, at most
     :data:`MAX_LIVE_HEADER_BYTES`), then the JPEG (``LiveFrame.size_bytes`` bytes).
     One message per frame, so a frame never arrives half. A frame is sent when the X
     server reported damage and the pixels differ from the last frame sent, at most
     ``max_fps`` per second; the first frame is sent at once. None while the screen
     is idle.
   - :class:`LivePointer`: the pointer moved while the screen did not change (the X
     server draws the pointer as an overlay: it is never in the frame's pixels).
   - :class:`LiveEnd`: the daemon ends the stream (a reset or a restarted display
     replaces the X server; the client connects again).

The client ends the stream by closing the connection; any message after ``watch``
ends it too. Coordinates are screen pixels from the top-left; sizes are bytes.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from deskpod.errors import BadReplyError
from deskpod.protocol._base import STRICT, RequestId, first_error
from deskpod.protocol.actions import Size
from deskpod.protocol.limits import MAX_SCREENSHOT_BASE64_BYTES

__all__ = [
    "DEFAULT_LIVE_FPS",
    "DEFAULT_LIVE_QUALITY",
    "LIVE_END_REASONS",
    "LIVE_PATH",
    "LiveEnd",
    "LiveFrame",
    "LiveMessage",
    "LivePointer",
    "MAX_LIVE_FPS",
    "MAX_LIVE_FRAME_BYTES",
    "MAX_LIVE_HEADER_BYTES",
    "MAX_LIVE_STREAMS",
    "WatchRequest",
    "Watching",
    "pack_frame",
    "unpack_frame",
]

LIVE_PATH: Final = "/v1/live"
"""The daemon's websocket path of the live stream (beside ``/v1/ws``)."""

MAX_LIVE_FPS: Final = 30
"""The highest ``max_fps`` a client may ask for (frames per second)."""

DEFAULT_LIVE_FPS: Final = 30
"""Frames per second a stream sends at most while the screen changes, unless asked otherwise."""

DEFAULT_LIVE_QUALITY: Final = 60
"""JPEG quality of live frames unless asked otherwise (1..95)."""

MAX_LIVE_FRAME_BYTES: Final = MAX_SCREENSHOT_BASE64_BYTES * 3 // 4
"""The largest JPEG of one live frame (bytes): a screenshot's cap, as raw bytes. A
frame that would be larger is re-encoded at a lower quality or scaled down."""

MAX_LIVE_HEADER_BYTES: Final = 1024
"""The longest JSON header of a frame message (bytes)."""

MAX_LIVE_STREAMS: Final = 4
"""Live streams one daemon serves at once; the controller needs one per sandbox however
many people watch (it fans the stream out)."""

LIVE_END_REASONS: Final = ("reset", "display_restarted", "display_gone", "capture_failed", "token_rotated")
"""Why the daemon ended a stream (:attr:`LiveEnd.reason`)."""


class WatchRequest(BaseModel):
    """Start the stream: at most ``max_fps`` frames per second, JPEG at ``quality``."""

    model_config = STRICT
    type: Literal["watch"]
    id: RequestId
    max_fps: Annotated[int, Field(strict=True, ge=1, le=MAX_LIVE_FPS)] = DEFAULT_LIVE_FPS
    quality: Annotated[int, Field(strict=True, ge=1, le=95)] = DEFAULT_LIVE_QUALITY


class Watching(BaseModel):
    """The stream started: the screen's size (pixels) and the rate and quality in force."""

    model_config = STRICT
    type: Literal["watching"] = "watching"
    id: RequestId
    screen: Size
    max_fps: Annotated[int, Field(strict=True, ge=1, le=MAX_LIVE_FPS)]
    quality: Annotated[int, Field(strict=True, ge=1, le=95)]


class LivePointer(BaseModel):
    """Where the pointer is, screen pixels (inside the screen)."""

    model_config = STRICT
    type: Literal["pointer"] = "pointer"
    x: Annotated[int, Field(strict=True, ge=0, le=16383)]
    y: Annotated[int, Field(strict=True, ge=0, le=16383)]


class LiveFrame(BaseModel):
    """One frame's header (the JPEG follows it in the same message, ``size_bytes`` bytes).

    ``seq``: frames of this stream, from 1. ``width``/``height``: the JPEG's size in
    pixels (the screen's, smaller only when a frame had to be scaled down to fit
    :data:`MAX_LIVE_FRAME_BYTES`). ``pointer``: the pointer when the frame was
    captured, screen pixels. ``damage_seq``: the daemon's damage counter read
    right before the capture (frames of one stream have increasing values).
    """

    model_config = STRICT
    type: Literal["frame"] = "frame"
    seq: Annotated[int, Field(strict=True, ge=1)]
    width: Annotated[int, Field(strict=True, ge=1, le=16384)]
    height: Annotated[int, Field(strict=True, ge=1, le=16384)]
    size_bytes: Annotated[int, Field(strict=True, ge=4, le=MAX_LIVE_FRAME_BYTES)]
    pointer: LivePointer | None = None
    damage_seq: Annotated[int, Field(strict=True, ge=0)] = 0


class LiveEnd(BaseModel):
    """The daemon ended the stream (:data:`LIVE_END_REASONS`); connect again to go on."""

    model_config = STRICT
    type: Literal["end"] = "end"
    reason: Literal["reset", "display_restarted", "display_gone", "capture_failed", "token_rotated"]
    message: Annotated[str, Field(max_length=500)] = ""


LiveMessage = Annotated[Watching | LiveFrame | LivePointer | LiveEnd, Field(discriminator="type")]
"""Any text message of a running stream (after the hello), discriminated by ``type``."""


_JPEG_SOI: Final = b"\xff\xd8\xff"
"""The first bytes of every JPEG file (start of image, then a marker)."""


def pack_frame(header: LiveFrame, jpeg: bytes) -> bytes:
    """One frame message: the header's length (4 bytes, big-endian), the header as JSON, the JPEG.

    Raises:
        ValueError: ``header.size_bytes`` is not ``len(jpeg)``.
    """
    if header.size_bytes != len(jpeg):
        raise ValueError(f"the header says {header.size_bytes} bytes, the JPEG has {len(jpeg)}")
    head = header.model_dump_json().encode()
    return len(head).to_bytes(4, "big") + head + jpeg


def unpack_frame(data: bytes) -> tuple[LiveFrame, bytes]:
    """Split a frame message (from an untrusted daemon) into its header and JPEG.

    Returns:
        ``(header, jpeg)``: the JPEG is exactly ``header.size_bytes`` bytes and starts
        like a JPEG file.

    Raises:
        BadReplyError: the message is cut short, its header is too long or not a valid
            :class:`LiveFrame`, or the rest is not the JPEG it announces
            (``detail["reason"]``: ``"live_frame"``).
    """
    def bad(why: str) -> BadReplyError:
        return BadReplyError(f"bad live frame from the sandbox: {why}"[:500], detail={"reason": "live_frame"})

    if len(data) < 4:
        raise bad("shorter than its length prefix")
    length = int.from_bytes(data[:4], "big")
    if length > MAX_LIVE_HEADER_BYTES or len(data) < 4 + length:
        raise bad(f"a header of {length} bytes (at most {MAX_LIVE_HEADER_BYTES}, within the message)")
    try:
        header = LiveFrame.model_validate_json(data[4:4 + length])
    except ValidationError as exc:
        raise bad(first_error(exc)) from exc
    jpeg = data[4 + length:]
    if len(jpeg) != header.size_bytes or not jpeg.startswith(_JPEG_SOI):
        raise bad(f"{len(jpeg)} bytes of image where the header announces a JPEG of {header.size_bytes}")
    return header, jpeg
