"""Run a code agent in a sandbox's workspace; done means the tests pass.

The controller decides; the daemon only executes. For a code task the
controller:

1. packs the task's seed repository on the host (a folder, with its ``.git`` if
   it has one, or a ``.tar.gz``) and sends it with ``seed_workspace``; the
   workspace becomes a git repository whose seed commit is the baseline;
2. asks the agent (:data:`CodeAgent`; :func:`scripted_code_agent` plays a task
   file's steps) for one tool call at a time and carries it out, with the step,
   wall-time and retry limits of the task;
3. classifies every ``exec`` (:mod:`.policy.exec_risk`) and applies the operator's exec
   policy (:class:`~deskpod.controller.policy.policy_file.Policy` ``exec_confirm``,
   ``exec_confirm_patterns``, ``confirm_levels``; by default ``L2``/``L3``
   commands): a command that needs a confirmation runs only when the approval
   channel (:mod:`.confirm`) approves that exact command (the default
   :class:`~deskpod.controller.confirm.DenyChannel` refuses); a refusal is
   reported to the agent as ``policy_denied``;
4. fills ``run_tests`` with the task's own test command, so the agent cannot
   change what "the tests" are;
5. accepts a ``claim_done`` only after the clean-room verdict (:mod:`.verdict`):
   the change, read from the disk with no ignore rule, limited to the files the
   task lets the agent change (never the tests, their configuration or a module
   shadowing the test runner), applied to the host's seed in a fresh folder the
   agent never touched, whose isolated test run's JUnit report lists every seed
   test (collected right after seeding) as passed. A failed verdict is reported
   to the agent and counts against the retry budget, as does every failed test run;
6. records a change summary (every changed path, ignored or not, and the diff
   against the host's seed) in the JSONL audit log, however the run ends.

The task file and its tools are :mod:`.code_task`; the collection, the clean-room check
and the change summary are :mod:`.code_verify`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from deskpod.client import SandboxClient
from deskpod.controller.agent import Agent, ScriptedAgent
from deskpod.controller.audit_log import AuditLog, utc_now
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.code_task import CodeTaskSpec, ToolCall, pack_workspace, tool_request
from deskpod.controller.confirm import (
    ApprovalChannel,
    CommandSubject,
    ConfirmationRequest,
    DenyChannel,
    command_digest,
)
from deskpod.controller.code_verify import (
    AUDIT_TAIL_CHARS,
    CodeRunState,
    collect_seed_tests,
    last_line,
    record_changes,
    verify_claim,
    workspace_reply,
)
from deskpod.controller.policy.exec_risk import classify_exec, matches_pattern
from deskpod.controller.policy.levels import RiskLevel, level_rank
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import RunControl
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.verdict import seed_files, seed_ini
from deskpod.tracing import configured_provider, traced_run
from deskpod.errors import (
    DeskpodError,
    LimitExceededError,
    PolicyDeniedError,
    ProtocolError,
    RunCancelledError,
    WorkspaceError,
)
from deskpod.protocol import (
    RunTestsOutput,
    SeedWorkspaceRequest,
    WorkspaceOutput,
    WorkspaceSeeded,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = [
    "CodeAgent",
    "CodeRunResult",
    "MAX_AUDIT_SEED_IDS",
    "ToolFeedback",
    "run_code_task",
    "scripted_code_agent",
]

log = logging.getLogger(__name__)

MAX_AUDIT_SEED_IDS = 200
"""Seed test ids the ``workspace_seeded`` audit record lists at most."""


@dataclass(frozen=True)
class ToolFeedback:
    """What the agent learns about its last call: the output (JSON) or the error envelope."""

    call: ToolCall
    ok: bool
    output: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


CodeAgent: TypeAlias = Agent[None, ToolFeedback, ToolCall | None]
"""A code run's agent: ``propose(None, last feedback)`` → the next :class:`ToolCall`, or
``None`` to stop. A code agent sees the workspace only through its tools' feedback."""


