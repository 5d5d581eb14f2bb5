"""The daemon's X server on this machine (a real Xvfb started by ``DesktopSession``): it admits
only clients with its cookie, over its Unix socket only (neither TCP, which the X gate serves,
nor the abstract socket), and a restart draws a new cookie that the daemon's own clients follow."""

from __future__ import annotations

import secrets
import socket
import struct
from pathlib import Path

import pytest

from deskpod.agentd.display.capture import ScreenCapture
from deskpod.agentd.session import XAUTHORITY_NAME, DesktopSession
from deskpod.agentd.display.xinput import XInput
from deskpod.errors import InputError


def x_setup(sock: socket.socket, cookie: bytes | None) -> int:
    """Send an X11 connection setup with ``cookie`` (``None``: no authorization); return the
    server's first answer byte: 0 refused, 1 accepted."""
    name = b"MIT-MAGIC-COOKIE-1" if cookie is not None else b""
    data = cookie or b""

    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    with sock:
        sock.settimeout(10)
        sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(data)) + pad(name) + pad(data))
        return sock.recv(1)[0]


def unix(number: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(f"/tmp/.X11-unix/X{number}")
    return sock


def tcp(number: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", 6000 + int(number)), timeout=10)


@pytest.fixture
def session(daemon_session: DesktopSession) -> DesktopSession:
    daemon_session.start_display()
    return daemon_session


def cookie_of(session: DesktopSession) -> bytes:
    """The cookie of the session's authority file (its last record's)."""
    return (session.config.runtime_dir / XAUTHORITY_NAME).read_bytes()[-16:]


def test_the_display_wants_its_cookie_listens_on_no_network_and_a_restart_rotates_it(
        session: DesktopSession) -> None:
    number = session.config.display.lstrip(":")
    # The daemon's own clients find the cookie through XAUTHORITY. (One stays connected while
    # the probes below come and go: an X server whose last client leaves resets itself.)
    xin, shot = XInput(session.config.display), ScreenCapture(session.config.display)
    shot.health_check()
    cookie = cookie_of(session)
    assert (session.config.runtime_dir / XAUTHORITY_NAME).stat().st_mode & 0o777 == 0o600
    assert x_setup(unix(number), None) == 0
    assert x_setup(unix(number), secrets.token_bytes(16)) == 0
    assert x_setup(unix(number), cookie) == 1
    with pytest.raises(ConnectionRefusedError):
        tcp(number)
    sockets = Path("/proc/net/unix").read_text().splitlines()
    abstract = [line for line in sockets if f"@/tmp/.X11-unix/X{number}" in line]
    assert abstract == []
    xin.close()
    shot.close()

    session.kill_desktop()
    session.start_display()
    xin = XInput(session.config.display)
    renewed = cookie_of(session)
    assert renewed != cookie
    assert x_setup(unix(number), cookie) == 0
    assert x_setup(unix(number), renewed) == 1
    xin.close()


def test_a_client_without_the_cookie_is_refused(session: DesktopSession, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XAUTHORITY", str(tmp_path / "none"))
    with pytest.raises(InputError):
        XInput(session.config.display)


def test_a_killed_display_leaves_no_socket_or_lock_file(session: DesktopSession) -> None:
    number = session.config.display.lstrip(":")
    files = (Path(f"/tmp/.X11-unix/X{number}"), Path(f"/tmp/.X{number}-lock"))
    assert all(f.exists() for f in files)
    assert int(files[1].read_text()) == session.pid("xvfb")

    session.kill_desktop()
    assert [f for f in files if f.exists()] == []
    # The number is free again: a new server takes it.
    session.start_display()
    assert all(f.exists() for f in files)
