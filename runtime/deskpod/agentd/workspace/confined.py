"""A confined file system: paths resolved inside a root, opened without following symlinks.

Every path a request names goes through :func:`confine`: NUL bytes, absolute
paths outside the root, ``..`` escapes and symlinks that lead out are refused
with :class:`~deskpod.errors.PathDeniedError` (code ``path_denied``). The
resolved path is then opened one component at a time from a descriptor of the
root with ``O_NOFOLLOW`` (``openat`` style, :func:`open_dir`), so a symlink
swapped in after the check makes the operation fail instead of escaping. Files
are written to a temporary name in the same folder and renamed over the target
(:func:`write_at`). :func:`path_error` turns an ``OSError`` into the typed
workspace error with its ``reason``.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat
from collections.abc import Iterable

from deskpod.errors import PathDeniedError, WorkspaceError

__all__ = [
    "clear_folder",
    "confine",
    "open_dir",
    "path_error",
    "write_at",
    "write_files",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _shown(path: str) -> str:
    return path[:256]


def confine(root: str, path: str) -> str:
    """Resolve ``path`` in the workspace ``root``, refusing anything that leads out.

    Symlinks are resolved (``os.path.realpath``); a component that does not exist
    yet is taken as written, so ``sub/../ok.txt`` is ``ok.txt`` even without ``sub``.

    Args:
        root: the workspace root, already resolved (no symlinks in it).
        path: relative to ``root``, or absolute inside it.

    Returns:
        The resolved path relative to ``root`` (POSIX separators); ``""`` for the root.

    Raises:
        PathDeniedError: ``path`` is empty or holds a NUL byte (``reason``
            ``"empty"``/``"nul_byte"``), lies outside ``root`` as written
            (``"outside_workspace"``), or a symlink takes it out (``"symlink_escape"``).
    """
    if "\x00" in path:
        raise PathDeniedError("path contains a NUL byte", detail={"path": _shown(path), "reason": "nul_byte"})
    if not path:
        raise PathDeniedError("path is empty", detail={"path": "", "reason": "empty"})
    joined = os.path.join(root, path)
    if not _inside(root, os.path.normpath(joined)):
        raise PathDeniedError(
            f"path {_shown(path)!r} is outside the workspace",
            detail={"path": _shown(path), "reason": "outside_workspace"},
        )
    real = os.path.realpath(joined)
    if not _inside(root, real):
        raise PathDeniedError(
            f"path {_shown(path)!r} leads outside the workspace through a symlink",
            detail={"path": _shown(path), "reason": "symlink_escape"},
        )
    rel = os.path.relpath(real, root)
    return "" if rel == "." else rel


def path_error(exc: OSError, rel: str) -> WorkspaceError:
    """The typed error for an ``OSError`` met while working on workspace path ``rel``.

    Args:
        exc: the error raised by the operating system.
        rel: the path, relative to the workspace root (``""``: the root).

    Returns:
        :class:`~deskpod.errors.PathDeniedError` (``reason`` ``"symlink_escape"``) when a
        symlink appeared on the path, else :class:`~deskpod.errors.WorkspaceError` whose
        ``reason`` names the errno (``"not_found"``, ``"no_space"``, ... or ``"os_error"``).
    """
    shown = rel or "."
    if exc.errno == errno.ELOOP:
        return PathDeniedError(
            f"{shown!r}: a symlink appeared on the path while it was opened",
            detail={"path": shown, "reason": "symlink_escape"},
        )
    reasons = {
        errno.ENOENT: "not_found",
        errno.ENOTDIR: "not_a_dir",
        errno.EISDIR: "is_a_dir",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.ENOSPC: "no_space",
        errno.EDQUOT: "no_space",
        errno.ENAMETOOLONG: "name_too_long",
        errno.EEXIST: "exists",
    }
    reason = reasons.get(exc.errno or 0, "os_error")
    return WorkspaceError(f"{shown!r}: {exc.strerror or exc}", detail={"path": shown, "reason": reason})


def _parts(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p]


def open_dir(root: str, rel: str, *, create: bool = False) -> int:
    """Open folder ``rel`` under ``root`` one component at a time, never following a symlink."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in _parts(rel):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_files(root: str, files: Iterable[tuple[str, bytes]], mode: int) -> None:
    """Write each ``(relative path, bytes)`` under ``root`` with :func:`write_at`, making
    folders as needed and never following a symlink (:func:`open_dir`).

    Raises:
        OSError: a folder or file could not be made or written.
    """
    for rel, data in files:
        parent, name = posixpath.split(rel)
        dfd = open_dir(root, parent, create=True)
        try:
            write_at(dfd, name, data, mode)
        finally:
            os.close(dfd)


def write_at(dfd: int, name: str, data: bytes, mode: int | None) -> bool:
    """Replace ``name`` in the open folder ``dfd`` with ``data`` through a temporary file.

    Returns:
        Whether the file is new.
    """
    created = True
    keep_mode = 0o644 if mode is None else mode
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "is a symlink")
        created = False
        if mode is None:
            keep_mode = stat.S_IMODE(st.st_mode)
    tmp = f".{name[:200]}.deskpod-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), keep_mode)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    return created


def clear_folder(folder: str, keep: frozenset[str] = frozenset()) -> None:
    """Remove everything inside ``folder`` without following symlinks.

    Each folder is opened from its parent's descriptor (``O_NOFOLLOW``), so a symlink swapped
    in leads nowhere; a folder of this process's uid that its owner made unreadable or
    unwritable (``chmod 0``, ``0500``) is given ``0700`` first (through its ``O_PATH``
    descriptor, never by name), as its owner may; one entry that cannot be removed does
    not stop the rest. The tree is walked without recursion, however deep it is.

    Args:
        folder: the folder to empty (nothing happens when it does not exist).
        keep: names of entries directly inside it to leave alone.

    Raises:
        OSError: an entry could not be removed (the first such error, once every other
            entry was tried).
    """
    try:
        top = _open_own_folder(None, folder)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        return
    errors: list[OSError] = []
    # Each frame: a folder's descriptor, the names in it still to remove, its name in the
    # frame below (None for ``folder`` itself).
    frames: list[tuple[int, list[str], str | None]] = []
    try:
        frames.append((top, [n for n in os.listdir(top) if n not in keep], None))
    except OSError:
        os.close(top)
        raise
    while frames:
        fd, names, name_in_parent = frames[-1]
        if not names:
            frames.pop()
            os.close(fd)
            if frames and name_in_parent is not None:
                try:
                    os.rmdir(name_in_parent, dir_fd=frames[-1][0])
                except OSError as exc:
                    errors.append(exc)
            continue
        name = names.pop()
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                sub = _open_own_folder(fd, name)
                try:
                    frames.append((sub, os.listdir(sub), name))
                except OSError:
                    os.close(sub)
                    raise
            else:
                os.unlink(name, dir_fd=fd)
        except OSError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _open_own_folder(dfd: int | None, name: str) -> int:
    """Open the folder ``name`` (in the folder ``dfd``, else a path) for reading, never
    through a symlink; a folder of ours without ``rwx`` for us gets ``0700`` first.

    Raises:
        OSError: it is no folder, a symlink, or cannot be opened.
    """
    path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        st = os.fstat(path_fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
            # fchmod refuses an O_PATH descriptor; its /proc link names this very folder.
            os.chmod(f"/proc/self/fd/{path_fd}", stat.S_IMODE(st.st_mode) | 0o700)
        return os.open(".", _DIR_FLAGS, dir_fd=path_fd)
    finally:
        os.close(path_fd)
