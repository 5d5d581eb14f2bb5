"""Suite files: which tasks an eval runs, how often, from what start, and what counts as a pass.

A suite file is YAML (or JSON)::

    name: regression
    repeat: 1                          # runs of every task (``deskpod eval --repeat`` wins)
    tasks:
      - task: search.yaml              # a task file, relative to the suite file
      - task: pay-denied.yaml
        expect: cancelled              # the run must end cancelled: that is this task's pass
        reason_contains: confirmation denied
      - task: account.yaml
        snapshot: {setup: login.yaml}  # run login.yaml once, snapshot its browser session,
                                       # restore it before every run of account.yaml
      - task: download.yaml
        approver: approve              # a scripted approver says yes to every confirmation
        downloads: [eval-report.txt]   # and the audit log must show this download complete
      - task: ../code_mini_billing_claim_only.yaml
        expect: not_verified           # the controller's verdict refused the agent's claim
      - task: desktop/editor-save.yaml
        name: editor-save-idle
        idle: true                     # an agent that does nothing: its check must fail
        expect: not_verified

A task file is a GUI task (:class:`~deskpod.controller.task.TaskSpec`) or, when it
has a ``workspace``, a code task (:class:`~deskpod.controller.code_task.CodeTaskSpec`);
both are loaded and validated with the suite, so a bad task file is refused before
any sandbox starts.

**Outcomes** (``expect``, one or a list; default ``succeeded``): a run's status
(``succeeded``, ``failed``, ``cancelled``) or the reason's error code
(``policy_denied``, ``limit_exceeded``, ``not_verified``: a failed run whose
success check or clean-room verdict refused the claim). A run passes when one of its
outcomes is expected, ``reason_contains`` (if given) is in its reason, and every
name in ``downloads`` is a complete download in its audit log.

**Approvers**: ``deny`` (the default: every confirmation denied, every pause
cancelled, as ``deskpod run --confirm deny``) or ``approve`` (every confirmation
approved, as ``eval:scripted-approver`` in the audit log; pauses still cancel the
run, so an injection is never waved through).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deskpod.controller.code_task import CodeTaskSpec, load_code_task
from deskpod.controller.policy.policy_file import Policy, load_policy
from deskpod.controller.task import Step, TaskSpec, load_model_file, load_task
from deskpod.errors import SuiteFileError, TaskFileError
from deskpod.protocol import MAX_SNAPSHOT_BYTES, Wait
from deskpod.protocol._base import STRICT

__all__ = [
    "LoadedEntry",
    "LoadedSuite",
    "MAX_REPEAT",
    "MAX_SUITE_TASKS",
    "OUTCOMES",
    "Outcome",
    "SnapshotSpec",
    "SuiteEntry",
    "SuiteSpec",
    "load_suite",
]

MAX_SUITE_TASKS = 500
"""Most entries one suite file may list."""

MAX_REPEAT = 100
"""Most runs of one task (``repeat`` in the file, ``--repeat`` on the command line)."""

Outcome = Literal["succeeded", "failed", "cancelled", "policy_denied", "limit_exceeded", "not_verified"]
OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "cancelled", "policy_denied", "limit_exceeded", "not_verified")
"""The outcomes an entry may expect (see the module docstring)."""

_RelPath = Annotated[str, Field(min_length=1, max_length=1000)]


class SnapshotSpec(BaseModel):
    """The browser session a task starts from: exactly one of ``setup`` (a GUI task file
    run once, on a sandbox of its own, before the suite; its session is then snapshotted)
    or ``file`` (an archive ``deskpod pool snapshot`` stored), relative to the suite file."""

    model_config = STRICT
    setup: _RelPath | None = None
    file: _RelPath | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SnapshotSpec:
        if (self.setup is None) == (self.file is None):
            raise ValueError("a snapshot gives exactly one of setup (a task file) or file (an archive)")
        return self


class SuiteEntry(BaseModel):
    """One task of a suite (see the module docstring)."""

    model_config = STRICT
    task: _RelPath
    name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    expect: Outcome | Annotated[list[Outcome], Field(min_length=1, max_length=6)] = "succeeded"
    reason_contains: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    downloads: Annotated[list[Annotated[str, Field(min_length=1, max_length=255)]], Field(max_length=20)] = []
    snapshot: SnapshotSpec | None = None
    approver: Literal["deny", "approve"] = "deny"
    policy: _RelPath | None = None
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] | None = None
    idle: bool = False
    """Run the GUI task with an agent that does nothing (one ``wait`` of 0 s, then it claims
    done): the check that says a task is verified from the environment must then fail."""

    @property
    def expected(self) -> tuple[str, ...]:
        """The expected outcomes as a tuple."""
        return (self.expect,) if isinstance(self.expect, str) else tuple(self.expect)


class SuiteSpec(BaseModel):
    """A whole suite file."""

    model_config = STRICT
    name: Annotated[str, Field(min_length=1, max_length=200)]
    description: Annotated[str, Field(max_length=5000)] = ""
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] = 1
    tasks: Annotated[list[SuiteEntry], Field(min_length=1, max_length=MAX_SUITE_TASKS)]


@dataclass(frozen=True)
class LoadedEntry:
    """A suite entry with its files read and validated.

    Attributes:
        name: the entry's name (``name``, else the task's own), unique in the suite.
        spec: the entry as written.
        task: the GUI or code task.
        kind: ``"gui"`` or ``"code"``.
        task_path: the task file's absolute path.
        policy: the entry's policy (``None``: the built-in policy).
        setup: the snapshot's setup task (``snapshot.setup``), else ``None``.
        snapshot_file: the snapshot archive's path (``snapshot.file``), else ``None``.
        repeat: runs of this entry (the entry's ``repeat``, else the suite's).
    """

    name: str
    spec: SuiteEntry
    task: TaskSpec | CodeTaskSpec
    kind: Literal["gui", "code"]
    task_path: Path
    policy: Policy | None
    setup: TaskSpec | None
    snapshot_file: Path | None
    repeat: int


@dataclass(frozen=True)
class LoadedSuite:
    """A suite file with every task it names loaded. ``path``: the suite file's absolute path."""

    name: str
    description: str
    path: Path
    entries: tuple[LoadedEntry, ...]


