"""The task a ``deskpod serve`` session runs (the ``open`` message's ``task``,
:mod:`deskpod.service.messages`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.task import SuccessCheck, TaskPermissions, check_permissions
from deskpod.protocol import Size
from deskpod.protocol._base import STRICT

__all__ = ["SessionTask"]


class SessionTask(BaseModel):
    """A task for a remote agent: like a task file without steps (the service is the agent).

    ``permissions`` and ``allow_clipboard_read`` mean what they mean in a task file
    (:class:`~deskpod.controller.task.TaskSpec`), and widen what the session's pages or agent
    may do: the service takes them only as far as the operator's policy lets sessions
    (``session_permissions``, ``session_clipboard_read``); the open is refused otherwise. Both
    are left out of a message when unset.
    """

    model_config = STRICT
    name: Annotated[str, Field(min_length=1, max_length=200)]
    start_url: Annotated[str, Field(pattern=r"^https?://", max_length=8192)]
    model_size: Size | None = None
    allowed_domains: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=100)] = []
    limits: Limits = Limits()
    success: SuccessCheck
    permissions: Annotated[TaskPermissions, Field(exclude_if=lambda given: not given)] = {}
    allow_clipboard_read: Annotated[bool, Field(exclude_if=lambda on: not on)] = False

    @model_validator(mode="after")
    def _positions(self) -> SessionTask:
        check_permissions(self.permissions)
        return self
