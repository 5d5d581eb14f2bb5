"""The daemon's parts and their life: start, the session watcher, reset, snapshots.

:class:`Daemon` holds what one agentd runs: the desktop session
(:mod:`deskpod.agentd.session`, with its standby: :mod:`deskpod.agentd.standby`), the
serial executor, the DevTools client, the observer, the workspace runner's client, the
egress grants, the X gate (:mod:`deskpod.agentd.display.xgate`: display grants) and the
live streams.

Session processes (Xvfb, window manager, Chromium) are stopped and started only
while the executor lock is held: by a reset, a snapshot, a restore, and the
session watcher, which restarts whatever died (every
:data:`SESSION_CHECK_INTERVAL_S`) and reports it in the next observation's
``events``; requests that arrive meanwhile wait for it instead of getting
``busy``. A reset also rotates the control token: the new SHA-256 applies
from the moment the fresh state is ready, and every connection made with the
old token is closed once the reset's reply is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import threading
import time
from typing import Protocol

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from deskpod.agentd.apps_client import AppsClient
from deskpod.agentd.clipboard_bridge import ClipboardBridge
from deskpod.agentd.browser import snapshot
from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.browser.download_gate import DownloadGate
from deskpod.agentd.browser.downloads import DownloadsFolder
from deskpod.agentd.browser.file_chooser import FileSetter
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.display.live import LiveStreams
from deskpod.agentd.display.xgate import XGate
from deskpod.agentd.executor import Executor
from deskpod.agentd.secret_mask import SecretMask
from deskpod.agentd.ipc import remove_ipc_objects
from deskpod.agentd.native_files import NativeFileDialog
from deskpod.agentd.observe import Observer
from deskpod.agentd.session import DesktopSession, EarlyStart
from deskpod.agentd.standby import Standby, StandbyDesktop, wipe_around
from deskpod.agentd.workspace.egress_grants import EgressGrants
from deskpod.agentd.workspace.process import in_sandbox, kill_own_processes
from deskpod.agentd.runner_wire import X11Grant
from deskpod.agentd.workspace.runner_client import RunnerClient
from deskpod.errors import ActionTimeoutError, DeskpodError, ExecutionError, NavigationError
from deskpod.protocol import (
    MAX_SERVER_MESSAGE_BYTES,
    CoordinateMap,
    Observation,
    PermissionGrants,
    ResetRequest,
    Size,
)

__all__ = ["BROWSER_READY_TIMEOUT_S", "Client", "Daemon", "RESET_WORKSPACE_WAIT_S", "SESSION_CHECK_INTERVAL_S"]

log = logging.getLogger(__name__)

SESSION_CHECK_INTERVAL_S = 0.5
"""How often the daemon checks that Xvfb, the window manager and Chromium still run (the heartbeat)."""

RESET_WORKSPACE_WAIT_S = 10.0
"""How long a reset waits for a running workspace request to end after its processes were killed."""

BROWSER_READY_TIMEOUT_S = 15.0
"""How long a reset, snapshot or restore waits for the restarted browser's first page to load."""


class Client(Protocol):
    """What the daemon knows of a control connection: the token it was made with, and
    the event that cancels its running request."""

    token_sha256: str
    cancel: threading.Event


class _Phases:
    """Wall time of a request's (or the start's) phases, for its log line: :meth:`mark` ends a phase."""

    def __init__(self) -> None:
        self.started_s = self._last_s = time.perf_counter()
        self.spent: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        """End the phase ``name`` (it began at the previous mark or at the start)."""
        now = time.perf_counter()
        self.spent.append((name, now - self._last_s))
        self._last_s = now

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {seconds:.3f}" for name, seconds in self.spent)
        return f"{self._last_s - self.started_s:.3f} s: {parts}"


