"""The standby desktop (``deskpod.agentd.standby``) on this machine: a real Xvfb and openbox
on the second seat's display, with a stand-in for Chromium (the real one refuses to run
as root with its sandbox on, and these host tests run as root; the swap itself is proven
in the sandbox by ``tests/integration/test_reset.py``).

What is checked here: the standby has its own display, cookie, folders and home, it does
not touch the daemon's ``XAUTHORITY`` until it is swapped in, its process tree includes
its browser's children (the reset spares exactly those), and the reset's wipe around it
keeps only its files.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.session import DesktopSession
from deskpod.agentd.standby import Standby, seat_config, wipe_around

FAKE_CHROMIUM = """#!/usr/bin/env python3
# Answers the daemon's DevTools ping on fd 3/4 like Chromium, and starts one helper child.
import os, subprocess, sys, time
os.read(3, 65536)
os.write(4, b'{"id": 0, "result": {}}\\0')
subprocess.Popen(["sleep", "300"])
time.sleep(300)
"""


def x_setup(number: str, cookie: bytes) -> int:
    """X11 connection setup on display ``number``'s Unix socket with ``cookie``: 1 accepted, 0 refused."""
    name = b"MIT-MAGIC-COOKIE-1"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(f"/tmp/.X11-unix/X{number}")
        sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + name + b"\0\0" + cookie)
        return sock.recv(1)[0]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unused_display_pair: str) -> Iterator[AgentdConfig]:
    monkeypatch.setenv("XAUTHORITY", str(tmp_path / "daemon-xauthority"))  # restored after the test
    fake = tmp_path / "chromium"
    fake.write_text(FAKE_CHROMIUM)
    fake.chmod(0o755)
    yield AgentdConfig.from_env({
        "DESKPOD_TOKEN": "t" * 32, "DESKPOD_DISPLAY": f":{unused_display_pair}", "DESKPOD_SCREEN_SIZE": "640x480",
        "DESKPOD_RUNTIME_DIR": str(tmp_path / "run" / "deskpod"), "DESKPOD_CHROMIUM": str(fake),
        "HOME": str(tmp_path / "home"),
    })


def test_a_standby_desktop_has_its_own_display_cookie_and_folders_and_leaves_the_daemons_alone(
        config: AgentdConfig) -> None:
    baseline = {".cache/fontconfig/cache-1": b"fonts"}

    async def run() -> None:
        standby = Standby(config)
        standby.prepare(1, baseline)
        desktop = await standby.take()
        assert desktop is not None and desktop.alive() and desktop.seat == 1
        session = desktop.session
        seat = seat_config(config, 1)
        assert session.config == seat and seat.display == f":{int(config.display[1:]) + 1}"
        assert seat.runtime_dir.parent == config.runtime_dir.parent and seat.home_dir == seat.runtime_dir / "home"
        try:
            # Its X server wants its own cookie; the daemon's XAUTHORITY is untouched until the swap.
            assert os.environ["XAUTHORITY"] != str(session.xauthority)
            cookie = session.xauthority.read_bytes()[-16:]  # the file's last record's cookie
            number = seat.display[1:]
            assert x_setup(number, cookie) == 1 and x_setup(number, bytes(16)) == 0
            # Its home holds the baseline, its browser's environment points there.
            assert (seat.home_dir / ".cache/fontconfig/cache-1").read_bytes() == b"fonts"
            chromium = session.processes["chromium"].pid
            env = Path(f"/proc/{chromium}/environ").read_bytes().split(b"\0")
            assert f"HOME={seat.home_dir}".encode() in env and f"DISPLAY={seat.display}".encode() in env
            # The reset spares its whole tree: the browser's children included.
            tree = session.process_tree()
            children = [int(p) for p in Path(f"/proc/{chromium}/task/{chromium}/children").read_text().split()]
            assert children and set(children) <= tree
            assert {p.pid for p in session.processes.values()} <= tree
            session.activate()
            assert os.environ["XAUTHORITY"] == str(session.xauthority)
        finally:
            desktop.discard()
        assert not desktop.alive()

    asyncio.run(run())


def test_the_wipe_around_a_standby_keeps_only_its_files(tmp_path: Path) -> None:
    tmp, shm, home = tmp_path / "tmp", tmp_path / "shm", tmp_path / "home"
    keep_config = AgentdConfig(token_sha256="a" * 64, display=":7", runtime_dir=tmp / "deskpod-seat1",
                               home_dir=tmp / "deskpod-seat1" / "home")
    for path in (tmp / "deskpod-seat1" / "home" / "kept", tmp / "deskpod" / "old-profile", tmp / "downloads" / "x",
                 tmp / ".X11-unix" / "X6", tmp / ".X11-unix" / "X7", tmp / ".X6-lock", tmp / ".X7-lock",
                 shm / "leak", home / ".cache" / "leak"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    failures = wipe_around((tmp, shm, home), DesktopSession(keep_config), x_dir=tmp)
    assert failures == []
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["tmp/.X11-unix/X7", "tmp/.X7-lock", "tmp/deskpod-seat1/home/kept"]
