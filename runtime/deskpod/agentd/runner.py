"""The workspace runner: PID 1 of the workspace container, where every agent command runs.

``python -m deskpod.agentd.runner`` (the workspace service's entrypoint; no tini).
It serves the workspace tools (:class:`~deskpod.agentd.workspace.tools.Workspace`) to
agentd over :mod:`~deskpod.agentd.runner_wire` on TCP :data:`RUNNER_PORT`, one
request at a time, and holds no secret: no token, no token hash, no X cookie
except the one a request grants to one command.

Why a container of its own (SECURITY.md, "Trust zones"): agent commands run as
uid 1001 in their own PID, mount, IPC and network namespaces, so agentd, Xvfb,
openbox and Chromium (uid 1000, the sandbox container) are not even visible to
them: no ``/proc/<pid>/mem``, no ``ptrace``, no signal, no X socket, no shared
``/tmp``. Nothing here needs a capability or a uid switch.

The runner protects itself from the processes it starts (same uid):

- it is non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), so they cannot open its
  ``/proc/1/mem``, ``environ`` or ``fd``, nor ptrace it;
- as PID 1 of its PID namespace it ignores every signal it has no handler for,
  SIGKILL included, when sent from inside the namespace;
- every command gets ``oom_score_adj`` :data:`AGENT_OOM_SCORE_ADJ`, so the OOM
  killer takes the command, not the runner;
- after every request, and on ``reset``, it kills every other process of its
  namespace with ``kill(-1, SIGKILL)`` (:func:`~deskpod.agentd.workspace.pid1.kill_namespace`), which reaches a
  process however it hid (non-dumpable, ``setsid``, re-parented, hopping pids),
  until ``/proc`` lists only itself; and it removes every SysV IPC object and
  POSIX message queue of its IPC namespace (:func:`remove_ipc_objects`);
- before a ``clean_room`` request (the controller's verdict) it kills every other
  process of its namespace once more, then builds the room in a fresh folder of
  ``verdict_root`` (``/tmp``, a mount root no agent process can replace), so no
  agent process is alive while the verdict's tests run;
- it drops its working folder (the workspace, where compose starts it) from
  ``sys.path`` before serving (:func:`drop_working_folder_from_path`), so a module
  it imports late (``gzip`` when it first opens an archive, say) is never one an
  agent wrote there;
- as init it reaps every zombie (:class:`~deskpod.agentd.workspace.pid1.ChildReaper`), handing each command's
  exit status to the thread that waits for it.

Outside a container (a developer's machine, the unit tests) the runner is not
PID 1: it then kills nothing but its commands' process groups and wipes only the
folders it was given.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from deskpod.agentd.workspace.confined import clear_folder
from deskpod.agentd.workspace.egress_grants import proxy_url_with
from deskpod.agentd.workspace.pid1 import ChildReaper, kill_namespace, make_non_dumpable
from deskpod.agentd.workspace.process import proxy_env
from deskpod.agentd.runner_wire import (
    FRAME_HEADER,
    MAX_RUNNER_REPLY_BYTES,
    MAX_RUNNER_REQUEST_BYTES,
    RUNNER_PORT,
    RunnerError,
    RunnerOutput,
    RunnerPingRequest,
    RunnerPong,
    RunnerResetDone,
    RunnerResetRequest,
    RunnerWorkspaceRequest,
    X11Grant,
    encode_frame,
    frame_length,
    parse_runner_reply,
    parse_runner_request,
)
from deskpod.agentd.ipc import remove_ipc_objects
from deskpod.agentd.browser.trusted_ca import bundle_env, load_trusted_cas, write_bundle
from deskpod.agentd.workspace.tools import Workspace
from deskpod.agentd.display.xauth import FAMILY_LOCAL, FAMILY_WILD, xauthority_record
from deskpod.errors import (
    ActionTimeoutError,
    BusyError,
    DeskpodError,
    DisplayUnavailableError,
    InternalError,
    InvalidRequestError,
    SettingsError,
    TrustedCaError,
    UnauthorizedError,
    error_from_wire,
)
from deskpod.protocol import CleanRoomRequest, CleanRoomRun, ErrorBody, ExecRequest, RunTestsRequest, first_error
from deskpod.settings import load_settings, use_environment_only

__all__ = [
    "AGENT_OOM_SCORE_ADJ",
    "REQUEST_READ_TIMEOUT_S",
    "RESET_WAIT_S",
    "Runner",
    "RunnerConfig",
    "call",
    "clear_zone",
    "drop_working_folder_from_path",
    "error_reply",
    "main",
    "read_request_frame",
    "serve_until_stopped",
    "xauthority_entry",
]

log = logging.getLogger(__name__)

AGENT_OOM_SCORE_ADJ = 1000
"""``oom_score_adj`` of every agent command: the OOM killer's first choice."""

