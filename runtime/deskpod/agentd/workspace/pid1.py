"""Being PID 1 of the workspace container: reaping every child, killing every other
process of the namespace, and being out of reach of the processes it starts.

The workspace runner (:mod:`deskpod.agentd.runner`) is its container's init:
:class:`ChildReaper` reaps every zombie and hands each command's exit status to the
thread that waits for it; :func:`kill_namespace` kills every other process of the PID
namespace however it hid; :func:`make_non_dumpable` keeps processes of the same uid out
of its memory. Durations are float seconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from deskpod.errors import ActionTimeoutError

__all__ = ["ChildReaper", "KILL_DEADLINE_S", "MAX_HELD_STATUSES", "REAP_INTERVAL_S", "kill_namespace",
           "make_non_dumpable"]

KILL_DEADLINE_S = 5.0
"""How long :func:`kill_namespace` keeps killing until ``/proc`` lists only the runner, seconds."""

REAP_INTERVAL_S = 0.02
"""Seconds between the reaper's ``waitpid(-1, WNOHANG)`` rounds when no child has exited."""

MAX_HELD_STATUSES = 4096
"""Exit statuses of processes nobody waits for (orphans) kept at most; the oldest go first."""

_PR_SET_DUMPABLE = 4


def make_non_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process: processes of the same uid can no
    longer open its ``/proc/<pid>/mem``, ``environ`` or ``fd``, nor ptrace it.

    Raises:
        OSError: the call failed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class ChildReaper:
    """Init's reaper: a thread ``waitpid(-1)``s every child, orphans included.

    Statuses of the commands :func:`~deskpod.agentd.workspace.process.run_process` starts are
    handed to it through :meth:`wait`; others (orphans re-parented to init) are held
    until :meth:`forget` (at most :data:`MAX_HELD_STATUSES`). Children are started
    under the same lock as each reaping round (:meth:`spawn`), so a status held for
    a dead orphan is never taken for a new child that got the same pid.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._statuses: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="deskpod-reaper", daemon=True)

    def start(self) -> None:
        """Start the reaping thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the reaping thread."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            reaped = False
            with self._cond:
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    reaped = True
                    self._statuses[pid] = os.waitstatus_to_exitcode(status)
                    while len(self._statuses) > MAX_HELD_STATUSES:
                        del self._statuses[next(iter(self._statuses))]
                if reaped:
                    self._cond.notify_all()
            self._stop.wait(REAP_INTERVAL_S)

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """Start a child with ``start()`` between two reaping rounds; forget any stale
        status held for its pid."""
        with self._cond:
            proc = start()
            self._statuses.pop(proc.pid, None)
            return proc

    def exited(self, pid: int) -> bool:
        """Whether child ``pid`` has exited and been reaped."""
        with self._cond:
            return pid in self._statuses

    def wait(self, pid: int) -> int:
        """Block until child ``pid`` has been reaped; return its exit code
        (negative: the signal that ended it)."""
        with self._cond:
            while pid not in self._statuses:
                self._cond.wait(0.5)
            return self._statuses.pop(pid)

    def forget(self) -> None:
        """Drop every held status (after :func:`kill_namespace`: no command runs)."""
        with self._cond:
            self._statuses.clear()


def _other_pids() -> list[int]:
    me = os.getpid()
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != me]


def kill_namespace(deadline_s: float = KILL_DEADLINE_S) -> int:
    """SIGKILL every other process of this PID namespace until none is left.

    ``kill(-1, SIGKILL)`` from the namespace's init signals every process in it
    that the caller may signal (all of them: they share its uid); it is repeated
    until ``/proc`` lists only this process (zombies are reaped by
    :class:`ChildReaper`), so a process forking as fast as it can cannot outrun it.
    Only PID 1 does this; elsewhere it would hit the user's own session.

    Args:
        deadline_s: give up after this many seconds.

    Returns:
        How many distinct processes were seen and killed (0 when not PID 1).

    Raises:
        ActionTimeoutError: processes were still listed at the deadline.
    """
    if os.getpid() != 1:
        return 0
    seen: set[int] = set()
    end = time.monotonic() + deadline_s
    while others := _other_pids():
        seen.update(others)
        if time.monotonic() > end:
            raise ActionTimeoutError(
                f"{len(others)} process(es) still listed {deadline_s:.0f} s into the kill",
                detail={"reason": "kill_incomplete", "pids": others[:20]},
            )
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.005)
    return len(seen)
