"""One control connection: its messages read in order, rate-limited, carried out and
answered within the message size its client reads.

Each connection may send :data:`RATE_LIMIT_MESSAGES_PER_S` messages per second on
average with bursts of :data:`RATE_LIMIT_BURST`; a message over that gets a
``rate_limited`` error without being carried out. Every request gets exactly one
reply; bad input gets a typed error and the connection stays open. At most
:data:`MAX_PIPELINED_REQUESTS` requests are read ahead of their replies.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

from fastapi import WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from deskpod.agentd.batch import Batch, validate_batch
from deskpod.agentd.browser.downloads import NAVIGATION_DOWNLOAD_WAIT_S
from deskpod.agentd.browser.recovery import recover_tab
from deskpod.agentd.daemon import Daemon
from deskpod.agentd.workspace.tools import is_workspace_request
from deskpod.errors import (
    BusyError,
    DeskpodError,
    ExecutionError,
    InternalError,
    MessageTooLargeError,
    NavigationError,
    ProtocolError,
    RateLimitedError,
)
from deskpod.protocol import (
    MAX_SCREENSHOT_BASE64_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    MESSAGE_SIZE_HEADER,
    MIN_CLIENT_MESSAGE_BYTES,
    NO_INPUT_ACTION_TYPES,
    REPLY_TYPES,
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
    NavigateReply,
    NavigateRequest,
    Observation,
    PermissionsReply,
    PermissionsRequest,
    Reply,
    ResetReply,
    ResetRequest,
    RunTestsOutput,
    TakeScreenshot,
    Truncation,
    WorkspaceOutput,
    encode_message,
    fit_within,
    parse_request,
    request_id,
)

__all__ = [
    "Connection",
    "MAX_PIPELINED_REQUESTS",
    "RATE_LIMIT_BURST",
    "RATE_LIMIT_MESSAGES_PER_S",
    "TokenBucket",
    "declared_message_bytes",
    "error_reply",
    "serve",
]

log = logging.getLogger(__name__)

RATE_LIMIT_MESSAGES_PER_S = 50.0
"""Messages per second one websocket connection may send on average (token bucket refill rate)."""

RATE_LIMIT_BURST = 100
"""Messages one connection may send at once before the rate limit applies (bucket size)."""

_REPLY_RESERVE_BYTES = 131_072
"""Bytes of a reply kept for everything but its images (the image limit of a client
that declares a small message size is half of what is left)."""

MAX_PIPELINED_REQUESTS = 8
"""Requests a connection may have read but not yet answered; the daemon stops
reading from that socket until one is answered."""


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


class Connection:
    """One control connection's requests: each parsed, run under its lock and answered
    with exactly one reply that fits the client's message size.

    Args:
        daemon: the daemon whose parts serve the requests.
        token_sha256: the SHA-256 of the token the connection was made with.
        max_reply_bytes: the largest message the client reads.
    """

    def __init__(self, daemon: Daemon, token_sha256: str, max_reply_bytes: int = MAX_SERVER_MESSAGE_BYTES) -> None:
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
        return error_reply(request_id(raw), err)

    async def handle(self, raw: str | bytes) -> str:
        """Carry out one message and return its encoded reply (an error reply for bad
        input, a busy sandbox or a failure; never raises)."""
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
            return error_reply(request_id, exc)
        except Exception as exc:  # the daemon must survive anything a request triggers
            log.exception("request %s: internal error", request_id)
            err = InternalError(f"internal error: {type(exc).__name__}")
            return error_reply(request_id, err)

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
        if isinstance(request, PermissionsRequest):
            await daemon.browser.set_permissions(request.grants)
            log.info("request %s: permissions granted: %s", request.id, ", ".join(request.grants.granted) or "none")
            return PermissionsReply(id=request.id, permissions=request.grants)
        if isinstance(request, NavigateRequest):
            daemon.secret_mask.add(request.mask)
            async with daemon.download_gate.serving(request.allow_downloads):
                await self._load(request.url, request.timeout_s, request.allow_downloads)
                observation = await daemon.observer.observe(request.observe, self.coords,
                                                            max_reply_bytes=self.max_reply_bytes)
            log.info("request %s: navigate (%.3f s)", request.id, time.perf_counter() - started)
            return NavigateReply(id=request.id, observation=observation)
        sends_input = any(action.type not in NO_INPUT_ACTION_TYPES for action in request.actions)
        async with daemon.download_gate.serving(request.allow_downloads, sends_input):
            return await self._act(request, started)

    async def _load(self, url: str, timeout_s: float, allow_downloads: bool) -> None:
        """Load ``url`` in the active tab through the browser (DevTools ``Page.navigate``,
        never the address bar), for a ``navigate`` request or action, while the request's
        download permission is served.

        Raises:
            NavigationError: it did not load within ``timeout_s`` seconds, or the browser
                refused it (``detail["reason"]``).
        """
        browser = self.daemon.browser
        begun = browser.downloads.begun
        try:
            await browser.navigate(url, timeout_s)
        except NavigationError as exc:
            # A download aborts the navigation just before it begins: let it begin
            # while permitted, so the next request's observation reports it.
            if allow_downloads and exc.detail.get("reason") == "net::ERR_ABORTED":
                await browser.downloads.wait_begun(begun, NAVIGATION_DOWNLOAD_WAIT_S)
            raise

    async def _act(self, request: ActRequest, started: float) -> Reply:
        daemon = self.daemon
        validate_batch(request.actions, self.coords)
        daemon.secret_mask.add(request.mask)
        expect = request.expect
        control = None if expect is None else daemon.observer.control_check(expect, self.coords)
        daemon.observer.mark(request.actions, self.coords)
        batch = Batch(request.actions, self.coords, self.cancel, daemon.observer.probe, expect, control,
                      daemon.browser.answer_dialog,
                      lambda action: self._load(action.url, action.timeout_s, request.allow_downloads),
                      lambda action: recover_tab(daemon.browser.devtools, action, daemon.browser.active_id,
                                                 daemon.browser.sessions_of),
                      daemon.apps.open)
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


def error_reply(request_id: str | None, exc: DeskpodError) -> str:
    """The error reply to send for ``exc``; never fails (an id or error that does not fit
    the reply model is sent as an ``internal`` error without an id)."""
    try:
        return encode_message(ErrorReply(id=request_id, error=ErrorBody(**exc.to_wire())))
    except ValidationError:
        log.exception("request %r: the error reply could not be built", request_id)
        fallback = InternalError("internal error: the error reply could not be built")
        return encode_message(ErrorReply(id=None, error=ErrorBody(**fallback.to_wire())))


async def serve(websocket: WebSocket, conn: Connection) -> None:
    """Read ``conn``'s messages off ``websocket`` and send their replies, in order, until
    the client leaves or its token was rotated; what it held is then released."""
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
