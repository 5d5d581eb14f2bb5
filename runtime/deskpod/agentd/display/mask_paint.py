"""Painting opaque boxes over the places a secret shows, before an image is encoded.

:class:`MaskPlan` is what :class:`~deskpod.agentd.secret_mask.SecretMask` found on the
page (boxes in screen pixels, a tooltip near the pointer, or nothing readable: the
whole screen); :func:`paint_mask` paints it on a screen image or a crop of one, on the
thread that captured it.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageDraw

__all__ = ["MASK_COLOUR", "MaskPlan", "NO_MASK", "TOOLTIP_BOX_PX", "no_mask", "paint_mask"]

MASK_COLOUR = (0, 0, 0)
"""The colour of a mask box (opaque black)."""

TOOLTIP_BOX_PX = (-16, 0, 496, 72)
"""The area painted for a tooltip holding a secret, relative to the pointer (screen pixels
``dx0, dy0, dx1, dy1``): Chromium draws a tooltip just below and right of the pointer."""


@dataclass(frozen=True)
class MaskPlan:
    """What to paint over: ``boxes`` (screen pixels ``x0, y0, x1, y1``, ends exclusive),
    ``tooltip`` (the area :data:`TOOLTIP_BOX_PX` around the pointer) and ``whole`` (the
    page could not be read: everything)."""

    boxes: tuple[tuple[int, int, int, int], ...] = ()
    tooltip: bool = False
    whole: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to paint."""
        return not (self.boxes or self.tooltip or self.whole)


NO_MASK = MaskPlan()
"""The empty plan: nothing to paint over."""


async def no_mask() -> MaskPlan:
    """Nothing to paint over: the plan of a capturer no session's mask set is given to."""
    return NO_MASK


def paint_mask(image: Image.Image, plan: MaskPlan, pointer: tuple[int, int] | None,
               origin: tuple[int, int] = (0, 0)) -> tuple[Image.Image, int]:
    """``image`` with ``plan`` painted on it, and the count of boxes painted (``-1``: the
    whole image). ``image`` is unchanged; an empty plan returns it as it is.

    Args:
        image: a screen image, or a crop of one.
        plan: what to paint (screen pixels).
        pointer: the pointer, screen pixels (``None``: unknown; a tooltip then paints the
            whole image).
        origin: the screen pixel of ``image``'s top-left corner.
    """
    if plan.empty:
        return image, 0
    out = image.copy()
    draw = ImageDraw.Draw(out)
    if plan.whole or (plan.tooltip and pointer is None):
        draw.rectangle((0, 0, out.width, out.height), fill=MASK_COLOUR)
        return out, -1
    boxes = list(plan.boxes)
    if plan.tooltip and pointer is not None:
        dx0, dy0, dx1, dy1 = TOOLTIP_BOX_PX
        boxes.append((pointer[0] + dx0, pointer[1] + dy0, pointer[0] + dx1, pointer[1] + dy1))
    painted = 0
    for x0, y0, x1, y1 in boxes:
        box = (max(0, x0 - origin[0]), max(0, y0 - origin[1]),
               min(out.width, x1 - origin[0]), min(out.height, y1 - origin[1]))
        if box[2] > box[0] and box[3] > box[1]:
            draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=MASK_COLOUR)
            painted += 1
    return out, painted
