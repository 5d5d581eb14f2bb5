"""Coordinates: mapping the model space to the screen and back."""

from __future__ import annotations

from pydantic import BaseModel

from deskpod.errors import OutOfBoundsError
from deskpod.protocol.actions import (
    Click,
    DoubleClick,
    Drag,
    DropFiles,
    MouseDown,
    MouseUp,
    Move,
    Point,
    Scroll,
    Size,
    TripleClick,
    Zoom,
)

__all__ = ["CoordinateMap", "action_points", "fit_within"]

class CoordinateMap:
    """Maps model-space pixels to screen pixels for one screen and one model space.

    The scale is always computed from the two sizes, never assumed to be 1.0.
    Bounds are checked in model space: valid model
    coordinates are ``0 <= x < model.width`` and ``0 <= y < model.height``.

    Args:
        screen: the X screen's size in pixels.
        model: the size of the images the model receives; ``None`` means the screen.
    """

    def __init__(self, screen: Size, model: Size | None = None) -> None:
        self.screen = screen
        self.model = model or screen
        self.scale_x = screen.width / self.model.width
        self.scale_y = screen.height / self.model.height

    def to_screen(self, x: int, y: int) -> tuple[int, int]:
        """Map a model-space point to the screen pixel it covers.

        Args:
            x: model-space pixels from the left.
            y: model-space pixels from the top.

        Returns:
            ``(round(x * scale_x), round(y * scale_y))`` screen pixels, clamped into
            the screen (so the model's last pixel maps to the screen's last one).

        Raises:
            OutOfBoundsError: the point lies outside the model space.
        """
        self.check(x, y)
        sx = min(self.screen.width - 1, max(0, round(x * self.scale_x)))
        sy = min(self.screen.height - 1, max(0, round(y * self.scale_y)))
        return sx, sy

    def to_model(self, sx: float, sy: float) -> tuple[int, int]:
        """Map a screen point (pixels) to the model-space pixel that covers it, clamped."""
        x = min(self.model.width - 1, max(0, round(sx / self.scale_x)))
        y = min(self.model.height - 1, max(0, round(sy / self.scale_y)))
        return x, y

    def check(self, x: int, y: int) -> None:
        """Raise :class:`OutOfBoundsError` unless (x, y) lies in the model space."""
        if not (0 <= x < self.model.width and 0 <= y < self.model.height):
            raise OutOfBoundsError(
                f"point ({x}, {y}) is outside the {self.model.width}x{self.model.height} model space",
                detail={"x": x, "y": y, "width": self.model.width, "height": self.model.height},
            )


def fit_within(screen: Size, max_dimension: int) -> Size:
    """Scale ``screen`` down (never up), aspect kept, so its longer side is at most
    ``max_dimension`` pixels; each side at least 1."""
    factor = min(1.0, max_dimension / max(screen.width, screen.height))
    return Size(width=max(1, round(screen.width * factor)), height=max(1, round(screen.height * factor)))


def action_points(action: BaseModel) -> list[Point]:
    """Return every model-space point an action touches (empty for key, type, wait...).

    A zoom region contributes its top-left corner and its last pixel (x1 - 1, y1 - 1).
    """
    if isinstance(action, Drag):
        return list(action.path)
    if isinstance(action, Zoom):
        x0, y0, x1, y1 = action.region
        return [Point(x=x0, y=y0), Point(x=x1 - 1, y=y1 - 1)]
    if isinstance(action, (Click, DoubleClick, TripleClick, MouseDown, MouseUp)):
        return [] if action.x is None or action.y is None else [Point(x=action.x, y=action.y)]
    if isinstance(action, (Move, Scroll, DropFiles)):
        return [Point(x=action.x, y=action.y)]
    return []
