"""Bind each pointer action to the screen it was planned on (the controller's half).

The controller knows which screenshot it last returned to the agent and which control
its classifier judged under the action's point; :func:`expectation` turns them into
the :class:`~deskpod.protocol.ScreenExpectation` attached to the ``act`` request. The
daemon enforces it right before the input (:mod:`deskpod.agentd.screen_check`) and
otherwise answers ``screen_changed``; the run then gives the agent a fresh observation
(the step is refused, not failed). A confirmation binds the same way to the whole
screen the human approved, so the window between the check and the input is the
daemon's few milliseconds, not a round trip.
"""

from __future__ import annotations

from typing import Final

from deskpod.protocol import BOUND_POINTER_ACTIONS, ELEMENT_ACTION_TYPES, Action, Observation, ScreenExpectation

__all__ = ["SCREEN_CHECK_MIN_DELTA", "SCREEN_CHECK_RADIUS_PX", "SCREEN_CHECK_TOLERANCE_PX", "expectation"]

SCREEN_CHECK_RADIUS_PX: Final = 24
"""Half the side of the square compared around a pointer action's point, model-space
pixels: 48x48 covers a typical control's label around the point."""

SCREEN_CHECK_TOLERANCE_PX: Final = 64
"""Pixels of that square that may differ: a few stray pixels are not a change; a label
swapped or a layout shifted under the point changes hundreds."""

SCREEN_CHECK_MIN_DELTA: Final = 48
"""The smallest channel difference (0..255) that makes a pixel of that square differ.
Hover shading must pass: after a load Chromium repaints the control under a pointer
that has not moved (its hover state) some time later, so the agent's screenshot may
show it either way; Chromium's default button shades from #efefef to #e5e5e5 and its
border from #767676 to #4f4f4f on hover. Seen: with 1, three enforcement tests whose
first click lands where the previous test had left the pointer were refused; with 48
they pass. Text, a banner or a control moving in change pixels far more than 48 levels."""


def expectation(action: Action, seen: Observation, judged: Observation,
                whole_screen: bool = False) -> ScreenExpectation | None:
    """What the daemon must still find right before ``action``'s input.

    Args:
        action: the action about to be sent.
        seen: the observation whose screenshot the action was planned on (the agent's,
            or the one a human approved).
        judged: the observation the classifier judged the action on (its ``element_at``
            is the control under the point, its ``url`` the page).
        whole_screen: compare the whole screen exactly (an approval binds to all of
            it), for any kind of action; otherwise only bound pointer actions
            (:data:`~deskpod.protocol.BOUND_POINTER_ACTIONS`) and element actions the
            daemon resolves itself (``select_option``, a ``fill_form`` choice: checked at
            their ref's point) are checked, on the square around their points.

    Returns:
        The expectation, or ``None`` when the action is not checked.
    """
    if not whole_screen and action.type not in BOUND_POINTER_ACTIONS and action.type not in ELEMENT_ACTION_TYPES:
        return None
    shot = seen.screenshot
    return ScreenExpectation(
        screenshot_sha256=shot.sha256 if shot is not None else None,
        radius_px=None if whole_screen else SCREEN_CHECK_RADIUS_PX,
        tolerance_px=0 if whole_screen else SCREEN_CHECK_TOLERANCE_PX,
        min_delta=1 if whole_screen else SCREEN_CHECK_MIN_DELTA,
        element=judged.element_at,
        url=judged.url,
    )
