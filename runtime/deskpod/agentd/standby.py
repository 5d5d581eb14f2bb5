"""A standby desktop for fast in-place resets: the next tenant's X server and browser, started early.

Most of an in-place reset used to be Chromium's start (about half a second on two
shared cores) and its first page. So after each reset (and at daemon start) the daemon
starts, in the background, a second, complete desktop session on the *other* display
of a pair (``:99`` and ``:100``; the configured display and the next number): its own
Xvfb with its own fresh cookie, its own window manager and its own Chromium at
``about:blank`` with a fresh profile, every file of it in its own folder
(:func:`seat_config`: runtime folder ``/tmp/deskpod-seat1`` with the home folder
inside, for the second seat). The next reset kills everything else (the old session and
anything of the sandbox's user not in the standby's process tree), wipes every
writable path except the standby's folders and X socket, then swaps the standby in:
the daemon's X connections and DevTools client move to it and it loads the start page.
The new standby is started after the reply, while the new tenant works.

What the tenant can reach of the standby while it waits: nothing it could before
cannot. Its X server admits only its own cookie, which no display grant ever hands
out (a grant names the active display); its DevTools pipe is a socket pair only the
daemon holds; its files are its own user's, like everything in the sandbox. What it
changes: the standby is started during the previous tenant's lease, as the same user
as that tenant's browser. A tenant who escaped Chromium's sandbox into its browser
process (that user) could tamper with the standby's profile or processes and so reach
the next tenant; without the standby, such an escape ended at the reset. So it is opt-in
(``DESKPOD_STANDBY_BROWSER=on``); without it a reset starts a new desktop as before.
See SECURITY.md ("Reset").
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from deskpod.agentd.config import AgentdConfig, seat_runtime_dir
from deskpod.agentd.workspace.confined import clear_folder, write_files
from deskpod.agentd.session import DesktopSession
from deskpod.errors import DeskpodError

__all__ = ["STANDBY_URL", "Standby", "StandbyDesktop", "seat_config", "wipe_around"]

log = logging.getLogger(__name__)

STANDBY_URL = "about:blank"
"""The page a standby Chromium waits on; the reset then loads the start page."""


def seat_config(config: AgentdConfig, seat: int) -> AgentdConfig:
    """The configuration of desktop seat ``seat`` (0 or 1).

    Seat 0 is the configured one (``config.display``, ``config.runtime_dir``,
    ``config.home_dir``). Seat 1 uses the next display number and the runtime folder
    ``<runtime_dir>-seat1`` with its home folder inside (``home``).

    Args:
        config: the daemon's configuration.
        seat: 0 or 1.

    Returns:
        The seat's configuration.
    """
    if seat == 0:
        return config
    number = int(config.display.lstrip(":").split(".")[0]) + 1
    runtime = seat_runtime_dir(config.runtime_dir, 1)
    return replace(config, display=f":{number}", runtime_dir=runtime, home_dir=runtime / "home")


@dataclass
class StandbyDesktop:
    """A started standby session and the daemon's end of its Chromium's DevTools pipe."""

    session: DesktopSession
    pipe: socket.socket
    seat: int

    def alive(self) -> bool:
        """True while its X server, window manager and Chromium all run."""
        return not any(self.session.exited(name) for name in ("xvfb", "wm", "chromium"))

    def discard(self) -> None:
        """Kill its processes and close its pipe."""
        self.pipe.close()
        self.session.kill_desktop()


def _start(config: AgentdConfig, seat: int, baseline: dict[str, bytes]) -> StandbyDesktop:
    """Start a complete desktop on seat ``seat`` (blocking; run in a thread)."""
    session = DesktopSession(config)
    session.baseline = dict(baseline)
    clear_folder(str(config.runtime_dir))
    config.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.home_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    clear_folder(str(config.home_dir))
    write_files(str(config.home_dir), baseline.items(), 0o644)
    try:
        session.start_display(activate=False)
        session.start_wm()
        pipe = session.start_browser(STANDBY_URL)
    except BaseException:
        session.kill_desktop()
        raise
    return StandbyDesktop(session, pipe, seat)


class Standby:
    """The standby desktop of one daemon: started in the background, taken at a reset.

    Args:
        config: the daemon's configuration (seat 0).
    """

    def __init__(self, config: AgentdConfig) -> None:
        self.config = config
        self._task: asyncio.Task[StandbyDesktop] | None = None

    def prepare(self, seat: int, baseline: dict[str, bytes]) -> None:
        """Start the standby desktop on seat ``seat`` in the background (one at a time;
        a previous one not taken is discarded)."""
        self.close()
        self._task = asyncio.create_task(asyncio.to_thread(_start, seat_config(self.config, seat), seat, baseline))

    async def take(self) -> StandbyDesktop | None:
        """Wait for the standby being started and hand it over.

        Returns:
            The standby, or ``None`` when none was prepared, it failed to start (logged)
            or one of its processes has died since.
        """
        task, self._task = self._task, None
        if task is None:
            return None
        try:
            desktop = await task
        except (DeskpodError, OSError) as exc:
            log.warning("the standby desktop did not start: %s", exc)
            return None
        if not desktop.alive():
            log.warning("the standby desktop died while it waited; a reset starts a new one")
            desktop.discard()
            return None
        return desktop

    def close(self) -> None:
        """Discard the standby (started or starting)."""
        task, self._task = self._task, None
        if task is None:
            return
        if task.done():
            if not task.cancelled() and task.exception() is None:
                task.result().discard()
            return
        task.add_done_callback(lambda t: t.result().discard() if not t.cancelled() and t.exception() is None
                               else None)


def wipe_around(folders: tuple[Path, ...], keep: DesktopSession, x_dir: Path = Path("/tmp")) -> list[str]:
    """Empty ``folders`` like :meth:`DesktopSession.wipe`, except the files of session
    ``keep`` (the standby being swapped in): its runtime and home folders, its X server's
    socket in ``.X11-unix`` and its lock file. Everything else in the X socket folder goes.

    Args:
        folders: the reset's writable paths.
        keep: the session whose files stay.
        x_dir: where the X servers keep ``.X11-unix`` and their lock files.

    Returns:
        ``"path: reason"`` for every entry that could not be removed.
    """
    display = keep.config.display.lstrip(":").split(".")[0]
    sockets = x_dir / ".X11-unix"
    kept = {keep.config.runtime_dir, keep.config.home_dir, x_dir / f".X{display}-lock", sockets}
    failures = []
    for folder in folders:
        if folder in kept:
            continue
        names = frozenset(p.name for p in kept if p.parent == folder)
        try:
            clear_folder(str(folder), names)
        except OSError as exc:
            failures.append(f"{exc.filename or folder}: {exc.strerror or exc}")
    try:
        clear_folder(str(sockets), frozenset({f"X{display}"}))
    except OSError as exc:
        failures.append(f"{exc.filename or sockets}: {exc.strerror or exc}")
    return failures
