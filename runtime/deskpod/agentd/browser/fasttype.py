"""Long text into a focused page field as one insertion, not thousands of key events.

XTEST sends key events far faster than Chromium handles them: measured here, 5,000
ASCII characters left the daemon in 0.9 s, the browser took them off its X queue in
1.3 s more, and the page had them all 7 s later (every key is a ``keydown``,
``keypress``, ``beforeinput``, ``input`` and ``keyup`` in the renderer, each with its
own layout). A character that is not on the keymap also costs a spare-keycode remap,
which every X client (the window manager included) must handle.

So a ``type`` action's runs of text of at least :data:`INSERT_MIN_CHARS` characters
between line breaks and tabs go in through the DevTools protocol's
``Input.insertText`` (what an IME commit or an emoji keyboard does: the page sees
``beforeinput`` and ``input`` with ``inputType: "insertText"``), all but the last
character; the last one, and every ``\\n`` and ``\\t``, is still a real key press
through XTEST, so ``keydown``/``keyup`` handlers (autocomplete, "Enter submits") see
the text end as with a keyboard. Only when the focus is where keys would land:
the browser window has the X input focus (``document.hasFocus()``) and the page's
focused element, through open shadow roots, is a text field, a textarea or
contenteditable (:data:`EDITABLE_FOCUS_SCRIPT`); otherwise, and for shorter runs,
every character is typed with XTEST.

The controller's judgement is unchanged: it cuts and judges typed text before the
request is sent, against the element focused where each piece lands.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = ["EDITABLE_FOCUS_SCRIPT", "INSERT_MIN_CHARS", "Insert", "TextPiece", "split_for_insertion"]

INSERT_MIN_CHARS: Final = 64
"""Shortest run of text (between line breaks and tabs) inserted in one piece; shorter
runs are typed key by key (about 1.3 ms a character in Chromium)."""

EDITABLE_FOCUS_SCRIPT: Final = """(() => {
  if (!document.hasFocus()) return false;
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  if (!el || el.disabled || el.readOnly) return false;
  if (el.isContentEditable) return true;
  if (el.tagName === 'TEXTAREA') return true;
  if (el.tagName !== 'INPUT') return false;
  return ['text', 'search', 'url', 'tel', 'email', 'password', ''].includes((el.getAttribute('type') || '').toLowerCase());
})()"""
"""True when the page's focused element takes typed text and the window has the focus."""

_BREAKS: Final = re.compile(r"(\r\n|\r|\n|\t)")

TextPiece = tuple[str, bool]
"""A piece of a ``type`` action's text and whether it may be inserted in one go."""

Insert = Callable[[str], Awaitable[bool]]
"""``insert(text)``: insert ``text`` at the page's focus; False (nothing inserted) when
the focus does not take text (:meth:`deskpod.agentd.browser.cdp.Browser.insert_text`)."""


def split_for_insertion(text: str, min_chars: int = INSERT_MIN_CHARS) -> list[TextPiece]:
    """Cut ``text`` into pieces to insert and pieces to type, in order.

    A run of at least ``min_chars`` characters between line breaks and tabs becomes
    an insertable piece (all but its last character) and a typed one (the last
    character); everything else is typed. Joined, the pieces are ``text``.

    Returns:
        ``[(piece, insertable), ...]``, adjacent typed pieces merged.
    """
    pieces: list[TextPiece] = []

    def add(piece: str, insertable: bool) -> None:
        if not piece:
            return
        if pieces and not insertable and not pieces[-1][1]:
            pieces[-1] = (pieces[-1][0] + piece, False)
        else:
            pieces.append((piece, insertable))

    for part in _BREAKS.split(text):
        if len(part) >= min_chars and not _BREAKS.fullmatch(part):
            add(part[:-1], True)
            add(part[-1], False)
        else:
            add(part, False)
    return pieces
