"""Key names → X keysyms: the pure (no I/O, no Xlib) half of deskpod's keyboard input.

Agents name keys in several dialects. This module accepts all of them and turns each
into one canonical X keysym name, or refuses it with :class:`~deskpod.errors.UnknownKeyError`
naming the key, so that nothing is ever pressed for a name that does not resolve
(xdotool warns and carries on).

Accepted spellings, tried in this order:

1. An X keysym name exactly as X spells it: ``"Return"``, ``"KP_Enter"``, ``"Control_L"``,
   ``"BackSpace"``, ``"Page_Up"``, ``"a"``, ``"A"``, ``"1"``, ``"slash"``, ``"eacute"``,
   ``"XF86Back"``, ``"dead_acute"``.
2. A single printable character: ``"a"``, ``"/"``, ``"é"``, ``"€"``, ``"日"``. Latin-1
   characters map to their legacy keysym name (``"/"`` → ``"slash"``); any other
   character maps to X's Unicode keysym name ``"U<hex>"`` (``"€"`` → ``"U20AC"``,
   keysym ``0x01000000 + code point``). ``"\\n"`` and ``"\\r"`` are ``Return``, ``"\\t"`` is
   ``Tab``; other control characters are refused.
3. X's Unicode spelling ``"U20AC"`` or ``"U+20AC"``.
4. An alias, matched case-insensitively with ``_``, ``-`` and spaces ignored: the names
   OpenAI's ``computer_call`` sends (``"ENTER"``, ``"CTRL"``, ``"CMD"``, ``"ARROWUP"``,
   ``"PAGEDOWN"``, ...), Anthropic/xdotool habits (``"ctrl"``, ``"super"``, ``"Escape"``),
   DOM ``KeyboardEvent.key`` values (``"ArrowLeft"``, ``"Control"``, ``"Meta"``), and any
   keysym in the table spelt in another case (``"backspace"``, ``"kp_enter"``, ``"F5"``).
   Keysym names that differ only by case (``"a"``/``"A"``, ``"eacute"``/``"Eacute"``) are
   accepted only in their exact spelling.

The set of keysym names accepted is a static table (:data:`KEYSYM_VALUES`) generated once
from python-xlib's ``Xlib.keysymdef`` modules and committed below, so this module stays
importable without Xlib (the controller validates keys without X). It holds:

- ``latin1`` and ``miscellany`` in full (printable Latin-1, editing, cursor, keypad,
  function keys F1 to F35, modifiers);
- from ``xkb``: ``ISO_Left_Tab``, ``ISO_Enter``, ``ISO_Level3_Shift`` and the ``dead_*`` keys;
- ``xf86`` media/browser keys in X's own spelling (``XF86Back``, ``XF86AudioMute``), without
  the keysyms that control the X server (``XF86Switch_VT_*``, ``XF86Ungrab``,
  ``XF86ClearGrab``, ``XF86Next_VMode``, ``XF86Prev_VMode``, ``XF86Log*``); the other
  ``xkb`` keysyms (``Terminate_Server``, ``Pointer_*``, AccessX toggles, group locks) are
  left out for the same reason: an agent must not be able to press them.

Any other character is still reachable through its Unicode keysym (rule 2), so the table
only has to cover named, non-character keys. ``tests/unit/test_keys.py`` checks the table
against ``Xlib.XK`` wherever python-xlib is installed; to regenerate it, iterate over
those ``Xlib.keysymdef`` modules' ``XK_*`` attributes with the filters above (python-xlib
spells ``XF86Back`` as ``XK_XF86_Back``).

Chords: :func:`parse_chord` splits Anthropic's ``key`` text (``"ctrl+shift+t"``) into
names; :func:`resolve_chord` turns a list of names (an OpenAI ``keypress`` array) into
the keysyms to hold, modifiers first.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from deskpod.errors import UnknownKeyError

__all__ = [
    "KEYSYM_VALUES",
    "MODIFIER_KEYSYMS",
    "UNICODE_KEYSYM_OFFSET",
    "char_keysym",
    "is_modifier",
    "keysym_value",
    "parse_chord",
    "resolve_chord",
    "to_keysym_name",
]

UNICODE_KEYSYM_OFFSET: Final = 0x01000000
"""X's Unicode keysyms are ``UNICODE_KEYSYM_OFFSET + code point`` (named ``U<hex>``)."""

# fmt: off
MODIFIER_KEYSYMS: Final = frozenset({
    "Shift_L", "Shift_R", "Control_L", "Control_R", "Alt_L", "Alt_R",
    "Meta_L", "Meta_R", "Super_L", "Super_R", "Hyper_L", "Hyper_R",
    "ISO_Level3_Shift", "Mode_switch", "script_switch",
})
# fmt: on
"""Keysyms held down around the other keys of a chord (locks like Caps_Lock are not)."""

_SHIFT_KEYSYMS: Final = frozenset({"Shift_L", "Shift_R"})

