"""Code task files: the seed, the limits, the verification and the scripted agent's tool calls.

Task file (YAML)::

    name: mini-billing-fix
    workspace: {seed: ../examples/mini_billing}   # relative to the task file
    limits: {max_steps: 20, max_wall_time_s: 120, retry_budget: 2}
    success:
      test_command: [python3, -m, pytest, -q, -p, no:cacheprovider]
      timeout_s: 120
      protected: ["tests/*", "conftest.py"]         # fnmatch patterns: the tests
      editable: ["*"]                               # what the agent may change (default)
      new_tests: false                              # new files under `protected` allowed
    steps:                                          # the scripted agent
      - {tool: list_dir, path: .}
      - {tool: read_file, path: billing.py}
      - {tool: apply_patch, patch: "..."}
      - {tool: run_tests}
      - {tool: claim_done, message: all tests pass}

A step's fields are the protocol request's (:mod:`deskpod.protocol`, section
"Workspace tools") without ``type`` and ``id``; ``run_tests`` takes none.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deskpod.controller.policy.run_limits import CodeLimits
from deskpod.controller.task import load_model_file
from deskpod.controller.verdict import pytest_argv
from deskpod.errors import InvalidRequestError, PolicyDeniedError, TaskFileError
from deskpod.protocol import (
    MAX_SEED_ARCHIVE_BYTES,
    WORKSPACE_REQUEST_TYPES,
    RunTestsRequest,
    WorkspaceRequest,
    first_error,
)
from deskpod.protocol._base import STRICT

__all__ = [
    "AGENT_TOOLS",
    "CodeSuccess",
    "CodeTaskSpec",
    "ToolCall",
    "WorkspaceSeed",
    "load_code_task",
    "pack_workspace",
    "tool_request",
]

AGENT_TOOLS: frozenset[str] = frozenset(
    {"list_dir", "read_file", "write_file", "edit_file", "apply_patch", "exec", "run_tests", "claim_done"}
)
"""Tools an agent may call. ``seed_workspace`` and ``workspace_diff`` are the controller's."""

_SKIP_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


class CodeSuccess(BaseModel):
    """How completion is verified (the clean-room verdict, :mod:`.verdict`).

    ``test_command``: ``python3 -m pytest ARGS`` (argv); the agent's ``run_tests`` runs
    it in the workspace, the verdict runs it isolated in a clean room within
    ``timeout_s`` seconds. ``protected``: fnmatch patterns of the tests, never changed.
    ``editable``: fnmatch patterns of the paths the agent may change (default all;
    tests, test configuration and modules shadowing the test runner are refused
    whatever they say). ``new_tests``: new files under ``protected`` are accepted and
    run beside the seed's tests.
    """

    model_config = STRICT
    test_command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 300.0
    protected: list[str] = []
    editable: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = ["*"]
    new_tests: bool = False


class WorkspaceSeed(BaseModel):
    """``seed``: a folder or ``.tar.gz`` on the host (relative to the task file)."""

    model_config = STRICT
    seed: Annotated[str, Field(min_length=1)]


class ToolCall(BaseModel):
    """One tool call of an agent: ``tool`` and its arguments (the protocol request's fields)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    tool: str

    @property
    def args(self) -> dict[str, Any]:
        """The call's arguments."""
        return dict(self.model_extra or {})


class CodeTaskSpec(BaseModel):
    """A code task: the seed, limits, the verification and the scripted agent's steps.

    ``display``: the task grants agent commands the sandbox's X display (a code agent
    testing a GUI): ``exec`` calls may ask for ``display: true`` and the task's test
    runs get it. Off by default: agent commands then cannot reach the X server, and an
    ``exec`` that asks for it is refused (rule ``display_not_granted``). The grant is
    in the run's ``run_started`` audit record and in every step that used it.

    ``allowed_domains``: the hosts (and their subdomains) an ``exec`` with ``network:
    true`` may reach through the egress proxy, within the proxy's own allowlist, like
    a GUI task's list for the browser. The controller sends them with the request, and
    the daemon's egress grant for that one command covers only them. Empty (the
    default): the task grants no network, and such an ``exec`` is refused (rule
    ``network_not_granted``).
    """

    model_config = STRICT
    name: Annotated[str, Field(min_length=1, max_length=200)]
    workspace: WorkspaceSeed
    limits: CodeLimits = CodeLimits()
    success: CodeSuccess
    display: bool = False
    allowed_domains: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=100)] = []
    steps: list[ToolCall] = []


