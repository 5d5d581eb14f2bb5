"""The daemon's workspace tools for code agents: confined files, exec, tests, diff.

Everything here executes; nothing decides. Risk levels, confirmation, retry
budgets and the "done means the tests pass" rule live in the controller
(:mod:`deskpod.controller.code_agent`).

Paths. Every path a request names goes through :func:`confine`: NUL bytes,
absolute paths outside the root, ``..`` escapes and symlinks that lead out are
refused with :class:`~deskpod.errors.PathDeniedError` (code ``path_denied``). The
resolved path is then opened one component at a time from a descriptor of the
root with ``O_NOFOLLOW`` (``openat`` style), so a symlink swapped in after the
check makes the operation fail instead of escaping. Files are written to a
temporary name in the same folder and renamed over the target. Only regular
files are read (a FIFO cannot block a read).

Processes. :func:`run_process` runs one argv (a shell string is passed as the
single argument of ``/bin/bash -c``; no command line is ever built by joining
strings) with stdin at EOF (``/dev/null``), in a new session and process group,
with a fixed minimal environment (:func:`exec_env`). The whole group gets
SIGKILL at the timeout, when the client disconnects, and as soon as the command
itself exits, so nothing it starts outlives it and no background child can keep
the output pipes (and the caller) waiting. A process that calls ``setsid`` leaves
the group; its pipes are abandoned after :data:`DRAIN_GRACE_S`, and the
workspace runner, PID 1 of the workspace container, kills it after the request
(:mod:`deskpod.agentd.runner`: ``kill(-1, SIGKILL)`` reaches every process of
its PID namespace, whatever it did to hide). Output is capped per stream with its
head and tail kept around an explicit marker (:class:`OutputCap`). Processes run
on worker threads, never on the event loop. When the process that runs them is
init, a :class:`ChildWaiter` reaps every child and hands each command's exit
status to :func:`run_process`.

Environment (:func:`exec_env`): ``PATH`` of the system folders only (not the
daemon's venv), ``HOME`` in a private folder outside the workspace (so tool
caches never show up in the diff), ``LANG``/``LC_ALL`` ``C.UTF-8``,
non-interactive settings for git, pagers, pip and apt, and a fixed git identity.
Nothing is inherited from the daemon: no ``DESKPOD_TOKEN``, no ``DISPLAY``, no
proxy variables unless a request asks for ``network`` (then the egress proxy's,
whose allowlist still applies; without them the sandbox has no route out).

Seeding. ``seed_workspace`` unpacks a gzip'd tar the host sends in the message:
regular files, folders and symlinks whose target stays inside; anything else
(hard links, devices, FIFOs, absolute or ``..`` names) fails the request before
the workspace is touched. Without a ``.git`` it becomes a git repository whose
first commit is the baseline ``workspace_diff`` compares against. The tools' own
git commands run through :func:`run_process` like an agent's, with hooks
and fsmonitor off, so a hostile ``.git/config`` gains nothing an ``exec`` does
not already have.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import collections
import ctypes
import errno
import functools
import io
import logging
import os
import posixpath
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import tarfile
import threading
import time
import typing
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import TypeIs

from deskpod.errors import PathDeniedError, WorkspaceError
from deskpod.protocol import (
    MAX_EXEC_OUTPUT_BYTES,
    MAX_SEED_ARCHIVE_BYTES,
    WORKSPACE_REQUEST_TYPES,
    ApplyPatchRequest,
    ChangedFile,
    DirEntry,
    DirListing,
    EditFileRequest,
    ExecOutput,
    ExecRequest,
    FileContent,
    FileWritten,
    ListDirRequest,
    PatchApplied,
    ReadFileRequest,
    RunTestsOutput,
    RunTestsRequest,
    SeedWorkspaceRequest,
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceOutput,
    WorkspaceRequest,
    WorkspaceSeeded,
    WriteFileRequest,
)

__all__ = [
    "Workspace",
    "OutputCap",
    "ProcessResult",
    "confine",
    "exec_env",
    "ChildWaiter",
    "kill_own_processes",
    "in_sandbox",
    "check_archive",
    "clear_folder",
    "open_dir",
    "write_at",
    "write_files",
    "run_process",
    "patch_paths",
    "is_workspace_request",
    "EXEC_PATH",
    "TRUNCATION_MARKER",
    "DRAIN_GRACE_S",
    "POLL_INTERVAL_S",
    "GIT_TIMEOUT_S",
    "MAX_SEED_FILES",
    "MAX_SEED_UNPACKED_BYTES",
    "MAX_EDIT_FILE_BYTES",
]

log = logging.getLogger(__name__)

EXEC_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of every exec: the system's folders, never the daemon's venv."""

