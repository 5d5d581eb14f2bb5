"""A file chooser answered the way the vendors' computer-use models answer one: a typed path and Enter.

The daemon intercepts a page's file chooser (no native dialog opens) and reports it in
the observation's ``file_chooser``; the protocol's answer is ``set_files``. The vendor
formats (OpenAI's and Anthropic's computer actions) have no such action: a model types
the file's path into the dialog it expects and presses Enter. While a chooser is reported,
:class:`ChooserTyping` reads that typing as the dialog would: typed text is the file name
field (not sent to the page, where it would land in the page or the address bar), and
Enter (or text ending with a newline) answers the chooser with ``set_files`` on those paths,
judged like any ``set_files`` (an upload, ``L2``). Escape closes the chooser at the daemon
(the field is forgotten with it). One path per line; a path under ``/workspace/`` (the
workspace's root in the sandbox) is taken relative to it.
"""

from __future__ import annotations

import posixpath

from deskpod import keys
from deskpod.errors import UnknownKeyError
from deskpod.protocol import Action, Keypress, Observation, SetFiles, TypeText
from deskpod.protocol.downloads import MAX_UPLOAD_FILES

__all__ = ["ChooserTyping", "WORKSPACE_ROOT"]

WORKSPACE_ROOT = "/workspace"
"""The workspace's root as a program in the sandbox sees it."""

_ENTER = (["Return"], ["KP_Enter"])


def _chord(action: Action) -> list[str]:
    """The keysyms ``action`` presses as one chord (``[]``: not a keypress, or a key unknown)."""
    if not isinstance(action, Keypress):
        return []
    try:
        return keys.resolve_chord([name for item in action.keys for name in keys.parse_chord(item)])
    except UnknownKeyError:
        return []


def _workspace_path(typed: str) -> str:
    """``typed`` relative to the workspace's root when it names a path under it."""
    path = typed.strip().strip('"')
    if path == WORKSPACE_ROOT or path.startswith(WORKSPACE_ROOT + "/"):
        return posixpath.relpath(path, WORKSPACE_ROOT)
    return path


class ChooserTyping:
    """Turns typing and Enter while a file chooser is reported into its ``set_files`` answer
    (see the module). One per run."""

    def __init__(self) -> None:
        self.field = ""
        """What was typed into the open chooser so far."""

    def answer(self, action: Action, current: Observation) -> Action | None:
        """What ``action`` does with the page as ``current`` shows it.

        Returns:
            ``action`` itself when no page's chooser is reported (an application's file dialog
            takes the typing itself) or it is not typing or Enter;
            a ``set_files`` when it completes a path (Enter, or text ending with a newline);
            ``None`` when it only types into the chooser's field (nothing to send).
        """
        if current.file_chooser is None or current.file_chooser.application is not None:
            self.field = ""
            return action  # an application's file dialog is a window: typing goes to it
        if isinstance(action, TypeText):
            self.field += action.text
            if not self.field.endswith(("\n", "\r")):
                return None
        elif _chord(action) not in _ENTER:
            if _chord(action) == ["Escape"]:
                self.field = ""
            return action
        paths = [_workspace_path(line) for line in self.field.splitlines() if line.strip()]
        self.field = ""
        if not paths:
            return action
        return SetFiles(type="set_files", paths=paths[:MAX_UPLOAD_FILES])
