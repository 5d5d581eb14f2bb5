"""A client for ``deskpod serve``: one method per client message, replies as typed models.

The service is a peer, not a trusted part of this process: every message it sends
is validated against the models of :mod:`deskpod.service.messages` (a message
that does not fit breaks the connection with :class:`~deskpod.errors.BadReplyError`),
and its errors become exceptions through :func:`deskpod.errors.error_from_wire`
(the fixed code table; messages capped and made printable).

A connection has the role its token grants: an *agent* connection (the service
token) opens sessions and submits actions; an *approver* connection (the approver
token, ``connect(..., role="approver")``) only answers: it receives the
``confirmation_required`` and ``pause_required`` of every session waiting for an
approver out of :meth:`ControllerClient.events` and answers with
:meth:`~ControllerClient.confirm` and :meth:`~ControllerClient.review`. An agent's
own answers are refused (``UnauthorizedError`` out of ``events()``) unless its
session was opened with ``approver="self"`` under a policy allowing it.

Replies are matched to requests by ``id``. Everything else (audit ``event``
records, ``confirmation_required``, ``pause_required``, the first ``observation``
of a session, ``finished``, and errors answering a ``confirm`` or ``review``) comes
out of :meth:`ControllerClient.events`. A ``submit`` waiting on a confirmation
only returns once someone answers it, so read :meth:`~ControllerClient.events`
in another task while a submit may need one.

Example::

    async with await ControllerClient.connect("ws://127.0.0.1:8766/v1/controller", token) as client:
        opened = await client.open_named("stack", task)   # or client.open(sandbox_url, sandbox_token, task)
        reply = await client.submit(opened.session, [{"type": "click", "x": 640, "y": 560}])
        summary = await client.finish(opened.session, "added a note")

    # elsewhere, a human's console:
    async with await ControllerClient.connect(url, approver_token, role="approver") as approver:
        async for notice in approver.events():
            if notice.type == "confirmation_required":
                await approver.confirm(notice.request["id"], True, notice.request["digest"])
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

import websockets
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from websockets.asyncio.client import ClientConnection

from deskpod.controller.confirm import PauseAnswer
from deskpod.controller.policy.levels import RiskLevel
from deskpod.controller.policy.policy_file import Policy
from deskpod.errors import BadReplyError, DeskpodError, UnauthorizedError, error_from_wire
from deskpod.protocol import Action
from deskpod.protocol.limits import MAX_SERVER_MESSAGE_BYTES
from deskpod.service.messages import (
    APPROVER_ROLE_HEADER,
    ConfirmMessage,
    ControlMessage,
    CredentialMessage,
    FinishMessage,
    HandbackMessage,
    HumanInputMessage,
    OpenMessage,
    ResetMessage,
    ReviewMessage,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServiceError,
    ServiceEvent,
    ServiceFinished,
    ServiceMessage,
    ServiceObservation,
    ServiceOk,
    ServiceOpened,
    ServicePauseRequired,
    ServiceQuestionWithdrawn,
    ServiceResetDone,
    ServiceRunSummary,
    ServiceSession,
    ServiceTakeoverState,
    SessionTask,
    SubmitMessage,
    TakeoverMessage,
)
from deskpod.service.outbound import build_message
from deskpod.client.loop_thread import LoopThread

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ControllerClient",
    "MAX_QUEUED_EVENTS",
    "REPLY_TIMEOUT_S",
    "RESET_TIMEOUT_S",
    "ServiceNotice",
    "SyncControllerClient",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""Seconds to wait for the service's handshake."""

REPLY_TIMEOUT_S = 30.0
"""Seconds to wait for a session's first observation and the answers to ``pause``, ``cancel`` and the like."""

RESET_TIMEOUT_S = 120.0
"""Seconds to wait for the answer to ``reset``, and to ``open`` (a sandbox the service owns is reset first)."""

MAX_QUEUED_EVENTS = 10_000
"""Messages :meth:`ControllerClient.events` holds unread; beyond it the oldest are dropped (logged)."""

