"""Run a suite N tasks at a time over a warm pool, and judge every run from its sealed audit log.

::

    pool = SandboxPool(DockerBackend(config), name="eval-123", size=4)
    runner = EvalRunner(load_suite("suite.yaml"), pool, audit_dir=Path("audit"), signer=signer, parallel=4)
    result = await runner.run()        # fills the pool, runs everything, never closes the pool

Each run leases a sandbox (:meth:`SandboxPool.acquire`), restores the entry's
snapshot if it has one, plays the task exactly as ``deskpod run`` / ``deskpod code``
do (:func:`~deskpod.controller.gui.run_task`,
:func:`~deskpod.controller.code_agent.run_code_task`, with the slot's own egress
proxy control), and releases it, which resets it in place under a new token (or
replaces it when it crashed): no run sees another's state.

**The verdict** of a run is read from its audit log, after the log's hash chain and
its final record's seal were checked with the controller's key (as ``deskpod
verify-log`` does): the status, reason and steps are those of the sealed
``run_finished`` record, and the downloads an entry requires must be complete in the
log's step records. A log that does not verify fails the run, whatever it says.

**Infrastructure errors**: a run whose sandbox could not be leased, whose
connection to the sandbox broke (:data:`INFRA_REASONS`), whose sandbox the backend
finds crashed, exited or OOM-killed afterwards (:meth:`Backend.failure`), or whose
snapshot could not be restored, is not the agent's failure: it is tried once more on
a fresh sandbox, and if that fails too it is reported as ``infrastructure_error``,
outside the success rate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deskpod.backend.base import SandboxHandle
from deskpod.backend.pool import SandboxPool
from deskpod.client import SandboxClient
from deskpod.controller.audit_log import verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, DenyChannel, PauseAnswer, PauseNotice
from deskpod.controller.egress import egress_control_of
from deskpod.controller.task import TaskSpec
from deskpod.errors import DeskpodError, SnapshotError
from deskpod.eval.suite import LoadedEntry, LoadedSuite

__all__ = [
    "APPROVER",
    "AuditVerdict",
    "CONNECT_TIMEOUT_S",
    "EvalResult",
    "EvalRunner",
    "INFRA_REASONS",
    "PlayFn",
    "Played",
    "ProgressEvent",
    "RunRecord",
    "SNAPSHOT_MISSING",
    "ScriptedApprover",
    "play_entry",
    "run_outcomes",
]

log = logging.getLogger(__name__)

APPROVER = "eval:scripted-approver"
"""Who approved, in the audit log, when a suite entry's ``approver`` is ``approve``."""

CONNECT_TIMEOUT_S = 60.0
"""How long a run waits for its leased sandbox to accept a connection, seconds."""

INFRA_REASONS = re.compile(
    r"^(internal: (connection to the sandbox closed|sandbox at \S+ not reachable|sandbox sent no hello)"
    r"|workspace_unavailable: )"
)
"""Run reasons that say the connection to the sandbox, or its workspace container, broke (an
infrastructure error, not the agent's)."""

SNAPSHOT_MISSING = "the entry's snapshot could not be made (see the setup errors)"
"""The infrastructure error of every run of an entry whose start snapshot could not be
made: reported once, not retried (a second attempt would find it missing too)."""

_CODE = re.compile(r"^([a-z_]{1,40}): ")
_SCENE_IMAGE_MAX_BYTES = 1_048_576


class ScriptedApprover:
    """The suite's approver for ``approver: approve``: every confirmation approved, as
    :data:`APPROVER`; every pause (an injection, a loop) cancels the run."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        """Approve ``request`` (the approval repeats its digest, so it binds to that action and screen)."""
        return ConfirmationAnswer(True, request.digest, APPROVER, "the suite's scripted approver")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        """Cancel the run: a suite never resumes past a pause."""
        return "cancel"


@dataclass(frozen=True)
class Played:
    """What one play of a task returned (the fields :class:`RunResult` and
    :class:`CodeRunResult` share). ``scene``: the failure scene's folder, if any;
    ``model_tokens``: the tokens the model agent's responses reported (``None``: no model ran)."""

    run_id: str
    status: str
    reason: str
    steps: int
    duration_s: float
    audit_log: Path
    audit_head: str
    scene: Path | None = None
    model_tokens: int | None = None


PlayFn = Callable[[LoadedEntry, SandboxHandle, Path, AuditSigner, bytes | None], Awaitable[Played]]
"""Plays one entry on a leased sandbox: ``(entry, handle, audit_dir, signer, snapshot) → Played``."""


