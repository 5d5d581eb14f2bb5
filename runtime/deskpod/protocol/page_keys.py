"""What a key press would do on the page besides typing: its declared shortcuts and key listeners.

Read by the daemon with the focused element (:attr:`Observation.page_keys
<deskpod.protocol.Observation.page_keys>`) and judged by the controller: a chord matching a
control's ``accesskey`` or ``aria-keyshortcuts`` presses that control; a printable key with
nothing editable focused, on a page that listens for keys, may run one of the page's own
shortcuts (``#`` deletes the selected message in a mail client). Every string is page content
(untrusted) and cut to its cap; the lists are bounded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import MAX_LABEL_CHARS

__all__ = [
    "KEY_LISTENER_PLACES",
    "KeyListenerPlace",
    "KeyShortcut",
    "MAX_KEY_SHORTCUTS",
    "MAX_SHORTCUT_KEYS_CHARS",
    "PageKeys",
]

MAX_KEY_SHORTCUTS = 32
"""Most declared shortcuts an observation reports (the first in document order, the
focused frame's before its parents')."""

MAX_SHORTCUT_KEYS_CHARS = 100
"""Longest ``accesskey`` or ``aria-keyshortcuts`` value reported (longer ones are cut)."""

KeyListenerPlace = Literal["window", "document", "body", "focused"]
"""Where a key listener was found: the window, the document or its ``<body>`` of a document on
the focus path (the top one and each focused frame's), or the focused element or one of its
ancestors (``focused``)."""

KEY_LISTENER_PLACES: tuple[KeyListenerPlace, ...] = ("window", "document", "body", "focused")
"""Every :data:`KeyListenerPlace`."""


class KeyShortcut(BaseModel):
    """A control that declares a keyboard shortcut.

    ``kind``: ``"accesskey"`` (the HTML ``accesskey`` attribute: Chromium on Linux presses the
    control on Alt+key and Alt+Shift+key) or ``"aria"`` (``aria-keyshortcuts``, e.g.
    ``"Control+Enter Alt+P"``: space-separated shortcuts, keys joined by ``+``). ``keys``: the
    attribute's value as written (at most :data:`MAX_SHORTCUT_KEYS_CHARS` characters).
    ``label``: the control's label (``aria-label``, its text, value or title), at most
    200 characters (``None``: it has none). Page content: untrusted.
    """

    model_config = STRICT
    kind: Literal["accesskey", "aria"]
    keys: Annotated[str, Field(max_length=MAX_SHORTCUT_KEYS_CHARS)]
    label: Annotated[str, Field(max_length=MAX_LABEL_CHARS)] | None = None


class PageKeys(BaseModel):
    """What keys may do on the active tab's page besides typing into the focused element.

    ``shortcuts``: controls declaring a shortcut in the documents on the focus path (the top
    document and each focused frame's), at most :data:`MAX_KEY_SHORTCUTS`. ``listeners``: where
    ``keydown``, ``keypress`` or ``keyup`` listeners were found (DevTools'
    ``DOMDebugger.getEventListeners``; ``on…`` attributes included), read only when nothing
    editable has the focus (else ``[]``): a printable key there reaches the page's scripts,
    not a field. Page content: untrusted.
    """

    model_config = STRICT
    shortcuts: Annotated[list[KeyShortcut], Field(max_length=MAX_KEY_SHORTCUTS)] = []
    listeners: Annotated[list[KeyListenerPlace], Field(max_length=len(KEY_LISTENER_PLACES))] = []
