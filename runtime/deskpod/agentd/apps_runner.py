"""The applications runner: PID 1 of the desktop applications' zone.

``python -m deskpod.agentd.apps_runner`` (the ``desktop`` service's entrypoint, compose
profile ``desktop``). It starts the desktop applications an agent opens
(:class:`~deskpod.protocol.OpenApp`), reads their native controls through a reader process
(:mod:`~deskpod.agentd.atspi_reader`), reads or owns the zone's clipboard through a helper
(:mod:`~deskpod.agentd.zone_clipboard`) and clears the zone on a reset, answering agentd over
:mod:`~deskpod.agentd.apps_wire` on TCP :data:`~deskpod.agentd.apps_wire.APPS_PORT`. It holds
no secret: no token, and no X cookie but the ones agentd sent with each application or helper
it started.

Why a zone of its own (SECURITY.md, "Trust zones"): what an agent reaches through an
application (a terminal runs anything) must run where agent code runs, never as the
browser's or the daemon's uid. The zone is a container of its own (its own PID, IPC and
network namespaces), the workspace's uid 1001 with ``/workspace`` shared (so the workspace
runner can empty at a reset whatever the applications made there, whatever its mode), no
proxy variables (the proxy refuses every client of the sandbox network but Chromium
without an egress grant), its own D-Bus session bus (:data:`BUS_ARGV`), and the X server
reached only through the daemon's X gate with an untrusted cookie per application (no
reading other clients' windows, no synthetic input, no grabs:
:mod:`deskpod.agentd.display.xgate`).

Unlike the workspace runner it does not kill its processes after each request: the
applications live across steps, until a reset kills every other process of the namespace
(:func:`~deskpod.agentd.workspace.pid1.kill_namespace`) and empties the zone's home,
``/tmp`` and ``/dev/shm`` (``/workspace`` is the workspace runner's to empty, after this
reset: agentd resets this zone first). The runner
is non-dumpable and ignores signals from inside its namespace, as the workspace runner is.
Applications start from :data:`APPS_ARGV` by name: no part of a request becomes a command
line but a workspace file's path, one argument of its own, for the editor alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from deskpod.agentd import atspi_reader
from deskpod.agentd.apps_wire import (
    APPS_PORT,
    AppsAccessible,
    AppsAccessibleRequest,
    AppsClipboard,
    AppsClipboardRequest,
    AppsOpened,
    AppsOpenRequest,
    AppsReplyModel,
    AppsRestored,
    AppsRestoreRequest,
    AppsSnapshot,
    AppsSnapshotRequest,
    parse_apps_request,
)
from deskpod.agentd.runner import (
    clear_zone,
    drop_working_folder_from_path,
    error_reply,
    peer_of,
    read_request_frame,
    serve_until_stopped,
    xauthority_entry,
)
from deskpod.agentd.runner_wire import (
    RunnerError,
    RunnerPingRequest,
    RunnerPong,
    RunnerResetDone,
    X11Grant,
    encode_frame,
)
from deskpod.agentd.workspace.pid1 import ChildReaper, kill_namespace, make_non_dumpable
from deskpod.agentd.workspace.process import EXEC_PATH, set_oom_score_adj
from deskpod.agentd.zone_home import pack_home, restore_home
from deskpod.errors import DeskpodError, ExecutionError, InternalError, InvalidRequestError
from deskpod.protocol import first_error
from deskpod.settings import load_settings

__all__ = ["APPS_ARGV", "APP_OOM_SCORE_ADJ", "AppsConfig", "AppsRunner", "BUS_ARGV", "CLIPBOARD_ARGV", "FILE_APPS",
           "MAX_READER_BYTES", "READER_ARGV", "READER_TIMEOUT_S", "main"]

log = logging.getLogger(__name__)

Request = TypeVar("Request", AppsOpenRequest, AppsAccessibleRequest, AppsClipboardRequest, AppsSnapshotRequest,
                  AppsRestoreRequest)
Reply = TypeVar("Reply", bound=BaseModel)
Answer = TypeVar("Answer", AppsAccessible, AppsClipboard)

APPS_ARGV: Final[Mapping[str, tuple[str, ...]]] = {
    "terminal": ("xterm", "-fa", "DejaVu Sans Mono", "-fs", "11", "-title", "Terminal"),
    "editor": ("mousepad",),
    "file_manager": ("thunar",),
    "document": ("abiword",),
    "spreadsheet": ("gnumeric",),
    "pdf_viewer": ("zathura",),
    "image_viewer": ("ristretto",),
}
"""The command line of each application of :data:`~deskpod.protocol.APPS` (Debian's
packages: ``xterm``, ``mousepad``, ``thunar``, ``abiword``, ``gnumeric``, ``zathura`` with
``zathura-pdf-poppler``, ``ristretto``); for those of :data:`FILE_APPS` a request's workspace
file is appended as an absolute path, which never starts with ``-``."""

FILE_APPS: Final = frozenset({"editor", "file_manager", "document", "spreadsheet", "pdf_viewer", "image_viewer"})
"""The applications that open a request's workspace file. Not the terminal: xterm runs a
trailing argument as its program, so a path naming a symlink in ``/workspace`` (which is
``noexec``, but a link to any program of the image is not) would start that program."""

BUS_ARGV: Final = ("dbus-daemon", "--session", "--nofork", "--nopidfile", "--nosyslog")
"""The zone's own D-Bus session bus (its address added at start): the applications'
accessibility and single-instance messages stay in the zone."""

READER_ARGV: Final = ("/usr/bin/python3", "-I", atspi_reader.__file__)
"""The accessibility reader (:mod:`deskpod.agentd.atspi_reader`), one process per question, on
Debian's interpreter (``pyatspi`` is a Debian package the package's venv does not see)."""

CLIPBOARD_ARGV: Final = (sys.executable, "-m", "deskpod.agentd.zone_clipboard")
"""The zone's clipboard helper (:mod:`deskpod.agentd.zone_clipboard`, on the runner's own
interpreter: the applications' ``PATH`` does not hold the package's venv), then ``read`` or ``own``."""

READER_TIMEOUT_S: Final = 3.0
"""How long one accessibility question may take, seconds, before its reader is killed."""

MAX_READER_BYTES: Final = 1 << 20
"""The longest answer read from an accessibility reader, bytes (its longest honest answer is
about a tenth of it: 300 nodes of 200-character names)."""

APP_OOM_SCORE_ADJ: Final = 1000
"""``oom_score_adj`` of every application: the OOM killer's first choice, never the runner."""


