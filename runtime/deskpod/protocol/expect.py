"""Conditions the controller attaches to an ``act`` request: act only on the screen it judged.

An agent plans a pointer action on a screenshot; the page can change before the
input arrives (a banner inserted above a button, a label swapped on the first
``mousemove``). :class:`ScreenExpectation` says what must still hold right before
the daemon sends a pointer action's input; otherwise the daemon refuses the request
with :class:`~deskpod.errors.ScreenChangedError` (code ``screen_changed``) and sends
nothing. The controller decides what to expect; the daemon only enforces it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT, Sha256
from deskpod.protocol.limits import MAX_URL_CHARS
from deskpod.protocol.observation import ElementInfo, FocusedElement

__all__ = ["BOUND_POINTER_ACTIONS", "PRESS_ACTIONS", "ScreenExpectation"]

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

    ``url``: the active tab's URL the controller judged; compared right before each
    checked action's input. ``None``: not compared.

    ``focus``: the focused element the controller judged (a credential goes only into the
    password field it checked); compared, on every field, right before each checked
    action's input, with the region and the URL. ``None``: not compared.
    """

    model_config = STRICT
    screenshot_sha256: Sha256 | None = None
    radius_px: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = 24
    tolerance_px: Annotated[int, Field(strict=True, ge=0, le=1 << 24)] = 0
    min_delta: Annotated[int, Field(strict=True, ge=1, le=255)] = 1
    element: ElementInfo | None = None
    url: Annotated[str, Field(max_length=MAX_URL_CHARS)] | None = None
    focus: FocusedElement | None = None
