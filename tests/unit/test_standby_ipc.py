"""A reset keeps exactly the standby desktop's shared memory segments (no kernel objects touched)."""

from __future__ import annotations

from pathlib import Path

from deskpod.agentd.ipc import shm_segments_of

HEADER = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid\n"


def test_only_segments_the_standby_created_and_last_used_are_spared(tmp_path: Path) -> None:
    (tmp_path / "shm").write_text(HEADER + "".join(
        f"{0:10d} {ident:10d} 600 {4096:21d} {cpid:5d} {lpid:5d} 1 1000 1000 1000 1000\n"
        for ident, cpid, lpid in ((1, 100, 100), (2, 100, 555), (3, 555, 100), (4, 101, 102))))
    assert shm_segments_of(frozenset({100, 101, 102}), tmp_path) == {1, 4}
    assert shm_segments_of(frozenset(), tmp_path) == frozenset()
    assert shm_segments_of(frozenset({100}), tmp_path / "none") == frozenset()