def scripted_code_agent(steps: Sequence[ToolCall]) -> ScriptedAgent[ToolCall | None]:
    """The scripted agent of a code task file: its ``steps`` in order, whatever the feedback, then ``None``.

    Args:
        steps: the tool calls.

    Returns:
        A :class:`~deskpod.controller.agent.ScriptedAgent` usable as a :data:`CodeAgent`.
    """
    moves: list[ToolCall | None] = list(steps)
    return ScriptedAgent(moves, None)


@dataclass(frozen=True)
class CodeRunResult:
    """How a code run ended.

    ``status``: ``"succeeded"`` only when the controller's own test run passed after
    the agent claimed completion; ``"ended"`` when its agent ended its session without
    claiming completion (its ``control`` said so: nothing was verified, nothing failed). ``changed_files``: ``"status path"`` lines from the
    change summary. ``duration_s``: wall time, seconds. ``audit_head``: SHA-256 of the
    audit log's last line, its sealed ``run_finished`` record.
    """

    run_id: str
    status: Literal["succeeded", "failed", "cancelled", "ended"]
    reason: str
    steps: int
    duration_s: float
    changed_files: list[str]
    audit_log: Path
    audit_head: str = ""


def _command_text(argv: Sequence[str]) -> str:
    return shlex.join(list(argv))


def _audit_args(call: ToolCall) -> dict[str, Any]:
    """The call's arguments for the audit log: file contents and patches by size and SHA-256."""
    out: dict[str, Any] = {}
    for key, value in call.args.items():
        if key in {"content", "patch", "old_text", "new_text"} and isinstance(value, str):
            raw = value.encode("utf-8", "surrogatepass")
            out[key] = {"chars": len(value), "sha256": hashlib.sha256(raw).hexdigest()}
        else:
            out[key] = value
    return out


def _summary(output: WorkspaceOutput) -> dict[str, Any]:
    """A compact, JSON-safe account of a tool's output for the audit log."""
    data = output.model_dump(mode="json")
    for key in ("content", "stdout", "stderr", "diff"):
        if key in data:
            data[key] = {"chars": len(data[key])}
    if "entries" in data:
        data["entries"] = len(data["entries"])
    if "tail" in data:
        data["tail"] = data["tail"][-AUDIT_TAIL_CHARS:]
    return data