# Aliases, keyed by the normalised spelling (lower case, no "_", "-" or spaces).
# fmt: off
_ALIASES: Final[dict[str, str]] = {
    # Enter / Return
    "enter": "Return", "return": "Return", "ret": "Return",
    "numpadenter": "KP_Enter", "kpenter": "KP_Enter",
    # modifiers: OpenAI upper case, xdotool lower case, DOM KeyboardEvent.key
    "ctrl": "Control_L", "control": "Control_L", "ctl": "Control_L",
    "lctrl": "Control_L", "leftctrl": "Control_L", "ctrll": "Control_L",
    "controlleft": "Control_L",
    "rctrl": "Control_R", "rightctrl": "Control_R", "ctrlr": "Control_R",
    "controlright": "Control_R",
    "shift": "Shift_L", "lshift": "Shift_L", "leftshift": "Shift_L", "shiftleft": "Shift_L",
    "rshift": "Shift_R", "rightshift": "Shift_R", "shiftright": "Shift_R",
    "alt": "Alt_L", "option": "Alt_L", "opt": "Alt_L", "lalt": "Alt_L", "leftalt": "Alt_L",
    "altleft": "Alt_L", "ralt": "Alt_R", "rightalt": "Alt_R", "altright": "Alt_R",
    "altgr": "ISO_Level3_Shift", "altgraph": "ISO_Level3_Shift",
    # The command/Windows key. Browsers on Linux report Super as metaKey, so "META"
    # means Super here; the X keysym Meta_L stays reachable by its exact name.
    "cmd": "Super_L", "command": "Super_L", "meta": "Super_L", "super": "Super_L",
    "win": "Super_L", "windows": "Super_L", "os": "Super_L", "lsuper": "Super_L",
    "leftsuper": "Super_L", "metaleft": "Super_L", "lwin": "Super_L", "leftwin": "Super_L",
    "rsuper": "Super_R", "rightsuper": "Super_R", "metaright": "Super_R",
    "rwin": "Super_R", "rightwin": "Super_R", "rcmd": "Super_R",
    "hyper": "Hyper_L",
    # editing and navigation
    "esc": "Escape", "escape": "Escape",
    "tab": "Tab",
    "space": "space", "spacebar": "space",
    "backspace": "BackSpace", "bksp": "BackSpace", "bs": "BackSpace",
    "delete": "Delete", "del": "Delete",
    "insert": "Insert", "ins": "Insert",
    "home": "Home", "end": "End",
    "pageup": "Page_Up", "pgup": "Page_Up", "prior": "Prior",
    "pagedown": "Page_Down", "pgdn": "Page_Down", "pgdown": "Page_Down", "next": "Next",
    "up": "Up", "arrowup": "Up", "uparrow": "Up",
    "down": "Down", "arrowdown": "Down", "downarrow": "Down",
    "left": "Left", "arrowleft": "Left", "leftarrow": "Left",
    "right": "Right", "arrowright": "Right", "rightarrow": "Right",
    # locks and system keys
    "capslock": "Caps_Lock", "caps": "Caps_Lock",
    "numlock": "Num_Lock", "scrolllock": "Scroll_Lock", "scrlk": "Scroll_Lock",
    "printscreen": "Print", "print": "Print", "prtsc": "Print", "prtscr": "Print",
    "prtscn": "Print", "sysrq": "Sys_Req",
    "pause": "Pause", "break": "Break",
    "menu": "Menu", "contextmenu": "Menu", "apps": "Menu", "application": "Menu",
    # punctuation spelt as words
    "plus": "plus", "minus": "minus", "hyphen": "minus", "dash": "minus",
    "equal": "equal", "equals": "equal", "comma": "comma", "period": "period", "dot": "period",
    "slash": "slash", "backslash": "backslash", "semicolon": "semicolon", "colon": "colon",
    "quote": "apostrophe", "apostrophe": "apostrophe", "doublequote": "quotedbl",
    "backquote": "grave", "backtick": "grave", "grave": "grave", "tilde": "asciitilde",
    "underscore": "underscore",
    "bracketleft": "bracketleft", "leftbracket": "bracketleft", "lbracket": "bracketleft",
    "bracketright": "bracketright", "rightbracket": "bracketright",
    "rbracket": "bracketright",
    # media and browser keys (DOM KeyboardEvent.key names)
    "volumeup": "XF86AudioRaiseVolume", "audiovolumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume", "audiovolumedown": "XF86AudioLowerVolume",
    "volumemute": "XF86AudioMute", "audiovolumemute": "XF86AudioMute",
    "mute": "XF86AudioMute",
    "mediaplaypause": "XF86AudioPlay", "mediaplay": "XF86AudioPlay",
    "mediapause": "XF86AudioPause", "mediastop": "XF86AudioStop",
    "mediatracknext": "XF86AudioNext", "medianexttrack": "XF86AudioNext",
    "mediatrackprevious": "XF86AudioPrev", "mediaprevtrack": "XF86AudioPrev",
    "browserback": "XF86Back", "browserforward": "XF86Forward",
    "browserrefresh": "XF86Reload", "browserstop": "XF86Stop",
    "browsersearch": "XF86Search", "browserhome": "XF86HomePage",
    "browserfavorites": "XF86Favorites",
}
# fmt: on

