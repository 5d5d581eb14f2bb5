"""The low-level client of a sandbox's control websocket: one method per protocol message.

:class:`SandboxClient` is one authenticated connection to a sandbox daemon (the
high-level verbs are :class:`deskpod.client.Sandbox`'s). Snapshots move over the
daemon's authenticated HTTP endpoint (:mod:`deskpod.client.snapshot_http`), because
an archive is often larger than one websocket message.

Everything received is untrusted (code an agent runs may have taken over the
daemon): it is validated with :mod:`deskpod.protocol`'s reply models and
:func:`deskpod.client.untrusted.check_result` (the reply answers this request, within the
caps, its images what they claim), and a reply must come within the request's own
timeout plus :data:`REPLY_GRACE_S`. A reply that fails is a
:class:`~deskpod.errors.BadReplyError`, after which the connection is closed and
every later request fails with the same error. Error replies become exceptions
through :func:`deskpod.errors.error_from_wire`, so callers never see a
``websockets`` exception.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, overload

import websockets
from pydantic import BaseModel, ValidationError
from websockets.uri import parse_uri
from pydantic_core import PydanticSerializationError

from deskpod.errors import (
    BadReplyError,
    InvalidRequestError,
    SandboxError,
    UnauthorizedError,
    error_from_wire,
)
from deskpod.protocol import (
    MAX_SERVER_MESSAGE_BYTES,
    MESSAGE_SIZE_HEADER,
    MIN_CLIENT_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    ActReply,
    ActRequest,
    AnyReply,
    AnyRequest,
    AnyWorkspaceReply,
    ApplyPatchReply,
    ApplyPatchRequest,
    CleanRoomReply,
    CleanRoomRequest,
    ConfigureReply,
    ConfigureRequest,
    EgressReply,
    EgressRequest,
    EditFileReply,
    EditFileRequest,
    ErrorReply,
    ExecReply,
    ExecRequest,
    Hello,
    ListDirReply,
    ListDirRequest,
    NavigateReply,
    NavigateRequest,
    Observation,
    ObserveOptions,
    PermissionGrants,
    PermissionsReply,
    PermissionsRequest,
    ReadFileReply,
    ReadFileRequest,
    ResetReply,
    ResetRequest,
    ScreenExpectation,
    Result,
    RunTestsReply,
    RunTestsRequest,
    SeedWorkspaceReply,
    SeedWorkspaceRequest,
    Size,
    WorkspaceDiffReply,
    WorkspaceDiffRequest,
    WorkspaceManifestReply,
    WorkspaceManifestRequest,
    WorkspaceRequest,
    WriteFileReply,
    WriteFileRequest,
    first_error,
    parse_action,
    parse_server_message,
)
from deskpod.client.snapshot_http import download_snapshot, upload_snapshot
from deskpod.timing import timed_phase
from deskpod.tracing import traced_request
from deskpod.tokens import new_token, token_sha256
from deskpod.client.untrusted import check_result

__all__ = [
    "CONNECT_RETRY_S", "CONNECT_TIMEOUT_S", "HELLO_TIMEOUT_S", "REPLY_GRACE_S", "REPLY_TIMEOUT_S", "RESET_TIMEOUT_S", "SandboxClient",
    "reset_and_reconnect",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0
"""Default time to wait for a sandbox to accept a connection (it may still be starting)."""

CONNECT_RETRY_S = 0.1
"""Pause between two connection attempts to a sandbox that is still starting, seconds
(a starting daemon refuses at once; 0.5 s lost a quarter second of each cold start on
average)."""

RESET_TIMEOUT_S = 120.0
"""Time allowed for a reset's reply, seconds (the daemon answers when the fresh state
is on screen; typically about a second)."""

REPLY_GRACE_S = 45.0
"""Seconds a reply may take beyond its request's own ``timeout_s``: the observation
after the request (settling takes at most 30 s) and the transfer. No reply by then is
a :class:`~deskpod.errors.BadReplyError` (reason ``"no_reply"``)."""

REPLY_TIMEOUT_S = 60.0
"""The ``timeout_s`` assumed for a request that has none (configure, most workspace
requests), seconds."""

HELLO_TIMEOUT_S = 10.0
"""Seconds the daemon has to greet a new connection."""

class SandboxClient:
    """One authenticated connection to a sandbox daemon.

    Use :meth:`connect`; the instance holds the daemon's :class:`Hello` as ``hello``, and
    the model space in force as ``model_size`` (the hello's, then what :meth:`configure`
    answered).

    Args:
        ws: the open websocket.
        hello: the daemon's first message.
        url: the websocket URL (the snapshot endpoint lives on the same host and port).
        token: the control token this connection was opened with (for the snapshot
            endpoint's bearer header).
    """

    def __init__(self, ws: Any, hello: Hello, *, url: str = "", token: str = "") -> None:
        self._ws = ws
        self.hello = hello
        self.model_size: Size = hello.model_size
        self.url = url
        self._token = token
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._broken: BadReplyError | None = None

    @classmethod
    async def connect(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S,
                      max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES) -> SandboxClient:
        """Open the control websocket, retrying while the sandbox is still starting.

        Args:
            url: e.g. ``ws://sandbox:8765/v1/ws``.
            token: the sandbox's control token (sent as a bearer header, never in the URL).
            timeout_s: how long to keep retrying refused or unresolvable connections.
            max_message_bytes: the longest message this client reads
                (:data:`~deskpod.protocol.MIN_CLIENT_MESSAGE_BYTES` to
                :data:`~deskpod.protocol.MAX_SERVER_MESSAGE_BYTES`), declared to the daemon
                in :data:`~deskpod.protocol.MESSAGE_SIZE_HEADER`: no reply is longer.

        Raises:
            InvalidRequestError: ``url`` is not a ``ws://``/``wss://`` URL, or ``max_message_bytes``
                is out of range (refused at once, never retried).
            UnauthorizedError: the daemon refused the token.
            SandboxError: no connection within ``timeout_s`` (the message reports the
                number of attempts and the last failure), or the daemon speaks
                another protocol version.
        """
        try:
            parse_uri(url)
        except websockets.InvalidURI as exc:
            raise InvalidRequestError(f"not a ws:// or wss:// URL: {url!r}"[:300], detail={"url": url[:300]}) from exc
        if not MIN_CLIENT_MESSAGE_BYTES <= max_message_bytes <= MAX_SERVER_MESSAGE_BYTES:
            raise InvalidRequestError(
                f"max_message_bytes must be {MIN_CLIENT_MESSAGE_BYTES}..{MAX_SERVER_MESSAGE_BYTES}, "
                f"got {max_message_bytes!r}", detail={"max_message_bytes": repr(max_message_bytes)[:64]},
            )
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            attempts += 1
            try:
                ws = await websockets.connect(
                    url,
                    additional_headers={"Authorization": f"Bearer {token}",
                                        MESSAGE_SIZE_HEADER: str(max_message_bytes)},
                    max_size=max_message_bytes,
                    open_timeout=10,
                    proxy=None,
                    compression=None,  # as the daemon (agentd/__main__.py)
                )
                break
            except websockets.InvalidStatus as exc:
                if exc.response.status_code in (401, 403):
                    raise UnauthorizedError("the sandbox refused the control token or origin") from exc
                last = f"HTTP {exc.response.status_code}"
            except (TimeoutError, OSError, websockets.WebSocketException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise SandboxError(
                    f"sandbox at {url} not reachable after {attempts} attempts in {timeout_s:.0f} s; last: {last}",
                    detail={"attempts": attempts, "last": last},
                )
            await asyncio.sleep(CONNECT_RETRY_S)
        try:
            hello = parse_server_message(await asyncio.wait_for(ws.recv(), HELLO_TIMEOUT_S))
        except (TimeoutError, websockets.WebSocketException) as exc:
            await ws.close()
            raise SandboxError(f"sandbox sent no hello: {exc}") from exc
        except BadReplyError:
            await ws.close()
            raise
        if (not isinstance(hello, Hello) or hello.protocol_version != PROTOCOL_VERSION
                or hello.max_message_bytes > max_message_bytes):
            await ws.close()
            raise SandboxError(f"sandbox speaks an unexpected protocol: {hello!r}"[:300])
        return cls(ws, hello, url=url, token=token)

    def next_id(self) -> str:
        """Return a fresh request id."""
        return f"r-{next(self._ids)}"

    def _break(self, exc: BadReplyError) -> BadReplyError:
        """Remember that this connection cannot be trusted any more (every later request
        fails with ``exc``); return ``exc``."""
        if self._broken is None:
            self._broken = exc
            log.warning("refusing the sandbox at %s from now on: %s", self.url, exc.message)
        return exc

    async def send_raw(self, text: str | bytes, *, timeout_s: float = REPLY_TIMEOUT_S + REPLY_GRACE_S
                       ) -> Hello | Result | ErrorReply:
        """Send any frame and return the parsed reply (for tests and debugging).

        Args:
            text: the frame (text or binary).
            timeout_s: how long to wait for the reply, seconds.

        Raises:
            SandboxError: the connection closed.
            BadReplyError: no reply within ``timeout_s``, a reply that is not a valid
                message, or an earlier bad reply on this connection.
        """
        async with self._lock:
            if self._broken is not None:
                raise self._broken
            try:
                await self._ws.send(text)
                raw = await asyncio.wait_for(self._ws.recv(), timeout_s)
            except TimeoutError as exc:
                await self._ws.close()
                raise self._break(BadReplyError(f"the sandbox sent no reply within {timeout_s:g} s",
                                                detail={"reason": "no_reply"})) from exc
            except websockets.WebSocketException as exc:
                raise SandboxError(f"connection to the sandbox closed: {exc}") from exc
            try:
                return parse_server_message(raw)
            except BadReplyError as exc:
                await self._ws.close()
                raise self._break(exc) from None

    @overload
    async def request(self, request: ActRequest) -> ActReply: ...
    @overload
    async def request(self, request: NavigateRequest) -> NavigateReply: ...
    @overload
    async def request(self, request: ResetRequest) -> ResetReply: ...
    @overload
    async def request(self, request: ConfigureRequest) -> ConfigureReply: ...
    @overload
    async def request(self, request: EgressRequest) -> EgressReply: ...
    @overload
    async def request(self, request: PermissionsRequest) -> PermissionsReply: ...
    @overload
    async def request(self, request: SeedWorkspaceRequest) -> SeedWorkspaceReply: ...
    @overload
    async def request(self, request: ListDirRequest) -> ListDirReply: ...
    @overload
    async def request(self, request: ReadFileRequest) -> ReadFileReply: ...
    @overload
    async def request(self, request: WriteFileRequest) -> WriteFileReply: ...
    @overload
    async def request(self, request: EditFileRequest) -> EditFileReply: ...
    @overload
    async def request(self, request: ApplyPatchRequest) -> ApplyPatchReply: ...
    @overload
    async def request(self, request: ExecRequest) -> ExecReply: ...
    @overload
    async def request(self, request: RunTestsRequest) -> RunTestsReply: ...
    @overload
    async def request(self, request: WorkspaceDiffRequest) -> WorkspaceDiffReply: ...
    @overload
    async def request(self, request: WorkspaceManifestRequest) -> WorkspaceManifestReply: ...
    @overload
    async def request(self, request: CleanRoomRequest) -> CleanRoomReply: ...
    @overload
    async def request(self, request: WorkspaceRequest) -> AnyWorkspaceReply: ...
    async def request(self, request: AnyRequest) -> AnyReply:
        """Send one request and wait for its reply (at most the request's ``timeout_s``
        plus :data:`REPLY_GRACE_S`; a reset: :data:`RESET_TIMEOUT_S`).

        Returns:
            The reply model of the request (:data:`~deskpod.protocol.REPLY_TYPES`), e.g.
            an :class:`~deskpod.protocol.ActReply` for an :class:`~deskpod.protocol.ActRequest`.

        Raises:
            DeskpodError: the daemon's typed error, mapped by code (for example
                :class:`~deskpod.errors.OutOfBoundsError`).
            InvalidRequestError: the request holds a string that cannot be sent (a
                lone UTF-16 surrogate).
            BadReplyError: the reply is late, answers another request, or fails a
                check of :func:`deskpod.client.untrusted.check_result`; the connection is
                closed and every later request fails the same way.
        """
        try:
            text = request.model_dump_json()
        except PydanticSerializationError as exc:
            raise InvalidRequestError(f"{request.type}: a string of the request is not valid text "
                                      "(a lone UTF-16 surrogate)") from exc
        if isinstance(request, ResetRequest):
            timeout_s = RESET_TIMEOUT_S
        else:
            timeout_s = float(getattr(request, "timeout_s", REPLY_TIMEOUT_S)) + REPLY_GRACE_S
        with traced_request(request.type, len(request.actions) if isinstance(request, ActRequest) else 0) as traced:
            reply = await self._exchange(request, text, timeout_s)
            traced.replied(reply.observation if isinstance(reply, (ActReply, NavigateReply, ResetReply)) else None)
        return reply

    async def _exchange(self, request: AnyRequest, text: str, timeout_s: float) -> AnyReply:
        """Send ``request`` as ``text`` and check its reply (see :meth:`request`)."""
        reply = await self.send_raw(text, timeout_s=timeout_s)
        if isinstance(reply, ErrorReply):
            if reply.id is not None and reply.id != request.id:
                await self._ws.close()
                raise self._break(BadReplyError(f"an error reply for another request answers {request.id}",
                                                detail={"reason": "wrong_id"}))
            raise error_from_wire(reply.error.model_dump())
        if not isinstance(reply, Result):
            await self._ws.close()
            raise self._break(BadReplyError(f"a {reply.type} message answers request {request.id}",
                                            detail={"reason": "wrong_kind"}))
        try:
            return check_result(request, reply)
        except BadReplyError as exc:
            await self._ws.close()
            raise self._break(exc) from None

    async def act(
        self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
        timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *, allow_downloads: bool = False,
        mask: Sequence[str] = (),
    ) -> Observation:
        """Run actions (protocol models or their JSON dicts) and return the observation after them;
        with ``expect``, the daemon refuses a pointer action whose screen changed
        (:class:`~deskpod.errors.ScreenChangedError`); ``allow_downloads``: let downloads they
        start begin (else the browser refuses them); ``mask``: secrets the daemon masks from
        now until a reset (:mod:`deskpod.protocol.mask`)."""
        parsed = [a if isinstance(a, BaseModel) else parse_action(a, i) for i, a in enumerate(actions)]
        req = ActRequest(
            type="act", id=self.next_id(), actions=parsed, observe=observe or ObserveOptions(),  # type: ignore[arg-type]
            timeout_s=timeout_s, expect=expect, allow_downloads=allow_downloads, mask=list(mask),
        )
        return (await self.request(req)).observation

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0, *,
                       allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Load ``url`` in the sandbox's browser and return the observation after it;
        ``allow_downloads``: let a download it starts begin (else the browser refuses it);
        ``mask``: as for :meth:`act`."""
        req = NavigateRequest(
            type="navigate", id=self.next_id(), url=url, observe=observe or ObserveOptions(), timeout_s=timeout_s,
            allow_downloads=allow_downloads, mask=list(mask),
        )
        return (await self.request(req)).observation

    async def configure(self, model_size: Size | None = None, *, max_dimension: int | None = None,
                        max_image_bytes: int | None = None) -> Size:
        """Declare the model space: the size of the images the model is sent.

        The two forms of :class:`~deskpod.protocol.ConfigureRequest`: ``model_size``
        that size exactly, or ``max_dimension`` the screen scaled down (aspect kept) so
        its longer side is at most that many pixels. Neither: the screen itself.

        Args:
            model_size: the model space's width and height, pixels (at most
                :data:`~deskpod.protocol.MAX_IMAGE_SIDE_PX` a side and
                :data:`~deskpod.protocol.MAX_SCREENSHOT_PIXELS` in all).
            max_dimension: the longest side allowed, pixels (16..16384).
            max_image_bytes: the longest base64 text of a screenshot from now on
                (:data:`~deskpod.protocol.MIN_SCREENSHOT_BASE64_BYTES` to
                :data:`~deskpod.protocol.MAX_SCREENSHOT_BASE64_BYTES`, the default).

        Returns:
            The model space in force.

        Raises:
            InvalidRequestError: both forms given, or a size or limit out of range
                (checked here, before anything is sent, and again by the daemon).
        """
        try:
            req = ConfigureRequest(type="configure", id=self.next_id(), model_size=model_size,
                                   max_dimension=max_dimension, max_image_bytes=max_image_bytes)
        except ValidationError as exc:
            raise InvalidRequestError(f"configure: {first_error(exc, empty='')}") from exc
        self.model_size = (await self.request(req)).model_size
        return self.model_size

    async def set_egress(self, allowed_domains: Sequence[str] | None) -> list[str] | None:
        """Set the hosts the sandbox's browser may reach (and their subdomains): every
        request to another host fails before it is sent (:class:`~deskpod.protocol.EgressRequest`).

        Args:
            allowed_domains: the run's domains; ``None``: no limit beyond the egress proxy's.

        Returns:
            The list now in force.

        Raises:
            InvalidRequestError: a domain is not a host name, or there are too many.
        """
        try:
            req = EgressRequest(type="egress", id=self.next_id(),
                                allowed_domains=None if allowed_domains is None else list(allowed_domains))
        except ValidationError as exc:
            raise InvalidRequestError(f"egress: {first_error(exc, empty='')}") from exc
        return (await self.request(req)).egress.allowed_domains

    async def set_permissions(self, grants: PermissionGrants) -> PermissionGrants:
        """Grant the sandbox's pages ``grants`` and deny every other browser permission, without a
        prompt (:class:`~deskpod.protocol.PermissionsRequest`; ``PermissionGrants()``: deny all,
        the default a reset restores).

        Returns:
            The grants now in force.
        """
        req = PermissionsRequest(type="permissions", id=self.next_id(), grants=grants)
        return (await self.request(req)).permissions

    async def reset(
        self, start_url: str | None = None, *, token_sha256: str, observe: ObserveOptions | None = None
    ) -> Observation:
        """Put the sandbox back to its baseline in place and rotate its control token.

        The daemon stops every process of the session, wipes every writable path,
        starts the window manager and Chromium at ``start_url`` and answers with the
        first observation of the fresh state. It then accepts only the token whose
        SHA-256 is ``token_sha256`` and closes this connection (unless the hash is
        unchanged): connect again with the new token.

        Args:
            start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.
            token_sha256: SHA-256 (64 lower-case hex digits) of the next control token.
            observe: what the observation holds (default :class:`ObserveOptions`).

        Returns:
            The observation of the fresh state (model space: the screen, since the
            reset also forgets this connection's ``configure``).

        Raises:
            InvalidRequestError: ``start_url`` or ``token_sha256`` is malformed.
            BusyError: another request was running in the sandbox.
            SandboxError: the reset failed or the connection dropped.
        """
        try:
            req = ResetRequest(
                type="reset", id=self.next_id(), start_url=start_url, token_sha256=token_sha256,
                observe=observe or ObserveOptions(),
            )
        except ValidationError as exc:
            raise InvalidRequestError(f"reset: {first_error(exc, empty='')}") from exc
        reply = await asyncio.wait_for(self.request(req), RESET_TIMEOUT_S)
        return reply.observation

    async def snapshot(self) -> bytes:
        """Take a snapshot of the browser session (``GET /v1/snapshot``).

        The daemon stops Chromium so its files are consistent, packs cookies, Local
        Storage, IndexedDB, Session Storage and preferences, and starts Chromium
        again at the page it showed (other tabs and in-memory page state are lost).

        Returns:
            The archive: a gzip'd tar, at most :data:`~deskpod.protocol.MAX_SNAPSHOT_BYTES`
            bytes, whose first member is a :class:`~deskpod.protocol.SnapshotManifest`.

        Raises:
            UnauthorizedError: the token was refused.
            BusyError: another request was running in the sandbox.
            SnapshotIntegrityError: the body does not match the SHA-256 the daemon sent.
            SnapshotError: the daemon could not take the snapshot, or the answer was unusable.
        """
        return await asyncio.to_thread(download_snapshot, self.url, self._token)

    async def restore(self, archive: bytes, start_url: str | None = None) -> Observation:
        """Restore a snapshot into this sandbox's browser (``PUT /v1/snapshot``), then observe.

        The daemon checks the archive in full, replaces the browser profile with it
        and starts Chromium at ``start_url``. Nothing else of the sandbox (workspace,
        /tmp) is touched: reset first for a clean sandbox.

        Args:
            archive: bytes returned by :meth:`snapshot` (or :meth:`SnapshotStore.load
                <deskpod.client.snapshot_store.SnapshotStore.load>`).
            start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.

        Returns:
            The observation after the restored browser came up (this connection's model space).

        Raises:
            UnauthorizedError: the token was refused.
            BusyError: another request was running in the sandbox.
            SnapshotIntegrityError: a file of the archive does not match its manifest.
            SnapshotError: the archive is malformed, too large, or the browser did not start.
            InvalidRequestError: ``start_url`` is not an http(s) URL.
        """
        restored = await asyncio.to_thread(upload_snapshot, self.url, self._token, archive, start_url)
        log.info("restored a snapshot: %d files, %d bytes", restored.files, restored.size)
        return await self.act([])

    async def close(self) -> None:
        """Close the connection."""
        await self._ws.close()


