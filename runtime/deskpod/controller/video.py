"""A screen recording's file: JPEG frames at the times they arrived, encoded as an H.264 MP4.

:class:`Mp4Writer` takes the frames of a live stream (:mod:`deskpod.protocol.live`: JPEGs the
daemon sends only when the screen changed, already masked) one by one with the second each
arrived at, and writes ``libx264`` video in ``yuv420p`` (what browsers play: Chromium's
``video/mp4; codecs="avc1..."``) into an MP4 whose index is moved to the front when it is
closed (``+faststart``: a browser plays it while it downloads). Timestamps are real: a frame's
presentation time is its arrival (millisecond time base), so a still screen is one frame that
lasts until the next; :meth:`Mp4Writer.close` shows the last frame once more at the end, so
the video lasts as long as the recording did. The video's size is the first frame's, rounded
down to even pixels (H.264's 4:2:0 needs even sides); a frame of another size (one the daemon
scaled down to fit its byte cap) is scaled to it.

Frames are decoded by FFmpeg's JPEG decoder, which yields the JPEG's own YUV planes (no
RGB step); bytes that are not one JPEG picture, or a picture of more pixels than a screen may
have (:data:`~deskpod.protocol.limits.MAX_SCREENSHOT_PIXELS`, refused before anything is
allocated), are skipped. The writer is synchronous and CPU-bound: the recorder (:mod:`deskpod.controller.recording`)
calls it from a thread of its own, never from the event loop. PyAV (``av``, the ``serve``
extra) is imported when a writer is made; without it :class:`RecordingError` says so.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

from deskpod.errors import BadReplyError, RecordingError
from deskpod.protocol import MAX_SCREENSHOT_PIXELS

__all__ = [
    "CRF", "JpegDecoder", "KEYFRAME_INTERVAL_FRAMES", "MP4_MEDIA_TYPE", "Mp4Writer", "PRESET", "TIME_BASE",
    "VideoFacts", "file_sha256",
]

MP4_MEDIA_TYPE: Final = "video/mp4"
"""The media type of the recordings' files."""

TIME_BASE: Final = Fraction(1, 1000)
"""The video's time base: timestamps are milliseconds from the recording's start."""

CRF: Final = 27
"""libx264's constant rate factor: screen text stays readable, a still screen costs almost nothing."""

PRESET: Final = "veryfast"
"""libx264's speed preset: a few milliseconds a frame of a 1280×800 screen on one core."""

KEYFRAME_INTERVAL_FRAMES: Final = 50
"""Frames between key frames at most (where a player can seek to)."""

_HASH_CHUNK_BYTES: Final = 1024 * 1024

_JPEG_SOI: Final = b"\xff\xd8"
"""The first bytes of every JPEG file (start of image)."""


@dataclass(frozen=True)
class VideoFacts:
    """A closed recording: ``frames`` encoded (the repeated last one included), ``duration_s``
    (seconds, first frame to the end), ``width``/``height`` (pixels), ``size_bytes`` and
    ``sha256`` (hex) of the file."""

    frames: int
    duration_s: float
    width: int
    height: int
    size_bytes: int
    sha256: str


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (64 lower-case hex digits) of the file at ``path``, read in chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _av() -> Any:
    """PyAV, imported on first use.

    Raises:
        RecordingError: PyAV is not installed (``reason`` ``"no_av"``).
    """
    try:
        import av
    except ImportError as exc:
        raise RecordingError("PyAV is not installed: pip install 'deskpod[serve]'", detail={"reason": "no_av"}) from exc
    return av