async def run_code_task(
    task: CodeTaskSpec,
    sandbox: str | SandboxAPI,
    token: str = "",
    *,
    agent: CodeAgent | None = None,
    channel: ApprovalChannel | None = None,
    audit_dir: str | Path = "deskpod-audit",
    connect_timeout_s: float = 60.0,
    policy: Policy | None = None,
    signer: AuditSigner | None = None,
    control: RunControl | None = None,
    tracer_provider: TracerProvider | None = None,
) -> CodeRunResult:
    """Seed the sandbox's workspace, let the agent work, and verify its claim by re-running the tests.

    Args:
        task: the validated task (see :func:`load_code_task`).
        sandbox: the daemon's websocket URL, e.g. ``ws://sandbox:8765/v1/ws`` (the run
            connects and closes the connection), or an open :class:`SandboxAPI` (the
            caller keeps it: the run does not close it).
        token: the sandbox's control token (with a URL).
        agent: proposes the tool calls; default :func:`scripted_code_agent` over ``task.steps``.
            Closed when the run ends.
        channel: approves or refuses each exec that needs a confirmation
            (:meth:`ApprovalChannel.confirm`); default :class:`DenyChannel`, which refuses all.
        audit_dir: folder for ``<run_id>.jsonl``.
        connect_timeout_s: how long to wait for the sandbox to accept a connection.
        policy: the operator's rules; for code runs its exec policy (``exec_confirm``,
            ``exec_confirm_patterns``, ``confirm_levels``) and ``confirmation_timeout_s``
            (default :class:`Policy` defaults: confirm the classifier's ``L2``/``L3``).
        signer: seals the audit log's final record (default: the controller's key,
            :meth:`AuditSigner.load_or_create`).
        control: ended from outside (:meth:`RunControl.cancel` with ``ended=True``: an MCP client
            closed the session), an agent that stops without a claim ends the run ``"ended"``,
            not ``"failed"``; a claim that was not verified stays ``"failed"``.
        tracer_provider: where the run's trace goes (default: :func:`~deskpod.tracing.configured_provider`'s;
            ``None``: no trace): a run span and its workspace requests (:mod:`deskpod.tracing`).

    Returns:
        The :class:`CodeRunResult`; limits, sandbox errors, the agent's own failures
        and failed verification end the run as ``"failed"`` with the reason, they are
        not raised. However the run ends, its audit log ends with a sealed
        ``run_finished`` record, also when the calling task is cancelled (status
        ``"cancelled"``; the cancellation is then raised again).

    Raises:
        AuditKeyError: no ``signer`` was given and the controller's key cannot be read or created.
        SettingsError: no ``tracer_provider`` was given and the settings do not parse.
    """
    run_id = f"code-{uuid.uuid4().hex[:12]}"
    audit = AuditLog(Path(audit_dir) / f"{run_id}.jsonl", run_id, signer or AuditSigner.load_or_create())
    started = time.monotonic()
    state = CodeRunState()
    try:
        with traced_run(tracer_provider or configured_provider(), "code", run_id) as traced:
            status, reason = await _run(task, sandbox, token, agent, channel, audit, state, connect_timeout_s,
                                        policy or Policy(), control or RunControl())
            traced.set(status=status, steps=state.steps)
    except BaseException as exc:  # the calling task was cancelled, or the process is stopping
        audit.finish(status="cancelled", reason=f"cancelled: the controller stopped the run ({type(exc).__name__})",
                     steps=state.steps, duration_s=round(time.monotonic() - started, 3))
        raise
    duration = time.monotonic() - started
    audit.finish(status=status, reason=reason, steps=state.steps, duration_s=round(duration, 3))
    log.info("%s %s: %s", run_id, status, reason)
    return CodeRunResult(run_id, status, reason, state.steps, duration, state.changed, audit.path, audit.head)


async def _run(
    task: CodeTaskSpec,
    sandbox: str | SandboxAPI,
    token: str,
    agent: CodeAgent | None,
    channel: ApprovalChannel | None,
    audit: AuditLog,
    state: CodeRunState,
    connect_timeout_s: float,
    policy: Policy,
    control: RunControl,
) -> tuple[Literal["succeeded", "failed", "ended"], str]:
    """Play the run and say how it ended; only a cancellation of the calling task escapes."""
    audit.write(
        "run_started",
        task=task.name,
        kind="code",
        seed=task.workspace.seed,
        limits=task.limits.model_dump(),
        test_command=task.success.test_command,
        protected=task.success.protected,
        display_granted=task.display,
        exec_policy={"confirm": policy.exec_confirm, "patterns": policy.exec_confirm_patterns,
                     "confirm_levels": policy.confirm_levels},
        network_domains=task.allowed_domains,
    )
    status: Literal["succeeded", "failed", "ended"] = "failed"
    try:
        ok, reason = await asyncio.wait_for(
            _play(
                task, sandbox, token, agent or scripted_code_agent(task.steps), channel or DenyChannel(), audit, state,
                connect_timeout_s, policy, control,
            ),
            task.limits.max_wall_time_s,
        )
        status = "succeeded" if ok else "failed"
    except TimeoutError:
        reason = f"limit reached: max_wall_time_s={task.limits.max_wall_time_s:g}"
    except DeskpodError as exc:
        reason = f"{exc.code}: {exc.message}"
        if isinstance(exc, RunCancelledError) and control.ended:
            status, reason = "ended", f"ended: {control.cancel_reason}"
    except Exception as exc:  # noqa: BLE001 - an agent's or the controller's bug ends the run, not the log
        log.exception("%s: the run failed", audit.run_id)
        reason = f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
    return status, reason


