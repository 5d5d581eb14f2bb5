"""The pointer and keyboard verbs of :class:`~deskpod.client.sandbox.Sandbox`.

Each verb is one ``act`` request with one action (:mod:`deskpod.protocol.actions`),
checked against the protocol's models before it is sent, and answers the
:class:`~deskpod.protocol.Observation` after it. Coordinates are int pixels from the
top-left of the model space; durations are float seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from deskpod.client.wire import SandboxClient
from deskpod.client.workspace import ObserveLike, observe_options
from deskpod.protocol import Observation, Point, parse_action

__all__ = ["Button", "InputVerbs", "PointLike"]

Button = Literal["left", "right", "middle", "back", "forward"]
"""A mouse button of :meth:`InputVerbs.click` (``mouse_down``/``mouse_up`` take the first three)."""

PointLike = tuple[int, int] | Point
"""A model-space point: ``(x, y)`` or a :class:`~deskpod.protocol.Point`."""


def _point(point: PointLike) -> dict[str, int]:
    if isinstance(point, Point):
        return {"x": point.x, "y": point.y}
    x, y = point
    return {"x": x, "y": y}


def _at(x: int | None, y: int | None) -> dict[str, int]:
    """The ``x``/``y`` fields of a pointer action (none: where the pointer is)."""
    return {k: v for k, v in (("x", x), ("y", y)) if v is not None}


class InputVerbs:
    """The pointer and keyboard verbs, on the connection :attr:`client` (a base of
    :class:`~deskpod.client.sandbox.Sandbox`)."""

    client: SandboxClient
    """The connection the requests go to."""

    async def _one(self, action: dict[str, Any], observe: ObserveLike, timeout_s: float = 60.0) -> Observation:
        """One ``act`` request holding ``action``, checked first (an :class:`~deskpod.errors.InvalidActionError`
        or a bad ``observe``'s :class:`~deskpod.errors.InvalidRequestError` sends nothing)."""
        return await self.client.act([parse_action(action, 0)], observe_options(observe), timeout_s,
                                     allow_downloads=False)

    async def click(self, x: int | None = None, y: int | None = None, button: Button = "left", *,
                    hold_keys: Sequence[str] = (), observe: ObserveLike = None) -> Observation:
        """Click ``button`` at (x, y), model space (neither: where the pointer is).

        Args:
            x: column, model-space pixels.
            y: row, model-space pixels.
            button: left, right, middle, back or forward.
            hold_keys: keys held down around the click, e.g. ``["shift"]``.
            observe: what the observation holds.

        Returns:
            The observation after the click.
        """
        return await self._one({"type": "click", **_at(x, y), "button": button, "hold_keys": list(hold_keys)},
                               observe)

    async def double_click(self, x: int | None = None, y: int | None = None, *, hold_keys: Sequence[str] = (),
                           observe: ObserveLike = None) -> Observation:
        """Double-click the left button at (x, y), model space (neither: where the pointer is).

        Returns:
            The observation after it (the page sees one ``dblclick``).
        """
        return await self._one({"type": "double_click", **_at(x, y), "hold_keys": list(hold_keys)}, observe)

    async def triple_click(self, x: int | None = None, y: int | None = None, *, hold_keys: Sequence[str] = (),
                           observe: ObserveLike = None) -> Observation:
        """Triple-click the left button at (x, y), model space (selects a paragraph).

        Returns:
            The observation after it.
        """
        return await self._one({"type": "triple_click", **_at(x, y), "hold_keys": list(hold_keys)}, observe)

    async def mouse_down(self, x: int | None = None, y: int | None = None,
                         button: Literal["left", "right", "middle"] = "left", *,
                         observe: ObserveLike = None) -> Observation:
        """Move to (x, y) if given, then press ``button`` and keep it down.

        The daemon releases it at :meth:`mouse_up`, or when a request fails or the
        connection ends.

        Returns:
            The observation with the button down.
        """
        return await self._one({"type": "mouse_down", **_at(x, y), "button": button}, observe)

    async def mouse_up(self, x: int | None = None, y: int | None = None,
                       button: Literal["left", "right", "middle"] = "left", *,
                       observe: ObserveLike = None) -> Observation:
        """Move to (x, y) if given, then release ``button``.

        Returns:
            The observation after the release.
        """
        return await self._one({"type": "mouse_up", **_at(x, y), "button": button}, observe)

    async def move(self, x: int, y: int, *, observe: ObserveLike = None) -> Observation:
        """Move the pointer to (x, y), model space.

        Returns:
            The observation after the move.
        """
        return await self._one({"type": "move", "x": x, "y": y}, observe)

    async def drag(self, path: Sequence[PointLike], *, observe: ObserveLike = None) -> Observation:
        """Press the left button at ``path[0]``, move through the points, release at the last.

        Args:
            path: two or more model-space points, ``(x, y)`` or :class:`~deskpod.protocol.Point`.
            observe: what the observation holds.

        Returns:
            The observation after the release (the button is released even when a step fails).
        """
        return await self._one({"type": "drag", "path": [_point(p) for p in path]}, observe)

    async def scroll(self, x: int, y: int, scroll_y: int = 0, scroll_x: int = 0, *, hold_keys: Sequence[str] = (),
                     observe: ObserveLike = None) -> Observation:
        """Move to (x, y) and turn the wheel.

        Args:
            x: column, model-space pixels.
            y: row, model-space pixels.
            scroll_y: wheel notches down (> 0) or up (< 0); never pixels, never scaled.
            scroll_x: wheel notches right (> 0) or left (< 0).
            hold_keys: keys held down meanwhile, e.g. ``["shift"]``.
            observe: what the observation holds.

        Returns:
            The observation after scrolling.
        """
        return await self._one({"type": "scroll", "x": x, "y": y, "scroll_x": scroll_x, "scroll_y": scroll_y,
                                "hold_keys": list(hold_keys)}, observe)

    async def keypress(self, *keys: str, observe: ObserveLike = None) -> Observation:
        """Press ``keys`` as one chord, modifiers first, e.g. ``keypress("CTRL", "a")`` or ``keypress("ctrl+a")``.

        Returns:
            The observation after the chord.

        Raises:
            UnknownKeyError: a key has no name the daemon knows (nothing is pressed).
        """
        return await self._one({"type": "keypress", "keys": list(keys)}, observe)

    async def hold_key(self, *keys: str, seconds: float, observe: ObserveLike = None) -> Observation:
        """Hold ``keys`` down (one chord) for ``seconds``, then release them in reverse order.

        Returns:
            The observation after the release.
        """
        return await self._one({"type": "hold_key", "keys": list(keys), "seconds": seconds}, observe,
                               timeout_s=seconds + 60.0)

    async def type_text(self, text: str, *, observe: ObserveLike = None) -> Observation:
        """Type ``text`` exactly (any Unicode; ``\\n`` and ``\\t`` press Return and Tab).

        Returns:
            The observation after typing.
        """
        return await self._one({"type": "type", "text": text}, observe)
