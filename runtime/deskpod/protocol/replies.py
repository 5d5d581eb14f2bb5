"""The daemon's messages: hello, replies and the error envelope."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT, RequestId
from deskpod.protocol.actions import Size
from deskpod.protocol.limits import PROTOCOL_VERSION
from deskpod.protocol.observation import Observation
from deskpod.protocol.workspace import WorkspaceOutput

__all__ = ["ErrorBody", "ErrorReply", "Hello", "Result"]

class Hello(BaseModel):
    """First message the daemon sends on a new connection."""

    model_config = STRICT
    type: Literal["hello"] = "hello"
    protocol_version: str = PROTOCOL_VERSION
    screen: Size
    model_size: Size



class Result(BaseModel):
    """A successful reply to the request with the same ``id``.

    ``workspace``: the output of a workspace request (``None`` for other requests).
    """

    model_config = STRICT
    type: Literal["result"] = "result"
    id: RequestId
    observation: Observation | None = None
    model_size: Size | None = None
    workspace: WorkspaceOutput | None = None


class ErrorBody(BaseModel):
    """The closed error envelope; ``code`` is one of the codes in :mod:`deskpod.errors`."""

    model_config = STRICT
    code: Annotated[str, Field(max_length=64)]
    message: str
    detail: dict[str, Any] = {}


class ErrorReply(BaseModel):
    """A failed reply. ``id`` is ``None`` when the request's id could not be read."""

    model_config = STRICT
    type: Literal["error"] = "error"
    id: Annotated[str, Field(max_length=128)] | None
    error: ErrorBody

