"""Mouse and keyboard input through the X server's XTEST extension (python-xlib).

One :class:`XInput` per daemon. Every call, including construction and :meth:`XInput.close`,
must come from one thread, serially (the daemon's single-worker executor); the only
exception is setting a ``cancel`` event, which any thread may do. No command line is ever
built: input goes straight to the X server as XTEST fake events, so text starting with
``-`` is typed like any other.

Coordinates are int screen pixels from the top-left of the X screen. Durations are float
seconds.

Typing arbitrary Unicode
-------------------------------
A character whose keysym is on the current keymap (level 1, or level 2 with Shift) is
typed with that key. Any other character is typed on a *spare* keycode: one with no
keysyms in the layout, remapped (core ``ChangeKeyboardMapping``) to the character's keysym,
``0x01000000 + code point`` outside Latin-1. The spare keycodes are recorded on the root
window (property ``DESKPOD_SPARE_KEYCODES``) so that a daemon restarted after a crash
reclaims them.

Remapped spares stay mapped and are reused while the same characters come back, so a
text is planned in bursts: all the spares a burst needs are remapped first, then its keys
are sent back to back. A new burst starts only when the spares run out; it remaps the
least recently used ones, never one the current burst still needs. Two waits make this
reliable rather than lucky (both measured against Chromium on Xvfb):

- after a remap, :data:`REMAP_SETTLE_S`, because Chromium refetches its keymap after the
  ``MappingNotify`` (which the server sends before any later key event) asynchronously:
  without the pause, a new character was now and then typed as the keycode's previous
  one;
- before a spare is remapped again, until the focused client has handled every key sent
  so far, because Chromium applies a new keymap even to key events it has received but
  not yet handled, and XTEST sends keys far faster than Chromium handles them (about
  1 ms per character here, so it can be seconds behind). Without this wait about half
  the characters of a 120-character text with 60 distinct CJK characters came out wrong.
  The client confirms with a ``_NET_WM_PING`` round trip (:meth:`XInput.wait_until_handled`),
  which it answers from its event loop after the earlier key events; for a client that
  does not answer pings, the wait is estimated at :data:`CLIENT_KEY_TAP_S` per key plus
  :data:`REMAP_GUARD_S`.

:meth:`XInput.close` empties the spares it remapped; no other key of the layout is ever
changed.

Each remap is one ``MappingNotify`` to every client. The window manager handles each one
(openbox reloads its key bindings), and meanwhile its synchronous click-to-focus grab
keeps the pointer frozen: right after a burst of 18 new characters, a click's release was
processed up to 0.4 s late. :meth:`XInput.click` (and the other button methods) therefore
return only once the server has really processed the release, so a click and the keys
typed after it reach the page in that order.
"""

from __future__ import annotations

import functools
import itertools
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final, ParamSpec, TypeVar

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import xtest
from Xlib.protocol import event as xevent

from deskpod import keys
from deskpod.errors import (
    DeskpodError,
    InputError,
    InvalidActionError,
    OutOfBoundsError,
)

