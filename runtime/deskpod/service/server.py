"""``deskpod serve``: the controller as a websocket service for other services.

The service is a FastAPI application (:func:`create_app`) run by uvicorn
(:func:`serve`); ``GET /healthz`` answers ``{"ok": true, "sessions": N,
"running": M}`` (sessions open on live connections, runs going). A remote service (an eval harness, a model loop, an approval UI) connects to
``ws://HOST:PORT/v1/controller`` with ``Authorization: Bearer <token>``; the
service holds only the token's SHA-256 (``DESKPOD_SERVE_TOKEN_SHA256``, or the
SHA-256 of ``DESKPOD_SERVE_TOKEN``) and compares in constant time. Requests from
browsers (any ``Origin`` header) are refused. Messages are JSON objects with a
``type`` (:data:`ClientMessage`); at most :data:`MAX_MESSAGE_BYTES` each (a larger
one closes the connection with code 1009).

A *session* is one run (:func:`deskpod.controller.runner.run_task`) on one
sandbox, whose agent is the remote service. One session at a time may run on a
sandbox, whatever URL reaches it: the service connects to the sandbox when the
session opens and knows it by the ``sandbox_id`` of the daemon's hello, not by the
URL's spelling.

Approvals come from a principal other than the agent. The service has a second
token, the *approver* token (``DESKPOD_SERVE_APPROVER_TOKEN_SHA256`` or
``DESKPOD_SERVE_APPROVER_TOKEN``); a connection made with it is an *approver
connection* (a console, a human's tool), which may only answer: it receives every
``confirmation_required`` and ``pause_required`` of the sessions that wait for an
approver (also those asked before it connected) and answers them with ``confirm``
and ``review``. The opener says who approves its session (``open.approver``):
``"approver"`` (the default) or ``"self"``, its own connection, which only an
operator's policy with ``allow_self_approval: true`` permits (unattended evals
against test sites); every confirmation record of such a run says
``self_approval: true``. An answer from a connection not allowed to give it is
refused (``unauthorized``) and the question stays open. The opener still sees its
session's questions, to know why a step waits. The web console's connections
(``/console/ws``, :mod:`deskpod.console.app`) are approver connections of a signed-in
person, or *viewer* connections, which receive what an approver receives and answer
nothing. Approver and viewer connections also receive a ``session`` view
(:class:`~deskpod.service.messages.ServiceSession`) of every session when it opens,
changes state or page, and ends (and of every open one when they connect), in the
order the run made them relative to its questions.

- ``open {id, sandbox: {url, token, egress_control?: {url, token, tenant?}}, task: {name, start_url,
  allowed_domains?, limits?, model_size?, success}, policy?, approver?}`` → ``opened {id, session}``, then
  ``observation {id: null, session, status: "ready", observation}``. The run's allowlist
  goes to the sandbox's egress proxy too (:mod:`deskpod.controller.egress`): the stack's
  (``DESKPOD_EGRESS_CONTROL``) when ``sandbox.url`` is the stack's sandbox
  (``DESKPOD_SANDBOX_URL``); a leased pool slot's own when the opener gives it
  (``egress_control``: the lease's ``ID.egress`` file, ``http://ADDRESS:3129``; ``tenant``: the
  sandbox's tenant on a shared proxy, whose list alone it sets); else none
  (the browser's line only). Never one sandbox's proxy for another. A session's
  ``policy`` can only tighten the operator's (``deskpod serve --policy``): more
  blocked or confirmed actions and levels, smaller timeouts and limits.
  Only a session on a sandbox the operator vouches for (``sandbox.url`` exactly one of
  ``DESKPOD_SERVE_SANDBOXES``, :attr:`ControllerService.sandboxes`) may type a host-held
  secret (``type_secret``) or ask a person for a credential (``request_credential``):
  the opener chooses the URL, and the daemon there reports the URL, the page and the
  focused field those actions are checked on, so on any other sandbox they are refused
  (``policy_denied``, ``rule`` ``credential_sandbox``) and its run holds no secret.
- ``submit {id, session, actions, sensitive?, risk?, intent?}``: one proposal,
  accepted only while the session waits for one (else ``busy``); every action
  goes through the policy (risk levels, confirmations, allowlist, limits) →
  ``observation {id: <the submit's id>, session, status: ok|error|denied,
  observation, error}``.
- ``finish {id, session, claim}``: the agent says it is done; the controller
  verifies from the environment → ``finished {session, result}``.
- ``confirm {id, request_id, approve, digest}`` answers a
  ``confirmation_required {session, request}`` (the request carries the action,
  target, data, risk, reversibility, URL, screenshot and the digest to repeat).
- ``review {id, pause_id, answer: resume|cancel|takeover}`` answers
  ``pause_required {session, notice}``.
- ``pause`` / ``resume`` / ``cancel {id, session}`` → ``ok {id}``; a cancel ends
  the run at once, a pause is shown as ``pause_required`` at once.
- ``reset {id, session, start_url?}`` after the run resets the session's sandbox
  in place → ``reset_done {id, session, token, url}`` (the token rotates; the new
  one is returned only on this connection).
- ``takeover {id, session}`` (approver connections; or the answer ``takeover`` to a pause):
  a person takes the sandbox over (:mod:`deskpod.controller.takeover`) → ``ok {id}``, then
  ``takeover_state {session, active: true, by}`` to the opener and every approver;
  ``human_input {id, session, action}`` runs one protocol action on the run's executor,
  audited as ``human:<principal>`` → ``ok {id}``; ``handback {id, session}`` → ``ok``,
  ``takeover_state {active: false}``, and the agent plans on a fresh observation.
- ``credential {id, request_id, secret | cancel: true}`` (approver connections) answers a
  ``credential_required {session, request}`` (:mod:`deskpod.controller.credentials`).
  The agent's connection sending any of these four is refused (``unauthorized``).
- every audit record is streamed as ``event {session, record}``; bad input gets
  ``error {id, error: {code, message, detail}}`` and the connection stays usable.
  The outbound messages are the models of :mod:`deskpod.service.messages`.

Closing the connection cancels its sessions; unanswered confirmations are denials.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.egress import EgressControl
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.credentials import CredentialAnswer, CredentialRequest, SecretStore
from deskpod.controller.policy import Policy, tightened
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.controller.runner import run_task
from deskpod.service.session_view import SessionView
from deskpod.controller.task import TaskSpec
from deskpod.errors import BusyError, DeskpodError, InvalidRequestError, UnauthorizedError
from deskpod.protocol import (
    ErrorBody,
    Observation,
    find_lone_surrogate,
    first_error,
    scrub_surrogates,
)
from deskpod.service.messages import (
    MAX_MESSAGE_BYTES,
    APPROVER_ROLE_HEADER,
    SERVICE_PATH,
    ClientMessage,
    ConfirmMessage,
    ControlMessage,
    CredentialMessage,
    FinishMessage,
    HandbackMessage,
    HumanInputMessage,
    OpenMessage,
    ResetMessage,
    ReviewMessage,
    SandboxRef,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServiceError,
    ServiceEvent,
    ServiceFinished,
    ServiceHealth,
    ServiceMessage,
    ServiceObservation,
    ServiceOk,
    ServiceOpened,
    ServicePauseRequired,
    ServiceResetDone,
    ServiceRunSummary,
    ServiceTakeoverState,
    SubmitMessage,
    TakeoverMessage,
)
from deskpod.settings import get_settings
from deskpod.tokens import bearer_refusal, token_sha256

if TYPE_CHECKING:  # FastAPI and uvicorn (the ``serve`` extra) are imported when the service starts
    from fastapi import FastAPI
    from starlette.websockets import WebSocket

    from deskpod.console.auth import ConsoleSettings

__all__ = [
    "ControllerService",
    "MAX_WATCHER_QUEUE",
    "WATCHER_ROLES",
    "approver_token_sha256_from_env",
    "create_app",
    "serve",
    "token_sha256_from_env",
]

log = logging.getLogger(__name__)

MAX_WATCHER_QUEUE = 1000
"""Messages an approver or viewer connection may leave unsent before the service closes it."""

SESSION_CONNECT_TIMEOUT_S = 15.0
"""Seconds an ``open`` waits for its sandbox to accept the connection before it fails."""

Role = Literal["agent", "approver", "viewer"]
"""What a connection may do, from the token it presented: an agent opens and drives
sessions, an approver answers their questions, a viewer (a console user without the
approver role) receives what an approver receives and may answer nothing."""

WATCHER_ROLES: frozenset[str] = frozenset({"approver", "viewer"})
"""The roles whose connections receive every session's questions and ``session`` views."""

