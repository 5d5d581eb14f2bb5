"""The desktop session inside the sandbox: Xvfb, a window manager and Chromium.

The daemon owns these processes: :class:`DesktopSession` starts them in order,
waits until each answers, stops them, restarts any of them, and wipes the
sandbox's writable folders for a reset (:meth:`DesktopSession.wipe`). The daemon
changes these processes only while it holds the executor lock, so no request
runs against a half-started session. Chromium always keeps its own sandbox
(``--no-sandbox`` is never passed; its command line is
:mod:`deskpod.agentd.browser.chromium`). A reset puts back the home folder's baseline
files (:mod:`deskpod.agentd.baseline`). It opens no DevTools port: it runs with
``--remote-debugging-pipe`` and speaks DevTools on its fds 3 and 4, both one end of
a Unix socket pair whose other end only the daemon holds. Nothing else in the
sandbox can reach it: no process of the same uid can reopen a socket through
``/proc/<pid>/fd`` (as it could a pipe), and the seccomp profile refuses
``pidfd_getfd`` and ``ptrace``.

The X server admits only clients that present its cookie (MIT-MAGIC-COOKIE-1): every
start of Xvfb draws a fresh random cookie, writes it to an authority file only the
daemon's user can read (:data:`XAUTHORITY_NAME` in the runtime folder, mode 0600) and
points ``XAUTHORITY`` at it for the daemon's own X clients (XTEST input, mss capture),
the window manager and Chromium. Xvfb listens only on its Unix socket in
``/tmp/.X11-unix`` (private to the sandbox container's mount namespace): not on TCP,
and never on the abstract socket namespace, which belongs to the network namespace (in
a Kubernetes pod, shared by every container of the pod). An agent command granted the
display reaches it from the workspace container through the daemon's X gate
(:mod:`deskpod.agentd.display.xgate`), as an untrusted client. A reset starts a new X server
(:meth:`DesktopSession.start_display`), which drops every window, property and
selection a client left (``RetainPermanent`` ones included) and rotates the cookie.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.agentd.baseline import capture_baseline, restore_baseline
from deskpod.agentd.display import refresh
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.workspace.confined import clear_folder
from deskpod.agentd.browser.chromium import chromium_args, chromium_env
from deskpod.agentd.browser.trusted_ca import import_into_nss, load_trusted_cas
from deskpod.agentd.display.xauth import COOKIE_BYTES, write_xauthority
from deskpod.errors import SessionError, TrustedCaError

__all__ = [
    "BROWSER_STOP_TIMEOUT_S",
    "DesktopSession",
    "EarlyStart",
    "OPENBOX_RC",
    "PROFILE_DIR_NAME",
    "STARTUP_TIMEOUT_S",
    "XAUTHORITY_NAME",
]

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0
"""How long each process may take to become ready at start."""

_STOP_TIMEOUT_S = 5.0

BROWSER_STOP_TIMEOUT_S = 10.0
"""How long Chromium may take to shut down cleanly (flushing cookies and storage to
disk) after SIGTERM before it is killed."""

XAUTHORITY_NAME = "Xauthority"
"""The X authority file (the current cookie), inside the daemon's runtime folder, mode 0600."""


PROFILE_DIR_NAME = "chromium-profile"
"""Chromium's profile folder, inside the daemon's runtime folder."""

_REFRESH_TIMEOUT_S = 10.0
"""Longest a standby display's refresh rate may take to set (a Python start and a few
X requests), seconds."""

_EXIT_WAIT_S = 1.0
"""How long a process whose start failed is given to report its exit status, seconds."""

_DEVTOOLS_FDS = 'exec "$0" "$@" 3<&0 4<&0 0</dev/null'
"""A fixed ``/bin/sh -c`` line, no input in it (Chromium's argv follows as ``$0 $@``):
Chromium reads DevTools commands on fd 3 and writes on fd 4, while ``Popen`` can place
a descriptor only on stdin, stdout or stderr (``preexec_fn`` is unsafe in the threaded
daemon). So Chromium's end of the socket pair comes in as stdin, the shell duplicates
it to 3 and 4, points stdin at /dev/null and execs Chromium in its own place (same
pid; Debian's ``/usr/bin/chromium`` wrapper execs the real binary, which inherits them)."""

