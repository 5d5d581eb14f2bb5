"""Task files: what a scripted run does and how its success is verified.

A task file is YAML (or JSON) with this shape::

    name: demo-search
    start_url: http://demo.test/
    allowed_domains: [demo.test]  # the browser must stay on these (checked on the real URL, every tab)
    permissions:                 # browser permissions pages get; every other one is denied, never prompted
      geolocation: {allow: true, position: {lat: 48.8584, lon: 2.2945}}   # a position is required
      notifications: deny
    limits: {max_steps: 10, max_wall_time_s: 60}   # and max_repeats, max_screenshots, action_timeout_s, max_errors
    steps:                       # the scripted agent: one action batch per step (or `agent:`, a model)
      - actions: [{type: click, x: 640, y: 400}]
      - actions: [{type: type, text: penguin}]
        sensitive: false         # true: typed text is redacted in the audit log
      - actions: [{type: keypress, keys: [ENTER]}]
    success:                     # checked against the environment, never a claim
      url_matches: '^http://demo\\.test/search\\?q=penguin$'
      page_text_contains: penguin
      timeout_s: 10

A desktop task (a sandbox with the desktop profile) also sets up the workspace and the
applications before the first step, and checks files the applications saved::

    setup:
      files: {notes.txt: "draft\n"}   # written to /workspace before the first step
      apps: [{app: editor, path: notes.txt}]   # opened before the first step (open_app)
    success:
      files: [{path: notes.txt, contains: "final"}]   # and/or equals: the whole text

Actions use the protocol's shapes (:mod:`deskpod.protocol`), coordinates in the
model space (the screen unless ``model_size`` is set). ``permissions`` names each
:data:`~deskpod.protocol.PermissionName` ``allow``, ``deny`` or ``{allow, position}``
(:class:`PermissionChoice`); unnamed ones are denied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from deskpod.controller.policy.run_limits import Limits
from deskpod.errors import TaskFileError
from deskpod.protocol import Action, GeoPosition, OpenApp, PermissionGrants, PermissionName, Size, error_summary
from deskpod.protocol.apps import AppName, WorkspaceFile
from deskpod.errors import PatternError
from deskpod.protocol.patterns import MATCHES_NOTHING, compile_pattern
from deskpod.protocol._base import STRICT

__all__ = [
    "FileCheck", "MAX_MODEL_FILE_BYTES", "MAX_SETUP_FILE_CHARS", "ModelAgentSpec", "NO_VERDICT", "PermissionChoice",
    "SetupApp", "Step", "SuccessCheck", "TaskPermissions", "TaskSetup", "TaskSpec", "check_permissions", "load_model_file",
    "load_task", "permission_grants",
]

MAX_MODEL_FILE_BYTES = 1_048_576
"""Largest task, code task, policy or suite file read (1 MiB); a larger one is refused unread."""




class Step(BaseModel):
    """One batch of the scripted agent. ``sensitive``: redact typed text in the audit log."""

    model_config = STRICT
    actions: Annotated[list[Action], Field(min_length=1, max_length=100)]
    sensitive: bool = False


class ModelAgentSpec(BaseModel):
    """A model agent instead of scripted steps (built by :func:`deskpod.agents.create_agent`).

    ``type``: ``"openai"`` (Responses API computer-use loop) or ``"anthropic"``
    (Messages API computer tool loop). ``model``: the vendor's model name.
    ``instructions``: the task as told to the model (the model's words never decide
    success). ``base_url``: the API's base URL (``None``: the vendor's default; tests
    point it at a local fake server). ``api_key_env``: the controller host's
    environment variable holding the API key (``None``: ``OPENAI_API_KEY`` or
    ``ANTHROPIC_API_KEY``); the key never enters the sandbox or the audit log.
    ``max_output_tokens``: per model call. ``computer_tool`` (Anthropic): the computer
    tool version, ``"auto"`` by model (:func:`deskpod.agents.anthropic.tool_type_for`);
    ``computer_configs`` (Anthropic, the toolset only): per-member configuration,
    ``{member: {"enabled": bool, "defer_loading": bool}}`` (e.g. ``{"zoom": {"enabled": false}}``).
    """

    model_config = STRICT
    type: Literal["openai", "anthropic"]
    model: Annotated[str, Field(min_length=1, max_length=200)]
    instructions: Annotated[str, Field(min_length=1, max_length=20_000)]
    base_url: Annotated[str, Field(pattern=r"^https?://", max_length=2000)] | None = None
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")] | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=100_000)] = 4096
    computer_tool: Literal["auto", "computer_20250124", "computer_20251124", "computer_toolset_20260801"] = "auto"
    computer_configs: dict[Annotated[str, Field(max_length=64)], dict[Literal["enabled", "defer_loading"], bool]] | None = None


NO_VERDICT = MATCHES_NOTHING
"""A success check's ``url_matches`` that never holds: a task with no verdict (a session driven
from outside, as ``deskpod mcp``'s without ``--success-url`` or ``--success-text``). Its run never
succeeds on a page, and its agent's claim of being done ends it ``"ended"``: nothing was
verified, and nothing failed."""


MAX_SETUP_FILE_CHARS = 262_144
"""Longest text of one file a task's ``setup`` writes, or a file check compares (characters)."""

