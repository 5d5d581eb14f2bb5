"""The host-side snapshot store (no Docker)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from deskpod.errors import SnapshotError, SnapshotIntegrityError
from deskpod.client.snapshot_store import SnapshotStore


def test_the_old_import_path_still_works() -> None:
    """README's ``from deskpod.snapshots import SnapshotStore`` names the same class."""
    from deskpod.snapshots import SnapshotStore as OldPath

    assert OldPath is SnapshotStore


def test_save_load_list_delete(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snaps")
    info = store.save("alice-1", b"archive bytes")
    assert info.sha256 == hashlib.sha256(b"archive bytes").hexdigest() and info.size == 13 and info.created_at > 0
    for name in ("alice-1.tar.gz", "alice-1.json"):
        assert stat.S_IMODE(os.stat(tmp_path / "snaps" / name).st_mode) == 0o600
    assert store.load("alice-1") == b"archive bytes"
    store.save("bob", b"other")
    assert [i.name for i in store.list()] == ["alice-1", "bob"]
    store.save("bob", b"replaced")
    assert store.load("bob") == b"replaced"
    store.delete("alice-1")
    assert [i.name for i in store.list()] == ["bob"]
    with pytest.raises(SnapshotError) as caught:
        store.load("alice-1")
    assert caught.value.detail["reason"] == "not_found"
    with pytest.raises(SnapshotError):
        store.delete("alice-1")


def test_a_changed_archive_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.save("s", b"good bytes")
    (tmp_path / "s.tar.gz").write_bytes(b"evil bytes")
    with pytest.raises(SnapshotIntegrityError) as caught:
        store.load("s")
    assert caught.value.code == "snapshot_corrupt"
    (tmp_path / "s.json").write_text("{not json")
    with pytest.raises(SnapshotError) as caught2:
        store.load("s")
    assert caught2.value.detail["reason"] == "bad_manifest"


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "-opt", "x" * 65, "sp ace", "a\x00b"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    store = SnapshotStore(tmp_path)
    with pytest.raises(SnapshotError) as caught:
        store.save(name, b"x")
    assert caught.value.detail["reason"] == "bad_name"
    assert list(tmp_path.iterdir()) == []