TRUNCATION_MARKER = "\n[... deskpod: output truncated, {omitted} of {total} bytes omitted ...]\n"
"""Put between the head and the tail of capped output."""

DRAIN_GRACE_S = 1.0
"""Seconds to keep reading output after the process group was killed or the command ended."""

POLL_INTERVAL_S = 0.05
"""Seconds between checks for exit, timeout and cancellation while a process runs."""

GIT_TIMEOUT_S = 60.0
"""Deadline of each git command the daemon runs itself (seed, patch, diff), seconds."""

MAX_SEED_FILES = 20_000
"""Most members a seed archive may hold."""

MAX_SEED_UNPACKED_BYTES = 256 * 1_048_576
"""Largest total size of a seed archive's files once unpacked (256 MiB)."""

MAX_EDIT_FILE_BYTES = 16 * 1_048_576
"""Largest file ``edit_file`` works on (16 MiB)."""

_PR_SET_DUMPABLE = 4
_GIT_SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgsign=false"]
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WORKSPACE_TYPES = tuple(WORKSPACE_REQUEST_TYPES.values())


def is_workspace_request(request: object) -> TypeIs[WorkspaceRequest]:
    """Return whether ``request`` is one of the workspace requests (served by :class:`Workspace`)."""
    return isinstance(request, _WORKSPACE_TYPES)


# --------------------------------------------------------------------------- output and processes


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
    stdout: OutputCap
    stderr: OutputCap | None

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
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = proxy
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


def _set_oom_score_adj(value: int) -> None:
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
    stdout_cap: OutputCap,
    stderr_cap: OutputCap | None = None,
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
            preexec_fn=None if oom_score_adj is None else functools.partial(_set_oom_score_adj, oom_score_adj),
        )

    proc: subprocess.Popen[bytes] = start() if waiter is None else waiter.spawn(start)
    exited = _leader_exited if waiter is None else waiter.exited
    streams: dict[int, tuple[Any, OutputCap]] = {}
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


# --------------------------------------------------------------------------- paths


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _shown(path: str) -> str:
    return path[:256]


def confine(root: str, path: str) -> str:
    """Resolve ``path`` in the workspace ``root``, refusing anything that leads out.

    Symlinks are resolved (``os.path.realpath``); a component that does not exist
    yet is taken as written, so ``sub/../ok.txt`` is ``ok.txt`` even without ``sub``.

    Args:
        root: the workspace root, already resolved (no symlinks in it).
        path: relative to ``root``, or absolute inside it.

    Returns:
        The resolved path relative to ``root`` (POSIX separators); ``""`` for the root.

    Raises:
        PathDeniedError: ``path`` is empty or holds a NUL byte (``reason``
            ``"empty"``/``"nul_byte"``), lies outside ``root`` as written
            (``"outside_workspace"``), or a symlink takes it out (``"symlink_escape"``).
    """
    if "\x00" in path:
        raise PathDeniedError("path contains a NUL byte", detail={"path": _shown(path), "reason": "nul_byte"})
    if not path:
        raise PathDeniedError("path is empty", detail={"path": "", "reason": "empty"})
    joined = os.path.join(root, path)
    if not _inside(root, os.path.normpath(joined)):
        raise PathDeniedError(
            f"path {_shown(path)!r} is outside the workspace",
            detail={"path": _shown(path), "reason": "outside_workspace"},
        )
    real = os.path.realpath(joined)
    if not _inside(root, real):
        raise PathDeniedError(
            f"path {_shown(path)!r} leads outside the workspace through a symlink",
            detail={"path": _shown(path), "reason": "symlink_escape"},
        )
    rel = os.path.relpath(real, root)
    return "" if rel == "." else rel