async def reset_and_reconnect(
    client: SandboxClient,
    start_url: str | None,
    *,
    connect_timeout_s: float,
    on_rotated: Callable[[str], None] | None = None,
    phases: dict[str, float] | None = None,
) -> tuple[str, Observation, SandboxClient]:
    """Reset a sandbox in place under a new random control token, then reconnect with it.

    The old connection is closed once the reset has succeeded (it stays open when the
    reset fails: the old token is then still in force).

    Args:
        client: a connection with the token in force.
        start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.
        connect_timeout_s: how long to wait for the reconnection, seconds.
        on_rotated: called with the new token as soon as the sandbox has taken it
            (before the reconnection, which may still fail).
        phases: adds the seconds spent in ``"reset"`` and ``"reconnect"``.

    Returns:
        The new token, the observation of the fresh state, and the new connection.

    Raises:
        SandboxError: the reset failed or the reconnection did not succeed.
        BusyError: another request was running in the sandbox.
    """
    token = new_token()
    with timed_phase(phases, "reset"):
        observation = await client.reset(start_url, token_sha256=token_sha256(token))
    if on_rotated is not None:
        on_rotated(token)
    await client.close()
    with timed_phase(phases, "reconnect"):
        fresh = await SandboxClient.connect(client.url, token, timeout_s=connect_timeout_s,
                                            max_message_bytes=client.hello.max_message_bytes)
    return token, observation, fresh
