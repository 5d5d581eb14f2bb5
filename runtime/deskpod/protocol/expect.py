"""Conditions the controller attaches to an ``act`` request: act only on the screen it judged.

An agent plans a pointer action on a screenshot; the page can change before the
input arrives (a banner inserted above a button, a label swapped on the first
``mousemove``). :class:`ScreenExpectation` says what must still hold right before
the daemon sends a pointer action's input; otherwise the daemon refuses the request
with :class:`~deskpod.errors.ScreenChangedError` (code ``screen_changed``) and sends
nothing. The controller decides what to expect; the daemon only enforces it.

:func:`expectation` builds one for an action from the observation whose screenshot it was
planned on: the one binding every host-side caller uses, the controller's GUI run (the
screenshot it last returned to the agent, or the one a person approved) and the bare
vendor adapters (:mod:`deskpod.adapters`: the screenshot the adapter last returned to
the model).
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT, Sha256
from deskpod.protocol.actions import ELEMENT_ACTION_TYPES, Action
from deskpod.protocol.limits import MAX_URL_CHARS
from deskpod.protocol.observation import AgentWindow, ElementInfo, FocusedElement, Observation

__all__ = ["BOUND_POINTER_ACTIONS", "PRESS_ACTIONS", "SCREEN_CHECK_MIN_DELTA", "SCREEN_CHECK_RADIUS_PX",
           "SCREEN_CHECK_TOLERANCE_PX", "ScreenExpectation", "expectation"]

PRESS_ACTIONS = frozenset({"click", "double_click", "triple_click", "mouse_down", "mouse_up"})
"""Pointer actions that press or release a button where the pointer is: the daemon
checks the screen region before the pointer moves and the control after it."""

BOUND_POINTER_ACTIONS = PRESS_ACTIONS | {"drag", "scroll"}
"""Every action an expectation binds: the press actions, and drags and scrolls
(checked on their points' regions only)."""


class ScreenExpectation(BaseModel):
    """What must still be true when the daemon sends the input of the request's pointer
    actions (:data:`BOUND_POINTER_ACTIONS`), or of every action when ``radius_px`` is
    ``None`` (an approval binds to the whole screen whatever the action).

    ``screenshot_sha256``: the :attr:`~deskpod.protocol.Screenshot.sha256` of the
    screenshot the actions were planned on. The daemon keeps the raw frames (screen
    pixels, no drawn pointer, before any lossy encoding) of its last few screenshots
    keyed by that hash; right before the pointer moves for an action it compares that
    frame with the screen now, on the square of side ``2 * radius_px`` (model-space
    pixels) centred on each of the action's points, or on the whole screen when
    ``radius_px`` is ``None``. A pixel differs when one of its channels differs by at
    least ``min_delta`` (1: any change; more lets a control's hover shading pass: the
    pointer's own move onto it can repaint it, and a page may repaint hover late after
    a load). More than ``tolerance_px`` differing pixels, or a hash it no longer keeps,
    is a refusal. ``None``: no region check.

    ``element``: the control the controller judged under the point of the request's
    first press action; compared after the pointer has moved there and the page has
    handled the move, on every field but ``box``. ``None``: not compared.

    ``window``: the agent's window the controller judged on top at that point
    (:attr:`~deskpod.protocol.Observation.window_at`); compared with ``element``, on every
    field but ``box``: ``None`` then means none may be there (a window of the agent's
    programs that came over the point since is a refusal).

    ``press_guard``: with ``element``, hold the judged control to the press itself: before
    the press the daemon arms a guard in every frame of the page (an isolated world's
    capture listeners on ``window``, registered before the page's scripts), and a press
    event (``pointerdown``, ``mousedown``, ``pointerup``, ``mouseup``, ``click``,
    ``auxclick``, ``dblclick``, ``contextmenu``) whose target is not the node judged under
    the point, or whose control's label changed since the check, is stopped before any of
    the page's listeners and its default action prevented; the request is then refused with
    reason ``"press"``, as it is when the page did not receive the press (Chromium drops
    input to a page it has not drawn yet). ``False``: the checks before the press only (the behaviour before the
    guard, which the ``swap`` benchmark compares it with).

    ``url``: the active tab's URL the controller judged; compared right before each
    checked action's input. ``None``: not compared.

    ``focus``: the focused element the controller judged (a credential goes only into the
    password field it checked); compared, on every field, right before each checked
    action's input, with the region and the URL; a window of the agent's programs with
    the keyboard focus then is a refusal too (the keys would go to it). ``None``: not compared.
    """

    model_config = STRICT
    screenshot_sha256: Sha256 | None = None
    radius_px: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = 24
    tolerance_px: Annotated[int, Field(strict=True, ge=0, le=1 << 24)] = 0
    min_delta: Annotated[int, Field(strict=True, ge=1, le=255)] = 1
    element: ElementInfo | None = None
    window: Annotated[AgentWindow | None, Field(exclude_if=lambda window: window is None)] = None
    press_guard: Annotated[bool, Field(strict=True, exclude_if=lambda guard: guard)] = True
    url: Annotated[str, Field(max_length=MAX_URL_CHARS)] | None = None
    focus: FocusedElement | None = None


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
        judged: the observation the action was judged on: the controller's classifier's
            (its ``element_at`` is the control under the point, its ``url`` the page), or
            ``seen`` itself where nothing judged it (a bare vendor adapter: its ``url`` is
            compared, and no control unless ``seen`` probed one).
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
        window=judged.window_at,
        url=judged.url,
    )
