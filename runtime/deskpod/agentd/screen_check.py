"""The daemon's check that a pointer action lands on the screen it was planned on.

The controller attaches a :class:`~deskpod.protocol.ScreenExpectation` to an ``act``
request; the executor enforces it for every bound pointer action
(:data:`~deskpod.protocol.BOUND_POINTER_ACTIONS`), right before that action's input:

1. **Region, before the pointer moves.** The raw frame of the screenshot the action
   was planned on (kept by :class:`FrameStore`, keyed by the screenshot's SHA-256) is
   compared with a fresh grab on the square around each point. Raw frames are screen
   pixels as the X server holds them: no pointer is drawn into them (``cursor`` only
   draws one into the encoded copy) and no JPEG or WebP loss, so equal pixels compare
   exactly whatever format the agent was sent. The comparison is made before the
   move because moving the pointer onto a control legitimately repaints it (CSS
   ``:hover``, a link's underline).
2. **Control, after the pointer has moved** (the request's first press, when the
   expectation names the control). The pointer is moved to the point, the browser is
   asked to confirm it has taken the motion event off its X queue (``_NET_WM_PING``)
   and the page to run two animation frames (Chromium dispatches ``mousemove`` aligned
   with animation frames), so a page that swaps a label on the first ``mousemove`` has
   done it; then the element under the point is compared
   with the one the controller judged (every field but ``box``), so is the window of the
   agent's programs on top there, if any (an agent's command granted the display may map
   one over the browser), and the active
   tab's URL with the one it judged (the browser is asked by
   :meth:`deskpod.agentd.observe.Observer.control_check`, compared by :func:`check_control`).
   Keys bound to a focused element are refused while an agent's window has the keyboard focus.

3. **The press itself** (with ``press_guard``): before that control check the daemon arms a
   guard in the page (:mod:`deskpod.agentd.browser.press_guard`) with the node under the
   point; the page's press events are stopped before any of its listeners when their
   target is not that node or the control changed since, and the request is then refused
   (reason ``"press"``). Without it, the few milliseconds between the last check and the
   press (the next call on the executor thread) were a page's to swap the control in. A compromised daemon can skip all of
this (it is the daemon's zone); the controller's own checks are the second line.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

from PIL import Image, ImageChops

from deskpod.agentd.display.capture import Frame
from deskpod.errors import ScreenChangedError
from deskpod.protocol import AgentWindow, CoordinateMap, ElementInfo, FocusedElement, ScreenExpectation

__all__ = [
    "AfterPress",
    "ControlCheck",
    "FrameStore",
    "KEPT_FRAMES",
    "MOVE_HANDLED_SCRIPT",
    "changed_pixels",
    "check_control",
    "check_region",
    "region_box",
    "same_control",
    "same_focus",
    "same_window",
    "sha256_hex",
]

KEPT_FRAMES: Final = 6
"""Raw frames of the last screenshots the daemon keeps (about 4 MB each at 1280x800):
enough for the agent's screenshot plus the controller's confirmation screenshots."""

MOVE_HANDLED_SCRIPT: Final = """new Promise((done) => {
  const cap = setTimeout(done, 200);
  requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(() => { clearTimeout(cap); done(null); }, 0)));
})"""
"""Resolves once the page has run two animation frames and the tasks queued behind
them (at most 200 ms): the ``mousemove`` of a motion the browser has already read
has then been dispatched and handled."""

AfterPress = Callable[[str | None], Awaitable[None]]
"""``after(kind)``: called once the press action ``kind`` has been sent (``None``: it was
not, it failed first); disarms the press guard and raises
:class:`~deskpod.errors.ScreenChangedError` (reason ``"press"``) when it stopped the press."""

ControlCheck = Callable[[int, tuple[int, int], bool, str], Awaitable[AfterPress | None]]
"""``check(action_index, model_point, first_press, kind)``: called right before the input of
the action of type ``kind`` at
``model_point`` (model-space pixels), after the pointer has moved there and the browser
has read the motion when ``first_press`` and the expectation names a control; raises
:class:`~deskpod.errors.ScreenChangedError` when the control or URL differ. Returns the
:data:`AfterPress` of the press guard it armed (``first_press`` with a control to hold
the press to, and ``press_guard``), else ``None``."""


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` as 64 lower-case hex digits (a screenshot's ``sha256``)."""
    return hashlib.sha256(data).hexdigest()


