"""The pure tier's guard (``tests/support/purity.py``) refuses processes, X displays and Docker.

These tests run inside the guard ``tests/unit/conftest.py`` puts around every unmarked
test, so each one consumes the refusals it provokes (:func:`purity.take_refusals`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import purity
import pytest
from purity import PROCESS_MARK, ImpureTestError, guard, take_refusals


@contextmanager
def refused(match: str) -> Iterator[None]:
    """Expect a refusal matching ``match``, and consume it (or the guard around the test fails it)."""
    with pytest.raises(ImpureTestError, match=match):
        yield
    assert take_refusals()


def _item(*marks: str) -> Any:
    return SimpleNamespace(nodeid="tests/unit/test_x.py::test_x",
                           get_closest_marker=lambda name: name if name in marks else None)


def test_subprocess_is_refused_with_the_tier_named() -> None:
    with refused(r"subprocess\.Popen \['true'\].*@pytest\.mark\.process"):
        subprocess.run(["true"], check=False)


def test_asyncio_subprocess_is_refused() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec("true")

    with refused("subprocess"):
        asyncio.run(start())


@pytest.mark.parametrize("name", ["fork", "forkpty", "posix_spawn", "system", "execv", "execvpe"])
def test_fork_spawn_and_exec_are_refused(name: str) -> None:
    with refused(f"os.{name}"):
        getattr(os, name)("true")


@pytest.mark.parametrize(("family", "address", "what"), [
    (socket.AF_UNIX, "/tmp/.X11-unix/X0", "X display"),
    (socket.AF_UNIX, "\0/tmp/.X11-unix/X7", "X display"),
    (socket.AF_INET, ("127.0.0.1", 6001), "X display"),
    (socket.AF_UNIX, "/var/run/docker.sock", "Docker"),
    (socket.AF_INET, ("127.0.0.1", 2375), "Docker"),
])  # fmt: skip
def test_display_and_docker_sockets_are_refused(family: int, address: Any, what: str) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock, refused(what):
        sock.connect(address)
    with socket.socket(family, socket.SOCK_STREAM) as sock, refused(what):
        sock.connect_ex(address)


def test_display_variables_are_unset() -> None:
    assert "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ


def test_loopback_connections_stay_allowed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()):
            server.accept()[0].close()
    assert take_refusals() == []


def test_a_refusal_the_code_catches_still_fails_the_test() -> None:
    phase = guard(_item())
    next(phase)
    try:
        subprocess.run(["true"], check=False)
    except ImpureTestError:
        pass  # the code under test swallows it
    with pytest.raises(pytest.fail.Exception, match=r"test_x started a subprocess"):
        phase.send(None)


@pytest.mark.parametrize(("marks", "guarded"), [((), True), ((PROCESS_MARK,), False)])
def test_only_an_unmarked_test_runs_guarded(monkeypatch: pytest.MonkeyPatch, marks: tuple[str, ...],
                                            guarded: bool) -> None:
    entered: list[bool] = []

    @contextmanager
    def pure() -> Iterator[None]:
        entered.append(True)
        yield

    monkeypatch.setattr(purity, "pure", pure)
    phase = guard(_item(*marks))
    next(phase)
    with pytest.raises(StopIteration):
        phase.send(None)
    assert bool(entered) is guarded
