"""The stack's console port: ``scripts/up.sh`` takes 8766, or a free port when that one is
taken (a second stack on the host), records it in ``.env`` as ``DESKPOD_SERVE_PORT`` and
prints it (``scripts/serve-port.sh``, run here with a port of the test's own held); the
host's clients read it back from that file (:mod:`deskpod.settings.stack`).

The script is run as a subprocess (``process``) with a first port the test holds instead of
8766, so the test never takes a port other stacks on this host may be using.
"""

from __future__ import annotations

import os
import random
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskpod.errors import SettingsError
from deskpod.settings import load_settings
from deskpod.settings.stack import stack_access

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "serve-port.sh"


@pytest.fixture
def held() -> Iterator[int]:
    """A loopback port something listens on for the test's duration, below the kernel's
    ephemeral range (``ip_local_port_range`` starts at 32768 here): the script's choice is
    a port just above it, which any connection opened meanwhile could otherwise take
    between the script's check and the test's (a clean-clone run failed so, Errno 98)."""
    for port in random.sample(range(20_000, 32_000, 100), 120):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            s.listen()
            yield port
            return
    raise AssertionError("no free port below the ephemeral range")


def serve_port(env_file: Path, first: int, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "DESKPOD_SERVE_PORT"}
    return subprocess.run([str(SCRIPT), *options, str(env_file), str(first)], capture_output=True, text=True,
                          timeout=60, env={**clean, **env})


@pytest.mark.process
def test_a_taken_console_port_is_replaced_by_a_free_one_recorded_in_env_and_printed(tmp_path: Path,
                                                                                    held: int) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("DESKPOD_TOKEN=t\nDESKPOD_SERVE_PORT=\n", encoding="utf-8")
    chosen = serve_port(env_file, held)
    assert chosen.returncode == 0, chosen.stderr
    port = int(chosen.stdout)
    assert port != held and held < port < held + 100
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # it is free
    assert env_file.read_text(encoding="utf-8") == f"DESKPOD_TOKEN=t\nDESKPOD_SERVE_PORT={port}\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stack_access(load_settings({}, config_file=None), env_file).serve_url == f"ws://127.0.0.1:{port}/v1/controller"


@pytest.mark.process
def test_the_recorded_port_stays_while_the_stack_holds_it_and_an_explicit_one_wins(tmp_path: Path,
                                                                                   held: int) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"DESKPOD_SERVE_PORT={held}\n", encoding="utf-8")
    ours = serve_port(env_file, held, "--ours")  # this stack's own serve holds it
    assert ours.returncode == 0 and int(ours.stdout) == held, ours.stderr
    assert env_file.read_text(encoding="utf-8") == f"DESKPOD_SERVE_PORT={held}\n"
    moved = serve_port(env_file, held)  # someone else holds it now
    assert moved.returncode == 0 and int(moved.stdout) != held, moved.stderr
    explicit = serve_port(env_file, held, DESKPOD_SERVE_PORT="18766")
    assert explicit.returncode == 0 and explicit.stdout.strip() == "18766"
    assert env_file.read_text(encoding="utf-8") == "DESKPOD_SERVE_PORT=18766\n"


def test_clients_read_the_port_and_tokens_from_env_unless_the_environment_sets_them(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("DESKPOD_SERVE_PORT=9123\nDESKPOD_SERVE_TOKEN=from-file\nDESKPOD_TOKEN=sandbox\n",
                        encoding="utf-8")
    access = stack_access(load_settings({}, config_file=None), env_file)
    assert (access.serve_port, access.serve_token, access.approver_token) == (9123, "from-file", "")
    assert access.console_url == "http://127.0.0.1:9123/console/" and access.env_file == env_file
    explicit = stack_access(load_settings({"DESKPOD_SERVE_PORT": "9999", "DESKPOD_SERVE_TOKEN": "from-env"},
                                          config_file=None), env_file)
    assert (explicit.serve_port, explicit.serve_token) == (9999, "from-env")
    assert stack_access(load_settings({}, config_file=None), tmp_path / "none.env").serve_port == 8766
    env_file.write_text("DESKPOD_SERVE_PORT=http\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="DESKPOD_SERVE_PORT"):
        stack_access(load_settings({}, config_file=None), env_file)
