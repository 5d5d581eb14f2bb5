"""The workspace container's health check (``python -m deskpod.agentd.runner_health``):
it speaks the runner's wire with the standard library only, and says yes only to a pong.

Its cost is the point (Docker runs it every 5 s in every sandbox): loading the runner's
models for it took about half a CPU-second each time.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from deskpod.agentd import runner_health
from deskpod.agentd.runner_frames import FRAME_HEADER
from deskpod.agentd.runner_wire import RunnerPingRequest, RunnerPong, encode_frame
from deskpod.errors import SettingsError
from deskpod.settings import load_settings


def test_the_ping_is_the_wire_models_ping() -> None:
    assert runner_health.PING_PAYLOAD == RunnerPingRequest().model_dump_json().encode()


@pytest.fixture()
def answering() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that reads one frame per connection and answers the next of the
    replies the test appends (raw bytes); the requests it read are kept."""
    replies: list[bytes] = []
    seen: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)  # close() does not wake a blocked accept(): the loop looks at stop
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with conn:
                header = conn.recv(FRAME_HEADER.size)
                (length,) = FRAME_HEADER.unpack(header)
                seen.append(conn.recv(length))
                conn.sendall(replies.pop(0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], replies
    finally:
        stop.set()
        thread.join(5)
        server.close()
    assert all(request == runner_health.PING_PAYLOAD for request in seen)


def framed(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload)) + payload


def test_a_pong_is_healthy_and_anything_else_is_not(answering: tuple[int, list[bytes]]) -> None:
    port, replies = answering
    replies.extend([
        encode_frame(RunnerPong(pid=1)),
        framed(b'{"type":"error","error":{"code":"internal","message":"x"}}'),
        framed(b"not json"),
        FRAME_HEADER.pack(10_000_000),  # a header announcing more than a pong can be
        framed(b'{"type":"pong","pid":"1"}'),
        b"\x00\x00",  # closed mid-header
    ])
    assert [runner_health.ping(port, timeout_s=3) for _ in range(6)] == [True, False, False, False, False, False]


def test_nothing_listening_is_unhealthy_fast() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert runner_health.ping(port, timeout_s=3) is False


@pytest.mark.parametrize("raw, port", [("", 8770), ("  ", 8770), ("9000", 9000), ("65535", 65535)])
def test_the_port_comes_from_the_environment_only_as_the_settings_read_it(raw: str, port: int) -> None:
    assert runner_health.runner_port({"DESKPOD_RUNNER_PORT": raw}) == port
    environ = {"DESKPOD_RUNNER_PORT": raw} if raw.strip() else {}
    assert load_settings(environ, config_file=None).runner_port == port


@pytest.mark.parametrize("raw", ["http", "0", "65536", "-1", "80 80"])
def test_a_bad_port_is_refused_naming_the_variable_as_the_settings_refuse_it(raw: str) -> None:
    with pytest.raises(ValueError, match="DESKPOD_RUNNER_PORT"):
        runner_health.runner_port({"DESKPOD_RUNNER_PORT": raw})
    with pytest.raises(SettingsError, match="DESKPOD_RUNNER_PORT"):
        load_settings({"DESKPOD_RUNNER_PORT": raw}, config_file=None)


@pytest.mark.process
def test_the_health_check_loads_no_model_library() -> None:
    probe = ("import sys, runpy; sys.argv = ['x']\n"
             "try:\n    runpy.run_module('deskpod.agentd.runner_health', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', 'pydantic_settings')"
             " or m.startswith('deskpod.protocol')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={"DESKPOD_RUNNER_PORT": "1", "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]", done