_FileText = Annotated[str, Field(max_length=MAX_SETUP_FILE_CHARS)]


class FileCheck(BaseModel):
    """A workspace file the success check reads (through the workspace's ``read_file``): it
    must exist and hold ``contains`` somewhere, or be exactly ``equals`` (a trailing newline
    aside), or both."""

    model_config = STRICT
    path: WorkspaceFile
    contains: _FileText | None = None
    equals: _FileText | None = None


class SuccessCheck(BaseModel):
    """Verified from the environment: the page URL (regex, ``re.search``), its visible text,
    and workspace files (``files``: what a desktop application saved).

    ``timeout_s``: how long to keep re-observing until every check holds.
    """

    model_config = STRICT
    url_matches: str | None = None
    page_text_contains: str | None = None
    files: Annotated[list[FileCheck], Field(max_length=32)] = []
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0

    @property
    def verdict(self) -> bool:
        """Whether the check can ever hold (``False``: :data:`NO_VERDICT` alone)."""
        return not (self.url_matches == NO_VERDICT and self.page_text_contains is None and not self.files)

    @model_validator(mode="after")
    def _checks_something(self) -> SuccessCheck:
        if self.url_matches is None and self.page_text_contains is None and not self.files:
            raise ValueError("give url_matches, page_text_contains or files: success is verified from the "
                             "environment")
        return self

    @field_validator("url_matches")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compile_pattern(value)
            except PatternError as exc:
                raise ValueError(f"url_matches: {exc}") from None
        return value


class SetupApp(BaseModel):
    """A desktop application a task opens before the first step: ``open_app``'s fields."""

    model_config = STRICT
    app: AppName
    path: WorkspaceFile | None = None


class TaskSetup(BaseModel):
    """What a run puts in place before the agent's first step: workspace ``files`` (path
    relative to ``/workspace`` -> text) and desktop applications to open (``apps``; the
    sandbox needs the desktop profile)."""

    model_config = STRICT
    files: Annotated[dict[WorkspaceFile, _FileText], Field(max_length=32)] = {}
    apps: Annotated[list[SetupApp], Field(max_length=8)] = []

    def open_actions(self) -> list[OpenApp]:
        """The ``open_app`` actions of :attr:`apps`, in order."""
        return [OpenApp(type="open_app", app=app.app, path=app.path) for app in self.apps]


class PermissionChoice(BaseModel):
    """A task's answer to one browser permission: ``allow``, and for an allowed
    ``geolocation`` the ``position`` the browser reports (``{lat, lon, accuracy_m?}``,
    degrees and metres), required since no location service is reachable from the sandbox."""

    model_config = STRICT
    allow: bool
    position: GeoPosition | None = None


TaskPermissions = dict[PermissionName, Literal["allow", "deny"] | PermissionChoice]
"""A task's ``permissions``: each named browser permission ``allow``, ``deny`` or
``{allow, position}`` (:class:`PermissionChoice`); unnamed ones are denied."""


