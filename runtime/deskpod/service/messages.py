"""The ``deskpod serve`` wire: every message both ways, one model per message ``type``.

A client (an agent's service, an approver's tool, the web console) connects to
:data:`SERVICE_PATH` with ``Authorization: Bearer <token>`` and sends JSON text frames
of at most :data:`MAX_MESSAGE_BYTES`, each one of :data:`ClientMessage`; the service
sends JSON text frames (ASCII escapes), each one of :data:`ServiceMessage`. What the
server does with them is :mod:`deskpod.service.server`; :mod:`deskpod.service.client`
speaks them from Python and ``service/console/static/console.js`` from the console.

Inbound (client → service), with their answers:

- ``open {id, sandbox, task, policy?, approver?, snapshots?, restore?}`` → ``opened {id, session}``,
  then ``observation {id: null, session, status: "ready", observation}``; ``sandbox`` is
  ``{name}`` (a sandbox the service owns, reset before the session) or ``{url, token}``;
  a sandbox another session holds is ``busy`` (``retry_after_s``);
- ``submit {id, session, actions, sensitive?, risk?, intent?, console?, network?}`` → ``observation {id, ...}``
  (or the session's ``finished``); ``finish {id, session, claim?}`` → ``finished``;
- ``confirm {id, request_id, approve, digest}`` answers ``confirmation_required``;
  ``review {id, pause_id, answer}`` answers ``pause_required``;
  ``credential {id, request_id, secret | cancel: true}`` answers ``credential_required``
  (→ ``ok {id}``);
- ``pause`` / ``resume`` / ``cancel`` / ``end`` / ``withdraw {id, session}`` → ``ok {id}``;
  ``reset {id, session, start_url?}`` → ``reset_done {id, session, token, url}``;
- ``takeover``, ``human_input {id, session, action}``, ``handback`` → ``ok {id}``, and
  ``takeover_state {session, active, by}`` to the opener and every approver.

Outbound only: ``question_withdrawn {session, id, reason}`` (a question nobody may answer
any more, and why), ``event {session, record}`` (every audit record of a run),
``session`` (a session as a console shows it, to approver and viewer connections)
and ``error {id, error: {code, message, detail}}``, the daemon wire's error envelope
(:class:`~deskpod.protocol.replies.ErrorBody`): bad input never closes the connection.
``GET /healthz`` answers :class:`ServiceHealth`.

Every payload is a model (the questions' :class:`ConfirmationRequestBody`,
:class:`PauseNoticeBody` and :class:`CredentialRequestBody`), except two JSON objects
whose shape belongs elsewhere: an ``event``'s ``record`` is an audit record, one of the
audit log's many kinds (:mod:`deskpod.controller.audit`), and an ``observation``'s
``error`` is the last step's outcome, ``{}`` or ``{code, message}`` and sometimes ``rule``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

from deskpod.controller.confirm import PauseAnswer
from deskpod.controller.credentials import ProposedAction
from deskpod.controller.policy.levels import RiskLevel
from deskpod.controller.policy.policy_file import Policy
from deskpod.client.snapshot_store import SNAPSHOT_NAME_PATTERN
from deskpod.protocol import Action, ErrorBody, Observation, Size
from deskpod.protocol._base import STRICT
from deskpod.service.payload import Payload
from deskpod.service.session_task import SessionTask
from deskpod.settings.sandboxes import SANDBOX_NAME_PATTERN

__all__ = [
    "APPROVER_ROLE_HEADER",
    "ClientMessage",
    "ConfirmMessage",
    "ConfirmationRequestBody",
    "ControlMessage",
    "CredentialField",
    "CredentialMessage",
    "CredentialRequestBody",
    "EgressControlRef",
    "FinishMessage",
    "HandbackMessage",
    "HumanInputMessage",
    "MAX_MESSAGE_BYTES",
    "OpenMessage",
    "PauseNoticeBody",
    "ResetMessage",
    "ReviewMessage",
    "SERVICE_PATH",
    "SandboxRef",
    "ServiceConfirmationRequired",
    "ServiceCredentialRequired",
    "ServiceError",
    "ServiceEvent",
    "ServiceFinished",
    "ServiceHealth",
    "ServiceMessage",
    "ServiceObservation",
    "ServiceOk",
    "ServiceOpened",
    "ServicePauseRequired",
    "ServiceQuestionWithdrawn",
    "ServiceResetDone",
    "ServiceRunSummary",
    "ServiceSession",
    "ServiceTakeoverState",
    "SessionTask",
    "SubmitMessage",
    "TakeoverMessage",
]

MAX_MESSAGE_BYTES = 1 << 20
"""Largest message a client may send (bytes); a larger one closes the connection (code 1009)."""

SERVICE_PATH = "/v1/controller"
"""The websocket path of the service."""

APPROVER_ROLE_HEADER = "deskpod-role"
"""Optional handshake header naming the role the client expects (``agent`` or
``approver``); when given, it must match the role its token grants (else HTTP 401)."""

_Id = Annotated[str, Field(min_length=1, max_length=128)]


# -- inbound: what clients send ------------------------------------------------


class EgressControlRef(BaseModel):
    """A pool slot's egress proxy control endpoint (``http://HOST:3129``) and its token; on a
    proxy shared by many sandboxes (multi-tenant), the sandbox's ``tenant`` id."""

    model_config = STRICT
    url: Annotated[str, Field(pattern=r"^http://[A-Za-z0-9.\[\]:_-]+:3129/?$", max_length=300)]
    token: Annotated[str, Field(min_length=16, max_length=512)]
    tenant: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")] | None = None