RESET_WAIT_S = 10.0
"""How long a reset waits for the running request to end once its processes were killed, seconds."""

REQUEST_READ_TIMEOUT_S = 30.0
"""How long the runner waits for a connection's request frame, seconds."""

def drop_working_folder_from_path(path: list[str] | None = None) -> list[str]:
    """Remove ``""`` and the current working folder from ``path`` (default ``sys.path``), in place.

    ``python -m`` puts the working folder first on ``sys.path``; the runner's is the
    agent-writable workspace.

    Returns:
        The entries removed.
    """
    entries = sys.path if path is None else path
    here = os.path.realpath(os.getcwd())
    removed = [p for p in entries if p in ("", ".") or os.path.realpath(p) == here]
    entries[:] = [p for p in entries if p not in removed]
    return removed


def xauthority_entry(grant: X11Grant, hostname: bytes = b"") -> bytes:
    """The Xauthority records of ``grant`` (:mod:`deskpod.agentd.display.xauth`): its display
    number and MIT-MAGIC-COOKIE-1 for ``FamilyWild`` (any address: what libxcb and libX11
    match), then, when ``hostname`` (this host's name) is given, for ``FamilyLocal`` with it
    (what python-xlib looks up for a ``host:N`` display)."""
    cookie = bytes.fromhex(grant.cookie_hex)
    entry = xauthority_record(FAMILY_WILD, b"", grant.display_number, cookie)
    if hostname:
        entry += xauthority_record(FAMILY_LOCAL, hostname, grant.display_number, cookie)
    return entry


@dataclass(frozen=True)
class RunnerConfig:
    """Settings of the runner, from its environment (:meth:`from_env`, through :mod:`deskpod.settings`).

    ``workspace``: ``DESKPOD_WORKSPACE`` (``/workspace``). ``home``: the agent's home,
    ``HOME`` (``/home/agent``). ``state_dir``: scratch files and per-command
    Xauthority files, ``DESKPOD_RUNNER_STATE`` (``/tmp/deskpod-runner``). ``port``:
    ``DESKPOD_RUNNER_PORT`` (:data:`RUNNER_PORT`). ``proxy``: the egress proxy for
    ``network`` commands, ``HTTPS_PROXY``/``HTTP_PROXY`` (given to a command only with
    the egress grant agentd sent for it). ``wipe_dirs``: what a reset
    empties when the runner is PID 1 (the container's writable mounts).
    ``verdict_root``: where clean rooms are made (``/tmp``). ``trusted_cas``: the
    operator's CAs, ``DESKPOD_TRUSTED_CAS`` (:mod:`deskpod.agentd.browser.trusted_ca`), bundled for
    ``network`` commands. ``client``: the host name of the one peer it answers besides its own
    loopback, ``DESKPOD_RUNNER_CLIENT`` (agentd's, ``sandbox``; ``None``: any).
    """

    workspace: Path = Path("/workspace")
    home: Path = Path("/home/agent")
    state_dir: Path = Path("/tmp/deskpod-runner")
    host: str = "0.0.0.0"
    port: int = RUNNER_PORT
    proxy: str | None = None
    wipe_dirs: tuple[Path, ...] = field(default=(Path("/tmp"), Path("/dev/shm")))
    verdict_root: Path = Path("/tmp")
    trusted_cas: str | None = None
    client: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunnerConfig:
        """Read the configuration from ``env`` (default: ``os.environ``), never from a
        configuration file: the agent's commands can write the runner's home folder.

        Raises:
            SettingsError: a variable does not parse (``DESKPOD_RUNNER_PORT`` not a
                port number, ...); the message names it. Also a ``ValueError``.
        """
        environ = os.environ if env is None else env
        settings = load_settings(environ, config_file=None)
        return cls(
            workspace=settings.workspace,
            home=Path(environ.get("HOME") or "/home/agent"),
            state_dir=settings.runner_state,
            host=settings.runner_host,
            port=settings.runner_port,
            proxy=environ.get("HTTPS_PROXY") or environ.get("HTTP_PROXY") or None,
            trusted_cas=settings.trusted_cas,
            client=settings.runner_client,
        )


