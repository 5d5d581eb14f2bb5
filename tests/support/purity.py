"""The pure test tier's guard: no process, no X display, no Docker while a test runs.

:func:`pure` makes these entry points refuse with :class:`ImpureTestError`:

- starting a process: :class:`subprocess.Popen` (so also ``subprocess.run``,
  ``asyncio.create_subprocess_exec`` and ``_shell``), ``os.fork``, ``os.forkpty``,
  ``os.posix_spawn(p)``, the ``os.exec*`` family, ``os.system`` and ``_posixsubprocess``
  (multiprocessing's spawn);
- an X display: a connection to an X server's socket (``/tmp/.X11-unix/X<n>``, abstract or
  not, or TCP port 6000-6063); ``DISPLAY`` and ``WAYLAND_DISPLAY`` are unset, so a library
  that opens the display itself (mss through libX11) finds none;
- Docker: a connection to a ``docker.sock`` or to the engine's TCP ports 2375/2376.

Each refusal is also recorded (:func:`take_refusals`), so that a test fails with the
message even when the code under test catches the error. :func:`prime` runs once before
the tests what the standard library runs a subprocess for only once per process. ``tests/unit/conftest.py`` runs
every phase of every test in ``tests/unit`` under :func:`pure`, except tests marked
:data:`PROCESS_MARK`.
"""

from __future__ import annotations

import _posixsubprocess
import os
import platform
import socket
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

PROCESS_MARK = "process"
"""The marker that takes a test out of the pure tier (registered in pyproject.toml)."""

_HINT = (
    "tests/unit is the pure tier (scripts/test.sh unit): mark the test @pytest.mark.process to move it "
    "to the process tier, inject a fake, or move it to tests/display or tests/integration"
)

_X11_PORTS = range(6000, 6064)
_DOCKER_PORTS = (2375, 2376)


class ImpureTestError(RuntimeError):
    """A test of the pure tier reached a process, display or Docker entry point."""


_violations: list[str] = []


def _refuse(what: str) -> ImpureTestError:
    message = f"{what}: {_HINT}"
    _violations.append(message)
    return ImpureTestError(message)


def _refusing(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _refuse(what)

    return refuse


def _execute_child(self: subprocess.Popen[Any], args: Any, executable: Any, *rest: Any, **kwargs: Any) -> None:
    raise _refuse(f"started a subprocess (subprocess.Popen {args!r})")


def _socket_target(address: Any) -> str | None:
    """What a socket address reaches that the pure tier refuses, or None."""
    if isinstance(address, bytes):
        address = address.decode(errors="replace")
    if isinstance(address, str):
        path = address.lstrip("\0")
        if path.startswith("/tmp/.X11-unix/"):
            return f"opened an X display (socket {path})"
        if path.endswith("docker.sock"):
            return f"talked to Docker (socket {path})"
        return None
    if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
        if address[1] in _X11_PORTS:
            return f"opened an X display (TCP {address[0]}:{address[1]})"
        if address[1] in _DOCKER_PORTS:
            return f"talked to Docker (TCP {address[0]}:{address[1]})"
    return None


def _guarded_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(self: socket.socket, address: Any) -> Any:
        target = _socket_target(address)
        if target is not None:
            raise _refuse(target)
        return original(self, address)

    return connect


def prime() -> None:
    """Ask, before any test, what the standard library computes with a subprocess once per process.

    ``platform.platform()`` and ``platform.processor()`` run ``uname -p`` the first time and
    keep the answer; the vendor SDKs put it in their request headers. Asked here, a test
    that asks later starts nothing, whatever ran before it.
    """
    platform.platform()


def take_refusals() -> list[str]:
    """Return the refusals recorded since the last call, and forget them.

    Returns:
        One message per refused call, oldest first.
    """
    taken, _violations[:] = list(_violations), []
    return taken


@contextmanager
def pure() -> Iterator[None]:
    """Refuse every process, display and Docker entry point while the block runs.

    Raises:
        ImpureTestError: from the refused call, inside the block.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _execute_child)
        patch.setattr(_posixsubprocess, "fork_exec", _refusing("started a process (_posixsubprocess.fork_exec)"))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system",
                     "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe"):
            if hasattr(os, name):
                patch.setattr(os, name, _refusing(f"started a process (os.{name})"))
        patch.setattr(socket.socket, "connect", _guarded_connect(socket.socket.connect))
        patch.setattr(socket.socket, "connect_ex", _guarded_connect(socket.socket.connect_ex))
        patch.delenv("DISPLAY", raising=False)
        patch.delenv("WAYLAND_DISPLAY", raising=False)
        yield


def guard(item: pytest.Item) -> Generator[None, None, None]:
    """Run one phase (setup, call or teardown) of ``item`` under :func:`pure`, unless it is marked.

    A new-style hook wrapper yields from it. The phase fails with the first refusal's
    message when the code under test caught the :class:`ImpureTestError`.

    Args:
        item: the test whose phase runs inside.

    Raises:
        pytest.fail.Exception: a refusal was caught by the code under test.
    """
    if item.get_closest_marker(PROCESS_MARK) is not None:
        yield
        return
    take_refusals()
    failure: BaseException | None = None
    try:
        with pure():
            yield
    except BaseException as exc:  # re-raised below, once the refusals are known
        failure = exc
    found = take_refusals()
    if found and not isinstance(failure, ImpureTestError):
        pytest.fail(f"{item.nodeid} {found[0]}", pytrace=False)
    if failure is not None:
        raise failure