class SandboxRef(BaseModel):
    """Which sandbox a session drives: the ``name`` of one the service owns (no token: it holds
    it), or its daemon's websocket ``url`` and control ``token`` and (a leased pool slot) its
    own egress proxy's control. The ``url`` of an owned one opens it as its name does."""

    model_config = STRICT
    url: Annotated[str, Field(pattern=r"^wss?://", max_length=2000)] | None = None
    token: Annotated[str, Field(min_length=16, max_length=512)] | None = None
    egress_control: EgressControlRef | None = None
    name: Annotated[str, Field(pattern=SANDBOX_NAME_PATTERN)] | None = None

    @model_validator(mode="after")
    def _named_or_addressed(self) -> SandboxRef:
        given = [f for f in (self.url, self.token, self.egress_control) if f is not None]
        if (self.name is None and (self.url is None or self.token is None)) or (self.name is not None and given):
            raise ValueError("give the sandbox's name alone, or its url and token")
        return self


class OpenMessage(BaseModel):
    """Start a session: ``sandbox`` to drive, ``task`` to run, ``policy`` to tighten the operator's."""

    model_config = STRICT
    type: Literal["open"]
    id: _Id
    sandbox: SandboxRef
    task: SessionTask
    policy: Policy | None = None
    approver: Literal["approver", "self"] = "approver"
    """Who answers the session's confirmations and pauses: an approver connection, or
    (only if the operator's policy allows self-approval) this connection."""
    snapshots: bool = False
    """Every observation of the session carries the element snapshot with refs (for element actions)."""
    restore: Annotated[str, Field(pattern=SNAPSHOT_NAME_PATTERN)] | None = None
    """Start from this snapshot of the service's store (a sandbox it owns: reset, then the
    snapshot's browser session restored) instead of the clean state (``None``)."""


class SubmitMessage(BaseModel):
    """One proposal of the remote agent: actions executed under the policy."""

    model_config = STRICT
    type: Literal["submit"]
    id: _Id
    session: _Id
    actions: Annotated[list[ProposedAction], Field(min_length=1, max_length=100)]
    sensitive: bool = False
    risk: RiskLevel | None = None
    intent: Annotated[str, Field(max_length=2000)] = ""
    console: Annotated[bool, Field(exclude_if=lambda asked: not asked)] = False
    """Its observation also carries the page's console messages (left out when ``False``)."""
    network: Annotated[bool, Field(exclude_if=lambda asked: not asked)] = False
    """Its observation also carries the page's network requests, URLs redacted (left out when ``False``)."""


class FinishMessage(BaseModel):
    """The remote agent says it is done; ``claim`` is its own account."""

    model_config = STRICT
    type: Literal["finish"]
    id: _Id
    session: _Id
    claim: Annotated[str, Field(max_length=20_000)] = ""