def tool_request(
    call: ToolCall,
    request_id: str,
    test_command: Sequence[str],
    test_timeout_s: float = 300.0,
    display: bool = False,
    allowed_domains: Sequence[str] | None = None,
) -> WorkspaceRequest:
    """Turn an agent's tool call into the protocol request the daemon runs.

    Args:
        call: the call; ``claim_done`` is the controller's and has no request.
        request_id: the request's ``id``.
        test_command: the task's test command, used for ``run_tests``.
        test_timeout_s: its timeout, seconds.
        display: the task grants the display (:attr:`CodeTaskSpec.display`): test
            runs get it, and an ``exec`` may ask for it.
        allowed_domains: the task's network allowlist
            (:attr:`CodeTaskSpec.allowed_domains`): an ``exec`` with ``network`` gets it
            as its ``allowed_domains`` (whatever the call said), and is refused when it
            is empty; ``None``: only the call's shape is checked (loading a task file).

    Returns:
        The validated workspace request.

    Raises:
        InvalidRequestError: an unknown tool, a controller-only tool, or bad arguments.
        PolicyDeniedError: an ``exec`` asks for the display the task does not grant
            (``detail["rule"]`` ``"display_not_granted"``), or for the network and the
            task grants none (``"network_not_granted"``).
    """
    if call.tool not in AGENT_TOOLS or call.tool == "claim_done":
        raise InvalidRequestError(
            f"unknown tool {call.tool!r}; known: {', '.join(sorted(AGENT_TOOLS))}", detail={"tool": call.tool[:64]}
        )
    args = call.args
    if call.tool == "run_tests":
        if args:
            raise InvalidRequestError("run_tests takes no arguments: the task fixes the test command")
        return RunTestsRequest(
            type="run_tests", id=request_id, argv=list(test_command), timeout_s=test_timeout_s, display=display
        )
    if call.tool == "exec" and args.get("display") is True and not display:
        raise PolicyDeniedError(
            "exec refused: the task does not grant agent commands the display (task key `display: true`)",
            detail={"rule": "display_not_granted"},
        )
    if call.tool == "exec" and args.get("network") is True and allowed_domains is not None:
        if not allowed_domains:
            raise PolicyDeniedError(
                "exec refused: the task grants agent commands no network (task key `allowed_domains`)",
                detail={"rule": "network_not_granted"},
            )
        args["allowed_domains"] = list(allowed_domains)
    model = WORKSPACE_REQUEST_TYPES[call.tool]
    try:
        return model.model_validate({**args, "type": call.tool, "id": request_id})  # type: ignore[return-value]
    except ValidationError as exc:
        message = f"{call.tool}: {first_error(exc, empty='arguments')}"
        raise InvalidRequestError(message, detail={"tool": call.tool}) from exc


def load_code_task(path: str | Path) -> CodeTaskSpec:
    """Read and validate a code task file; the seed path is made absolute.

    Raises:
        TaskFileError: unreadable, not YAML, not a :class:`CodeTaskSpec`, a test
            command that is not ``python3 -m pytest ...``, a step that is not a valid
            tool call (named by its index), or a missing seed.
    """
    path = Path(path)
    task = load_model_file(path, CodeTaskSpec)
    for index, call in enumerate(task.steps, start=1):
        if call.tool == "claim_done":
            if set(call.args) - {"message"}:
                raise TaskFileError(f"task file {path}: step {index}: claim_done takes only 'message'")
            continue
        try:
            # Only the call's shape is checked here; whether the display is granted is
            # the run's decision (a scripted step may ask for it to be refused).
            tool_request(call, f"step-{index}", task.success.test_command, display=True)
        except InvalidRequestError as exc:
            raise TaskFileError(f"task file {path}: step {index}: {exc.message}") from exc
    seed = (path.parent / task.workspace.seed).resolve()
    if not seed.exists():
        raise TaskFileError(f"task file {path}: workspace seed {seed} does not exist")
    try:
        pytest_argv(task.success.test_command, None, collect=False)
    except ValueError as exc:
        raise TaskFileError(f"task file {path}: success.test_command: {exc}") from exc
    return task.model_copy(update={"workspace": WorkspaceSeed(seed=str(seed))})


def pack_workspace(source: str | Path) -> bytes:
    """Pack a host folder (its ``.git`` included) as a gzip'd tar for ``seed_workspace``.

    Caches (``__pycache__``, ``.pytest_cache``, ``*.pyc``...) are left out; owners
    are dropped. A ``.tar.gz``/``.tgz`` file is sent as it is.

    Returns:
        The archive's bytes.

    Raises:
        TaskFileError: the source is missing, or the archive exceeds
            :data:`~deskpod.protocol.MAX_SEED_ARCHIVE_BYTES`.
    """
    source = Path(source)
    if source.is_file() and source.name.endswith((".tar.gz", ".tgz")):
        data = source.read_bytes()
    elif source.is_dir():

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            parts = Path(info.name).parts
            if any(p in _SKIP_NAMES for p in parts) or info.name.endswith((".pyc", ".pyo")):
                return None
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            return info

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for child in sorted(source.iterdir()):
                tar.add(child, arcname=child.name, filter=keep)
        data = buf.getvalue()
    else:
        raise TaskFileError(f"workspace seed {source} is neither a folder nor a .tar.gz file")
    if len(data) > MAX_SEED_ARCHIVE_BYTES:
        raise TaskFileError(
            f"workspace seed {source} packs to {len(data)} bytes; the limit is {MAX_SEED_ARCHIVE_BYTES}"
        )
    return data