class FrameStore:
    """The raw frames of the daemon's last :data:`KEPT_FRAMES` screenshots, by the
    SHA-256 of the encoded screenshot they became. Used from the executor thread only."""

    def __init__(self, capacity: int = KEPT_FRAMES) -> None:
        self.capacity = capacity
        self._frames: OrderedDict[str, Frame] = OrderedDict()

    def put(self, sha256: str, frame: Frame) -> None:
        """Remember ``frame`` as the one the screenshot ``sha256`` was encoded from."""
        self._frames[sha256] = frame
        self._frames.move_to_end(sha256)
        while len(self._frames) > self.capacity:
            self._frames.popitem(last=False)

    def get(self, sha256: str) -> Frame | None:
        """The frame of screenshot ``sha256``, or ``None`` when it is not (or no longer) kept."""
        return self._frames.get(sha256)

    def clear(self) -> None:
        """Forget every frame (the display was reopened: old frames describe another screen)."""
        self._frames.clear()


def region_box(point: tuple[int, int], radius: int | None, screen: tuple[int, int]) -> tuple[int, int, int, int]:
    """The square around ``point`` clipped to the screen, as ``(x0, y0, x1, y1)``.

    Args:
        point: screen pixels.
        radius: half the side, screen pixels; ``None``: the whole screen.
        screen: the screen's (width, height), pixels.

    Returns:
        The box in screen pixels, ``x1``/``y1`` exclusive, never empty.
    """
    width, height = screen
    if radius is None:
        return 0, 0, width, height
    x, y = point
    x0, y0 = max(0, min(width - 1, x - radius)), max(0, min(height - 1, y - radius))
    return x0, y0, max(x0 + 1, min(width, x + radius)), max(y0 + 1, min(height, y + radius))


def changed_pixels(before: Frame, now: Frame, box: tuple[int, int, int, int], min_delta: int = 1) -> int:
    """How many pixels of ``box`` differ between two frames of one screen (a channel by at
    least ``min_delta``); every pixel of the box when the frames' sizes differ.

    Args:
        before: the frame the action was planned on.
        now: a fresh grab.
        box: screen pixels ``(x0, y0, x1, y1)``, ``x1``/``y1`` exclusive.
        min_delta: the smallest channel difference (0..255) that counts.
    """
    x0, y0, x1, y1 = box
    if before.size != now.size:
        return (x1 - x0) * (y1 - y0)
    if before.digest == now.digest:
        return 0
    return _changed(_crop(before, box), _crop(now, box), min_delta)


def _crop(frame: Frame, box: tuple[int, int, int, int]) -> Image.Image:
    """The ``box`` of ``frame`` as an ``RGB`` image, decoding only its rows' pixels."""
    x0, y0, x1, y1 = box
    width = frame.size[0]
    if box == (0, 0, *frame.size):
        return frame.image()
    rows = b"".join(frame.raw[4 * (y * width + x0):4 * (y * width + x1)] for y in range(y0, y1))
    return Image.frombytes("RGB", (x1 - x0, y1 - y0), rows, "raw", "BGRX")


def _changed(before: Image.Image, now: Image.Image, min_delta: int) -> int:
    diff = ImageChops.difference(before, now)
    red, green, blue = diff.split()
    mask = ImageChops.lighter(ImageChops.lighter(red, green), blue).point(lambda v: 255 if v >= min_delta else 0)
    return int(mask.histogram()[255])


def check_region(expect: ScreenExpectation, frames: FrameStore, now: Frame, points: list[tuple[int, int]],
                 coords: CoordinateMap, index: int) -> None:
    """Refuse unless the screen around each of an action's points is the one it was planned on.

    Args:
        expect: the request's expectation (``screenshot_sha256`` ``None``: nothing to check).
        frames: the kept raw frames.
        now: a fresh grab, before the pointer moves.
        points: the action's points, screen pixels.
        coords: the session's model space (``radius_px`` is in model-space pixels).
        index: the action's index in the batch, for the error.

    Raises:
        ScreenChangedError: the screenshot is not kept (``reason`` ``"unknown_screenshot"``)
            or more than ``tolerance_px`` pixels of a region differ (``"region"``).
    """
    if expect.screenshot_sha256 is None:
        return
    before = frames.get(expect.screenshot_sha256)
    if before is None:
        raise ScreenChangedError("the screenshot this action was planned on is no longer known to the sandbox; "
                                 "observe again", detail={"reason": "unknown_screenshot", "action_index": index})
    radius = None
    if expect.radius_px is not None:
        radius = max(1, round(expect.radius_px * max(coords.scale_x, coords.scale_y)))
    if before.digest == now.digest:
        return
    if before.size != now.size:
        raise ScreenChangedError("the screen's size changed since the screenshot this action was planned on; "
                                 "nothing was pressed", detail={"reason": "region", "action_index": index})
    for point in points if radius is not None else points[:1]:
        box = region_box(point, radius, now.size)
        changed = _changed(_crop(before, box), _crop(now, box), expect.min_delta)
        if changed > expect.tolerance_px:
            where = "the screen" if radius is None else f"the screen around ({point[0]}, {point[1]})"
            raise ScreenChangedError(
                f"{where} changed since the screenshot this action was planned on ({changed} pixels); "
                "nothing was pressed", detail={"reason": "region", "action_index": index, "changed_px": changed})


