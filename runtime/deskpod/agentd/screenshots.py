"""Screenshots and zooms as the agent gets them: grabbed, encoded in the model space
within a byte limit, described with their scale back to screen pixels, with the
session's secrets painted over (:mod:`deskpod.agentd.display.mask_paint`) before encoding.

:class:`ScreenshotEncoder` runs on the executor's X thread (:mod:`deskpod.agentd.executor`).
An unchanged screen asked for with the same options reuses the last encoding; the raw
frame of each screenshot sent is kept (:class:`~deskpod.agentd.screen_check.FrameStore`)
for the screen check of the actions planned on it.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from typing import Any

from deskpod.agentd.display.capture import ScreenCapture, average_hash, draw_cursor
from deskpod.agentd.display.fit import FittedImage, fit_encode
from deskpod.agentd.display.mask_paint import NO_MASK, MaskPlan, paint_mask
from deskpod.agentd.screen_check import FrameStore, sha256_hex
from deskpod.protocol import CoordinateMap, Screenshot

__all__ = ["ScreenshotEncoder"]


class ScreenshotEncoder:
    """Encodes screenshots and zooms (see the module docstring).

    Args:
        frames: where the raw frames of the screenshots sent are kept, by their SHA-256.
    """

    def __init__(self, frames: FrameStore) -> None:
        self.frames = frames
        self._ids = itertools.count(1)
        self._last: tuple[tuple[Any, ...], tuple[FittedImage, str, int]] | None = None

    def shoot(self, capture: ScreenCapture, pointer: tuple[int, int] | None, coords: CoordinateMap, fmt: Any,
              quality: int, max_base64_bytes: int, keep: bool = True, mask: MaskPlan = NO_MASK,
              mouse: tuple[int, int] | None = None) -> tuple[FittedImage, str, int]:
        """Grab and encode the screen (or reuse the last encoding of the same frame).

        Args:
            capture: the X thread's capture object.
            pointer: where to draw the pointer, screen pixels (``None``: not drawn).
            coords: the model space the image is encoded in.
            fmt: ``"png"``, ``"jpeg"`` or ``"webp"``.
            quality: the lossy formats' quality, 1-100.
            max_base64_bytes: the longest base64 text the image may take.
            keep: the raw frame goes into :attr:`frames`, for screen checks bound to
                this screenshot (a prepared one is not sent, so it keeps none).
            mask: what to paint over before encoding (screen pixels).
            mouse: the pointer, screen pixels, for a tooltip in ``mask`` (``None``: unknown).

        Returns:
            ``(image, perceptual hash, boxes painted)`` (``-1``: the whole screen).
        """
        frame = capture.grab_frame()
        size = (coords.model.width, coords.model.height)
        key = (frame.digest, fmt, quality, size, pointer, max_base64_bytes, mask, mouse if mask.tooltip else None)
        if self._last is not None and self._last[0] == key:
            if keep:
                self.frames.put(sha256_hex(self._last[1][0].data), frame)
            return self._last[1]
        image, masked = paint_mask(frame.image(), mask, mouse)
        phash = average_hash(image)
        if pointer is not None:
            image = draw_cursor(image, *pointer)
        fitted = fit_encode(image, fmt, quality, size, max_base64_bytes)
        self._last = (key, (fitted, phash, masked))
        if keep:
            self.frames.put(sha256_hex(fitted.data), frame)
        return fitted, phash, masked

    @staticmethod
    def crop(capture: ScreenCapture, box: tuple[int, int, int, int], max_base64_bytes: int,
             mask: MaskPlan = NO_MASK, mouse: tuple[int, int] | None = None) -> tuple[FittedImage, int]:
        """A PNG of the screen's ``box`` (screen pixels ``x0, y0, x1, y1``), within
        ``max_base64_bytes`` of base64, with ``mask`` painted over (``mouse``: as for
        :meth:`shoot`), and the count of boxes painted on it."""
        image, masked = paint_mask(capture.grab().crop(box), mask, mouse, (box[0], box[1]))
        return fit_encode(image, "png", 80, image.size, max_base64_bytes), masked

    def describe(self, image: FittedImage, coords: CoordinateMap, scale: tuple[float, float],
                 offset: tuple[int, int] = (0, 0), masked: int = 0) -> Screenshot:
        """The :class:`~deskpod.protocol.Screenshot` of an encoded image, with a new id.

        Args:
            image: the encoded image.
            coords: the session's model space (for the screen size).
            scale: screen pixels per image pixel, ``(x, y)``.
            offset: the screen pixel of the image's top-left corner.
            masked: the boxes painted over secrets (``-1``: the whole image).
        """
        data = image.data
        sx, sy = scale
        return Screenshot(
            id=f"s-{next(self._ids)}",
            format=image.format,
            width=image.size[0],
            height=image.size[1],
            screen_width=coords.screen.width,
            screen_height=coords.screen.height,
            scale_x=sx,
            scale_y=sy,
            offset_x=offset[0],
            offset_y=offset[1],
            sha256=hashlib.sha256(data).hexdigest(),
            data=base64.b64encode(data).decode("ascii"),
            fitted=image.fitted,
            masked=masked,
        )

    def forget(self) -> None:
        """Drop the last encoding and every kept frame (the X connection closed)."""
        self._last = None
        self.frames.clear()
