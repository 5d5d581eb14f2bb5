"""A desktop application's file dialog answered by ``set_files``, as the page's file chooser is.

When the window with the keyboard focus is a desktop application's GTK file chooser (its
accessibility tree says so: :class:`~deskpod.protocol.NativeDialog` role ``file chooser``),
the observation reports it as its ``file_chooser`` (with ``application`` and ``save``) and a
``set_files`` action answers it: the daemon names the file in the dialog's location field
and confirms, with the keys a person would press (GTK 3's file chooser, documented at
https://docs.gtk.org/gtk3/class.FileChooserWidget.html): Control+L (the location field: the
name field of a save dialog, the typed location of an open dialog), Control+A, the file's
path in the applications' zone (``/workspace/`` and the workspace-relative path: the zone
shares the workspace at that path), a pause of :data:`COMPLETION_WAIT_S`, Delete (drops what
GTK's inline completion may have added after the typed name, so the name typed is the name
chosen), Return. The dialog then opens or saves that file, or asks its own questions (a save
over an existing file: GTK's "Replace" prompt, which the policy judges).

The page's chooser goes first: while the browser reports one, ``set_files`` answers it. The
application's file is reached by the application, in its zone: only the path's shape is
checked here (inside the workspace, one file).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Final

from deskpod.agentd.apps_wire import AppsAccessibleRequest
from deskpod.agentd.native_controls import NativeReader, file_chooser_of
from deskpod.agentd.observe import AgentWindows
from deskpod.errors import ExecutionError
from deskpod.protocol import APPS, Action, Keypress, SetFiles, TypeText, Wait

__all__ = ["COMPLETION_WAIT_S", "NativeFileDialog", "ZONE_WORKSPACE"]

ZONE_WORKSPACE: Final = "/workspace"
"""The workspace's root in the applications' zone."""

COMPLETION_WAIT_S: Final = 0.5
"""Wait after typing the path, before Delete and Return: the location field reads the typed
path's folder for its completion in the background, and a Return pressed before that is
answered is lost (measured: the path typed, the dialog still open)."""


def _zone_path(path: str) -> str:
    """The zone's absolute path of the workspace-relative ``path``.

    Raises:
        ExecutionError: ``path`` is absolute, leaves the workspace or holds a control character
            (typed, a newline or a tab would act in the dialog): ``not_a_workspace_file``.
    """
    normal = posixpath.normpath(path)
    control = any(ord(c) < 0x20 or ord(c) == 0x7F for c in path)  # a newline would press Return mid-path
    if control or normal.startswith("/") or normal == ".." or normal.startswith("../") or normal == ".":
        raise ExecutionError("a file dialog is answered with a path inside the workspace",
                             detail={"reason": "not_a_workspace_file", "path": path[:256]})
    return f"{ZONE_WORKSPACE}/{normal}"


class NativeFileDialog:
    """Turns ``set_files`` into the keys that answer the focused application's file dialog.

    Args:
        windows: the agent's windows (the one with the keyboard focus).
        reader: reads the applications' accessibility trees.
        page_chooser_open: whether the browser reports a file chooser (it goes first).
    """

    def __init__(self, windows: AgentWindows, reader: NativeReader, page_chooser_open: Callable[[], bool]) -> None:
        self.windows = windows
        self.reader = reader
        self.page_chooser_open = page_chooser_open

    async def keys(self, action: SetFiles) -> list[Action] | None:
        """The input that answers the focused file dialog with ``action.paths``; ``None`` when
        the page's chooser is open or the focused window is no application's file dialog (the
        page's setter then answers, or refuses with ``no_file_chooser``).

        Raises:
            ExecutionError: more than one path (``too_many_files``: the location field takes
                one), or a path outside the workspace (``not_a_workspace_file``).
            DeskpodError: the focused window or its tree could not be read.
        """
        if self.page_chooser_open():
            return None
        window = await self.windows.focus_window()
        if window is None or window.source not in APPS:
            return None
        answer = await self.reader.accessible(AppsAccessibleRequest(focus_window=list(window.box),
                                                                    focus_title=window.title))
        if file_chooser_of(answer.dialog, window) is None:
            return None
        if len(action.paths) > 1:
            raise ExecutionError("an application's file dialog takes one file", detail={"reason": "too_many_files"})
        path = _zone_path(action.paths[0])
        return [Keypress(type="keypress", keys=["ctrl", "l"]), Keypress(type="keypress", keys=["ctrl", "a"]),
                TypeText(type="type", text=path), Wait(type="wait", seconds=COMPLETION_WAIT_S),
                Keypress(type="keypress", keys=["Delete"]), Keypress(type="keypress", keys=["Return"])]
