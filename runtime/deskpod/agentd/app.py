"""The daemon's HTTP and websocket surface (FastAPI).

- ``GET /healthz``: 200 when Xvfb, the window manager and Chromium run, else 503.
- ``WS /v1/ws``: the control channel of :mod:`deskpod.protocol`. The upgrade must
  carry ``Authorization: Bearer <token>``; a missing or wrong token, or an
  ``Origin`` not in ``DESKPOD_ALLOWED_ORIGINS``, is refused before the handshake
  completes (HTTP 403). The token is never logged.
- ``GET``/``PUT /v1/snapshot``: take and restore a browser snapshot (see
  :mod:`deskpod.protocol`, "Reset and snapshots"), with the same token check.
- ``WS /v1/live``: the live stream (:mod:`deskpod.protocol.live`, served by
  :mod:`deskpod.agentd.display.live`), with the control channel's token and Origin checks;
  it only watches (its one request is ``watch``).
- ``POST /v1/egress/check``: the egress proxy's question whether a credential is a
  live egress grant for a host (:mod:`deskpod.agentd.workspace.egress_grants`); no token, and
  the answer is only ``allowed`` true or false.

The daemon executes; it never decides policy. Every request gets exactly one
reply; bad input gets a typed error and the connection stays open. Each
connection may send :data:`RATE_LIMIT_MESSAGES_PER_S` messages per second on
average with bursts of :data:`RATE_LIMIT_BURST`; a message over that gets a
``rate_limited`` error without being carried out.

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
import hashlib
import hmac
import logging
import math
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from deskpod.agentd.browser import snapshot
from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.browser.download_gate import DownloadGate
from deskpod.agentd.browser.downloads import NAVIGATION_DOWNLOAD_WAIT_S, DownloadsFolder
from deskpod.agentd.workspace.egress_grants import (
    EGRESS_CHECK_PATH,
    MAX_CHECK_BODY_BYTES,
    EgressCheck,
    EgressCheckAnswer,
    EgressGrants,
)
from deskpod.agentd.batch import Batch, validate_batch
from deskpod.agentd.executor import Executor
from deskpod.agentd.browser.file_chooser import FileSetter
from deskpod.agentd.display.live import LiveStreams
from deskpod.agentd.ipc import remove_ipc_objects
from deskpod.agentd.observe import Observer
from deskpod.agentd.workspace.process import in_sandbox, kill_own_processes
from deskpod.agentd.session import DesktopSession, EarlyStart
from deskpod.agentd.standby import Standby, StandbyDesktop, wipe_around
from deskpod.agentd.workspace.runner_client import RunnerClient
from deskpod.agentd.workspace.tools import is_workspace_request
from deskpod.errors import (
    ActionTimeoutError,
    BusyError,
    DeskpodError,
    ExecutionError,
    InternalError,
    InvalidRequestError,
    MessageTooLargeError,
    NavigationError,
    ProtocolError,
    RateLimitedError,
    SnapshotError,
)
from deskpod.protocol import (
    MAX_SCREENSHOT_BASE64_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    MAX_SNAPSHOT_BYTES,
    MESSAGE_SIZE_HEADER,
    MIN_CLIENT_MESSAGE_BYTES,
    NO_INPUT_ACTION_TYPES,
    REPLY_TYPES,
    SNAPSHOT_PATH,
    SNAPSHOT_SHA256_HEADER,
    ActReply,
    ActRequest,
    AnyRequest,
    ConfigureReply,
    ConfigureRequest,
    CoordinateMap,
    EgressReply,
    EgressRequest,
    EgressState,
    ErrorBody,
    ErrorReply,
    ExecOutput,
    Hello,
    NavigateReply,
    NavigateRequest,
    Observation,
    Reply,
    ResetReply,
    ResetRequest,
    RestoreQuery,
    RunTestsOutput,
    Size,
    SnapshotRestored,
    TakeScreenshot,
    Truncation,
    WorkspaceOutput,
    encode_message,
    first_error,
    fit_within,
    parse_request,
    request_id,
)
from deskpod.protocol.live import LIVE_PATH
from deskpod.tokens import bearer_refusal

__all__ = [
    "BROWSER_READY_TIMEOUT_S",
    "MAX_PIPELINED_REQUESTS",
    "RATE_LIMIT_BURST",
    "RATE_LIMIT_MESSAGES_PER_S",
    "RESET_WORKSPACE_WAIT_S",
    "SESSION_CHECK_INTERVAL_S",
    "TokenBucket",
    "authorized",
    "create_app",
    "declared_message_bytes",
]

SESSION_CHECK_INTERVAL_S = 0.5
"""How often the daemon checks that Xvfb, the window manager and Chromium still run (the heartbeat)."""

RATE_LIMIT_MESSAGES_PER_S = 50.0
"""Messages per second one websocket connection may send on average (token bucket refill rate)."""

RATE_LIMIT_BURST = 100
"""Messages one connection may send at once before the rate limit applies (bucket size)."""

RESET_WORKSPACE_WAIT_S = 10.0
"""How long a reset waits for a running workspace request to end after its processes were killed."""

BROWSER_READY_TIMEOUT_S = 15.0
"""How long a reset, snapshot or restore waits for the restarted browser's first page to load."""