class ConfirmMessage(BaseModel):
    """Answer a ``confirmation_required``: ``digest`` repeats the request's."""

    model_config = STRICT
    type: Literal["confirm"]
    id: _Id
    request_id: _Id
    approve: bool
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ReviewMessage(BaseModel):
    """Answer a ``pause_required``."""

    model_config = STRICT
    type: Literal["review"]
    id: _Id
    pause_id: _Id
    answer: PauseAnswer


class ControlMessage(BaseModel):
    """Pause, resume, cancel or end a session's run, or withdraw its step in progress.

    ``end`` (the agent's connection): the agent is done with the session without asking for a
    verdict (an MCP client closed it); the run ends like a cancel, with status ``"ended"``.

    ``withdraw`` (the agent's connection): the step of the last ``submit`` is withdrawn, and
    the run goes on (:meth:`deskpod.controller.run_api.RunControl.withdraw`): a confirmation
    or credential request it waits on is withdrawn (``question_withdrawn``), nothing more of it
    runs, and its ``observation`` answers it with ``status: "denied"`` and ``rule:
    "withdrawn"``. Once that ``submit`` has been answered it does nothing.
    """

    model_config = STRICT
    type: Literal["pause", "resume", "cancel", "withdraw", "end"]
    id: _Id
    session: _Id


class ResetMessage(BaseModel):
    """Reset the session's sandbox in place after its run."""

    model_config = STRICT
    type: Literal["reset"]
    id: _Id
    session: _Id
    start_url: Annotated[str, Field(pattern=r"^https?://", max_length=8192)] | None = None


class TakeoverMessage(BaseModel):
    """A person (an approver connection) takes the session's sandbox over: the agent's
    proposals wait until ``handback`` (:mod:`deskpod.controller.takeover`)."""

    model_config = STRICT
    type: Literal["takeover"]
    id: _Id
    session: _Id


class HumanInputMessage(BaseModel):
    """One input of the person in control: a protocol action (screen pixels when the session
    declared no model space), run by the session's executor and audited as theirs."""

    model_config = STRICT
    type: Literal["human_input"]
    id: _Id
    session: _Id
    action: Action


class HandbackMessage(BaseModel):
    """The person hands the sandbox back: the controller re-observes and the agent plans again."""

    model_config = STRICT
    type: Literal["handback"]
    id: _Id
    session: _Id


class CredentialMessage(BaseModel):
    """Answer a ``credential_required``: the ``secret`` to type, or ``cancel``."""

    model_config = STRICT
    type: Literal["credential"]
    id: _Id
    request_id: _Id
    secret: Annotated[SecretStr, Field(min_length=1, max_length=1024)] | None = None
    cancel: bool = False

    @model_validator(mode="after")
    def _one(self) -> CredentialMessage:
        if (self.secret is None) == (not self.cancel):
            raise ValueError("give the secret, or cancel: true")
        return self


ClientMessage = Annotated[
    OpenMessage | SubmitMessage | FinishMessage | ConfirmMessage | ReviewMessage | ControlMessage | ResetMessage
    | TakeoverMessage | HumanInputMessage | HandbackMessage | CredentialMessage,
    Field(discriminator="type"),
]
"""Every message a client may send; ``type`` selects the model."""


# -- outbound: what the service sends --------------------------------------------


class ServiceOpened(BaseModel):
    """Answer to ``open``: the new session's id."""

    model_config = STRICT
    type: Literal["opened"] = "opened"
    id: str
    session: str


class ServiceObservation(BaseModel):
    """The session waits for the next ``submit`` or ``finish``.

    ``id``: the ``submit`` this answers; ``None`` for the first observation after
    ``open``. ``status``: ``"ready"`` (first), ``"ok"``, ``"error"`` or ``"denied"``
    (the last proposal's outcome). ``error``: the last proposal's error
    (``{"code", "message"}``, a failure's ``"reason"`` too when the sandbox gave one), empty
    when there is none.
    """

    model_config = STRICT
    type: Literal["observation"] = "observation"
    id: str | None
    session: str
    status: Literal["ready", "ok", "error", "denied"]
    error: dict[str, str] = {}
    observation: Observation


