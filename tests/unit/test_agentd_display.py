"""The display's access control pieces that need no X server: the authority file, the
display grant's shape and configuration, the IPC listings, Chromium's start over its
DevTools pipe (no X, no Docker)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pydantic
import pytest
from Xlib import xauth

from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.ipc import sysv_ipc_ids
from deskpod.agentd.runner_wire import X11Grant
from deskpod.agentd.display.xauth import write_xauthority
from deskpod.agentd.session import DesktopSession
from deskpod.errors import ConfigError, SessionError

TOKEN = "t" * 32


def test_the_authority_file_is_private_and_python_xlib_finds_the_cookie(tmp_path: Path) -> None:
    path = tmp_path / "Xauthority"
    cookie = bytes(range(16))
    write_xauthority(path, "99", cookie)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    auth = xauth.Xauthority(str(path))
    # What python-xlib looks up for a Unix-socket display.
    assert auth.get_best_auth(xauth.FamilyLocal, socket.gethostname().encode(), 99) == (b"MIT-MAGIC-COOKIE-1", cookie)
    # libxcb and libX11 match the wildcard entry for any address.
    assert (65535, b"", b"99", b"MIT-MAGIC-COOKIE-1", cookie) in list(auth.entries)
    write_xauthority(path, "99", b"\xff" * 16)  # replaced in place, never appended
    assert [e[4] for e in xauth.Xauthority(str(path)).entries] == [b"\xff" * 16] * 2
    assert [p.name for p in tmp_path.iterdir()] == ["Xauthority"]


def test_the_display_grant_has_exactly_a_display_and_a_cookie() -> None:
    grant = X11Grant(display="sandbox:99", cookie_hex="0" * 32)
    assert list(type(grant).model_fields) == ["display", "cookie_hex"]
    assert "0" * 32 not in repr(grant)
    with pytest.raises(pydantic.ValidationError):
        grant.display = "x:1"  # type: ignore[misc]


def test_the_grant_host_is_configured_and_checked() -> None:
    assert AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN}).display_grant_host == "sandbox"
    cfg = AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_DISPLAY_GRANT_HOST": "sb-1.internal"})
    assert cfg.display_grant_host == "sb-1.internal"
    # An empty value counts as unset (deskpod.settings), as compose's ${VAR:-default} does.
    assert AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_DISPLAY_GRANT_HOST": ""}).display_grant_host == "sandbox"
    for bad in (" ", "a b", "host:1", "-x", "a/b"):
        with pytest.raises(ConfigError):
            AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_DISPLAY_GRANT_HOST": bad})


def test_sysv_listings_are_read_by_their_id_column(tmp_path: Path) -> None:
    (tmp_path / "shm").write_text(
        "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid\n"
        "         0         12  1600               4194304   100   200      0  1000  1000  1000  1000\n"
        "1234567890         13   600                  4096   101   201      1  1000  1000  1000  1000\n"
    )
    (tmp_path / "msg").write_text("       key      msqid perms      cbytes       qnum lspid lrpid   uid\n")
    assert sysv_ipc_ids("shm", tmp_path) == [12, 13]
    assert sysv_ipc_ids("msg", tmp_path) == []
    assert sysv_ipc_ids("sem", tmp_path) == []


@pytest.mark.process
def test_a_chromium_that_closes_its_devtools_pipe_is_not_ready(tmp_path: Path) -> None:
    """The end of Chromium's DevTools pipe reads as ready for reading too: a browser that
    closed its end (it is exiting) had been taken for one that answered the ping."""
    fake = tmp_path / "chromium"
    # It reads the daemon's ping, closes its end without an answer and lives on.
    fake.write_text("#!/bin/sh\ndd bs=4096 count=1 status=none <&3 >/dev/null\nexec 3<&- 4<&-\nexec sleep 30\n")
    fake.chmod(0o755)
    session = DesktopSession(AgentdConfig.from_env({
        "DESKPOD_TOKEN": TOKEN, "DESKPOD_CHROMIUM": str(fake), "DESKPOD_RUNTIME_DIR": str(tmp_path / "run"),
        "HOME": str(tmp_path / "home"),
    }))
    try:
        with pytest.raises(SessionError, match="chromium: its DevTools pipe failed: .*Chromium closed its end"):
            session.start_browser("about:blank")
    finally:
        session.stop()