_MESSAGE: TypeAdapter[Any] = TypeAdapter(ClientMessage)


def token_sha256_from_env() -> str:
    """The service token's SHA-256 (hex) from the settings: ``DESKPOD_SERVE_TOKEN_SHA256``,
    else the SHA-256 of ``DESKPOD_SERVE_TOKEN`` (:func:`deskpod.settings.get_settings`).

    Raises:
        InvalidRequestError: neither is set.
        SettingsError: the hash is not 64 hex digits (or another setting does not parse).
    """
    settings = get_settings()
    if settings.serve_token_sha256 is not None:
        return settings.serve_token_sha256
    if settings.serve_token is not None:
        return hashlib.sha256(settings.serve_token.get_secret_value().encode()).hexdigest()
    raise InvalidRequestError("set DESKPOD_SERVE_TOKEN (or DESKPOD_SERVE_TOKEN_SHA256) to serve")


def approver_token_sha256_from_env() -> str | None:
    """The approver token's SHA-256 (hex) from the settings: ``DESKPOD_SERVE_APPROVER_TOKEN_SHA256``,
    else the SHA-256 of ``DESKPOD_SERVE_APPROVER_TOKEN``; ``None`` when neither is set (then
    no approver can connect, and confirmations no session answers itself time out as denials).

    Raises:
        SettingsError: the hash is not 64 hex digits (or another setting does not parse).
    """
    settings = get_settings()
    if settings.serve_approver_token_sha256 is not None:
        return settings.serve_approver_token_sha256
    if settings.serve_approver_token is not None:
        return token_sha256(settings.serve_approver_token.get_secret_value())
    return None


