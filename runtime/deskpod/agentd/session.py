"""The desktop session inside the sandbox: Xvfb, a window manager and Chromium.

The daemon owns these processes: :class:`DesktopSession` starts them in order,
waits until each answers, and stops them. Chromium always keeps its own sandbox
(``--no-sandbox`` is never passed); its DevTools port binds to 127.0.0.1 inside
the container, so only the daemon can reach it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.agentd.cdp import get_json
from deskpod.agentd.config import AgentdConfig
from deskpod.errors import DeskpodError

__all__ = ["DesktopSession", "SessionError", "chromium_args", "OPENBOX_RC", "STARTUP_TIMEOUT_S"]

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0
"""How long each process may take to become ready at start."""

_STOP_TIMEOUT_S = 5.0

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


class SessionError(DeskpodError):
    """A session process could not be started or died during start."""

    code = "internal"


def chromium_args(config: AgentdConfig, profile_dir: Path) -> list[str]:
    """Return Chromium's argv for ``config``.

    Flags that stop Chromium from calling Google's hosts come from DESIGN.md
    ("Start Chromium with --disable-background-networking ...").
    """
    args = [
        config.chromium,
        f"--user-data-dir={profile_dir}",
        f"--remote-debugging-port={config.cdp_port}",
        "--remote-debugging-address=127.0.0.1",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-breakpad",
        "--disable-gpu",
        "--password-store=basic",
        "--hide-crash-restore-bubble",
        "--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider",
        "--window-position=0,0",
        f"--window-size={config.screen.width},{config.screen.height}",
        "--start-maximized",
    ]
    if config.proxy:
        args.append(f"--proxy-server={config.proxy}")
    args.append(config.start_url)
    return args


@dataclass
class DesktopSession:
    """Xvfb + window manager + Chromium, started and stopped as one unit.

    Args:
        config: the daemon's configuration (screen size, display, Chromium flags).
    """

    config: AgentdConfig
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> None:
        """Start Xvfb, the window manager and Chromium; return when all three answer.

        Raises:
            SessionError: a binary is missing, a process exits early, or it does not
                become ready within :data:`STARTUP_TIMEOUT_S`.
        """
        cfg = self.config
        cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, DISPLAY=cfg.display)
        screen = f"{cfg.screen.width}x{cfg.screen.height}x24"
        self._spawn("xvfb", ["Xvfb", cfg.display, "-screen", "0", screen, "-nolisten", "tcp", "-dpi", "96"], env)
        self._wait("xvfb", self._display_ready)
        wm = shutil.which("openbox") or shutil.which("matchbox-window-manager")
        if wm is None:
            raise SessionError("no window manager (openbox or matchbox-window-manager) is installed")
        argv = [wm]
        if Path(wm).name == "openbox":
            rc = cfg.runtime_dir / "openbox-rc.xml"
            rc.write_text(OPENBOX_RC, encoding="utf-8")
            argv += ["--config-file", str(rc)]
        self._spawn("wm", argv, env)
        self.start_browser()

    def start_browser(self) -> None:
        """(Re)start Chromium on the running display and wait until DevTools answers.

        Raises:
            SessionError: Chromium exits during start or does not answer in time.
        """
        profile = self.config.runtime_dir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        self._spawn("chromium", chromium_args(self.config, profile), dict(os.environ, DISPLAY=self.config.display))
        self._wait("chromium", self._cdp_ready)

    def browser_exited(self) -> bool:
        """True when this session started Chromium and it has exited (it is reaped here)."""
        proc = self.processes.get("chromium")
        return proc is not None and proc.poll() is not None

    def alive(self) -> dict[str, bool]:
        """Return ``{name: running}`` for each session process."""
        return {name: proc.poll() is None for name, proc in self.processes.items()}

    def stop(self) -> None:
        """Terminate the processes in reverse start order, killing any that linger."""
        for name, proc in reversed(list(self.processes.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    log.warning("%s ignored SIGTERM; killing it", name)
                    proc.kill()
                    proc.wait()
        self.processes.clear()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
            raise SessionError(f"{name}: {argv[0]} is not installed")
        log.info("starting %s", name)
        self.processes[name] = subprocess.Popen(  # noqa: S603 - fixed argv, no agent input
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.config.runtime_dir / f"{name}.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )

    def _wait(self, name: str, ready: object) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        proc = self.processes[name]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = self._log_tail(name)
                raise SessionError(f"{name} exited with status {proc.returncode} during start: {tail}")
            if ready():  # type: ignore[operator]
                log.info("%s is ready", name)
                return
            time.sleep(0.05)
        raise SessionError(f"{name} did not become ready within {STARTUP_TIMEOUT_S:.0f} s: {self._log_tail(name)}")

    def _log_tail(self, name: str) -> str:
        try:
            return (self.config.runtime_dir / f"{name}.log").read_text(errors="replace")[-800:].strip()
        except OSError:
            return ""

    def _display_ready(self) -> bool:
        number = self.config.display.lstrip(":").split(".")[0]
        return Path(f"/tmp/.X11-unix/X{number}").exists()

    def _cdp_ready(self) -> bool:
        try:
            targets = get_json(f"http://127.0.0.1:{self.config.cdp_port}/json/list", timeout_s=1.0)
        except (OSError, ValueError):
            return False
        return any(t.get("type") == "page" for t in targets)
