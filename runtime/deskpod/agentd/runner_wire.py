"""The internal wire between agentd and the workspace runner (pure: no I/O beyond framing helpers).

agentd (sandbox container, uid 1000) forwards every workspace request to the
workspace runner (workspace container, uid 1001, PID 1 there) over TCP on
:data:`RUNNER_PORT`. One connection carries one request and its one reply;
closing the connection before the reply cancels the request (the runner kills
its process group).

Framing (:mod:`deskpod.agentd.runner_frames`, re-exported here): a 4-byte big-endian
length, then that many bytes of UTF-8 JSON. The
runner refuses requests over :data:`MAX_RUNNER_REQUEST_BYTES`; agentd refuses
replies over :data:`MAX_RUNNER_REPLY_BYTES` and validates every reply with these
models: a reply comes from the agent's zone and is untrusted. Errors travel as
the closed envelope (:class:`~deskpod.protocol.ErrorBody`) and are mapped back
through :func:`deskpod.errors.error_from_wire`, never by a class name.

Requests: :class:`RunnerWorkspaceRequest` (a daemon workspace request plus an
optional :class:`X11Grant`), :class:`RunnerResetRequest` (kill every agent
process, empty the agent's folders and IPC objects), :class:`RunnerPingRequest`
(health). Replies: :class:`RunnerOutput`, :class:`RunnerResetDone`,
:class:`RunnerPong`, :class:`RunnerError`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_validator

from deskpod.agentd.runner_frames import (
    FRAME_HEADER,
    MAX_RUNNER_REPLY_BYTES,
    MAX_RUNNER_REQUEST_BYTES,
    RUNNER_PORT,
    frame_length,
)
from deskpod.agentd.workspace.egress_grants import CREDENTIAL_PATTERN
from deskpod.protocol._base import STRICT as _STRICT
from deskpod.protocol import (
    ErrorBody,
    WorkspaceOutput,
    WorkspaceRequest,
)

__all__ = [
    "FRAME_HEADER",
    "MAX_RUNNER_REPLY_BYTES",
    "MAX_RUNNER_REQUEST_BYTES",
    "RUNNER_PORT",
    "RunnerError",
    "RunnerOutput",
    "RunnerPingRequest",
    "RunnerPong",
    "RunnerReply",
    "RunnerRequest",
    "RunnerResetDone",
    "RunnerResetRequest",
    "RunnerWorkspaceRequest",
    "X11Grant",
    "encode_frame",
    "frame_length",
    "parse_runner_reply",
    "parse_runner_request",
]


class X11Grant(BaseModel):
    """Access to the sandbox's X display, granted to one command.

    ``display``: the X display name the command connects to (e.g. ``"sandbox:99"``).
    ``cookie_hex``: the MIT-MAGIC-COOKIE-1 that X server accepts, 32 lowercase hex
    digits (16 bytes).
    """

    model_config = _STRICT
    display: Annotated[str, Field(min_length=2, max_length=255, pattern=r"^[A-Za-z0-9.\-]*:[0-9]{1,5}(\.[0-9]{1,3})?$")]
    cookie_hex: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", repr=False)]

    @property
    def display_number(self) -> str:
        """The display number of :attr:`display` (``"99"`` for ``"sandbox:99.0"``)."""
        return self.display.rsplit(":", 1)[1].split(".", 1)[0]


_WorkspaceRequestField = Annotated[WorkspaceRequest, Field(discriminator="type")]


class RunnerWorkspaceRequest(BaseModel):
    """Carry out one workspace request. ``x11``: the display grant of an ``exec`` or
    ``run_tests`` that asked for ``display``; ``None``: the command gets no X server
    (neither ``DISPLAY`` nor ``XAUTHORITY`` is set). ``egress_credential``: the egress
    grant of an ``exec`` that asked for ``network``
    (:mod:`~deskpod.agentd.workspace.egress_grants`), put in its proxy variables; ``None``: the
    command gets no proxy variables (and the proxy would refuse it anyway)."""

    model_config = _STRICT
    type: Literal["workspace"] = "workspace"
    request: _WorkspaceRequestField
    x11: X11Grant | None = None
    egress_credential: Annotated[str | None, Field(pattern=CREDENTIAL_PATTERN, repr=False)] = None


class RunnerResetRequest(BaseModel):
    """Kill every agent process, cancel the running request, empty ``/workspace``,
    ``/tmp``, ``/dev/shm`` and the agent's home, remove SysV and POSIX IPC objects."""

    model_config = _STRICT
    type: Literal["reset"] = "reset"


class RunnerPingRequest(BaseModel):
    """Is the runner up? (The health check.)"""

    model_config = _STRICT
    type: Literal["ping"] = "ping"


RunnerRequest = Annotated[
    RunnerWorkspaceRequest | RunnerResetRequest | RunnerPingRequest, Field(discriminator="type")
]
"""Any request agentd sends the runner."""


class RunnerOutput(BaseModel):
    """A workspace request's output."""

    model_config = _STRICT
    type: Literal["output"] = "output"
    output: WorkspaceOutput


class RunnerResetDone(BaseModel):
    """A reset's outcome. ``killed``: processes signalled; ``failures``: what could not be
    cleared (empty: all of it); ``duration_s``: seconds."""

    model_config = _STRICT
    type: Literal["reset_done"] = "reset_done"
    killed: Annotated[int, Field(ge=0)]
    failures: Annotated[list[Annotated[str, Field(max_length=500)]], Field(max_length=50)] = []
    duration_s: Annotated[float, Field(ge=0)]


class RunnerPong(BaseModel):
    """The answer to a ping. ``pid``: the runner's pid in its namespace (1 in the container)."""

    model_config = _STRICT
    type: Literal["pong"] = "pong"
    pid: int


class RunnerError(BaseModel):
    """A failed request, as the closed error envelope."""

    model_config = _STRICT
    type: Literal["error"] = "error"
    error: ErrorBody

    @field_validator("error")
    @classmethod
    def _known_shape(cls, value: ErrorBody) -> ErrorBody:
        if not re.fullmatch(r"[a-z_]{1,64}", value.code):
            raise ValueError("error code must be a short snake_case word")
        return value


RunnerReply = Annotated[RunnerOutput | RunnerResetDone | RunnerPong | RunnerError, Field(discriminator="type")]
"""Any reply of the runner."""

_REQUEST: TypeAdapter[Any] = TypeAdapter(RunnerRequest)
_REPLY: TypeAdapter[Any] = TypeAdapter(RunnerReply)


def encode_frame(model: BaseModel) -> bytes:
    """One frame: the header, then ``model`` as JSON."""
    payload = model.model_dump_json().encode("utf-8")
    return FRAME_HEADER.pack(len(payload)) + payload


def parse_runner_request(payload: bytes) -> RunnerWorkspaceRequest | RunnerResetRequest | RunnerPingRequest:
    """Validate a request frame's payload.

    Raises:
        pydantic.ValidationError: not a valid request.
    """
    result: RunnerWorkspaceRequest | RunnerResetRequest | RunnerPingRequest = _REQUEST.validate_json(payload)
    return result


def parse_runner_reply(payload: bytes) -> RunnerOutput | RunnerResetDone | RunnerPong | RunnerError:
    """Validate a reply frame's payload (untrusted: it comes from the agent's zone).

    Raises:
        pydantic.ValidationError: not a valid reply.
    """
    result: RunnerOutput | RunnerResetDone | RunnerPong | RunnerError = _REPLY.validate_json(payload)
    return result
