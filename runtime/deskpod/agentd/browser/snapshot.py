"""Browser snapshots inside the sandbox: pack a stopped Chromium's session state, and
check and unpack one into a fresh profile.

A snapshot holds only what restores a logged-in session (:data:`SNAPSHOT_ENTRIES`:
cookies, Local Storage, IndexedDB, Session Storage, web storage metadata,
preferences and ``Local State``), never caches, history or downloads. Chromium
must be stopped first (the daemon stops it cleanly, so its SQLite and LevelDB
files are complete). The format is a gzip'd tar whose first member is a
:class:`~deskpod.protocol.SnapshotManifest` listing every file's SHA-256 and
size; then folders and regular files only.

Restoring checks everything before the profile is touched: the member kinds and
names through the same checker as workspace seeds
(:func:`~deskpod.agentd.workspace.archive.check_archive`, symlinks refused), the manifest,
and every file against its SHA-256. Files are then written one component at a
time with ``O_NOFOLLOW`` into a new, empty profile folder.

A sandbox with the desktop applications' zone adds one more file, :data:`DESKTOP_ENTRY`: the
zone's home as the zone packed it (:mod:`deskpod.agentd.zone_home`), listed and checked like
the others; it is not unpacked into the profile but handed back to the zone
(:attr:`CheckedSnapshot.desktop`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import secrets
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from deskpod.agentd.workspace.archive import add_file, check_archive
from deskpod.agentd.workspace.confined import write_files
from deskpod.errors import SnapshotError, SnapshotIntegrityError, WorkspaceError
from deskpod.protocol import (
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_FORMAT,
    SNAPSHOT_MANIFEST_NAME,
    SnapshotFile,
    SnapshotManifest,
)

__all__ = ["CheckedSnapshot", "DESKTOP_ENTRY", "SNAPSHOT_ENTRIES", "check", "pack", "unpack"]

log = logging.getLogger(__name__)

SNAPSHOT_ENTRIES = (
    "Local State",
    "Default/Preferences",
    "Default/Secure Preferences",
    "Default/Cookies",
    "Default/Cookies-journal",
    "Default/Network/Cookies",
    "Default/Network/Cookies-journal",
    "Default/Local Storage",
    "Default/Session Storage",
    "Default/IndexedDB",
    "Default/WebStorage",
)
"""Paths relative to the profile folder that a snapshot copies (folders recursively;
missing ones are skipped). Cookies live in ``Default/Network`` in current Chromium."""


DESKTOP_ENTRY = "desktop/home.tar.gz"
"""The archive member holding the desktop applications' zone's home (no profile path starts
with ``desktop/``)."""


def _files(profile: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for entry in SNAPSHOT_ENTRIES:
        path = profile / entry
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((entry, path))
        elif stat.S_ISDIR(st.st_mode):
            for folder, dirs, names in os.walk(path):
                dirs.sort()
                for name in sorted(names):
                    full = Path(folder) / name
                    if full.is_file() and not full.is_symlink():
                        found.append((full.relative_to(profile).as_posix(), full))
    return found


def pack(profile: Path, desktop: bytes | None = None) -> bytes:
    """Pack a stopped Chromium's session state.

    Args:
        profile: the profile folder (``--user-data-dir``).
        desktop: the applications' zone's home, as the zone packed it (``None``: no zone, or
            nothing in it), stored as :data:`DESKTOP_ENTRY`.

    Returns:
        The archive (gzip'd tar, manifest first).

    Raises:
        SnapshotError: the profile is missing (``reason`` ``"no_profile"``) or the
            archive would exceed :data:`~deskpod.protocol.MAX_SNAPSHOT_BYTES`
            (``"too_large"``).
    """
    if not profile.is_dir():
        raise SnapshotError("the browser has no profile to snapshot", detail={"reason": "no_profile"})
    contents: list[tuple[str, bytes]] = []
    total = 0
    for rel, path in _files(profile):
        data = path.read_bytes()
        total += len(data)
        if total > MAX_SNAPSHOT_BYTES * 4:
            raise SnapshotError("the browser state is too large to snapshot", detail={"reason": "too_large"})
        contents.append((rel, data))
    if desktop is not None:
        contents.append((DESKTOP_ENTRY, desktop))
    manifest = SnapshotManifest(
        format=SNAPSHOT_FORMAT,
        created_at=time.time(),
        files={rel: SnapshotFile(sha256=hashlib.sha256(data).hexdigest(), size=len(data)) for rel, data in contents},
    )
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
        add_file(tar, SNAPSHOT_MANIFEST_NAME, manifest.model_dump_json().encode())
        for rel, data in contents:
            add_file(tar, rel, data)
    archive = out.getvalue()
    if len(archive) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(
            f"the snapshot exceeds {MAX_SNAPSHOT_BYTES} bytes", detail={"reason": "too_large", "bytes": len(archive)}
        )
    return archive


@dataclass(frozen=True)
class CheckedSnapshot:
    """A snapshot that passed :func:`check`: its files as ``(path, bytes)``, in archive order."""

    files: list[tuple[str, bytes]]

    @property
    def desktop(self) -> bytes | None:
        """The applications' zone's home (:data:`DESKTOP_ENTRY`), if the snapshot holds it."""
        return next((data for name, data in self.files if name == DESKTOP_ENTRY), None)

    @property
    def size(self) -> int:
        """Total bytes of its files."""
        return sum(len(data) for _, data in self.files)


def check(archive: bytes) -> CheckedSnapshot:
    """Check a snapshot archive in full.

    Args:
        archive: the bytes ``GET /v1/snapshot`` produced.

    Returns:
        Its files, each verified against the manifest.

    Raises:
        SnapshotError: too large, not a gzip'd tar, a member that is not a folder or
            regular file, a name leading out, no manifest first, or a malformed one
            (``reason`` ``"too_large"`` or ``"bad_archive"``).
        SnapshotIntegrityError: a file is missing, unlisted, or differs from its
            manifest entry (``reason`` ``"digest_mismatch"``).
    """
    if len(archive) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(
            f"the snapshot exceeds {MAX_SNAPSHOT_BYTES} bytes", detail={"reason": "too_large", "bytes": len(archive)}
        )
    try:
        tar, members = check_archive(archive, allow_symlinks=False)
    except WorkspaceError as exc:
        raise SnapshotError(exc.message, detail=exc.detail) from exc
    with tar:
        if not members or members[0][1] != SNAPSHOT_MANIFEST_NAME or not members[0][0].isreg():
            raise SnapshotError(
                f"the snapshot's first member must be {SNAPSHOT_MANIFEST_NAME}", detail={"reason": "bad_archive"}
            )
        try:
            manifest = SnapshotManifest.model_validate_json(_read(tar, members[0][0]))
        except ValidationError as exc:
            raise SnapshotError("the snapshot's manifest is malformed", detail={"reason": "bad_archive"}) from exc
        files: list[tuple[str, bytes]] = []
        for info, name in members[1:]:
            if not info.isreg():
                continue
            entry = manifest.files.get(name)
            data = _read(tar, info)
            if entry is None or entry.size != len(data) or entry.sha256 != hashlib.sha256(data).hexdigest():
                raise SnapshotIntegrityError(
                    f"snapshot file {name[:256]!r} does not match the manifest",
                    detail={"reason": "digest_mismatch", "path": name[:256]},
                )
            files.append((name, data))
    if len(files) != len(manifest.files) or len({n for n, _ in files}) != len(files):
        raise SnapshotIntegrityError(
            "the snapshot's files do not match its manifest (missing or repeated)", detail={"reason": "digest_mismatch"}
        )
    return CheckedSnapshot(files)


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    source = tar.extractfile(info)
    return source.read() if source is not None else b""


def unpack(snapshot: CheckedSnapshot, profile: Path) -> None:
    """Replace the profile folder with the snapshot's files. Chromium must be stopped.

    The files are written into a new sibling folder, which then takes the
    profile's place by rename; the old profile is moved aside first and removed
    last. A straggling browser helper still writing into the old profile (its
    crash handler, for one) can neither make the restore fail nor leak into it.

    Args:
        snapshot: from :func:`check`.
        profile: the profile folder; replaced as a whole.

    Raises:
        SnapshotError: a file could not be written (``reason`` ``"unpack_failed"``).
    """
    tag = secrets.token_hex(4)
    staging = profile.with_name(f"{profile.name}.restore-{tag}")
    retired = profile.with_name(f"{profile.name}.old-{tag}")
    try:
        staging.mkdir(parents=True, mode=0o700)
        write_files(str(staging), [(n, d) for n, d in snapshot.files if n != DESKTOP_ENTRY], 0o600)
        if profile.exists():
            os.rename(profile, retired)
        os.rename(staging, profile)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SnapshotError(
            f"cannot unpack the snapshot: {exc.strerror or exc}", detail={"reason": "unpack_failed"}
        ) from exc
    finally:
        shutil.rmtree(retired, ignore_errors=True)
    log.info("restored %d snapshot files", len(snapshot.files))