__all__ = [
    "BUTTONS",
    "CLICK_GAP_MS",
    "CLIENT_KEY_TAP_S",
    "DRAG_STEP_INTERVAL_S",
    "DRAG_STEP_PX",
    "PING_TIMEOUT_S",
    "POINTER_RELEASE_TIMEOUT_S",
    "REMAP_GUARD_S",
    "REMAP_SETTLE_S",
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

REMAP_SETTLE_S: Final = 0.05
"""Pause after remapping spare keycodes and before the first key event that uses them."""

CLIENT_KEY_TAP_S: Final = 0.01
"""For a focused client that does not answer ``_NET_WM_PING`` only: the assumed upper
bound on the time it needs to handle one key tap. (Chromium, which answers pings, took
about 1.3 ms per character in an idle text field; 3 ms was not enough with four desktops
sharing two cores.)"""

REMAP_GUARD_S: Final = 0.05
"""Margin added to that estimate before a spare keycode is remapped."""

DRAG_STEP_PX: Final = 20
"""Longest pointer step during a drag, in screen pixels; segments are interpolated."""

DRAG_STEP_INTERVAL_S: Final = 0.01
"""Pause between the pointer steps of a drag, so pages see distinct mousemove events."""

SCROLL_NOTCH_INTERVAL_S: Final = 0.025
"""Default pause between wheel notches. Chromium merges notches that arrive within one
frame into one ``wheel`` event; 25 ms apart, pages see one event per notch, as with a
real wheel (measured: 16 ms was the shortest gap that never merged here)."""

PING_TIMEOUT_S: Final = 10.0
"""Longest wait for the focused client's ``_NET_WM_PING`` answer (see
:meth:`XInput.wait_until_handled`)."""

POINTER_RELEASE_TIMEOUT_S: Final = 5.0
"""Longest wait for the X server to process a button release (see ``_wait_until_released``)."""

MAX_CLICK_COUNT: Final = 3
_BUTTON_MASKS: Final = {
    1: X.Button1Mask,
    2: X.Button2Mask,
    3: X.Button3Mask,
    4: X.Button4Mask,
    5: X.Button5Mask,
}

_SHIFT_KEYSYM: Final = keys.keysym_value("Shift_L")
_CAPS_LOCK_KEYSYM: Final = keys.keysym_value("Caps_Lock")
_NO_SYMBOL: Final = 0
_PING_TOKEN_BASE: Final = 0x7D000000  # far from a window manager's own ping serials
_MAX_WINDOW_DEPTH: Final = 16
_SPARE_PROPERTY: Final = "DESKPOD_SPARE_KEYCODES"
"""Root-window property listing the keycodes deskpod uses as spares (CARDINAL[])."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _translating(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn python-xlib and socket failures into :class:`InputError` (once, here)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except DeskpodError:
            raise
        except (xerror.XError, xerror.ConnectionClosedError, xerror.DisplayError, OSError) as exc:
            raise InputError(
                f"X input failed in {method.__name__}: {type(exc).__name__}: {exc}",
                detail={"operation": method.__name__},
            ) from exc

    return wrapper


class XInput:
    """Synthesises pointer and keyboard input on one X display through XTEST.

    Args:
        display_name: the X display, e.g. ``":99"``; ``None`` uses ``$DISPLAY``.

    Raises:
        InputError: the display cannot be opened, or the server lacks XTEST.
    """

    def __init__(self, display_name: str | None = None) -> None:
        self._closed = False
        try:
            self._display = Display(display_name)
        except (xerror.DisplayError, xerror.XauthError, xerror.XNoAuthError, OSError) as exc:
            raise InputError(
                f"cannot open X display {display_name or '$DISPLAY'!r}: {exc}",
                detail={"display": display_name},
            ) from exc
        self.display_name: str = self._display.get_display_name()
        try:
            if not self._display.has_extension("XTEST"):
                raise InputError(
                    f"X display {self.display_name!r} has no XTEST extension",
                    detail={"display": self.display_name},
                )
            self._setup()
        except BaseException as exc:
            with suppress(xerror.XError, xerror.ConnectionClosedError, OSError):
                self._display.close()
            if isinstance(exc, (xerror.XError, xerror.ConnectionClosedError, OSError)):
                raise InputError(
                    f"cannot set up input on X display {self.display_name!r}: {exc}",
                    detail={"display": self.display_name},
                ) from exc
            raise

    def _setup(self) -> None:
        self._x_errors: list[str] = []
        self._display.set_error_handler(self._on_x_error)
        self._root = self._display.screen().root
        info = self._display.display.info
        self._min_keycode: int = info.min_keycode
        self._max_keycode: int = info.max_keycode
        # Keys and buttons pressed by this object and not yet released, in press order.
        self._held_keys: dict[int, int] = {}  # keycode -> keysym it was pressed for
        self._held_buttons: dict[int, None] = {}
        self._rows: dict[int, tuple[int, ...]] = {}  # keycode -> all its core keysyms
        self._keymap: dict[int, list[int]] = {}  # keycode -> [plain, shifted] keysym
        self._spare_keysym: dict[int, int] = {}  # spare keycode -> keysym we mapped on it
        self._refresh_keymap()
        self._spares: list[int] = self._claim_spares()
        # Key taps sent so far; per spare keycode, the tap that last used it; and the last
        # tap the focused client has confirmed handling (_NET_WM_PING round trip).
        self._tap_seq = 0
        self._spare_last_seq: dict[int, int] = dict.fromkeys(self._spares, 0)
        self._confirmed_seq = 0
        # Fallback when the focused client cannot be pinged: monotonic time by which
        # clients are assumed to have handled every key sent so far, and the same
        # estimate per spare keycode for its last use.
        self._handled_by = 0.0
        self._spare_handled_by: dict[int, float] = dict.fromkeys(self._spares, 0.0)
        self._wm_protocols = self._display.intern_atom("WM_PROTOCOLS")
        self._net_wm_ping = self._display.intern_atom("_NET_WM_PING")
        self._ping_tokens = itertools.count(_PING_TOKEN_BASE)
        # Pongs come back to the root window with SubstructureNotify.
        self._root.change_attributes(event_mask=X.SubstructureNotifyMask)
        self._sync()
        log.debug("XInput on %s: %d spare keycodes", self.display_name, len(self._spares))

    # -- pointer ---------------------------------------------------------------------------

    @property
    @_translating
    def screen_size(self) -> tuple[int, int]:
        """(width, height) of the X screen in pixels, read from the server on each call."""
        geometry = self._root.get_geometry()
        return int(geometry.width), int(geometry.height)

    @_translating
    def pointer_position(self) -> tuple[int, int]:
        """Return the pointer position (x, y) in screen pixels from the top-left.

        Raises:
            InputError: the X server cannot be reached.
        """
        pointer = self._root.query_pointer()
        return int(pointer.root_x), int(pointer.root_y)

    @_translating
    def move(self, x: int, y: int) -> None:
        """Move the pointer to (x, y), screen pixels from the top-left.

        Raises:
            OutOfBoundsError: (x, y) is outside the screen; the pointer does not move.
            InputError: the X server rejected or did not get the event.
        """
        self._check_point(x, y)
        self._fake(X.MotionNotify, x=x, y=y)
        self._sync()

    @_translating
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
            self._fake(X.MotionNotify, x=x, y=y)
            for index in range(count):
                self._held_buttons[number] = None
                self._fake(X.ButtonPress, number, delay_ms=CLICK_GAP_MS if index else 0)
                self._fake(X.ButtonRelease, number)
                self._held_buttons.pop(number, None)
            self._sync()
            self._wait_until_released(number)
        finally:
            self._release_buttons_on_error(number)

    @_translating
    def button_down(self, button: str = "left") -> None:
        """Press ``button`` where the pointer is and keep it down (see :meth:`button_up`).

        Raises:
            InvalidActionError: unknown ``button``.
            InputError: the X server failed.
        """
        number = self._button_number(button)
        self._held_buttons[number] = None
        self._fake(X.ButtonPress, number)
        self._sync()

    @_translating
    def button_up(self, button: str = "left") -> None:
        """Release ``button`` where the pointer is.

        Raises:
            InvalidActionError: unknown ``button``.
            InputError: the X server failed.
        """
        number = self._button_number(button)
        self._held_buttons.pop(number, None)
        self._fake(X.ButtonRelease, number)
        self._sync()
        self._wait_until_released(number)

    @_translating
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
        self._fake(X.MotionNotify, x=points[0][0], y=points[0][1])
        self._held_buttons[number] = None
        try:
            self._fake(X.ButtonPress, number)
            self._flush_and_pause(DRAG_STEP_INTERVAL_S)
            for (x0, y0), (x1, y1) in itertools.pairwise(points):
                steps = max(1, -(-max(abs(x1 - x0), abs(y1 - y0)) // DRAG_STEP_PX))
                for step in range(1, steps + 1):
                    self._check_cancel(cancel, "drag")
                    self._fake(
                        X.MotionNotify,
                        x=round(x0 + (x1 - x0) * step / steps),
                        y=round(y0 + (y1 - y0) * step / steps),
                    )
                    self._flush_and_pause(DRAG_STEP_INTERVAL_S)
        finally:
            self._held_buttons.pop(number, None)
            self._fake(X.ButtonRelease, number)
            self._sync()
            self._wait_until_released(number)

    @_translating
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
        self._fake(X.MotionNotify, x=x, y=y)
        for notches, positive, negative in (
            (dy_notches, _WHEEL_DOWN, _WHEEL_UP),
            (dx_notches, _WHEEL_RIGHT, _WHEEL_LEFT),
        ):
            number = positive if notches > 0 else negative
            for index in range(abs(notches)):
                self._check_cancel(cancel, "scroll")
                if index and notch_interval_s > 0:
                    self._flush_and_pause(notch_interval_s)
                self._fake(X.ButtonPress, number)
                self._fake(X.ButtonRelease, number)
            if notches:
                self._sync()
                self._wait_until_released(number)
        self._sync()

    # -- keyboard --------------------------------------------------------------------------

    @_translating
    def keypress(self, names: Sequence[str]) -> None:
        """Press one chord: hold the keys down together, then release them.

        Every name is resolved first (:func:`deskpod.keys.resolve_chord`), so an unknown
        name fails before anything is pressed. Modifiers go down first, then the other
        keys in the caller's order; everything comes up in reverse order, in a ``finally``.
        A non-modifier key that lives on the Shift level (``"!"``, or ``"A"`` alone) gets
        Shift added unless the chord holds Shift already; letters inside a chord with
        Ctrl/Alt/Super are taken as their keys (``["CTRL", "A"]`` is Ctrl+A).

        Args:
            names: key names in any spelling :mod:`deskpod.keys` accepts, e.g.
                ``["CTRL", "A"]``, ``["Return"]``, ``keys.parse_chord("ctrl+shift+t")``.

        Raises:
            UnknownKeyError: a name is unknown (``detail["key"]``); nothing was pressed.
            InputError: the X server failed, or a key needs a spare keycode and the keymap
                has none; everything pressed is released.
        """
        keysym_names = keys.resolve_chord(names)
        keysyms = [keys.keysym_value(name) for name in keysym_names]
        self._refresh_keymap()
        located = self._locate_all(keysyms)
        chord_has_shift = any(name in ("Shift_L", "Shift_R") for name in keysym_names)
        presses: list[tuple[int, int]] = []  # (keycode, keysym) in pressing order
        shift_needed = False
        for name, keysym, (keycode, shifted) in zip(keysym_names, keysyms, located, strict=True):
            presses.append((keycode, keysym))
            if shifted and not keys.is_modifier(name) and not chord_has_shift:
                shift_needed = True
        if shift_needed:
            shift = self._shift_keycode()
            first_plain = next(
                (i for i, name in enumerate(keysym_names) if not keys.is_modifier(name)),
                len(presses),
            )
            presses.insert(first_plain, (shift, _SHIFT_KEYSYM))
        pressed: list[int] = []
        try:
            for keycode, keysym in presses:
                if keycode in self._held_keys:
                    continue  # already held (e.g. by key_down); leave it as it is
                self._held_keys[keycode] = keysym
                pressed.append(keycode)
                self._fake(X.KeyPress, keycode)
        finally:
            for keycode in reversed(pressed):
                self._held_keys.pop(keycode, None)
                self._fake(X.KeyRelease, keycode)
            for code, _ in presses:
                self._account_taps([code])
            self._sync()

    @_translating
    def key_down(self, name: str) -> None:
        """Press one key and keep it down until :meth:`key_up` or :meth:`release_all`.

        The key's keycode is pressed as is (no Shift is added), as for a held modifier.

        Args:
            name: one key name in any spelling :mod:`deskpod.keys` accepts.

        Raises:
            UnknownKeyError: the name is unknown; nothing is pressed.
            InputError: the X server failed.
        """
        keysym = keys.keysym_value(name)
        self._refresh_keymap()
        ((keycode, _),) = self._locate_all([keysym])
        if keycode in self._held_keys:
            return
        self._held_keys[keycode] = keysym
        self._fake(X.KeyPress, keycode)
        self._account_taps([keycode])
        self._sync()

    @_translating
    def key_up(self, name: str) -> None:
        """Release a key pressed by :meth:`key_down`; a key not held is left alone.

        Args:
            name: the key name, in any accepted spelling.

        Raises:
            UnknownKeyError: the name is unknown.
            InputError: the X server failed.
        """
        keysym = keys.keysym_value(name)
        for keycode, held in list(self._held_keys.items()):
            if held == keysym:
                del self._held_keys[keycode]
                self._fake(X.KeyRelease, keycode)
                self._account_taps([keycode])
        self._sync()

    @_translating
    def type_text(
        self, text: str, delay_s: float = 0.0, cancel: threading.Event | None = None
    ) -> None:
        """Type ``text`` exactly, character by character, whatever the keyboard layout.

        Any Unicode text is accepted: emoji with skin-tone modifiers, CJK, Greek, "€",
        text starting with "-". ``"\\n"``, ``"\\r\\n"`` and ``"\\r"`` press Return, ``"\\t"``
        presses Tab. Characters not on the keymap go through spare keycodes (see the
        module docstring). Caps Lock, if on, is switched off while typing and back on
        after. Typing assumes no modifier is being held with :meth:`key_down`.

        Args:
            text: the text to type.
            delay_s: pause between characters, seconds (0 sends them back to back).
            cancel: when set (from any thread), typing stops before the next character
                and :class:`InputError` is raised; what was typed stays typed.

        Raises:
            UnknownKeyError: ``text`` holds a control character other than newline, carriage
                return and tab (``detail["key"]`` is ``"U+XXXX"``); nothing is typed.
            InputError: the X server failed, the keymap has no spare keycode for a
                character that needs one, or ``cancel`` was set.
        """
        if delay_s < 0:
            raise InvalidActionError("delay_s must be >= 0", detail={"delay_s": delay_s})
        normalised = text.replace("\r\n", "\n").replace("\r", "\n")
        keysyms = [keys.char_keysym(char) for char in normalised]
        if not keysyms:
            return
        self._refresh_keymap()
        with self._caps_lock_off():
            start = 0
            while start < len(keysyms):
                end, remaps, plan = self._plan_burst(keysyms, start)
                if remaps:
                    self._remap(remaps, cancel)
                self._type_burst(plan, delay_s, cancel)
                start = end
        self._sync()

    @_translating
    def wait_until_handled(
        self, timeout_s: float = PING_TIMEOUT_S, cancel: threading.Event | None = None
    ) -> bool:
        """Wait until the client with the keyboard focus has handled all input sent so far.

        Sends the focused top-level window a ``_NET_WM_PING`` (EWMH) and waits for its
        answer. A client answers from its X event loop, in order, so the answer means it
        has taken every earlier key and button event off its queue (Chromium: the browser
        process has translated them and passed them on to the page, which may still be a
        frame behind). Useful before a screenshot after long typing: XTEST sends keys
        far faster than Chromium handles them.

        Args:
            timeout_s: longest wait for the answer, seconds.
            cancel: when set (from any thread), stop waiting and raise :class:`InputError`.

        Returns:
            True once the client answered; False at once if no window has the focus or the
            focused client does not support ``_NET_WM_PING``.

        Raises:
            InputError: no answer within ``timeout_s`` (the client is hung or far behind),
                ``cancel`` was set, or the X server failed.
        """
        target = self._ping_target()
        if target is None:
            return False
        confirmed = self._tap_seq
        token = next(self._ping_tokens) & 0xFFFFFFFF
        target.send_event(
            xevent.ClientMessage(
                window=target,
                client_type=self._wm_protocols,
                data=(32, [self._net_wm_ping, token, target.id, 0, 0]),
            ),
            event_mask=X.NoEventMask,
        )
        self._display.flush()
        deadline = time.monotonic() + timeout_s
        while True:
            while self._display.pending_events():
                event = self._display.next_event()
                if (
                    event.type == X.ClientMessage
                    and event.client_type == self._wm_protocols
                    and list(event.data[1][:2]) == [self._net_wm_ping, token]
                ):
                    self._confirmed_seq = max(self._confirmed_seq, confirmed)
                    return True
            self._check_cancel(cancel, "waiting for the focused client")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InputError(
                    f"the focused window 0x{target.id:x} did not confirm handling input "
                    f"within {timeout_s} s",
                    detail={"window": target.id, "timeout_s": timeout_s},
                )
            select.select([self._display.fileno()], [], [], min(remaining, 0.05))

    @_translating
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
            xtest.fake_input(self._display, X.KeyRelease, keycode)
        for number in reversed(held_buttons):
            xtest.fake_input(self._display, X.ButtonRelease, number)
        self._sync()
        for number in held_buttons:
            self._wait_until_released(number)

    def close(self) -> None:
        """Release what is held, give the spare keycodes back and close the connection.

        Safe to call twice; errors while closing are logged, not raised.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.release_all()
            self._refresh_keymap()
            for keycode, keysym in self._spare_keysym.items():
                if self._keymap.get(keycode) != [keysym, keysym]:
                    continue  # someone else has remapped it since; not ours to undo
                self._display.change_keyboard_mapping(keycode, [(_NO_SYMBOL, _NO_SYMBOL)])
            self._spare_keysym.clear()
            self._display.sync()
        except (DeskpodError, xerror.XError, xerror.ConnectionClosedError, OSError) as exc:
            log.warning("error while closing XInput on %s: %s", self.display_name, exc)
        finally:
            with suppress(xerror.XError, xerror.ConnectionClosedError, OSError):
                self._display.close()

    # -- internals: requests ---------------------------------------------------------------

    def _on_x_error(self, err: xerror.XError, request: Any) -> None:
        self._x_errors.append(str(err))

    def _fake(
        self, event_type: int, detail: int = 0, x: int = 0, y: int = 0, delay_ms: int = 0
    ) -> None:
        if self._closed:
            raise InputError("XInput is closed", detail={"display": self.display_name})
        # For XTEST, "time" is a delay in ms before the server processes the event.
        xtest.fake_input(self._display, event_type, detail, time=delay_ms, x=x, y=y)

    def _sync(self) -> None:
        """Wait until the server has processed everything; raise any X error it reported."""
        self._display.sync()
        while self._display.pending_events():  # MappingNotify etc.; we select no events
            self._display.next_event()
        if self._x_errors:
            errors, self._x_errors = self._x_errors, []
            raise InputError(f"X server rejected input: {'; '.join(errors)[:500]}")

    def _flush_and_pause(self, seconds: float) -> None:
        self._display.flush()
        if seconds > 0:
            time.sleep(seconds)

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
        while self._root.query_pointer().mask & mask:
            if time.monotonic() > deadline:
                raise InputError(
                    f"button {number} still reads as down {POINTER_RELEASE_TIMEOUT_S} s after"
                    " its release: another client holds the pointer frozen",
                    detail={"button": number},
                )
            time.sleep(0.005)

    def _check_cancel(self, cancel: threading.Event | None, operation: str) -> None:
        if cancel is not None and cancel.is_set():
            raise InputError(f"{operation} interrupted", detail={"interrupted": True})

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
                self._fake(X.ButtonRelease, number)
                self._display.flush()

    # -- internals: keymap -----------------------------------------------------------------

    def _refresh_keymap(self) -> None:
        """Re-read the core keymap (one round trip), so layout changes are never missed."""
        count = self._max_keycode - self._min_keycode + 1
        rows = self._display.get_keyboard_mapping(self._min_keycode, count)
        self._rows = {
            self._min_keycode + index: (*(int(k) for k in row), 0, 0)
            for index, row in enumerate(rows)
        }
        self._keymap = {kc: [row[0], row[1]] for kc, row in self._rows.items()}
        # Forget spares someone else has remapped since.
        for keycode, keysym in list(self._spare_keysym.items()):
            if self._keymap.get(keycode) != [keysym, keysym]:
                del self._spare_keysym[keycode]

    def _is_spare_row(self, keycode: int) -> bool:
        """True if the keycode is empty or holds one keysym the way we map spares."""
        row = self._rows.get(keycode, (1,))
        if not any(row):
            return True
        first = row[0]
        return row[1] == first and set(row[2:]) <= {first, _NO_SYMBOL}

    def _claim_spares(self) -> list[int]:
        """Choose the spare keycodes: those with no keysyms, plus those an earlier XInput
        (e.g. of a daemon that crashed before :meth:`close`) recorded on the root window
        and that still look like spares. Keycodes of the layout are never taken; the lowest
        keycode is left alone (some toolkits treat it as invalid)."""
        atom = self._display.intern_atom(_SPARE_PROPERTY)
        prop = self._root.get_full_property(atom, Xatom.CARDINAL)
        recorded = {int(kc) for kc in prop.value} if prop is not None else set()
        spares = sorted(
            kc
            for kc in self._rows
            if kc > self._min_keycode
            and (not any(self._rows[kc]) or (kc in recorded and self._is_spare_row(kc)))
        )
        if set(spares) - recorded:
            self._root.change_property(atom, Xatom.CARDINAL, 32, sorted(recorded | set(spares)))
            self._sync()
        return spares

    def _index(self) -> dict[int, tuple[int, bool]]:
        """keysym → (keycode, needs Shift); plain level preferred, then lowest keycode."""
        index: dict[int, tuple[int, bool]] = {}
        for level in (0, 1):
            for keycode in sorted(self._keymap):
                keysym = self._keymap[keycode][level]
                if keysym != _NO_SYMBOL and keysym not in index:
                    index[keysym] = (keycode, level == 1)
        return index

    def _shift_keycode(self) -> int:
        located = self._index().get(_SHIFT_KEYSYM)
        if located is None or located[1]:
            raise InputError("the keymap has no Shift_L key", detail={"keysym": "Shift_L"})
        return located[0]

    def _usable_spares(self) -> list[int]:
        """Spare keycodes still empty or holding a spare mapping, least recently used first."""
        usable = [kc for kc in self._spares if self._is_spare_row(kc)]
        return sorted(usable, key=lambda kc: self._spare_last_seq.get(kc, 0))

    def _plan_burst(
        self, keysyms: Sequence[int], start: int
    ) -> tuple[int, dict[int, int], list[tuple[int, bool]]]:
        """Plan the longest run of characters from ``start`` that one remap can serve.

        Returns:
            (end index, {spare keycode: keysym} to remap first, [(keycode, shift)] to type).
        """
        index = self._index()
        free = [kc for kc in self._usable_spares() if kc not in self._held_keys]
        used: set[int] = set()
        remaps: dict[int, int] = {}
        plan: list[tuple[int, bool]] = []
        position = start
        while position < len(keysyms):
            keysym = keysyms[position]
            located = index.get(keysym)
            if located is None:
                candidates = [kc for kc in free if kc not in used]
                if not candidates:
                    if plan:
                        break  # the rest goes in the next burst
                    raise InputError(
                        "no spare keycode to type a character that is not on the keymap",
                        detail={"keysym": hex(keysym), "spare_keycodes": len(self._spares)},
                    )
                keycode = candidates[0]
                free.remove(keycode)
                old = self._keymap[keycode][0]
                if old != _NO_SYMBOL and index.get(old) == (keycode, False):
                    del index[old]
                remaps[keycode] = keysym
                index[keysym] = located = (keycode, False)
            used.add(located[0])
            plan.append(located)
            position += 1
        return position, remaps, plan

    def _remap(self, remaps: dict[int, int], cancel: threading.Event | None = None) -> None:
        """Put keysyms on spare keycodes, then give the clients time to see the change.

        A keycode with a key event the focused client may not have handled yet is only
        remapped after that client confirms it has handled everything sent so far (a
        ``_NET_WM_PING`` round trip), or, for a client that cannot be pinged, once the
        :data:`CLIENT_KEY_TAP_S` estimate says so.
        """
        unconfirmed = any(self._spare_last_seq.get(kc, 0) > self._confirmed_seq for kc in remaps)
        if unconfirmed and not self.wait_until_handled(cancel=cancel):
            handled_by = max(self._spare_handled_by.get(kc, 0.0) for kc in remaps)
            wait = handled_by + REMAP_GUARD_S - time.monotonic()
            if wait > 0:
                log.debug("waiting %.3f s for clients to handle keys (no ping)", wait)
                time.sleep(wait)
        for keycode, keysym in sorted(remaps.items()):
            self._display.change_keyboard_mapping(keycode, [(keysym, keysym)])
            self._spare_keysym[keycode] = keysym
            self._keymap[keycode] = [keysym, keysym]
            self._rows[keycode] = (keysym, keysym)
        self._sync()  # the server has now sent MappingNotify to every client
        time.sleep(REMAP_SETTLE_S)

    def _locate_all(self, keysyms: Sequence[int]) -> list[tuple[int, bool]]:
        """Keycode and Shift need for each keysym, remapping spares for missing ones."""
        end, remaps, plan = self._plan_burst(keysyms, 0)
        if end < len(keysyms):
            raise InputError(
                "too many keys missing from the keymap for one chord",
                detail={"keys": len(keysyms), "spare_keycodes": len(self._spares)},
            )
        if remaps:
            self._remap(remaps)
        return plan

    def _type_burst(
        self, plan: Sequence[tuple[int, bool]], delay_s: float, cancel: threading.Event | None
    ) -> None:
        shift = self._shift_keycode() if any(shifted for _, shifted in plan) else None
        for number, (keycode, shifted) in enumerate(plan):
            self._check_cancel(cancel, "typing")
            if number and delay_s > 0:
                self._flush_and_pause(delay_s)
            if shifted and shift is not None:
                self._tap(keycode, with_shift=shift)
            else:
                self._tap(keycode)
            self._account_taps([keycode])
        self._display.flush()

    def _tap(self, keycode: int, with_shift: int | None = None) -> None:
        pressed: list[int] = []
        try:
            for code in (with_shift, keycode):
                if code is None or code in self._held_keys:
                    continue
                self._held_keys[code] = 0
                pressed.append(code)
                self._fake(X.KeyPress, code)
        finally:
            for code in reversed(pressed):
                self._held_keys.pop(code, None)
                self._fake(X.KeyRelease, code)

    def _account_taps(self, keycodes: Sequence[int]) -> None:
        """Count one key tap, and note it on the spare keycodes it used."""
        self._tap_seq += 1
        self._handled_by = max(self._handled_by, time.monotonic()) + CLIENT_KEY_TAP_S
        for keycode in keycodes:
            if keycode in self._spare_last_seq:
                self._spare_last_seq[keycode] = self._tap_seq
                self._spare_handled_by[keycode] = self._handled_by

    def _ping_target(self) -> Any | None:
        """The top-level window of the focused client if it answers ``_NET_WM_PING``."""
        focus = self._display.get_input_focus().focus
        window = focus if hasattr(focus, "query_tree") else None
        try:
            for _ in range(_MAX_WINDOW_DEPTH):
                if window is None or window.id == self._root.id:
                    return None
                protocols = window.get_full_property(self._wm_protocols, Xatom.ATOM)
                if protocols is not None and self._net_wm_ping in protocols.value:
                    return window
                window = window.query_tree().parent
        except xerror.XError:  # the window went away while we looked
            return None
        return None

    @contextmanager
    def _caps_lock_off(self) -> Iterator[None]:
        if not self._root.query_pointer().mask & X.LockMask:
            yield
            return
        located = self._index().get(_CAPS_LOCK_KEYSYM)
        if located is None:
            yield  # Lock is on but there is no Caps_Lock key to turn it off with
            return
        self._tap(located[0])
        self._sync()
        try:
            yield
        finally:
            self._tap(located[0])
            self._display.flush()
