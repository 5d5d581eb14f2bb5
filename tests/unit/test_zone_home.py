"""The applications' zone's home in a snapshot (:mod:`deskpod.agentd.zone_home`, the runner's
``snapshot``/``restore`` and :mod:`deskpod.agentd.browser.snapshot`'s desktop entry); the
whole path through a real zone: ``tests/integration/test_desktop_zone.py``."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import socket
import tarfile
from pathlib import Path

import pytest

from deskpod.agentd.apps_client import AppsClient
from deskpod.agentd.apps_runner import AppsConfig, AppsRunner
from deskpod.agentd.apps_wire import AppsRestoreRequest, AppsSnapshotRequest, parse_apps_reply, parse_apps_request
from deskpod.agentd.browser import snapshot
from deskpod.agentd.zone_home import pack_home, restore_home
from deskpod.errors import ExecutionError, WorkspaceError


def _home(root: Path) -> Path:
    home = root / "home"
    (home / ".config" / "mousepad").mkdir(parents=True)
    (home / ".config" / "mousepad" / "settings.ini").write_text("[window]\nwidth=900\n")
    (home / ".local" / "share").mkdir(parents=True)
    (home / ".local" / "share" / "recently-used.xbel").write_text("<xbel><bookmark href='file:///workspace/a'/></xbel>")
    (home / ".cache" / "thumbnails").mkdir(parents=True)
    (home / ".cache" / "thumbnails" / "big.png").write_bytes(b"x" * 1000)
    (home / "outside").symlink_to("/etc/passwd")
    bus = socket.socket(socket.AF_UNIX)
    bus.bind(str(home / "bus"))  # a session bus's socket: not a file to keep
    bus.close()
    return home


def _names(tree: Path) -> set[str]:
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() and not p.is_symlink()}


def test_the_home_s_settings_and_recent_documents_come_back_and_caches_links_and_sockets_do_not(
        tmp_path: Path) -> None:
    archive = pack_home(_home(tmp_path))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert restore_home(fresh, archive) == 2
    assert _names(fresh) == {".config/mousepad/settings.ini", ".local/share/recently-used.xbel"}
    assert (fresh / ".config" / "mousepad" / "settings.ini").read_text() == "[window]\nwidth=900\n"
    assert not os.path.lexists(fresh / "outside") and not os.path.lexists(fresh / "bus")


def test_a_home_too_large_to_pack_is_a_typed_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "noise.bin").write_bytes(os.urandom(800_000))  # does not compress
    with pytest.raises(ExecutionError) as caught:
        pack_home(home)
    assert caught.value.detail["reason"] == "too_large"


def test_an_archive_leading_out_of_the_home_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(WorkspaceError) as caught:
        restore_home(home, base64.b64encode(out.getvalue()).decode())
    assert caught.value.detail["reason"] == "bad_archive"
    assert not (tmp_path / "escaped").exists() and list(home.iterdir()) == []


def test_the_runner_packs_and_restores_its_home_over_the_wire(tmp_path: Path) -> None:
    runner = AppsRunner(AppsConfig(home=_home(tmp_path)), is_init=False)
    packed = runner.snapshot(parse_apps_request(AppsSnapshotRequest().model_dump_json().encode()))
    reply = parse_apps_reply(packed.model_dump_json().encode())
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    restored = AppsRunner(AppsConfig(home=fresh), is_init=False).restore(AppsRestoreRequest(archive=reply.archive))
    assert restored.files == 2 and ".local/share/recently-used.xbel" in _names(fresh)


def test_a_snapshot_carries_the_zone_s_home_beside_the_profile_and_keeps_it_out_of_the_profile(
        tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    (profile / "Default").mkdir(parents=True)
    (profile / "Default" / "Preferences").write_text("{}")
    zone = base64.b64decode(pack_home(_home(tmp_path)))
    checked = snapshot.check(snapshot.pack(profile, zone))
    assert checked.desktop == zone
    assert snapshot.check(snapshot.pack(profile)).desktop is None
    snapshot.unpack(checked, profile)
    assert _names(profile) == {"Default/Preferences"}


def test_a_sandbox_without_the_zone_snapshots_no_home_and_refuses_to_restore_one() -> None:
    """No zone: the snapshot has no desktop entry, and one that holds a home is refused
    (``no_desktop``) rather than dropped (the daemon asks this before the browser is touched)."""
    client = AppsClient(None, None)
    assert asyncio.run(client.snapshot()) is None
    with pytest.raises(ExecutionError) as caught:
        asyncio.run(client.restore(b"archive"))
    assert caught.value.detail["reason"] == "no_desktop"
    # A zone where nothing ran since the reset that emptied its home is not asked (its home is empty).
    assert asyncio.run(AppsClient("desktop:8771", None).snapshot()) is None


def test_a_zone_that_cannot_be_reached_refuses_a_restore_as_no_desktop() -> None:
    """The compose stack without the desktop profile names a zone that does not run."""
    client = AppsClient("127.0.0.1:9", None)  # nothing listens there
    with pytest.raises(ExecutionError) as caught:
        asyncio.run(client.restore(b"archive"))
    assert caught.value.detail["reason"] == "no_desktop" and client.asked is False