ServiceNotice = (
    ServiceEvent | ServiceConfirmationRequired | ServicePauseRequired | ServiceObservation | ServiceFinished
    | ServiceSession | ServiceError | ServiceTakeoverState | ServiceCredentialRequired | ServiceQuestionWithdrawn
)
"""What :meth:`ControllerClient.events` yields: the messages that answer no pending request."""

_SERVICE: TypeAdapter[Any] = TypeAdapter(Annotated[ServiceMessage, Field(discriminator="type")])

M = TypeVar("M", bound=BaseModel)


class ControllerClient:
    """An async client for one connection to ``deskpod serve``.

    Use :meth:`connect`; close with :meth:`close` (or ``async with``). Closing
    the connection makes the service cancel this connection's sessions.
    """

    def __init__(self, ws: ClientConnection, role: Literal["agent", "approver"] = "agent") -> None:
        self._ws = ws
        self.role = role
        """``"agent"`` or ``"approver"``: what the service lets this connection do."""
        self._ids = itertools.count(1)
        # request id -> (the session it belongs to, when a ``finished`` of it answers too; its future)
        self._pending: dict[str, tuple[str | None, asyncio.Future[ServiceMessage]]] = {}
        self._notices: collections.deque[ServiceNotice] = collections.deque(maxlen=MAX_QUEUED_EVENTS)
        self._arrived = asyncio.Event()
        self._broken: DeskpodError | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S,
                      role: Literal["agent", "approver"] = "agent") -> ControllerClient:
        """Connect to the service.

        Args:
            url: e.g. ``ws://127.0.0.1:8766/v1/controller``.
            token: the service's bearer token, or its approver token (sent as a header,
                never in the URL).
            timeout_s: how long the handshake may take, seconds.
            role: the role ``token`` grants: ``"agent"`` (open sessions, submit actions)
                or ``"approver"`` (answer confirmations and pauses); sent in the
                handshake, where a token of the other role is refused.

        Raises:
            UnauthorizedError: the service refused the token, or it grants another role
                (HTTP 401 or 403).
            DeskpodError: the service is not reachable.
        """
        headers = {"Authorization": f"Bearer {token}", APPROVER_ROLE_HEADER: role}
        try:
            ws = await websockets.connect(url, additional_headers=headers,
                                          max_size=MAX_SERVER_MESSAGE_BYTES, open_timeout=timeout_s, proxy=None)
        except websockets.InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise UnauthorizedError("the controller service refused the token") from exc
            raise DeskpodError(f"the controller service answered HTTP {exc.response.status_code}") from exc
        except (TimeoutError, OSError, websockets.WebSocketException) as exc:
            raise DeskpodError(f"controller service at {url} not reachable: {type(exc).__name__}: {exc}") from exc
        return cls(ws, role)

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection (the service cancels its sessions)."""
        await self._ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    # -- requests -------------------------------------------------------------

    async def open(self, sandbox_url: str, sandbox_token: str, task: SessionTask | Mapping[str, Any],
                   policy: Policy | Mapping[str, Any] | None = None,
                   approver: Literal["approver", "self"] = "approver",
                   egress_control: Mapping[str, str] | None = None, snapshots: bool = False) -> ServiceOpened:
        """Open a session, one run of ``task`` on the sandbox; its first observation
        (``status="ready"``, ``id=None``) then comes out of :meth:`events` (or :meth:`ready`).

        Args:
            sandbox_url: the sandbox daemon's websocket URL.
            sandbox_token: its control token.
            task: the task (name, start URL, allowed domains, limits, success check).
            policy: a policy that can only tighten the operator's.
            approver: who answers the session's confirmations and pauses: an approver
                connection, or ``"self"``: this connection (only under an operator's
                policy with ``allow_self_approval``).
            egress_control: a leased pool slot's proxy control (``{"url", "token"}``, its ``ID.egress`` file).
            snapshots: every observation carries the element snapshot with refs.

        Raises:
            InvalidRequestError: the message does not validate (here or at the service).
            BusyError: another session runs on that sandbox (by its daemon's identity,
                whatever URL reaches it).
            UnauthorizedError: ``approver="self"`` and the operator's policy does not allow
                it, or the sandbox refused its token.
            SandboxError: the service could not connect to the sandbox.
        """
        return await self._open({"url": sandbox_url, "token": sandbox_token,
                                 **({"egress_control": dict(egress_control)} if egress_control else {})},
                                task, policy=policy, approver=approver, snapshots=snapshots)

    async def open_named(self, name: str, task: SessionTask | Mapping[str, Any], *, restore: str | None = None,
                         **options: Any) -> ServiceOpened:
        """Open a session on the sandbox the service owns as ``name``, holding no token of it: the service resets
        it first (``restore``: then restores that snapshot of its store). ``options``: :meth:`open`'s keywords.

        Raises:
            BusyError: another session holds it (``detail["retry_after_s"]``: when to try again).
            InvalidRequestError: no sandbox of that name. SnapshotError: no such snapshot.
        """
        return await self._open({"name": name}, task, restore=restore, **options)

    async def _open(self, sandbox: dict[str, Any], task: SessionTask | Mapping[str, Any], **fields: Any) -> Any:
        message = build_message(OpenMessage, type="open", id=self._next_id(), sandbox=sandbox, task=task, **fields)
        return await self._request(message, None, ServiceOpened, RESET_TIMEOUT_S)  # an owned one resets first

    async def ready(self, session: str, timeout_s: float | None = REPLY_TIMEOUT_S
                    ) -> ServiceObservation | ServiceFinished:
        """Wait for a session's first observation, taking it (and what came before it) from :meth:`events`.

        Returns:
            The first observation, or the session's ``finished`` when the run ended
            first (its sandbox unreachable, or the task already done at the start).

        Raises:
            DeskpodError: the connection closed.
            TimeoutError: nothing within ``timeout_s``.
        """
        async def wait() -> ServiceObservation | ServiceFinished:
            async for notice in self.events():
                if isinstance(notice, (ServiceObservation, ServiceFinished)) and notice.session == session:
                    return notice
            raise self._broken or DeskpodError("the connection to the controller service closed")

        return await asyncio.wait_for(wait(), timeout_s)

    async def submit(self, session: str, actions: Sequence[Action | Mapping[str, Any]], *, sensitive: bool = False,
                     risk: RiskLevel | None = None, intent: str = "", console: bool = False,
                     network: bool = False) -> ServiceObservation | ServiceFinished:
        """Propose actions; they go through the policy. With ``console`` or ``network``, the
        observation answering them also carries the page's console messages or network requests.

        Returns:
            The observation answering it (``status`` ok, error or denied), or the
            session's ``finished`` when the run ended instead (verified, cancelled,
            a limit, a denied confirmation).

        Raises:
            BusyError: the session was not waiting for a proposal.
            InvalidRequestError: the message does not validate, or no such session.
        """
        message = build_message(SubmitMessage, type="submit", id=self._next_id(), session=session, actions=list(actions),
                         sensitive=sensitive, risk=risk, intent=intent, console=console, network=network)
        reply: ServiceObservation | ServiceFinished = await self._request(
            message, session, (ServiceObservation, ServiceFinished), None)
        return reply

    async def finish(self, session: str, claim: str = "") -> ServiceRunSummary:
        """Say the agent is done; the controller verifies from the environment.

        Returns:
            How the run ended (``status="succeeded"`` only when the success check held).

        Raises:
            BusyError: the session was not waiting for a proposal.
        """
        message = build_message(FinishMessage, type="finish", id=self._next_id(), session=session, claim=claim)
        finished = await self._request(message, session, ServiceFinished, None)
        return finished.result

    async def confirm(self, request_id: str, approve: bool, digest: str) -> None:
        """Answer a ``confirmation_required``; ``digest`` must repeat the request's.

        The service sends nothing on success; an error (no such request, or
        ``unauthorized``: this connection may not answer it) comes out of
        :meth:`events` as a :class:`ServiceError`.
        """
        await self._send(build_message(ConfirmMessage, type="confirm", id=self._next_id(), request_id=request_id,
                                approve=approve, digest=digest))

    async def review(self, pause_id: str, answer: PauseAnswer) -> None:
        """Answer a ``pause_required`` with ``resume``, ``cancel`` or ``takeover`` (errors as for :meth:`confirm`)."""
        await self._send(build_message(ReviewMessage, type="review", id=self._next_id(), pause_id=pause_id, answer=answer))

    async def pause(self, session: str) -> None:
        """Pause the session's run (a ``pause_required`` follows)."""
        await self._control("pause", session)

    async def resume(self, session: str) -> None:
        """Resume a paused run."""
        await self._control("resume", session)

    async def cancel(self, session: str) -> None:
        """End the session's run at once (its ``finished`` follows)."""
        await self._control("cancel", session)

    async def end(self, session: str) -> None:
        """End the session's run as its agent is done with it, without asking for a verdict: it
        ends at once with status ``"ended"`` (its ``finished`` follows)."""
        await self._control("end", session)

    async def withdraw(self, session: str) -> None:
        """Withdraw the step of the session's last :meth:`submit` (its agent gave up waiting):
        a confirmation or credential request it waits on is withdrawn, nothing more of it runs,
        and its observation answers it (``status: "denied"``, rule ``withdrawn``). The run goes
        on; once that submit has been answered it does nothing."""
        await self._control("withdraw", session)

    async def reset(self, session: str, start_url: str | None = None) -> ServiceResetDone:
        """Reset the session's sandbox in place after its run.

        Returns:
            The sandbox's new control token (secret) and the fresh state's URL.

        Raises:
            InvalidRequestError: the run is still going.
            SandboxError: the reset failed.
        """
        message = build_message(ResetMessage, type="reset", id=self._next_id(), session=session, start_url=start_url)
        return await self._request(message, None, ServiceResetDone, RESET_TIMEOUT_S)

    async def events(self) -> AsyncIterator[ServiceNotice]:
        """The messages that answer no pending request, in arrival order, until the connection closes.

        Raises:
            BadReplyError: the service sent a message that is not one of its models.
        """
        while True:
            while self._notices:
                yield self._notices.popleft()
            if self._reader.done():
                if isinstance(self._broken, BadReplyError):
                    raise self._broken
                return
            self._arrived.clear()
            await self._arrived.wait()

    # -- plumbing -------------------------------------------------------------

    async def takeover(self, session: str) -> None:
        """Take the session's sandbox over (approver connections): a ``takeover_state`` follows
        once the run has handed it over; the agent's proposals wait until :meth:`handback`.

        Raises:
            UnauthorizedError: not an approver connection.
            InvalidRequestError: no such session, its run ended, or someone holds it already.
        """
        await self._request(build_message(TakeoverMessage, type="takeover", id=self._next_id(), session=session), None,
                            ServiceOk, REPLY_TIMEOUT_S)

    async def human_input(self, session: str, action: Action | Mapping[str, Any],
                          timeout_s: float | None = None) -> None:
        """Run one input of the person in control (a protocol action) on the session's executor;
        returns once it ran.

        Raises:
            UnauthorizedError: not an approver connection, or another person holds the takeover.
            InvalidRequestError: not taken over, or the action is not valid.
            DeskpodError: the input was refused (the policy, an allowlist) or failed in the sandbox.
        """
        raw = action.model_dump(mode="json") if isinstance(action, BaseModel) else dict(action)
        await self._request(build_message(HumanInputMessage, type="human_input", id=self._next_id(), session=session,
                                   action=raw), None, ServiceOk, timeout_s)

    async def handback(self, session: str) -> None:
        """Hand the sandbox back to the agent (the controller re-observes first)."""
        await self._request(build_message(HandbackMessage, type="handback", id=self._next_id(), session=session), None,
                            ServiceOk, REPLY_TIMEOUT_S)

    async def credential(self, request_id: str, secret: str | None) -> None:
        """Answer a ``credential_required`` with the ``secret`` (``None``: decline); the controller
        types it only into the checked password field.

        Raises:
            UnauthorizedError: not an approver connection.
            InvalidRequestError: no such request pending.
        """
        message = build_message(CredentialMessage, type="credential", id=self._next_id(), request_id=request_id,
                         secret=secret, cancel=secret is None)
        # The model masks the secret when dumped: the wire carries it as given.
        wire = {**message.model_dump(mode="json"), **({"secret": secret} if secret is not None else {})}
        await self._request(message, None, ServiceOk, REPLY_TIMEOUT_S, wire)

    def _next_id(self) -> str:
        return f"c-{next(self._ids)}"

    async def _control(self, kind: Literal["pause", "resume", "cancel", "withdraw", "end"], session: str) -> None:
        message = build_message(ControlMessage, type=kind, id=self._next_id(), session=session)
        await self._request(message, None, ServiceOk, REPLY_TIMEOUT_S)

    async def _send(self, message: BaseModel, wire: dict[str, Any] | None = None) -> None:
        if self._broken is not None:
            raise self._broken
        try:
            await self._ws.send(json.dumps(message.model_dump(mode="json") if wire is None else wire))
        except websockets.WebSocketException as exc:
            raise DeskpodError(f"the connection to the controller service closed: {exc}") from exc

    async def _request(self, message: Any, session: str | None, expected: type[M] | tuple[type[BaseModel], ...],
                       timeout_s: float | None, wire: dict[str, Any] | None = None) -> Any:
        future: asyncio.Future[ServiceMessage] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = (session, future)
        try:
            await self._send(message, wire)
            reply = await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(message.id, None)
        if not isinstance(reply, expected):
            raise BadReplyError(f"the controller service answered {message.type} with {reply.type}",
                                detail={"reason": "unexpected_reply"})
        return reply

    async def _read(self) -> None:
        try:
            async for raw in self._ws:
                try:
                    message = _SERVICE.validate_json(raw)
                except ValidationError as exc:
                    error = exc.errors(include_url=False)[0]
                    where = ".".join(str(p) for p in error["loc"]) or "message"
                    self._broken = BadReplyError(f"the controller service sent a bad message: {where}: {error['msg']}"
                                                 [:300], detail={"reason": "bad_message"})
                    await self._ws.close()
                    break
                self._route(message)
        except websockets.WebSocketException as exc:
            log.info("controller service connection closed: %s", exc)
        finally:
            if self._broken is None:
                self._broken = DeskpodError("the connection to the controller service closed")
            for _, future in self._pending.values():
                if not future.done():
                    future.set_exception(self._broken)
            self._arrived.set()

    def _route(self, message: ServiceMessage) -> None:
        request_id = getattr(message, "id", None)
        pending = self._pending.get(request_id) if request_id is not None else None
        if pending is not None and not pending[1].done():
            if isinstance(message, ServiceError):
                pending[1].set_exception(error_from_wire(message.error.model_dump()))
            else:
                pending[1].set_result(message)
            return
        if isinstance(message, ServiceFinished):
            for session, future in self._pending.values():
                if session == message.session and not future.done():
                    future.set_result(message)
        if isinstance(message, (ServiceOpened, ServiceOk, ServiceResetDone)):
            log.warning("the controller service answered a request not pending: %s %r", message.type, request_id)
            return
        if len(self._notices) == self._notices.maxlen:
            log.warning("more than %d unread controller service messages: dropping the oldest", MAX_QUEUED_EVENTS)
        self._notices.append(message)
        self._arrived.set()