_HTTP_STATUS = {
    "unauthorized": 401, "busy": 409, "invalid_request": 400, "snapshot_failed": 400, "snapshot_corrupt": 400,
}

_REPLY_RESERVE_BYTES = 131_072
"""Bytes of a reply kept for everything but its images (the image limit of a client
that declares a small message size is half of what is left)."""

MAX_PIPELINED_REQUESTS = 8
"""Requests a connection may have read but not yet answered; the daemon stops
reading from that socket until one is answered."""

log = logging.getLogger(__name__)


def authorized(headers: dict[str, str], config: AgentdConfig, token_sha256: str | None = None) -> tuple[bool, str]:
    """Decide whether a websocket upgrade (or a snapshot request) may proceed.

    Args:
        headers: the request's headers, lower-case names.
        config: holds the token's SHA-256 at start and the accepted origins.
        token_sha256: the SHA-256 in force (after a reset rotated it); ``None``: the
            configured one.

    Returns:
        ``(ok, reason)``; ``reason`` never contains the token.
    """
    origin = headers.get("origin")
    if origin is not None and origin not in config.allowed_origins:
        return False, "origin not allowed"
    refusal = bearer_refusal(headers.get("authorization"), token_sha256 or config.token_sha256)
    if refusal is not None:
        return False, refusal
    return True, "ok"


def declared_message_bytes(headers: dict[str, str]) -> int | None:
    """The largest message the client reads, from :data:`~deskpod.protocol.MESSAGE_SIZE_HEADER`.

    Args:
        headers: the upgrade's headers, lower-case names.

    Returns:
        The declared bytes, :data:`~deskpod.protocol.MAX_SERVER_MESSAGE_BYTES` without
        the header, or ``None`` when the value is not a decimal number from
        :data:`~deskpod.protocol.MIN_CLIENT_MESSAGE_BYTES` to ``MAX_SERVER_MESSAGE_BYTES``.
    """
    value = headers.get(MESSAGE_SIZE_HEADER.lower())
    if value is None:
        return MAX_SERVER_MESSAGE_BYTES
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 12):
        return None
    size = int(value)
    return size if MIN_CLIENT_MESSAGE_BYTES <= size <= MAX_SERVER_MESSAGE_BYTES else None


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


class TokenBucket:
    """A token bucket: ``burst`` messages at once, refilled at ``rate_per_s`` per second.

    Args:
        rate_per_s: tokens added per second.
        burst: the bucket's size (and its content at start).
    """

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    def take(self) -> float:
        """Take one token.

        Returns:
            0.0 when one was available (and is now taken); otherwise the seconds
            until one will be, and nothing is taken.
        """
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate_per_s