class ConfirmationRequestBody(Payload):
    """A GUI action waiting for a person's approval, as ``confirmation_required`` carries it
    (:class:`~deskpod.controller.confirm.ConfirmationRequest` with its action subject).

    ``id``: what ``confirm`` answers (``request_id``). ``step``: the run's step. ``summary``:
    one sentence, what will happen to which target. ``level``/``reasons``: the risk and the
    rules that set it; ``reversible``: whether it can be undone. ``digest``: what an approving
    ``confirm`` repeats (bound to the action, the URL and the screenshot). ``timeout_s``:
    seconds before no answer is a denial. ``attempt``: 1, more after a void approval.
    ``action``: the action as JSON, typed text redacted when sensitive (a record of it, not an
    action to run). ``data``: the text it types (redacted when sensitive), else ``None``.
    ``url``: the page (credentials redacted). ``screenshot_format`` and base64
    ``screenshot_data``: the screen the person judges (the model space's size), and its
    ``screenshot_sha256``.
    """

    id: str
    run_id: str
    step: int
    summary: str
    level: RiskLevel
    reasons: list[str]
    reversible: bool
    digest: str
    timeout_s: float
    attempt: int
    action: dict[str, Any]
    data: str | None
    url: str | None
    screenshot_format: str
    screenshot_data: str
    screenshot_sha256: str


class PauseNoticeBody(Payload):
    """Why a run paused, as ``pause_required`` carries it (:class:`~deskpod.controller.confirm.PauseNotice`).

    ``id``: what ``review`` answers (``pause_id``). ``kind``: ``injection`` (the page seems to
    instruct the agent; ``evidence`` quotes it), ``loop`` (the same step keeps repeating) or
    ``requested`` (someone paused it). ``url``: the page (credentials redacted; ``None``: no
    observation yet). ``screenshot_sha256``: the screen then. ``timeout_s``: seconds before
    no answer cancels the run.
    """

    id: str
    run_id: str
    kind: Literal["injection", "loop", "requested"]
    message: str
    evidence: list[str]
    url: str | None
    screenshot_sha256: str | None
    timeout_s: float


class CredentialField(Payload):
    """The focused field a credential goes into: its accessibility ``role`` and ``name`` (``None``: unknown)."""

    role: str | None
    name: str | None


class CredentialRequestBody(Payload):
    """A credential the run needs, as ``credential_required`` carries it
    (:class:`~deskpod.controller.credentials.CredentialRequest`): what ``credential`` answers
    (``request_id``), the agent's ``label``, the page's ``url`` (redacted), the ``field`` it
    goes into, and ``timeout_s``, seconds before no answer declines it."""

    request_id: str
    run_id: str
    label: str
    url: str | None
    field: CredentialField
    timeout_s: float


class ServiceConfirmationRequired(BaseModel):
    """A human must approve an action: ``request`` is the confirmation request (with the
    digest a ``confirm`` repeats). ``approver``: who may answer it, an approver
    connection (``"approver"``) or, when the operator allows it, the session's own
    connection as well (``"self"``)."""

    model_config = STRICT
    type: Literal["confirmation_required"] = "confirmation_required"
    session: str
    request: ConfirmationRequestBody
    approver: Literal["approver", "self"] = "approver"


class ServicePauseRequired(BaseModel):
    """The run paused for a human's review: ``notice`` says why (answered by ``review``;
    ``approver`` as for :class:`ServiceConfirmationRequired`)."""

    model_config = STRICT
    type: Literal["pause_required"] = "pause_required"
    session: str
    notice: PauseNoticeBody
    approver: Literal["approver", "self"] = "approver"


class ServiceTakeoverState(BaseModel):
    """A person took the session's sandbox over (``active``) or handed it back. ``by``: the
    person's principal (``None`` once handed back). Sent to the session's connection and
    every approver connection: while ``active`` the agent's proposals wait."""

    model_config = STRICT
    type: Literal["takeover_state"] = "takeover_state"
    session: str
    active: bool
    by: str | None


class ServiceCredentialRequired(BaseModel):
    """The run needs a credential a person types into the console (answered by ``credential``).
    ``request``: ``{request_id, label, url, field: {role, name}}``: what the agent asked for,
    the page (redacted) and the focused field the controller will type it into. Only an
    approver connection may answer it; the model never receives the secret."""

    model_config = STRICT
    type: Literal["credential_required"] = "credential_required"
    session: str
    request: CredentialRequestBody