class SyncControllerClient:
    """:class:`ControllerClient` for synchronous scripts: the same methods, blocking.

    The async client runs on a private event loop in a thread (:class:`deskpod.client.loop_thread.LoopThread`).

    Example::

        with SyncControllerClient.connect(url, token) as client:
            session = client.open(sandbox_url, sandbox_token, task).session
            client.ready(session)
            client.submit(session, [{"type": "click", "x": 640, "y": 560}])
            print(client.finish(session).status)
    """

    def __init__(self, loop: LoopThread, client: ControllerClient) -> None:
        self._loop = loop
        self.client = client
        """The async client (use it only through this facade's loop)."""

    @classmethod
    def connect(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S,
                role: Literal["agent", "approver"] = "agent") -> SyncControllerClient:
        """Connect (see :meth:`ControllerClient.connect`; ``role="approver"`` with the approver token)."""
        loop = LoopThread("deskpod-controller-client")
        try:
            return cls(loop, loop.run(ControllerClient.connect(url, token, timeout_s=timeout_s, role=role)))
        except BaseException:
            loop.close()
            raise

    def __enter__(self) -> SyncControllerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and stop the loop."""
        try:
            self._loop.run(self.client.close())
        finally:
            self._loop.close()

    def open(self, sandbox_url: str, sandbox_token: str, task: SessionTask | Mapping[str, Any],
             policy: Policy | Mapping[str, Any] | None = None,
             approver: Literal["approver", "self"] = "approver") -> ServiceOpened:
        """See :meth:`ControllerClient.open`."""
        return self._loop.run(self.client.open(sandbox_url, sandbox_token, task, policy, approver))

    def open_named(self, name: str, task: SessionTask | Mapping[str, Any], **options: Any) -> ServiceOpened:
        """See :meth:`ControllerClient.open_named` (``options``: its keyword arguments)."""
        return self._loop.run(self.client.open_named(name, task, **options))

    def ready(self, session: str, timeout_s: float | None = REPLY_TIMEOUT_S) -> ServiceObservation | ServiceFinished:
        """See :meth:`ControllerClient.ready`."""
        return self._loop.run(self.client.ready(session, timeout_s))

    def submit(self, session: str, actions: Sequence[Action | Mapping[str, Any]],
               **options: Any) -> ServiceObservation | ServiceFinished:
        """See :meth:`ControllerClient.submit` (``options``: its keywords; it blocks while a confirmation waits)."""
        return self._loop.run(self.client.submit(session, actions, **options))

    def finish(self, session: str, claim: str = "") -> ServiceRunSummary:
        """See :meth:`ControllerClient.finish`."""
        return self._loop.run(self.client.finish(session, claim))

    def confirm(self, request_id: str, approve: bool, digest: str) -> None:
        """See :meth:`ControllerClient.confirm`."""
        self._loop.run(self.client.confirm(request_id, approve, digest))

    def review(self, pause_id: str, answer: PauseAnswer) -> None:
        """See :meth:`ControllerClient.review`."""
        self._loop.run(self.client.review(pause_id, answer))

    def pause(self, session: str) -> None:
        """See :meth:`ControllerClient.pause`."""
        self._loop.run(self.client.pause(session))

    def resume(self, session: str) -> None:
        """See :meth:`ControllerClient.resume`."""
        self._loop.run(self.client.resume(session))

    def cancel(self, session: str) -> None:
        """See :meth:`ControllerClient.cancel`."""
        self._loop.run(self.client.cancel(session))

    def end(self, session: str) -> None:
        """See :meth:`ControllerClient.end`."""
        self._loop.run(self.client.end(session))

    def withdraw(self, session: str) -> None:
        """See :meth:`ControllerClient.withdraw`."""
        self._loop.run(self.client.withdraw(session))

    def takeover(self, session: str) -> None:
        """See :meth:`ControllerClient.takeover`."""
        self._loop.run(self.client.takeover(session))

    def human_input(self, session: str, action: Action | Mapping[str, Any], timeout_s: float | None = None) -> None:
        """See :meth:`ControllerClient.human_input`."""
        self._loop.run(self.client.human_input(session, action, timeout_s))

    def handback(self, session: str) -> None:
        """See :meth:`ControllerClient.handback`."""
        self._loop.run(self.client.handback(session))

    def credential(self, request_id: str, secret: str | None) -> None:
        """See :meth:`ControllerClient.credential`."""
        self._loop.run(self.client.credential(request_id, secret))

    def reset(self, session: str, start_url: str | None = None) -> ServiceResetDone:
        """See :meth:`ControllerClient.reset`."""
        return self._loop.run(self.client.reset(session, start_url))

    def events(self) -> Iterator[ServiceNotice]:
        """See :meth:`ControllerClient.events`: a blocking iterator."""
        return self._loop.iterate(self.client.events())