def _load_any_task(path: Path) -> tuple[TaskSpec | CodeTaskSpec, Literal["gui", "code"]]:
    """A task file as a code task when it has a ``workspace``, else as a GUI task.

    Raises:
        TaskFileError: the file is unreadable or invalid as that kind.
    """
    raw: Any = load_model_file(path, _Peek)
    if raw.workspace is not None:
        return load_code_task(path), "code"
    return load_task(path), "gui"


class _Peek(BaseModel):
    """Only whether a task file has a ``workspace`` (everything else is checked by its own model)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    workspace: Any = None


def _resolve(base: Path, relative: str, what: str) -> Path:
    path = (base / relative).resolve()
    if not path.is_file():
        raise SuiteFileError(f"suite file {base}: {what} {relative!r} is not a file ({path})")
    return path


def _snapshot_file(base: Path, relative: str, where: str) -> Path:
    """A snapshot archive named by the suite entry ``where``: a gzip file of at most
    :data:`MAX_SNAPSHOT_BYTES` (what the daemon accepts), checked now rather than refused by
    every run's sandbox.

    Raises:
        SuiteFileError: missing, too large or not gzip.
    """
    path = _resolve(base, relative, "snapshot file")
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            magic = f.read(2)
    except OSError as exc:
        raise SuiteFileError(f"{where}: cannot read snapshot file {relative!r}: {exc}") from exc
    if size > MAX_SNAPSHOT_BYTES:
        raise SuiteFileError(f"{where}: snapshot file {relative!r} is {size} bytes; the limit is {MAX_SNAPSHOT_BYTES}")
    if magic != b"\x1f\x8b":
        raise SuiteFileError(f"{where}: snapshot file {relative!r} is not a snapshot archive (gzip)")
    return path


def load_suite(path: str | Path) -> LoadedSuite:
    """Read a suite file and every task, policy and snapshot file it names.

    Args:
        path: the suite file (YAML or JSON).

    Returns:
        The :class:`LoadedSuite`.

    Raises:
        SuiteFileError: the suite file is unreadable or invalid (the message names
            each bad field, up to five), a file it names is missing or invalid (the message names
            the entry), two entries have one name, a snapshot's setup task is a code
            task, or a code task asks for a snapshot, an approver or downloads it cannot use.
    """
    path = Path(path).resolve()
    try:
        spec = load_model_file(path, SuiteSpec, "suite")
    except SuiteFileError:
        raise
    except TaskFileError as exc:
        raise SuiteFileError(exc.message) from exc
    base = path.parent
    entries: list[LoadedEntry] = []
    names: set[str] = set()
    for index, entry in enumerate(spec.tasks, start=1):
        where = f"suite file {path}: task {index} ({entry.task})"
        task_path = _resolve(base, entry.task, "task file")
        try:
            task, kind = _load_any_task(task_path)
            policy = load_policy(_resolve(base, entry.policy, "policy file")) if entry.policy else None
            setup = None
            snapshot_file = None
            if entry.snapshot is not None and entry.snapshot.setup is not None:
                setup_task, setup_kind = _load_any_task(_resolve(base, entry.snapshot.setup, "setup task"))
                if not isinstance(setup_task, TaskSpec):
                    raise SuiteFileError(f"{where}: a snapshot's setup task must be a GUI task")
                setup = setup_task
            elif entry.snapshot is not None and entry.snapshot.file is not None:
                snapshot_file = _snapshot_file(base, entry.snapshot.file, where)
        except SuiteFileError:
            raise
        except TaskFileError as exc:
            raise SuiteFileError(f"{where}: {exc.message}") from exc
        if kind == "code" and (entry.snapshot is not None or entry.downloads or entry.idle):
            raise SuiteFileError(f"{where}: a code task has no browser session: no snapshot, downloads or idle")
        if entry.idle and isinstance(task, TaskSpec):
            task = task.model_copy(update={"steps": [Step(actions=[Wait(type="wait", seconds=0)])], "agent": None})
        name = entry.name or task.name
        if name in names:
            raise SuiteFileError(f"{where}: another task is named {name!r} (give one a name)")
        names.add(name)
        entries.append(LoadedEntry(name, entry, task, kind, task_path, policy, setup, snapshot_file,
                                   entry.repeat or spec.repeat))
    return LoadedSuite(spec.name, spec.description, path, tuple(entries))
