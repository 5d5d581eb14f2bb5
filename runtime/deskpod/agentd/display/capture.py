"""Screen capture with mss (MIT-SHM) and encoding with Pillow.

One :class:`ScreenCapture` per daemon, kept alive: the first grab sets up the shared
memory segment (10-50 ms), later grabs of a 1280x800 screen take about a millisecond.
Create it and call it from one thread (the daemon's executor thread): mss releases before
10.2 keep their X connection in thread-local storage. mss 10.2+ (XCB backend) is strongly
preferred: it reports a vanished X server as an error, where the older Xlib backend's
default I/O error handler ends the whole process.

Sizes are ``(width, height)`` in pixels; images are ``PIL.Image.Image`` in mode ``RGB``.
"""

from __future__ import annotations

import inspect
import io
import logging
from typing import Any, Final, Literal

import xxhash
from PIL import Image, ImageDraw

from deskpod.errors import CaptureError, InvalidActionError

__all__ = [
    "DOWNSCALE_FILTER",
    "Frame",
    "JPEG_QUALITY_RANGE",
    "PNG_COMPRESS_LEVEL",
    "ScreenCapture",
    "UPSCALE_FILTER",
    "average_hash",
    "draw_cursor",
]

log = logging.getLogger(__name__)

PNG_COMPRESS_LEVEL: Final = 1
"""zlib level for PNG screenshots. On a text-heavy 1280x800 Chromium page, level 1 took
14 ms and Pillow's default 6 took 23 ms, for files of about the same size (127 and
131 KB); levels 2 and 3 were no smaller and slightly slower."""

DOWNSCALE_FILTER: Final = Image.Resampling.BOX
"""Filter when shrinking to the model space: area averaging, sharp enough for text and
about three times cheaper than Lanczos (6 ms against 17 ms for 1280x800 → 1024x640)."""

UPSCALE_FILTER: Final = Image.Resampling.BICUBIC
"""Filter when the model space is larger than the screen."""

JPEG_QUALITY_RANGE: Final = (1, 95)
"""Accepted JPEG quality values (Pillow's documented useful range)."""

ImageFormat = Literal["png", "jpeg", "webp"]

_CURSOR_SHAPE: Final = [(0, 0), (0, 17), (4, 13), (7, 20), (10, 19), (7, 12), (12, 12)]
"""An arrow pointer, tip at (0, 0), in screen pixels."""


class Frame:
    """One captured frame: raw BGRX bytes, its size, and a 128-bit digest of the bytes.

    Two frames with equal digests show the same pixels (xxh3-128; collisions are not
    a practical concern for comparing consecutive frames of one screen).
    """

    __slots__ = ("raw", "size", "digest")

    def __init__(self, raw: bytes, size: tuple[int, int]) -> None:
        self.raw = raw
        self.size = size
        self.digest = xxhash.xxh3_128_digest(raw)

    def image(self) -> Image.Image:
        """The frame as an ``RGB`` image."""
        return Image.frombytes("RGB", self.size, self.raw, "raw", "BGRX")


def average_hash(image: Image.Image) -> str:
    """The 64-bit average hash of ``image`` as 16 hex digits: shrunk to 8x8 grey pixels,
    bit i set when pixel i is brighter than their mean (row-major, first pixel = top bit)."""
    small = image.convert("L").resize((8, 8), Image.Resampling.BOX)
    pixels = list(small.tobytes())  # mode L: one byte a pixel, row-major
    mean = sum(pixels) / 64
    bits = 0
    for value in pixels:
        bits = (bits << 1) | (value > mean)
    return f"{bits:016x}"


def draw_cursor(image: Image.Image, x: int, y: int) -> Image.Image:
    """Return a copy of ``image`` with an arrow pointer drawn with its tip at (x, y),
    screen pixels (a white arrow with a black outline, 20 px tall)."""
    out = image.copy()
    draw = ImageDraw.Draw(out)
    draw.polygon([(x + dx, y + dy) for dx, dy in _CURSOR_SHAPE], fill=(255, 255, 255), outline=(0, 0, 0))
    return out


def _open_mss(display_name: str | None) -> Any:
    """Open an mss instance on ``display_name`` with MIT-SHM where mss offers it."""
    import mss  # imported here: the controller side never needs it

    factory = getattr(mss, "MSS", None) or mss.mss  # mss >= 10 spells it MSS
    kwargs: dict[str, Any] = {}
    if display_name is not None:
        kwargs["display"] = display_name
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    if "backend" in parameters:
        kwargs["backend"] = "xshmgetimage"  # mss 10.2+: XCB + MIT-SHM, falls back itself
    return factory(**kwargs)


