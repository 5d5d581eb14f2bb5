"""Fitting an encoded image into a byte limit: re-encode first, then scale down.

A model vendor refuses a base64 image over 5 MB (and the client may declare a smaller
message size), while a 3840x2160 PNG of a busy page is about 22 MB (30 MiB of base64)
and the same screen as JPEG still 5 MB. :func:`fit_encode` encodes as asked; when the
base64 text would be over the limit it tries JPEG at lower qualities at the same size
(:data:`REENCODE_QUALITIES`, stopping early when one is :data:`HOPELESS_FACTOR` times
over), then scales the image down by the square root of the
overshoot (with a margin) until it fits. The caller reports which step was needed
(:attr:`deskpod.protocol.Screenshot.fitted`) and the image's real size and scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from PIL import Image

from deskpod.agentd.display.capture import ImageFormat, ScreenCapture
from deskpod.errors import CaptureError

__all__ = ["DOWNSCALE_QUALITY", "FittedImage", "HOPELESS_FACTOR", "MAX_DOWNSCALE_STEPS", "REENCODE_QUALITIES",
           "base64_length", "fit_encode"]

REENCODE_QUALITIES: Final = (75, 50, 30)
"""JPEG qualities tried, in order, at the asked size before scaling down (only those
below the asked quality when JPEG was asked)."""

DOWNSCALE_QUALITY: Final = 50
"""JPEG quality of a scaled-down image."""

HOPELESS_FACTOR: Final = 2.5
"""A JPEG this many times over the limit is scaled down without trying lower qualities
(quality 30 is seldom under half the size of quality 75)."""

MAX_DOWNSCALE_STEPS: Final = 8
"""Most scale-down attempts before giving up (each aims under the limit with a 10 % margin)."""


def base64_length(size_bytes: int) -> int:
    """Characters of the base64 text (with padding) of ``size_bytes`` bytes."""
    return 4 * math.ceil(size_bytes / 3)


@dataclass(frozen=True)
class FittedImage:
    """An encoded image within the limit: its bytes, format, size (width, height in
    pixels) and how it was fitted (``None``: as asked)."""

    data: bytes
    format: ImageFormat
    size: tuple[int, int]
    fitted: Literal["reencoded", "downscaled"] | None


def fit_encode(
    image: Image.Image,
    fmt: ImageFormat,
    quality: int,
    size: tuple[int, int],
    max_base64_bytes: int,
) -> FittedImage:
    """Encode ``image`` at ``size`` as ``fmt``, within ``max_base64_bytes`` of base64.

    Args:
        image: an ``RGB`` image (any size; it is resized to ``size`` first).
        fmt: the asked format (``"png"``, ``"jpeg"`` or ``"webp"``).
        quality: the asked JPEG/WebP quality (1..95).
        size: the asked (width, height) in pixels.
        max_base64_bytes: the longest base64 text the image may have.

    Returns:
        The image as asked when it fits; else JPEG at the first of
        :data:`REENCODE_QUALITIES` that fits (``"reencoded"``); else JPEG at
        :data:`DOWNSCALE_QUALITY`, scaled down, aspect kept (``"downscaled"``).

    Raises:
        InvalidActionError: ``fmt``, ``quality`` or ``size`` is malformed.
        CaptureError: encoding failed, or no scaled-down image fits (a limit far below
            any image).
    """
    data = ScreenCapture.encode(image, fmt=fmt, quality=quality, size=size)
    if base64_length(len(data)) <= max_base64_bytes:
        return FittedImage(data, fmt, size, None)
    resized = image if image.size == size else image.resize(size, Image.Resampling.BOX)
    for q in REENCODE_QUALITIES:
        if fmt == "jpeg" and q >= quality:
            continue
        data = ScreenCapture.encode(resized, fmt="jpeg", quality=q)
        if base64_length(len(data)) <= max_base64_bytes:
            return FittedImage(data, "jpeg", size, "reencoded")
        if base64_length(len(data)) > HOPELESS_FACTOR * max_base64_bytes:
            break  # lower qualities will not get there: scale down at once
    width, height = size
    for _ in range(MAX_DOWNSCALE_STEPS):
        ratio = min(0.9, 0.9 * math.sqrt(max_base64_bytes / base64_length(len(data))))
        width, height = max(1, math.floor(width * ratio)), max(1, math.floor(height * ratio))
        data = ScreenCapture.encode(resized, fmt="jpeg", quality=DOWNSCALE_QUALITY, size=(width, height))
        if base64_length(len(data)) <= max_base64_bytes:
            return FittedImage(data, "jpeg", (width, height), "downscaled")
        if width == 1 and height == 1:
            break
    raise CaptureError(
        f"no image of the screen fits in {max_base64_bytes} bytes of base64",
        detail={"max_base64_bytes": max_base64_bytes},
    )