async def peer_of(client: str | None, peer: object, who: str) -> Literal["agentd", "loopback"] | None:
    """Who is at the other end of a runner's connection (``who``: the runner, as the log names
    it; ``peer``: the socket's ``peername``): ``"agentd"`` when it comes from the address the host
    name ``client`` resolves to now (any peer when ``client`` is ``None``), ``"loopback"`` from the
    runner's own container (its health check, and every process of its zone), else ``None``
    (logged). Nothing in the zones can change its own address or that answer (no
    ``NET_ADMIN``, no ``NET_RAW``)."""
    address = peer[0] if isinstance(peer, tuple) and peer else None
    if client is None:
        return "agentd"
    if address is not None:
        try:
            answers = await asyncio.get_running_loop().getaddrinfo(client, None, type=socket.SOCK_STREAM)
        except OSError:
            answers = []
        if any(info[4][0] == address for info in answers):
            return "agentd"
    if address in ("127.0.0.1", "::1"):
        return "loopback"
    log.warning("%s refused a connection from %s: not agentd's address", who, peer)
    return None


def error_reply(exc: DeskpodError) -> RunnerError:
    """``exc`` as the runner wire's error reply (the closed envelope)."""
    return RunnerError(error=ErrorBody(**exc.to_wire()))


async def read_request_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The payload of the one request frame a connection carries; ``None`` when it does not
    come whole within :data:`REQUEST_READ_TIMEOUT_S` (each part), announces more than
    :data:`MAX_RUNNER_REQUEST_BYTES` or the connection fails (the caller closes it unanswered)."""
    try:
        header = await asyncio.wait_for(reader.readexactly(FRAME_HEADER.size), REQUEST_READ_TIMEOUT_S)
        length = frame_length(header, MAX_RUNNER_REQUEST_BYTES)
        return await asyncio.wait_for(reader.readexactly(length), REQUEST_READ_TIMEOUT_S)
    except (TimeoutError, asyncio.IncompleteReadError, ValueError, OSError):
        return None


class Runner:
    """The runner's request handling (one request at a time; a reset preempts it).

    Args:
        config: folders, port and proxy.
        is_init: this process is PID 1 of its namespace: kill every other process
            after each request and on reset, remove IPC objects, wipe the
            container's writable mounts.
    """

    def __init__(self, config: RunnerConfig, is_init: bool) -> None:
        self.config = config
        self.is_init = is_init
        self.reaper = ChildReaper() if is_init else None
        # No proxy of the Workspace's own: a ``network`` command gets the proxy only with
        # the egress grant agentd sent for it (:meth:`_network_env`).
        self.workspace = Workspace(
            config.workspace,
            config.state_dir,
            None,
            home=config.home,
            waiter=self.reaper,
            oom_score_adj=AGENT_OOM_SCORE_ADJ if is_init else None,
            verdict_root=config.verdict_root,
        )
        self._cancel: threading.Event | None = None

    def start(self) -> None:
        """Start the reaper (PID 1 only)."""
        if self.reaper is not None:
            self.reaper.start()

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read one request frame, answer it with one reply frame, close; a connection from
        any address but :attr:`RunnerConfig.client`'s is closed unread, and one from the
        container's own loopback (the health check, or an agent's command) is answered a ping
        and nothing else (:func:`peer_of`)."""
        try:
            peer = await peer_of(self.config.client, writer.get_extra_info("peername"), "workspace runner")
            if peer is None:
                return
            payload = await read_request_frame(reader)
            if payload is None:
                return
            try:
                request = parse_runner_request(payload)
            except ValidationError as exc:
                reply: RunnerOutput | RunnerResetDone | RunnerPong | RunnerError = error_reply(
                    InvalidRequestError(f"bad runner request: {first_error(exc)}")
                )
            else:
                if isinstance(request, RunnerPingRequest):
                    reply = RunnerPong(pid=os.getpid())
                elif peer == "loopback":
                    reply = error_reply(UnauthorizedError("only agentd may ask the workspace runner for more than a "
                                                          "ping", detail={"reason": "not_agentd"}))
                elif isinstance(request, RunnerResetRequest):
                    reply = await self.reset()
                else:
                    reply = await self.run(request, reader)
            writer.write(encode_frame(reply))
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def run(self, message: RunnerWorkspaceRequest, reader: asyncio.StreamReader) -> RunnerOutput | RunnerError:
        """Carry out one workspace request; a closed connection cancels it. Afterwards
        (PID 1) every other process of the namespace is killed and IPC objects removed.

        Args:
            message: the request and its display grant, if any.
            reader: the request's connection; its end cancels the request.

        Returns:
            The output, or the error envelope (``busy`` while another request or a
            reset runs; ``display_unavailable`` for ``display`` without a grant).
        """
        lock = self.workspace.lock
        if lock.locked():
            return error_reply(BusyError("another workspace request is running; retry when it has answered"))
        async with lock:
            cancel = self._cancel = threading.Event()
            watcher = asyncio.create_task(_cancel_on_eof(reader, cancel))
            xauth_dir: str | None = None
            try:
                env: dict[str, str] | None = None
                request = message.request
                killed = 0
                if isinstance(request, CleanRoomRequest) and self.is_init:
                    if killed := await asyncio.to_thread(kill_namespace):
                        log.info("killed %d agent process(es) before the clean room", killed)
                if isinstance(request, (ExecRequest, RunTestsRequest, CleanRoomRequest)) and request.display:
                    if message.x11 is None:
                        raise DisplayUnavailableError(
                            "the command asked for the display but no display was granted",
                            detail={"reason": "no_grant"},
                        )
                    xauth_dir, env = self._grant(message.x11)
                if isinstance(request, ExecRequest) and request.network:
                    env = {**(env or {}), **self._network_env(message.egress_credential)}
                output = await self.workspace.handle(request, cancel, env)
                if isinstance(output, CleanRoomRun):
                    output = output.model_copy(update={"killed": killed})
                reply: RunnerOutput | RunnerError = RunnerOutput(output=output)
            except DeskpodError as exc:
                reply = error_reply(exc)
            except Exception as exc:  # the runner must survive anything a request triggers
                log.exception("workspace request failed")
                reply = error_reply(InternalError(f"internal error: {type(exc).__name__}"))
            finally:
                watcher.cancel()
                self._cancel = None
                if xauth_dir is not None:
                    shutil.rmtree(xauth_dir, ignore_errors=True)
                try:
                    await asyncio.to_thread(self._after_request)
                except DeskpodError as exc:
                    log.error("cleanup after a request failed: %s", exc.message)
            return reply

    def _grant(self, grant: X11Grant) -> tuple[str, dict[str, str]]:
        """Write an Xauthority file for one command; return its folder and the variables."""
        os.makedirs(self.config.state_dir, mode=0o700, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="x11-", dir=self.config.state_dir)
        path = os.path.join(folder, "Xauthority")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(xauthority_entry(grant, socket.gethostname().encode()))
        return folder, {"DISPLAY": grant.display, "XAUTHORITY": path}

    def _network_env(self, credential: str | None) -> dict[str, str]:
        """The variables of a ``network`` command: the egress proxy with the command's
        grant as its credential, and the operator's trusted CAs (if any) bundled with the
        system's (:meth:`_trusted_ca_env`); none without a grant or a proxy."""
        if credential is None or not self.config.proxy:
            return {}
        return proxy_env(proxy_url_with(self.config.proxy, credential)) | self._trusted_ca_env()

    def _trusted_ca_env(self) -> dict[str, str]:
        """Write the system CAs plus the operator's to ``state_dir/trusted-ca.pem``, anew
        for each command (a reset empties ``/tmp``), and return the variables naming it;
        none without operator CAs. Bad certificates are logged and left out."""
        cas, _errors = load_trusted_cas(self.config.trusted_cas)
        try:
            bundle = write_bundle(cas, self.config.state_dir / "trusted-ca.pem")
        except TrustedCaError as exc:
            log.error("%s (%s)", exc.message, exc.code)
            return {}
        return bundle_env(bundle) if bundle is not None else {}

    def _after_request(self) -> None:
        if not self.is_init:
            return
        if killed := kill_namespace():
            log.info("killed %d process(es) left by the request", killed)
        assert self.reaper is not None
        self.reaper.forget()
        for failure in remove_ipc_objects():
            log.warning("IPC object left: %s", failure)

    async def reset(self) -> RunnerResetDone | RunnerError:
        """Cancel the running request, kill every agent process, empty the agent's
        folders and remove its IPC objects.

        Returns:
            How many processes were killed and what could not be cleared, or the
            error envelope (``timeout`` when the running request did not end within
            :data:`RESET_WAIT_S`, or processes outlived :data:`KILL_DEADLINE_S`).
        """
        started = time.monotonic()
        if self._cancel is not None:
            self._cancel.set()
        try:
            killed = await asyncio.to_thread(kill_namespace)
            try:
                await asyncio.wait_for(self.workspace.lock.acquire(), RESET_WAIT_S)
            except TimeoutError:
                return error_reply(
                    ActionTimeoutError(
                        f"the running request did not end within {RESET_WAIT_S:.0f} s of the reset",
                        detail={"reason": "workspace_busy"},
                    )
                )
            try:
                killed += await asyncio.to_thread(kill_namespace)
                failures = await asyncio.to_thread(self._wipe)
            finally:
                self.workspace.lock.release()
        except DeskpodError as exc:
            return error_reply(exc)
        if self.reaper is not None:
            self.reaper.forget()
        log.info("reset done: %d process(es) killed (%.3f s)", killed, time.monotonic() - started)
        return RunnerResetDone(
            killed=killed, failures=[f[:500] for f in failures[:50]], duration_s=round(time.monotonic() - started, 6)
        )

    def _wipe(self) -> list[str]:
        folders = [self.config.workspace, self.config.home, self.config.state_dir]
        return clear_zone([*folders, *(self.config.wipe_dirs if self.is_init else ())], self.is_init)


