"""A host-side store of named browser snapshots.

A snapshot (see :meth:`deskpod.client.SandboxClient.snapshot`) holds a logged-in
browser session: cookies, Local Storage, IndexedDB. Whoever holds it can act as
that account, so the store keeps it like a credential: each snapshot is two files
in one folder, ``NAME.tar.gz`` (the archive) and ``NAME.json`` (a
:class:`SnapshotInfo`: SHA-256, size, creation time), both mode 0600, written to
a temporary name and renamed into place. :meth:`SnapshotStore.load` checks the
archive's SHA-256 against the manifest before returning a byte of it.

Names: 1 to 64 characters of ``[A-Za-z0-9._-]``, starting with a letter or digit
(so a name is never a path, hidden file or option).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from deskpod.errors import SnapshotError, SnapshotIntegrityError
from deskpod.protocol import MAX_SNAPSHOT_BYTES
from deskpod.protocol._base import STRICT

__all__ = ["SNAPSHOT_NAME_PATTERN", "SnapshotInfo", "SnapshotStore"]

SNAPSHOT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""What a snapshot name must match."""

_NAME = re.compile(SNAPSHOT_NAME_PATTERN)


class SnapshotInfo(BaseModel):
    """The manifest of one stored snapshot.

    ``name``: its name. ``sha256``: of the archive's bytes (hex). ``size``: the
    archive's size, bytes. ``created_at``: when it was saved, seconds since the
    epoch (UTC).
    """

    model_config = STRICT
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    created_at: float


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SnapshotError(
            f"bad snapshot name {str(name)[:80]!r}: 1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit",
            detail={"reason": "bad_name"},
        )
    return name


class SnapshotStore:
    """Named snapshots in one folder on the host.

    Args:
        directory: the folder; created (mode 0700) when missing.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _paths(self, name: str) -> tuple[Path, Path]:
        _check_name(name)
        return self.directory / f"{name}.tar.gz", self.directory / f"{name}.json"

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def save(self, name: str, archive: bytes) -> SnapshotInfo:
        """Store ``archive`` under ``name``, replacing a snapshot of that name.

        Args:
            name: see the module docstring.
            archive: the bytes :meth:`~deskpod.client.SandboxClient.snapshot` returned.

        Returns:
            The manifest written next to it.

        Raises:
            SnapshotError: a bad name (``reason`` ``"bad_name"``) or an archive over
                :data:`~deskpod.protocol.MAX_SNAPSHOT_BYTES` (``"too_large"``).
            OSError: the folder is not writable.
        """
        archive_path, manifest_path = self._paths(name)
        if len(archive) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError("the snapshot exceeds MAX_SNAPSHOT_BYTES", detail={"reason": "too_large"})
        info = SnapshotInfo(
            name=name, sha256=hashlib.sha256(archive).hexdigest(), size=len(archive), created_at=time.time()
        )
        self._write(archive_path, archive)
        self._write(manifest_path, info.model_dump_json(indent=2).encode())
        return info

    def info(self, name: str) -> SnapshotInfo:
        """Read the manifest of snapshot ``name``.

        Raises:
            SnapshotError: a bad name, no such snapshot (``reason`` ``"not_found"``) or a
                manifest that does not parse (``"bad_manifest"``).
        """
        _, manifest_path = self._paths(name)
        try:
            info = SnapshotInfo.model_validate_json(manifest_path.read_bytes())
        except FileNotFoundError as exc:
            raise SnapshotError(f"no snapshot named {name!r}", detail={"reason": "not_found"}) from exc
        except ValidationError as exc:
            raise SnapshotError(f"the manifest of snapshot {name!r} is malformed", detail={"reason": "bad_manifest"}) from exc
        if info.name != name:
            raise SnapshotError(f"the manifest of snapshot {name!r} names another one", detail={"reason": "bad_manifest"})
        return info

    def load(self, name: str) -> bytes:
        """Return the archive of snapshot ``name`` after checking its SHA-256 and size.

        Raises:
            SnapshotError: a bad name, no such snapshot or a malformed manifest.
            SnapshotIntegrityError: the archive's bytes do not match the manifest.
        """
        info = self.info(name)
        archive_path, _ = self._paths(name)
        try:
            with open(archive_path, "rb") as f:
                data = f.read(MAX_SNAPSHOT_BYTES + 1)
        except FileNotFoundError as exc:
            raise SnapshotError(f"the archive of snapshot {name!r} is missing", detail={"reason": "not_found"}) from exc
        if len(data) != info.size or hashlib.sha256(data).hexdigest() != info.sha256:
            raise SnapshotIntegrityError(
                f"snapshot {name!r} does not match its manifest's SHA-256", detail={"reason": "digest_mismatch"}
            )
        return data

    def list(self) -> list[SnapshotInfo]:
        """Return the manifests of every stored snapshot, sorted by name (malformed ones skipped)."""
        found = []
        for path in sorted(self.directory.glob("*.json")):
            name = path.name[: -len(".json")]
            if not _NAME.fullmatch(name):
                continue
            try:
                found.append(self.info(name))
            except SnapshotError:
                continue
        return found

    def delete(self, name: str) -> None:
        """Remove snapshot ``name`` (archive and manifest).

        Raises:
            SnapshotError: a bad name, or no such snapshot (``reason`` ``"not_found"``).
        """
        archive_path, manifest_path = self._paths(name)
        if not manifest_path.exists() and not archive_path.exists():
            raise SnapshotError(f"no snapshot named {name!r}", detail={"reason": "not_found"})
        archive_path.unlink(missing_ok=True)
        manifest_path.unlink(missing_ok=True)
