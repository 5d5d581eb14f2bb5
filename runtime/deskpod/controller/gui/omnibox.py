"""Navigation typed into the browser's address bar (the omnibox), classified like a link.

A page's controls are judged from what the daemon reads under them; the address bar is
Chromium's own UI, which the page's DOM does not show. An agent reaches it with the
keyboard: ``ctrl+l``, ``alt+d`` or ``F6`` focus it (the whole URL selected, so typing
replaces it), then text, then Enter navigates. :class:`OmniboxTracker` follows that, one
action at a time, as the controller assesses each: it returns the URL the Enter will load,
and the run judges it as a link to its target (:mod:`.judge`): a host outside the task's
or policy's allowlist is refused before the key is pressed, and a host the run has not
visited yet is ``L2``, and so is a URL that names a file to download
(:func:`~deskpod.controller.policy.risk.link_risk`). An agent that means to open a URL
sends a ``navigate`` action instead, which loads exactly that URL (the address bar
completes typed text from the browser's history) and is judged the same way.

Text typed while nothing in the page has the keyboard focus and that looks like a URL is
treated the same way when Enter follows it (the focus may be in the address bar after a
click on it, which the page cannot see). This only raises a level: text that was not going
to the address bar at all is judged more strictly, never less. Keys while another window
has the keyboard focus (a desktop application, as the daemon reads the X server's focus)
do not go to the browser at all: they are not followed.
"""

from __future__ import annotations

import re

from deskpod.protocol import Action, Click, DoubleClick, FocusedElement, Keypress, TripleClick, TypeText

__all__ = ["FOCUS_CHORDS", "OmniboxTracker", "typed_url"]

FOCUS_CHORDS: frozenset[frozenset[str]] = frozenset({
    frozenset({"ctrl", "l"}), frozenset({"control_l", "l"}), frozenset({"control", "l"}),
    frozenset({"alt", "d"}), frozenset({"alt_l", "d"}), frozenset({"f6"}),
})
"""Chords that put the keyboard focus in Chromium's address bar (lower case)."""

_MAX_TEXT_CHARS = 8192
_ENTER = frozenset({"return", "enter", "kp_enter"})
_LEAVE = frozenset({"escape", "tab"})
_HOSTLIKE = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(:\d+)?([/?#].*)?$")


def typed_url(text: str) -> str | None:
    """The URL Chromium's address bar loads for ``text`` when it is a URL or a host name
    (``demo.test/x`` → ``http://demo.test/x``), else ``None`` (a search, which Chromium
    sends nowhere without a search engine, or nothing)."""
    text = text.strip()
    if not text or any(c.isspace() for c in text):
        return None
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        return text
    if _HOSTLIKE.match(text):
        return "http://" + text
    return None


def _keys(action: Keypress) -> set[str]:
    return {part.strip().lower() for key in action.keys for part in key.split("+") if part.strip()}


class OmniboxTracker:
    """What the agent has typed into the address bar so far in a run (see the module)."""

    def __init__(self) -> None:
        self.focused = False
        self.text = ""

    def step(self, action: Action, page_focus: FocusedElement | None, elsewhere: bool = False) -> str | None:
        """Follow one action; the URL it makes the address bar load, or ``None``.

        Args:
            action: the action about to run.
            page_focus: the element with the keyboard focus in the page (``None``: none).
            elsewhere: the keyboard focus is in a window that is not the browser's (an
                agent's program, a desktop application: the observation's ``focus_window``,
                as the daemon reads the X server's focus): keys go there, not to the address bar.
        """
        if elsewhere:
            self.focused, self.text = False, ""
            return None
        if isinstance(action, (Click, DoubleClick, TripleClick)):
            self.focused, self.text = False, ""
            return None
        if isinstance(action, Keypress):
            keys = _keys(action)
            if frozenset(keys) in FOCUS_CHORDS:
                self.focused, self.text = True, ""
                return None
            if keys & _LEAVE:
                self.focused, self.text = False, ""
                return None
            if keys & _ENTER:
                return self._enter(page_focus)
            return None
        if isinstance(action, TypeText):
            if not self.focused and page_focus is not None:
                self.text = ""  # the text goes into the page's focused field
                return None
            end = re.search(r"[\r\n]", action.text)
            if end is None:
                self.text = (self.text + action.text)[-_MAX_TEXT_CHARS:]
                return None
            self.text += action.text[: end.start()]
            return self._enter(page_focus)
        return None

    def _enter(self, page_focus: FocusedElement | None) -> str | None:
        url = typed_url(self.text) if (self.focused or page_focus is None) else None
        self.focused, self.text = False, ""
        return url
