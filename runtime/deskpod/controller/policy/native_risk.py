"""What an action in a desktop application's window presses, from its native controls
(:mod:`deskpod.protocol.native`), and how a person is told the window and the control.

A click in an application's window presses the native control under the point
(:attr:`~deskpod.protocol.Observation.native_at`); Enter or space, pressed or typed, presses the
focused one (:attr:`~deskpod.protocol.Observation.native_focused`). Such a press is judged as a
press on the page is: by the words of the control's name (the policy's ``l3_words`` and
``l2_words``, :func:`~deskpod.controller.policy.risk.ActionClassifier`), with words of the
desktop's own (:data:`NATIVE_L3_WORDS`: overwrite, format, empty trash...; :data:`NATIVE_L2_WORDS`:
closing without saving, replacing a file). A control whose application could not be asked
(``unread`` part ``native``) is unknown: ``L2``. An application without an accessibility tree
(xterm) has no native controls to read: its clicks stay ``L1`` and its keys are judged by the
terminal's rules. Names are the application's own words: untrusted, shown quoted and cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from deskpod.controller.policy.levels import RiskLevel
from deskpod.controller.policy.words import matching_word, word_pattern
from deskpod.protocol import AgentWindow, FileChooser, NativeElement

__all__ = [
    "NATIVE_L2", "NATIVE_L2_WORDS", "NATIVE_L3", "NATIVE_L3_WORDS", "PRESSABLE_NATIVE_ROLES", "describe_native",
    "describe_window", "native_word_risk", "pressed_native_label",
]

NATIVE_L3_WORDS: Final = ("overwrite", "format", "empty trash", "empty the trash", "wipe", "shred", "permanently")
"""Words that make pressing a native control ``L3`` besides the policy's ``l3_words`` (delete,
send...): the desktop's own irreversible acts (a disk formatted, a trash emptied, a file
overwritten)."""

NATIVE_L2_WORDS: Final = ("don't save", "do not save", "don’t save", "without saving", "discard", "replace",
                          "close without")
"""Words that make pressing a native control ``L2``: work lost (a document closed without
saving) or a file saved over another (GTK's "Replace" in its overwrite prompt)."""

NATIVE_L3: Final = word_pattern(NATIVE_L3_WORDS)
"""The pattern of :data:`NATIVE_L3_WORDS` (:func:`~.words.word_pattern`)."""

NATIVE_L2: Final = word_pattern(NATIVE_L2_WORDS)
"""The pattern of :data:`NATIVE_L2_WORDS`."""

PRESSABLE_NATIVE_ROLES: Final = frozenset({
    "push button", "toggle button", "menu item", "check menu item", "radio menu item", "check box", "radio button",
    "link", "page tab", "combo box", "list item", "tree item", "table cell", "icon", "split button",
})
"""AT-SPI roles (https://docs.gtk.org/atk/enum.Role.html, as ``Atspi.Accessible.get_role_name``
names them) of controls a click or Enter presses."""


def pressed_native_label(element: NativeElement | None) -> str | None:
    """The words a press of ``element`` is judged by (its name, else its text), or ``None``
    when it is not a control a press acts on (a text area, a label, nothing)."""
    if element is None or element.role not in PRESSABLE_NATIVE_ROLES:
        return None
    return element.name or element.text or ""


def native_word_risk(label: str) -> tuple[RiskLevel, str] | None:
    """The level :data:`NATIVE_L3_WORDS` or :data:`NATIVE_L2_WORDS` give a press of a native
    control labelled ``label``, and why (``"a native control labelled 'format': ..."``), or
    ``None`` when neither list matches."""
    word = matching_word(label, NATIVE_L3)
    if word:
        return "L3", f"a native control labelled {word!r}: may be irreversible (a file overwritten, a disk formatted)"
    word = matching_word(label, NATIVE_L2)
    if word:
        return "L2", f"a native control labelled {word!r}: a document may be lost or a file saved over"
    return None


def describe_window(window: AgentWindow) -> str:
    """An agent's window for a person: ``"window of the agent's program 'XTerm': 'title'"``, or
    ``"window of the desktop application 'editor' 'Mousepad': 'title'"`` for one ``open_app`` started."""
    app = f" {window.app.strip()[:60]!r}" if window.app else ""
    title = f": {window.title.strip()[:80]!r}" if window.title else ""
    owner = f"the desktop application {window.source!r}" if window.source != "command" else "the agent's program"
    return f"window of {owner}{app}{title}"


def describe_native(window: AgentWindow, element: NativeElement | None) -> str:
    """The control ``element`` in ``window`` for a person: ``"push button 'Delete' in the window
    of the desktop application 'terminal' 'Zenity': 'Question'"``; the window alone without one."""
    if element is None:
        return describe_window(window)
    label = (element.name or element.text or "").strip()[:80]
    return f"{element.role}{f' {label!r}' if label else ''} in the {describe_window(window)}"


def file_dialog_answer(chooser: FileChooser | None, paths: Sequence[str]) -> tuple[str, str] | None:
    """Why a ``set_files`` answering ``chooser`` is ``L2`` and what it acts on, when the chooser is
    a desktop application's file dialog (``None``: it is the page's, an upload). ``paths``: the
    action's. Returns ``(reason, target)``."""
    if chooser is None or chooser.application is None:
        return None
    what = "names the file it saves to (it may replace one)" if chooser.save else "names the file it opens"
    target = f"the file dialog of the desktop application '{chooser.application}': {', '.join(paths)}"
    return f"answers a desktop application's file dialog: {what}", target[:200]