@dataclass(frozen=True)
class AppsConfig:
    """Where the runner works: ``workspace`` (the applications' working folder),
    ``home`` (``HOME``, ``/home/apps``), ``state_dir`` (Xauthority files and the bus's
    socket, ``/tmp/deskpod-apps``), the port, ``wipe_dirs`` (what a reset empties
    besides ``home`` and ``state_dir`` when the runner is PID 1) and ``client``, the host
    name of the one peer it answers (``DESKPOD_APPS_CLIENT``: agentd's, ``sandbox``;
    ``None``: any)."""

    workspace: Path = Path("/workspace")
    home: Path = Path("/home/apps")
    state_dir: Path = Path("/tmp/deskpod-apps")
    host: str = "0.0.0.0"
    port: int = APPS_PORT
    wipe_dirs: tuple[Path, ...] = field(default=(Path("/tmp"), Path("/dev/shm")))
    client: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppsConfig:
        """``HOME`` and the settings' ``apps_client`` from ``env`` (default ``os.environ``, never
        a configuration file); the rest fixed.

        Raises:
            SettingsError: a variable does not parse.
        """
        environ = os.environ if env is None else env
        return cls(home=Path(environ.get("HOME") or "/home/apps"),
                   client=load_settings(environ, config_file=None).apps_client)