_UNICODE_NAME_RE: Final = re.compile(r"[Uu]\+?([0-9A-Fa-f]{4,6})")
_CONTROL_CHAR_KEYSYMS: Final[dict[str, str]] = {"\n": "Return", "\r": "Return", "\t": "Tab"}


def _normalise(name: str) -> str:
    return name.replace("_", "").replace("-", "").replace(" ", "").lower()


_MAX_SHOWN_NAME_CHARS: Final = 64


def _unknown(name: object, why: str = "") -> UnknownKeyError:
    shown = name if isinstance(name, str) else repr(name)
    if len(shown) > _MAX_SHOWN_NAME_CHARS:
        shown = shown[:_MAX_SHOWN_NAME_CHARS] + "…"
    message = f"unknown key name {shown!r}"
    if why:
        message += f" ({why})"
    return UnknownKeyError(message, detail={"key": shown})


def _char_keysym_name(char: str, shown: str) -> str:
    """Keysym name for one character; ``shown`` is what the caller passed (for errors)."""
    if char in _CONTROL_CHAR_KEYSYMS:
        return _CONTROL_CHAR_KEYSYMS[char]
    code = ord(char)
    if unicodedata.category(char) in ("Cc", "Cs"):
        raise _unknown(shown, f"control or surrogate character U+{code:04X} is not a key")
    if code <= 0xFF and code in _LATIN1_NAMES:
        return _LATIN1_NAMES[code]
    return f"U{code:04X}"


def to_keysym_name(name: str) -> str:
    """Resolve one key name to the canonical X keysym name.

    Args:
        name: a key name in any accepted spelling (see the module docstring), e.g.
            ``"ENTER"``, ``"Enter"``, ``"Return"``, ``"KP_Enter"``, ``"CTRL"``, ``"a"``,
            ``"/"``, ``"é"``.

    Returns:
        The X keysym name: an entry of :data:`KEYSYM_VALUES` (``"Return"``,
        ``"Control_L"``, ``"slash"``) or X's Unicode spelling ``"U<hex>"`` for characters
        outside Latin-1 (``"U20AC"``). Exact keysym names are returned unchanged, so
        ``"A"`` stays ``"A"`` (see :func:`resolve_chord` for letters inside chords).

    Raises:
        UnknownKeyError: ``name`` is not a string, is empty, or names no key we accept
            (e.g. ``"Entr"``); ``detail["key"]`` holds the name as given (cut to 64
            characters).
    """
    if not isinstance(name, str) or not name:
        raise _unknown(name, "empty key name" if name == "" else "key names are strings")
    if name in _KEYSYMS:
        return name
    if len(name) == 1:
        return _char_keysym_name(name, name)
    match = _UNICODE_NAME_RE.fullmatch(name)
    if match:
        code = int(match.group(1), 16)
        if code > 0x10FFFF:
            raise _unknown(name, "beyond the last Unicode code point")
        return _char_keysym_name(chr(code), name)
    key = _normalise(name)
    resolved = _ALIASES.get(key) or _FOLDED.get(key)
    if resolved is None:
        raise _unknown(name)
    return resolved


def keysym_value(name: str) -> int:
    """Return the numeric X keysym for a key name.

    Args:
        name: any spelling :func:`to_keysym_name` accepts.

    Returns:
        The keysym as an int: the table value, or ``0x01000000 + code point`` for a
        ``"U<hex>"`` name.

    Raises:
        UnknownKeyError: as :func:`to_keysym_name`.
    """
    canonical = to_keysym_name(name)
    value = _KEYSYMS.get(canonical)
    if value is not None:
        return value
    return UNICODE_KEYSYM_OFFSET + int(canonical[1:], 16)


def char_keysym(char: str) -> int:
    """Return the keysym that types one character of text.

    Args:
        char: exactly one code point. ``"\\n"`` and ``"\\r"`` give ``Return``, ``"\\t"`` gives
            ``Tab``.

    Returns:
        The Latin-1 keysym (equal to the code point) for printable Latin-1 characters,
        otherwise the Unicode keysym ``0x01000000 + code point``.

    Raises:
        UnknownKeyError: ``char`` is not one code point, or is another control character
            (``detail["key"]`` is ``"U+XXXX"``).
    """
    if not isinstance(char, str) or len(char) != 1:
        raise _unknown(char, "expected exactly one character")
    return keysym_value(_char_keysym_name(char, f"U+{ord(char):04X}"))


def is_modifier(keysym_name: str) -> bool:
    """Tell whether a key is a modifier that chords hold down around the other keys.

    Args:
        keysym_name: a canonical keysym name (as returned by :func:`to_keysym_name`);
            other accepted spellings (``"CTRL"``) work too.

    Returns:
        True for Shift, Control, Alt, Meta, Super, Hyper (left and right),
        ``ISO_Level3_Shift`` and ``Mode_switch``; False for everything else, including
        lock keys and names that resolve to no key.
    """
    if keysym_name in MODIFIER_KEYSYMS:
        return True
    try:
        return to_keysym_name(keysym_name) in MODIFIER_KEYSYMS
    except UnknownKeyError:
        return False