def same_control(expected: ElementInfo | None, now: ElementInfo | None) -> bool:
    """True when ``now`` is the control ``expected`` describes: equal on every field but
    ``box`` (the element may have been judged through a probe that moved nothing)."""
    if expected is None or now is None:
        return expected is None and now is None
    return expected.model_dump(exclude={"box"}) == now.model_dump(exclude={"box"})


def same_window(expected: AgentWindow | None, now: AgentWindow | None) -> bool:
    """True when ``now`` is the agent's window ``expected`` describes (every field but ``box``),
    or neither names one."""
    if expected is None or now is None:
        return expected is None and now is None
    return expected.model_dump(exclude={"box"}) == now.model_dump(exclude={"box"})


_NEIGHBOURHOOD: Final = frozenset({"near_buttons", "form_labels"})
"""What :class:`~deskpod.protocol.FocusedElement` says about the focused element's neighbours, not
about the element: a live label beside a field ("Resend code (29 s)") does not make it another one."""


def same_focus(expected: FocusedElement, now: FocusedElement | None) -> bool:
    """True when ``now`` is the focused element ``expected`` describes: equal on every field but
    the labels of its neighbours (the buttons beside it, its form's labels)."""
    return now is not None and expected.model_dump(exclude=set(_NEIGHBOURHOOD)) == now.model_dump(
        exclude=set(_NEIGHBOURHOOD))


def check_control(expect: ScreenExpectation, element: ElementInfo | None, url: str | None,
                  index: int, first_press: bool, focus: FocusedElement | None = None,
                  window: AgentWindow | None = None, focus_window: AgentWindow | None = None) -> None:
    """Refuse unless the control under the moved pointer, the agent's window over it (if any),
    the page's URL and the focus are the judged ones.

    Args:
        expect: the request's expectation.
        element: the element under the point now, as :class:`~deskpod.protocol.ElementInfo`.
        url: the active tab's URL now (``None``: unknown).
        index: the action's index in the batch.
        first_press: the action is the request's first press action (``expect.element``
            describes its point).
        focus: the focused element now (read only when ``expect.focus`` is given).
        window: the agent's window on top at the point now (read with ``element``).
        focus_window: the agent's window with the keyboard focus now (read with ``focus``).

    Raises:
        ScreenChangedError: ``reason`` ``"url"``, ``"element"`` or ``"focus"``.
    """
    if expect.url is not None and url != expect.url:
        raise ScreenChangedError("the page's URL changed since this action was judged; nothing was pressed",
                                 detail={"reason": "url", "action_index": index})
    if first_press and expect.element is not None and not same_control(expect.element, element):
        raise ScreenChangedError("the control under the pointer is not the one this action was judged on; "
                                 "nothing was pressed", detail={"reason": "element", "action_index": index})
    if first_press and expect.element is not None and not same_window(expect.window, window):
        raise ScreenChangedError("the window of the agent's programs on top at the point is not the one this "
                                 "action was judged on; nothing was pressed",
                                 detail={"reason": "element", "action_index": index})
    if expect.focus is not None and not same_focus(expect.focus, focus):
        raise ScreenChangedError("the focused element is not the one this action was judged on; nothing was typed",
                                 detail={"reason": "focus", "action_index": index})
    if expect.focus is not None and focus_window is not None:
        raise ScreenChangedError("a window of the agent's programs has the keyboard focus; nothing was typed",
                                 detail={"reason": "focus", "action_index": index})