class ScreenCapture:
    """Grabs the whole X screen and encodes screenshots.

    Args:
        display_name: the X display, e.g. ``":99"``; ``None`` uses ``$DISPLAY``.

    Raises:
        CaptureError: the display cannot be opened (wrong ``DISPLAY``, no server, mss
            missing). The message names the display.
    """

    def __init__(self, display_name: str | None = None) -> None:
        self.display_name = display_name
        try:
            self._mss = _open_mss(display_name)
            monitor = dict(self._mss.monitors[0])  # the whole virtual screen
        except ImportError as exc:
            raise CaptureError(
                "screen capture is unavailable: the mss package is not installed",
                detail={"display": display_name},
            ) from exc
        except Exception as exc:  # mss raises ScreenShotError, ctypes/OS errors
            self._close_quietly()
            raise CaptureError(
                f"cannot capture X display {display_name or '$DISPLAY'!r}: {exc}",
                detail={"display": display_name},
            ) from exc
        self._monitor = {k: monitor[k] for k in ("left", "top", "width", "height")}
        self._closed = False

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the captured screen in pixels, as found when opened."""
        return int(self._monitor["width"]), int(self._monitor["height"])

    @property
    def performance_notes(self) -> list[str]:
        """mss's notes on its capture path (mss 10.2+), e.g. "MIT-SHM is working correctly."
        or why it fell back to plain XGetImage; empty with older mss."""
        return list(getattr(self._mss, "performance_status", None) or [])

    def grab(self) -> Image.Image:
        """Capture the whole screen.

        Returns:
            An ``RGB`` image of :attr:`size` pixels.

        Raises:
            CaptureError: the X server is gone or refused the capture, or this object is
                closed.
        """
        return self.grab_frame().image()

    def grab_frame(self) -> Frame:
        """Capture the whole screen as a :class:`Frame` (raw pixels and their digest).

        Raises:
            CaptureError: the X server is gone or refused the capture, or this object is
                closed.
        """
        if self._closed:
            raise CaptureError("screen capture is closed", detail={"display": self.display_name})
        try:
            shot = self._mss.grab(self._monitor)
            return Frame(bytes(shot.bgra), (int(shot.size[0]), int(shot.size[1])))
        except Exception as exc:
            raise CaptureError(
                f"screen capture on {self.display_name or '$DISPLAY'!r} failed: {exc}",
                detail={"display": self.display_name},
            ) from exc

    @staticmethod
    def encode(
        image: Image.Image,
        fmt: ImageFormat = "png",
        quality: int = 80,
        size: tuple[int, int] | None = None,
    ) -> bytes:
        """Encode ``image`` as PNG, JPEG or WebP, resized to ``size`` first if it differs.

        Args:
            image: an ``RGB`` image (other modes are converted).
            fmt: ``"png"`` (zlib level :data:`PNG_COMPRESS_LEVEL`), ``"jpeg"`` or ``"webp"`` (lossy).
            quality: JPEG/WebP quality in :data:`JPEG_QUALITY_RANGE`; ignored for PNG.
            size: (width, height) of the output in pixels, e.g. the model space; ``None``
                keeps the image's size. Shrinking uses :data:`DOWNSCALE_FILTER`, enlarging
                :data:`UPSCALE_FILTER`.

        Returns:
            The encoded file: PNG, JPEG or WebP bytes, ``size`` (or the image's size) in pixels.

        Raises:
            InvalidActionError: unknown ``fmt``, ``quality`` out of range or a non-positive
                ``size``.
            CaptureError: Pillow failed to encode.
        """
        if fmt not in ("png", "jpeg", "webp"):
            raise InvalidActionError(
                f"unknown image format {fmt!r}; expected 'png', 'jpeg' or 'webp'",
                detail={"format": repr(fmt)},
            )
        low, high = JPEG_QUALITY_RANGE
        if fmt != "png" and not (isinstance(quality, int) and low <= quality <= high):
            raise InvalidActionError(
                f"JPEG quality must be {low}..{high}, got {quality!r}",
                detail={"quality": repr(quality)},
            )
        if size is not None:
            width, height = size
            valid = isinstance(width, int) and isinstance(height, int)
            if not (valid and width > 0 and height > 0):
                raise InvalidActionError(
                    f"image size must be two positive ints, got {size!r}",
                    detail={"size": repr(size)},
                )
        try:
            if image.mode != "RGB":
                image = image.convert("RGB")
            if size is not None and (size[0], size[1]) != image.size:
                shrinking = size[0] <= image.width and size[1] <= image.height
                image = image.resize(
                    (size[0], size[1]), DOWNSCALE_FILTER if shrinking else UPSCALE_FILTER
                )
            out = io.BytesIO()
            if fmt == "png":
                image.save(out, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
            elif fmt == "jpeg":
                image.save(out, format="JPEG", quality=quality)
            else:
                image.save(out, format="WEBP", quality=quality, method=0)
            return out.getvalue()
        except (OSError, ValueError) as exc:
            raise CaptureError(f"encoding the screenshot as {fmt} failed: {exc}") from exc

    def health_check(self, expected_size: tuple[int, int] | None = None) -> tuple[int, int]:
        """Grab one frame to prove capture works (the daemon's startup check).

        A fresh Xvfb is legitimately one colour, so the content is not judged; only that
        a frame comes back with the screen's size.

        Args:
            expected_size: (width, height) the screen must have, e.g. the configured Xvfb
                size; ``None`` accepts any non-empty size.

        Returns:
            The captured (width, height) in pixels.

        Raises:
            CaptureError: the grab failed, the frame is empty, or its size differs from
                ``expected_size``.
        """
        image = self.grab()
        if image.width <= 0 or image.height <= 0:
            raise CaptureError(
                f"screen capture on {self.display_name!r} returned an empty frame",
                detail={"display": self.display_name, "size": list(image.size)},
            )
        if expected_size is not None and image.size != tuple(expected_size):
            raise CaptureError(
                f"screen on {self.display_name!r} is {image.width}x{image.height}, "
                f"expected {expected_size[0]}x{expected_size[1]}",
                detail={
                    "display": self.display_name,
                    "size": list(image.size),
                    "expected": list(expected_size),
                },
            )
        return image.size

    def close(self) -> None:
        """Release the X connection and the shared memory. Safe to call twice."""
        self._closed = True
        self._close_quietly()

    def _close_quietly(self) -> None:
        mss_obj = getattr(self, "_mss", None)
        if mss_obj is None:
            return
        try:
            mss_obj.close()
        except Exception as exc:  # closing must never raise
            log.debug("closing mss failed: %s", exc)
        self._mss = None
