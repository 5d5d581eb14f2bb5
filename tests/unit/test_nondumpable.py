"""``deskpod mcp`` and ``deskpod serve`` keep their secrets from processes of their own uid.

On the operator's host the agent's side may run code as deskpod's own user: an assistant that
starts ``deskpod mcp`` over stdio may also give its model a shell. Such a process has no
privilege beyond its uid; here it is emulated as this test's uid with every capability dropped
(``setpriv``), and the server is started the same way. A control process started alike, and not
hardened, is readable (so the emulation shows the fault); ``deskpod mcp`` and ``deskpod serve``
are not: their ``/proc/<pid>/environ`` (the approvers' token, the run credentials
``DESKPOD_SECRET_*``) and ``mem`` are refused. On main both were readable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from running_service import free_port

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]

UNPRIVILEGED = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]
APPROVER = "approver-secret-" + "q" * 24
CREDENTIAL = "credential-secret-" + "w" * 24
ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKPOD_") or k.endswith("_IMAGE")}
    env.update(PYTHONPATH=str(ROOT / "runtime"), DESKPOD_SERVE_APPROVER_TOKEN=APPROVER,
               DESKPOD_SECRET_SHOP_PASSWORD=CREDENTIAL, DESKPOD_SECRET_SHOP_PASSWORD_DOMAINS="shop.demo.test",
               DESKPOD_TOKEN="sandbox-token-" + "s" * 24,
               DESKPOD_SERVE_TOKEN="serve-token-" + "t" * 24, DESKPOD_AUDIT_KEY=str(tmp_path / "key"),
               DESKPOD_STATE_DIR=str(tmp_path / "state"), DESKPOD_CONSOLE="off")
    return env


def _read_as_its_uid(pid: int, name: str) -> tuple[int, bytes]:
    """What a same-uid process without privilege reads of ``/proc/<pid>/<name>``: (exit code, bytes)."""
    read = subprocess.run([*UNPRIVILEGED, "head", "-c", "65536", f"/proc/{pid}/{name}"], capture_output=True,
                          timeout=10)
    return read.returncode, read.stdout


def _started(args: list[str], env: dict[str, str], ready: str) -> subprocess.Popen[bytes]:
    """Start ``args`` under this test's uid without privilege; return once its standard error said ``ready``."""
    process = subprocess.Popen([*UNPRIVILEGED, sys.executable, *args], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stderr is not None
    seen = b""
    while ready.encode() not in seen and process.poll() is None:
        seen += process.stderr.readline()
    assert ready.encode() in seen, seen.decode(errors="replace")[-2000:]
    return process


def _listening(args: list[str], env: dict[str, str], port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    """Start ``args`` under this test's uid without privilege; return once it accepts on ``port``."""
    with (tmp_path / "stderr.txt").open("wb") as err:
        process = subprocess.Popen([*UNPRIVILEGED, sys.executable, *args], env=env, stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.2)
    raise AssertionError((tmp_path / "stderr.txt").read_text()[-2000:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait(10)


def test_the_emulated_same_uid_process_reads_an_ordinary_process(tmp_path: Path) -> None:
    process = _started(["-c", "import sys, time; print('up', file=sys.stderr, flush=True); time.sleep(60)"],
                       _env(tmp_path), "up")
    try:
        code, environ = _read_as_its_uid(process.pid, "environ")
    finally:
        _stop(process)
    assert code == 0 and APPROVER.encode() in environ


@pytest.mark.parametrize("command", ["mcp", "serve"])
def test_a_same_uid_process_cannot_read_the_servers_secrets(tmp_path: Path, command: str) -> None:
    env = _env(tmp_path)
    if command == "mcp":
        args = ["-m", "deskpod", "mcp", "--sandbox", "ws://127.0.0.1:9/v1/ws", "--start-url", "http://demo.test/",
                "--approver-port", str(free_port()), "--audit-dir", str(tmp_path / "audit")]
        process = _started(args, env, "was given DESKPOD_SERVE_APPROVER_TOKEN itself")
    else:
        port = free_port()
        process = _listening(["-m", "deskpod", "serve", "--listen", f"127.0.0.1:{port}", "--audit-dir",
                              str(tmp_path / "audit")], env, port, tmp_path)
    try:
        refused = {name: _read_as_its_uid(process.pid, name) for name in ("environ", "mem")}
        alive = process.poll() is None
    finally:
        _stop(process)
    assert alive
    for name, (code, data) in refused.items():
        assert code != 0 and APPROVER.encode() not in data and CREDENTIAL.encode() not in data, name
