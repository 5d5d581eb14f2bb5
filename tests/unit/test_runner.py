"""The workspace runner and agentd's side of its wire, without Docker.

The runner runs as a local subprocess (not PID 1, so it kills only its commands'
process groups and wipes only the folders it is given); hostile replies come from a
fake runner that answers whatever the test says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from deskpod.agentd.runner import drop_working_folder_from_path, xauthority_entry
from deskpod.agentd.workspace.runner_client import RunnerClient
from deskpod.agentd.runner_wire import (
    FRAME_HEADER,
    MAX_RUNNER_REPLY_BYTES,
    X11Grant,
    parse_runner_request,
)
from deskpod.errors import (
    DisplayUnavailableError,
    ExecutionError,
    InternalError,
    PathDeniedError,
    WorkspaceUnavailableError,
)
from deskpod.protocol import ExecOutput, ExecRequest, FileWritten, ReadFileRequest, WriteFileRequest

COOKIE = "0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def runner(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A runner on a free loopback port, its workspace in ``tmp_path/ws``."""
    port = free_port()
    for name in ("ws", "home", "state"):
        (tmp_path / name).mkdir()
    env = dict(os.environ, DESKPOD_WORKSPACE=str(tmp_path / "ws"), HOME=str(tmp_path / "home"),
               DESKPOD_RUNNER_STATE=str(tmp_path / "state"), DESKPOD_RUNNER_HOST="127.0.0.1",
               DESKPOD_RUNNER_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "deskpod.agentd.runner"], env=env)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([sys.executable, "-m", "deskpod.agentd.runner_health"], env=env).returncode:
            assert time.monotonic() < deadline and proc.poll() is None, "the runner did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", tmp_path
    finally:
        proc.terminate()
        proc.wait(10)


def exec_request(**fields: Any) -> ExecRequest:
    return ExecRequest.model_validate({"type": "exec", "id": "t", **fields})


@pytest.mark.process
def test_requests_are_forwarded_and_reset_empties_the_workspace(runner: tuple[str, Path]) -> None:
    address, tmp = runner

    async def body() -> None:
        client = RunnerClient(address)
        written = await client.workspace(
            WriteFileRequest(type="write_file", id="w", path="a.txt", content="hi\n"), threading.Event())
        assert isinstance(written, FileWritten) and written.created
        out = await client.workspace(exec_request(cmd="cat a.txt; echo $DISPLAY$XAUTHORITY; id -u"), threading.Event())
        assert isinstance(out, ExecOutput) and out.stdout == f"hi\n\n{os.getuid()}\n", out
        with pytest.raises(PathDeniedError):  # the runner's typed error, through the fixed table
            await client.workspace(ReadFileRequest(type="read_file", id="r", path="../x"), threading.Event())
        done = await client.reset()
        assert done.failures == [] and os.listdir(tmp / "ws") == []
        assert (await client.ping()).pid != 1

    asyncio.run(body())


@pytest.mark.process
def test_a_cancelled_request_kills_its_command(runner: tuple[str, Path]) -> None:
    address, tmp = runner

    async def body() -> None:
        client = RunnerClient(address)
        cancel = threading.Event()
        asyncio.get_running_loop().call_later(1.0, cancel.set)
        started = time.monotonic()
        with pytest.raises(ExecutionError):
            await client.workspace(exec_request(cmd="echo $$ > pid; exec sleep 300", timeout_s=300), cancel)
        assert time.monotonic() - started < 10
        pid = int((tmp / "ws" / "pid").read_text())
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the cancelled command still runs")
        out = await client.workspace(exec_request(cmd="echo next"), threading.Event())
        assert isinstance(out, ExecOutput) and out.stdout == "next\n"

    asyncio.run(body())


@pytest.mark.process
def test_a_display_grant_gives_one_command_display_and_a_private_xauthority(runner: tuple[str, Path]) -> None:
    address, tmp = runner
    grant = X11Grant(display="sandbox:99", cookie_hex=COOKIE)
    live: list[str] = []

    @contextlib.asynccontextmanager
    async def grants(lifetime_s: float) -> AsyncIterator[X11Grant]:
        live.append(f"granted for {lifetime_s:.0f} s")
        yield grant
        live.append("ended")

    async def body() -> None:
        client = RunnerClient(address, grants=grants)
        out = await client.workspace(
            exec_request(display=True, cmd='echo "$DISPLAY"; stat -c %a "$XAUTHORITY"; od -An -tx1 -v "$XAUTHORITY"; '
                                           'echo "$XAUTHORITY"'),
            threading.Event())
        assert isinstance(out, ExecOutput) and out.exit_code == 0, out
        lines = out.stdout.splitlines()
        assert lines[0] == "sandbox:99" and lines[1] == "600"
        assert bytes.fromhex("".join(lines[2:-1]).replace(" ", "")) == xauthority_entry(
            grant, socket.gethostname().encode())
        assert not os.path.exists(lines[-1]), "the Xauthority file outlived its command"
        assert live == ["granted for 60 s", "ended"]  # the command's 30 s and the reply's slack
        with pytest.raises(DisplayUnavailableError):
            await RunnerClient(address).workspace(exec_request(display=True, cmd="true"), threading.Event())

    asyncio.run(body())