def parse_chord(text: str) -> list[str]:
    """Split chord text such as Anthropic's ``key`` action text into key names.

    ``"ctrl+a"`` → ``["ctrl", "a"]``, ``"ctrl+shift+t"`` → ``["ctrl", "shift", "t"]``,
    ``"ctrl++"`` → ``["ctrl", "+"]``, ``"+"`` → ``["+"]``, ``"Return"`` → ``["Return"]``.
    Blanks around each name are dropped (name the space bar ``"space"``). Names are not
    resolved here; pass the result to :func:`resolve_chord` (or ``XInput.keypress``).

    Args:
        text: key names joined by ``+``.

    Returns:
        The key names in the order written.

    Raises:
        UnknownKeyError: ``text`` is blank or has an empty name (``"ctrl+"``);
            ``detail["key"]`` holds the whole text (cut to 64 characters).
    """
    if not isinstance(text, str):
        raise _unknown(text, "key text must be a string")
    names: list[str] = []
    current = ""
    for char in text:
        # A "+" separates names only when a name precedes it; otherwise it is the key.
        if char == "+" and current.strip():
            names.append(current.strip())
            current = ""
        else:
            current += char
    names.append(current.strip())
    if any(not name for name in names):
        raise _unknown(text, "empty key name in chord")
    return names


def resolve_chord(names: Iterable[str]) -> list[str]:
    """Resolve the names of one chord to the keysyms to press, in pressing order.

    All names are resolved before anything is returned, so an unknown name fails the
    whole chord (and nothing gets pressed). Modifiers come first, in the caller's order,
    then the other keys in the caller's order; a key named twice is kept once. When the
    chord holds a modifier other than Shift, upper-case letters ``A`` to ``Z`` become their
    lower-case keysyms, because ``["CTRL", "A"]`` means Ctrl+A (select all), not
    Ctrl+Shift+A; hold ``"SHIFT"`` explicitly for that.

    Args:
        names: key names in any spelling :func:`to_keysym_name` accepts, e.g.
            ``["CTRL", "A"]`` or ``parse_chord("ctrl+shift+t")``.

    Returns:
        Canonical keysym names, modifiers first, e.g. ``["Control_L", "a"]``. Release
        them in the reverse order.

    Raises:
        UnknownKeyError: ``names`` is empty, or one of them is unknown (named in
            ``detail["key"]``).
    """
    resolved = [to_keysym_name(name) for name in names]
    if not resolved:
        raise UnknownKeyError("empty chord: no key names given", detail={"key": ""})
    modifiers = [ks for ks in resolved if ks in MODIFIER_KEYSYMS]
    others = [ks for ks in resolved if ks not in MODIFIER_KEYSYMS]
    if any(ks not in _SHIFT_KEYSYMS for ks in modifiers):
        others = [ks.lower() if len(ks) == 1 and "A" <= ks <= "Z" else ks for ks in others]
    return list(dict.fromkeys(modifiers + others))


