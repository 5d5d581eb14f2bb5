"""Giving the page files of the workspace: answering its file chooser (the ``set_files``
action) and dropping them onto it (``drop_files``).

The daemon enables ``Page.setInterceptFileChooserDialog`` on the active tab
(https://chromedevtools.github.io/devtools-protocol/tot/Page/#method-setInterceptFileChooserDialog):
no native chooser window opens (it would open in the browser's home folder, where
the agent's files are not), and ``Page.fileChooserOpened`` becomes the observation's
``file_chooser``. ``set_files`` answers it with ``DOM.setFileInputFiles``; Escape closes it
unanswered (:meth:`FileSetter.cancel`), as it closes a native chooser. ``drop_files`` drags
the files onto the page (``Input.dispatchDragEvent`` with ``data.files``).

The agent's files are in the workspace container, which the browser cannot see. The
daemon asks the workspace runner for them (``workspace_manifest`` with contents: it
follows no symlink and reads only regular files inside the workspace), writes the
bytes into a fresh folder under :data:`UPLOADS_DIR` in the sandbox (a reset empties
it with the rest of ``/tmp``) and gives the browser those copies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import posixpath
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from deskpod.errors import ExecutionError
from deskpod.protocol import DropFiles, SetFiles, WorkspaceManifest, WorkspaceManifestRequest

if TYPE_CHECKING:
    from deskpod.agentd.browser.cdp import Browser
    from deskpod.agentd.workspace.runner_client import RunnerClient

__all__ = ["FileSetter", "UPLOADS_DIR"]

UPLOADS_DIR = Path("/tmp/uploads")
"""Where the copies of uploaded workspace files are, in the sandbox container."""


def _normal(path: str) -> str:
    """A workspace-relative path as the manifest names it (``./a//b`` → ``a/b``)."""
    return posixpath.normpath(path).lstrip("/")


class FileSetter:
    """Runs ``set_files`` and ``drop_files`` actions and keeps the file chooser's state.

    Args:
        browser: the daemon's DevTools client (its open file chooser).
        runner: the workspace runner's client, to read the files.
        workspace_lock: the daemon's lock that keeps workspace requests one at a time.
        folder: where the copies go (default :data:`UPLOADS_DIR`).
    """

    def __init__(self, browser: Browser, runner: RunnerClient, workspace_lock: asyncio.Lock,
                 folder: Path = UPLOADS_DIR) -> None:
        self.browser = browser
        self.runner = runner
        self.workspace_lock = workspace_lock
        self.folder = folder

    async def __call__(self, action: SetFiles) -> None:
        """Answer the open file chooser with ``action.paths``.

        Raises:
            ExecutionError: no file chooser is open (``detail["reason"]``
                ``no_file_chooser``), several files for a single-file chooser
                (``too_many_files``), a path that is not a regular file in the
                workspace or whose content did not fit one reply (``not_a_workspace_file``,
                ``detail["path"]``), or the browser refused the files.
            WorkspaceUnavailableError: the workspace runner could not be asked.
        """
        chooser = self.browser.file_chooser
        if chooser is None or chooser.get("backend_node_id") is None:
            raise ExecutionError("no file chooser is open", detail={"reason": "no_file_chooser"})
        wanted = [_normal(p) for p in action.paths]
        if len(wanted) > 1 and not chooser["multiple"]:
            raise ExecutionError("this file chooser takes one file", detail={"reason": "too_many_files"})
        staged = await self._copies(wanted)
        await self.browser.set_input_files(int(chooser["backend_node_id"]), staged)
        self.browser.file_chooser = None

    async def drop(self, action: DropFiles, sx: int, sy: int) -> None:
        """Drop ``action.paths`` onto the page at the screen point (``sx``, ``sy``), pixels.

        Raises:
            ExecutionError: a path that is not a regular file in the workspace
                (``detail["reason"]`` ``not_a_workspace_file``, ``detail["path"]``), or the
                browser refused the drop.
            WorkspaceUnavailableError: the workspace runner could not be asked.
        """
        staged = await self._copies([_normal(p) for p in action.paths])
        await self.browser.drop_files(sx, sy, staged)

    async def _copies(self, wanted: list[str]) -> list[str]:
        """Read the workspace files ``wanted`` through the runner and write them into a new
        folder of the sandbox; their paths there, in order.

        Raises:
            ExecutionError: one is not a regular file in the workspace (``not_a_workspace_file``).
        """
        request = WorkspaceManifestRequest(type="workspace_manifest", id=f"set-files-{secrets.token_hex(4)}",
                                           paths=sorted(set(wanted)))
        async with self.workspace_lock:
            manifest = await self.runner.workspace(request, threading.Event())
        if not isinstance(manifest, WorkspaceManifest):
            raise ExecutionError("the workspace runner gave no manifest", detail={"reason": "not_a_workspace_file"})
        contents: dict[str, bytes] = {}
        for entry in manifest.entries:
            if entry.kind == "file" and entry.content is not None:
                try:
                    contents[_normal(entry.path)] = base64.b64decode(entry.content, validate=True)
                except (binascii.Error, ValueError):
                    continue
        missing = next((p for p in wanted if p not in contents), None)
        if missing is not None:
            raise ExecutionError(f"not a file in the workspace: {missing[:200]}",
                                 detail={"reason": "not_a_workspace_file", "path": missing[:200]})
        return await asyncio.to_thread(self._stage, wanted, contents)

    def cancel(self) -> bool:
        """Close the open file chooser unanswered, as Escape closes a native one (the page
        gets no file); whether one was open."""
        if self.browser.file_chooser is None:
            return False
        self.browser.file_chooser = None
        return True

    def _stage(self, wanted: list[str], contents: dict[str, bytes]) -> list[str]:
        """Write the files into a new folder (one per action, so names never collide)."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = self.folder / secrets.token_hex(8)
        paths: list[str] = []
        for index, path in enumerate(wanted):
            target = folder / str(index) / posixpath.basename(path)
            target.parent.mkdir(mode=0o700, parents=True)
            target.write_bytes(contents[path])
            paths.append(str(target))
        return paths
