"""What a chord does on a page besides typing: the shortcut it matches, whether it types a character.

Pure helpers for :class:`~deskpod.controller.policy.risk.ActionClassifier`'s keyboard rules,
over the keysym names :func:`deskpod.controller.keysplit.chord_keysyms` gives:

- :func:`pressed_shortcuts`: the controls a chord presses through their declared shortcuts
  (:class:`~deskpod.protocol.KeyShortcut`). An ``accesskey`` is pressed, in Chromium on Linux,
  by Alt+key and Alt+Shift+key (the HTML standard leaves the modifier to the browser:
  https://html.spec.whatwg.org/multipage/interaction.html#the-accesskey-attribute); an
  ``aria-keyshortcuts`` value lists shortcuts separated by spaces, each modifiers and one key
  joined by ``+`` in ``KeyboardEvent.key`` spelling (WAI-ARIA 1.2,
  https://www.w3.org/TR/wai-aria-1.2/#aria-keyshortcuts).
- :func:`chord_modifiers` and :func:`types_character`: the held modifiers, and whether the
  chord types a printable character (a page's single-key shortcut, such as ``#``).
- :func:`stays_on_the_line`: whether a chord only edits the line typed in a terminal, never
  runs it.

Letters match without regard to case (a shortcut ``Alt+P`` is the chord ``alt+p``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from deskpod.errors import UnknownKeyError
from deskpod.keys import UNICODE_KEYSYM_OFFSET, keysym_value, to_keysym_name
from deskpod.protocol import KeyShortcut

__all__ = ["EDITING_KEYS", "chord_modifiers", "pressed_shortcuts", "stays_on_the_line", "types_character"]

_MODIFIER_GROUPS: Final = {
    "Control_L": "control", "Control_R": "control", "Shift_L": "shift", "Shift_R": "shift",
    "Alt_L": "alt", "Alt_R": "alt", "Meta_L": "meta", "Meta_R": "meta", "Super_L": "meta", "Super_R": "meta",
    "Hyper_L": "meta", "Hyper_R": "meta", "ISO_Level3_Shift": "altgraph", "Mode_switch": "altgraph",
    "script_switch": "altgraph",
}
"""Each modifier keysym's group: what a page sees (``ctrlKey``, ``shiftKey``, ``altKey``, ``metaKey``)."""

EDITING_KEYS: Final = frozenset({"Delete", "KP_Delete", "BackSpace"})
"""Keys that delete in a field and that pages bind to deleting the selection elsewhere."""

_ACCESS_KEY_MODIFIERS: Final = (frozenset({"alt"}), frozenset({"alt", "shift"}))
"""The modifiers that press an ``accesskey`` in Chromium on Linux."""

_ENTER: Final = frozenset({"Return", "KP_Enter"})

_LINE_MOVES: Final = frozenset({"Left", "Right", "Up", "Down", "Home", "End", "Page_Up", "Page_Down", "Insert", "Tab"})
"""Keys that move in a terminal's line or its history, or complete a word (readline's
defaults), without running the line."""


def chord_modifiers(keysyms: Sequence[str]) -> frozenset[str]:
    """The modifier groups a chord holds: ``control``, ``shift``, ``alt``, ``meta``, ``altgraph``."""
    return frozenset(_MODIFIER_GROUPS[k] for k in keysyms if k in _MODIFIER_GROUPS)


def _others(keysyms: Sequence[str]) -> list[str]:
    return [k for k in keysyms if k not in _MODIFIER_GROUPS]


def _char(keysym: str) -> str | None:
    """The printable character ``keysym`` types (``None``: none, or a key without one)."""
    try:
        value = keysym_value(keysym)
    except UnknownKeyError:
        return None
    if 0x20 <= value <= 0x7E or 0xA0 <= value <= 0xFF:
        return chr(value)
    code = value - UNICODE_KEYSYM_OFFSET
    return chr(code) if 0x20 <= code <= 0x10FFFF and chr(code).isprintable() else None


def types_character(keysyms: Sequence[str]) -> bool:
    """True when the chord types a printable character (space included) or deletes
    (:data:`EDITING_KEYS`): its keys besides the modifiers do, and it holds no Control, Alt or
    Meta (Shift and AltGr only change which character)."""
    others = _others(keysyms)
    if not others or chord_modifiers(keysyms) & {"control", "alt", "meta"}:
        return False
    return all(_char(k) is not None or k in EDITING_KEYS for k in others)


def stays_on_the_line(keysyms: Sequence[str] | None) -> bool:
    """True when the chord only edits the line typed in a terminal: it types a character,
    deletes or moves (:data:`_LINE_MOVES`), holding no Control, Alt or Meta. Anything else may
    run the line: Return, KP_Enter and Linefeed, and Control chords such as Ctrl+J and Ctrl+M
    (the terminal sends what Return sends) or Ctrl+O (bash runs the line and fetches the next).
    ``None`` (keys that do not resolve): False."""
    if keysyms is None or chord_modifiers(keysyms) & {"control", "alt", "meta"}:
        return False
    return all(_char(k) is not None or k in EDITING_KEYS or k in _LINE_MOVES for k in _others(keysyms))


def _same_key(a: str, b: str) -> bool:
    if a in _ENTER and b in _ENTER:
        return True
    ca, cb = _char(a), _char(b)
    return a == b or (ca is not None and cb is not None and ca.lower() == cb.lower())


def _aria_chords(value: str) -> list[tuple[frozenset[str], str]]:
    """An ``aria-keyshortcuts`` value as ``(modifier groups, keysym)`` per shortcut (a shortcut
    with a name that does not resolve, or not exactly one other key, is skipped)."""
    out = []
    for shortcut in value.split():
        try:
            keysyms = [to_keysym_name(part) for part in shortcut.split("+") if part]
        except UnknownKeyError:
            continue
        others = _others(keysyms)
        if len(others) == 1:
            out.append((chord_modifiers(keysyms), others[0]))
    return out


def pressed_shortcuts(keysyms: Sequence[str], shortcuts: Sequence[KeyShortcut]) -> list[KeyShortcut]:
    """The declared shortcuts the chord ``keysyms`` (canonical keysym names) matches.

    Args:
        keysyms: the chord's keys, as :func:`~deskpod.controller.keysplit.chord_keysyms` gives them.
        shortcuts: the page's declared shortcuts (:attr:`deskpod.protocol.PageKeys.shortcuts`).

    Returns:
        Each shortcut whose control the chord presses: an ``accesskey`` whose character is the
        chord's one key besides Alt or Alt+Shift; an ``aria-keyshortcuts`` entry with the same
        modifiers and key.
    """
    others = _others(keysyms)
    if len(others) != 1:
        return []
    key, held = others[0], chord_modifiers(keysyms)
    found = []
    for shortcut in shortcuts:
        if shortcut.kind == "accesskey":
            chars = [c for c in shortcut.keys.split() if len(c) == 1]
            if held in _ACCESS_KEY_MODIFIERS and any(_char(key) is not None and c.lower() == str(_char(key)).lower()
                                                     for c in chars):
                found.append(shortcut)
        elif any(mods == held and _same_key(key, aria_key) for mods, aria_key in _aria_chords(shortcut.keys)):
            found.append(shortcut)
    return found