# ---------------------------------------------------------------------------------------
# Keysym table, generated from python-xlib 0.33 Xlib.keysymdef (see the module docstring).
# ---------------------------------------------------------------------------------------
# fmt: off
_KEYSYMS: Final[dict[str, int]] = {
    # Xlib.keysymdef.latin1 (all)
    "space": 0x0020, "exclam": 0x0021, "quotedbl": 0x0022, "numbersign": 0x0023,
    "dollar": 0x0024, "percent": 0x0025, "ampersand": 0x0026, "apostrophe": 0x0027,
    "quoteright": 0x0027, "parenleft": 0x0028, "parenright": 0x0029, "asterisk": 0x002A,
    "plus": 0x002B, "comma": 0x002C, "minus": 0x002D, "period": 0x002E, "slash": 0x002F,
    "0": 0x0030, "1": 0x0031, "2": 0x0032, "3": 0x0033, "4": 0x0034, "5": 0x0035,
    "6": 0x0036, "7": 0x0037, "8": 0x0038, "9": 0x0039, "colon": 0x003A,
    "semicolon": 0x003B, "less": 0x003C, "equal": 0x003D, "greater": 0x003E,
    "question": 0x003F, "at": 0x0040, "A": 0x0041, "B": 0x0042, "C": 0x0043,
    "D": 0x0044, "E": 0x0045, "F": 0x0046, "G": 0x0047, "H": 0x0048, "I": 0x0049,
    "J": 0x004A, "K": 0x004B, "L": 0x004C, "M": 0x004D, "N": 0x004E, "O": 0x004F,
    "P": 0x0050, "Q": 0x0051, "R": 0x0052, "S": 0x0053, "T": 0x0054, "U": 0x0055,
    "V": 0x0056, "W": 0x0057, "X": 0x0058, "Y": 0x0059, "Z": 0x005A,
    "bracketleft": 0x005B, "backslash": 0x005C, "bracketright": 0x005D,
    "asciicircum": 0x005E, "underscore": 0x005F, "grave": 0x0060, "quoteleft": 0x0060,
    "a": 0x0061, "b": 0x0062, "c": 0x0063, "d": 0x0064, "e": 0x0065, "f": 0x0066,
    "g": 0x0067, "h": 0x0068, "i": 0x0069, "j": 0x006A, "k": 0x006B, "l": 0x006C,
    "m": 0x006D, "n": 0x006E, "o": 0x006F, "p": 0x0070, "q": 0x0071, "r": 0x0072,
    "s": 0x0073, "t": 0x0074, "u": 0x0075, "v": 0x0076, "w": 0x0077, "x": 0x0078,
    "y": 0x0079, "z": 0x007A, "braceleft": 0x007B, "bar": 0x007C, "braceright": 0x007D,
    "asciitilde": 0x007E, "nobreakspace": 0x00A0, "exclamdown": 0x00A1, "cent": 0x00A2,
    "sterling": 0x00A3, "currency": 0x00A4, "yen": 0x00A5, "brokenbar": 0x00A6,
    "section": 0x00A7, "diaeresis": 0x00A8, "copyright": 0x00A9, "ordfeminine": 0x00AA,
    "guillemotleft": 0x00AB, "notsign": 0x00AC, "hyphen": 0x00AD, "registered": 0x00AE,
    "macron": 0x00AF, "degree": 0x00B0, "plusminus": 0x00B1, "twosuperior": 0x00B2,
    "threesuperior": 0x00B3, "acute": 0x00B4, "mu": 0x00B5, "paragraph": 0x00B6,
    "periodcentered": 0x00B7, "cedilla": 0x00B8, "onesuperior": 0x00B9,
    "masculine": 0x00BA, "guillemotright": 0x00BB, "onequarter": 0x00BC,
    "onehalf": 0x00BD, "threequarters": 0x00BE, "questiondown": 0x00BF,
    "Agrave": 0x00C0, "Aacute": 0x00C1, "Acircumflex": 0x00C2, "Atilde": 0x00C3,
    "Adiaeresis": 0x00C4, "Aring": 0x00C5, "AE": 0x00C6, "Ccedilla": 0x00C7,
    "Egrave": 0x00C8, "Eacute": 0x00C9, "Ecircumflex": 0x00CA, "Ediaeresis": 0x00CB,
    "Igrave": 0x00CC, "Iacute": 0x00CD, "Icircumflex": 0x00CE, "Idiaeresis": 0x00CF,
    "ETH": 0x00D0, "Eth": 0x00D0, "Ntilde": 0x00D1, "Ograve": 0x00D2, "Oacute": 0x00D3,
    "Ocircumflex": 0x00D4, "Otilde": 0x00D5, "Odiaeresis": 0x00D6, "multiply": 0x00D7,
    "Ooblique": 0x00D8, "Ugrave": 0x00D9, "Uacute": 0x00DA, "Ucircumflex": 0x00DB,
    "Udiaeresis": 0x00DC, "Yacute": 0x00DD, "THORN": 0x00DE, "Thorn": 0x00DE,
    "ssharp": 0x00DF, "agrave": 0x00E0, "aacute": 0x00E1, "acircumflex": 0x00E2,
    "atilde": 0x00E3, "adiaeresis": 0x00E4, "aring": 0x00E5, "ae": 0x00E6,
    "ccedilla": 0x00E7, "egrave": 0x00E8, "eacute": 0x00E9, "ecircumflex": 0x00EA,
    "ediaeresis": 0x00EB, "igrave": 0x00EC, "iacute": 0x00ED, "icircumflex": 0x00EE,
    "idiaeresis": 0x00EF, "eth": 0x00F0, "ntilde": 0x00F1, "ograve": 0x00F2,
    "oacute": 0x00F3, "ocircumflex": 0x00F4, "otilde": 0x00F5, "odiaeresis": 0x00F6,
    "division": 0x00F7, "oslash": 0x00F8, "ugrave": 0x00F9, "uacute": 0x00FA,
    "ucircumflex": 0x00FB, "udiaeresis": 0x00FC, "yacute": 0x00FD, "thorn": 0x00FE,
    "ydiaeresis": 0x00FF,
    # Xlib.keysymdef.miscellany (all: editing, cursor, keypad, function and modifier keys)
    "BackSpace": 0xFF08, "Tab": 0xFF09, "Linefeed": 0xFF0A, "Clear": 0xFF0B,
    "Return": 0xFF0D, "Pause": 0xFF13, "Scroll_Lock": 0xFF14, "Sys_Req": 0xFF15,
    "Escape": 0xFF1B, "Delete": 0xFFFF, "Multi_key": 0xFF20, "SingleCandidate": 0xFF3C,
    "MultipleCandidate": 0xFF3D, "PreviousCandidate": 0xFF3E, "Kanji": 0xFF21,
    "Muhenkan": 0xFF22, "Henkan_Mode": 0xFF23, "Henkan": 0xFF23, "Romaji": 0xFF24,
    "Hiragana": 0xFF25, "Katakana": 0xFF26, "Hiragana_Katakana": 0xFF27,
    "Zenkaku": 0xFF28, "Hankaku": 0xFF29, "Zenkaku_Hankaku": 0xFF2A, "Touroku": 0xFF2B,
    "Massyo": 0xFF2C, "Kana_Lock": 0xFF2D, "Kana_Shift": 0xFF2E, "Eisu_Shift": 0xFF2F,
    "Eisu_toggle": 0xFF30, "Zen_Koho": 0xFF3D, "Mae_Koho": 0xFF3E, "Home": 0xFF50,
    "Left": 0xFF51, "Up": 0xFF52, "Right": 0xFF53, "Down": 0xFF54, "Prior": 0xFF55,
    "Page_Up": 0xFF55, "Next": 0xFF56, "Page_Down": 0xFF56, "End": 0xFF57,
    "Begin": 0xFF58, "Select": 0xFF60, "Print": 0xFF61, "Execute": 0xFF62,
    "Insert": 0xFF63, "Undo": 0xFF65, "Redo": 0xFF66, "Menu": 0xFF67, "Find": 0xFF68,
    "Cancel": 0xFF69, "Help": 0xFF6A, "Break": 0xFF6B, "Mode_switch": 0xFF7E,
    "script_switch": 0xFF7E, "Num_Lock": 0xFF7F, "KP_Space": 0xFF80, "KP_Tab": 0xFF89,
    "KP_Enter": 0xFF8D, "KP_F1": 0xFF91, "KP_F2": 0xFF92, "KP_F3": 0xFF93,
    "KP_F4": 0xFF94, "KP_Home": 0xFF95, "KP_Left": 0xFF96, "KP_Up": 0xFF97,
    "KP_Right": 0xFF98, "KP_Down": 0xFF99, "KP_Prior": 0xFF9A, "KP_Page_Up": 0xFF9A,
    "KP_Next": 0xFF9B, "KP_Page_Down": 0xFF9B, "KP_End": 0xFF9C, "KP_Begin": 0xFF9D,
    "KP_Insert": 0xFF9E, "KP_Delete": 0xFF9F, "KP_Equal": 0xFFBD, "KP_Multiply": 0xFFAA,
    "KP_Add": 0xFFAB, "KP_Separator": 0xFFAC, "KP_Subtract": 0xFFAD,
    "KP_Decimal": 0xFFAE, "KP_Divide": 0xFFAF, "KP_0": 0xFFB0, "KP_1": 0xFFB1,
    "KP_2": 0xFFB2, "KP_3": 0xFFB3, "KP_4": 0xFFB4, "KP_5": 0xFFB5, "KP_6": 0xFFB6,
    "KP_7": 0xFFB7, "KP_8": 0xFFB8, "KP_9": 0xFFB9, "F1": 0xFFBE, "F2": 0xFFBF,
    "F3": 0xFFC0, "F4": 0xFFC1, "F5": 0xFFC2, "F6": 0xFFC3, "F7": 0xFFC4, "F8": 0xFFC5,
    "F9": 0xFFC6, "F10": 0xFFC7, "F11": 0xFFC8, "L1": 0xFFC8, "F12": 0xFFC9,
    "L2": 0xFFC9, "F13": 0xFFCA, "L3": 0xFFCA, "F14": 0xFFCB, "L4": 0xFFCB,
    "F15": 0xFFCC, "L5": 0xFFCC, "F16": 0xFFCD, "L6": 0xFFCD, "F17": 0xFFCE,
    "L7": 0xFFCE, "F18": 0xFFCF, "L8": 0xFFCF, "F19": 0xFFD0, "L9": 0xFFD0,
    "F20": 0xFFD1, "L10": 0xFFD1, "F21": 0xFFD2, "R1": 0xFFD2, "F22": 0xFFD3,
    "R2": 0xFFD3, "F23": 0xFFD4, "R3": 0xFFD4, "F24": 0xFFD5, "R4": 0xFFD5,
    "F25": 0xFFD6, "R5": 0xFFD6, "F26": 0xFFD7, "R6": 0xFFD7, "F27": 0xFFD8,
    "R7": 0xFFD8, "F28": 0xFFD9, "R8": 0xFFD9, "F29": 0xFFDA, "R9": 0xFFDA,
    "F30": 0xFFDB, "R10": 0xFFDB, "F31": 0xFFDC, "R11": 0xFFDC, "F32": 0xFFDD,
    "R12": 0xFFDD, "F33": 0xFFDE, "R13": 0xFFDE, "F34": 0xFFDF, "R14": 0xFFDF,
    "F35": 0xFFE0, "R15": 0xFFE0, "Shift_L": 0xFFE1, "Shift_R": 0xFFE2,
    "Control_L": 0xFFE3, "Control_R": 0xFFE4, "Caps_Lock": 0xFFE5, "Shift_Lock": 0xFFE6,
    "Meta_L": 0xFFE7, "Meta_R": 0xFFE8, "Alt_L": 0xFFE9, "Alt_R": 0xFFEA,
    "Super_L": 0xFFEB, "Super_R": 0xFFEC, "Hyper_L": 0xFFED, "Hyper_R": 0xFFEE,
    # Xlib.keysymdef.xkb (ISO_Left_Tab, ISO_Enter, ISO_Level3_Shift and the dead keys only)
    "ISO_Level3_Shift": 0xFE03, "ISO_Left_Tab": 0xFE20, "ISO_Enter": 0xFE34,
    "dead_grave": 0xFE50, "dead_acute": 0xFE51, "dead_circumflex": 0xFE52,
    "dead_tilde": 0xFE53, "dead_macron": 0xFE54, "dead_breve": 0xFE55,
    "dead_abovedot": 0xFE56, "dead_diaeresis": 0xFE57, "dead_abovering": 0xFE58,
    "dead_doubleacute": 0xFE59, "dead_caron": 0xFE5A, "dead_cedilla": 0xFE5B,
    "dead_ogonek": 0xFE5C, "dead_iota": 0xFE5D, "dead_voiced_sound": 0xFE5E,
    "dead_semivoiced_sound": 0xFE5F, "dead_belowdot": 0xFE60,
    # Xlib.keysymdef.xf86 (X spelling XF86Name; server-control keysyms left out)
    "XF86ModeLock": 0x1008FF01, "XF86MonBrightnessUp": 0x1008FF02,
    "XF86MonBrightnessDown": 0x1008FF03, "XF86KbdLightOnOff": 0x1008FF04,
    "XF86KbdBrightnessUp": 0x1008FF05, "XF86KbdBrightnessDown": 0x1008FF06,
    "XF86MonBrightnessCycle": 0x1008FF07, "XF86Standby": 0x1008FF10,
    "XF86AudioLowerVolume": 0x1008FF11, "XF86AudioMute": 0x1008FF12,
    "XF86AudioRaiseVolume": 0x1008FF13, "XF86AudioPlay": 0x1008FF14,
    "XF86AudioStop": 0x1008FF15, "XF86AudioPrev": 0x1008FF16,
    "XF86AudioNext": 0x1008FF17, "XF86HomePage": 0x1008FF18, "XF86Mail": 0x1008FF19,
    "XF86Start": 0x1008FF1A, "XF86Search": 0x1008FF1B, "XF86AudioRecord": 0x1008FF1C,
    "XF86Calculator": 0x1008FF1D, "XF86Memo": 0x1008FF1E, "XF86ToDoList": 0x1008FF1F,
    "XF86Calendar": 0x1008FF20, "XF86PowerDown": 0x1008FF21,
    "XF86ContrastAdjust": 0x1008FF22, "XF86RockerUp": 0x1008FF23,
    "XF86RockerDown": 0x1008FF24, "XF86RockerEnter": 0x1008FF25, "XF86Back": 0x1008FF26,
    "XF86Forward": 0x1008FF27, "XF86Stop": 0x1008FF28, "XF86Refresh": 0x1008FF29,
    "XF86PowerOff": 0x1008FF2A, "XF86WakeUp": 0x1008FF2B, "XF86Eject": 0x1008FF2C,
    "XF86ScreenSaver": 0x1008FF2D, "XF86WWW": 0x1008FF2E, "XF86Sleep": 0x1008FF2F,
    "XF86Favorites": 0x1008FF30, "XF86AudioPause": 0x1008FF31,
    "XF86AudioMedia": 0x1008FF32, "XF86MyComputer": 0x1008FF33,
    "XF86VendorHome": 0x1008FF34, "XF86LightBulb": 0x1008FF35, "XF86Shop": 0x1008FF36,
    "XF86History": 0x1008FF37, "XF86OpenURL": 0x1008FF38, "XF86AddFavorite": 0x1008FF39,
    "XF86HotLinks": 0x1008FF3A, "XF86BrightnessAdjust": 0x1008FF3B,
    "XF86Finance": 0x1008FF3C, "XF86Community": 0x1008FF3D,
    "XF86AudioRewind": 0x1008FF3E, "XF86BackForward": 0x1008FF3F,
    "XF86Launch0": 0x1008FF40, "XF86Launch1": 0x1008FF41, "XF86Launch2": 0x1008FF42,
    "XF86Launch3": 0x1008FF43, "XF86Launch4": 0x1008FF44, "XF86Launch5": 0x1008FF45,
    "XF86Launch6": 0x1008FF46, "XF86Launch7": 0x1008FF47, "XF86Launch8": 0x1008FF48,
    "XF86Launch9": 0x1008FF49, "XF86LaunchA": 0x1008FF4A, "XF86LaunchB": 0x1008FF4B,
    "XF86LaunchC": 0x1008FF4C, "XF86LaunchD": 0x1008FF4D, "XF86LaunchE": 0x1008FF4E,
    "XF86LaunchF": 0x1008FF4F, "XF86ApplicationLeft": 0x1008FF50,
    "XF86ApplicationRight": 0x1008FF51, "XF86Book": 0x1008FF52, "XF86CD": 0x1008FF53,
    "XF86Calculater": 0x1008FF54, "XF86Clear": 0x1008FF55, "XF86Close": 0x1008FF56,
    "XF86Copy": 0x1008FF57, "XF86Cut": 0x1008FF58, "XF86Display": 0x1008FF59,
    "XF86DOS": 0x1008FF5A, "XF86Documents": 0x1008FF5B, "XF86Excel": 0x1008FF5C,
    "XF86Explorer": 0x1008FF5D, "XF86Game": 0x1008FF5E, "XF86Go": 0x1008FF5F,
    "XF86iTouch": 0x1008FF60, "XF86LogOff": 0x1008FF61, "XF86Market": 0x1008FF62,
    "XF86Meeting": 0x1008FF63, "XF86MenuKB": 0x1008FF65, "XF86MenuPB": 0x1008FF66,
    "XF86MySites": 0x1008FF67, "XF86New": 0x1008FF68, "XF86News": 0x1008FF69,
    "XF86OfficeHome": 0x1008FF6A, "XF86Open": 0x1008FF6B, "XF86Option": 0x1008FF6C,
    "XF86Paste": 0x1008FF6D, "XF86Phone": 0x1008FF6E, "XF86Q": 0x1008FF70,
    "XF86Reply": 0x1008FF72, "XF86Reload": 0x1008FF73, "XF86RotateWindows": 0x1008FF74,
    "XF86RotationPB": 0x1008FF75, "XF86RotationKB": 0x1008FF76, "XF86Save": 0x1008FF77,
    "XF86ScrollUp": 0x1008FF78, "XF86ScrollDown": 0x1008FF79,
    "XF86ScrollClick": 0x1008FF7A, "XF86Send": 0x1008FF7B, "XF86Spell": 0x1008FF7C,
    "XF86SplitScreen": 0x1008FF7D, "XF86Support": 0x1008FF7E,
    "XF86TaskPane": 0x1008FF7F, "XF86Terminal": 0x1008FF80, "XF86Tools": 0x1008FF81,
    "XF86Travel": 0x1008FF82, "XF86UserPB": 0x1008FF84, "XF86User1KB": 0x1008FF85,
    "XF86User2KB": 0x1008FF86, "XF86Video": 0x1008FF87, "XF86WheelButton": 0x1008FF88,
    "XF86Word": 0x1008FF89, "XF86Xfer": 0x1008FF8A, "XF86ZoomIn": 0x1008FF8B,
    "XF86ZoomOut": 0x1008FF8C, "XF86Away": 0x1008FF8D, "XF86Messenger": 0x1008FF8E,
    "XF86WebCam": 0x1008FF8F, "XF86MailForward": 0x1008FF90, "XF86Pictures": 0x1008FF91,
    "XF86Music": 0x1008FF92, "XF86Battery": 0x1008FF93, "XF86Bluetooth": 0x1008FF94,
    "XF86WLAN": 0x1008FF95, "XF86UWB": 0x1008FF96, "XF86AudioForward": 0x1008FF97,
    "XF86AudioRepeat": 0x1008FF98, "XF86AudioRandomPlay": 0x1008FF99,
    "XF86Subtitle": 0x1008FF9A, "XF86AudioCycleTrack": 0x1008FF9B,
    "XF86CycleAngle": 0x1008FF9C, "XF86FrameBack": 0x1008FF9D,
    "XF86FrameForward": 0x1008FF9E, "XF86Time": 0x1008FF9F, "XF86Select": 0x1008FFA0,
    "XF86View": 0x1008FFA1, "XF86TopMenu": 0x1008FFA2, "XF86Red": 0x1008FFA3,
    "XF86Green": 0x1008FFA4, "XF86Yellow": 0x1008FFA5, "XF86Blue": 0x1008FFA6,
    "XF86Suspend": 0x1008FFA7, "XF86Hibernate": 0x1008FFA8,
    "XF86TouchpadToggle": 0x1008FFA9, "XF86TouchpadOn": 0x1008FFB0,
    "XF86TouchpadOff": 0x1008FFB1, "XF86AudioMicMute": 0x1008FFB2,
    "XF86Keyboard": 0x1008FFB3, "XF86WWAN": 0x1008FFB4, "XF86RFKill": 0x1008FFB5,
    "XF86AudioPreset": 0x1008FFB6, "XF86RotationLockToggle": 0x1008FFB7,
    "XF86FullScreen": 0x1008FFB8,
}
# fmt: on

