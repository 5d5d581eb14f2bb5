"""Play a task against a sandbox: the GUI run's loop, the policy enforcement point between agent and sandbox.

The controller decides; it never touches X11. For each round (the states of
:mod:`deskpod.controller.state`) the run observes, verifies the task's success condition
from the environment (:mod:`.endings`), scans the page for prompt injection and honours
pauses and take-overs (:mod:`.human`), asks the agent (:mod:`deskpod.controller.gui_agent`)
for a proposal, and validates and executes it action by action (:mod:`.step`). Limits
(steps, wall time, per-action deadline, screenshots, consecutive errors) and loop
detection stop or pause the run; every event goes to the hash-chained audit log
(:mod:`.record`), and a run that does not succeed leaves its failure scene. An action
"succeeding" is not the task succeeding: a run succeeds only when the task's success
condition holds in the environment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from deskpod.client import SandboxClient
from deskpod.controller.audit_log import utc_now
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.confirm import ApprovalChannel, DenyChannel
from deskpod.controller.credentials import ScrubbingSandbox, SecretStore
from deskpod.controller.egress import EgressControl
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.confirming import Confirmer
from deskpod.controller.gui.endings import Endings, RunStatus
from deskpod.controller.gui.human import Human
from deskpod.controller.gui.judge import Judge
from deskpod.controller.gui.keyed import KeyedInput
from deskpod.controller.gui.looks import Looks
from deskpod.controller.gui.recovery import TabRecovery
from deskpod.controller.gui.permissions import RunPermissions
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui.secrets import Secrets
from deskpod.controller.gui.step import Step
from deskpod.controller.gui_agent import Done, GuiAgent, GuiAgentFactory, Proposal, StepOutcome, scripted_gui_agent
from deskpod.controller.policy.policy_file import Policy, redact_url
from deskpod.controller.recording import LiveSource, RunRecorder
from deskpod.controller.recording_store import RECORDING_EVENT, keeps_recording, prune_recordings
from deskpod.controller.run_api import EventListener, RunControl, RunResult
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.controller.task import TaskSpec
from deskpod.errors import DeskpodError, LimitExceededError, RunCancelledError, TaskFileError
from deskpod.protocol import Observation, ObserveOptions, Size, WriteFileRequest
from deskpod.tracing import configured_provider, traced, traced_run
from deskpod.tracing.spans import STEP, VERIFICATION

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["SETUP_WINDOWS_WAIT_S", "run_task"]

log = logging.getLogger(__name__)

SETUP_WINDOWS_WAIT_S = 15.0
"""Longest wait, seconds, for the windows of a task's ``setup`` applications before the first step."""