async def _play(
    task: CodeTaskSpec,
    sandbox: str | SandboxAPI,
    token: str,
    agent: CodeAgent,
    channel: ApprovalChannel,
    audit: AuditLog,
    state: CodeRunState,
    connect_timeout_s: float,
    policy: Policy,
    control: RunControl,
) -> tuple[bool, str]:
    client = await SandboxClient.connect(sandbox, token, timeout_s=connect_timeout_s) if isinstance(sandbox, str) else sandbox
    try:
        archive = pack_workspace(task.workspace.seed)
        seeded: WorkspaceSeeded = await workspace_reply(
            client,
            SeedWorkspaceRequest(
                type="seed_workspace", id=client.next_id(), archive=base64.b64encode(archive).decode("ascii")
            ),
        )
        state.base = seeded.git_head
        state.archive = archive
        state.seed = seed_files(archive)
        state.ini = seed_ini(state.seed)
        tick = time.perf_counter()
        collected, collect_error = await collect_seed_tests(task, client, state)
        state.seed_ids = collected
        audit.write(
            "workspace_seeded",
            files=seeded.files,
            size=seeded.size,
            archive_bytes=len(archive),
            archive_sha256=hashlib.sha256(archive).hexdigest(),
            git_head=seeded.git_head,
            seed_tests=len(collected),
            seed_test_ids=collected[:MAX_AUDIT_SEED_IDS],
            seed_collect_error=collect_error,
            seed_collect_s=round(time.perf_counter() - tick, 3),
        )
        try:
            if collect_error is not None:
                return False, f"the seed's tests could not be collected in a clean room: {collect_error}"
            return await _loop(task, client, agent, channel, audit, state, policy, control)
        finally:
            await record_changes(client, audit, state)
    finally:
        await agent.close()
        if isinstance(sandbox, str):
            await client.close()


async def _loop(
    task: CodeTaskSpec,
    client: SandboxAPI,
    agent: CodeAgent,
    channel: ApprovalChannel,
    audit: AuditLog,
    state: CodeRunState,
    policy: Policy,
    control: RunControl,
) -> tuple[bool, str]:
    feedback: ToolFeedback | None = None
    budget = task.limits.retry_budget
    while True:
        call = await agent.propose(None, feedback)
        if call is None:
            if state.last_claim is not None:
                return False, f"not verified: {state.last_claim}"
            if control.ended:
                raise RunCancelledError(control.cancel_reason or "", detail={"cause": "ended"})
            return False, "the agent stopped without claiming completion"
        if state.steps >= task.limits.max_steps:
            raise LimitExceededError(f"limit reached: max_steps={task.limits.max_steps}", detail={"limit": "max_steps"})
        state.steps += 1
        tick = time.perf_counter()
        record: dict[str, Any] = {
            "step": state.steps,
            "tool": call.tool,
            "args": _audit_args(call),
            "started_at": utc_now(),
        }
        if call.tool == "claim_done":
            ok, why = await verify_claim(task, client, audit, state, str(call.args.get("message", ""))[:500])
            audit.write(
                "step",
                **record,
                finished_at=utc_now(),
                decision="allowed",
                outcome="verified" if ok else "not_verified",
            )
            if ok:
                return True, why
            state.last_claim = why
            state.failures += 1
            if state.failures > budget:
                return False, f"retry budget exhausted ({budget} retries): not verified: {why}"
            feedback = ToolFeedback(call, ok=False, error={"code": "not_verified", "message": why})
            continue
        decision = "allowed"
        try:
            request = tool_request(
                call, client.next_id(), task.success.test_command, task.success.timeout_s, task.display,
                task.allowed_domains,
            )
            if getattr(request, "display", False):
                record["display"] = True
            if call.tool == "exec":
                decision = await _exec_decision(task, call, channel, policy, audit.run_id, state.steps, record)
            output = await workspace_reply(client, request)
        except (ProtocolError, WorkspaceError, PolicyDeniedError) as exc:
            if isinstance(exc, PolicyDeniedError):
                decision = "denied"
            audit.write(
                "step",
                **record,
                finished_at=utc_now(),
                decision=decision,
                outcome="error",
                error={"code": exc.code, "message": exc.message[:500]},
            )
            log.info(
                "step %d: %s %s, error %s (%.3f s)",
                state.steps,
                call.tool,
                decision,
                exc.code,
                time.perf_counter() - tick,
            )
            feedback = ToolFeedback(call, ok=False, error=exc.to_wire())
            continue
        audit.write("step", **record, finished_at=utc_now(), decision=decision, outcome="ok", result=_summary(output))
        log.info("step %d: %s %s (%.3f s)", state.steps, call.tool, decision, time.perf_counter() - tick)
        feedback = ToolFeedback(call, ok=True, output=output.model_dump(mode="json"))
        if isinstance(output, RunTestsOutput) and not output.passed:
            state.failures += 1
            if state.failures > budget:
                return False, (
                    f"retry budget exhausted ({budget} retries): the tests failed {state.failures} times; "
                    f"last: {last_line(output.tail)}"
                )