class _Daemon:
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
        # Display grants come from the X server the daemon runs; attached to a display it
        # did not start, it has no cookie to grant.
        # (Of the session running now: an in-place reset swaps in the standby's.)
        grants = (lambda: self.session.display_grant()) if config.manage_session else None
        # Network-enabled commands get an egress grant for as long as they run.
        self.egress = EgressGrants()
        self.runner = RunnerClient(config.workspace_runner, grants, self.egress)
        self.workspace_lock = asyncio.Lock()
        self.executor.set_files = FileSetter(self.browser, self.runner, self.workspace_lock)
        self.executor.insert_text = self.browser.insert_text
        self.screen = config.screen
        # Who this sandbox is, in every hello: fixed for the daemon's life, in-place resets included.
        self.sandbox_id = f"sbx-{secrets.token_hex(16)}"
        self.token_sha256 = config.token_sha256
        self.connections: dict[_Connection, WebSocket] = {}
        self.live = LiveStreams(config.display)
        # True while the heartbeat restarts a session process under the executor lock:
        # requests then wait for it instead of getting ``busy``.
        self.recovering = False
        # The next tenant's desktop, started after each reset (see deskpod.agentd.standby).
        self.seat = 0
        self.standby = Standby(config) if config.manage_session and config.standby_browser else None

    async def start(self) -> None:
        phases = _Phases()
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

    async def reset(self, request: ResetRequest, coords: CoordinateMap,
                    max_reply_bytes: int = MAX_SERVER_MESSAGE_BYTES) -> Observation:
        """Stop every process (the X server included), wipe every writable folder, remove
        every IPC object, start a new X server (new cookie), the window manager and
        Chromium, and observe. The caller holds the executor lock.

        The workspace runner resets the agent's zone (kills every agent process, empties
        its folders and IPC objects): first at once when a workspace request runs (so
        its command dies and it answers), then again once no request runs.

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
        """Stop Chromium cleanly, pack its session state and start it again at the page
        it showed. The caller holds the executor lock.

        Raises:
            SnapshotError: nothing to pack, or the archive is too large.
            SessionError: Chromium did not start again.
        """
        try:
            url = (await self.browser.state()).url
        except DeskpodError:
            url = None
        asked = await self.browser.shut_down()
        await asyncio.to_thread(self.session.stop_browser, asked)
        try:
            return await asyncio.to_thread(snapshot.pack, self.session.profile_dir)
        finally:
            restart = url if url is not None and url.startswith(("http://", "https://")) else None
            await self._start_browser(restart)
            self.browser.take_events()

    async def restore(self, checked: snapshot.CheckedSnapshot, start_url: str | None) -> None:
        """Replace the browser profile with a checked snapshot and start Chromium at
        ``start_url``. The caller holds the executor lock.

        Raises:
            SnapshotError: the files could not be written.
            SessionError: Chromium did not start.
        """
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
        if self.standby is not None:
            self.standby.close()
        await self.browser.close()
        await self.executor.close()
        await asyncio.to_thread(self.session.stop)


class _Connection:
    def __init__(self, daemon: _Daemon, token_sha256: str, max_reply_bytes: int = MAX_SERVER_MESSAGE_BYTES) -> None:
        self.daemon = daemon
        self.token_sha256 = token_sha256
        self.max_reply_bytes = max_reply_bytes
        self.max_image_bytes = MAX_SCREENSHOT_BASE64_BYTES
        self.coords = CoordinateMap(daemon.screen)
        self.cancel = threading.Event()
        self.bucket = TokenBucket(RATE_LIMIT_MESSAGES_PER_S, RATE_LIMIT_BURST)

    def limited(self, raw: str | bytes, retry_after_s: float) -> str:
        """The ``rate_limited`` reply to a message that was not carried out."""
        err = RateLimitedError(
            f"more than {RATE_LIMIT_MESSAGES_PER_S:g} messages per second (bursts of {RATE_LIMIT_BURST}); "
            "the message was not carried out",
            detail={"retry_after_s": math.ceil(retry_after_s * 1000) / 1000},
        )
        return _error_reply(request_id(raw), err)

    async def handle(self, raw: str | bytes) -> str:
        request_id: str | None = None
        try:
            request = parse_request(raw)
            request_id = request.id
            # Workspace requests have their own lock: they never wait for the X11 executor.
            lock = self.daemon.workspace_lock if is_workspace_request(request) else self.daemon.executor.lock
            if lock.locked() and not (lock is self.daemon.executor.lock and self.daemon.recovering):
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with lock:
                self.cancel = threading.Event()
                # Two images (a screenshot and a zoom) and the rest of a reply fit the client's size.
                self.daemon.executor.max_image_base64_bytes = min(
                    self.max_image_bytes, (self.max_reply_bytes - _REPLY_RESERVE_BYTES) // 2
                )
                reply = await self._dispatch(request)
            return self._fit(reply)
        except DeskpodError as exc:
            if request_id is None and isinstance(exc, ProtocolError):
                rid = exc.detail.get("id")
                request_id = rid if isinstance(rid, str) else None
            log.info("request %s failed: %s", request_id, exc.code)
            return _error_reply(request_id, exc)
        except Exception as exc:  # the daemon must survive anything a request triggers
            log.exception("request %s: internal error", request_id)
            err = InternalError(f"internal error: {type(exc).__name__}")
            return _error_reply(request_id, err)

    def _fit(self, reply: Reply) -> str:
        """The encoded reply, within the client's message size: without its page text
        and accessibility summary if they make it too long (its ``truncated`` says so).

        Raises:
            MessageTooLargeError: the reply does not fit even so (reason ``"reply_too_large"``).
        """
        text = encode_message(reply)
        size = len(text.encode("utf-8", "surrogatepass"))
        observation = getattr(reply, "observation", None)
        if size > self.max_reply_bytes and isinstance(observation, Observation):
            truncated = (observation.truncated or Truncation()).model_copy(update={
                "page_text": observation.page_text is not None or (observation.truncated is not None
                                                                  and observation.truncated.page_text),
                "accessibility": observation.accessibility is not None or (observation.truncated is not None
                                                                          and observation.truncated.accessibility),
            })
            if truncated.accessibility and observation.accessibility is not None:
                truncated = truncated.model_copy(update={"accessibility_reason": "bytes"})
            slim = observation.model_copy(update={"page_text": None, "accessibility": None, "truncated": truncated})
            text = encode_message(reply.model_copy(update={"observation": slim}))
            size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.max_reply_bytes:
            raise MessageTooLargeError(
                f"the reply of {size} bytes is over the {self.max_reply_bytes} bytes this client reads",
                detail={"reason": "reply_too_large", "bytes": size, "max_bytes": self.max_reply_bytes},
            )
        return text

    async def _dispatch(self, request: AnyRequest) -> Reply:
        daemon = self.daemon
        started = time.perf_counter()
        if is_workspace_request(request):
            if daemon.downloads_folder.handles(request):
                output: WorkspaceOutput = await daemon.downloads_folder.serve(request)
            else:
                output = await daemon.runner.workspace(request, self.cancel)
            extra = f" exit={output.exit_code}" if isinstance(output, (ExecOutput, RunTestsOutput)) else ""
            log.info("request %s: %s%s (%.3f s)", request.id, request.type, extra, time.perf_counter() - started)
            return REPLY_TYPES[type(request)].model_validate({"id": request.id, "workspace": output})
        if isinstance(request, ResetRequest):
            async with daemon.live.suspended("reset", "the sandbox was reset: connect with the new token"):
                observation = await daemon.reset(request, self.coords, self.max_reply_bytes)
            return ResetReply(id=request.id, observation=observation)
        if isinstance(request, ConfigureRequest):
            model = request.model_size
            if request.max_dimension is not None:
                model = fit_within(daemon.screen, request.max_dimension)
            self.coords = CoordinateMap(daemon.screen, model)
            self.max_image_bytes = request.max_image_bytes or MAX_SCREENSHOT_BASE64_BYTES
            return ConfigureReply(id=request.id, model_size=self.coords.model)
        if isinstance(request, EgressRequest):
            await daemon.browser.set_allowed_domains(request.allowed_domains)
            log.info("request %s: egress %s", request.id,
                     "off" if request.allowed_domains is None else f"{len(request.allowed_domains)} domain(s)")
            return EgressReply(id=request.id, egress=EgressState(allowed_domains=request.allowed_domains))
        if isinstance(request, NavigateRequest):
            async with daemon.download_gate.serving(request.allow_downloads):
                begun = daemon.browser.downloads.begun
                try:
                    await daemon.browser.navigate(request.url, request.timeout_s)
                except NavigationError as exc:
                    # A download aborts the navigation just before it begins: let it begin
                    # while permitted, so the next request's observation reports it.
                    if request.allow_downloads and exc.detail.get("reason") == "net::ERR_ABORTED":
                        await daemon.browser.downloads.wait_begun(begun, NAVIGATION_DOWNLOAD_WAIT_S)
                    raise
                observation = await daemon.observer.observe(request.observe, self.coords,
                                                            max_reply_bytes=self.max_reply_bytes)
            log.info("request %s: navigate (%.3f s)", request.id, time.perf_counter() - started)
            return NavigateReply(id=request.id, observation=observation)
        sends_input = any(action.type not in NO_INPUT_ACTION_TYPES for action in request.actions)
        async with daemon.download_gate.serving(request.allow_downloads, sends_input):
            return await self._act(request, started)

    async def _act(self, request: ActRequest, started: float) -> Reply:
        daemon = self.daemon
        validate_batch(request.actions, self.coords)
        expect = request.expect
        control = None if expect is None else daemon.observer.control_check(expect, self.coords)
        daemon.observer.mark(request.actions, self.coords)
        batch = Batch(request.actions, self.coords, self.cancel, daemon.observer.probe, expect, control,
                      daemon.browser.answer_dialog)
        outcome = await daemon.executor.run(batch, request.timeout_s)
        if self.cancel.is_set():
            raise ExecutionError("request cancelled: the client went away", detail={"completed": len(outcome.timings)})
        wants_shot = any(isinstance(a, TakeScreenshot) for a in request.actions)
        observation = await daemon.observer.observe(request.observe, self.coords, wants_shot, outcome,
                                                    self.max_reply_bytes)
        log.info(
            "request %s: %s (%.3f s)",
            request.id,
            ",".join(a.type for a in request.actions) or "observe",
            time.perf_counter() - started,
        )
        return ActReply(id=request.id, observation=observation)


def create_app(config: AgentdConfig, early: EarlyStart | None = None) -> FastAPI:
    """Build the daemon's FastAPI application.

    Starting the app starts the desktop session (unless ``manage_session`` is
    off) and grabs one frame; if either fails, startup fails with the reason
    and the process exits.

    Args:
        config: the daemon's settings.
        early: a session already starting (:meth:`EarlyStart.begin`); the app's
            start then waits for it instead of starting one.
    """
    daemon = _Daemon(config, early)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await daemon.start()
        except DeskpodError as exc:
            log.error("startup health check failed: %s", exc.message)
            await daemon.stop()
            raise
        log.info("sandbox ready: screen %dx%d", daemon.screen.width, daemon.screen.height)
        watcher = asyncio.create_task(daemon.watch_session())
        yield
        watcher.cancel()
        await daemon.stop()

    app = FastAPI(title="deskpod agentd", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def refused(request: Request) -> JSONResponse | None:
        ok, reason = authorized({k.lower(): v for k, v in request.headers.items()}, config, daemon.token_sha256)
        if ok:
            return None
        log.warning("refused a snapshot request: %s", reason)
        return _error_response(DeskpodError(reason), status=401, code="unauthorized")

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        alive = daemon.session.alive()
        ok = all(alive.values())
        return JSONResponse({"ok": ok, "processes": alive}, status_code=200 if ok else 503)

    @app.post(EGRESS_CHECK_PATH)
    async def egress_check(request: Request) -> JSONResponse:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_CHECK_BODY_BYTES:
                return JSONResponse(EgressCheckAnswer(allowed=False).model_dump(), status_code=413)
        try:
            check = EgressCheck.model_validate_json(bytes(body))
        except ValidationError:
            return JSONResponse(EgressCheckAnswer(allowed=False).model_dump(), status_code=400)
        allowed = daemon.egress.allows(check)
        if not allowed:
            log.info("egress check refused: host %s", check.host)
        return JSONResponse(EgressCheckAnswer(allowed=allowed).model_dump())

    @app.get(SNAPSHOT_PATH)
    async def take_snapshot(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            if daemon.executor.lock.locked() and not daemon.recovering:
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with daemon.executor.lock:
                data = await daemon.take_snapshot()
        except DeskpodError as exc:
            return _error_response(exc)
        digest = hashlib.sha256(data).hexdigest()
        log.info("snapshot taken: %d bytes", len(data))
        return Response(data, media_type="application/gzip", headers={SNAPSHOT_SHA256_HEADER: digest})

    @app.put(SNAPSHOT_PATH)
    async def restore_snapshot(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            try:
                query = RestoreQuery.model_validate(dict(request.query_params))
            except ValidationError as exc:
                raise InvalidRequestError(f"bad restore query: {first_error(exc)}") from exc
            body = bytearray()
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_SNAPSHOT_BYTES:
                    raise SnapshotError(
                        f"the snapshot exceeds {MAX_SNAPSHOT_BYTES} bytes", detail={"reason": "too_large"}
                    )
            checked = await asyncio.to_thread(snapshot.check, bytes(body))
            if daemon.executor.lock.locked() and not daemon.recovering:
                raise BusyError("another request is running in this sandbox; retry when it has answered")
            async with daemon.executor.lock:
                await daemon.restore(checked, query.start_url)
        except DeskpodError as exc:
            return _error_response(exc)
        url = query.start_url or config.start_url
        return JSONResponse(SnapshotRestored(files=len(checked.files), size=checked.size, url=url).model_dump())

    @app.websocket("/v1/ws")
    async def control(websocket: WebSocket) -> None:
        digest = daemon.token_sha256
        headers = {k.lower(): v for k, v in websocket.headers.items()}
        ok, reason = authorized(headers, config, digest)
        max_reply_bytes = declared_message_bytes(headers)
        if ok and max_reply_bytes is None:
            ok, reason = False, f"{MESSAGE_SIZE_HEADER} out of range"
        if not ok or max_reply_bytes is None:
            log.warning("refused a control connection: %s", reason)
            await websocket.close(code=1008)
            return
        await websocket.accept()
        conn = _Connection(daemon, digest, max_reply_bytes)
        daemon.connections[conn] = websocket
        try:
            await websocket.send_text(encode_message(Hello(screen=daemon.screen, model_size=conn.coords.model,
                                                          sandbox_id=daemon.sandbox_id,
                                                          max_message_bytes=max_reply_bytes)))
            await _serve(websocket, conn)
        finally:
            daemon.connections.pop(conn, None)

    @app.websocket(LIVE_PATH)
    async def live(websocket: WebSocket) -> None:
        digest = daemon.token_sha256
        ok, reason = authorized({k.lower(): v for k, v in websocket.headers.items()}, config, digest)
        if not ok:
            log.warning("refused a live stream connection: %s", reason)
            await websocket.close(code=1008)
            return
        await websocket.accept()
        try:
            await websocket.send_text(encode_message(Hello(screen=daemon.screen, model_size=daemon.screen,
                                                          sandbox_id=daemon.sandbox_id)))
        except (RuntimeError, WebSocketDisconnect):
            return
        await daemon.live.serve(websocket, daemon.screen, lambda: hmac.compare_digest(digest, daemon.token_sha256))

    return app


def _error_reply(request_id: str | None, exc: DeskpodError) -> str:
    """The error reply to send for ``exc``; never fails (an id or error that does not fit
    the reply model is sent as an ``internal`` error without an id)."""
    try:
        return encode_message(ErrorReply(id=request_id, error=ErrorBody(**exc.to_wire())))
    except ValidationError:
        log.exception("request %r: the error reply could not be built", request_id)
        fallback = InternalError("internal error: the error reply could not be built")
        return encode_message(ErrorReply(id=None, error=ErrorBody(**fallback.to_wire())))


def _error_response(exc: DeskpodError, status: int | None = None, code: str | None = None) -> JSONResponse:
    """An HTTP error answer carrying the closed error envelope."""
    body = exc.to_wire()
    if code is not None:
        body["code"] = code
    if status is None:
        status = 413 if exc.detail.get("reason") == "too_large" else _HTTP_STATUS.get(body["code"], 500)
    if status >= 500:
        log.error("snapshot endpoint failed: %s", exc.message)
    return JSONResponse(ErrorBody(**body).model_dump(), status_code=status)


async def _serve(websocket: WebSocket, conn: _Connection) -> None:
    # Bounded: a client that pipelines faster than the sandbox answers is slowed down
    # by TCP back-pressure instead of growing the daemon's memory. Each item carries
    # the rate limiter's verdict, taken when the message was read.
    inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=MAX_PIPELINED_REQUESTS)

    async def read() -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text") if message.get("text") is not None else message.get("bytes")
                await inbox.put((raw, conn.bucket.take()))
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            conn.cancel.set()
            while True:  # unread requests of a client that left are dropped
                try:
                    inbox.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    inbox.get_nowait()

    reader = asyncio.create_task(read())
    try:
        while (item := await inbox.get()) is not None:
            raw, retry_after_s = item
            reply = conn.limited(raw, retry_after_s) if retry_after_s > 0 else await conn.handle(raw)
            try:
                await websocket.send_text(reply)
            except (WebSocketDisconnect, RuntimeError):
                break
            if conn.daemon.token_sha256 != conn.token_sha256:
                await conn.daemon.close_stale()
                break
    finally:
        conn.cancel.set()
        reader.cancel()
        await conn.daemon.executor.release_all()