def clear_zone(folders: Sequence[Path], ipc: bool) -> list[str]:
    """Empty each of ``folders`` (:func:`~deskpod.agentd.workspace.confined.clear_folder`) and,
    when ``ipc``, remove every IPC object of the namespace (a runner that is PID 1).

    Returns:
        What could not be cleared, one line each (empty: all of it).
    """
    failures = []
    for folder in dict.fromkeys(folders):
        try:
            clear_folder(str(folder))
        except OSError as exc:
            failures.append(f"{folder}: {exc.strerror or exc}")
    if ipc:
        failures += remove_ipc_objects()
    return failures


async def _cancel_on_eof(reader: asyncio.StreamReader, cancel: threading.Event) -> None:
    """Set ``cancel`` when the peer closes the connection (or sends anything more)."""
    try:
        await reader.read(1)
    except (ConnectionError, OSError):
        pass
    cancel.set()


async def serve(config: RunnerConfig) -> None:
    """Serve on ``config.host:config.port`` until SIGTERM or SIGINT.

    Raises:
        OSError: the port cannot be bound.
    """
    runner = Runner(config, os.getpid() == 1)
    runner.start()
    await serve_until_stopped(runner.serve_connection, config.host, config.port, "workspace runner")


async def serve_until_stopped(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                              host: str, port: int, name: str) -> None:
    """Serve TCP connections on ``host:port`` with ``handler`` until SIGTERM or SIGINT
    (``name``: the server, as the log names it).

    Raises:
        OSError: the port cannot be bound.
    """
    server = await asyncio.start_server(handler, host, port, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("%s listening on %s:%d (pid %d)", name, host, port, os.getpid())
    async with server:
        await stop.wait()


def call(host: str, port: int, message: BaseModel, timeout_s: float) -> RunnerOutput | RunnerResetDone | RunnerPong:
    """Send one request to a runner and return its reply, blocking (the health check and
    ``deskpod audit`` use it; agentd uses :class:`~deskpod.agentd.workspace.runner_client.RunnerClient`).

    Raises:
        OSError: the runner cannot be reached or closed the connection.
        ValueError: the reply is too large or malformed.
        DeskpodError: the runner answered an error (through the fixed code table).
    """
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(encode_frame(message))
        data = b""
        need = FRAME_HEADER.size
        while len(data) < need:
            chunk = sock.recv(65_536)
            if not chunk:
                raise ConnectionError("the runner closed the connection without a reply")
            data += chunk
            if need == FRAME_HEADER.size and len(data) >= need:
                need += frame_length(data[: FRAME_HEADER.size], MAX_RUNNER_REPLY_BYTES)
    reply = parse_runner_reply(data[FRAME_HEADER.size : need])
    if isinstance(reply, RunnerError):
        raise error_from_wire(reply.error.model_dump())
    return reply


def main(argv: list[str] | None = None) -> None:
    """Run the runner (its health check is :mod:`deskpod.agentd.runner_health`)."""
    parser = argparse.ArgumentParser(prog="python -m deskpod.agentd.runner")
    parser.parse_args(argv)
    use_environment_only()
    try:
        config = RunnerConfig.from_env()
    except SettingsError as exc:
        print(f"deskpod.agentd.runner: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    drop_working_folder_from_path()
    make_non_dumpable()
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