async def _exec_decision(
    task: CodeTaskSpec, call: ToolCall, channel: ApprovalChannel, policy: Policy, run_id: str, step: int,
    record: dict[str, Any],
) -> str:
    """Classify an exec and apply the exec policy; ask for a confirmation when it needs one.

    Args:
        task: the task (its name and wall-time limit go into the request).
        call: the ``exec`` call.
        channel: who approves.
        policy: the operator's exec policy (``exec_confirm``, ``exec_confirm_patterns``,
            ``confirm_levels``, ``confirmation_timeout_s``).
        run_id: the run. step: the step's number.
        record: the step's audit record; gains ``risk`` (and ``policy`` when the policy asked).

    Returns:
        ``"allowed"`` or ``"confirmed"``.

    Raises:
        PolicyDeniedError: the confirmer refused (``detail["rule"]`` names the rule that asked).
    """
    args = call.args
    argv = args.get("argv")
    cmd = args.get("cmd")
    cwd = str(args.get("cwd", "."))
    assessment = classify_exec(
        argv=list(argv) if isinstance(argv, list) else None,
        cmd=cmd if isinstance(cmd, str) else None,
        network=args.get("network") is True,
        cwd=cwd,
    )
    record["risk"] = {"level": assessment.level, "rule": assessment.rule, "reason": assessment.reason}
    command = _command_text(argv) if isinstance(argv, list) else str(cmd)
    reasons: list[str] = []
    rule = assessment.rule
    if policy.exec_confirm != "none" and assessment.level in policy.confirm_levels:
        reasons.append(assessment.reason)
    pattern = next((p for p in policy.exec_confirm_patterns if matches_pattern(assessment, command, p)), None)
    if pattern is not None:
        reasons.append(f"matches the policy's exec pattern {pattern!r}")
        rule = rule if len(reasons) > 1 else "policy_pattern"
        record["policy"] = {"pattern": pattern}
    if policy.exec_confirm == "all":
        reasons.append("the policy confirms every exec (exec_confirm: all)")
        rule = rule if len(reasons) > 1 else "policy_confirm_all"
        record["policy"] = {**record.get("policy", {}), "exec_confirm": "all"}
    if not reasons:
        return "allowed"
    level: RiskLevel = assessment.level if level_rank(assessment.level) >= level_rank("L2") else "L2"
    subject = CommandSubject(task=task.name, tool="exec", command=command, cwd=cwd, rule=rule)
    request = ConfirmationRequest(
        id=f"confirm-{uuid.uuid4().hex[:12]}",
        run_id=run_id,
        step=step,
        summary=f"run `{command}` in {subject.cwd}",
        subject=subject,
        level=level,
        reasons=tuple(reasons),
        reversible=level != "L3",
        digest=command_digest(subject),
        timeout_s=min(policy.confirmation_timeout_s, task.limits.max_wall_time_s),
    )
    answer = await channel.confirm(request)
    if answer is not None and answer.approved and answer.digest == request.digest:
        return "confirmed"
    raise PolicyDeniedError(
        f"exec refused: {level} ({rule}: {'; '.join(reasons)}) needs a confirmation, and it was not given",
        detail={"rule": rule, "level": level},
    )
