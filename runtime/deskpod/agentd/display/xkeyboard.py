"""Keyboard input through the X server's XTEST extension: chords, held keys and text.

:class:`XKeyboard` is the keyboard half of :class:`~deskpod.agentd.display.xinput.XInput`
(which adds the pointer and opens the connection): keys are found on the keymap, and
characters that are not on it are typed through spare keycodes
(:mod:`deskpod.agentd.display.xkeymap`); every call comes from one thread, serially. No
command line is ever built: text starting with ``-`` is typed like any other. Durations
are float seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from Xlib import X

from deskpod import keys
from deskpod.agentd.display.xconn import PING_TIMEOUT_S, XConnection, check_cancel, translating
from deskpod.agentd.display.xkeymap import SHIFT_KEYSYM, SpareKeymap
from deskpod.errors import InputError, InvalidActionError

__all__ = ["XKeyboard"]

_CAPS_LOCK_KEYSYM: Final = keys.keysym_value("Caps_Lock")


class XKeyboard:
    """Synthesises keyboard input on one X connection through XTEST.

    Args:
        conn: the X connection (its owner closes it).

    Raises:
        InputError: the keymap cannot be read.
    """

    def __init__(self, conn: XConnection) -> None:
        self._conn = conn
        # Keys pressed by this object and not yet released, in press order.
        self._held_keys: dict[int, int] = {}  # keycode -> keysym it was pressed for
        self._keys = SpareKeymap(conn)

    @translating
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
        self._keys.refresh()
        located = self._locate_all(keysyms)
        chord_has_shift = any(name in ("Shift_L", "Shift_R") for name in keysym_names)
        presses: list[tuple[int, int]] = []  # (keycode, keysym) in pressing order
        shift_needed = False
        for name, keysym, (keycode, shifted) in zip(keysym_names, keysyms, located, strict=True):
            presses.append((keycode, keysym))
            if shifted and not keys.is_modifier(name) and not chord_has_shift:
                shift_needed = True
        if shift_needed:
            shift = self._keys.shift_keycode()
            first_plain = next(
                (i for i, name in enumerate(keysym_names) if not keys.is_modifier(name)),
                len(presses),
            )
            presses.insert(first_plain, (shift, SHIFT_KEYSYM))
        pressed: list[int] = []
        try:
            for keycode, keysym in presses:
                if keycode in self._held_keys:
                    continue  # already held (e.g. by key_down); leave it as it is
                self._held_keys[keycode] = keysym
                pressed.append(keycode)
                self._conn.fake(X.KeyPress, keycode)
        finally:
            for keycode in reversed(pressed):
                self._held_keys.pop(keycode, None)
                self._conn.fake(X.KeyRelease, keycode)
            for code, _ in presses:
                self._keys.account_taps([code])
            self._conn.sync()

    @translating
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
        self._keys.refresh()
        ((keycode, _),) = self._locate_all([keysym])
        if keycode in self._held_keys:
            return
        self._held_keys[keycode] = keysym
        self._conn.fake(X.KeyPress, keycode)
        self._keys.account_taps([keycode])
        self._conn.sync()

    @translating
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
                self._conn.fake(X.KeyRelease, keycode)
                self._keys.account_taps([keycode])
        self._conn.sync()

    @translating
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
        self._keys.refresh()
        with self._caps_lock_off():
            start = 0
            while start < len(keysyms):
                end, remaps, plan = self._keys.plan_burst(keysyms, start, self._held_keys)
                if remaps:
                    self._remap(remaps, cancel)
                self._type_burst(plan, delay_s, cancel)
                start = end
        self._conn.sync()

    @translating
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
        confirmed = self._keys.tap_seq
        if not self._conn.ping_focused(timeout_s, cancel):
            return False
        self._keys.confirm(confirmed)
        return True

    def _remap(self, remaps: dict[int, int], cancel: threading.Event | None = None) -> None:
        """Put keysyms on spare keycodes, then give the clients time to see the change.

        A keycode with a key event the focused client may not have handled yet is only
        remapped after that client confirms it has handled everything sent so far (a
        ``_NET_WM_PING`` round trip), or, for a client that cannot be pinged, once the
        :data:`~deskpod.agentd.display.xkeymap.CLIENT_KEY_TAP_S` estimate says so.
        """
        self._keys.remap(remaps, lambda: self.wait_until_handled(cancel=cancel))

    def _locate_all(self, keysyms: Sequence[int]) -> list[tuple[int, bool]]:
        """Keycode and Shift need for each keysym, remapping spares for missing ones."""
        end, remaps, plan = self._keys.plan_burst(keysyms, 0, self._held_keys)
        if end < len(keysyms):
            raise InputError(
                "too many keys missing from the keymap for one chord",
                detail={"keys": len(keysyms), "spare_keycodes": len(self._keys.spares)},
            )
        if remaps:
            self._remap(remaps)
        return plan

    def _type_burst(
        self, plan: Sequence[tuple[int, bool]], delay_s: float, cancel: threading.Event | None
    ) -> None:
        shift = self._keys.shift_keycode() if any(shifted for _, shifted in plan) else None
        for number, (keycode, shifted) in enumerate(plan):
            check_cancel(cancel, "typing")
            if number and delay_s > 0:
                self._conn.flush_and_pause(delay_s)
            if shifted and shift is not None:
                self._tap(keycode, with_shift=shift)
            else:
                self._tap(keycode)
            self._keys.account_taps([keycode])
        self._conn.display.flush()

    def _tap(self, keycode: int, with_shift: int | None = None) -> None:
        pressed: list[int] = []
        try:
            for code in (with_shift, keycode):
                if code is None or code in self._held_keys:
                    continue
                self._held_keys[code] = 0
                pressed.append(code)
                self._conn.fake(X.KeyPress, code)
        finally:
            for code in reversed(pressed):
                self._held_keys.pop(code, None)
                self._conn.fake(X.KeyRelease, code)

    @contextmanager
    def _caps_lock_off(self) -> Iterator[None]:
        if not self._conn.root.query_pointer().mask & X.LockMask:
            yield
            return
        located = self._keys.index().get(_CAPS_LOCK_KEYSYM)
        if located is None:
            yield  # Lock is on but there is no Caps_Lock key to turn it off with
            return
        self._tap(located[0])
        self._conn.sync()
        try:
            yield
        finally:
            self._tap(located[0])
            self._conn.display.flush()
