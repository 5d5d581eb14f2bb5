"""The controller service wire (``deskpod serve``): the messages the service sends.

The service's inbound messages are the models of
:data:`deskpod.controller.serve.ClientMessage`; these are its outbound ones, one
model per message ``type``. Each is sent as one JSON text frame (ASCII escapes).
Records and requests the controller builds (``record``, ``request``, ``notice``)
are carried as JSON objects; their shape belongs to the controller's audit log
and confirmation modules. An error is the same envelope as the daemon wire's
(:class:`~deskpod.protocol.replies.ErrorBody`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from deskpod.protocol._base import STRICT
from deskpod.protocol.actions import Size
from deskpod.protocol.observation import Observation
from deskpod.protocol.replies import ErrorBody

__all__ = [
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
    "ServiceResetDone",
    "ServiceRunSummary",
    "ServiceSession",
    "ServiceTakeoverState",
]


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
    (``{"code", "message"}``), empty when there is none.
    """

    model_config = STRICT
    type: Literal["observation"] = "observation"
    id: str | None
    session: str
    status: Literal["ready", "ok", "error", "denied"]
    error: dict[str, str] = {}
    observation: Observation


class ServiceConfirmationRequired(BaseModel):
    """A human must approve an action: ``request`` is the confirmation request (with the
    digest a ``confirm`` repeats). ``approver``: who may answer it, an approver
    connection (``"approver"``) or, when the operator allows it, the session's own
    connection as well (``"self"``)."""

    model_config = STRICT
    type: Literal["confirmation_required"] = "confirmation_required"
    session: str
    request: dict[str, Any]
    approver: Literal["approver", "self"] = "approver"


class ServicePauseRequired(BaseModel):
    """The run paused for a human's review: ``notice`` says why (answered by ``review``;
    ``approver`` as for :class:`ServiceConfirmationRequired`)."""

    model_config = STRICT
    type: Literal["pause_required"] = "pause_required"
    session: str
    notice: dict[str, Any]
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
    request: dict[str, Any]


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
    """How a run ended. ``status``: ``"succeeded"`` only when the success check held.
    ``reason``: a readable sentence. ``steps``: proposals executed. ``url``: the last
    URL observed (``None``: none). ``audit_log``: path of its audit log on the
    controller's host; ``audit_head``: SHA-256 (hex) of its last line (empty: none).
    ``scene``: path of the failure scene (``None``: none)."""

    model_config = STRICT
    run_id: str
    status: Literal["succeeded", "failed", "cancelled"]
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
    """Answer to ``reset``: the sandbox's new control token and the URL of the fresh
    state (``None``: the browser could not be asked)."""

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
)
"""Any message the controller service sends (twelve ``type`` values)."""