_DEVTOOLS_PING = b'{"id": 0, "method": "Browser.getVersion"}\0'
"""Written once at start: Chromium is up when an answer can be read. The answer is
left in the socket for :class:`deskpod.agentd.browser.cdp.Browser`, which ignores id 0."""

OPENBOX_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <!-- No key bindings: openbox reloads them on every keymap change and freezes the
       pointer meanwhile, which the daemon's Unicode typing triggers; an agent needs
       no window-manager shortcuts. Clicks focus and raise windows. -->
  <keyboard/>
  <mouse>
    <context name="Client">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Middle" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Right" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
    </context>
  </mouse>
  <!-- Every window maximized: the browser fills the screen at a known place. -->
  <applications>
    <application class="*"><maximized>yes</maximized></application>
  </applications>
</openbox_config>
"""
"""The window manager's configuration, written to the runtime folder at start."""


@dataclass
class DesktopSession:
    """Xvfb + window manager + Chromium, started and stopped as one unit.

    Args:
        config: the daemon's configuration (screen size, display, Chromium flags).
    """

    config: AgentdConfig
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    baseline: dict[str, bytes] = field(default_factory=dict)
    frame_interval_s: float = refresh.frame_interval_s(refresh.FALLBACK_REFRESH_HZ)
    """The time between two of Chromium's frames on this session's display, seconds
    (set by :meth:`apply_refresh_rate`)."""

    def start(self) -> socket.socket:
        """Start Xvfb, the window manager and Chromium; return when all three answer.

        Returns:
            The daemon's end of Chromium's DevTools pipe (see :meth:`start_browser`).

        Raises:
            SessionError: a binary is missing, a process exits early, or it does not
                become ready within :data:`STARTUP_TIMEOUT_S`.
        """
        self.start_display()
        self.start_wm()
        return self.start_browser()

    def start_display(self, activate: bool = True) -> None:
        """(Re)start Xvfb with a fresh cookie and wait until its socket exists. A dead
        server's socket and lock file are removed first; ``XAUTHORITY`` in the daemon's
        environment then names the new authority file (see the module's docstring).

        Args:
            activate: point the daemon's ``XAUTHORITY`` at the new file (:meth:`activate`);
                ``False`` for a standby session (:mod:`deskpod.agentd.standby`).

        Raises:
            SessionError: Xvfb is missing, exits during start, does not answer in time,
                or its authority file cannot be written.
        """
        cfg = self.config
        for stale in self._x_files():
            stale.unlink(missing_ok=True)
        cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        cookie = secrets.token_bytes(COOKIE_BYTES)
        try:
            write_xauthority(self.xauthority, self._display_number, cookie)
        except OSError as exc:
            raise SessionError(f"xvfb: cannot write its authority file: {exc.strerror or exc}") from exc
        if activate:
            self.activate()
        screen = f"{cfg.screen.width}x{cfg.screen.height}x24"
        argv = [
            "Xvfb", cfg.display, "-screen", "0", screen, "-dpi", "96",
            "-auth", str(self.xauthority), "-nolisten", "local", "-nolisten", "tcp",
        ]
        self._spawn("xvfb", argv, self._env())
        self._wait("xvfb", self._display_ready)
        self.apply_refresh_rate()

    def apply_refresh_rate(self) -> None:
        """Give the running X server the configured refresh rate (``config.display_refresh_hz``,
        see :mod:`deskpod.agentd.display.refresh`) before a Chromium starts on it, with this
        session's cookie: in the daemon when its ``XAUTHORITY`` names this session's file,
        else (a standby session) in a short-lived ``python -m deskpod.agentd.display.refresh``
        with this session's environment. When the server refuses, the failure is logged
        and :attr:`frame_interval_s` stays at Chromium's 60 Hz fallback; the session runs on."""
        self.frame_interval_s = refresh.frame_interval_s(refresh.FALLBACK_REFRESH_HZ)
        refusal = self._refresh_refusal()
        if refusal is not None:
            log.warning("the display keeps 60 Hz: %s", refusal)
            return
        self.frame_interval_s = refresh.frame_interval_s(self.config.display_refresh_hz)

    def _refresh_refusal(self) -> str | None:
        """Set the refresh rate as :meth:`apply_refresh_rate` says; returns why it was not
        set, or ``None`` when it was."""
        cfg = self.config
        if os.environ.get("XAUTHORITY") == str(self.xauthority):
            try:
                refresh.apply_refresh_rate(cfg.display, cfg.screen, cfg.display_refresh_hz)
            except refresh.RefreshRateError as exc:
                return exc.message
            return None
        argv = [sys.executable, "-m", "deskpod.agentd.display.refresh", cfg.display,
                f"{cfg.screen.width}x{cfg.screen.height}", str(cfg.display_refresh_hz)]
        try:
            done = subprocess.run(argv, env=self._env(), capture_output=True,  # noqa: S603 - fixed argv
                                  timeout=_REFRESH_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        if done.returncode != 0:
            return done.stderr.decode(errors="replace")[-500:].strip()
        return None

    def activate(self) -> None:
        """Point ``XAUTHORITY`` in the daemon's environment (read by its own X clients:
        XTEST input, capture) at this session's authority file."""
        os.environ["XAUTHORITY"] = str(self.xauthority)

    def _env(self) -> dict[str, str]:
        """The environment of this session's processes: its display, its authority file
        and its home folder (``config.home_dir``)."""
        return dict(os.environ, DISPLAY=self.config.display, XAUTHORITY=str(self.xauthority),
                    HOME=str(self.config.home_dir))

    def process_tree(self) -> frozenset[int]:
        """The pids of this session's processes and of all their descendants (Chromium's
        zygotes, renderers and helpers), read from ``/proc``."""
        parents: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
        found: set[int] = set()
        todo = [proc.pid for proc in self.processes.values() if proc.poll() is None]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo += parents.get(pid, [])
        return frozenset(found)

    @property
    def xauthority(self) -> Path:
        """The X authority file the running X server reads its cookie from."""
        return self.config.runtime_dir / XAUTHORITY_NAME

    @property
    def _display_number(self) -> str:
        return self.config.display.lstrip(":").split(".")[0]

    def _x_files(self) -> tuple[Path, Path]:
        """This session's X server's Unix socket and lock file, in ``/tmp``."""
        number = self._display_number
        return Path(f"/tmp/.X11-unix/X{number}"), Path(f"/tmp/.X{number}-lock")

    @property
    def profile_dir(self) -> Path:
        """Chromium's profile folder."""
        return self.config.runtime_dir / PROFILE_DIR_NAME

    def start_wm(self) -> None:
        """(Re)start the window manager on the running display.

        Raises:
            SessionError: no window manager is installed.
        """
        cfg = self.config
        cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        wm = shutil.which("openbox") or shutil.which("matchbox-window-manager")
        if wm is None:
            raise SessionError("no window manager (openbox or matchbox-window-manager) is installed")
        argv = [wm]
        if Path(wm).name == "openbox":
            rc = cfg.runtime_dir / "openbox-rc.xml"
            rc.write_text(OPENBOX_RC, encoding="utf-8")
            argv += ["--config-file", str(rc)]
        self._spawn("wm", argv, self._env())

    def start_browser(self, url: str | None = None) -> socket.socket:
        """(Re)start Chromium on the running display with one end of a new Unix socket
        pair as its DevTools fds 3 (commands in) and 4 (replies and events out), and
        wait until it answers there. The daemon's copy of Chromium's end is closed.

        Args:
            url: the page to open; ``None``: the configured start page.

        Returns:
            The daemon's end, for :meth:`deskpod.agentd.browser.cdp.Browser.attach` (which then
            owns it).

        Raises:
            SessionError: Chromium exits during start or does not answer in time.
        """
        self.profile_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.trust_operator_cas()
        argv = chromium_args(self.config, self.profile_dir, url)
        ours, theirs = socket.socketpair()
        try:
            self._spawn("chromium", argv, chromium_env(self._env()), theirs.fileno())
        except SessionError:
            ours.close()
            raise
        except OSError as exc:
            ours.close()
            raise SessionError(f"chromium: it could not be started: {exc}") from exc
        finally:
            theirs.close()
        try:
            ours.sendall(_DEVTOOLS_PING)
            self._wait("chromium", lambda: _answered(ours))
        except SessionError:
            ours.close()
            raise
        except OSError as exc:
            ours.close()
            raise self._start_failure("chromium", f"its DevTools pipe failed: {exc}") from exc
        return ours

    def trust_operator_cas(self) -> list[TrustedCaError]:
        """Import the operator's CA certificates (``config.trusted_cas``) into the NSS
        database Chromium reads in ``config.home_dir``; see :mod:`deskpod.agentd.browser.trusted_ca`.
        Called before every Chromium start (a reset empties the home folder).

        Returns:
            The errors, one per bad certificate or failed import (already logged); the browser
            starts anyway, without those certificates.
        """
        cas, errors = load_trusted_cas(self.config.trusted_cas)
        return errors + import_into_nss(cas, self.config.home_dir)

    def stop_browser(self, asked: bool = False) -> None:
        """Stop Chromium cleanly so that it writes cookies and storage to disk, killing it
        after :data:`BROWSER_STOP_TIMEOUT_S`. Nothing happens when it is not running.

        Args:
            asked: Chromium was already asked to quit (``Browser.close`` over DevTools):
                wait for it before sending SIGTERM.
        """
        proc = self.processes.get("chromium")
        if asked and proc is not None:
            try:
                proc.wait(BROWSER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("chromium did not quit after Browser.close")
        self._stop("chromium", BROWSER_STOP_TIMEOUT_S)

    def exited(self, name: str) -> bool:
        """True when process ``name`` (``"xvfb"``, ``"wm"`` or ``"chromium"``) does not
        run: it exited (it is reaped here), or it was stopped or never started."""
        proc = self.processes.get(name)
        return proc is None or proc.poll() is not None

    def pid(self, name: str) -> int | None:
        """The pid of process ``name`` while it runs, else ``None``."""
        proc = self.processes.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill_desktop(self) -> None:
        """SIGKILL Chromium, the window manager and the X server (no clean shutdown) and
        reap them. The killed X server cannot remove its socket
        and lock file, so this does (:meth:`_remove_x_files`)."""
        for name in ("chromium", "wm", "xvfb"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                proc.kill()
                proc.wait()
                if name == "xvfb":
                    self._remove_x_files(proc.pid)

    def _remove_x_files(self, pid: int) -> None:
        """Remove the socket and lock file of this session's display when the lock file
        names ``pid`` (the X server just reaped); a lock another server holds stays, as
        does its socket. The lock file holds the owner's pid in ASCII (Xorg's
        ``os/utils.c``, ``LockServer``)."""
        socket_path, lock = self._x_files()
        try:
            owner = int(lock.read_text().strip())
        except (OSError, ValueError):
            return
        if owner != pid:
            return
        socket_path.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)

    def alive(self) -> dict[str, bool]:
        """Return ``{name: running}`` for each session process."""
        return {name: proc.poll() is None for name, proc in self.processes.items()}

    def stop(self) -> None:
        """Terminate the processes in reverse start order, killing any that linger."""
        for name in reversed(list(self.processes)):
            self._stop(name, _STOP_TIMEOUT_S)

    def wipe(self, folders: tuple[Path, ...]) -> list[str]:
        """Empty ``folders`` (a reset's writable paths; the X server is stopped first,
        its socket and lock file in ``/tmp`` go too).

        Args:
            folders: the folders to empty; ones that do not exist are skipped.

        Returns:
            ``"path: reason"`` for every entry that could not be removed (empty when all went).
        """
        failures = []
        for folder in folders:
            try:
                clear_folder(str(folder))
            except OSError as exc:
                failures.append(f"{exc.filename or folder}: {exc.strerror or exc}")
        return failures

    def capture_baseline(self) -> None:
        """Keep the home folder's baseline files as they are now (call once, at start,
        before any connection is accepted; :func:`~deskpod.agentd.baseline.capture_baseline`)."""
        self.baseline = capture_baseline(self.config.home_dir)

    def restore_baseline(self) -> None:
        """Write the files :meth:`capture_baseline` kept back into the (wiped) home folder.

        Raises:
            OSError: a file could not be written.
        """
        restore_baseline(self.config.home_dir, self.baseline)

    def _stop(self, name: str, timeout_s: float) -> None:
        proc = self.processes.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s ignored SIGTERM; killing it", name)
            proc.kill()
            proc.wait()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], devtools: int | None = None) -> None:
        """Start ``argv``; ``devtools``: Chromium's end of its DevTools socket pair, which
        becomes its fds 3 and 4 (see :data:`_DEVTOOLS_FDS`)."""
        if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
            raise SessionError(f"{name}: {argv[0]} is not installed")
        stdin = subprocess.DEVNULL
        if devtools is not None:
            argv, stdin = ["/bin/sh", "-c", _DEVTOOLS_FDS, *argv], devtools
        log.info("starting %s", name)
        self.config.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.processes[name] = subprocess.Popen(  # noqa: S603 - fixed argv, no agent input
            argv,
            env=env,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=open(self.config.runtime_dir / f"{name}.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )

    def _wait(self, name: str, ready: object) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        proc = self.processes[name]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise self._start_failure(name, "exited")
            if ready():  # type: ignore[operator]
                log.info("%s is ready", name)
                return
            time.sleep(0.01)
        raise SessionError(f"{name} did not become ready within {STARTUP_TIMEOUT_S:.0f} s: {self._log_tail(name)}")

    def _start_failure(self, name: str, what: str) -> SessionError:
        """The error of ``name``'s failed start: its exit status and log tail once it has
        exited (waited for up to :data:`_EXIT_WAIT_S`: a process that exits at once breaks
        its DevTools pipe first), else ``what`` went wrong."""
        try:
            code = self.processes[name].wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return SessionError(f"{name}: {what}")
        return SessionError(f"{name} exited with status {code} during start: {self._log_tail(name)}")

    def _log_tail(self, name: str) -> str:
        try:
            return (self.config.runtime_dir / f"{name}.log").read_text(errors="replace")[-800:].strip()
        except OSError:
            return ""

    def _display_ready(self) -> bool:
        return self._x_files()[0].exists()


def _answered(devtools: socket.socket) -> bool:
    """Whether Chromium's answer to :data:`_DEVTOOLS_PING` can be read from ``devtools``
    (left there: only peeked at).

    Raises:
        BrokenPipeError: Chromium closed its end (a closed end also reads as readable).
    """
    if not select.select([devtools], [], [], 0)[0]:
        return False
    if devtools.recv(1, socket.MSG_PEEK):
        return True
    raise BrokenPipeError(errno.EPIPE, "Chromium closed its end")


@dataclass(frozen=True)
class EarlyStart:
    """A desktop session started in a thread of its own before the daemon's server is
    built: the daemon's imports and the building of its app then run while Xvfb, the
    window manager and Chromium start (Chromium's start is most of a cold start).

    Attributes:
        session: the session being started.
        devtools: the future of :meth:`DesktopSession.start`'s result (the daemon's end
            of Chromium's DevTools pipe); it raises :class:`SessionError` when the
            session could not start.
    """

    session: DesktopSession
    devtools: Future[socket.socket]

    @classmethod
    def begin(cls, config: AgentdConfig) -> EarlyStart:
        """Start a :class:`DesktopSession` for ``config`` and return at once."""
        session = DesktopSession(config)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="desktop-start")
        try:
            return cls(session, pool.submit(session.start))
        finally:
            pool.shutdown(wait=False)
