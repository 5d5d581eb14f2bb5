"""Running one command in the workspace: argv in, capped output and exit status out.

:func:`run_process` runs one argv (a shell string is passed as the single
argument of ``/bin/bash -c``; no command line is ever built by joining strings)
with stdin at EOF (``/dev/null``), in a new session and process group, with a
fixed minimal environment (:func:`exec_env`). The whole group gets SIGKILL at
the timeout, when the client disconnects, and as soon as the command itself
exits, so nothing it starts outlives it and no background child can keep the
output pipes (and the caller) waiting. A process that calls ``setsid`` leaves
the group; its pipes are abandoned after :data:`DRAIN_GRACE_S`, and the
workspace runner, PID 1 of the workspace container, kills it after the request
(:mod:`deskpod.agentd.runner`: ``kill(-1, SIGKILL)`` reaches every process of
its PID namespace, whatever it did to hide). Output is capped per stream with
its head and tail kept around an explicit marker (:class:`OutputCap` for the
daemon's own git output; :class:`~deskpod.agentd.workspace.output.StreamCap`, which also
caps lines and escapes control bytes, for what a model reads).
Processes run on worker threads, never on the event loop. When the process that
runs them is init, a :class:`ChildWaiter` reaps every child and hands each
command's exit status to :func:`run_process`.

Environment (:func:`exec_env`): ``PATH`` of the system folders only (not the
daemon's venv), ``HOME`` in a private folder outside the workspace (so tool
caches never show up in the diff), ``LANG``/``LC_ALL`` ``C.UTF-8``,
non-interactive settings for git, pagers, pip and apt, and a fixed git identity.
Nothing is inherited from the daemon: no ``DESKPOD_TOKEN``, no ``DISPLAY``, no
proxy variables unless a request asks for ``network`` (then the egress proxy's,
whose allowlist still applies; without them the sandbox has no route out).

Reset (:func:`kill_own_processes`): inside the sandbox (:func:`in_sandbox`),
agentd kills every other process of its user.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import selectors
import signal
import subprocess
import threading
import time
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from deskpod.agentd.workspace.output import ByteSink

__all__ = [
    "ChildWaiter",
    "DRAIN_GRACE_S",
    "EXEC_PATH",
    "OutputCap",
    "POLL_INTERVAL_S",
    "ProcessResult",
    "TRUNCATION_MARKER",
    "exec_env",
    "in_sandbox",
    "kill_own_processes",
    "proxy_env",
    "run_process",
]

EXEC_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of every exec: the system's folders, never the daemon's venv."""

TRUNCATION_MARKER = "\n[... deskpod: output truncated, {omitted} of {total} bytes omitted ...]\n"
"""Put between the head and the tail of capped output."""

DRAIN_GRACE_S = 1.0
"""Seconds to keep reading output after the process group was killed or the command ended."""

POLL_INTERVAL_S = 0.05
"""Seconds between checks for exit, timeout and cancellation while a process runs."""
_PR_SET_DUMPABLE = 4