class _RemoteAgent:
    """The session's agent: proposals arrive as ``submit``/``finish`` messages."""

    def __init__(self, send: Any, session: str) -> None:
        self._send = send
        self._session = session
        self.inbox: asyncio.Queue[SubmitMessage | FinishMessage] = asyncio.Queue(maxsize=1)
        self.waiting = False
        self._answering: str | None = None

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        """Send the observation (answering the last ``submit`` by its ``id``) and wait for
        the next ``submit`` or ``finish``."""
        status = "ready" if last is None else last.status
        # Waiting from before the send: a client may answer the observation before the
        # send has returned, and must not be refused as busy then.
        self.waiting = True
        try:
            await self._send(ServiceObservation(id=self._answering, session=self._session, status=status,
                                                error=last.error if last else {}, observation=observation))
            message = await self.inbox.get()
        finally:
            self.waiting = False
        self._answering = message.id
        if isinstance(message, FinishMessage):
            return Done(message.claim)
        return Proposal(actions=message.actions, sensitive=message.sensitive, risk=message.risk,
                        intent=message.intent)

    async def close(self) -> None:
        """Nothing to release."""


@dataclass
class _Session:
    id: str
    agent: _RemoteAgent
    control: RunControl
    sandbox: SandboxRef
    sandbox_id: str
    self_approval: bool
    view: SessionView
    runner: asyncio.Task[RunResult] | None = None


@dataclass(eq=False)
class _Pending:
    """A question of a session waiting for its answer (a confirmation or a pause): ``message`` is what
    approvers are sent, ``future`` gets the answer."""

    session: _Session
    opener: _Connection
    message: ServiceConfirmationRequired | ServicePauseRequired | ServiceCredentialRequired
    future: asyncio.Future[Any]

    def may_answer(self, connection: _Connection) -> bool:
        """Approver connections always; the opener only when its session approves itself, and
        never a credential request (whoever answers it knows the secret)."""
        if isinstance(self.message, ServiceCredentialRequired):
            return connection.role == "approver"
        return connection.role == "approver" or (self.session.self_approval and connection is self.opener)


