"""The live view as video: one session's frames encoded as H.264 by the controller, once
for all its video viewers.

The daemon's stream stays JPEG (:mod:`deskpod.protocol.live`). For viewers that can
decode video (the console's live view with WebCodecs, in a secure context), a
:class:`VideoFeed` decodes each JPEG the hub receives
(:class:`~deskpod.controller.video.JpegDecoder`, FFmpeg's JPEG decoder, which yields the
JPEG's own YUV planes; a frame that is not one picture of the size its header states is
dropped) and encodes the pixels with x264 (FFmpeg's libx264, through
PyAV): constrained baseline profile, no B-frames, no lookahead
(``tune=zerolatency``), so that each frame leaves the encoder as soon as it went in.
The bitstream a viewer's decoder parses is therefore always the controller's own,
never bytes the sandbox made (SECURITY.md, "The live view").

Encoding happens on a thread of its own, newest frame first: a frame that arrives while
the previous one is being encoded replaces any frame still waiting, so a busy
controller lowers the frame rate instead of queuing latency. A key frame (IDR, with the
stream's SPS and PPS) starts the stream and follows every :data:`KEY_INTERVAL_FRAMES`
frames, whenever :meth:`VideoFeed.want_key` is called (a viewer joined or fell
behind), and :data:`KEY_WHEN_STILL_S` after the screen went still (the last frame
again, for a viewer whose decoder skipped frames).

Each chunk goes to viewers as one binary message (:meth:`VideoChunk.packed`): a flags
byte (:data:`KEY_FLAG`), the frame's timestamp (microseconds since the feed started,
8 bytes big-endian) and the access unit in Annex B format (what WebCodecs'
``VideoDecoder`` takes for ``avc1`` when no ``description`` is configured: W3C,
"AVC (H.264) WebCodecs Registration", section 2).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from deskpod.controller.video import JpegDecoder
from deskpod.errors import BadReplyError
from deskpod.protocol.live import MAX_LIVE_FPS

__all__ = [
    "CRF",
    "H264Encoder",
    "KEY_FLAG",
    "KEY_INTERVAL_FRAMES",
    "KEY_WHEN_STILL_S",
    "PRESET",
    "VIDEO_HEADER_BYTES",
    "VideoChunk",
    "VideoFeed",
    "codec_string",
    "video_available",
]

log = logging.getLogger(__name__)

KEY_FLAG: Final = 0x01
"""Bit of a chunk's flags byte set when the chunk is a key frame."""

VIDEO_HEADER_BYTES: Final = 9
"""Bytes before a chunk's access unit: the flags byte and the 8-byte timestamp."""

KEY_INTERVAL_FRAMES: Final = 60
"""A key frame at least every this many frames (x264's ``keyint``): a viewer whose
decoder lost a frame shows the screen again within that many frames."""

CRF: Final = 26
"""x264's constant rate factor (0 best .. 51 worst) of the live view's video."""

PRESET: Final = "superfast"
"""x264's speed preset: a 1280x800 frame of dense text took about 4 ms to encode on one core
here (7.6 ms with its conversion from RGB, which the JPEG's own YUV planes spare), and its key
frame 260 KB where ``ultrafast`` made 373 KB."""

KEY_WHEN_STILL_S: Final = 0.5
"""When no frame followed a delta frame for this long (seconds), the last frame is encoded
again as a key frame: a viewer that skipped frames while its decoder was behind would
otherwise show a stale picture for as long as the screen stays still."""

_TIME_BASE: Final = Fraction(1, 1_000_000)
"""Timestamps in microseconds."""


@dataclass(frozen=True)
class VideoChunk:
    """One encoded frame: ``data`` is an H.264 access unit (Annex B), ``key`` whether it is
    a key frame (an IDR with SPS and PPS before it), ``timestamp_us`` microseconds since
    the feed started, ``codec`` the WebCodecs codec string (``avc1.PPCCLL``) and
    ``width``/``height`` the picture's size in pixels."""

    data: bytes
    key: bool
    timestamp_us: int
    codec: str
    width: int
    height: int

    def packed(self) -> bytes:
        """The binary message a viewer gets: flags, timestamp, access unit."""
        flags = KEY_FLAG if self.key else 0
        return bytes([flags]) + self.timestamp_us.to_bytes(8, "big") + self.data

    def config(self) -> dict[str, Any]:
        """The ``{"type": "video", "codec", "width", "height"}`` message a viewer gets
        before the first chunk and whenever these change."""
        return {"type": "video", "codec": self.codec, "width": self.width, "height": self.height}


@functools.cache
def video_available() -> bool:
    """Whether this installation can encode video: PyAV (the ``serve`` extra) imports and
    has FFmpeg's libx264 encoder and JPEG decoder."""
    try:
        import av

        av.codec.Codec("libx264", "w")
        av.codec.Codec("mjpeg", "r")
    except Exception:  # ImportError, or an FFmpeg build without them (av.codec raises its own errors)
        return False
    return True


def codec_string(access_unit: bytes) -> str | None:
    """The WebCodecs codec string of the SPS in ``access_unit`` (Annex B): ``avc1.`` and its
    profile_idc, constraint flags and level_idc as hex (RFC 6381, section 3.3), or ``None``
    when it carries no SPS."""
    start = 0
    while True:
        found = access_unit.find(b"\x00\x00\x01", start)
        if found < 0 or found + 6 > len(access_unit):
            return None
        nal = access_unit[found + 3:found + 7]
        if nal[0] & 0x1F == 7:
            return f"avc1.{nal[1]:02x}{nal[2]:02x}{nal[3]:02x}"
        start = found + 3


