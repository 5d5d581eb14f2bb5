"""Task files: what a scripted run does and how its success is verified.

A task file is YAML (or JSON) with this shape::

    name: demo-search
    start_url: http://demo.test/
    allowed_domains: [demo.test]  # the browser must stay on these (checked on the real URL, every tab)
    limits: {max_steps: 10, max_wall_time_s: 60}
    steps:                       # the scripted agent: one action batch per step
      - actions: [{type: click, x: 640, y: 400}]
      - actions: [{type: type, text: penguin}]
        sensitive: false         # true: typed text is redacted in the audit log
      - actions: [{type: keypress, keys: [ENTER]}]
    success:                     # checked against the environment, never a claim
      url_matches: '^http://demo\\.test/search\\?q=penguin$'
      page_text_contains: penguin
      timeout_s: 10

Actions use the protocol's shapes (:mod:`deskpod.protocol`), coordinates in the
model space (the screen unless ``model_size`` is set).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from deskpod.errors import DeskpodError
from deskpod.protocol import Action, Size

__all__ = ["TaskSpec", "Step", "Limits", "SuccessCheck", "TaskFileError", "load_task"]


class TaskFileError(DeskpodError):
    """A task file is missing, unreadable or does not match :class:`TaskSpec`."""

    code = "invalid_request"


_STRICT = ConfigDict(extra="forbid", frozen=True)


class Limits(BaseModel):
    """Run limits: ``max_steps`` (action batches), ``max_wall_time_s`` (seconds), and
    ``max_repeats``: this many identical steps in a row (same actions, URL and screen)
    are a loop that stops the run."""

    model_config = _STRICT
    max_steps: Annotated[int, Field(ge=1, le=10_000)] = 50
    max_wall_time_s: Annotated[float, Field(gt=0, le=86_400)] = 300.0
    max_repeats: Annotated[int, Field(ge=2, le=1000)] = 3


class Step(BaseModel):
    """One batch of the scripted agent. ``sensitive``: redact typed text in the audit log."""

    model_config = _STRICT
    actions: Annotated[list[Action], Field(min_length=1, max_length=100)]
    sensitive: bool = False


class SuccessCheck(BaseModel):
    """Verified from the environment: the page URL (regex, ``re.search``) and visible text.

    ``timeout_s``: how long to keep re-observing until both hold.
    """

    model_config = _STRICT
    url_matches: str | None = None
    page_text_contains: str | None = None
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0

    @field_validator("url_matches")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"url_matches is not a valid regular expression: {exc}") from exc
        return value


class TaskSpec(BaseModel):
    """A whole task: start page, scripted steps, limits and the success check."""

    model_config = _STRICT
    name: Annotated[str, Field(min_length=1, max_length=200)]
    start_url: Annotated[str, Field(pattern=r"^https?://")]
    model_size: Size | None = None
    allowed_domains: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=100)] = []
    limits: Limits = Limits()
    steps: list[Step]
    success: SuccessCheck


def load_task(path: str | Path) -> TaskSpec:
    """Read and validate a task file.

    Raises:
        TaskFileError: the file cannot be read, is not YAML, or does not match
            :class:`TaskSpec` (the message names the first bad field).
    """
    try:
        data: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TaskFileError(f"cannot read task file {path}: {exc}") from exc
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "task"
        raise TaskFileError(f"task file {path}: {where}: {err['msg']}") from exc