class ServiceQuestionWithdrawn(BaseModel):
    """A question of a session (``id``: a confirmation's or credential request's id, or a
    pause's) will not be answered any more: its time ran out, its run ended or was
    cancelled, or its agent withdrew the step. ``reason`` says which, for the person who
    was asked. Sent to the session's connection and to every connection the question went
    to; an answer sent after it is refused (``invalid_request``, rule ``withdrawn``)."""

    model_config = STRICT
    type: Literal["question_withdrawn"] = "question_withdrawn"
    session: str
    id: str
    reason: str


class ServiceOk(BaseModel):
    """Answer to ``pause``, ``resume``, ``cancel``, ``takeover``, ``human_input``, ``handback``
    and ``credential``."""

    model_config = STRICT
    type: Literal["ok"] = "ok"
    id: str


class ServiceEvent(BaseModel):
    """One audit record of a session's run, as written to its audit log."""

    model_config = STRICT
    type: Literal["event"] = "event"
    session: str
    record: dict[str, Any]


class ServiceRunSummary(BaseModel):
    """How a run ended. ``status``: ``"succeeded"`` only when the success check held;
    ``"ended"`` when its agent ended it (``end``) without asking for a verdict.
    ``reason``: a readable sentence. ``steps``: proposals executed. ``url``: the last
    URL observed (``None``: none). ``audit_log``: path of its audit log on the
    controller's host; ``audit_head``: SHA-256 (hex) of its last line (empty: none).
    ``scene``: path of the failure scene (``None``: none)."""

    model_config = STRICT
    run_id: str
    status: Literal["succeeded", "failed", "cancelled", "ended"]
    reason: str
    steps: int
    url: str | None
    audit_log: str
    audit_head: str
    scene: str | None


class ServiceFinished(BaseModel):
    """A session's run ended (verified, failed, denied or cancelled)."""

    model_config = STRICT
    type: Literal["finished"] = "finished"
    session: str
    result: ServiceRunSummary


class ServiceResetDone(BaseModel):
    """Answer to ``reset``: the sandbox's new control token (``""`` for a sandbox the service
    owns: it keeps the token, the opener never holds one) and the URL of the fresh state
    (``None``: the browser could not be asked)."""

    model_config = STRICT
    type: Literal["reset_done"] = "reset_done"
    id: str
    session: str
    token: str
    url: str | None


class ServiceSession(BaseModel):
    """A session as a console shows it, sent to approver and viewer connections when it
    opens, when its run changes state or page, and when it ends (on connecting, they get
    one per open session).

    ``task``: the task's name. ``start_url``/``url``: the task's first page and the last
    one observed (credentials redacted; ``None``: none yet). ``title``: that page's title
    as the page set it (untrusted text; ``None``: none yet). ``state``: the run's state
    (:class:`deskpod.controller.state.RunState` values, ``"opening"`` before the run
    starts). ``screen``: the sandbox's screen size in screen pixels. ``approver``: who
    answers its questions, as in :class:`ServiceConfirmationRequired`.
    """

    model_config = STRICT
    type: Literal["session"] = "session"
    session: str
    task: str
    start_url: str | None
    url: str | None
    title: str | None
    state: str
    screen: Size
    approver: Literal["approver", "self"] = "approver"


class ServiceError(BaseModel):
    """A message failed. ``id``: the message's id, ``None`` when it could not be read."""

    model_config = STRICT
    type: Literal["error"] = "error"
    id: str | None
    error: ErrorBody


class ServiceHealth(BaseModel):
    """The answer of ``GET /healthz``, the service's one HTTP endpoint besides its websocket.

    ``ok``: the service runs. ``sessions``: sessions open on live connections.
    ``running``: runs going (each holds one sandbox).
    """

    model_config = STRICT
    ok: bool
    sessions: int
    running: int


ServiceMessage = (
    ServiceOpened
    | ServiceObservation
    | ServiceConfirmationRequired
    | ServicePauseRequired
    | ServiceOk
    | ServiceEvent
    | ServiceFinished
    | ServiceResetDone
    | ServiceSession
    | ServiceError
    | ServiceTakeoverState
    | ServiceCredentialRequired
    | ServiceQuestionWithdrawn
)
"""Any message the controller service sends (thirteen ``type`` values)."""
