"""The daemon's snapshot packing and checking and its rate limiter, on temporary folders
(no Docker, no X)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from deskpod.agentd.browser import snapshot
from deskpod.agentd.connection import TokenBucket
from deskpod.errors import SnapshotError, SnapshotIntegrityError
from deskpod.protocol import SNAPSHOT_MANIFEST_NAME


def make_profile(root: Path) -> Path:
    profile = root / "chromium-profile"
    (profile / "Default" / "Network").mkdir(parents=True)
    (profile / "Default" / "Local Storage" / "leveldb").mkdir(parents=True)
    (profile / "Default" / "Cache").mkdir(parents=True)
    (profile / "Local State").write_text("{}")
    (profile / "Default" / "Preferences").write_text('{"p": 1}')
    (profile / "Default" / "Network" / "Cookies").write_bytes(b"cookie db")
    (profile / "Default" / "Local Storage" / "leveldb" / "000003.log").write_bytes(b"ls")
    (profile / "Default" / "Cache" / "data_0").write_bytes(b"cache")
    (profile / "Default" / "History").write_bytes(b"history")
    return profile


def test_pack_keeps_session_state_only_and_round_trips(tmp_path: Path) -> None:
    archive = snapshot.pack(make_profile(tmp_path))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = tar.getnames()
        manifest = json.loads((tar.extractfile(names[0]) or io.BytesIO()).read())
    assert names[0] == SNAPSHOT_MANIFEST_NAME
    assert sorted(manifest["files"]) == [
        "Default/Local Storage/leveldb/000003.log", "Default/Network/Cookies", "Default/Preferences", "Local State",
    ]
    checked = snapshot.check(archive)
    target = tmp_path / "restored"
    (target / "Default").mkdir(parents=True)
    (target / "Default" / "stale").write_text("old profile")
    snapshot.unpack(checked, target)
    assert (target / "Default" / "Network" / "Cookies").read_bytes() == b"cookie db"
    assert not (target / "Default" / "stale").exists()
    assert (target / "Default" / "Preferences").stat().st_mode & 0o777 == 0o600


def test_check_refuses_a_changed_file_and_hostile_members(tmp_path: Path) -> None:
    archive = snapshot.pack(make_profile(tmp_path))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        items = [(m, (tar.extractfile(m) or io.BytesIO()).read()) for m in tar.getmembers()]

    def repack(extra: list[tuple[tarfile.TarInfo, bytes]], change: bool = False) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w:gz") as tar:
            for i, (info, data) in enumerate(items + extra):
                if change and i == 2:
                    data = data + b"!"
                info.size = len(data) if info.isreg() else 0
                tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        return out.getvalue()

    with pytest.raises(SnapshotIntegrityError):
        snapshot.check(repack([], change=True))
    link = tarfile.TarInfo("Default/link")
    link.type, link.linkname = tarfile.SYMTYPE, "Preferences"
    for extra in ([(tarfile.TarInfo("../x"), b"x")], [(tarfile.TarInfo("/abs"), b"x")], [(link, b"")]):
        with pytest.raises(SnapshotError) as caught:
            snapshot.check(repack(extra))
        assert caught.value.detail["reason"] == "bad_archive"
    with pytest.raises(SnapshotError):
        snapshot.check(b"garbage")


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate_per_s=1000.0, burst=5)
    assert [bucket.take() for _ in range(5)] == [0.0] * 5
    wait = bucket.take()
    assert 0.0 < wait <= 0.001
    time.sleep(0.01)
    assert bucket.take() == 0.0


def test_reset_wipe_folders_default_to_the_sandbox_tmpfs_mounts_and_must_be_absolute() -> None:
    from deskpod.agentd.config import AgentdConfig
    from deskpod.errors import ConfigError

    base = {"DESKPOD_TOKEN_SHA256": "a" * 64, "HOME": "/home/deskpod"}
    cfg = AgentdConfig.from_env(base)
    # The workspace is the runner's (workspace container): agentd's reset does not wipe it itself.
    assert cfg.wipe_dirs == (Path("/tmp"), Path("/dev/shm"), Path("/home/deskpod"))
    assert cfg.workspace_runner == "workspace:8770"
    assert AgentdConfig.from_env({**base, "DESKPOD_RESET_WIPE": "/tmp:/home:/x"}).wipe_dirs == (
        Path("/tmp"), Path("/home"), Path("/x"))
    for bad in ("relative", "/tmp:/"):
        with pytest.raises(ConfigError):
            AgentdConfig.from_env({**base, "DESKPOD_RESET_WIPE": bad})