KEYSYM_VALUES: Final[Mapping[str, int]] = MappingProxyType(_KEYSYMS)
"""Every keysym name accepted by exact spelling → its numeric keysym (read-only)."""

# Latin-1 code point → preferred legacy keysym name (first name in table order wins:
# "apostrophe" over "quoteright", "grave" over "quoteleft").
_LATIN1_NAMES: Final[dict[int, str]] = {}
for _name, _value in _KEYSYMS.items():
    if (0x20 <= _value <= 0x7E or 0xA0 <= _value <= 0xFF) and _value not in _LATIN1_NAMES:
        _LATIN1_NAMES[_value] = _name

# Case-insensitive spellings of table names, kept only where they are unambiguous
# ("backspace" → "BackSpace"; "eacute" vs "Eacute" is ambiguous and left out).
_FOLDED: Final[dict[str, str]] = {}
_AMBIGUOUS: set[str] = set()
for _name, _value in _KEYSYMS.items():
    _key = _normalise(_name)
    _seen = _FOLDED.get(_key)
    if _seen is not None and _KEYSYMS[_seen] != _value:
        _AMBIGUOUS.add(_key)
    elif _seen is None:
        _FOLDED[_key] = _name
for _key in _AMBIGUOUS:
    del _FOLDED[_key]
del _name, _value, _key, _seen, _AMBIGUOUS