async def play_entry(entry: LoadedEntry, handle: SandboxHandle, audit_dir: Path, signer: AuditSigner,
                     snapshot: bytes | None) -> Played:
    """Restore ``snapshot`` (if any) into the sandbox's browser, then play the entry's task
    the way ``deskpod run`` (GUI) or ``deskpod code`` does, with the slot's egress proxy.

    Args:
        entry: the suite entry.
        handle: the leased sandbox (its URL and current token).
        audit_dir: folder for the run's audit log, screenshots and failure scene.
        signer: seals the audit log.
        snapshot: a browser session archive to start from, else ``None``.

    Returns:
        The run's :class:`Played`.

    Raises:
        DeskpodError: the snapshot could not be restored (the run did not start).
    """
    from deskpod.agents import create_agent
    from deskpod.controller.code_agent import run_code_task
    from deskpod.controller.gui import run_task

    channel = ScriptedApprover() if entry.spec.approver == "approve" else DenyChannel()
    if isinstance(entry.task, TaskSpec):
        if snapshot is not None:
            client = await SandboxClient.connect(handle.url, handle.token, timeout_s=CONNECT_TIMEOUT_S)
            try:
                await client.restore(snapshot, entry.task.start_url)
            finally:
                await client.close()
        agents: list[Any] = []

        def counted(spec: Any, display: Any) -> Any:
            agent = create_agent(spec, display)
            agents.append(agent)
            return agent

        result = await run_task(entry.task, handle.url, handle.token, audit_dir=audit_dir, channel=channel,
                                policy=entry.policy, agent_factory=counted, connect_timeout_s=CONNECT_TIMEOUT_S,
                                signer=signer, egress_control=egress_control_of(handle))
        tokens = sum(int(getattr(a, "tokens_used", 0)) for a in agents) if agents else None
        return Played(result.run_id, result.status, result.reason, result.steps, result.duration_s,
                      result.audit_log, result.audit_head, result.scene, tokens)
    code = await run_code_task(entry.task, handle.url, handle.token, channel=channel, audit_dir=audit_dir,
                               connect_timeout_s=CONNECT_TIMEOUT_S, policy=entry.policy, signer=signer)
    return Played(code.run_id, code.status, code.reason, code.steps, code.duration_s, code.audit_log,
                  code.audit_head)


@dataclass(frozen=True)
class AuditVerdict:
    """The audit log's check: ``ok`` (chain intact, ends with ``run_finished``, sealed by
    the controller's key), ``lines`` checked, ``head``, ``key_id`` and the ``error``."""

    ok: bool
    lines: int = 0
    head: str = ""
    key_id: str = ""
    error: str = ""


@dataclass(frozen=True)
class RunRecord:
    """One run of one suite entry, as the report shows it.

    Attributes:
        task: the entry's name. index: which repeat, from 0. kind: ``"gui"`` or ``"code"``.
        status: ``"passed"`` (an expected outcome), ``"failed"`` (not), or
            ``"infrastructure_error"`` (two attempts hit an infrastructure error).
        run_status: the sealed log's status (``succeeded``/``failed``/``cancelled``), ``None`` if no run ended.
        outcomes: the run's outcomes (its status and its reason's code, see :func:`run_outcomes`).
        expected: the entry's expected outcomes.
        reason: the run's reason (sandbox text: untrusted), or why it is not judged.
        steps: steps executed. wall_time_s: the last attempt's time from lease to release, seconds.
        model_tokens: tokens the model agent's responses reported (``None``: no model ran).
        run_id, audit_log: the last attempt's run and log (``None``: none). audit: its :class:`AuditVerdict`.
        scene: the failure scene's folder; scene_reason: its saved reason; scene_image: its
            screenshot's path when small enough to embed in the HTML report.
        attempts: 1, or 2 after an infrastructure error. infrastructure: the infrastructure errors seen.
        mismatch: why a failed run did not pass, ``""`` when it passed.
        sandbox_id: the sandbox of the last attempt.
    """

    task: str
    index: int
    kind: str
    status: Literal["passed", "failed", "infrastructure_error"]
    run_status: str | None
    outcomes: tuple[str, ...]
    expected: tuple[str, ...]
    reason: str
    steps: int
    wall_time_s: float
    model_tokens: int | None
    run_id: str | None
    audit_log: str | None
    audit: AuditVerdict
    scene: str | None = None
    scene_reason: str | None = None
    scene_image: str | None = None
    attempts: int = 1
    infrastructure: tuple[str, ...] = ()
    mismatch: str = ""
    sandbox_id: str = ""