class H264Encoder:
    """Encodes JPEG frames of one stream into H.264 (one thread at a time).

    The encoder opens on the first frame and opens again, with a key frame, when the
    frames' size changes (the daemon scales a frame down when it would not fit a
    message). Width and height are made even (4:2:0 chroma): an odd last column or row
    is cropped.
    """

    def __init__(self) -> None:
        self._decoder: JpegDecoder | None = None
        self._context: Any = None
        self._size: tuple[int, int] | None = None
        self._codec = ""

    def _open(self, width: int, height: int) -> None:
        import av

        context = av.CodecContext.create("libx264", "w")
        context.width, context.height = width, height
        context.pix_fmt = "yuv420p"
        context.time_base = _TIME_BASE
        context.framerate = Fraction(MAX_LIVE_FPS, 1)
        context.gop_size = KEY_INTERVAL_FRAMES
        context.options = {"preset": PRESET, "tune": "zerolatency", "profile": "baseline", "crf": str(CRF),
                           "forced-idr": "1"}
        context.open()
        self._context, self._size = context, (width, height)

    def encode(self, jpeg: bytes, width: int, height: int, timestamp_us: int, *, key: bool) -> VideoChunk | None:
        """Encode one frame.

        Args:
            jpeg: the frame as the daemon sent it (untrusted).
            width: its width in pixels, as its header states.
            height: its height in pixels, as its header states.
            timestamp_us: when it arrived, microseconds since the feed started (increasing).
            key: make it a key frame.

        Returns:
            The chunk, or ``None`` when the encoder kept the frame back (it never does
            with ``zerolatency``, but the API allows it).

        Raises:
            BadReplyError: the bytes are not a JPEG of the stated size, or the size is
                under 2x2 pixels.
        """
        import av

        even = (width & ~1, height & ~1)
        if min(even) < 2:
            raise BadReplyError(f"a live frame of {width}x{height} pixels is too small to encode",
                                detail={"reason": "bad_image"})
        if self._decoder is None:
            self._decoder = JpegDecoder()
        picture = self._decoder.decode(jpeg, (width, height))
        if self._size != even:
            self._open(*even)
            key = True
        frame = picture.reformat(width=even[0], height=even[1], format="yuv420p")
        frame.pts = timestamp_us
        frame.time_base = _TIME_BASE
        if key:
            frame.pict_type = av.video.frame.PictureType.I
        packets = self._context.encode(frame)
        if not packets:
            return None
        data = b"".join(bytes(packet) for packet in packets)
        is_key = any(packet.is_keyframe for packet in packets)
        if is_key:
            self._codec = codec_string(data) or self._codec
        return VideoChunk(data, is_key, timestamp_us, self._codec, *even)

    def close(self) -> None:
        """Free the encoder and the decoder (they open again on the next frame)."""
        self._decoder = self._context = self._size = None


Deliver = Callable[[VideoChunk], None]
"""Receives each chunk, on the event loop, in order."""


class VideoFeed:
    """One session's video: JPEG frames in, chunks out to ``deliver``, newest frame first.

    Args:
        deliver: called with each chunk on the event loop.
    """

    def __init__(self, deliver: Deliver) -> None:
        self.deliver = deliver
        self.encoder = H264Encoder()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="deskpod-video")
        self.started = time.monotonic()
        self.last_timestamp_us = -1
        self.encoded = 0
        self.skipped = 0
        self._waiting: tuple[bytes, int, int, int] | None = None
        self._want_key = True
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _stamp(self) -> int:
        """Now, microseconds since the feed started, after every timestamp given before."""
        now_us = int((time.monotonic() - self.started) * 1_000_000)
        self.last_timestamp_us = max(now_us, self.last_timestamp_us + 1)
        return self.last_timestamp_us

    def offer(self, jpeg: bytes, width: int, height: int) -> None:
        """A new frame arrived: it replaces one still waiting to be encoded."""
        if self._waiting is not None:
            self.skipped += 1
        self._waiting = (jpeg, width, height, self._stamp())
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def want_key(self) -> None:
        """Make the next frame encoded a key frame (a viewer joined or fell behind)."""
        self._want_key = True

    async def _run(self) -> None:
        last: tuple[bytes, int, int] | None = None
        still_key_due = False
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), KEY_WHEN_STILL_S if still_key_due else None)
            except TimeoutError:
                # The screen went still after a delta frame: its last frame again, as a key
                # frame, for a viewer whose decoder skipped to wait for one.
                if last is not None and self._waiting is None:
                    self._waiting, self._want_key = (*last, self._stamp()), True
            self._wake.clear()
            waiting, self._waiting = self._waiting, None
            if waiting is None:
                continue
            last = waiting[:3]
            key, self._want_key = self._want_key, False
            try:
                chunk = await asyncio.wrap_future(self.pool.submit(self.encoder.encode, *waiting, key=key))
            except BadReplyError as exc:
                log.warning("live video: a frame was not encoded: %s", exc.message[:200])
                self._want_key = self._want_key or key
                continue
            except Exception:  # FFmpeg's errors (av.error.*): the encoder starts over with a key frame
                log.exception("live video: the encoder failed; it starts again")
                await asyncio.wrap_future(self.pool.submit(self.encoder.close))
                self._want_key = True
                continue
            if chunk is None:
                continue
            self.encoded += 1
            still_key_due = not chunk.key
            self.deliver(chunk)

    async def close(self) -> None:
        """Stop encoding and free the encoder."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.wrap_future(self.pool.submit(self.encoder.close))
        self.pool.shutdown(wait=False)
