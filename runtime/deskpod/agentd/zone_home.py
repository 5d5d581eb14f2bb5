"""The applications' zone's home in a snapshot: packed by the applications runner, restored by it.

What the desktop applications keep between runs lives in the zone's home (``HOME``,
``/home/apps``): their settings (``~/.config``), recent documents
(``~/.local/share/recently-used.xbel``) and the like. A sandbox snapshot
(:mod:`deskpod.agentd.browser.snapshot`) carries it beside the browser's profile, and a
restore writes it back, so a restored desktop sandbox opens its applications as they were
left. The zone packs its own home (agentd cannot read it: another container, another uid):
a gzip'd tar of its regular files, caches (``~/.cache``) and anything but regular files and
folders (symlinks, sockets: the session bus's) left out, at most
:data:`~deskpod.protocol.MAX_SEED_ARCHIVE_BYTES` packed (a workspace seed's bound, as it
travels the same way). A restore checks the archive as a workspace seed is checked
(:func:`~deskpod.agentd.workspace.archive.open_seed_archive`: no absolute names, no ``..``,
no links leading out) and writes it over the home, never following a symlink. Both run in the
zone, on the zone's own files: the archive is the zone's own data going back to it.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Final

from deskpod.agentd.workspace.archive import add_file, open_seed_archive, unpack_members
from deskpod.errors import ExecutionError
from deskpod.protocol import MAX_SEED_ARCHIVE_BYTES

__all__ = ["SKIPPED", "pack_home", "restore_home"]

SKIPPED: Final = frozenset({".cache"})
"""Top-level folders of the home a snapshot leaves out (caches: rebuilt on use)."""


def _regular_files(home: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for folder, dirs, names in os.walk(home):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (here == home and d in SKIPPED) and not (here / d).is_symlink())
        for name in sorted(names):
            path = here / name
            if stat.S_ISREG(path.lstat().st_mode):
                found.append((path.relative_to(home).as_posix(), path))
    return found


def pack_home(home: Path) -> str:
    """The zone's home as a base64 gzip'd tar (see the module).

    Raises:
        ExecutionError: it packs to more than :data:`~deskpod.protocol.MAX_SEED_ARCHIVE_BYTES`
            (``detail["reason"]`` ``"too_large"``).
    """
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
        for rel, path in _regular_files(home):
            try:
                data = path.read_bytes()
            except OSError:
                continue  # gone or unreadable since the walk: an application's own business
            add_file(tar, rel, data)
            if out.tell() > MAX_SEED_ARCHIVE_BYTES:
                break
    archive = out.getvalue()
    if len(archive) > MAX_SEED_ARCHIVE_BYTES:
        raise ExecutionError(f"the applications' home packs to more than {MAX_SEED_ARCHIVE_BYTES} bytes",
                             detail={"reason": "too_large"})
    return base64.b64encode(archive).decode()


def restore_home(home: Path, archive: str) -> int:
    """Write the base64 gzip'd tar ``archive`` (from :func:`pack_home`) over ``home``.

    Returns:
        The number of files written.

    Raises:
        WorkspaceError: not a valid archive (``bad_archive``, ``too_large``), or a file could
            not be written.
    """
    tar, members = open_seed_archive(archive)
    with tar:
        files, _ = unpack_members(str(home.resolve()), tar, members)
    return files
