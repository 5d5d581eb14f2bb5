"""Split keyboard actions so each key is judged against the element focused when it lands.

A chord or a typed string can move the keyboard focus and then press what it moved to:
``["Tab", "Return"]`` or the text ``"\\t\\n"`` focus the next control and activate it, and
``"alice@example.com\\thunter2"`` types its second half into whatever field follows. Judged
against the element focused *before* the action, both look harmless. The controller
therefore runs such an action as segments and observes the focus between them (every
observation reports :class:`~deskpod.protocol.FocusedElement`), so each segment is
classified against the element that will receive it (:mod:`.runner`).

Why the controller splits rather than the daemon reporting per key: the daemon executes
and never decides (SECURITY.md, "Trust zones and barriers"); splitting keeps every decision on the host,
needs no new wire message, and a segment judged at a confirmation level waits for the
human *before* its keys are sent, which a per-key report after the fact could not do.

The split keeps the action's effect:

- **Typed text** is cut into consecutive :class:`~deskpod.protocol.TypeText` pieces whose
  concatenation is the original text. A cut falls before and after each Tab, newline
  (``"\\r\\n"`` stays one piece: the daemon types it as one Return) and space, except
  where the focused element makes the character inert: a space in an editable field, a
  newline in a multi-line one (a textarea or a content-editable element). Ordinary
  sentences typed into a field therefore stay one piece.
- **Chords** with more than one key besides the modifiers become one chord per key, in
  the order the daemon presses them, each with all the chord's modifiers held, spelt as
  the keysyms the daemon resolves them to (:func:`deskpod.keys.resolve_chord`:
  ``["shift", "Tab", "Return"]`` → ``["Shift_L", "Tab"]``, ``["Shift_L", "Return"]``). A
  chord presses its keys in order while holding the earlier ones; pressing them one
  after the other moves the focus and activates controls the same way.
  A held chord (:class:`~deskpod.protocol.HoldKey`) is split the same way, each piece
  held for the same ``seconds`` (so the whole takes longer).
- A chord with a name that does not resolve is not split: the daemon refuses it whole,
  and nothing is pressed.

A piece that is only a Tab, a newline or a space is judged as that key pressed
(:func:`key_equivalent`): leaving a password field with Tab types nothing into it. Typed
text is secret, and redacted wherever the run records it, when any piece of it is judged
to go into a password or payment field, or such a field has the focus after a piece.

Residual: a page's own script may move the focus while a piece of plain text is typed
(an auto-advancing code field); the next cut sees the new focus, but characters inside
one piece are not judged one by one. Such a page could press its own controls anyway.
"""

from __future__ import annotations

from typing import Final

from deskpod.errors import UnknownKeyError
from deskpod.keys import MODIFIER_KEYSYMS, parse_chord, resolve_chord, to_keysym_name
from deskpod.protocol import Action, FocusedElement, HoldKey, Keypress, TypeText

__all__ = [
    "chord_keysyms",
    "chord_segments",
    "first_segment",
    "key_equivalent",
    "may_move_focus",
    "next_text_segment",
]

_NEWLINES: Final = ("\r\n", "\n", "\r")
_CUTS: Final = frozenset("\t\n\r ")


def chord_keysyms(keys: list[str]) -> list[str] | None:
    """The canonical keysym names of a chord's keys, in the order written.

    Args:
        keys: a :class:`~deskpod.protocol.Keypress`'s ``keys`` (each may be chord text
            such as ``"ctrl+Return"``).

    Returns:
        Keysym names (``["Control_L", "Return"]``), or ``None`` when a name does not
        resolve (the daemon will refuse the chord).
    """
    try:
        return [to_keysym_name(name) for item in keys for name in parse_chord(item)]
    except UnknownKeyError:
        return None


def chord_segments(action: Keypress | HoldKey) -> list[Keypress | HoldKey]:
    """Split a chord into one chord per key besides its modifiers, modifiers kept.

    Args:
        action: the chord.

    Returns:
        ``[action]`` when it has at most one such key or a name that does not resolve;
        otherwise one action of the same type per key, in the daemon's pressing order.
    """
    try:
        pressed = resolve_chord([name for item in action.keys for name in parse_chord(item)])
    except UnknownKeyError:
        return [action]
    modifiers = [ks for ks in pressed if ks in MODIFIER_KEYSYMS]
    others = [ks for ks in pressed if ks not in MODIFIER_KEYSYMS]
    if len(others) <= 1:
        return [action]
    if isinstance(action, HoldKey):
        return [HoldKey(type="hold_key", keys=[*modifiers, key], seconds=action.seconds) for key in others]
    return [Keypress(type="keypress", keys=[*modifiers, key]) for key in others]


def _inert(char: str, focused: FocusedElement | None) -> bool:
    """True when typing ``char`` (a cut character) into ``focused`` only inserts text."""
    if focused is None or not focused.editable or char == "\t":
        return False
    if char == " ":
        return True
    return focused.tag != "input"


def next_text_segment(text: str, focused: FocusedElement | None) -> str:
    """The first piece of ``text`` to type while ``focused`` has the focus.

    Args:
        text: what is left to type (not empty).
        focused: the element focused now (``None``: none, or unknown).

    Returns:
        A non-empty prefix of ``text``: the characters up to the first Tab, newline or
        space that is not inert in ``focused``, or that character alone when ``text``
        starts with it (``"\\r\\n"`` as one).
    """
    for newline in _NEWLINES:
        if text.startswith(newline) and not _inert("\n", focused):
            return newline
    if text[0] in _CUTS and not _inert(text[0], focused):
        return text[0]
    for index, char in enumerate(text):
        if char in _CUTS and not _inert(char, focused):
            return text[:index]
    return text


_KEY_OF_PIECE: Final = {"\t": "Tab", "\n": "Return", "\r": "Return", "\r\n": "Return", " ": "space"}


def key_equivalent(piece: Action) -> Action:
    """What a piece of a split action is judged as: a piece that is only a Tab, a newline or
    a space is that key pressed (a Tab typed from a password field leaves it, it types
    nothing secret into it); any other piece is itself.

    Args:
        piece: a piece from :func:`chord_segments` or :func:`next_text_segment`.

    Returns:
        A :class:`~deskpod.protocol.Keypress` of that key, or ``piece``.
    """
    if isinstance(piece, TypeText) and piece.text in _KEY_OF_PIECE:
        return Keypress(type="keypress", keys=[_KEY_OF_PIECE[piece.text]])
    return piece


def first_segment(action: Action, focused: FocusedElement | None) -> Action:
    """The first piece of a keyboard action with ``focused`` focused: what lands on that
    element, so what the action is judged by before it runs (the rest is judged as it lands).

    Args:
        action: any protocol action.
        focused: the element focused now.

    Returns:
        ``action`` itself when it is not split (or not a keyboard action), else its first piece
        (as :func:`key_equivalent` judges it).
    """
    if isinstance(action, (Keypress, HoldKey)):
        return chord_segments(action)[0]
    if isinstance(action, TypeText) and action.text:
        piece = next_text_segment(action.text, focused)
        return action if piece == action.text else key_equivalent(TypeText(type="type", text=piece))
    return action


def may_move_focus(action: Action) -> bool:
    """True for typed text with a Tab or a newline in it, which may carry the rest of the
    text into another field (a password field the controller cannot see yet)."""
    return isinstance(action, TypeText) and any(c in action.text for c in "\t\n\r")