class JpegDecoder:
    """Decodes the daemon's JPEG frames (untrusted) into pictures to encode, with FFmpeg's JPEG
    decoder: its output is the JPEG's own YUV planes, with no RGB step. A picture of more than
    :data:`~deskpod.protocol.MAX_SCREENSHOT_PIXELS` is refused before it is allocated. The
    picture's type is cleared: a decoded JPEG is an intra picture, and an encoder would make
    every frame a key frame. One thread at a time.

    Raises:
        RecordingError: PyAV is missing (``no_av``).
    """

    def __init__(self) -> None:
        self._av = _av()
        self._context: Any = self._av.CodecContext.create("mjpeg", "r")
        self._context.thread_count = 1
        self._context.options = {"max_pixels": str(MAX_SCREENSHOT_PIXELS)}

    def decode(self, jpeg: bytes, size: tuple[int, int] | None = None) -> Any:
        """The picture of ``jpeg`` (an ``av.VideoFrame``).

        Args:
            jpeg: the frame's bytes, as the daemon sent them.
            size: the (width, height) in pixels its header states, or ``None`` to take any.

        Raises:
            BadReplyError: not one JPEG picture (of ``size``); ``detail["reason"]`` is ``"bad_image"``.
        """
        pictures = []
        if jpeg.startswith(_JPEG_SOI):
            try:
                pictures = self._context.decode(self._av.Packet(jpeg))
            except (self._av.FFmpegError, ValueError):
                pictures = []
        if len(pictures) != 1 or (size is not None and (pictures[0].width, pictures[0].height) != size):
            raise BadReplyError(f"a live frame that is not one JPEG picture{'' if size is None else f' of {size}'}",
                                detail={"reason": "bad_image"})
        picture = pictures[0]
        picture.pict_type = self._av.video.frame.PictureType.NONE
        return picture


class Mp4Writer:
    """One MP4 being written (see the module). Call :meth:`add` per frame, then :meth:`close` once.

    Args:
        path: the file to create (mode 0600; it must not exist).

    Raises:
        RecordingError: PyAV is missing (``no_av``).
        OSError: the file cannot be created.
    """

    def __init__(self, path: str | Path) -> None:
        self._av = _av()
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        self._container: Any = self._av.open(str(self.path), mode="w", format="mp4",
                                             options={"movflags": "+faststart"})
        self._decoder = JpegDecoder()
        self._stream: Any = None
        self._last: Any = None
        self._last_pts = -1
        self.frames = 0
        self.skipped = 0
        """Frames not encoded: not a decodable JPEG."""

    def _open_stream(self, width: int, height: int) -> None:
        stream = self._container.add_stream("libx264", rate=10, options={
            "crf": str(CRF), "preset": PRESET, "g": str(KEYFRAME_INTERVAL_FRAMES), "bf": "0", "threads": "1"})
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        stream.time_base = TIME_BASE
        self._stream = stream

    def _encode(self, frame: Any, pts: int) -> None:
        frame.pts = max(pts, self._last_pts + 1)  # strictly increasing, also for two frames in one millisecond
        frame.time_base = TIME_BASE
        self._last_pts = frame.pts
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def add(self, jpeg: bytes, at_s: float) -> bool:
        """Encode one frame shown from ``at_s`` seconds after the recording's start.

        Args:
            jpeg: the frame, a JPEG (from the untrusted daemon: one that does not decode is skipped).
            at_s: its arrival, seconds from the start (not before the previous frame's).

        Returns:
            Whether it was encoded (``False``: not a decodable JPEG, counted in :attr:`skipped`).
        """
        try:
            picture = self._decoder.decode(jpeg)
        except BadReplyError:
            self.skipped += 1
            return False
        if self._stream is None:
            self._open_stream(max(2, picture.width & ~1), max(2, picture.height & ~1))
        frame = picture.reformat(width=self._stream.width, height=self._stream.height, format="yuv420p")
        self._last = frame
        self._encode(frame, round(at_s * 1000))
        return True

    def close(self, end_s: float) -> VideoFacts:
        """Show the last frame again at ``end_s`` (seconds from the start), flush the encoder, write
        the index at the front and close the file.

        Returns:
            The file's :class:`VideoFacts` (0 frames, 0 seconds: no frame came; the file holds
            no video stream then).

        Raises:
            OSError: the file cannot be written or read back.
        """
        if self._last is not None:
            end_pts = round(end_s * 1000)
            if end_pts > self._last_pts:
                again = self._last.reformat(format="yuv420p")
                self._encode(again, end_pts)
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        self._container.close()
        width = self._stream.width if self._stream is not None else 0
        height = self._stream.height if self._stream is not None else 0
        duration = max(0, self._last_pts) / 1000 if self._last is not None else 0.0
        return VideoFacts(self.frames, duration, width, height, self.path.stat().st_size, file_sha256(self.path))

    def abort(self) -> None:
        """Close the file without finishing it (after an error): it may not play."""
        try:
            self._container.close()
        except Exception:  # noqa: BLE001 - the file is being given up anyway
            pass