def check_permissions(permissions: TaskPermissions) -> None:
    """Check a task's ``permissions``: an allowed ``geolocation`` needs a position (no
    location service is reachable from the sandbox), and only it may have one.

    Raises:
        ValueError: naming the permission and what is wrong.
    """
    for name, choice in permissions.items():
        allow = choice == "allow" or (isinstance(choice, PermissionChoice) and choice.allow)
        position = choice.position if isinstance(choice, PermissionChoice) else None
        if name == "geolocation" and allow and position is None:
            raise ValueError("permissions.geolocation: an allowed location needs a position "
                             "({allow: true, position: {lat, lon}}): no location service is reachable "
                             "from the sandbox")
        if position is not None and not (name == "geolocation" and allow):
            raise ValueError(f"permissions.{name}: a position is only for an allowed geolocation")


def permission_grants(permissions: TaskPermissions) -> PermissionGrants:
    """The grants a run puts in force for a task's ``permissions``
    (:class:`~deskpod.protocol.PermissionGrants`): every permission it allows; the others are
    denied."""
    granted = [name for name, choice in permissions.items()
               if choice == "allow" or (isinstance(choice, PermissionChoice) and choice.allow)]
    choice = permissions.get("geolocation")
    position = choice.position if isinstance(choice, PermissionChoice) and choice.allow else None
    return PermissionGrants(granted=granted, position=position)


class TaskSpec(BaseModel):
    """A whole task: start page, the agent (scripted ``steps``, or a model ``agent``;
    neither when the agent is given to the run, as ``deskpod serve`` does), limits, what is
    set up before the first step (:class:`TaskSetup`) and the success check. ``allow_clipboard_read``: the agent may read the clipboard without a
    confirmation (``clipboard_read`` is then ``L1``; default ``L2``: it may hold a secret)."""

    model_config = STRICT
    name: Annotated[str, Field(min_length=1, max_length=200)]
    start_url: Annotated[str, Field(pattern=r"^https?://")]
    model_size: Size | None = None
    allowed_domains: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=100)] = []
    limits: Limits = Limits()
    permissions: TaskPermissions = {}
    agent: ModelAgentSpec | None = None
    steps: list[Step] = []
    setup: TaskSetup = TaskSetup()
    success: SuccessCheck
    allow_clipboard_read: bool = False

    @model_validator(mode="after")
    def _one_agent(self) -> TaskSpec:
        if self.agent is not None and self.steps:
            raise ValueError("give scripted steps or a model agent, not both")
        check_permissions(self.permissions)
        return self

    def permission_grants(self) -> PermissionGrants:
        """The grants the run puts in force (:class:`~deskpod.protocol.PermissionGrants`): every
        permission ``permissions`` allows; the others are denied."""
        return permission_grants(self.permissions)


M = TypeVar("M", bound=BaseModel)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_model_file(path: str | Path, model: type[M], kind: str = "task", *, empty_ok: bool = False) -> M:
    """Read a YAML (or JSON) file with the safe loader (duplicate keys refused) and validate it as ``model``.

    Args:
        kind: what the file is, for messages (``"task"``, ``"policy"``).
        empty_ok: an empty file means ``model``'s defaults.

    Raises:
        TaskFileError: the file cannot be read, is larger than :data:`MAX_MODEL_FILE_BYTES`,
            is not YAML, or does not match ``model`` (the message names each bad field, up to five).
    """
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_MODEL_FILE_BYTES + 1)
        if len(raw) > MAX_MODEL_FILE_BYTES:
            raise TaskFileError(f"{kind} file {path} is larger than {MAX_MODEL_FILE_BYTES} bytes")
        data: Any = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise TaskFileError(f"cannot read {kind} file {path}: {exc}") from exc
    try:
        return model.model_validate({} if data is None and empty_ok else data)
    except (ValidationError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise TaskFileError(f"{kind} file {path}: nested too deeply") from exc
        raise TaskFileError(f"{kind} file {path}: {error_summary(exc, empty=kind)}") from exc


def load_task(path: str | Path) -> TaskSpec:
    """Read and validate a task file (:func:`load_model_file`).

    Raises:
        TaskFileError: the file cannot be read, is not YAML, or does not match
            :class:`TaskSpec` (the message names each bad field, up to five).
    """
    task = load_model_file(path, TaskSpec)
    if task.agent is None and not task.steps:
        raise TaskFileError(f"task file {path}: give scripted steps or a model agent")
    return task