class Daemon:
    """The daemon's parts and their life: the desktop session, the executor, the
    DevTools client, the observer, the workspace runner's client, the egress grants, the X gate and
    the live streams; starting them, restarting what died, resetting, snapshots.

    Args:
        config: the daemon's settings.
        early: a session already starting (:meth:`~deskpod.agentd.session.EarlyStart.begin`).
    """

    def __init__(self, config: AgentdConfig, early: EarlyStart | None = None) -> None:
        self.config = config
        self.session = early.session if early is not None else DesktopSession(config)
        self._early = early.devtools if early is not None else None
        self.executor = Executor(config.display)
        self.browser = Browser(config.device_scale_factor)
        self.observer = Observer(self.executor, self.browser, config.settle_by_signal,
                                 lambda: self.session.frame_interval_s)
        self.executor.elements = self.observer.elements
        self.download_gate = DownloadGate(self.browser)
        self.downloads_folder = DownloadsFolder()
        # Workspace requests go to the runner in the workspace container (uid 1001);
        # this lock keeps them one at a time and lets a reset wait for the running one.
        # Display grants go through the X gate to the X server the daemon runs (the
        # session's in force: an in-place reset swaps in the standby's); attached to a
        # display it did not start, the daemon grants none.
        self.xgate = XGate(6000 + int(config.display.lstrip(":").split(".")[0]), config.display_grant_host,
                           lambda: self.session.config.display) if config.manage_session else None
        grants = self.xgate.grant if self.xgate is not None else None
        self.observer.windows = self.xgate
        if self.xgate is not None:
            self.executor.agent_window = self.xgate.agent_window
        # Network-enabled commands get an egress grant for as long as they run.
        self.egress = EgressGrants()
        self.runner = RunnerClient(config.workspace_runner, grants, self.egress)
        # Desktop applications (the desktop profile) run in a zone of their own, each
        # with a display grant held until the next reset.
        self.apps = AppsClient(config.apps_runner, self._app_grant if self.xgate is not None else None)
        self.observer.native = self.apps if config.apps_runner else None
        self.executor.clipboard_bridge = ClipboardBridge(self.executor.clipboard, self.xgate,
                                                         self.apps.clipboard if config.apps_runner else None)
        self.workspace_lock = asyncio.Lock()
        files = FileSetter(self.browser, self.runner, self.workspace_lock)
        self.executor.set_files, self.executor.cancel_chooser = files, files.cancel
        if config.apps_runner and self.xgate is not None:
            native = NativeFileDialog(self.xgate, self.apps, lambda: self.browser.file_chooser is not None)
            self.executor.native_files = native.keys
        self.executor.drop_files = files.drop
        self.executor.insert_text = self.browser.insert_text
        self.executor.switch_tab = self.browser.switch_tab
        self.browser.window_title = self.executor.active_title
        self.screen = config.screen
        # Who this sandbox is, in every hello: fixed for the daemon's life, in-place resets included.
        self.sandbox_id = f"sbx-{secrets.token_hex(16)}"
        self.token_sha256 = config.token_sha256
        self.connections: dict[Client, WebSocket] = {}
        """The open control connections and their websockets."""
        self.live = LiveStreams(config.display)
        self.secret_mask = SecretMask(self.browser)
        """The secrets painted over every image and replaced in every text (until a reset)."""
        self.executor.mask_plan = self.live.mask_plan = self.secret_mask.plan
        self.observer.secret_mask = self.secret_mask
        # True while the heartbeat restarts a session process under the executor lock:
        # requests then wait for it instead of getting ``busy``.
        self.recovering = False
        # The next tenant's desktop, started after each reset (see deskpod.agentd.standby).
        self.seat = 0
        self.standby = Standby(config) if config.manage_session and config.standby_browser else None

    async def start(self) -> None:
        """Start the desktop session (unless ``manage_session`` is off), attach the
        DevTools client, open the X connections and grab one frame.

        Raises:
            SessionError: a session process did not start, or the X gate cannot listen.
            BrowserError: the DevTools pipe could not be used.
            InputError: the X server or XTEST is unavailable.
            CaptureError: the screen cannot be captured.
        """
        phases = _Phases()
        if self.xgate is not None:
            await self.xgate.start()
        if self.config.manage_session:
            if self._early is not None:
                early, self._early = self._early, None
                devtools = await asyncio.wrap_future(early)
            else:
                devtools = await asyncio.to_thread(self.session.start)
            phases.mark("desktop")
            await self.browser.attach(devtools)
            await self.browser.wait_ready(BROWSER_READY_TIMEOUT_S)
            phases.mark("page")
            await asyncio.to_thread(self.session.capture_baseline)
            phases.mark("baseline")
        width, height = await self.executor.start()
        self.screen = Size(width=width, height=height)
        phases.mark("capture")
        self._prepare_standby()
        log.info("started (%s)", phases)

    def _prepare_standby(self) -> None:
        """Start the standby desktop on the seat not in use (inside the sandbox only:
        outside it there is no in-place reset)."""
        if self.standby is not None and in_sandbox():
            self.standby.prepare(1 - self.seat, self.session.baseline)

    async def watch_session(self) -> None:
        """The heartbeat: restart whatever session process exited and report it in the
        next observation (``display_restarted``, ``window_manager_restarted``,
        ``browser_restarted``). Runs under the executor lock, after the running request;
        does nothing when the daemon attached to a session it did not start."""
        if not self.config.manage_session:
            return
        while True:
            await asyncio.sleep(SESSION_CHECK_INTERVAL_S)
            session = self.session
            if not (any(session.exited(name) for name in ("xvfb", "wm", "chromium")) or self.browser.channel_lost):
                continue
            async with self.executor.lock:
                self.recovering = True
                try:
                    await self._recover()
                except DeskpodError as exc:
                    log.error("session recovery failed: %s", exc.message)
                finally:
                    self.recovering = False

    async def _recover(self) -> None:
        session = self.session
        if session.exited("xvfb"):
            log.warning("the X server exited; restarting the display, window manager and browser")
            async with self.live.suspended("display_restarted", "the X server exited and was restarted"):
                await self.browser.close()
                await asyncio.to_thread(session.stop)
                await self.browser.attach(await asyncio.to_thread(session.start))
                await self.executor.reopen()
                await self.browser.wait_ready(BROWSER_READY_TIMEOUT_S)
            self.browser.events.append("display_restarted")
            return
        if session.exited("wm"):
            log.warning("the window manager exited; restarting it")
            await asyncio.to_thread(session.start_wm)
            self.browser.events.append("window_manager_restarted")
        if session.exited("chromium"):
            log.warning("the browser exited; restarting it")
            await self._start_browser()
            self.browser.events.append("browser_restarted")
        elif self.browser.channel_lost:
            # Chromium runs but its DevTools pipe is gone: without it the daemon cannot
            # read or drive the page, so Chromium is started again with a new pipe.
            log.warning("the browser's DevTools channel was lost; restarting the browser")
            await self.browser.close()
            await asyncio.to_thread(self.session.stop_browser)
            await self._start_browser()
            self.browser.events.append("browser_restarted")

    async def _start_browser(self, url: str | None = None) -> None:
        """(Re)start Chromium at ``url`` (``None``: the start page), attach the DevTools
        client to its new pipe and wait for its first page to load.

        Raises:
            SessionError: Chromium did not start.
            BrowserError: its DevTools pipe could not be used.
        """
        await self.browser.close()
        await self.browser.attach(await asyncio.to_thread(self.session.start_browser, url))
        await self.browser.wait_ready(BROWSER_READY_TIMEOUT_S)

    def _app_grant(self, lifetime_s: float, app: str) -> contextlib.AbstractAsyncContextManager[X11Grant]:
        """A display grant for the desktop application ``app`` (its windows' source)."""
        assert self.xgate is not None
        return self.xgate.grant(lifetime_s, source=app)

    async def reset(self, request: ResetRequest, coords: CoordinateMap,
                    max_reply_bytes: int = MAX_SERVER_MESSAGE_BYTES) -> Observation:
        """Stop every process (the X server included), wipe every writable folder, remove
        every IPC object, start a new X server (new cookie), the window manager and
        Chromium, and observe. The caller holds the executor lock.

        The workspace runner resets the agent's zone (kills every agent process, empties
        its folders and IPC objects): first at once when a workspace request runs (so
        its command dies and it answers), then again once no request runs, after the
        applications runner (the desktop profile) killed every desktop application and
        emptied its zone (their display grants revoked): nothing of either zone runs
        while ``/workspace``, which they share, is emptied.

        Raises:
            ExecutionError: not inside the sandbox container, or a folder could not be
                wiped, an IPC object removed or the workspace runner could not be reset
                (``detail["failures"]``; the desktop is restarted anyway).
            ActionTimeoutError: a workspace request did not end within
                :data:`RESET_WORKSPACE_WAIT_S`.
            SessionError: the X server, the window manager or Chromium did not start.
        """
        if not (self.config.manage_session and in_sandbox()):
            raise ExecutionError(
                "reset needs the sandbox container with a daemon-managed session", detail={"reason": "not_in_sandbox"}
            )
        phases = _Phases()
        standby = await self.standby.take() if self.standby is not None else None

        def spared() -> frozenset[int]:
            return standby.session.process_tree() if standby is not None else frozenset()

        self.observer.elements.table.clear()
        await self.browser.close()
        # A run's egress allowlist ends with the run: the fresh browser starts without one.
        self.browser.requests.set(None)
        # So do its permission grants: the fresh browser denies every permission.
        self.browser.permissions.grants = PermissionGrants()
        # A new X server, not the old one cleaned: whatever a client left on it (windows
        # kept with RetainPermanent, root-window properties, selections) goes with it,
        # and its cookie is replaced. Our own X connections are closed first.
        await self.executor.disconnect()
        await asyncio.to_thread(kill_own_processes, spared())
        phases.mark("stop")
        failures: list[str] = []
        if self.workspace_lock.locked():
            try:
                await self.runner.reset()
            except DeskpodError as exc:
                log.warning("preempting the running workspace request failed: %s", exc.message)
        try:
            await asyncio.wait_for(self.workspace_lock.acquire(), RESET_WORKSPACE_WAIT_S)
        except TimeoutError as exc:
            raise ActionTimeoutError(
                f"a workspace request did not end within {RESET_WORKSPACE_WAIT_S:.0f} s of the reset",
                detail={"reason": "workspace_busy"},
            ) from exc
        try:
            # No egress grant outlives a reset.
            self.egress.revoke_all()
            # Again: nothing may have started in between, and the session's own
            # processes must be reaped before their folders go.
            await asyncio.to_thread(kill_own_processes, spared())
            # The desktop applications first: they share /workspace, and one still running
            # would write there after the workspace runner emptied it.
            try:
                if (cleared := await self.apps.reset()) is not None:
                    failures += [f"applications: {f}" for f in cleared.failures]
            except DeskpodError as exc:
                failures.append(f"applications runner: {exc.message[:300]}")
            try:
                done = await self.runner.reset()
                failures += [f"workspace: {f}" for f in done.failures]
            except DeskpodError as exc:
                failures.append(f"workspace runner: {exc.message[:300]}")
            phases.mark("workspace")
            await asyncio.to_thread(self.session.kill_desktop)
            if standby is None:
                failures += await asyncio.to_thread(self.session.wipe, self.config.wipe_dirs)
            else:
                failures += await asyncio.to_thread(wipe_around, self.config.wipe_dirs, standby.session)
            failures += await asyncio.to_thread(remove_ipc_objects, spared())
            baseline = self.session.baseline
            if standby is None:
                # A new desktop on the configured display (seat 0), as at start.
                self.session = DesktopSession(self.config, baseline=baseline)
                self.seat = 0
            try:
                await asyncio.to_thread(DesktopSession(self.config, baseline=baseline).restore_baseline)
            except OSError as exc:
                failures.append(f"baseline: {exc.strerror or exc}")
        finally:
            self.workspace_lock.release()
        phases.mark("wipe")
        if standby is None:
            self.executor.display = self.config.display
            await asyncio.to_thread(self.session.start_display)
            await self.executor.reopen()
            await asyncio.to_thread(self.session.start_wm)
            await self._start_browser(request.start_url)
        else:
            await self._swap_in(standby, request.start_url)
        self.live.display = self.executor.display  # the next streams watch the desktop in force
        phases.mark("desktop")
        self.browser.take_events()
        self.secret_mask.clear()  # a run's secrets end with it: its browser is gone
        if failures:
            raise ExecutionError(
                f"reset could not clear {len(failures)} item(s)", detail={"reason": "wipe_failed", "failures": failures[:20]}
            )
        observation = await self.observer.observe(request.observe, coords, max_reply_bytes=max_reply_bytes)
        phases.mark("observe")
        self.token_sha256 = request.token_sha256
        log.info("reset done (%s; %s)", phases, "standby swapped in" if standby is not None else "new desktop")
        self._prepare_standby()
        return observation

    async def _swap_in(self, standby: StandbyDesktop, url: str | None) -> None:
        """Make the standby desktop the session: the daemon's X connections and DevTools
        client move to it, and its browser loads ``url`` (``None``: the start page).

        Raises:
            InputError: its X server or XTEST is unavailable.
            CaptureError: its screen cannot be captured.
            BrowserError: its DevTools pipe cannot be used.
        """
        standby.session.activate()
        self.session, self.seat = standby.session, standby.seat
        self.executor.display = standby.session.config.display
        await self.executor.reopen()
        await self.browser.close()
        await self.browser.attach(standby.pipe)
        try:
            await self.browser.navigate(url or self.config.start_url, BROWSER_READY_TIMEOUT_S)
        except NavigationError as exc:
            log.warning("the start page did not load after the reset: %s", exc.message)
        await self.browser.wait_ready(BROWSER_READY_TIMEOUT_S)
        await self.browser.reset_history()  # the standby's about:blank is not the tenant's history

    async def take_snapshot(self) -> bytes:
        """Stop Chromium cleanly, pack its session state (and the applications' zone's home,
        when there is one) and start it again at the page it showed. The caller holds the
        executor lock.

        Raises:
            SnapshotError: nothing to pack, or the archive is too large.
            SessionError: Chromium did not start again.
            DeskpodError: the applications' zone could not pack its home.
        """
        try:
            url = (await self.browser.state()).url
        except DeskpodError:
            url = None
        desktop = await self.apps.snapshot()
        asked = await self.browser.shut_down()
        await asyncio.to_thread(self.session.stop_browser, asked)
        try:
            return await asyncio.to_thread(snapshot.pack, self.session.profile_dir, desktop)
        finally:
            restart = url if url is not None and url.startswith(("http://", "https://")) else None
            await self._start_browser(restart)
            self.browser.take_events()

    async def restore(self, checked: snapshot.CheckedSnapshot, start_url: str | None) -> None:
        """Replace the browser profile with a checked snapshot and start Chromium at
        ``start_url``; the applications' zone's home it holds, if any, goes back to the zone. The
        caller holds the executor lock.

        Raises:
            SnapshotError: the files could not be written.
            SessionError: Chromium did not start.
            DeskpodError: the snapshot holds an applications' home and this sandbox has no such
                zone (``no_desktop``), or the zone refused it.
        """
        if checked.desktop is not None:
            await self.apps.restore(checked.desktop)
        await self.browser.close()
        await asyncio.to_thread(self.session.stop_browser)
        try:
            await asyncio.to_thread(snapshot.unpack, checked, self.session.profile_dir)
        finally:
            await self._start_browser(start_url)
            self.browser.take_events()

    async def close_stale(self) -> None:
        """Close every connection authenticated with a token other than the one in force."""
        for conn, websocket in list(self.connections.items()):
            if hmac.compare_digest(conn.token_sha256, self.token_sha256):
                continue
            conn.cancel.set()
            try:
                await websocket.close(code=1008, reason="the control token was rotated")
            except (RuntimeError, WebSocketDisconnect):
                pass

    async def stop(self) -> None:
        """Stop the X gate, the standby desktop, the DevTools client, the executor and the session."""
        if self.xgate is not None:
            await self.xgate.close()
        if self.standby is not None:
            self.standby.close()
        await self.browser.close()
        await self.executor.close()
        await asyncio.to_thread(self.session.stop)
