"""The X keymap as input sees it: where each keysym is, and spare keycodes for the rest.

Typing arbitrary Unicode
-------------------------------
A character whose keysym is on the current keymap (level 1, or level 2 with Shift) is
typed with that key. Any other character is typed on a *spare* keycode: one with no
keysyms in the layout, remapped (core ``ChangeKeyboardMapping``) to the character's keysym,
``0x01000000 + code point`` outside Latin-1. The spare keycodes are recorded on the root
window (property ``DESKPOD_SPARE_KEYCODES``) so that a daemon restarted after a crash
reclaims them.

Remapped spares stay mapped and are reused while the same characters come back, so a
text is planned in bursts (:meth:`SpareKeymap.plan_burst`): all the spares a burst needs
are remapped first, then its keys are sent back to back. A new burst starts only when the
spares run out; it remaps the least recently used ones, never one the current burst still
needs. Two waits make this reliable rather than lucky (both measured against Chromium on
Xvfb):

- after a remap, :data:`REMAP_SETTLE_S`, because Chromium refetches its keymap after the
  ``MappingNotify`` (which the server sends before any later key event) asynchronously:
  without the pause, a new character was now and then typed as the keycode's previous
  one;
- before a spare is remapped again, until the focused client has handled every key sent
  so far, because Chromium applies a new keymap even to key events it has received but
  not yet handled, and XTEST sends keys far faster than Chromium handles them (about
  1 ms per character here, so it can be seconds behind). Without this wait about half
  the characters of a 120-character text with 60 distinct CJK characters came out wrong.
  The client confirms with a ``_NET_WM_PING`` round trip
  (:meth:`~deskpod.agentd.display.xconn.XConnection.ping_focused`), which it answers from its
  event loop after the earlier key events; for a client that does not answer pings, the
  wait is estimated at :data:`CLIENT_KEY_TAP_S` per key plus :data:`REMAP_GUARD_S`.

:meth:`SpareKeymap.restore` empties the spares it remapped; no other key of the layout is
ever changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Sequence
from typing import Final

from Xlib import Xatom

from deskpod import keys
from deskpod.agentd.display.xconn import XConnection
from deskpod.errors import InputError

__all__ = [
    "CLIENT_KEY_TAP_S",
    "REMAP_GUARD_S",
    "REMAP_SETTLE_S",
    "SHIFT_KEYSYM",
    "SpareKeymap",
]

log = logging.getLogger(__name__)

REMAP_SETTLE_S: Final = 0.05
"""Pause after remapping spare keycodes and before the first key event that uses them."""

CLIENT_KEY_TAP_S: Final = 0.01
"""For a focused client that does not answer ``_NET_WM_PING`` only: the assumed upper
bound on the time it needs to handle one key tap. (Chromium, which answers pings, took
about 1.3 ms per character in an idle text field; 3 ms was not enough with four desktops
sharing two cores.)"""

REMAP_GUARD_S: Final = 0.05
"""Margin added to that estimate before a spare keycode is remapped."""

SHIFT_KEYSYM: Final = keys.keysym_value("Shift_L")
"""The keysym added to type a character on the Shift level."""

_NO_SYMBOL: Final = 0
_SPARE_PROPERTY: Final = "DESKPOD_SPARE_KEYCODES"
"""Root-window property listing the keycodes deskpod uses as spares (CARDINAL[])."""


class SpareKeymap:
    """The core keymap of one X connection, its spare keycodes and the key taps sent.

    Reads the keymap and claims the spare keycodes (recording them on the root window).

    Args:
        conn: the connection (set up).

    Raises:
        xerror.XError: the server refused (the caller translates it).
        InputError: the server reported an error.
    """

    def __init__(self, conn: XConnection) -> None:
        self._conn = conn
        info = conn.display.display.info
        self._min_keycode: int = info.min_keycode
        self._max_keycode: int = info.max_keycode
        self._rows: dict[int, tuple[int, ...]] = {}  # keycode -> all its core keysyms
        self._keymap: dict[int, list[int]] = {}  # keycode -> [plain, shifted] keysym
        self._spare_keysym: dict[int, int] = {}  # spare keycode -> keysym we mapped on it
        self.refresh()
        self.spares: list[int] = self._claim_spares()
        # Key taps sent so far; per spare keycode, the tap that last used it; and the last
        # tap the focused client has confirmed handling (_NET_WM_PING round trip).
        self.tap_seq = 0
        self._spare_last_seq: dict[int, int] = dict.fromkeys(self.spares, 0)
        self._confirmed_seq = 0
        # Fallback when the focused client cannot be pinged: monotonic time by which
        # clients are assumed to have handled every key sent so far, and the same
        # estimate per spare keycode for its last use.
        self._handled_by = 0.0
        self._spare_handled_by: dict[int, float] = dict.fromkeys(self.spares, 0.0)

    def refresh(self) -> None:
        """Re-read the core keymap (one round trip), so layout changes are never missed."""
        count = self._max_keycode - self._min_keycode + 1
        rows = self._conn.display.get_keyboard_mapping(self._min_keycode, count)
        self._rows = {
            self._min_keycode + index: (*(int(k) for k in row), 0, 0)
            for index, row in enumerate(rows)
        }
        self._keymap = {kc: [row[0], row[1]] for kc, row in self._rows.items()}
        # Forget spares someone else has remapped since.
        for keycode, keysym in list(self._spare_keysym.items()):
            if self._keymap.get(keycode) != [keysym, keysym]:
                del self._spare_keysym[keycode]

    def index(self) -> dict[int, tuple[int, bool]]:
        """keysym → (keycode, needs Shift); plain level preferred, then lowest keycode."""
        index: dict[int, tuple[int, bool]] = {}
        for level in (0, 1):
            for keycode in sorted(self._keymap):
                keysym = self._keymap[keycode][level]
                if keysym != _NO_SYMBOL and keysym not in index:
                    index[keysym] = (keycode, level == 1)
        return index

    def shift_keycode(self) -> int:
        """The keycode of ``Shift_L`` on the plain level.

        Raises:
            InputError: the keymap has none.
        """
        located = self.index().get(SHIFT_KEYSYM)
        if located is None or located[1]:
            raise InputError("the keymap has no Shift_L key", detail={"keysym": "Shift_L"})
        return located[0]

    def plan_burst(
        self, keysyms: Sequence[int], start: int, held: Container[int]
    ) -> tuple[int, dict[int, int], list[tuple[int, bool]]]:
        """Plan the longest run of characters from ``start`` that one remap can serve.

        Args:
            keysyms: the keysyms to type.
            start: the index of the first one to plan.
            held: keycodes held down now (never remapped).

        Returns:
            (end index, {spare keycode: keysym} to remap first, [(keycode, shift)] to type).

        Raises:
            InputError: the character at ``start`` needs a spare and none is free.
        """
        index = self.index()
        free = [kc for kc in self._usable_spares() if kc not in held]
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
                        detail={"keysym": hex(keysym), "spare_keycodes": len(self.spares)},
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

    def remap(self, remaps: dict[int, int], wait_until_handled: Callable[[], bool]) -> None:
        """Put keysyms on spare keycodes, then give the clients time to see the change.

        A keycode with a key event the focused client may not have handled yet is only
        remapped after that client confirms it has handled everything sent so far
        (``wait_until_handled()``, a ``_NET_WM_PING`` round trip that calls
        :meth:`confirm`), or, when it returns False (a client that cannot be pinged),
        once the :data:`CLIENT_KEY_TAP_S` estimate says so.

        Args:
            remaps: {spare keycode: keysym}.
            wait_until_handled: waits for the focused client; False if it cannot be asked.
        """
        unconfirmed = any(self._spare_last_seq.get(kc, 0) > self._confirmed_seq for kc in remaps)
        if unconfirmed and not wait_until_handled():
            handled_by = max(self._spare_handled_by.get(kc, 0.0) for kc in remaps)
            wait = handled_by + REMAP_GUARD_S - time.monotonic()
            if wait > 0:
                log.debug("waiting %.3f s for clients to handle keys (no ping)", wait)
                time.sleep(wait)
        for keycode, keysym in sorted(remaps.items()):
            self._conn.display.change_keyboard_mapping(keycode, [(keysym, keysym)])
            self._spare_keysym[keycode] = keysym
            self._keymap[keycode] = [keysym, keysym]
            self._rows[keycode] = (keysym, keysym)
        self._conn.sync()  # the server has now sent MappingNotify to every client
        self._conn.sync_window_manager()
        time.sleep(REMAP_SETTLE_S)

    def account_taps(self, keycodes: Sequence[int]) -> None:
        """Count one key tap, and note it on the spare keycodes it used."""
        self.tap_seq += 1
        self._handled_by = max(self._handled_by, time.monotonic()) + CLIENT_KEY_TAP_S
        for keycode in keycodes:
            if keycode in self._spare_last_seq:
                self._spare_last_seq[keycode] = self.tap_seq
                self._spare_handled_by[keycode] = self._handled_by

    def confirm(self, tap_seq: int) -> None:
        """Record that the focused client has handled every key tap up to ``tap_seq``."""
        self._confirmed_seq = max(self._confirmed_seq, tap_seq)

    def restore(self) -> None:
        """Empty the spares this object remapped (those nobody has remapped since); not synced."""
        self.refresh()
        for keycode, keysym in self._spare_keysym.items():
            if self._keymap.get(keycode) != [keysym, keysym]:
                continue  # someone else has remapped it since; not ours to undo
            self._conn.display.change_keyboard_mapping(keycode, [(_NO_SYMBOL, _NO_SYMBOL)])
        self._spare_keysym.clear()

    def _is_spare_row(self, keycode: int) -> bool:
        """True if the keycode is empty or holds one keysym the way we map spares."""
        row = self._rows.get(keycode, (1,))
        if not any(row):
            return True
        first = row[0]
        return row[1] == first and set(row[2:]) <= {first, _NO_SYMBOL}

    def _claim_spares(self) -> list[int]:
        """Choose the spare keycodes: those with no keysyms, plus those an earlier XInput
        (e.g. of a daemon that crashed before closing) recorded on the root window
        and that still look like spares. Keycodes of the layout are never taken; the lowest
        keycode is left alone (some toolkits treat it as invalid)."""
        root = self._conn.root
        atom = self._conn.display.intern_atom(_SPARE_PROPERTY)
        prop = root.get_full_property(atom, Xatom.CARDINAL)
        recorded = {int(kc) for kc in prop.value} if prop is not None else set()
        spares = sorted(
            kc
            for kc in self._rows
            if kc > self._min_keycode
            and (not any(self._rows[kc]) or (kc in recorded and self._is_spare_row(kc)))
        )
        if set(spares) - recorded:
            root.change_property(atom, Xatom.CARDINAL, 32, sorted(recorded | set(spares)))
            self._conn.sync()
        return spares

    def _usable_spares(self) -> list[int]:
        """Spare keycodes still empty or holding a spare mapping, least recently used first."""
        usable = [kc for kc in self.spares if self._is_spare_row(kc)]
        return sorted(usable, key=lambda kc: self._spare_last_seq.get(kc, 0))
