"""The workspace's file tools: list, read, write and edit, confined to its folder.

Paths are confined and opened without following symlinks
(:mod:`deskpod.agentd.workspace.confined`); files are read in bounded lines and bytes,
written whole, and edited by one exact replacement. Sizes are bytes.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from pathlib import Path
from typing import Any

from deskpod.agentd.workspace.confined import confine, open_dir, path_error, write_at
from deskpod.agentd.workspace.process import ChildWaiter
from deskpod.errors import WorkspaceError
from deskpod.protocol import (
    DirEntry,
    DirListing,
    EditFileRequest,
    FileContent,
    FileWritten,
    ListDirRequest,
    ReadFileRequest,
    WriteFileRequest,
)

__all__ = ["MAX_EDIT_FILE_BYTES", "WorkspaceFiles"]

MAX_EDIT_FILE_BYTES = 16 * 1_048_576
"""Largest file ``edit_file`` works on (16 MiB)."""


class WorkspaceFiles:
    """The file tools of one workspace folder, and its settings (the base of
    :class:`~deskpod.agentd.workspace.tools.Workspace`).

    Args:
        root: the workspace folder (``/workspace`` in the workspace container).
        state_dir: a private folder outside the workspace for scratch files
            (patches, temporary git indexes) and, unless ``home`` is given, exec's
            ``HOME`` (``state_dir/exec-home``).
        proxy: the egress proxy URL given to commands that ask for ``network``.
        home: exec's ``HOME`` (the agent's home folder in the workspace container).
        waiter: collects exit statuses when the caller is init (see
            :func:`~deskpod.agentd.workspace.process.run_process`).
        oom_score_adj: every command's OOM score adjustment (1000 in the workspace
            container: an out-of-memory kill takes the command, not the runner).
        verdict_root: the folder clean rooms are made in (default ``state_dir``; the
            runner uses a mount root such as ``/tmp``, which no agent can replace).

    ``lock`` serializes workspace requests: one at a time per sandbox.
    """

    def __init__(
        self,
        root: str | Path,
        state_dir: str | Path,
        proxy: str | None = None,
        *,
        home: str | Path | None = None,
        waiter: ChildWaiter | None = None,
        oom_score_adj: int | None = None,
        verdict_root: str | Path | None = None,
    ) -> None:
        self.root_path = Path(root)
        self.verdict_root = str(verdict_root if verdict_root is not None else state_dir)
        self.home = str(home) if home is not None else str(Path(state_dir) / "exec-home")
        self.scratch = str(Path(state_dir) / "workspace-scratch")
        self.proxy = proxy
        self.waiter = waiter
        self.oom_score_adj = oom_score_adj
        self.lock = asyncio.Lock()

    @property
    def root(self) -> str:
        """The workspace root, resolved.

        Raises:
            WorkspaceError: it does not exist (``reason`` ``"no_workspace"``).
        """
        root = os.path.realpath(self.root_path)
        if not os.path.isdir(root):
            raise WorkspaceError(f"the workspace {root} does not exist", detail={"reason": "no_workspace"})
        for folder in (self.home, self.scratch):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        return root

    def _split(self, path: str) -> tuple[str, str, str]:
        rel = confine(self.root, path)
        if not rel:
            raise WorkspaceError(
                "the workspace root is a folder, not a file", detail={"path": ".", "reason": "is_a_dir"}
            )
        parent, name = posixpath.split(rel)
        return rel, parent, name

    def list_dir(self, request: ListDirRequest) -> DirListing:
        """List a folder (see :class:`~deskpod.protocol.ListDirRequest`)."""
        rel = confine(self.root, request.path)
        try:
            dfd = open_dir(self.root, rel)
        except OSError as exc:
            raise path_error(exc, rel) from exc
        try:
            with os.scandir(dfd) as it:
                names = sorted(it, key=lambda e: e.name)
            entries = []
            for entry in names[: request.max_entries]:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    entries.append(
                        DirEntry(
                            name=entry.name, kind="symlink", size=st.st_size, target=os.readlink(entry.name, dir_fd=dfd)
                        )
                    )
                else:
                    kind: Any = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
                    entries.append(DirEntry(name=entry.name, kind=kind, size=st.st_size))
        except OSError as exc:
            raise path_error(exc, rel) from exc
        finally:
            os.close(dfd)
        return DirListing(path=rel or ".", entries=entries, truncated=len(names) > request.max_entries)

    def _open_regular(self, parent: str, name: str, rel: str) -> int:
        dfd = open_dir(self.root, parent)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WorkspaceError(f"{rel!r} is not a regular file", detail={"path": rel, "reason": "not_a_file"})
        return fd

    def _open_existing(self, path: str) -> tuple[str, str, str, int]:
        """Confine ``path`` and open the regular file there.

        Returns:
            ``(rel, parent, name, fd)`` as :meth:`_split` gives them, plus a read-only
            descriptor. Errors become :class:`WorkspaceError`.
        """
        rel, parent, name = self._split(path)
        try:
            return rel, parent, name, self._open_regular(parent, name, rel)
        except OSError as exc:
            raise path_error(exc, rel) from exc

    def read_file(self, request: ReadFileRequest) -> FileContent:
        """Read lines of a file (see :class:`~deskpod.protocol.ReadFileRequest`)."""
        rel, _, _, fd = self._open_existing(request.path)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for _ in range(request.start_line - 1):
                if not _skip_line(f):
                    break
            chunks: list[bytes] = []
            used = 0
            lines = 0
            truncated = False
            while request.max_lines is None or lines < request.max_lines:
                line = f.readline(request.max_bytes - used + 1)
                if not line:
                    break
                if used + len(line) > request.max_bytes:
                    if not chunks:  # one line longer than the cap: return its start
                        chunks.append(line[: request.max_bytes])
                        lines = 1
                    truncated = True
                    break
                chunks.append(line)
                used += len(line)
                lines += 1
            if not truncated:
                truncated = bool(f.read(1))
        data = b"".join(chunks)
        try:
            content = data.decode("utf-8")
            replaced = False
        except UnicodeDecodeError:
            content = data.decode("utf-8", "replace")
            replaced = True
        return FileContent(
            path=rel,
            content=content,
            size=size,
            start_line=request.start_line,
            end_line=request.start_line + lines - 1,
            truncated=truncated,
            replaced_invalid_utf8=replaced,
        )

    def _write(self, rel: str, parent: str, name: str, data: bytes, create_dirs: bool) -> bool:
        try:
            dfd = open_dir(self.root, parent, create=create_dirs)
            try:
                return write_at(dfd, name, data, None)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise path_error(exc, rel) from exc

    def write_file(self, request: WriteFileRequest) -> FileWritten:
        """Create or replace a file (see :class:`~deskpod.protocol.WriteFileRequest`)."""
        rel, parent, name = self._split(request.path)
        data = _utf8(request.content, rel)
        created = self._write(rel, parent, name, data, request.create_dirs)
        return FileWritten(path=rel, size=len(data), created=created)

    def edit_file(self, request: EditFileRequest) -> FileWritten:
        """Replace one exact occurrence of text (see :class:`~deskpod.protocol.EditFileRequest`)."""
        rel, parent, name, fd = self._open_existing(request.path)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_EDIT_FILE_BYTES + 1)
        if len(raw) > MAX_EDIT_FILE_BYTES:
            raise WorkspaceError(
                f"{rel!r} is larger than {MAX_EDIT_FILE_BYTES} bytes", detail={"path": rel, "reason": "too_large"}
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(f"{rel!r} is not UTF-8 text", detail={"path": rel, "reason": "not_utf8"}) from exc
        count = text.count(request.old_text)
        if count != 1:
            reason = "no_match" if count == 0 else "ambiguous"
            raise WorkspaceError(
                f"old_text occurs {count} times in {rel!r}; it must occur exactly once",
                detail={"path": rel, "reason": reason, "count": count},
            )
        data = _utf8(text.replace(request.old_text, request.new_text, 1), rel)
        self._write(rel, parent, name, data, False)
        return FileWritten(path=rel, size=len(data), created=False)


def _skip_line(f: Any) -> bool:
    """Read past one line in bounded chunks; return whether there was one."""
    while True:
        part = f.readline(1_048_576)
        if not part:
            return False
        if part.endswith(b"\n"):
            return True


def _utf8(text: str, rel: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(
            f"content for {rel!r} is not encodable as UTF-8", detail={"path": rel, "reason": "not_utf8"}
        ) from exc