def test_the_xauthority_record_is_family_wild_with_the_cookie() -> None:
    grant = X11Grant(display="sandbox:99.0", cookie_hex=COOKIE)
    entry = xauthority_entry(grant)
    name = b"MIT-MAGIC-COOKIE-1"
    assert entry == (b"\xff\xff" + b"\x00\x00" + b"\x00\x0299" + struct.pack(">H", len(name)) + name
                     + b"\x00\x10" + bytes.fromhex(COOKIE))
    # With this host's name, a FamilyLocal record follows: what python-xlib looks up for "host:N".
    assert xauthority_entry(grant, b"ws-1") == entry + (
        b"\x01\x00" + b"\x00\x04ws-1" + b"\x00\x0299" + struct.pack(">H", len(name)) + name
        + b"\x00\x10" + bytes.fromhex(COOKIE))
    for bad in ({"display": "sandbox:99", "cookie_hex": COOKIE.upper()}, {"display": "x;rm:1", "cookie_hex": COOKIE},
                {"display": "sandbox:99", "cookie_hex": COOKIE[:-2]}):
        with pytest.raises(ValueError):
            X11Grant.model_validate(bad)


def fake_runner(reply: bytes) -> tuple[str, threading.Thread]:
    """A one-shot runner that reads one request frame and sends ``reply`` as is."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            header = conn.recv(FRAME_HEADER.size)
            length = FRAME_HEADER.unpack(header)[0]
            data = b""
            while len(data) < length:
                data += conn.recv(65_536)
            parse_runner_request(data)  # agentd sends a valid request
            conn.sendall(reply)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{port}", thread


def frame(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload)) + payload


@pytest.mark.parametrize(
    ("reply", "error", "reason"),
    [
        (FRAME_HEADER.pack(MAX_RUNNER_REPLY_BYTES + 1), WorkspaceUnavailableError, "too_large"),
        (frame(b'{"type": "output", "output": {"type": "exec_output", "exit_code": "zero"}}'),
         WorkspaceUnavailableError, "bad_reply"),
        (frame(b'{"type": "output", "output": {"type": "exec_output"}, "extra": 1}'), WorkspaceUnavailableError,
         "bad_reply"),
        (frame(b'{"type": "pong", "pid": 1}'), WorkspaceUnavailableError, "bad_reply"),
        (frame(b'{"type": "error", "error": {"code": "path_denied", "message": "x", "detail": {}}}'),
         PathDeniedError, None),
        (frame(b'{"type": "error", "error": {"code": "os_system", "message": "x", "detail": {}}}'),
         InternalError, None),
        (frame(b"not json"), WorkspaceUnavailableError, "bad_reply"),
        (b"\x00\x00", WorkspaceUnavailableError, "unreachable"),
    ],
)
def test_a_hostile_runner_reply_is_a_typed_error(reply: bytes, error: type[Exception], reason: str | None) -> None:
    address, thread = fake_runner(reply)

    async def body() -> None:
        with pytest.raises(error) as caught:
            await RunnerClient(address).workspace(exec_request(cmd="true"), threading.Event())
        if reason is not None:
            assert caught.value.detail["reason"] == reason  # type: ignore[attr-defined]

    asyncio.run(body())
    thread.join(5)


def test_an_unreachable_runner_is_workspace_unavailable() -> None:
    async def body() -> None:
        with pytest.raises(WorkspaceUnavailableError) as caught:
            await RunnerClient(f"127.0.0.1:{free_port()}").workspace(exec_request(cmd="true"), threading.Event())
        assert caught.value.detail["reason"] == "unreachable"

    asyncio.run(body())


def test_the_working_folder_is_dropped_from_the_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner starts in the workspace: a module an agent writes there must never be imported by it."""
    monkeypatch.chdir(tmp_path)
    path = [str(tmp_path), "", "/usr/lib/python3.11", ".", str(tmp_path / "sub")]
    assert drop_working_folder_from_path(path) == [str(tmp_path), "", "."]
    assert path == ["/usr/lib/python3.11", str(tmp_path / "sub")]