async def run_task(
    task: TaskSpec,
    sandbox: str | SandboxAPI,
    token: str = "",
    *,
    audit_dir: str | Path = "deskpod-audit",
    agent: GuiAgent | None = None,
    agent_factory: GuiAgentFactory | None = None,
    channel: ApprovalChannel | None = None,
    policy: Policy | None = None,
    control: RunControl | None = None,
    on_event: EventListener | None = None,
    connect_timeout_s: float = 60.0,
    signer: AuditSigner | None = None,
    self_approval: bool = False,
    egress_control: EgressControl | None = None,
    secrets: SecretStore | None = None,
    snapshots: bool = False,
    credentials_refusal: str | None = None,
    tracer_provider: TracerProvider | None = None,
    live: LiveSource | None = None,
) -> RunResult:
    """Run ``task`` against ``sandbox`` under ``policy``.

    Args:
        task: the validated task.
        sandbox: the daemon's websocket URL, e.g. ``ws://sandbox:8765/v1/ws`` (the run
            connects and closes the connection), or an open :class:`SandboxAPI` (the
            caller keeps it: the run does not close it).
        token: the sandbox's control token (with a URL).
        audit_dir: folder for ``<run_id>.jsonl``, ``screenshots/`` and ``scenes/``.
        agent: what proposes actions (default: the task's model agent, or its
            scripted steps).
        agent_factory: builds the task's model agent when ``agent`` is not given
            (:func:`deskpod.agents.create_agent`); a task naming a model agent needs it.
        channel: where confirmations and pauses go (default :class:`DenyChannel`:
            every confirmation denied, every pause cancelled).
        policy: the operator's rules (default :class:`Policy` defaults).
        control: lets another task pause, resume or cancel the run.
        on_event: called with every audit record.
        connect_timeout_s: how long to wait for the sandbox to accept a connection.
        signer: seals the audit log's final record (default: the controller's key,
            :meth:`AuditSigner.load_or_create`, created on first use).
        self_approval: the channel answers from the agent's own side (``deskpod serve``
            when the operator's policy allows it): every confirmation record says so.
        egress_control: the sandbox's egress proxy, given the run's allowlist at the start
            and its stack's back at the end (:mod:`deskpod.controller.egress`); ``None``: the
            browser's interception alone holds the run's list.
        secrets: the host-held secrets ``type_secret`` may type
            (:mod:`deskpod.controller.credentials`; default none).
        snapshots: every observation the agent gets carries the element snapshot
            (:attr:`~deskpod.protocol.Observation.snapshot`), so it may act by ref
            (element actions are judged as the pixels they land on:
            :mod:`deskpod.controller.gui.element_actions`).
        credentials_refusal: why this run types no secret at all (``None``: it may): every
            ``type_secret`` and ``request_credential`` is refused with this reason (``rule``
            ``credential_sandbox``) before the sandbox is looked at or a person asked
            (``deskpod serve``'s sessions on a sandbox it does not vouch for).
        tracer_provider: where the run's trace goes (an OpenTelemetry SDK ``TracerProvider``;
            default: :func:`~deskpod.tracing.configured_provider`'s, ``None`` when the operator
            configured no OTLP endpoint: no trace). The run is one trace (:mod:`deskpod.tracing`).
        live: the sandbox's live stream the run is recorded from (:mod:`deskpod.controller.recording`:
            ``<audit_dir>/recordings/<run_id>.mp4``, its hash in the log's ``recording`` record,
            kept as the policy keeps screenshots); default: ``sandbox`` and ``token`` when
            ``sandbox`` is a URL; an open :class:`SandboxAPI` without ``live`` is not recorded.

    Returns:
        The :class:`RunResult`; limits, policy refusals, sandbox errors, failed
        checks and the agent's own failures end the run as ``"failed"`` or
        ``"cancelled"`` with the reason and a saved failure scene; they are not raised.
        A reply the controller refuses (:class:`~deskpod.errors.BadReplyError`: the
        sandbox is not to be trusted any more) ends the run at once with reason
        ``bad_reply: ...``; the agent is not asked to recover from it. However the run
        ends, its audit log ends with a sealed ``run_finished`` record, also when the
        calling task is cancelled (the cancellation is then raised again).

    Raises:
        AuditKeyError: no ``signer`` was given and the controller's key cannot be read or created.
        SettingsError: no ``tracer_provider`` was given and the settings do not parse.
    """
    record = RunRecord(task, policy or Policy(), channel or DenyChannel(), control or RunControl(), Path(audit_dir),
                       on_event, signer or AuditSigner.load_or_create(), self_approval, snapshots)
    if live is None and isinstance(sandbox, str):
        live = LiveSource(sandbox, token)
    run = _GuiRun(record, egress_control, secrets or SecretStore(), credentials_refusal, live)
    with traced_run(tracer_provider or configured_provider(), "gui", record.run_id) as traced:
        result = await run.play(sandbox, token, agent, agent_factory, connect_timeout_s)
        traced.set(status=result.status, steps=record.steps)
        return result