@dataclass(eq=False)
class _Connection:
    service: ControllerService
    ws: WebSocket
    role: Role = "agent"
    principal: str = "agent"
    """Who is on this connection: the signed-in person's name for the console, else
    ``"agent"`` or ``"approver"`` (the role); human inputs are audited as ``human:<principal>``."""
    outbox: asyncio.Queue[ServiceMessage] | None = None
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)
    sessions: dict[str, _Session] = field(default_factory=dict)
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, message: ServiceMessage) -> None:
        # ASCII escapes: valid JSON whatever a string holds (ids are scrubbed of lone surrogates).
        text = json.dumps(message.model_dump(mode="json"), separators=(",", ":"))
        async with self.sending:  # events, observations and replies are sent from several tasks
            await self.ws.send_text(text)

    async def pump(self) -> None:
        """Send the outbox in order until the connection closes; close it when the outbox overflowed."""
        while self.outbox is not None:
            getting = asyncio.ensure_future(self.outbox.get())
            overflow = asyncio.ensure_future(self.overflowed.wait())
            try:
                await asyncio.wait({getting, overflow}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                overflow.cancel()
                if not getting.done():
                    getting.cancel()
            if self.overflowed.is_set():
                break
            try:
                await self.send(getting.result())
            except Exception as exc:  # noqa: BLE001 - a closing console must not fail the question
                log.info("message not sent to a %s connection: %s", self.role, exc)
                return
        try:
            await self.ws.close(code=1013)
        except Exception as exc:  # noqa: BLE001 - it may have closed already
            log.info("closing a %s connection: %s", self.role, exc)

    async def error(self, request_id: str | None, exc: DeskpodError) -> None:
        await self.send(ServiceError(id=request_id, error=ErrorBody(code=exc.code, message=exc.message,
                                                                    detail=exc.detail)))

    # The approval channel of this connection's sessions: questions go to the opener and,
    # unless the session approves itself, to every approver connection.
    def channel(self, session: _Session) -> Any:
        connection = self

        async def ask(key: str, message: ServiceConfirmationRequired | ServicePauseRequired
                      | ServiceCredentialRequired) -> Any:
            pending = _Pending(session, connection, message, asyncio.get_running_loop().create_future())
            connection.service.pending[key] = pending
            try:
                await connection.send(message)
                if not session.self_approval or isinstance(message, ServiceCredentialRequired):
                    await connection.service.to_approvers(message)
                return await pending.future
            finally:
                connection.service.pending.pop(key, None)

        class _Channel:
            async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
                answer: ConfirmationAnswer | None = await ask(request.id, ServiceConfirmationRequired(
                    session=session.id, request=request.to_json(), approver=_approver(session)))
                return answer

            async def review(self, notice: PauseNotice) -> PauseAnswer | None:
                answer: PauseAnswer | None = await ask(notice.id, ServicePauseRequired(
                    session=session.id, notice=notice.to_json(), approver=_approver(session)))
                return answer

            async def credential(self, request: CredentialRequest) -> CredentialAnswer | None:
                answer: CredentialAnswer | None = await ask(request.request_id, ServiceCredentialRequired(
                    session=session.id, request=request.to_json()))
                return answer

        return _Channel()

    async def handle(self, raw: str | bytes) -> None:
        request_id = None
        try:
            try:
                data = json.loads(raw)
                request_id = data.get("id") if isinstance(data, dict) and isinstance(data.get("id"), str) else None
                if request_id is not None:
                    request_id = scrub_surrogates(request_id[:128])
                where = find_lone_surrogate(data)
                if where is not None:
                    # It would reach the audit log and the sandbox, neither of which can encode it.
                    raise InvalidRequestError(f"{scrub_surrogates(where)[:200]}: a lone UTF-16 surrogate is not text")
                message = _MESSAGE.validate_python(data)
            except (ValueError, RecursionError) as exc:
                reason = first_error(exc, empty="") if isinstance(exc, ValidationError) else "message: not a JSON object"
                raise InvalidRequestError(reason) from exc
            try:
                await self.dispatch(message)
            except ValidationError as exc:
                raise InvalidRequestError(first_error(exc, empty=exc.title)) from exc
        except DeskpodError as exc:
            await self.error(request_id, exc)
        except Exception as exc:  # noqa: BLE001 - a controller bug must not drop the connection's sessions
            log.exception("request %s failed", request_id)
            await self.error(request_id, DeskpodError(f"internal error: {type(exc).__name__}"))

    def _session(self, session: str) -> _Session:
        found = self.sessions.get(session)
        if found is None:
            raise InvalidRequestError(f"no session {session!r} on this connection")
        return found

    def _answerable(self, key: str, kind: type[BaseModel], what: str) -> _Pending:
        """The pending question ``key`` of type ``kind`` that this connection may answer.

        Raises:
            InvalidRequestError: none is pending.
            UnauthorizedError: this connection may not answer it (it stays pending).
        """
        pending = self.service.pending.get(key)
        if pending is None or pending.future.done() or not isinstance(pending.message, kind):
            raise InvalidRequestError(f"no pending {what} {key!r}")
        if not pending.may_answer(self):
            log.warning("refused an answer to %s of %s from a %s connection", key, pending.session.id, self.role)
            raise UnauthorizedError(f"only an approver connection may answer {what} {key!r}: neither the connection "
                                    "that submits actions nor a viewer approves them", detail={"rule": "approver_only"})
        return pending

    async def dispatch(self, message: Any) -> None:
        if isinstance(message, ConfirmMessage):
            pending = self._answerable(message.request_id, ServiceConfirmationRequired, "confirmation")
            by = "serve:approver" if self.role == "approver" else "serve:self"
            pending.future.set_result(ConfirmationAnswer(message.approve, message.digest, by))
        elif isinstance(message, ReviewMessage):
            pending = self._answerable(message.pause_id, ServicePauseRequired, "pause")
            if message.answer == "takeover":
                if self.role != "approver":
                    raise UnauthorizedError("only an approver connection may take the sandbox over",
                                            detail={"rule": "approver_only"})
                pending.session.control.takeover.request(self.principal)
            pending.future.set_result(message.answer)
        elif isinstance(message, (TakeoverMessage, HumanInputMessage, HandbackMessage, CredentialMessage)):
            await self._human(message)
        elif self.role != "agent":
            raise UnauthorizedError(f"an {self.role} connection does not send {message.type!r} (approvers only "
                                    "answer confirmations and pauses, viewers nothing)", detail={"rule": "approver_only"})
        elif isinstance(message, OpenMessage):
            await self._open(message)
        elif isinstance(message, (SubmitMessage, FinishMessage)):
            session = self._session(message.session)
            if not session.agent.waiting or session.agent.inbox.full():
                raise BusyError("the session is not waiting for a proposal: wait for its next observation "
                                "(a step may be running or awaiting a confirmation)")
            session.agent.inbox.put_nowait(message)
        elif isinstance(message, ControlMessage):
            control = self._session(message.session).control
            {"pause": control.pause, "resume": control.resume, "cancel": control.cancel}[message.type]()
            await self.send(ServiceOk(id=message.id))
        elif isinstance(message, ResetMessage):
            await self._reset(message)

    async def _human(self, message: TakeoverMessage | HumanInputMessage | HandbackMessage | CredentialMessage) -> None:
        """A person's message: take over, an input, hand back, or a credential (approver connections only).

        Raises:
            UnauthorizedError: not an approver connection (the agent's connection never drives
                as a person nor sees a secret), or another person holds the takeover.
            InvalidRequestError: no such session or request, or not in the state it needs.
            DeskpodError: the input was refused or failed (the run goes on).
        """
        if self.role != "approver":
            log.warning("refused %s from a connection that is not an approver's", message.type)
            raise UnauthorizedError(f"only an approver connection may send {message.type!r}: the agent's connection "
                                    "neither drives the sandbox as a person nor gives credentials",
                                    detail={"rule": "approver_only"})
        if isinstance(message, CredentialMessage):
            pending = self._answerable(message.request_id, ServiceCredentialRequired, "credential request")
            pending.future.set_result(CredentialAnswer(None if message.cancel else message.secret, self.principal))
            await self.send(ServiceOk(id=message.id))
            return
        session = self.service.find_session(message.session)
        if isinstance(message, TakeoverMessage):
            if session.runner is None or session.runner.done():
                raise InvalidRequestError(f"the run of {session.id} has ended: nothing to take over")
            pause = next((p for p in self.service.pending.values() if p.session is session and not p.future.done()
                          and isinstance(p.message, ServicePauseRequired)), None)
            if pause is not None:  # the pause's answer is the takeover
                session.control.takeover.request(self.principal)
                pause.future.set_result("takeover")
            else:
                session.control.take_over(self.principal)
        elif isinstance(message, HumanInputMessage):
            await session.control.takeover.submit(message.action, self.principal)
        else:
            session.control.takeover.handback(self.principal)
        await self.send(ServiceOk(id=message.id))

    async def _takeover_state(self, session: _Session, active: bool, by: str | None) -> None:
        """Tell the session's connection and every approver that a person took over or handed back."""
        message = ServiceTakeoverState(session=session.id, active=active, by=by)
        try:
            await self.send(message)
        except Exception as exc:  # noqa: BLE001 - the opener went away: its sessions are being cancelled
            log.info("takeover state of %s not sent to its opener: %s", session.id, exc)
        await self.service.to_approvers(message)

    async def _open(self, message: OpenMessage) -> None:
        spec = message.task
        domains = spec.allowed_domains
        if message.policy is not None and message.policy.allowed_domains:
            if domains:
                raise InvalidRequestError("give allowed_domains in the task or in the policy, not both")
            domains = message.policy.allowed_domains
        task = TaskSpec(name=spec.name, start_url=spec.start_url, model_size=spec.model_size,
                        allowed_domains=domains, limits=spec.limits, success=spec.success)
        policy = self.service.policy if message.policy is None else tightened(self.service.policy, message.policy)
        self_approval = message.approver == "self"
        if self_approval and not policy.allow_self_approval:
            raise UnauthorizedError("the operator's policy does not allow a session to approve its own actions "
                                    "(allow_self_approval): confirmations come from an approver connection",
                                    detail={"rule": "self_approval"})
        from deskpod.client import SandboxClient

        egress = self.service.egress_control_for(message.sandbox)
        # The opener names the sandbox; only one the operator listed gets the host's secrets
        # or a person's credential (its daemon reports the page and the field they go to).
        refusal = self.service.credentials_refusal(message.sandbox)
        client = await SandboxClient.connect(message.sandbox.url, message.sandbox.token,
                                             timeout_s=SESSION_CONNECT_TIMEOUT_S)
        sandbox_id = client.hello.sandbox_id
        if sandbox_id in self.service.in_use:
            await client.close()
            raise BusyError(f"another session is running on that sandbox ({sandbox_id})",
                            detail={"sandbox_id": sandbox_id})
        self.service.in_use.add(sandbox_id)
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        session = _Session(session_id, None, RunControl(), message.sandbox,  # type: ignore[arg-type]
                           sandbox_id, self_approval, SessionView(session_id, task.name, client.hello.screen,
                                                                  "self" if self_approval else "approver"))
        session.agent = _RemoteAgent(self.send, session.id)
        self.sessions[session.id] = session

        def on_takeover(active: bool, by: str | None) -> None:
            asyncio.get_running_loop().create_task(self._takeover_state(session, active, by))

        session.control.takeover.listener = on_takeover
        try:
            await self.send(ServiceOpened(id=message.id, session=session.id))
        except BaseException:
            self.service.in_use.discard(sandbox_id)
            await client.close()
            raise

        async def stream(record: dict[str, Any]) -> None:
            try:
                await self.send(ServiceEvent(session=session.id, record=record))
            except Exception as exc:  # noqa: BLE001 - the connection went away: its sessions are being cancelled
                log.info("event of %s not sent: %s", session.id, exc)

        def on_event(record: dict[str, Any]) -> None:
            asyncio.get_running_loop().create_task(stream(record))
            for listener in self.service.record_listeners:
                listener(session.id, record)
            if session.view.apply(record):
                self.service.to_watchers(session.view.message())

        async def play() -> RunResult:
            try:
                result = await run_task(task, client, audit_dir=self.service.audit_dir, agent=session.agent,
                                        channel=self.channel(session), policy=policy,
                                        control=session.control, on_event=on_event,
                                        signer=self.service.signer, self_approval=self_approval,
                                        egress_control=egress,
                                        secrets=self.service.secrets if refusal is None else SecretStore(),
                                        snapshots=message.snapshots, credentials_refusal=refusal)
            finally:
                self.service.in_use.discard(sandbox_id)
                await client.close()
            await self.send(ServiceFinished(session=session.id, result=ServiceRunSummary(
                run_id=result.run_id, status=result.status, reason=result.reason, steps=result.steps,
                url=result.url, audit_log=str(result.audit_log), audit_head=result.audit_head,
                scene=str(result.scene) if result.scene else None)))
            return result

        session.runner = asyncio.get_running_loop().create_task(play())
        self.service.to_watchers(session.view.message())

    async def _reset(self, message: ResetMessage) -> None:
        from deskpod.client import Sandbox

        session = self._session(message.session)
        if session.runner is not None and not session.runner.done():
            raise InvalidRequestError("the session's run is still going: finish or cancel it first")
        # A reset is a use of the sandbox too: not while another session runs on it.
        if session.sandbox_id in self.service.in_use:
            raise BusyError(f"another session is running on that sandbox ({session.sandbox_id})",
                            detail={"sandbox_id": session.sandbox_id})
        self.service.in_use.add(session.sandbox_id)
        try:
            sandbox = await Sandbox.open(session.sandbox.url, session.sandbox.token)
            try:
                if sandbox.client.hello.sandbox_id != session.sandbox_id:
                    raise BusyError("the session's URL now reaches another sandbox: not resetting it",
                                    detail={"sandbox_id": sandbox.client.hello.sandbox_id})
                observation = await sandbox.reset(message.start_url)
            finally:
                await sandbox.close()
        finally:
            self.service.in_use.discard(session.sandbox_id)
        session.sandbox = session.sandbox.model_copy(update={"token": sandbox.token})
        await self.send(ServiceResetDone(id=message.id, session=session.id, token=sandbox.token, url=observation.url))

    async def close(self) -> None:
        if self.role == "approver" and not any(c.role == "approver" and c.principal == self.principal
                                               for c in self.service.connections if c is not self):
            for connection in list(self.service.connections):  # the person went away: hand back
                for session in connection.sessions.values():
                    takeover = session.control.takeover
                    if takeover.active and takeover.by == self.principal:
                        takeover.handback(self.principal)
        for pending in list(self.service.pending.values()):
            if pending.opener is self and not pending.future.done():
                pending.future.set_result(None)
        for session in self.sessions.values():
            session.control.cancel("the service connection closed")
        for session in self.sessions.values():
            if session.runner is not None:
                await asyncio.gather(session.runner, return_exceptions=True)


@dataclass
class ControllerService:
    """The ``deskpod serve`` websocket service.

    Args:
        token_sha256: SHA-256 (hex) of the bearer token agents' connections present.
        approver_token_sha256: SHA-256 (hex) of the approver token (``None``: no
            approver can connect); it must differ from ``token_sha256``.
        audit_dir: where runs write their audit logs, screenshots and scenes.
        policy: the operator's policy: a session's own policy can only tighten it
            (:func:`deskpod.controller.policy.tightened`).
        signer: seals every run's audit log (default: the controller's key,
            :meth:`AuditSigner.load_or_create`, loaded when the service is made).
        egress_control: the stack's egress proxy control (``None``: none), used only for
            sessions on ``egress_sandbox_url``.
        egress_sandbox_url: the websocket URL of the stack's sandbox, the one behind that proxy.
        secrets: the host-held secrets a run's ``type_secret`` may type (:mod:`.credentials`).
        sandboxes: the websocket URLs of the sandboxes the operator vouches for
            (``DESKPOD_SERVE_SANDBOXES``), compared with ``open``'s ``sandbox.url`` exactly: only a
            session on one of them is given ``secrets`` and may ask a person for a credential;
            sessions on any other sandbox run without either (default none: no session).

    One session at a time may run on a sandbox (``in_use`` holds their daemons'
    ``sandbox_id``); ``pending`` holds the questions waiting for an answer, by id.

    Raises:
        InvalidRequestError: the approver token is the agents' token.
    """

    token_sha256: str
    audit_dir: str = "deskpod-audit"
    policy: Policy = field(default_factory=Policy)
    signer: AuditSigner = field(default_factory=AuditSigner.load_or_create)
    approver_token_sha256: str | None = None
    egress_control: EgressControl | None = None
    egress_sandbox_url: str | None = None
    secrets: SecretStore = field(default_factory=SecretStore)
    sandboxes: frozenset[str] = frozenset()
    in_use: set[str] = field(default_factory=set)
    connections: set[_Connection] = field(default_factory=set)
    pending: dict[str, _Pending] = field(default_factory=dict)
    record_listeners: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    """Called with ``(session, record)`` for every audit record of every session (the live view's meta)."""

    def __post_init__(self) -> None:
        if self.approver_token_sha256 == self.token_sha256:
            raise InvalidRequestError("the approver token must differ from the service token: whoever submits "
                                      "actions must not be able to approve them")
        if self.approver_token_sha256 is None:
            log.warning("no approver token (DESKPOD_SERVE_APPROVER_TOKEN): confirmations are denied when they time "
                        "out, unless a session approves itself under a policy that allows it")
        if self.secrets.names and not self.sandboxes:
            log.warning("%d host-held secret(s) but no sandbox listed in DESKPOD_SERVE_SANDBOXES: no session will type "
                        "them", len(self.secrets.names))

    def credentials_refusal(self, sandbox: SandboxRef) -> str | None:
        """Why a session on ``sandbox`` may type no secret and ask nobody for a credential
        (``None``: its URL is one of :attr:`sandboxes`, so it may)."""
        if sandbox.url in self.sandboxes:
            return None
        return ("the service does not vouch for this session's sandbox (its URL is not in DESKPOD_SERVE_SANDBOXES), "
                "and the page and field such a secret would go to are what that sandbox reports")

    def egress_control_for(self, sandbox: SandboxRef) -> EgressControl | None:
        """The egress proxy control of the sandbox a session drives: the stack's for the
        stack's sandbox (whatever the opener gave), the opener's for a pool slot, else ``None``.

        Raises:
            InvalidRequestError: the opener's ``egress_control`` is not a usable URL.
        """
        if self.egress_sandbox_url is not None and sandbox.url == self.egress_sandbox_url:
            return self.egress_control
        if sandbox.egress_control is None:
            return None
        try:
            return EgressControl(sandbox.egress_control.url, sandbox.egress_control.token,
                                 tenant=sandbox.egress_control.tenant)
        except ValueError as exc:
            raise InvalidRequestError(f"sandbox.egress_control: {exc}") from exc

    def session_sandbox(self, session: str) -> SandboxRef | None:
        """The sandbox session ``session`` drives, with its current token (``None``: no such
        session on a live connection)."""
        for connection in self.connections:
            found = connection.sessions.get(session)
            if found is not None:
                return found.sandbox
        return None

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries either bearer token."""
        return self.role(header) is not None

    def role(self, header: str | None) -> Role | None:
        """The role an ``Authorization`` header's bearer token grants (``None``: neither token)."""
        if bearer_refusal(header, self.token_sha256) is None:
            return "agent"
        if self.approver_token_sha256 is not None and bearer_refusal(header, self.approver_token_sha256) is None:
            return "approver"
        return None

    async def to_approvers(self, message: ServiceMessage) -> None:
        """Send ``message`` to every approver and viewer connection (:meth:`to_watchers`)."""
        self.to_watchers(message)

    def to_watchers(self, message: ServiceMessage) -> None:
        """Queue ``message`` for every connection of a :data:`WATCHER_ROLES` role.

        Each such connection sends its queue in order, so that a console sees a session's
        views and questions in the order the run made them; one whose queue holds
        :data:`MAX_WATCHER_QUEUE` unsent messages is closed (a console that stopped reading).
        """
        for connection in list(self.connections):
            outbox = connection.outbox
            if outbox is None:
                continue
            if outbox.full():
                log.warning("closing a %s connection that stopped reading", connection.role)
                connection.outbox = None
                connection.overflowed.set()
                continue
            outbox.put_nowait(message)

    def find_session(self, session: str) -> _Session:
        """The session ``session`` of any connection.

        Raises:
            InvalidRequestError: there is none.
        """
        for connection in self.connections:
            found = connection.sessions.get(session)
            if found is not None:
                return found
        raise InvalidRequestError(f"no session {session!r}")

    def health(self) -> ServiceHealth:
        """The ``/healthz`` status: sessions open on live connections, runs going."""
        return ServiceHealth(ok=True, sessions=sum(len(c.sessions) for c in self.connections),
                             running=len(self.in_use))

    async def handler(self, ws: WebSocket, role: Role = "agent", principal: str | None = None) -> None:
        """Serve one accepted connection until it closes; an approver's or a viewer's first
        receives a ``session`` view of every open session and the questions already waiting
        for an approver.

        Args:
            ws: the accepted websocket.
            role: what the connection may do.
            principal: who is on it (the console's signed-in person); default the role's
                name, ``"agent"`` or ``"approver"``.
        """
        connection = _Connection(self, ws, role, principal or role)
        pump: asyncio.Task[None] | None = None
        if role in WATCHER_ROLES:
            connection.outbox = asyncio.Queue(MAX_WATCHER_QUEUE)
            waiting = [p.message for p in self.pending.values() if not p.future.done() and (
                not p.session.self_approval or isinstance(p.message, ServiceCredentialRequired))]
            views = [s.view.message() for c in self.connections for s in c.sessions.values()]
            for queued in [*views, *waiting][-MAX_WATCHER_QUEUE:]:
                connection.outbox.put_nowait(queued)
            pump = asyncio.get_running_loop().create_task(connection.pump())
        self.connections.add(connection)
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text") if message.get("text") is not None else message.get("bytes")
                await connection.handle(raw if raw is not None else b"")
        except Exception as exc:  # noqa: BLE001 - a broken connection must still cancel its sessions
            log.info("connection closed: %s", exc)
        finally:
            self.connections.discard(connection)
            if pump is not None:
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
            await connection.close()

    async def close(self) -> None:
        """Cancel every connection's sessions and wait for their runs to end."""
        await asyncio.gather(*(c.close() for c in list(self.connections)), return_exceptions=True)


def _approver(session: _Session) -> Literal["approver", "self"]:
    return "self" if session.self_approval else "approver"


def create_app(service: ControllerService, console: ConsoleSettings | None = None) -> FastAPI:
    """Build the service's FastAPI application.

    ``GET /healthz`` answers the status (:meth:`ControllerService.health`); the
    websocket route :data:`SERVICE_PATH` refuses, before the handshake, a request
    with an ``Origin`` header (a browser: HTTP 403) or without the bearer token
    (HTTP 401; the token decides whether the connection is an agent's or an
    approver's, see :data:`APPROVER_ROLE_HEADER`). Stopping the app cancels the
    sessions still open.

    Args:
        service: the sessions' state, token and policy.
        console: serve the web console under ``/console`` with these users and origins
            (:func:`deskpod.console.app.mount_console`); ``None``: no console.
    """

    from fastapi import FastAPI
    from starlette.responses import PlainTextResponse
    from starlette.routing import WebSocketRoute

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.close()

    app = FastAPI(title="deskpod serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    async def healthz() -> ServiceHealth:
        return service.health()

    async def controller(websocket: WebSocket) -> None:
        if websocket.headers.get("origin") is not None:
            log.warning("refused a connection from a browser (Origin header)")
            await websocket.send_denial_response(PlainTextResponse("browsers may not connect\n", status_code=403))
            return
        role = service.role(websocket.headers.get("authorization"))
        expected = websocket.headers.get(APPROVER_ROLE_HEADER)
        if role is None or (expected is not None and expected != role):
            log.warning("refused a connection: missing or wrong bearer token (or not the role it expects)")
            await websocket.send_denial_response(
                PlainTextResponse("missing or wrong bearer token\n", status_code=401))
            return
        await websocket.accept()
        await service.handler(websocket, role)

    # /healthz through FastAPI, so that it is in the service's OpenAPI document
    # (:func:`deskpod.schema.write_schemas`); the websocket as a plain Starlette route:
    # its endpoint takes the websocket itself, and its messages have JSON Schemas.
    app.add_api_route("/healthz", healthz, methods=["GET"], response_model=ServiceHealth, summary="service status")
    app.router.routes.append(WebSocketRoute(SERVICE_PATH, controller))
    if console is not None:
        from deskpod.console.app import mount_console
        from deskpod.console.auth import ConsoleAuth
        from deskpod.console.history import history_router
        from deskpod.console.live import live_router

        auth = ConsoleAuth(console)
        mount_console(app, service, auth, routers=[live_router(service, auth.authorize_websocket),
                                                   history_router(service.audit_dir, auth.authorize_request)])
    return app


async def serve(service: ControllerService, host: str, port: int, ready: asyncio.Event | None = None,
                console: ConsoleSettings | None = None) -> None:
    """Run ``service`` on ``host:port`` until cancelled.

    Args:
        ready: set once the socket listens (tests wait on it).
        console: the web console's settings (``None``: no console), see :func:`create_app`.
    """
    import uvicorn

    config = uvicorn.Config(create_app(service, console), host=host, port=port, ws="websockets-sansio", ws_max_size=MAX_MESSAGE_BYTES,
                            ws_ping_interval=20.0, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    running = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            if running.done():
                await running  # startup failed: raise its error
                raise OSError(f"deskpod serve could not listen on {host}:{port}")
            await asyncio.sleep(0.05)
        log.info("deskpod serve on %s:%d", host, port)
        if ready is not None:
            ready.set()
        await asyncio.shield(running)
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)