def _os_error(exc: OSError, rel: str) -> WorkspaceError:
    shown = rel or "."
    if exc.errno == errno.ELOOP:
        return PathDeniedError(
            f"{shown!r}: a symlink appeared on the path while it was opened",
            detail={"path": shown, "reason": "symlink_escape"},
        )
    reasons = {
        errno.ENOENT: "not_found",
        errno.ENOTDIR: "not_a_dir",
        errno.EISDIR: "is_a_dir",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.ENOSPC: "no_space",
        errno.EDQUOT: "no_space",
        errno.ENAMETOOLONG: "name_too_long",
        errno.EEXIST: "exists",
    }
    reason = reasons.get(exc.errno or 0, "os_error")
    return WorkspaceError(f"{shown!r}: {exc.strerror or exc}", detail={"path": shown, "reason": reason})


def _parts(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p]


def open_dir(root: str, rel: str, *, create: bool = False) -> int:
    """Open folder ``rel`` under ``root`` one component at a time, never following a symlink."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in _parts(rel):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_files(root: str, files: Iterable[tuple[str, bytes]], mode: int) -> None:
    """Write each ``(relative path, bytes)`` under ``root`` with :func:`write_at`, making
    folders as needed and never following a symlink (:func:`open_dir`).

    Raises:
        OSError: a folder or file could not be made or written.
    """
    for rel, data in files:
        parent, name = posixpath.split(rel)
        dfd = open_dir(root, parent, create=True)
        try:
            write_at(dfd, name, data, mode)
        finally:
            os.close(dfd)


def write_at(dfd: int, name: str, data: bytes, mode: int | None) -> bool:
    """Replace ``name`` in the open folder ``dfd`` with ``data`` through a temporary file.

    Returns:
        Whether the file is new.
    """
    created = True
    keep_mode = 0o644 if mode is None else mode
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "is a symlink")
        created = False
        if mode is None:
            keep_mode = stat.S_IMODE(st.st_mode)
    tmp = f".{name[:200]}.deskpod-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), keep_mode)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    return created


def patch_paths(patch: str) -> list[str]:
    """Every file path a unified diff names, without its ``a/``/``b/`` prefix.

    Reads ``---`` lines followed by ``+++`` lines (``/dev/null`` skipped), ``rename``/``copy`` lines
    and ``diff --git`` headers; C-quoted names are unquoted.

    Raises:
        WorkspaceError: the text names no file (``reason`` ``"bad_patch"``).
    """
    found: list[str] = []

    def add(name: str, strip: bool) -> None:
        name = name.strip()
        if name.startswith('"') and name.endswith('"') and len(name) >= 2:
            raw = codecs.escape_decode(name[1:-1].encode("utf-8"))[0]
            name = bytes(raw).decode("utf-8", "replace")
        if name == "/dev/null" or not name:
            return
        if strip and "/" in name:
            name = name.split("/", 1)[1]
        if name not in found:
            found.append(name)

    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            add(line[4:].split("\t", 1)[0], strip=True)
            add(lines[i + 1][4:].split("\t", 1)[0], strip=True)
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            add(line.split(" ", 2)[2], strip=False)
        elif line.startswith("diff --git ") and '"' not in line:
            rest = line[len("diff --git ") :]
            if rest.startswith("a/") and " b/" in rest:
                left, right = rest.split(" b/", 1)
                add(left, strip=True)
                add("b/" + right, strip=True)
    if not found:
        raise WorkspaceError("the patch names no file (expected unified diff headers)", detail={"reason": "bad_patch"})
    return found


# --------------------------------------------------------------------------- the workspace


class Workspace:
    """The workspace tools of one sandbox.

    Args:
        root: the workspace folder (``/workspace`` in the workspace container).
        state_dir: a private folder outside the workspace for scratch files
            (patches, temporary git indexes) and, unless ``home`` is given, exec's
            ``HOME`` (``state_dir/exec-home``).
        proxy: the egress proxy URL given to commands that ask for ``network``.
        home: exec's ``HOME`` (the agent's home folder in the workspace container).
        waiter: collects exit statuses when the caller is init (see :func:`run_process`).
        oom_score_adj: every command's OOM score adjustment (1000 in the workspace
            container: an out-of-memory kill takes the command, not the runner).

    ``lock`` serializes workspace requests: one at a time per sandbox.
    """

    def __init__(
        self,
        root: str | Path,
        state_dir: str | Path,
        proxy: str | None = None,
        *,
        home: str | Path | None = None,
        waiter: ChildWaiter | None = None,
        oom_score_adj: int | None = None,
    ) -> None:
        self.root_path = Path(root)
        self.home = str(home) if home is not None else str(Path(state_dir) / "exec-home")
        self.scratch = str(Path(state_dir) / "workspace-scratch")
        self.proxy = proxy
        self.waiter = waiter
        self.oom_score_adj = oom_score_adj
        self.lock = asyncio.Lock()

    @property
    def root(self) -> str:
        """The workspace root, resolved.

        Raises:
            WorkspaceError: it does not exist (``reason`` ``"no_workspace"``).
        """
        root = os.path.realpath(self.root_path)
        if not os.path.isdir(root):
            raise WorkspaceError(f"the workspace {root} does not exist", detail={"reason": "no_workspace"})
        for folder in (self.home, self.scratch):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        return root

    async def handle(
        self, request: WorkspaceRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> WorkspaceOutput:
        """Carry out one workspace request on a worker thread.

        Args:
            request: a validated workspace request.
            cancel: set when the client goes away; kills a running command.
            env: variables added to the environment of an ``exec`` or ``run_tests``
                command (the display grant's ``DISPLAY`` and ``XAUTHORITY``).

        Returns:
            The request's output model.

        Raises:
            PathDeniedError: a path leads outside the workspace.
            WorkspaceError: the operation failed (``detail["reason"]`` says why).
        """
        started = time.perf_counter()
        output: WorkspaceOutput = await asyncio.to_thread(self._run, request, cancel, env)
        extra = f" exit={output.exit_code}" if isinstance(output, (ExecOutput, RunTestsOutput)) else ""
        log.info("request %s: %s%s (%.3f s)", request.id, request.type, extra, time.perf_counter() - started)
        return output

    def _run(
        self, request: WorkspaceRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> WorkspaceOutput:
        if isinstance(request, SeedWorkspaceRequest):
            return self.seed(request)
        if isinstance(request, ListDirRequest):
            return self.list_dir(request)
        if isinstance(request, ReadFileRequest):
            return self.read_file(request)
        if isinstance(request, WriteFileRequest):
            return self.write_file(request)
        if isinstance(request, EditFileRequest):
            return self.edit_file(request)
        if isinstance(request, ApplyPatchRequest):
            return self.apply_patch(request)
        if isinstance(request, ExecRequest):
            return self.exec(request, cancel, env)
        if isinstance(request, RunTestsRequest):
            return self.run_tests(request, cancel, env)
        return self.diff(request)

    # ---- files

    def _split(self, path: str) -> tuple[str, str, str]:
        rel = confine(self.root, path)
        if not rel:
            raise WorkspaceError(
                "the workspace root is a folder, not a file", detail={"path": ".", "reason": "is_a_dir"}
            )
        parent, name = posixpath.split(rel)
        return rel, parent, name

    def list_dir(self, request: ListDirRequest) -> DirListing:
        """List a folder (see :class:`~deskpod.protocol.ListDirRequest`)."""
        rel = confine(self.root, request.path)
        try:
            dfd = open_dir(self.root, rel)
        except OSError as exc:
            raise _os_error(exc, rel) from exc
        try:
            with os.scandir(dfd) as it:
                names = sorted(it, key=lambda e: e.name)
            entries = []
            for entry in names[: request.max_entries]:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    entries.append(
                        DirEntry(
                            name=entry.name, kind="symlink", size=st.st_size, target=os.readlink(entry.name, dir_fd=dfd)
                        )
                    )
                else:
                    kind: Any = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
                    entries.append(DirEntry(name=entry.name, kind=kind, size=st.st_size))
        except OSError as exc:
            raise _os_error(exc, rel) from exc
        finally:
            os.close(dfd)
        return DirListing(path=rel or ".", entries=entries, truncated=len(names) > request.max_entries)

    def _open_regular(self, parent: str, name: str, rel: str) -> int:
        dfd = open_dir(self.root, parent)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WorkspaceError(f"{rel!r} is not a regular file", detail={"path": rel, "reason": "not_a_file"})
        return fd

    def _open_existing(self, path: str) -> tuple[str, str, str, int]:
        """Confine ``path`` and open the regular file there.

        Returns:
            ``(rel, parent, name, fd)`` as :meth:`_split` gives them, plus a read-only
            descriptor. Errors become :class:`WorkspaceError`.
        """
        rel, parent, name = self._split(path)
        try:
            return rel, parent, name, self._open_regular(parent, name, rel)
        except OSError as exc:
            raise _os_error(exc, rel) from exc

    def read_file(self, request: ReadFileRequest) -> FileContent:
        """Read lines of a file (see :class:`~deskpod.protocol.ReadFileRequest`)."""
        rel, _, _, fd = self._open_existing(request.path)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for _ in range(request.start_line - 1):
                if not _skip_line(f):
                    break
            chunks: list[bytes] = []
            used = 0
            lines = 0
            truncated = False
            while request.max_lines is None or lines < request.max_lines:
                line = f.readline(request.max_bytes - used + 1)
                if not line:
                    break
                if used + len(line) > request.max_bytes:
                    if not chunks:  # one line longer than the cap: return its start
                        chunks.append(line[: request.max_bytes])
                        lines = 1
                    truncated = True
                    break
                chunks.append(line)
                used += len(line)
                lines += 1
            if not truncated:
                truncated = bool(f.read(1))
        data = b"".join(chunks)
        try:
            content = data.decode("utf-8")
            replaced = False
        except UnicodeDecodeError:
            content = data.decode("utf-8", "replace")
            replaced = True
        return FileContent(
            path=rel,
            content=content,
            size=size,
            start_line=request.start_line,
            end_line=request.start_line + lines - 1,
            truncated=truncated,
            replaced_invalid_utf8=replaced,
        )

    def _write(self, rel: str, parent: str, name: str, data: bytes, create_dirs: bool) -> bool:
        try:
            dfd = open_dir(self.root, parent, create=create_dirs)
            try:
                return write_at(dfd, name, data, None)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise _os_error(exc, rel) from exc

    def write_file(self, request: WriteFileRequest) -> FileWritten:
        """Create or replace a file (see :class:`~deskpod.protocol.WriteFileRequest`)."""
        rel, parent, name = self._split(request.path)
        data = _utf8(request.content, rel)
        created = self._write(rel, parent, name, data, request.create_dirs)
        return FileWritten(path=rel, size=len(data), created=created)

    def edit_file(self, request: EditFileRequest) -> FileWritten:
        """Replace one exact occurrence of text (see :class:`~deskpod.protocol.EditFileRequest`)."""
        rel, parent, name, fd = self._open_existing(request.path)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_EDIT_FILE_BYTES + 1)
        if len(raw) > MAX_EDIT_FILE_BYTES:
            raise WorkspaceError(
                f"{rel!r} is larger than {MAX_EDIT_FILE_BYTES} bytes", detail={"path": rel, "reason": "too_large"}
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(f"{rel!r} is not UTF-8 text", detail={"path": rel, "reason": "not_utf8"}) from exc
        count = text.count(request.old_text)
        if count != 1:
            reason = "no_match" if count == 0 else "ambiguous"
            raise WorkspaceError(
                f"old_text occurs {count} times in {rel!r}; it must occur exactly once",
                detail={"path": rel, "reason": reason, "count": count},
            )
        data = _utf8(text.replace(request.old_text, request.new_text, 1), rel)
        self._write(rel, parent, name, data, False)
        return FileWritten(path=rel, size=len(data), created=False)

    # ---- processes

    def _cwd(self, path: str) -> str:
        rel = confine(self.root, path)
        real = os.path.join(self.root, rel) if rel else self.root
        if not os.path.isdir(real):
            raise WorkspaceError(f"cwd {rel!r} is not a folder", detail={"path": rel, "reason": "not_a_dir"})
        return real

    def _spawn(
        self,
        argv: list[str],
        cwd: str,
        timeout_s: float,
        stdout_cap: OutputCap,
        stderr_cap: OutputCap | None,
        cancel: threading.Event | None,
        network: bool = False,
        extra_env: dict[str, str] | None = None,
    ) -> ProcessResult | OSError:
        env = exec_env(self.home, self.proxy if network else None)
        env.update(extra_env or {})
        try:
            return run_process(
                argv, cwd=cwd, env=env, timeout_s=timeout_s, stdout_cap=stdout_cap, stderr_cap=stderr_cap,
                cancel=cancel, waiter=self.waiter, oom_score_adj=self.oom_score_adj,
            )
        except OSError as exc:
            return exc

    def exec(self, request: ExecRequest, cancel: threading.Event, env: dict[str, str] | None = None) -> ExecOutput:
        """Run a command (see :class:`~deskpod.protocol.ExecRequest`); ``env`` is added to its environment."""
        argv = list(request.argv) if request.argv is not None else ["/bin/bash", "-c", str(request.cmd)]
        cwd = self._cwd(request.cwd)
        out, err = OutputCap.split(request.max_output_bytes), OutputCap.split(request.max_output_bytes)
        result = self._spawn(argv, cwd, request.timeout_s, out, err, cancel, network=request.network, extra_env=env)
        if isinstance(result, OSError):
            return _not_started(argv[0], result)
        return ExecOutput(
            exit_code=result.exit_code,
            signal=result.signal,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            stdout=out.text(),
            stderr=err.text(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            truncated=out.truncated or err.truncated,
        )

    def run_tests(
        self, request: RunTestsRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> RunTestsOutput:
        """Run the test command (see :class:`~deskpod.protocol.RunTestsRequest`); ``env`` is added to its environment."""
        cwd = self._cwd(request.cwd)
        out = OutputCap(0, request.tail_bytes)
        result = self._spawn(list(request.argv), cwd, request.timeout_s, out, None, cancel, extra_env=env)
        if isinstance(result, OSError):
            failed = _not_started(request.argv[0], result)
            return RunTestsOutput(
                passed=False, exit_code=failed.exit_code, duration_s=0.0, tail=failed.stderr, output_bytes=0
            )
        return RunTestsOutput(
            passed=result.returncode == 0 and not result.timed_out,
            exit_code=result.exit_code,
            signal=result.signal,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            tail=out.text(),
            output_bytes=out.total,
        )

    # ---- git

    def _git(
        self, *args: str, extra_env: dict[str, str] | None = None, out_bytes: int = 1_048_576
    ) -> tuple[int, str, str]:
        out, err = OutputCap(out_bytes, 0), OutputCap(4096, 4096)
        # GIT_NO_REPLACE_OBJECTS: an agent's `git replace` must not change what the
        # daemon's diffs compare against.
        env = {"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root), "GIT_NO_REPLACE_OBJECTS": "1", **(extra_env or {})}
        result = self._spawn(["git", *_GIT_SAFE, *args], self.root, GIT_TIMEOUT_S, out, err, None, extra_env=env)
        if isinstance(result, OSError):
            raise WorkspaceError(f"git cannot run: {result.strerror}", detail={"reason": "git_failed"})
        if result.timed_out:
            raise WorkspaceError(f"git {args[0]} timed out", detail={"reason": "git_failed"})
        return result.returncode, out.text(), err.text()

    def _git_ok(self, *args: str, extra_env: dict[str, str] | None = None, out_bytes: int = 1_048_576) -> str:
        code, out, err = self._git(*args, extra_env=extra_env, out_bytes=out_bytes)
        if code != 0:
            raise WorkspaceError(f"git {args[0]} failed: {err.strip()[-500:]}", detail={"reason": "git_failed"})
        return out

    def _is_repo(self) -> bool:
        return os.path.lexists(os.path.join(self.root, ".git"))

    def apply_patch(self, request: ApplyPatchRequest) -> PatchApplied:
        """Check a unified diff's paths, then apply it with ``git apply``.

        See :class:`~deskpod.protocol.ApplyPatchRequest`.
        """
        root = self.root
        files = [confine(root, p) or "." for p in patch_paths(request.patch)]
        patch_file = os.path.join(self.scratch, f"patch-{secrets.token_hex(6)}.diff")
        with open(patch_file, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(request.patch)
        try:
            code, out, err = self._git("apply", "--recount", "--whitespace=nowarn", "--verbose", "--", patch_file)
        finally:
            os.unlink(patch_file)
        if code != 0:
            raise WorkspaceError(
                f"the patch does not apply: {err.strip()[-1500:]}", detail={"reason": "patch_failed", "files": files}
            )
        return PatchApplied(files=files, output=(out + err).strip()[-4000:])

    def diff(self, request: WorkspaceDiffRequest) -> WorkspaceDiff:
        """Diff the workspace, new files included, against a commit.

        See :class:`~deskpod.protocol.WorkspaceDiffRequest`.
        """
        if not self._is_repo():
            raise WorkspaceError("the workspace is not a git repository", detail={"reason": "not_a_git_repo"})
        code, out, _ = self._git("rev-parse", "--verify", "--quiet", f"{request.base or 'HEAD'}^{{commit}}")
        if code != 0:
            raise WorkspaceError(f"no commit {request.base or 'HEAD'!r}", detail={"reason": "bad_base"})
        base = out.strip()
        index = os.path.join(self.scratch, f"index-{secrets.token_hex(6)}")
        env = {"GIT_INDEX_FILE": index}
        try:
            self._git_ok("read-tree", base, extra_env=env)
            self._git_ok("add", "-A", extra_env=env)
            names = self._git_ok(
                "diff", "--cached", "--name-status", "-z", "-M", base, extra_env=env, out_bytes=MAX_EXEC_OUTPUT_BYTES
            )
            cap = OutputCap(request.max_bytes, 0)
            result = self._spawn(
                ["git", *_GIT_SAFE, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base],
                self.root,
                GIT_TIMEOUT_S,
                cap,
                OutputCap(0, 2048),
                None,
                extra_env={"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root), **env},
            )
            if isinstance(result, OSError) or result.returncode != 0:
                raise WorkspaceError("git diff failed", detail={"reason": "git_failed"})
        finally:
            if os.path.exists(index):
                os.unlink(index)
        return WorkspaceDiff(
            base=base, files=_name_status(names), diff=cap.text(), diff_bytes=cap.total, truncated=cap.truncated
        )

    # ---- seeding

    def seed(self, request: SeedWorkspaceRequest) -> WorkspaceSeeded:
        """Reset and unpack the workspace (see :class:`~deskpod.protocol.SeedWorkspaceRequest`)."""
        root = self.root
        members: list[tuple[tarfile.TarInfo, str]] = []
        tar: tarfile.TarFile | None = None
        if request.archive is not None:
            tar, members = _open_archive(request.archive)
        try:
            if request.clear:
                clear_folder(root)
                clear_folder(self.home)
            files = size = 0
            for member, name in members:
                parent, base = posixpath.split(name)
                try:
                    if member.isdir():
                        os.close(open_dir(root, name, create=True))
                        continue
                    dfd = open_dir(root, parent, create=True)
                    try:
                        if member.issym():
                            os.symlink(member.linkname, base, dir_fd=dfd)
                            continue
                        assert tar is not None
                        source = tar.extractfile(member)
                        data = source.read() if source is not None else b""
                        write_at(dfd, base, data, 0o755 if member.mode & 0o111 else 0o644)
                        files += 1
                        size += len(data)
                    finally:
                        os.close(dfd)
                except OSError as exc:
                    raise WorkspaceError(
                        f"cannot unpack {name!r}: {exc.strerror or exc}", detail={"path": name, "reason": "bad_archive"}
                    ) from exc
        finally:
            if tar is not None:
                tar.close()
        head = None
        if self._is_repo():
            code, out, _ = self._git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
            head = out.strip() if code == 0 else None
        elif request.git_init:
            self._git_ok("init", "-q")
            self._git_ok("add", "-A")
            self._git_ok("commit", "-q", "--no-verify", "--allow-empty", "-m", "deskpod: workspace seed")
            head = self._git_ok("rev-parse", "HEAD").strip()
        return WorkspaceSeeded(files=files, size=size, git_head=head)


def _skip_line(f: Any) -> bool:
    """Read past one line in bounded chunks; return whether there was one."""
    while True:
        part = f.readline(1_048_576)
        if not part:
            return False
        if part.endswith(b"\n"):
            return True


def _utf8(text: str, rel: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(
            f"content for {rel!r} is not encodable as UTF-8", detail={"path": rel, "reason": "not_utf8"}
        ) from exc


def _not_started(program: str, exc: OSError) -> ExecOutput:
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    message = f"deskpod: cannot run {program[:200]!r}: {exc.strerror or exc}\n"
    return ExecOutput(
        exit_code=code, duration_s=0.0, stdout="", stderr=message, stdout_bytes=0, stderr_bytes=len(message)
    )


_STATUS = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "C": "copied", "T": "type_changed"}


def _name_status(text: str) -> list[ChangedFile]:
    tokens = text.split("\0")
    files: list[ChangedFile] = []
    i = 0
    while i + 1 < len(tokens) and tokens[i]:
        code = tokens[i]
        status: Any = _STATUS.get(code[0], "other")
        if code[0] in "RC" and i + 2 < len(tokens):
            files.append(ChangedFile(path=tokens[i + 2], status=status, old_path=tokens[i + 1]))
            i += 3
        else:
            files.append(ChangedFile(path=tokens[i + 1], status=status))
            i += 2
    return files


def clear_folder(folder: str, keep: frozenset[str] = frozenset()) -> None:
    """Remove everything inside ``folder`` without following symlinks.

    Args:
        folder: the folder to empty (nothing happens when it does not exist).
        keep: names of entries directly inside it to leave alone.

    Raises:
        OSError: an entry could not be removed.
    """
    if not os.path.isdir(folder):
        return
    for entry in os.scandir(folder):
        if entry.name in keep:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _bad_archive(message: str, **detail: Any) -> WorkspaceError:
    return WorkspaceError(message, detail={"reason": "bad_archive", **detail})


def _open_archive(encoded: str) -> tuple[tarfile.TarFile, list[tuple[tarfile.TarInfo, str]]]:
    """Decode and check a seed archive in full before anything is written.

    Returns:
        The open tar and its members with their normalized names, in archive order.

    Raises:
        WorkspaceError: bad base64 or gzip/tar data, too large, too many members, a
            member of an unsupported kind, or a name or symlink target leading out
            (``reason`` ``"bad_archive"`` or ``"too_large"``).
    """
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad_archive("the seed archive is not valid base64") from exc
    if len(data) > MAX_SEED_ARCHIVE_BYTES:
        raise WorkspaceError(
            f"the seed archive exceeds {MAX_SEED_ARCHIVE_BYTES} bytes",
            detail={"reason": "too_large", "bytes": len(data)},
        )
    return check_archive(data)


def check_archive(
    data: bytes, *, allow_symlinks: bool = True
) -> tuple[tarfile.TarFile, list[tuple[tarfile.TarInfo, str]]]:
    """Open a gzip'd tar and check every member before anything is unpacked.

    Shared by workspace seeds and browser snapshots. Refused: more than
    :data:`MAX_SEED_FILES` members, more than :data:`MAX_SEED_UNPACKED_BYTES`
    unpacked, absolute names, ``..`` escapes, NUL bytes, hard links, devices,
    FIFOs, and symlinks (all of them unless ``allow_symlinks``; otherwise those
    whose target leads out of the archive's root).

    Args:
        data: the archive's bytes.
        allow_symlinks: accept symlinks that stay inside.

    Returns:
        The open tar (the caller closes it) and its members with their normalized
        names, in archive order (``.`` left out).

    Raises:
        WorkspaceError: ``reason`` ``"bad_archive"`` or ``"too_large"``.
    """
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        infos = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _bad_archive(f"the archive is not a gzip'd tar: {exc}") from exc
    try:
        if len(infos) > MAX_SEED_FILES:
            raise _bad_archive(f"the archive holds more than {MAX_SEED_FILES} members")
        if sum(m.size for m in infos if m.isreg()) > MAX_SEED_UNPACKED_BYTES:
            raise WorkspaceError(
                f"the archive unpacks to more than {MAX_SEED_UNPACKED_BYTES} bytes", detail={"reason": "too_large"}
            )
        members = []
        for info in infos:
            name = posixpath.normpath(info.name)
            if name == ".":
                continue
            if "\x00" in name or name.startswith("/") or name == ".." or name.startswith("../"):
                raise _bad_archive(
                    f"archive member {info.name[:256]!r} lies outside the archive's root", path=info.name[:256]
                )
            if info.issym() and allow_symlinks:
                target = posixpath.normpath(posixpath.join(posixpath.dirname(name), info.linkname))
                if info.linkname.startswith("/") or target == ".." or target.startswith("../"):
                    raise _bad_archive(
                        f"symlink {name[:256]!r} points outside the archive's root ({info.linkname[:256]!r})",
                        path=name[:256],
                    )
            elif not (info.isreg() or info.isdir()):
                kinds = "a file, a folder nor a symlink" if allow_symlinks else "a file nor a folder"
                raise _bad_archive(f"archive member {name[:256]!r} is neither {kinds}", path=name[:256])
            members.append((info, name))
        return tar, members
    except BaseException:
        tar.close()
        raise
