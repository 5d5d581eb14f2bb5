"""Mouse and keyboard input through the X server's XTEST extension (python-xlib).

One :class:`XInput` per daemon. Every call, including construction and :meth:`XInput.close`,
must come from one thread, serially (the daemon's single-worker executor); the only
exception is setting a ``cancel`` event, which any thread may do. No command line is ever
built: input goes straight to the X server as XTEST fake events, so text starting with
``-`` is typed like any other.

Coordinates are int screen pixels from the top-left of the X screen. Durations are float
seconds.

:class:`XInput` holds the pointer verbs and what they hold down, and extends the
keyboard's (:mod:`deskpod.agentd.display.xkeyboard`); they stand on two parts with one job
each: :mod:`deskpod.agentd.display.xconn` (the X connection: XTEST requests, syncs, X
errors, the focused client's ``_NET_WM_PING``) and :mod:`deskpod.agentd.display.xkeymap`
(where each keysym is on the keymap, and the spare keycodes that type any other Unicode
character).

Each remap of a spare keycode is one ``MappingNotify`` to every client. The window manager
handles each one (openbox reloads its key bindings), and meanwhile its synchronous
click-to-focus grab keeps the pointer frozen: right after a burst of 18 new characters, a
click's release was processed up to 0.4 s late. :meth:`XInput.click` (and the other button
methods) therefore return only once the server has really processed the release, so a
click and the keys typed after it reach the page in that order.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Final

from Xlib import X, Xatom
from Xlib import error as xerror

from deskpod.agentd.display.xconn import X_FAILURES, XConnection, check_cancel, translating
from deskpod.agentd.display.xkeyboard import XKeyboard
from deskpod.errors import (
    DeskpodError,
    InputError,
    InvalidActionError,
    OutOfBoundsError,
)

__all__ = [
    "BUTTONS",
    "CLICK_GAP_MS",
    "DRAG_STEP_INTERVAL_S",
    "DRAG_STEP_PX",
    "POINTER_RELEASE_TIMEOUT_S",
    "SCROLL_NOTCH_INTERVAL_S",
    "XInput",
]

log = logging.getLogger(__name__)

BUTTONS: Final[dict[str, int]] = {
    "left": 1,
    "middle": 2,
    "wheel": 2,  # OpenAI's name for the middle button
    "right": 3,
    "back": 8,
    "forward": 9,
}
"""Button names accepted by :meth:`XInput.click` and friends → X button numbers."""

_WHEEL_UP, _WHEEL_DOWN, _WHEEL_LEFT, _WHEEL_RIGHT = 4, 5, 6, 7

CLICK_GAP_MS: Final = 15
"""Gap between the presses of a double or triple click, in milliseconds. The whole
click is one batch of requests; the X server itself spaces the presses (XTEST's delay
field), because Chromium ignores a press with the same timestamp as the previous one
when it counts clicks."""

DRAG_STEP_PX: Final = 20
"""Longest pointer step during a drag, in screen pixels; segments are interpolated."""

DRAG_STEP_INTERVAL_S: Final = 0.01
"""Pause between the pointer steps of a drag, so pages see distinct mousemove events."""

SCROLL_NOTCH_INTERVAL_S: Final = 0.025
"""Default pause between wheel notches. Chromium merges notches that arrive within one
frame into one ``wheel`` event; 25 ms apart, pages see one event per notch, as with a
real wheel (measured: 16 ms was the shortest gap that never merged here)."""

POINTER_RELEASE_TIMEOUT_S: Final = 5.0
"""Longest wait for the X server to process a button release (see ``_wait_until_released``)."""

_RELEASE_POLL_FIRST_S: Final = 0.0002
_RELEASE_POLL_MAX_S: Final = 0.005
"""The pointer state is asked again after 0.2 ms, then twice as long each time up to 5 ms:
the window manager replays a grabbed press within a millisecond or two when idle."""

MAX_CLICK_COUNT: Final = 3
_BUTTON_MASKS: Final = {
    1: X.Button1Mask,
    2: X.Button2Mask,
    3: X.Button3Mask,
    4: X.Button4Mask,
    5: X.Button5Mask,
}

class XInput(XKeyboard):
    """Synthesises pointer and keyboard input on one X display through XTEST (the
    keyboard verbs are :class:`~deskpod.agentd.display.xkeyboard.XKeyboard`'s).

    Args:
        display_name: the X display, e.g. ``":99"``; ``None`` uses ``$DISPLAY``.
        unpinged: whether a top-level window is an agent's client's, which is not pinged
            (:attr:`~deskpod.agentd.display.xconn.XConnection.unpinged`).

    Raises:
        InputError: the display cannot be opened, or the server lacks XTEST.
    """

    def __init__(self, display_name: str | None = None, unpinged: Callable[[int], bool] | None = None) -> None:
        conn = XConnection(display_name, unpinged)
        self.display_name: str = conn.display_name
        # Buttons pressed by this object and not yet released, in press order.
        self._held_buttons: dict[int, None] = {}
        try:
            super().__init__(conn)
            conn.sync()
        except BaseException as exc:
            conn.abandon(exc)
        log.debug("XInput on %s: %d spare keycodes", self.display_name, len(self._keys.spares))

    @property
    def sent(self) -> dict[str, int]:
        """The DOM events the input sent so far makes a page see, counted:
        ``pointerdown`` and ``pointerup`` (left button presses and releases) and
        ``keyup`` (key releases: one for every key that comes up)."""
        sent = self._conn.sent
        return {"pointerdown": sent[X.ButtonPress, 1], "pointerup": sent[X.ButtonRelease, 1],
                "keyup": sent[X.KeyRelease, 0]}

    # -- pointer ---------------------------------------------------------------------------

    @property
    @translating
    def screen_size(self) -> tuple[int, int]:
        """(width, height) of the X screen in pixels, read from the server on each call."""
        geometry = self._conn.root.get_geometry()
        return int(geometry.width), int(geometry.height)

    @translating
    def pointer_position(self) -> tuple[int, int]:
        """Return the pointer position (x, y) in screen pixels from the top-left.

        Raises:
            InputError: the X server cannot be reached.
        """
        pointer = self._conn.root.query_pointer()
        return int(pointer.root_x), int(pointer.root_y)

    @translating
    def active_window(self) -> tuple[int, str | None] | None:
        """The window the window manager has active (the root window's ``_NET_ACTIVE_WINDOW``,
        EWMH: https://specifications.freedesktop.org/wm-spec/latest/) and its title
        (``_NET_WM_NAME``, else ``WM_NAME``; ``None``: none), read together: its X resource id
        says whose window it is. The title is the client's own text: untrusted. ``None``: no
        window is active.

        Raises:
            InputError: the X server cannot be reached, or the window went away meanwhile.
        """
        display, root = self._conn.display, self._conn.root
        active = root.get_full_property(display.intern_atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW)
        if active is None or not len(active.value) or not active.value[0]:
            return None
        window = display.create_resource_object("window", int(active.value[0]))
        title = window.get_full_text_property(display.intern_atom("_NET_WM_NAME"), display.intern_atom("UTF8_STRING")) \
            or window.get_full_text_property(Xatom.WM_NAME, X.AnyPropertyType)
        return int(active.value[0]), (title if isinstance(title, str) and title else None)

    @translating
    def move(self, x: int, y: int) -> None:
        """Move the pointer to (x, y), screen pixels from the top-left.

        Raises:
            OutOfBoundsError: (x, y) is outside the screen; the pointer does not move.
            InputError: the X server rejected or did not get the event.
        """
        self._check_point(x, y)
        self._conn.fake(X.MotionNotify, x=x, y=y)
        self._conn.sync()

    @translating
    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        """Move to (x, y) and click ``count`` times with ``button``.

        The presses and releases of a multi-click go out as one batch of requests, the
        presses :data:`CLICK_GAP_MS` apart (server-side), so the page gets one ``dblclick``
        with ``detail == 2`` (or ``detail == 3`` for a triple click). Returns once the
        server has processed the release (see the module docstring on frozen pointers).

        Args:
            x: screen pixels from the left.
            y: screen pixels from the top.
            button: ``left``, ``middle`` (alias ``wheel``), ``right``, ``back`` or
                ``forward`` (X buttons 1, 2, 3, 8, 9).
            count: 1 (click), 2 (double click) or 3 (triple click).

        Raises:
            InvalidActionError: unknown ``button`` or ``count`` outside 1..3.
            OutOfBoundsError: (x, y) is outside the screen; nothing is sent.
            InputError: the X server failed, or the release was still not processed after
                :data:`POINTER_RELEASE_TIMEOUT_S`; the button is released.
        """
        number = self._button_number(button)
        if not isinstance(count, int) or not 1 <= count <= MAX_CLICK_COUNT:
            raise InvalidActionError(
                f"click count must be 1..{MAX_CLICK_COUNT}, got {count!r}",
                detail={"count": count},
            )
        self._check_point(x, y)
        try:
            self._conn.fake(X.MotionNotify, x=x, y=y)
            for index in range(count):
                self._held_buttons[number] = None
                self._conn.fake(X.ButtonPress, number, delay_ms=CLICK_GAP_MS if index else 0)
                self._conn.fake(X.ButtonRelease, number)
                self._held_buttons.pop(number, None)
            self._conn.sync()
            self._wait_until_released(number)
        finally:
            self._release_buttons_on_error(number)

    @translating
    def button_down(self, button: str = "left") -> None:
        """Press ``button`` where the pointer is and keep it down (see :meth:`button_up`).

        Raises:
            InvalidActionError: unknown ``button``.
            InputError: the X server failed.
        """
        number = self._button_number(button)
        self._held_buttons[number] = None
        self._conn.fake(X.ButtonPress, number)
        self._conn.sync()

    @translating
    def button_up(self, button: str = "left") -> None:
        """Release ``button`` where the pointer is.

        Raises:
            InvalidActionError: unknown ``button``.
            InputError: the X server failed.
        """
        number = self._button_number(button)
        self._held_buttons.pop(number, None)
        self._conn.fake(X.ButtonRelease, number)
        self._conn.sync()
        self._wait_until_released(number)

    @translating
    def drag(
        self,
        path: Sequence[tuple[int, int]],
        button: str = "left",
        cancel: threading.Event | None = None,
    ) -> None:
        """Press at ``path[0]``, move through the other points, release at the last one.

        Each segment is walked in steps of at most :data:`DRAG_STEP_PX` pixels,
        :data:`DRAG_STEP_INTERVAL_S` apart, so pages see a stream of mousemove events. The
        button is released whatever happens.

        Args:
            path: points (x, y) in screen pixels from the top-left; at least one.
            button: as for :meth:`click`.
            cancel: when set (from any thread), the drag stops at the next step, releases
                the button where the pointer is and raises :class:`InputError`.

        Raises:
            InvalidActionError: empty ``path`` or unknown ``button``.
            OutOfBoundsError: a point is outside the screen; nothing is sent.
            InputError: the X server failed, or ``cancel`` was set.
        """
        number = self._button_number(button)
        points = [(int(x), int(y)) for x, y in path]
        if not points:
            raise InvalidActionError("drag path is empty", detail={"path": []})
        for x, y in points:
            self._check_point(x, y)
        self._conn.fake(X.MotionNotify, x=points[0][0], y=points[0][1])
        self._held_buttons[number] = None
        try:
            self._conn.fake(X.ButtonPress, number)
            self._conn.flush_and_pause(DRAG_STEP_INTERVAL_S)
            for (x0, y0), (x1, y1) in itertools.pairwise(points):
                steps = max(1, -(-max(abs(x1 - x0), abs(y1 - y0)) // DRAG_STEP_PX))
                for step in range(1, steps + 1):
                    check_cancel(cancel, "drag")
                    self._conn.fake(
                        X.MotionNotify,
                        x=round(x0 + (x1 - x0) * step / steps),
                        y=round(y0 + (y1 - y0) * step / steps),
                    )
                    self._conn.flush_and_pause(DRAG_STEP_INTERVAL_S)
        finally:
            self._held_buttons.pop(number, None)
            self._conn.fake(X.ButtonRelease, number)
            self._conn.sync()
            self._wait_until_released(number)

    @translating
    def scroll(
        self,
        x: int,
        y: int,
        dx_notches: int,
        dy_notches: int,
        cancel: threading.Event | None = None,
        notch_interval_s: float = SCROLL_NOTCH_INTERVAL_S,
    ) -> None:
        """Move to (x, y) and turn the wheel by whole notches (never scaled).

        Vertical first: ``|dy_notches|`` clicks of button 5 (down, ``dy_notches > 0``) or
        4 (up), then ``|dx_notches|`` clicks of button 7 (right, ``dx_notches > 0``) or 6
        (left). Notches are ``notch_interval_s`` apart, like a real wheel; sent back to
        back, Chromium merges them into fewer ``wheel`` events (same total delta).

        Args:
            x: screen pixels from the left.
            y: screen pixels from the top.
            dx_notches: horizontal wheel notches, positive scrolls right.
            dy_notches: vertical wheel notches, positive scrolls down.
            cancel: when set (from any thread), stops before the next notch and raises
                :class:`InputError`.
            notch_interval_s: pause between notches, seconds; 0 sends them in one batch.

        Raises:
            InvalidActionError: a notch count is not an int.
            OutOfBoundsError: (x, y) is outside the screen; nothing is sent.
            InputError: the X server failed, or ``cancel`` was set.
        """
        for name, value in (("dx_notches", dx_notches), ("dy_notches", dy_notches)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidActionError(
                    f"{name} must be an int, got {value!r}", detail={name: repr(value)}
                )
        self._check_point(x, y)
        self._conn.fake(X.MotionNotify, x=x, y=y)
        for notches, positive, negative in (
            (dy_notches, _WHEEL_DOWN, _WHEEL_UP),
            (dx_notches, _WHEEL_RIGHT, _WHEEL_LEFT),
        ):
            number = positive if notches > 0 else negative
            for index in range(abs(notches)):
                check_cancel(cancel, "scroll")
                if index and notch_interval_s > 0:
                    self._conn.flush_and_pause(notch_interval_s)
                self._conn.fake(X.ButtonPress, number)
                self._conn.fake(X.ButtonRelease, number)
            if notches:
                self._conn.sync()
                self._wait_until_released(number)
        self._conn.sync()

    @translating
    def release_all(self) -> None:
        """Release every key and button this object pressed and has not released.

        Used on errors, timeouts and disconnects. Keys come up in reverse press
        order, then buttons. If the X connection itself is gone, there is nothing left to
        release: the X server lets go of what an XTEST client held when it disconnects
        (observed with Xvfb 21.1).

        Returns once the server has processed the releases (a window manager's frozen
        pointer grab can delay a button release; see the module docstring).

        Raises:
            InputError: the releases could not be sent (the connection is broken), or a
                button still reads as down after :data:`POINTER_RELEASE_TIMEOUT_S`; the
                object no longer counts anything as held.
        """
        held_keys = list(self._held_keys)
        held_buttons = list(self._held_buttons)
        self._held_keys.clear()
        self._held_buttons.clear()
        if not held_keys and not held_buttons:
            return
        for keycode in reversed(held_keys):
            self._conn.fake(X.KeyRelease, keycode, closing=True)
        for number in reversed(held_buttons):
            self._conn.fake(X.ButtonRelease, number, closing=True)
        self._conn.sync()
        for number in held_buttons:
            self._wait_until_released(number)

    def close(self) -> None:
        """Release what is held, give the spare keycodes back and close the connection.

        Safe to call twice; errors while closing are logged, not raised.
        """
        if self._conn.closed:
            return
        self._conn.closed = True
        try:
            self.release_all()
            self._keys.restore()
            self._conn.display.sync()
        except (DeskpodError, *X_FAILURES) as exc:
            log.warning("error while closing XInput on %s: %s", self.display_name, exc)
        finally:
            self._conn.close()

    def _wait_until_released(self, number: int) -> None:
        """Wait until the server has really processed the release of button ``number``.

        A window manager's synchronous button grab (openbox's click-to-focus) freezes the
        pointer until the WM replays the press; while the WM is busy (e.g. with a burst
        of MappingNotify after Unicode typing) our release sits in the server's queue, and
        keys typed now would reach the page before the click. Only buttons 1-5 show in the
        pointer state; the others are not waited for.
        """
        mask = _BUTTON_MASKS.get(number)
        if mask is None:
            return
        deadline = time.monotonic() + POINTER_RELEASE_TIMEOUT_S
        pause_s = _RELEASE_POLL_FIRST_S
        while self._conn.root.query_pointer().mask & mask:
            if time.monotonic() > deadline:
                raise InputError(
                    f"button {number} still reads as down {POINTER_RELEASE_TIMEOUT_S} s after"
                    " its release: another client holds the pointer frozen",
                    detail={"button": number},
                )
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, _RELEASE_POLL_MAX_S)

    def _check_point(self, x: int, y: int) -> None:
        width, height = self.screen_size
        if not (isinstance(x, int) and isinstance(y, int) and 0 <= x < width and 0 <= y < height):
            raise OutOfBoundsError(
                f"point ({x}, {y}) is outside the {width}x{height} screen",
                detail={"x": x, "y": y, "screen": [width, height]},
            )

    @staticmethod
    def _button_number(button: str) -> int:
        number = BUTTONS.get(button) if isinstance(button, str) else None
        if number is None:
            raise InvalidActionError(
                f"unknown mouse button {button!r}; expected one of "
                "left, middle, right, back, forward",
                detail={"button": repr(button)},
            )
        return number

    def _release_buttons_on_error(self, number: int) -> None:
        if number in self._held_buttons:
            self._held_buttons.pop(number, None)
            with suppress(xerror.XError, xerror.ConnectionClosedError, OSError):
                self._conn.fake(X.ButtonRelease, number)
                self._conn.display.flush()