class _GuiRun:
    """One run: its record and its concerns, wired once, and the loop over them."""

    def __init__(self, record: RunRecord, egress_control: EgressControl | None, secrets: SecretStore,
                 credentials_refusal: str | None, live: LiveSource | None) -> None:
        self.record = record
        self.live = live
        self.recorder: RunRecorder | None = None
        self.allowlist = Allowlist(record, egress_control)
        self.permissions = RunPermissions(record)
        self.human = Human(record, self.allowlist)
        self.judge = Judge(record, self.allowlist)
        confirmer = Confirmer(record, self.judge)
        self.secrets = Secrets(record, self.allowlist, secrets, credentials_refusal)
        self.step = Step(record, self.allowlist, self.human, self.judge, confirmer,
                         KeyedInput(record, self.allowlist, self.judge, confirmer), self.secrets)
        self.endings = Endings(record, self.allowlist)
        self.looks = Looks(record, self.allowlist, self.human)
        self.recovery = TabRecovery(record, self.allowlist, self.judge)
        self.errors_in_row = 0

    async def play(self, sandbox: str | SandboxAPI, token: str, agent: GuiAgent | None,
                   factory: GuiAgentFactory | None, connect_timeout_s: float) -> RunResult:
        """Play the run; whatever happens, its log ends with the sealed ``run_finished``."""
        started = time.monotonic()
        try:
            return await self._run(sandbox, token, agent, factory, connect_timeout_s, started)
        except Exception as exc:  # noqa: BLE001 - a controller bug still ends the log, and the run, as failed
            log.exception("%s: the controller failed", self.record.run_id)
            if self.record.audit.finished:
                raise
            return self.endings.finish(started, "failed", f"internal error: {type(exc).__name__}: {str(exc)[:300]}",
                                       None)
        except BaseException as exc:  # the calling task was cancelled, or the process is stopping
            if not self.record.audit.finished:
                self.endings.finish(started, "cancelled", f"cancelled: the controller stopped the run "
                                    f"({type(exc).__name__})", None)
            raise

    async def _run(self, sandbox: str | SandboxAPI, token: str, agent: GuiAgent | None,
                   factory: GuiAgentFactory | None, connect_timeout_s: float, started: float) -> RunResult:
        run = self.record
        run.store.prune()
        prune_recordings(run.audit_dir, run.policy.screenshot_max_age_days)
        run.emit("run_started", task=run.task.name, start_url=redact_url(run.task.start_url),
                 limits=run.limits.model_dump(), policy=run.policy.model_dump(exclude={"l3_words", "l2_words"}))
        status: RunStatus = "failed"
        client: SandboxAPI | None = None
        try:
            try:
                if isinstance(sandbox, str):
                    client = await SandboxClient.connect(sandbox, token, timeout_s=connect_timeout_s)
                else:
                    client = sandbox
                self._record_screen()
                model_size = client.hello.model_size
                if run.task.model_size is not None:
                    model_size = await client.configure(run.task.model_size)
                client = ScrubbingSandbox(client, self.allowlist.blocked, self.secrets.typed,
                                          on_permission=self.permissions.requested, downloads=run.downloads)
                await self.allowlist.start(client)
                await self.permissions.start(client)
                agent = agent or _default_agent(run.task, model_size, factory)
                run.deadline = time.monotonic() + run.limits.max_wall_time_s
                try:
                    reason = await asyncio.wait_for(self._loop(client, agent), run.limits.max_wall_time_s)
                finally:
                    await agent.close()
                status = "succeeded"
            except TimeoutError:
                reason = f"limit reached: max_wall_time_s={run.limits.max_wall_time_s:g}"
            except RunCancelledError as exc:
                status, reason = "cancelled", f"{exc.code}: {exc.message}"
                if run.control.ended:
                    status, reason = "ended", f"ended: {run.control.cancel_reason}"
            except DeskpodError as exc:
                reason = f"{exc.code}: {exc.message}"
            except Exception as exc:  # noqa: BLE001 - an agent's bug ends the run, not the controller
                log.exception("%s: the run failed", run.run_id)
                reason = f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
            scene = await self.endings.wind_up(client, status, reason)
        finally:
            await self.allowlist.end()
            await self.permissions.end()
            if client is not None and isinstance(sandbox, str):
                await client.close()
            await self._recording_end(status == "succeeded")
        run.store.finish(status == "succeeded")
        return self.endings.finish(started, status, reason, scene)

    def _record_screen(self) -> None:
        """Start the run's recording, unless the policy keeps no screenshots or there is no stream to record."""
        if self.live is not None and self.record.policy.screenshots != "none":
            self.recorder = RunRecorder(self.record.audit_dir, self.record.run_id, self.live)
            self.recorder.start()

    async def _recording_end(self, succeeded: bool) -> None:
        """Stop the recording and write the ``recording`` record (before the log is sealed)."""
        run = self.record
        if self.recorder is not None:
            fields = await self.recorder.stop(keeps_recording(run.policy.screenshots, succeeded))
        elif run.policy.screenshots == "none":
            fields = {"recorded": False, "reason": "the policy keeps no screenshots (screenshots: none)"}
        else:
            fields = {"recorded": False, "reason": "no live stream of the sandbox to record"
                      if self.live is None else "the run did not reach its sandbox"}
        run.emit(RECORDING_EVENT, **fields)

    async def _loop(self, client: SandboxAPI, agent: GuiAgent) -> str:
        """Open the start page, then observe, verify, ask and step until the task is verified.

        Returns:
            ``"verified: <evidence>"``.

        Raises:
            DeskpodError: the run ends (a limit, a refusal that stops the run, the sandbox).
        """
        run = self.record
        self.allowlist.enforce(run.task.start_url, "start_url", "the task starts at")
        run.sm.to(RunState.OBSERVING, "opening the start page")
        t0 = utc_now()
        obs = await client.navigate(run.task.start_url, run.full_look())
        self.allowlist.observed(run.count_screenshot(obs), "navigate")
        run.emit("navigate", url=redact_url(obs.url), title=obs.title, started_at=t0, finished_at=utc_now(),
                 decision="allowed", screenshot_sha256=obs.screenshot.sha256 if obs.screenshot else None)
        if run.task.setup.files or run.task.setup.apps:
            obs = await self._set_up(client)
        last: StepOutcome | None = None
        while True:
            run.sm.to(RunState.VERIFYING, "checking the task's success condition")
            with traced(VERIFICATION) as check:
                verified = await self.endings.verified(obs, client)
                check.set(outcome="not_yet" if verified is None else "verified")
            if verified is not None:
                return verified
            await self.human.screen_content(obs, client)
            run.sm.to(RunState.PLANNING, "asking the agent")
            if await self.human.checkpoint(client):
                obs = await self.allowlist.look(client)
                continue
            proposal = await self._propose(client, agent, obs, last)
            if proposal is None:
                obs = await self.allowlist.look(client)
                last = StepOutcome("denied", obs, {"code": "policy_denied", "rule": "handed_over",
                                                   "message": "a human took the sandbox over: observe again"})
                continue
            if isinstance(proposal, Done):
                run.emit("claim", claim=proposal.claim[:2000])
                if not run.task.success.verdict:
                    run.control.cancel("its agent said it is done, and the task has no success check: nothing was "
                                       "verified", ended=True)
                    raise RunCancelledError(run.control.cancel_reason or "", detail={"cause": "ended"})
                run.sm.to(RunState.VERIFYING, "the agent says it is done: checking the environment")
                with traced(VERIFICATION) as check:
                    claimed = await self.endings.verify_claim(client)
                    check.set(outcome="verified")
                return claimed
            if self.looks.takes(proposal):  # no step: neither max_steps, max_errors nor a loop
                last = await self.looks.look(client, proposal)
                obs = last.observation
                continue
            if run.steps >= run.limits.max_steps:
                raise LimitExceededError(f"limit reached: max_steps={run.limits.max_steps}",
                                         detail={"limit": "max_steps"})
            run.steps += 1
            run.sm.to(RunState.VALIDATING, f"step {run.steps}: {len(proposal.actions)} action(s)")
            with traced(STEP, step=run.steps, actions=len(proposal.actions)) as stepped:
                outcome = await self.step.run_step(client, proposal, obs)
                stepped.set(outcome=outcome.status, rule=outcome.error.get("rule"), error=outcome.error.get("code"))
            last = await self.recovery.after_step(client, outcome)
            obs = last.observation
            await self._after(client, proposal, last)

    async def _set_up(self, client: SandboxAPI) -> Observation:
        """Put the task's ``setup`` in place before the first step: write its workspace files,
        open its desktop applications (audited ``setup``, not steps: the task's author asked for
        them, not the agent), then look again until the window manager lists a new window of the
        agent's zone for each application named (at most :data:`SETUP_WINDOWS_WAIT_S`; a second
        file opened in the editor may open in its window).

        Raises:
            DeskpodError: a file could not be written or an application opened.
        """
        run = self.record
        setup = run.task.setup
        for path, text in setup.files.items():
            await client.request(WriteFileRequest(type="write_file", id=client.next_id(), path=path, content=text))
            run.emit("setup", what="file", path=path, chars=len(text))
        before = {w.id for w in (run.last_obs.windows if run.last_obs is not None else None) or []}
        for action in setup.open_actions():
            await client.act([action], ObserveOptions(screenshot=False), timeout_s=run.limits.action_timeout_s)
            run.emit("setup", what="app", app=action.app, path=action.path)
        deadline = time.monotonic() + SETUP_WINDOWS_WAIT_S
        while True:
            obs = await self.allowlist.look(client)
            shown = [w for w in obs.windows or [] if w.zone == "agent" and w.id not in before]
            if len(shown) >= len({app.app for app in setup.apps}) or time.monotonic() >= deadline:
                return obs
            await asyncio.sleep(0.2)

    async def _after(self, client: SandboxAPI, proposal: Proposal, outcome: StepOutcome) -> None:
        """Count the step's outcome: a good one resets the error count and is checked for a
        loop; a failed or refused one counts towards ``max_errors`` (a take-over's refusal does not).

        Raises:
            LimitExceededError: ``max_errors`` failed or refused steps in a row, or a loop not resumed.
        """
        run = self.record
        if outcome.status == "ok":
            self.errors_in_row = 0
            obs = outcome.observation
            await self.human.loop_check(client, list(proposal.actions), obs)
            run.sm.to(RunState.WAITING, "settled" if obs.settled else "the screen did not settle")
            run.sm.to(RunState.OBSERVING, "observed after the step")
            return
        if outcome.error.get("rule") != "handed_over":
            self.errors_in_row += 1
        if self.errors_in_row >= run.limits.max_errors:
            raise LimitExceededError(
                f"limit reached: max_errors={run.limits.max_errors} failed or refused steps in a row "
                f"(last: {outcome.error.get('message', '')})", detail={"limit": "max_errors"})
        run.sm.to(RunState.OBSERVING, "telling the agent what went wrong")

    async def _propose(self, client: SandboxAPI, agent: GuiAgent, obs: Observation,
                       last: StepOutcome | None) -> Proposal | Done | None:
        """Wait for the agent's next proposal; a cancel ends the wait at once, and a pause
        is shown to the human at once (the agent may go on planning meanwhile).

        Returns:
            The proposal, or ``None`` when a human took the sandbox over meanwhile: the
            proposal was planned on a screen that is gone, so it is discarded (a look,
            which plans nothing, is kept: it shows the screen handed back).
        """
        control = self.record.control
        control.clear_withdrawal()  # a withdrawal names the step of the proposal asked for now
        planning = asyncio.ensure_future(agent.propose(obs, last))
        stale = False
        try:
            while True:
                paused = asyncio.ensure_future(control.wait_pause_requested())
                cancelled = asyncio.ensure_future(control.wait_cancelled())
                try:
                    done, _ = await asyncio.wait({planning, paused, cancelled}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    paused.cancel()
                    cancelled.cancel()
                if planning in done:
                    proposal = planning.result()
                    if stale and isinstance(proposal, Proposal) and not self.looks.takes(proposal):
                        self.record.emit("proposal_discarded", reason="planned before a human took the sandbox over")
                        return None
                    return proposal
                stale = await self.human.checkpoint(client) or stale
        finally:
            if not planning.done():
                planning.cancel()
                await asyncio.gather(planning, return_exceptions=True)


def _default_agent(task: TaskSpec, model_size: Size, factory: GuiAgentFactory | None) -> GuiAgent:
    """The task's model agent for screenshots of ``model_size``, or its scripted steps.

    Raises:
        TaskFileError: the task has neither, or names a model agent and no factory is given.
    """
    if task.agent is not None:
        if factory is None:
            raise TaskFileError(f"task {task.name!r} names a {task.agent.type} agent, and no agent factory "
                                "was given (deskpod.agents.create_agent)")
        return factory(task.agent, model_size)
    if not task.steps:
        raise TaskFileError(f"task {task.name!r} has no agent: give scripted steps or a model agent")
    return scripted_gui_agent([(step.actions, step.sensitive) for step in task.steps])