@dataclass(frozen=True)
class ProgressEvent:
    """A run began (``"started"``), was retried after an infrastructure error (``"retry"``) or ended (``"done"``)."""

    kind: Literal["started", "retry", "done"]
    task: str
    index: int
    record: RunRecord | None = None
    error: str = ""


@dataclass
class EvalResult:
    """A suite's runs. ``wall_time_s``: from the start of :meth:`EvalRunner.run` to its end,
    seconds (pool filling included); ``fill_time_s``: of which filling the pool;
    ``setup_errors``: snapshot setups that failed."""

    suite: str
    runs: list[RunRecord]
    wall_time_s: float
    parallel: int
    repeat: int | None
    backend: str = ""
    setup_errors: list[str] = field(default_factory=list)
    fill_time_s: float = 0.0


def run_outcomes(status: str, reason: str, records: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """A run's outcomes: its status, and, for a run that did not succeed, the error code
    its reason starts with (``policy_denied: ...``); a failed run whose last ``verify`` record refused the claim
    (the success check or the clean-room verdict) is also ``not_verified``.

    Args:
        status: the sealed ``run_finished`` record's status.
        reason: its reason.
        records: the audit log's records.

    Returns:
        The outcomes, the status first.
    """
    outcomes = [status]
    code = _CODE.match(reason)
    if code and status != "succeeded" and code.group(1) != status:
        outcomes.append(code.group(1))
    verifies = [r for r in records if r.get("event") == "verify"]
    if status == "failed" and verifies and verifies[-1].get("ok") is False and "not_verified" not in outcomes:
        outcomes.append("not_verified")
    return tuple(outcomes)


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _complete_downloads(records: Sequence[dict[str, Any]]) -> set[str]:
    names = set()
    for record in records:
        for download in record.get("downloads") or []:
            if isinstance(download, dict) and download.get("state") == "complete":
                names.add(str(download.get("name")))
    return names


def _scene(folder: Path | None) -> tuple[str | None, str | None, str | None]:
    """The failure scene's folder, saved reason and embeddable screenshot path."""
    if folder is None:
        return None, None, None
    reason = image = None
    try:
        data = json.loads((folder / "scene.json").read_text(encoding="utf-8"))
        reason = str(data.get("reason", ""))[:2000] if isinstance(data, dict) else None
    except (OSError, ValueError):
        pass
    for shot in sorted(folder.glob("screenshot.*")):
        if shot.suffix in (".png", ".jpeg", ".jpg", ".webp") and shot.stat().st_size <= _SCENE_IMAGE_MAX_BYTES:
            image = str(shot)
    return str(folder), reason, image


class EvalRunner:
    """Runs a suite over a pool (see the module docstring).

    Args:
        suite: the loaded suite.
        pool: the pool to lease from; :meth:`run` fills it and leaves it open.
        audit_dir: where every run's audit log, screenshots and scene go.
        signer: seals the logs; its public key checks them.
        parallel: at most this many runs at a time (the pool should hold as many).
        repeat: runs of every entry (``None``: each entry's own ``repeat``).
        play: plays one entry on a sandbox (default :func:`play_entry`; tests give a fake).
        on_progress: called with every :class:`ProgressEvent`.
        backend_name: the backend's name, for the report.

    Raises:
        ValueError: ``parallel`` < 1.
    """

    def __init__(self, suite: LoadedSuite, pool: SandboxPool, *, audit_dir: Path, signer: AuditSigner,
                 parallel: int = 1, repeat: int | None = None, play: PlayFn = play_entry,
                 on_progress: Callable[[ProgressEvent], None] | None = None, backend_name: str = "") -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {parallel}")
        self.suite = suite
        self.pool = pool
        self.audit_dir = audit_dir
        self.signer = signer
        self.parallel = parallel
        self.repeat = repeat
        self.play = play
        self.on_progress = on_progress
        self.backend_name = backend_name
        self._snapshots: dict[str, bytes] = {}
        self._refill = asyncio.Lock()

    def _emit(self, event: ProgressEvent) -> None:
        if self.on_progress is not None:
            self.on_progress(event)

    def jobs(self) -> list[tuple[LoadedEntry, int]]:
        """Every run the suite asks for: ``(entry, repeat index)``, entries in order."""
        return [(entry, index) for entry in self.suite.entries
                for index in range(self.repeat or entry.repeat)]

    async def run(self) -> EvalResult:
        """Fill the pool, make the snapshots, play every run (at most ``parallel`` at a time).

        Returns:
            The :class:`EvalResult`, runs in suite order.

        Raises:
            BackendError: the pool could not be filled at all (nothing ran).
        """
        started = time.monotonic()
        await self.pool.fill()
        filled = time.monotonic()
        setup_errors = await self._make_snapshots()
        gate = asyncio.Semaphore(self.parallel)
        runs = await asyncio.gather(*(self._job(entry, index, gate) for entry, index in self.jobs()))
        return EvalResult(self.suite.name, list(runs), time.monotonic() - started, self.parallel, self.repeat,
                          self.backend_name, setup_errors, filled - started)

    # ---- snapshots ------------------------------------------------------------------------------

    async def _make_snapshots(self) -> list[str]:
        """Read every entry's snapshot file and run every setup task once, keeping its session."""
        errors = []
        for entry in self.suite.entries:
            if entry.snapshot_file is not None:
                self._snapshots[entry.name] = entry.snapshot_file.read_bytes()
            elif entry.setup is not None:
                try:
                    self._snapshots[entry.name] = await self._setup(entry, entry.setup)
                except DeskpodError as exc:
                    errors.append(f"{entry.name}: snapshot setup {entry.setup.name!r}: {exc.message}")
                    log.warning("eval: %s", errors[-1])
        return errors

    async def _setup(self, entry: LoadedEntry, setup: TaskSpec) -> bytes:
        """Run ``setup`` on a leased sandbox, check it succeeded, and snapshot the browser session."""
        from deskpod.controller.gui import run_task

        handle = await self.pool.acquire()
        lease = self.pool.member(handle.id).lease
        try:
            result = await run_task(setup, handle.url, handle.token, audit_dir=self.audit_dir, signer=self.signer,
                                    connect_timeout_s=CONNECT_TIMEOUT_S, egress_control=egress_control_of(handle))
            if result.status != "succeeded":
                raise SnapshotError(f"the setup run {result.run_id} ended {result.status}: {result.reason}")
            client = await SandboxClient.connect(handle.url, handle.token, timeout_s=CONNECT_TIMEOUT_S)
            try:
                return await client.snapshot()
            finally:
                await client.close()
        finally:
            await self._release(handle, lease)

    # ---- one run --------------------------------------------------------------------------------

    async def _release(self, handle: SandboxHandle, lease: str) -> None:
        """Give the sandbox back under the lease ``lease`` (reset in place, or replaced when broken);
        a pool that lost it is topped up so the next lease finds a sandbox."""
        try:
            await self.pool.release(handle.id, lease)
        except DeskpodError as exc:
            log.warning("eval: releasing sandbox %s failed: %s", handle.id, exc.message)
            async with self._refill:
                if len(self.pool.members) < self.pool.size:
                    try:
                        await self.pool.fill()
                    except DeskpodError as again:
                        log.warning("eval: refilling the pool failed: %s", again.message)

    async def _infrastructure(self, handle: SandboxHandle, played: Played) -> str | None:
        """Why a run that did not succeed is an infrastructure error, or ``None``."""
        if played.status == "succeeded":
            return None
        if INFRA_REASONS.match(played.reason):
            return f"the connection to sandbox {handle.id} broke: {played.reason[:300]}"
        try:
            failure = await self.pool.backend.failure(handle)
        except DeskpodError as exc:
            return f"the backend could not say whether sandbox {handle.id} is healthy: {exc.message[:300]}"
        return f"sandbox {handle.id} {failure}" if failure is not None else None

    async def _job(self, entry: LoadedEntry, index: int, gate: asyncio.Semaphore) -> RunRecord:
        async with gate:
            self._emit(ProgressEvent("started", entry.name, index))
            problems: list[str] = []
            record = None
            for attempt in (1, 2):
                record, problem = await self._attempt(entry, index, attempt, problems)
                if problem is None or problem == SNAPSHOT_MISSING:
                    break  # a snapshot that could not be made is not made by a second attempt
                problems.append(problem)
                log.warning("eval: %s #%d attempt %d: infrastructure error: %s", entry.name, index, attempt, problem)
                if attempt == 1:
                    self._emit(ProgressEvent("retry", entry.name, index, error=problem))
            assert record is not None
            self._emit(ProgressEvent("done", entry.name, index, record))
            return record

    async def _attempt(self, entry: LoadedEntry, index: int, attempt: int,
                       problems: list[str]) -> tuple[RunRecord, str | None]:
        """One attempt: lease, play, judge, release. Returns the record and the
        infrastructure error that voids it (``None``: the record stands)."""
        started = time.monotonic()
        if entry.name not in self._snapshots and (entry.setup is not None or entry.snapshot_file is not None):
            return self._void(entry, index, attempt, problems, SNAPSHOT_MISSING, started), SNAPSHOT_MISSING
        try:
            handle = await self.pool.acquire()
            lease = self.pool.member(handle.id).lease
        except DeskpodError as exc:
            unleased = f"no sandbox could be leased: {exc.message[:300]}"
            return self._void(entry, index, attempt, problems, unleased, started), unleased
        played: Played | None = None
        problem: str | None = None
        try:
            played = await self.play(entry, handle, self.audit_dir, self.signer, self._snapshots.get(entry.name))
            problem = await self._infrastructure(handle, played)
        except (DeskpodError, OSError, TimeoutError) as exc:
            message = exc.message if isinstance(exc, DeskpodError) else str(exc)
            problem = f"sandbox {handle.id}: {type(exc).__name__}: {message[:300]}"
        finally:
            await self._release(handle, lease)
        if problem is not None or played is None:
            problem = problem or "the run returned nothing"
            return self._void(entry, index, attempt, problems, problem, started, handle.id), problem
        return self._judge(entry, index, attempt, played, played.duration_s, problems, handle.id), None

    def _void(self, entry: LoadedEntry, index: int, attempt: int, problems: list[str], problem: str,
              started: float, sandbox_id: str = "") -> RunRecord:
        return RunRecord(entry.name, index, entry.kind, "infrastructure_error", None, (), entry.spec.expected,
                         problem, 0, time.monotonic() - started, None, None, None, AuditVerdict(False, error="no run"),
                         attempts=attempt, infrastructure=(*problems, problem), sandbox_id=sandbox_id)

    def _judge(self, entry: LoadedEntry, index: int, attempt: int, played: Played, wall_s: float,
               problems: list[str], sandbox_id: str) -> RunRecord:
        """The run's record from its verified audit log (see the module docstring)."""
        check = verify_log(played.audit_log, played.audit_head or None, public_key=self.signer.public_key)
        audit = AuditVerdict(check.ok, check.lines, check.head, check.key_id, check.error)
        records = _records(played.audit_log) if played.audit_log.is_file() else []
        finished = records[-1] if records and records[-1].get("event") == "run_finished" else {}
        scene, scene_reason, scene_image = _scene(played.scene)
        base = dict(task=entry.name, index=index, kind=entry.kind, expected=entry.spec.expected,
                    wall_time_s=wall_s, model_tokens=played.model_tokens, run_id=played.run_id, audit_log=str(played.audit_log),
                    audit=audit, scene=scene, scene_reason=scene_reason, scene_image=scene_image, attempts=attempt,
                    infrastructure=tuple(problems), sandbox_id=sandbox_id)
        if not check.ok or not finished:
            why = f"the audit log does not verify: {check.error or 'no run_finished record'}"
            return RunRecord(status="failed", run_status=None, outcomes=(), reason=played.reason, steps=played.steps,
                             mismatch=why, **base)  # type: ignore[arg-type]
        status, reason = str(finished.get("status", "")), str(finished.get("reason", ""))
        steps = int(finished.get("steps", 0)) if isinstance(finished.get("steps"), int) else played.steps
        outcomes = run_outcomes(status, reason, records)
        mismatch = ""
        if not set(outcomes) & set(entry.spec.expected):
            mismatch = f"expected {' or '.join(entry.spec.expected)}, got {' / '.join(outcomes)}"
        elif entry.spec.reason_contains is not None and entry.spec.reason_contains not in reason:
            mismatch = f"the reason does not contain {entry.spec.reason_contains!r}"
        else:
            missing = [n for n in entry.spec.downloads if n not in _complete_downloads(records)]
            if missing:
                mismatch = f"no complete download of {', '.join(missing)} in the audit log"
        return RunRecord(status="failed" if mismatch else "passed", run_status=status, outcomes=outcomes,
                         reason=reason, steps=steps, mismatch=mismatch, **base)  # type: ignore[arg-type]