class OutputCap:
    """Keeps the first ``head_bytes`` and the last ``tail_bytes`` of a byte stream.

    Memory stays bounded by about ``head_bytes + tail_bytes`` plus one chunk, however
    much is fed.

    Args:
        head_bytes: bytes kept from the start (0: none).
        tail_bytes: bytes kept from the end (0: none).
    """

    def __init__(self, head_bytes: int, tail_bytes: int) -> None:
        self.head_bytes = max(0, head_bytes)
        self.tail_bytes = max(0, tail_bytes)
        self.total = 0
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0

    @classmethod
    def split(cls, limit_bytes: int) -> OutputCap:
        """A cap of ``limit_bytes`` in all, half head and half tail."""
        return cls(limit_bytes // 2, limit_bytes - limit_bytes // 2)

    def feed(self, data: bytes) -> None:
        """Account for one chunk of output."""
        self.total += len(data)
        room = self.head_bytes - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or not self.tail_bytes:
            return
        self._tail.append(bytes(data))
        self._tail_len += len(data)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_bytes:
            self._tail_len -= len(self._tail.popleft())

    def _tail_bytes(self) -> bytes:
        joined = b"".join(self._tail)
        return joined[-self.tail_bytes :] if self.tail_bytes else b""

    @property
    def truncated(self) -> bool:
        """Whether some of the output was dropped."""
        return self.total > len(self._head) + min(self._tail_len, self.tail_bytes)

    def text(self) -> str:
        """The kept output as UTF-8 text (invalid bytes replaced), with the marker where bytes were dropped."""
        head = self._head.decode("utf-8", "replace")
        tail = self._tail_bytes()
        if not self.truncated:
            return head + tail.decode("utf-8", "replace")
        omitted = self.total - len(self._head) - len(tail)
        return head + TRUNCATION_MARKER.format(omitted=omitted, total=self.total) + tail.decode("utf-8", "replace")


@dataclass
class ProcessResult:
    """How :func:`run_process` ended.

    ``returncode``: as :attr:`subprocess.Popen.returncode` (negative: killed by that
    signal). ``duration_s``: wall time, seconds. ``stderr`` is ``None`` when it was
    merged into ``stdout``.
    """

    returncode: int
    timed_out: bool
    cancelled: bool
    duration_s: float
    stdout: ByteSink
    stderr: ByteSink | None

    @property
    def exit_code(self) -> int | None:
        """The exit status, ``None`` when a signal ended the process."""
        return self.returncode if self.returncode >= 0 else None

    @property
    def signal(self) -> int | None:
        """The signal that ended the process, if one did."""
        return -self.returncode if self.returncode < 0 else None


def exec_env(home: str, proxy: str | None = None) -> dict[str, str]:
    """The complete environment of a command run in the workspace.

    Args:
        home: ``HOME`` (a private folder outside the workspace).
        proxy: the egress proxy URL to expose as ``HTTP(S)_PROXY``; ``None``: no proxy
            variables at all.

    Returns:
        A new dict; nothing in it comes from the daemon's own environment.
    """
    env = {
        "PATH": EXEC_PATH,
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "deskpod agent",
        "GIT_AUTHOR_EMAIL": "agent@deskpod.invalid",
        "GIT_COMMITTER_NAME": "deskpod agent",
        "GIT_COMMITTER_EMAIL": "agent@deskpod.invalid",
        "DEBIAN_FRONTEND": "noninteractive",
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        # No user site: a usercustomize module in HOME must not run inside the
        # controller's own test runs.
        "PYTHONNOUSERSITE": "1",
    }
    if proxy:
        env.update(proxy_env(proxy))
    return env


def proxy_env(proxy: str) -> dict[str, str]:
    """The proxy variables of a command that may use the egress proxy at ``proxy``
    (a URL, with the command's egress grant as its credential in the workspace container)."""
    env = {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
    return env


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def in_sandbox() -> bool:
    """True inside the sandbox container: this process is init's direct child and not root.

    Only then may the daemon kill every process of its user (:func:`kill_own_processes`)
    or wipe its writable folders; elsewhere (a developer's machine) those would hit
    the user's own session.
    """
    return os.getppid() == 1 and os.getuid() != 0


def _own_processes() -> list[int]:
    """The pid of every other process of this user, init excluded (whether or not
    its executable can be read: a non-dumpable process hides nothing here)."""
    me, uid = os.getpid(), os.getuid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, 1):
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if status.get("Uid", "").split()[:1] == [str(uid)]:
            found.append(int(entry))
    return found


def kill_own_processes(keep: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every process of the daemon's user except the daemon, init and ``keep``.

    Used by agentd's reset: the browser and its helpers, the window manager and
    anything they started all go (agent commands run in the workspace container,
    whose runner kills its own). The daemon runs as a
    non-root user with no capabilities, so it can signal only its own user's
    processes, which inside the sandbox are all of them but init. Outside the
    sandbox (:func:`in_sandbox` false) this does nothing.

    Args:
        keep: pids to spare (the X server, when the display stays up).

    Returns:
        The pids signalled.
    """
    if not in_sandbox():
        return []
    return _sigkill(pid for pid in _own_processes() if pid not in keep)


def _sigkill(pids: Iterable[int]) -> list[int]:
    """SIGKILL each of ``pids``; return those signalled (gone ones are skipped)."""
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


class ChildWaiter(typing.Protocol):
    """Collects exit statuses for :func:`run_process` when its caller is init and a
    reaper thread ``waitpid(-1)``s every child (see :mod:`deskpod.agentd.runner`)."""

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """Start a child with ``start()`` while no status is being collected."""

    def exited(self, pid: int) -> bool:
        """Whether child ``pid`` has exited (its status is held for :meth:`wait`)."""

    def wait(self, pid: int) -> int:
        """Block until child ``pid`` has exited; return its status as
        :attr:`subprocess.Popen.returncode` gives it (negative: the signal)."""


def set_oom_score_adj(value: int) -> None:
    """In the child between fork and exec: make it the OOM killer's first choice.

    A child of a non-dumpable parent is non-dumpable until it execs, and its
    ``/proc/self`` files then belong to root; it becomes dumpable first (its memory
    is a copy of the runner's, which holds no secret; exec makes it dumpable anyway).
    """
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _leader_exited(pid: int) -> bool:
    # WNOWAIT leaves the zombie in place, so its pid (the group's id) cannot be
    # reused before the group is killed and the zombie reaped.
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    stdout_cap: ByteSink,
    stderr_cap: ByteSink | None = None,
    cancel: threading.Event | None = None,
    waiter: ChildWaiter | None = None,
    oom_score_adj: int | None = None,
) -> ProcessResult:
    """Run ``argv`` to completion or its timeout, blocking the calling thread.

    Args:
        argv: the program and its arguments (no shell is involved unless argv names one).
        cwd: the working folder.
        env: the complete environment (see :func:`exec_env`).
        timeout_s: seconds until the whole process group is killed.
        stdout_cap: collects stdout (and stderr when ``stderr_cap`` is ``None``).
        stderr_cap: collects stderr separately.
        cancel: when set, the process group is killed at once.
        waiter: collects the exit status when this process is init and reaps every
            child itself; ``None``: ``waitid``/``waitpid`` on the child.
        oom_score_adj: written to the child's ``/proc/self/oom_score_adj`` before it
            runs (raising it needs no privilege); ``None``: inherited.

    Returns:
        The :class:`ProcessResult`.

    Raises:
        OSError: the program could not be started (missing, not executable, bad cwd).
    """
    started = time.monotonic()
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # argv as given, never a command line joined from strings
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr_cap is not None else subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=None if oom_score_adj is None else functools.partial(set_oom_score_adj, oom_score_adj),
        )

    proc: subprocess.Popen[bytes] = start() if waiter is None else waiter.spawn(start)
    exited = _leader_exited if waiter is None else waiter.exited
    streams: dict[int, tuple[Any, ByteSink]] = {}
    assert proc.stdout is not None
    streams[proc.stdout.fileno()] = (proc.stdout, stdout_cap)
    if stderr_cap is not None:
        assert proc.stderr is not None
        streams[proc.stderr.fileno()] = (proc.stderr, stderr_cap)
    timed_out = cancelled = False
    stop_at: float | None = None
    deadline = started + timeout_s
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if stop_at is None:
                    if exited(proc.pid):
                        _kill_group(proc.pid)
                        stop_at = now + DRAIN_GRACE_S
                    elif cancel is not None and cancel.is_set():
                        cancelled = True
                        _kill_group(proc.pid)
                        stop_at = now + DRAIN_GRACE_S
                    elif now >= deadline:
                        timed_out = True
                        _kill_group(proc.pid)
                        stop_at = now + DRAIN_GRACE_S
                elif not sel.get_map() or now >= stop_at:
                    break
                if not sel.get_map():
                    time.sleep(POLL_INTERVAL_S)
                    continue
                for key, _ in sel.select(POLL_INTERVAL_S):
                    data = os.read(key.fd, 65_536)
                    if data:
                        streams[key.fd][1].feed(data)
                    else:
                        sel.unregister(key.fd)
        finally:
            _kill_group(proc.pid)
            for pipe, _cap in streams.values():
                pipe.close()
            if waiter is None:
                returncode = proc.wait()
            else:
                returncode = proc.returncode = waiter.wait(proc.pid)
    return ProcessResult(
        returncode=returncode,
        timed_out=timed_out,
        cancelled=cancelled,
        duration_s=round(time.monotonic() - started, 6),
        stdout=stdout_cap,
        stderr=stderr_cap,
    )