class AppsRunner:
    """The runner's request handling (see the module).

    Args:
        config: its folders and port.
        is_init: this process is PID 1 of its namespace: a reset kills every other process
            of it and empties the container's writable mounts.
    """

    def __init__(self, config: AppsConfig, is_init: bool) -> None:
        self.config = config
        self.is_init = is_init
        self.reaper = ChildReaper() if is_init else None
        self._lock = asyncio.Lock()
        self._bus: subprocess.Popen[bytes] | None = None
        self._clipboard: subprocess.Popen[bytes] | None = None
        self._started: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start the reaper (PID 1 only)."""
        if self.reaper is not None:
            self.reaper.start()

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read one request frame, answer it with one reply frame, close; a connection from
        any address but :attr:`AppsConfig.client`'s is closed unread."""
        try:
            # Not even the loopback: it is the zone's own processes (the health check only connects).
            if await peer_of(self.config.client, writer.get_extra_info("peername"), "applications runner") != "agentd":
                return
            payload = await read_request_frame(reader)
            if payload is None:
                return
            try:
                request = parse_apps_request(payload)
            except ValidationError as exc:
                reply: AppsReplyModel = error_reply(
                    InvalidRequestError(f"bad applications runner request: {first_error(exc)}"))
            else:
                if isinstance(request, RunnerPingRequest):
                    reply = RunnerPong(pid=os.getpid())
                elif isinstance(request, AppsOpenRequest):
                    reply = await self.open(request)
                elif isinstance(request, AppsAccessibleRequest):
                    reply = await asyncio.to_thread(_answered, self.accessible, request)
                elif isinstance(request, AppsClipboardRequest):
                    async with self._lock:
                        reply = await asyncio.to_thread(_answered, self.clipboard, request)
                elif isinstance(request, AppsSnapshotRequest):
                    async with self._lock:
                        reply = await asyncio.to_thread(_answered, self.snapshot, request)
                elif isinstance(request, AppsRestoreRequest):
                    async with self._lock:
                        reply = await asyncio.to_thread(_answered, self.restore, request)
                else:
                    reply = await self.reset()
            writer.write(encode_frame(reply))
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def open(self, request: AppsOpenRequest) -> AppsOpened | RunnerError:
        """Start the application ``request`` names on its display grant.

        Returns:
            Its pid, or the error envelope (``execution_failed`` when it could not start).
        """
        async with self._lock:
            return await asyncio.to_thread(_answered, self._start, request)

    def _zone_env(self) -> dict[str, str]:
        """The environment of a process of the zone: the zone's session bus, no display."""
        return {"PATH": EXEC_PATH, "HOME": str(self.config.home), "LANG": "C.UTF-8",
                "DBUS_SESSION_BUS_ADDRESS": self._session_bus(), "XDG_RUNTIME_DIR": str(self.config.state_dir)}

    def _x_env(self, grant: X11Grant) -> dict[str, str]:
        """The environment of a process of the zone on the display ``grant`` grants: its own
        Xauthority file besides :meth:`_zone_env`."""
        os.makedirs(self.config.state_dir, mode=0o700, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="x11-", dir=self.config.state_dir)
        xauthority = os.path.join(folder, "Xauthority")
        fd = os.open(xauthority, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(xauthority_entry(grant, socket.gethostname().encode()))
        return {**self._zone_env(), "DISPLAY": grant.display, "XAUTHORITY": xauthority}

    def _start(self, request: AppsOpenRequest) -> AppsOpened:
        action = request.action
        env = self._x_env(request.x11)
        argv = [*APPS_ARGV[action.app]]
        if action.path is not None and action.app in FILE_APPS:
            argv.append(str(self.config.workspace / action.path))
        proc = self._spawn(argv, env)
        self._started.append(proc)
        log.info("started %s (pid %d)", action.app, proc.pid)
        return AppsOpened(pid=proc.pid)

    def accessible(self, request: AppsAccessibleRequest) -> AppsAccessible | RunnerError:
        """Ask the applications' accessibility trees ``request``'s question through a reader
        process (:data:`READER_ARGV`) on the zone's session bus; nothing to read before the
        first application started it.

        Returns:
            The answer, or the error envelope (``execution_failed``, ``detail["reason"]``
            ``"accessibility"``) when the reader failed, answered nonsense or took longer than
            :data:`READER_TIMEOUT_S`.
        """
        if self._bus is None or self._bus.poll() is not None:
            return AppsAccessible()
        proc = self._spawn(list(READER_ARGV), self._zone_env(), piped=True)
        try:
            return _helper_answer(proc, request.model_dump_json().encode(), AppsAccessible)
        except ValueError as exc:
            return error_reply(ExecutionError(f"the applications' controls could not be read: {exc}",
                                              detail={"reason": "accessibility"}))
        finally:
            _end(proc)

    def snapshot(self, request: AppsSnapshotRequest) -> AppsSnapshot:
        """The zone's home packed for a snapshot (:func:`~deskpod.agentd.zone_home.pack_home`).

        Raises:
            ExecutionError: it is too large (``too_large``).
        """
        return AppsSnapshot(archive=pack_home(self.config.home))

    def restore(self, request: AppsRestoreRequest) -> AppsRestored:
        """``request.archive`` written back over the zone's home (:func:`~deskpod.agentd.zone_home.restore_home`).

        Raises:
            WorkspaceError: not an archive that may be restored, or a file could not be written.
        """
        return AppsRestored(files=restore_home(self.config.home, request.archive))

    def clipboard(self, request: AppsClipboardRequest) -> AppsClipboard | RunnerError:
        """Read the zone's clipboard, or own it with ``request.text``, through a helper process
        of the zone on ``request.x11``'s display (:data:`CLIPBOARD_ARGV`); the owning helper
        lives on, answering the applications' pastes, until the next write, the grant's
        revocation or the reset (the one before it is killed first).

        Returns:
            What the helper answered, or the error envelope (``execution_failed``,
            ``detail["reason"]`` ``"clipboard"``) when it failed, answered nonsense or not in time.
        """
        writing = request.text is not None
        if writing and self._clipboard is not None:
            _end(self._clipboard)
            self._clipboard = None
        env = self._x_env(request.x11)
        proc = self._spawn([*CLIPBOARD_ARGV, "own" if writing else "read"], env, piped=True)
        answered = False
        try:
            reply = _helper_answer(proc, json.dumps({"text": request.text}).encode(), AppsClipboard)
            answered = True
        except ValueError as exc:
            return error_reply(ExecutionError(f"the zone's clipboard could not be {'written' if writing else 'read'}: "
                                              f"{exc}", detail={"reason": "clipboard"}))
        finally:
            if writing and answered:
                self._clipboard = proc  # it answers the applications' pastes from now on
                self._started.append(proc)
            else:
                _end(proc)
                shutil.rmtree(os.path.dirname(env["XAUTHORITY"]), ignore_errors=True)  # its cookie is spent
        return reply

    def _spawn(self, argv: list[str], env: dict[str, str], piped: bool = False) -> subprocess.Popen[bytes]:
        pipe = subprocess.PIPE if piped else subprocess.DEVNULL

        def start() -> subprocess.Popen[bytes]:
            try:
                return subprocess.Popen(argv, cwd=self.config.workspace, env=env, stdin=pipe,
                                        stdout=pipe, stderr=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=functools.partial(set_oom_score_adj, APP_OOM_SCORE_ADJ))
            except OSError as exc:
                raise ExecutionError(f"{argv[0]} could not start: {exc.strerror or exc}",
                                     detail={"reason": "app_failed"}) from exc

        return self.reaper.spawn(start) if self.reaper is not None else start()

    def _session_bus(self) -> str:
        """The address of the zone's session bus, started on first use."""
        path = self.config.state_dir / "bus"
        address = f"unix:path={path}"
        if self._bus is None or self._bus.poll() is not None:
            self._bus = self._spawn([*BUS_ARGV, f"--address={address}"],
                                    {"PATH": EXEC_PATH, "HOME": str(self.config.home)})
            deadline = time.monotonic() + 5.0
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return address

    async def reset(self) -> RunnerResetDone | RunnerError:
        """Kill every application (PID 1: every other process of the namespace) and empty
        the zone's home, state folder and, as PID 1, ``/tmp``, ``/dev/shm`` and its IPC objects."""
        started = time.monotonic()
        async with self._lock:
            try:
                killed = await asyncio.to_thread(self._kill)
            except DeskpodError as exc:
                return error_reply(exc)
            failures = await asyncio.to_thread(self._wipe)
        log.info("reset done: %d process(es) killed (%.3f s)", killed, time.monotonic() - started)
        return RunnerResetDone(killed=killed, failures=[f[:500] for f in failures[:50]],
                               duration_s=round(time.monotonic() - started, 6))

    def _kill(self) -> int:
        procs = [p for p in [*self._started, self._bus] if p is not None]
        self._started, self._bus, self._clipboard = [], None, None
        if self.is_init:
            killed = kill_namespace()
            assert self.reaper is not None
            self.reaper.forget()
            return killed
        for proc in procs:
            _end(proc)
        return len(procs)

    def _wipe(self) -> list[str]:
        folders = [self.config.home, self.config.state_dir, *(self.config.wipe_dirs if self.is_init else ())]
        return clear_zone(folders, self.is_init)


def _answered(handle: Callable[[Request], Reply], request: Request) -> Reply | RunnerError:
    """``handle(request)``, or the error envelope of whatever it raised: the runner answers
    every request, whatever a helper process did."""
    try:
        return handle(request)
    except DeskpodError as exc:
        return error_reply(exc)
    except Exception as exc:  # the runner must survive anything a request triggers
        log.exception("%s failed", request.type)
        return error_reply(InternalError(f"internal error: {type(exc).__name__}"))


def _helper_answer(proc: subprocess.Popen[bytes], question: bytes, model: type[Answer]) -> Answer:
    """The answer of the helper process ``proc`` to ``question`` (:func:`_bounded_answer`), as
    ``model`` checks it.

    Raises:
        ValueError: what went wrong, in a few words: no answer in time, not JSON, too long, the
            helper's own ``{"error": ...}``, or not the model's shape.
    """
    try:
        answer = json.loads(_bounded_answer(proc, question))
    except subprocess.TimeoutExpired as exc:
        raise ValueError(f"no answer within {READER_TIMEOUT_S:g} s") from exc
    except json.JSONDecodeError as exc:
        raise ValueError("not JSON") from exc
    if isinstance(answer, dict) and "error" in answer:
        raise ValueError(str(answer["error"])[:300])
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        raise ValueError(first_error(exc)) from exc


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process's group (an application's, a helper's) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.stdout is not None:
        proc.stdout.close()
    proc.wait()


def _bounded_answer(proc: subprocess.Popen[bytes], question: bytes) -> bytes:
    """Send ``question`` to the reader ``proc`` and read its answer: at most
    :data:`MAX_READER_BYTES`, within :data:`READER_TIMEOUT_S`.

    Raises:
        subprocess.TimeoutExpired: no whole answer in time.
        ValueError: a longer answer (nothing a reader of the zone writes is trusted).
    """
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(question)
        proc.stdin.close()
    deadline = time.monotonic() + READER_TIMEOUT_S
    out = bytearray()
    with selectors.DefaultSelector() as waiting:
        waiting.register(proc.stdout, selectors.EVENT_READ)
        while len(out) <= MAX_READER_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.select(left):
                raise subprocess.TimeoutExpired(READER_ARGV[0], READER_TIMEOUT_S)
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return bytes(out)
            out += chunk
    raise ValueError(f"an answer over {MAX_READER_BYTES} bytes")


async def serve(config: AppsConfig) -> None:
    """Serve on ``config.host:config.port`` until SIGTERM or SIGINT.

    Raises:
        OSError: the port cannot be bound.
    """
    runner = AppsRunner(config, os.getpid() == 1)
    runner.start()
    await serve_until_stopped(runner.serve_connection, config.host, config.port, "applications runner")


def main(argv: list[str] | None = None) -> None:
    """Run the applications runner."""
    parser = argparse.ArgumentParser(prog="python -m deskpod.agentd.apps_runner")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    drop_working_folder_from_path()
    make_non_dumpable()
    asyncio.run(serve(AppsConfig.from_env()))


if __name__ == "__main__":
    main()
