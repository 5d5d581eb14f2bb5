"""Checked gzip'd tar archives: workspace seeds and browser snapshots.

:func:`check_archive` opens an archive and checks every member before anything
is written: regular files, folders and symlinks whose target stays inside;
anything else (hard links, devices, FIFOs, absolute or ``..`` names) fails the
request before the target folder is touched. :func:`open_seed_archive` decodes
a seed from its wire form and :func:`unpack_members` writes the checked members
under a root through the confined file system (:mod:`deskpod.agentd.workspace.confined`).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import posixpath
import tarfile
import time
import zlib
from typing import Any

from deskpod.agentd.workspace.confined import open_dir, write_at
from deskpod.errors import WorkspaceError
from deskpod.protocol import MAX_SEED_ARCHIVE_BYTES

__all__ = [
    "MAX_SEED_FILES",
    "MAX_SEED_UNPACKED_BYTES",
    "add_file",
    "check_archive",
    "open_seed_archive",
    "unpack_members",
]

MAX_SEED_FILES = 20_000
"""Most members a seed archive may hold."""

MAX_SEED_UNPACKED_BYTES = 256 * 1_048_576
"""Largest total size of a seed archive's files once unpacked (256 MiB)."""


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add ``data`` to ``tar`` as the regular file ``name``, mode 0600, dated now."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _bad_archive(message: str, **detail: Any) -> WorkspaceError:
    return WorkspaceError(message, detail={"reason": "bad_archive", **detail})


def open_seed_archive(encoded: str) -> tuple[tarfile.TarFile, list[tuple[tarfile.TarInfo, str]]]:
    """Decode and check a seed archive in full before anything is written.

    Args:
        encoded: the archive as the wire carries it (base64 of a gzip'd tar).

    Returns:
        The open tar and its members with their normalized names, in archive order.

    Raises:
        WorkspaceError: bad base64 or gzip/tar data, too large, too many members, a
            member of an unsupported kind, or a name or symlink target leading out
            (``reason`` ``"bad_archive"`` or ``"too_large"``).
    """
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad_archive("the seed archive is not valid base64") from exc
    if len(data) > MAX_SEED_ARCHIVE_BYTES:
        raise WorkspaceError(
            f"the seed archive exceeds {MAX_SEED_ARCHIVE_BYTES} bytes",
            detail={"reason": "too_large", "bytes": len(data)},
        )
    return check_archive(data)


def check_archive(
    data: bytes, *, allow_symlinks: bool = True
) -> tuple[tarfile.TarFile, list[tuple[tarfile.TarInfo, str]]]:
    """Open a gzip'd tar and check every member before anything is unpacked.

    Shared by workspace seeds and browser snapshots. Refused: more than
    :data:`MAX_SEED_FILES` members, more than :data:`MAX_SEED_UNPACKED_BYTES`
    unpacked, absolute names, ``..`` escapes, NUL bytes, hard links, devices,
    FIFOs, and symlinks (all of them unless ``allow_symlinks``; otherwise those
    whose target leads out of the archive's root).

    Args:
        data: the archive's bytes.
        allow_symlinks: accept symlinks that stay inside.

    Returns:
        The open tar (the caller closes it) and its members with their normalized
        names, in archive order (``.`` left out).

    Raises:
        WorkspaceError: ``reason`` ``"bad_archive"`` or ``"too_large"``.
    """
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        infos = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _bad_archive(f"the archive is not a gzip'd tar: {exc}") from exc
    try:
        if len(infos) > MAX_SEED_FILES:
            raise _bad_archive(f"the archive holds more than {MAX_SEED_FILES} members")
        if sum(m.size for m in infos if m.isreg()) > MAX_SEED_UNPACKED_BYTES:
            raise WorkspaceError(
                f"the archive unpacks to more than {MAX_SEED_UNPACKED_BYTES} bytes", detail={"reason": "too_large"}
            )
        members = []
        for info in infos:
            name = posixpath.normpath(info.name)
            if name == ".":
                continue
            if "\x00" in name or name.startswith("/") or name == ".." or name.startswith("../"):
                raise _bad_archive(
                    f"archive member {info.name[:256]!r} lies outside the archive's root", path=info.name[:256]
                )
            if info.issym() and allow_symlinks:
                target = posixpath.normpath(posixpath.join(posixpath.dirname(name), info.linkname))
                if info.linkname.startswith("/") or target == ".." or target.startswith("../"):
                    raise _bad_archive(
                        f"symlink {name[:256]!r} points outside the archive's root ({info.linkname[:256]!r})",
                        path=name[:256],
                    )
            elif not (info.isreg() or info.isdir()):
                kinds = "a file, a folder nor a symlink" if allow_symlinks else "a file nor a folder"
                raise _bad_archive(f"archive member {name[:256]!r} is neither {kinds}", path=name[:256])
            members.append((info, name))
        return tar, members
    except BaseException:
        tar.close()
        raise


def unpack_members(root: str, tar: tarfile.TarFile, members: list[tuple[tarfile.TarInfo, str]]) -> tuple[int, int]:
    """Write the checked ``members`` of ``tar`` under ``root``, never following a symlink.

    Args:
        root: the folder to unpack into, resolved.
        tar: the open archive (from :func:`check_archive` or :func:`open_seed_archive`).
        members: its members with their normalized names, as those return them.

    Returns:
        The number of regular files written and their total size, bytes.

    Raises:
        WorkspaceError: a member could not be written (``reason`` ``"bad_archive"``).
    """
    files = size = 0
    for member, name in members:
        parent, base = posixpath.split(name)
        try:
            if member.isdir():
                os.close(open_dir(root, name, create=True))
                continue
            dfd = open_dir(root, parent, create=True)
            try:
                if member.issym():
                    os.symlink(member.linkname, base, dir_fd=dfd)
                    continue
                source = tar.extractfile(member)
                data = source.read() if source is not None else b""
                write_at(dfd, base, data, 0o755 if member.mode & 0o111 else 0o644)
                files += 1
                size += len(data)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot unpack {name!r}: {exc.strerror or exc}", detail={"path": name, "reason": "bad_archive"}
            ) from exc
    return files, size
