"""Play a task against a sandbox: the policy enforcement point between agent and sandbox.

The controller decides; it never touches X11. For each round (the states of
:mod:`.state`): it observes, verifies the task's success condition from the
environment, scans the page for prompt injection (:mod:`.injection`), asks the
agent (:mod:`.gui_agent`) for a proposal, and validates each action of it in turn:
blocked actions are refused, each action's risk level is assigned from the
action and the page under it (:mod:`.risk`), actions at a confirmation level wait
for a human's approval bound to the exact action, URL and screen
(:mod:`.confirm`), and the browser's real URL in every tab is checked against
the allowlists after every action (:mod:`.policy`). Limits (steps, wall time,
per-action deadline, screenshots, consecutive errors) and loop detection
(:mod:`.loops`) stop or pause the run; every event goes to the hash-chained
audit log (:mod:`.audit`), and a run that does not succeed leaves its failure
scene (:mod:`.scene`). An action "succeeding" is not the task succeeding:
a run succeeds only when the task's success condition holds in the environment.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from deskpod.client import SandboxClient
from deskpod.controller.gui_agent import Done, GuiAgent, GuiAgentFactory, Proposal, StepOutcome, scripted_gui_agent
from deskpod.controller.audit import AuditLog, ScreenshotStore, redact_action, utc_now
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.credentials import (
    CREDENTIAL_SCREEN_TOLERANCE_PX,
    CredentialChannel,
    CredentialRequest,
    RequestCredential,
    ScrubbingSandbox,
    SecretStore,
    TypeSecret,
    check_secret_text,
    credential_field_refusal,
)
from deskpod.controller.egress import EgressControl, run_domains
from deskpod.controller.elements import action_ref, expand_element_action
from deskpod.controller.confirm import (
    ActionSubject,
    ConfirmationRequest,
    DenyChannel,
    ApprovalChannel,
    PauseNotice,
    binding_digest,
)
from deskpod.controller.injection import scan_text
from deskpod.controller.keysplit import (
    chord_segments,
    first_segment,
    key_equivalent,
    may_move_focus,
    next_text_segment,
)
from deskpod.controller.loops import LoopDetector
from deskpod.controller.omnibox import OmniboxTracker, looks_like_download
from deskpod.controller.policy import Policy, check_url, redact_url
from deskpod.controller.levels import level_rank, max_level
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.risk import (
    ActionClassifier,
    ActionContext,
    ActionRisk,
    action_point,
    is_sensitive_field,
    url_host,
)
from deskpod.controller.run_api import EventListener, RunControl, RunResult, check_success
from deskpod.controller.scene import save_scene
from deskpod.controller.screen_binding import expectation
from deskpod.controller.state import RunState, StateMachine
from deskpod.controller.limits import Limits
from deskpod.controller.task import TaskFileError, TaskSpec
from deskpod.errors import (
    BadReplyError,
    DeskpodError,
    ExecutionError,
    LimitExceededError,
    NotVerifiedError,
    PolicyDeniedError,
    PolicyError,
    RunCancelledError,
    ScreenChangedError,
)
from deskpod.protocol import (
    ELEMENT_ACTION_TYPES,
    ActionTiming,
    BlockedRequest,
    CursorPosition,
    HoldKey,
    Keypress,
    Observation,
    MouseDown,
    MouseUp,
    ObserveOptions,
    Point,
    ScreenExpectation,
    Size,
    TypeText,
)

__all__ = ["VERIFY_INTERVAL_S", "run_task"]

log = logging.getLogger(__name__)

VERIFY_INTERVAL_S = 0.2
"""Seconds between re-observations while waiting for the success condition."""

_POINTLESS_POINTER = ("click", "double_click", "triple_click", "mouse_up", "mouse_down")
_DIALOG_ANSWERS = ("dialog_accept", "dialog_dismiss")
"""Actions the classifier rates from the dialog they answer (any other action answering one is raised)."""


def _may_download(risk: ActionRisk) -> bool:
    """Whether an action judged ``risk`` and let through may start a download: downloads
    are ``L2``, so only an action at that level or above may (the daemon refuses others)."""
    return level_rank(risk.level) >= level_rank("L2")


@dataclass
class _KeysOutcome:
    """How a keyboard action ran segment by segment (:meth:`_Run._keyed`): the last
    observation, the daemon's error that stopped it (``None``: every segment ran), whether
    its typed text is secret, one ``(segment, record)`` per segment judged, and the
    daemon's timings of the segments that ran."""

    observation: Observation
    error: DeskpodError | None = None
    sensitive: bool = False
    segments: list[tuple[BaseModel, dict[str, Any]]] = field(default_factory=list)
    timings: list[ActionTiming] = field(default_factory=list)


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
            and its stack's back at the end (:mod:`.egress`); ``None``: the browser's
            interception alone holds the run's list.
        secrets: the host-held secrets ``type_secret`` may type (:mod:`.credentials`;
            default none).
        snapshots: every observation the agent gets carries the element snapshot
            (:attr:`~deskpod.protocol.Observation.snapshot`), so it may act by ref
            (element actions are judged as the pixels they land on: :mod:`.elements`).
        credentials_refusal: why this run types no secret at all (``None``: it may): every
            ``type_secret`` and ``request_credential`` is refused with this reason (``rule``
            ``credential_sandbox``) before the sandbox is looked at or a person asked
            (``deskpod serve``'s sessions on a sandbox it does not vouch for).

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
    """
    run = _Run(task, policy or Policy(), channel or DenyChannel(), control or RunControl(), Path(audit_dir), on_event,
               signer or AuditSigner.load_or_create(), self_approval, egress_control, secrets or SecretStore(),
               snapshots=snapshots, credentials_refusal=credentials_refusal)
    return await run.run(sandbox, token, agent, agent_factory, connect_timeout_s)


@dataclass
class _Run:
    task: TaskSpec
    policy: Policy
    channel: ApprovalChannel
    control: RunControl
    audit_dir: Path
    on_event: EventListener | None
    signer: AuditSigner
    self_approval: bool
    egress_control: EgressControl | None = None
    secrets: SecretStore = field(default_factory=SecretStore)
    typed_secrets: list[str] = field(default_factory=list)
    snapshots: bool = False
    credentials_refusal: str | None = None
    run_id: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex[:12]}")
    steps: int = 0
    screenshots: int = 0
    errors_in_row: int = 0
    last_obs: Observation | None = None
    recent_actions: list[dict[str, Any]] = field(default_factory=list)
    visited_hosts: set[str] = field(default_factory=set)
    seen_quotes: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.limits: Limits = self.task.limits.capped(self.policy.limits)
        self.audit = AuditLog(self.audit_dir / f"{self.run_id}.jsonl", self.run_id, self.signer)
        self.store = ScreenshotStore(self.audit_dir / "screenshots", self.policy.screenshots,
                                     self.policy.screenshot_max_age_days)
        self.classifier = ActionClassifier(self.policy.l3_words, self.policy.l2_words)
        self.loops = LoopDetector(threshold=self.limits.max_repeats)
        self.omnibox = OmniboxTracker()
        self.sm = StateMachine(lambda old, new, why: self.emit("state", src=old.value, dst=new.value, reason=why))

    # ---- bookkeeping -------------------------------------------------------------------------

    def emit(self, event: str, **fields: Any) -> None:
        self.audit.write(event, **fields)
        if self.on_event is not None:
            self.on_event({"run_id": self.run_id, "event": event, **fields})

    def _count_screenshot(self, obs: Observation) -> Observation:
        if obs.screenshot is not None:
            self.screenshots += 1
            self.store.put(obs.screenshot)
            if self.screenshots > self.limits.max_screenshots:
                raise LimitExceededError(f"limit reached: max_screenshots={self.limits.max_screenshots}",
                                         detail={"limit": "max_screenshots"})
        return obs

    def _blocked(self, blocked: BlockedRequest) -> None:
        """Log a request the browser's interception refused before it left (a policy event)."""
        self.emit("policy", decision="blocked", rule=blocked.rule, host=blocked.host, url=redact_url(blocked.url),
                  resource_type=blocked.resource_type, document=blocked.document, count=blocked.count,
                  where="browser")

    async def _start_egress(self, client: SandboxAPI) -> None:
        """Put the run's allowlist in force in the browser and, if configured, at the proxy.

        Raises:
            EgressControlError: the proxy refused it or cannot be reached (the run fails).
        """
        domains = run_domains(self.task.allowed_domains, self.policy.allowed_domains)
        held = await client.set_egress(domains)
        proxy = "not_configured"
        if self.egress_control is not None:
            await self.egress_control.set(domains)
            proxy = "set"
        self.emit("egress", allowed_domains=held, proxy=proxy)

    async def _end_egress(self) -> None:
        """Give the proxy its stack's allowlist back (a failure is logged, not raised)."""
        if self.egress_control is None:
            return
        try:
            await self.egress_control.set(None)
        except DeskpodError as exc:
            log.warning("%s: the egress proxy kept the run's allowlist: %s", self.run_id, exc.message)
            self.emit("egress", allowed_domains=None, proxy=f"restore_failed: {exc.message[:200]}")

    def _enforce_url(self, url: str, where: str, doing: str) -> tuple[str, ...]:
        """Check ``url`` against the task's and the policy's allowlists; return its flags.

        Raises:
            PolicyDeniedError: either list refuses it (written to the audit log first).
        """
        flags: tuple[str, ...] = ()
        for allowed in (self.task.allowed_domains, self.policy.allowed_domains):
            decision = check_url(url, allowed)
            flags += decision.flags
            if not decision.allowed:
                shown = redact_url(url)
                self.emit("policy", decision="denied", rule=decision.rule, url=shown, where=where)
                raise PolicyDeniedError(f"{where}: {doing} {shown}, which the policy refuses ({decision.rule})",
                                        detail={"rule": decision.rule, "url": shown})
        return flags

    def _observed(self, obs: Observation, where: str) -> Observation:
        """Apply the URL policy to every tab of ``obs`` and remember it."""
        urls = [t.url for t in obs.tabs or []]
        if obs.url and obs.url not in urls:
            urls.append(obs.url)
        flags: list[str] = []
        for url in urls:
            flags += [f for f in self._enforce_url(url, where, "the browser is at") if f not in flags]
            host = url_host(url)
            if host:
                self.visited_hosts.add(host)
        if flags:
            self.emit("url_flags", url=redact_url(obs.url), flags=flags, where=where)
        if obs.screenshot is not None or self.last_obs is None:
            self.last_obs = obs
        return obs

    # ---- the run -----------------------------------------------------------------------------

    async def run(self, sandbox: str | SandboxAPI, token: str, agent: GuiAgent | None,
                  factory: GuiAgentFactory | None, connect_timeout_s: float) -> RunResult:
        """Play the run; whatever happens, its log ends with the sealed ``run_finished``."""
        started = time.monotonic()
        try:
            return await self._run(sandbox, token, agent, factory, connect_timeout_s, started)
        except Exception as exc:  # noqa: BLE001 - a controller bug still ends the log, and the run, as failed
            log.exception("%s: the controller failed", self.run_id)
            if self.audit.finished:
                raise
            return self._finish(started, "failed", f"internal error: {type(exc).__name__}: {str(exc)[:300]}", None)
        except BaseException as exc:  # the calling task was cancelled, or the process is stopping
            if not self.audit.finished:
                self._finish(started, "cancelled", f"cancelled: the controller stopped the run "
                             f"({type(exc).__name__})", None)
            raise

    async def _run(self, sandbox: str | SandboxAPI, token: str, agent: GuiAgent | None,
                   factory: GuiAgentFactory | None, connect_timeout_s: float, started: float) -> RunResult:
        self.store.prune()
        self.emit("run_started", task=self.task.name, start_url=redact_url(self.task.start_url),
                  limits=self.limits.model_dump(), policy=self.policy.model_dump(exclude={"l3_words", "l2_words"}))
        status: Literal["succeeded", "failed", "cancelled"] = "failed"
        client: SandboxAPI | None = None
        try:
            try:
                if isinstance(sandbox, str):
                    client = await SandboxClient.connect(sandbox, token, timeout_s=connect_timeout_s)
                else:
                    client = sandbox
                model_size = client.hello.model_size
                if self.task.model_size is not None:
                    model_size = await client.configure(self.task.model_size)
                client = ScrubbingSandbox(client, self._blocked, self.typed_secrets)
                await self._start_egress(client)
                agent = agent or _default_agent(self.task, model_size, factory)
                try:
                    reason = await asyncio.wait_for(self._play(client, agent), self.limits.max_wall_time_s)
                finally:
                    await agent.close()
                status = "succeeded"
            except TimeoutError:
                reason = f"limit reached: max_wall_time_s={self.limits.max_wall_time_s:g}"
            except RunCancelledError as exc:
                status, reason = "cancelled", f"{exc.code}: {exc.message}"
            except DeskpodError as exc:
                reason = f"{exc.code}: {exc.message}"
            except Exception as exc:  # noqa: BLE001 - an agent's bug ends the run, not the controller
                log.exception("%s: the run failed", self.run_id)
                reason = f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
            final = {"succeeded": RunState.SUCCEEDED, "failed": RunState.FAILED,
                     "cancelled": RunState.CANCELLED}[status]
            if not self.sm.ended:
                self.sm.to(final, reason)
            scene = None
            if status != "succeeded":
                if client is not None and self.last_obs is not None and self.last_obs.screenshot is None:
                    self.last_obs = await self._final_look(client)
                scene = save_scene(self.audit_dir, self.run_id, reason=reason, state=self.sm.state.value,
                                   observation=self.last_obs, recent_actions=self.recent_actions,
                                   audit_log=self.audit.path, audit_head=self.audit.head)
        finally:
            await self._end_egress()
            if client is not None and isinstance(sandbox, str):
                await client.close()
        self.store.finish(status == "succeeded")
        return self._finish(started, status, reason, scene)

    def _finish(self, started: float, status: Literal["succeeded", "failed", "cancelled"], reason: str,
                scene: Path | None) -> RunResult:
        """Write the sealed ``run_finished`` record and close the log; the run's result."""
        duration = time.monotonic() - started
        url = redact_url(self.last_obs.url) if self.last_obs else None
        fields = {"status": status, "reason": reason, "steps": self.steps, "screenshots": self.screenshots,
                  "duration_s": round(duration, 3), "scene": str(scene) if scene else None}
        self.audit.finish(**fields)
        if self.on_event is not None:
            self.on_event({"run_id": self.run_id, "event": "run_finished", **fields})
        log.info("%s %s: %s", self.run_id, status, reason)
        return RunResult(self.run_id, status, reason, self.steps, duration, url, self.audit.path, self.audit.head,
                         scene, self.screenshots)

    async def _final_look(self, client: SandboxAPI) -> Observation | None:
        try:
            return await client.act([], ObserveOptions(settle=False), timeout_s=10)
        except DeskpodError:
            return self.last_obs

    async def _play(self, client: SandboxAPI, agent: GuiAgent) -> str:
        self._enforce_url(self.task.start_url, "start_url", "the task starts at")
        self.sm.to(RunState.OBSERVING, "opening the start page")
        t0 = utc_now()
        obs = await client.navigate(self.task.start_url, ObserveOptions(page_text=True, text_sources=self._scans,
                                                                        snapshot=self.snapshots))
        self._observed(self._count_screenshot(obs), "navigate")
        self.emit("navigate", url=redact_url(obs.url), title=obs.title, started_at=t0, finished_at=utc_now(),
                  decision="allowed", screenshot_sha256=obs.screenshot.sha256 if obs.screenshot else None)
        last: StepOutcome | None = None
        while True:
            self.sm.to(RunState.VERIFYING, "checking the task's success condition")
            ok, why = check_success(self.task.success, obs)
            if ok:
                self.emit("verify", ok=True, evidence=why, url=redact_url(obs.url), title=obs.title)
                self.sm.to(RunState.SUCCEEDED, why)
                return "verified: " + why
            await self._screen_content(obs, client)
            self.sm.to(RunState.PLANNING, "asking the agent")
            if await self._checkpoint(client):
                obs = await self._look(client)
                continue
            proposal = await self._propose(client, agent, obs, last)
            if proposal is None:
                obs = await self._look(client)
                last = StepOutcome("denied", obs, {"code": "policy_denied", "rule": "handed_over",
                                                   "message": "a human took the sandbox over: observe again"})
                continue
            if isinstance(proposal, Done):
                self.emit("claim", claim=proposal.claim[:2000])
                self.sm.to(RunState.VERIFYING, "the agent says it is done: checking the environment")
                return await self._verify_claim(client)
            if self.steps >= self.limits.max_steps:
                raise LimitExceededError(f"limit reached: max_steps={self.limits.max_steps}",
                                         detail={"limit": "max_steps"})
            self.steps += 1
            self.sm.to(RunState.VALIDATING, f"step {self.steps}: {len(proposal.actions)} action(s)")
            last = await self._step(client, proposal, obs)
            obs = last.observation
            if last.status == "ok":
                self.errors_in_row = 0
                await self._loop_check(client, proposal, obs)
                self.sm.to(RunState.WAITING, "settled" if obs.settled else "the screen did not settle")
                self.sm.to(RunState.OBSERVING, "observed after the step")
            else:
                if last.error.get("rule") != "handed_over":
                    self.errors_in_row += 1
                if self.errors_in_row >= self.limits.max_errors:
                    raise LimitExceededError(
                        f"limit reached: max_errors={self.limits.max_errors} failed or refused steps in a row "
                        f"(last: {last.error.get('message', '')})", detail={"limit": "max_errors"})
                self.sm.to(RunState.OBSERVING, "telling the agent what went wrong")

    async def _verify_claim(self, client: SandboxAPI) -> str:
        check = self.task.success
        deadline = time.monotonic() + check.timeout_s
        options = ObserveOptions(screenshot=False, page_text=True)
        while True:
            obs = self._observed(await client.act([], options, timeout_s=self.limits.action_timeout_s), "verify")
            ok, why = check_success(check, obs)
            if ok or time.monotonic() >= deadline:
                self.emit("verify", ok=ok, evidence=why, url=redact_url(obs.url), title=obs.title)
                if ok:
                    self.sm.to(RunState.SUCCEEDED, why)
                    return "verified: " + why
                raise NotVerifiedError(why, detail={"rule": "success_check"})
            await asyncio.sleep(VERIFY_INTERVAL_S)

    # ---- pauses ------------------------------------------------------------------------------

    async def _checkpoint(self, client: SandboxAPI) -> bool:
        """Honour a cancel or pause requested through :class:`RunControl`; True when a human
        took the sandbox over meanwhile (the screen the agent saw is stale)."""
        if self.control.cancel_reason is not None:
            raise RunCancelledError(self.control.cancel_reason, detail={"cause": "requested"})
        if self.control.takeover.requested_by is not None:
            await self._take_over(client, self.control.takeover.requested_by)
            return True
        if self.control.paused:
            return await self._pause(client, "requested", self.control.pause_reason, ())
        return False

    async def _pause(self, client: SandboxAPI, kind: Literal["injection", "loop", "requested"], message: str,
                     evidence: tuple[str, ...]) -> bool:
        """Pause the run and wait for a human; return when resumed (True if a human took the
        sandbox over meanwhile), raise when cancelled."""
        before = self.sm.state
        self.sm.to(RunState.PAUSED, message)
        obs = self.last_obs
        took_over = False
        while True:
            notice = PauseNotice(f"pause-{uuid.uuid4().hex[:8]}", self.run_id, kind, message, evidence,
                                 redact_url(obs.url) if obs else None,
                                 obs.screenshot.sha256 if obs and obs.screenshot else None, self.policy.pause_timeout_s)
            self.emit("pause", id=notice.id, kind=kind, message=message, evidence=list(evidence), url=notice.url,
                      screenshot_sha256=notice.screenshot_sha256)
            answer = await self._answer(self.channel.review(notice), self.policy.pause_timeout_s)
            if kind == "requested" and answer is None and not self.control.paused:
                answer = "resume"
            self.emit("pause_answer", id=notice.id, answer=answer or "none")
            if answer == "takeover":
                await self._take_over(client, self.control.takeover.requested_by or "human")
                took_over = True
                answer = "resume"
            if answer != "resume":
                raise RunCancelledError(f"paused ({message}) and not resumed", detail={"cause": kind})
            self.control.resume()
            self.sm.to(before, "resumed by a human")
            return took_over

    async def _take_over(self, client: SandboxAPI, principal: str) -> None:
        """Hand the sandbox to the person ``principal`` (:mod:`.takeover`): run their inputs on
        this run's sandbox connection, in order, until they hand it back; then release any
        button they left held. The caller re-observes before the agent plans again.

        Raises:
            RunCancelledError: the run was cancelled meanwhile.
            PolicyDeniedError: a tab left the allowlists after an input (the run stops).
            BadReplyError: the sandbox broke the wire contract.
        """
        desk = self.control.takeover
        actor = f"human:{principal}"
        before = self.sm.state
        if before is not RunState.PAUSED:
            self.sm.to(RunState.PAUSED, f"taken over by {actor}")
        desk.begin(principal)
        self.emit("takeover", active=True, actor=actor)
        held: set[str] = set()
        try:
            while True:
                item = await self._answer(desk.next(), self.limits.max_wall_time_s)
                if item is None:
                    break
                try:
                    await self._human_input(client, item.action, actor, held)
                except (BadReplyError, RunCancelledError) as exc:
                    item.done.set_exception(exc)
                    raise
                except DeskpodError as exc:
                    item.done.set_exception(exc)
                    if self.control.cancel_reason is not None or (isinstance(exc, PolicyDeniedError)
                                                                  and exc.detail.get("where") == "after"):
                        raise
                else:
                    item.done.set_result(None)
        finally:
            for button in sorted(held):
                try:
                    await client.act([MouseUp(type="mouse_up", button=button)],  # type: ignore[arg-type]
                                     ObserveOptions(screenshot=False, settle=False),
                                     timeout_s=self.limits.action_timeout_s)
                except DeskpodError as exc:
                    log.warning("%s: a button the person held was not released: %s", self.run_id, exc.message)
            desk.end()
            self.emit("takeover", active=False, actor=actor, released=sorted(held))
        self.control.resume()
        if before is not RunState.PAUSED:
            self.sm.to(before, f"handed back by {actor}")

    async def _human_input(self, client: SandboxAPI, action: BaseModel, actor: str, held: set[str]) -> None:
        """Run one input of the person in control and write it to the audit log (``human_input``,
        ``actor``); typed text is redacted when the focus before or after it is a secret field.

        Raises:
            PolicyDeniedError: the policy blocks the action type, or the address bar would load
                a URL an allowlist refuses (nothing sent; ``detail["where"]`` ``"before"``), or a
                tab is off the allowlists after it (``"after"``: the run stops).
            DeskpodError: the sandbox refused or failed it.
        """
        kind = str(getattr(action, "type", ""))
        focused = self.last_obs.focused if self.last_obs is not None else None
        record: dict[str, Any] = {"actor": actor, "started_at": utc_now()}
        try:
            if kind in self.policy.blocked_actions:
                raise PolicyDeniedError(f"the policy blocks {kind!r} actions", detail={"rule": "blocked_action"})
            typed = self.omnibox.step(action, focused)
            if typed is not None:
                self._enforce_url(typed, "omnibox", "the address bar would load")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "before"
            self.emit("human_input", **record, action=redact_action(action, True), outcome="denied",
                      error={"code": exc.code, "message": exc.message})
            raise
        try:
            obs = await client.act([action], ObserveOptions(screenshot=False, settle=False),
                                   timeout_s=self.limits.action_timeout_s)
        except DeskpodError as exc:
            self.emit("human_input", **record, action=redact_action(action, True), outcome="error",
                      error={"code": exc.code, "message": exc.message})
            raise
        if isinstance(action, MouseDown):
            held.add(action.button)
        elif isinstance(action, MouseUp):
            held.discard(action.button)
        sensitive = is_sensitive_field(focused) or is_sensitive_field(obs.focused)
        shown = redact_action(action, sensitive)
        self.recent_actions.append({**shown, "actor": actor})
        self.emit("human_input", **record, action=shown, outcome="ok", finished_at=utc_now(), url=redact_url(obs.url))
        self.last_obs = self.last_obs.model_copy(update={"focused": obs.focused}) if self.last_obs else obs
        try:
            self._observed(obs, "takeover")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "after"
            raise

    async def _propose(self, client: SandboxAPI, agent: GuiAgent, obs: Observation,
                       last: StepOutcome | None) -> Proposal | Done | None:
        """Wait for the agent's next proposal; a cancel ends the wait at once, and a pause
        is shown to the human at once (the agent may go on planning meanwhile).

        Returns:
            The proposal, or ``None`` when a human took the sandbox over meanwhile: the
            proposal was planned on a screen that is gone, so it is discarded.
        """
        planning = asyncio.ensure_future(agent.propose(obs, last))
        stale = False
        try:
            while True:
                paused = asyncio.ensure_future(self.control.wait_pause_requested())
                cancelled = asyncio.ensure_future(self.control.wait_cancelled())
                try:
                    done, _ = await asyncio.wait({planning, paused, cancelled}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    paused.cancel()
                    cancelled.cancel()
                if planning in done:
                    proposal = planning.result()
                    if stale and isinstance(proposal, Proposal):
                        self.emit("proposal_discarded", reason="planned before a human took the sandbox over")
                        return None
                    return proposal
                stale = await self._checkpoint(client) or stale
        finally:
            if not planning.done():
                planning.cancel()
                await asyncio.gather(planning, return_exceptions=True)

    async def _answer(self, pending: Any, timeout_s: float) -> Any:
        waiter = asyncio.ensure_future(pending)
        cancelled = asyncio.ensure_future(self.control.wait_cancelled())
        try:
            done, _ = await asyncio.wait({waiter, cancelled}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if waiter in done:
            return waiter.result()
        waiter.cancel()
        if self.control.cancel_reason is not None:
            raise RunCancelledError(self.control.cancel_reason, detail={"cause": "requested"})
        return None

    @property
    def _scans(self) -> bool:
        """Observations carry the page's other text sources for the injection scan."""
        return self.policy.pause_on_injection

    async def _screen_content(self, obs: Observation, client: SandboxAPI) -> None:
        """Pause on suspected prompt injection in what the page shows."""
        if not self.policy.pause_on_injection:
            return
        sources = {"page_text": obs.page_text, "title": obs.title,
                   "dialog": obs.dialog.message if obs.dialog else None}
        sources.update((extra.source, extra.text) for extra in obs.text_sources or ())
        scan = scan_text(sources, self.seen_quotes)
        if scan.findings:
            self.emit("injection_scan", pause=scan.pause, evidence=list(scan.evidence()))
        if scan.pause:
            await self._pause(client, "injection", "the page seems to instruct the agent; it cannot authorize "
                              "anything, and nothing it asks for has been done", scan.evidence())

    async def _loop_check(self, client: SandboxAPI, proposal: Proposal, obs: Observation) -> None:
        shot = obs.screenshot
        if not self.loops.step(list(proposal.actions), obs.url, shot.perceptual_hash if shot else None):
            return
        self.emit("loop", step=self.steps, repeats=self.loops.repeats)
        message = f"loop detected: the same actions on the same screen and URL {self.loops.repeats} times in a row"
        try:
            await self._pause(client, "loop", message, ())
        except RunCancelledError:
            raise LimitExceededError(message, detail={"limit": "max_repeats"}) from None
        self.loops = LoopDetector(threshold=self.limits.max_repeats)

    # ---- one step ----------------------------------------------------------------------------

    async def _step(self, client: SandboxAPI, proposal: Proposal, before: Observation) -> StepOutcome:
        """Validate and execute ``proposal`` action by action; the outcome for the agent."""
        actions = list(proposal.actions)
        record: dict[str, Any] = {"step": self.steps, "started_at": utc_now(), "intent": proposal.intent[:500]}
        done: list[dict[str, Any]] = []
        risks: list[dict[str, Any]] = []
        timings: list[dict[str, Any]] = []
        current = before
        asked: tuple[int, int] | None = None
        via_of: dict[int, dict[str, str]] = {}
        if not actions:
            return await self._refuse(client, record, done, risks, "empty_proposal", "the proposal has no actions")
        for index, action in enumerate(actions):
            kind = str(getattr(action, "type", ""))
            if await self._checkpoint(client):
                return await self._refuse(client, record, done, risks, "handed_over",
                                          "a human took the sandbox over: observe again before acting", index)
            if kind in self.policy.blocked_actions:
                return await self._refuse(client, record, done, risks, "blocked_action",
                                          f"the policy blocks {kind!r} actions", index)
            if isinstance(action, (RequestCredential, TypeSecret)):
                last = index == len(actions) - 1
                try:
                    shown, current, secret_entry = await self._secret(client, action, index, ObserveOptions(
                        screenshot=last, page_text=last, text_sources=last and self._scans))
                except (BadReplyError, RunCancelledError):
                    raise
                except PolicyDeniedError as exc:
                    if exc.detail.get("where") == "after":
                        raise
                    return await self._refuse(client, record, done, risks, str(exc.detail.get("rule", "credential")),
                                              exc.message, index)
                except ScreenChangedError as exc:
                    return await self._screen_changed(client, record, done, risks, exc, index)
                except DeskpodError as exc:
                    return await self._failed(client, record, done, risks, exc, index)
                risks.append(secret_entry)
                done.append(shown)
                self.recent_actions.append(shown)
                asked = None
                if not last:
                    self.sm.to(RunState.VALIDATING, f"action {index + 2}/{len(actions)}")
                continue
            if kind in ELEMENT_ACTION_TYPES:  # judged as the pixels it lands on (.elements)
                try:
                    action, current, asked = await self._by_ref(client, actions, index, via_of)
                except (BadReplyError, PolicyError):
                    raise
                except ScreenChangedError as exc:  # stale_ref included
                    return await self._screen_changed(client, record, done, risks, exc, index)
                except DeskpodError as exc:
                    return await self._failed(client, record, done, risks, exc, index)
                kind = str(getattr(action, "type", ""))
                if kind in self.policy.blocked_actions:
                    return await self._refuse(client, record, done, risks, "blocked_action",
                                              f"the policy blocks {kind!r} actions", index)
            try:
                current = await self._context(client, action, current, asked)
                risk = self._assess(action, proposal, current)
            except (BadReplyError, PolicyDeniedError):  # an address-bar URL off the allowlist stops the run
                raise
            except DeskpodError as exc:
                return await self._failed(client, record, done, risks, exc, index)
            # Text that moves the focus may carry a secret into a field not focused yet.
            shown = redact_action(action, proposal.sensitive or risk.sensitive or may_move_focus(action))
            approval = "not_required"
            if risk.level in self.policy.confirm_levels:
                self.sm.to(RunState.AWAITING_CONFIRMATION, f"{risk.level}: {risk.reasons[0] if risk.reasons else ''}")
                approval = "approved"
            entry: dict[str, Any] = {"index": index, "risk": risk.level, "reasons": list(risk.reasons),
                                     "target": risk.target, "approval": approval}
            if id(action) in via_of:
                entry["element"] = via_of[id(action)]
            risks.append(entry)
            note = f"action {index + 1}/{len(actions)}: {kind}"
            last = index == len(actions) - 1
            following = action_point(actions[index + 1]) if not last else None
            options = ObserveOptions(screenshot=last, page_text=last, text_sources=last and self._scans,
                                     element_at=Point(x=following[0], y=following[1]) if following else None,
                                     snapshot=last and self.snapshots)
            asked = following
            if isinstance(action, (TypeText, Keypress, HoldKey)):
                if approval != "approved":
                    self.sm.to(RunState.EXECUTING, note)
                keyed = _KeysOutcome(current)
                try:
                    await self._keyed(client, action, proposal, risk, approval, options, keyed, note)
                except RunCancelledError:
                    self._interrupted(record, done, risks, entry, action, keyed)
                    raise
                current, ran = keyed.observation, keyed.timings
                shown = self._keys_record(entry, action, proposal.sensitive or risk.sensitive or keyed.sensitive,
                                          keyed)
                if keyed.error is not None:
                    self.recent_actions.append(shown)
                    return await self._failed(client, record, done, risks, keyed.error, index)
            else:
                try:
                    if approval == "approved":
                        current = await self._confirm(client, action, proposal, shown, risk, options, note)
                    else:
                        self.sm.to(RunState.EXECUTING, note)
                        current = await client.act([action], options, timeout_s=self.limits.action_timeout_s,
                                                   expect=expectation(action, before, current),
                                                   allow_downloads=_may_download(risk))
                except (BadReplyError, PolicyError):
                    raise
                except ScreenChangedError as exc:
                    return await self._screen_changed(client, record, done, risks, exc, index)
                except DeskpodError as exc:
                    return await self._failed(client, record, done, risks, exc, index)
                shown, ran = redact_action(action, proposal.sensitive or risk.sensitive), current.timings
            done.append(shown)
            timings += [{"index": index, "type": t.type, "duration_s": t.duration_s} for t in ran]
            self.recent_actions.append(shown)
            self._observed(current, f"step {self.steps}")
            if not last:
                self.sm.to(RunState.VALIDATING, f"action {index + 2}/{len(actions)}")
        self._count_screenshot(current)
        shot = current.screenshot
        self.emit("step", **record, actions=done, risks=risks, finished_at=utc_now(), decision="allowed",
                  outcome="ok", timings=timings, url=redact_url(current.url), title=current.title,
                  screen=None if shot is None else {"width": shot.screen_width, "height": shot.screen_height},
                  screenshot_sha256=None if shot is None else shot.sha256, settled=current.settled,
                  events=current.events, downloads=[{**d.model_dump(mode="json"), "url": redact_url(d.url)}
                                                        for d in current.downloads])
        return StepOutcome("ok", current)

    async def _keyed(self, client: SandboxAPI, action: TypeText | Keypress | HoldKey, proposal: Proposal,
                     risk: ActionRisk, approval: str, options: ObserveOptions, out: _KeysOutcome,
                     note: str) -> None:
        """Run a keyboard action segment by segment (:mod:`.keysplit`), each judged against the
        element focused when it lands, into ``out``.

        ``out.observation`` is the focus before the action on entry, the last observation on
        return. A segment at a confirmation level waits for the human first (:meth:`_confirm`,
        which then sends it bound to the approved screen); so does the first segment when
        the whole action needs an approval (``approval``), at the action's level.
        Typed text is secret when a segment was judged so or a sensitive field has the focus
        after a segment. Every observation's URLs are checked (:meth:`_observed`).

        Raises:
            RunCancelledError: a segment's confirmation was denied or not answered.
            BadReplyError: the sandbox broke the wire contract.
        """
        left = action.text if isinstance(action, TypeText) else ""
        pending: list[BaseModel] = [action] if isinstance(action, TypeText) and not left else []
        if isinstance(action, (Keypress, HoldKey)):
            pending = list(chord_segments(action))
        while pending or left:
            if left:
                piece = next_text_segment(left, out.observation.focused)
                left = left[len(piece):]
                segment: BaseModel = TypeText(type="type", text=piece)
                last = not left
            else:
                segment = pending.pop(0)
                last = not pending
            if not out.segments and last:
                segment = action  # not split: the action as proposed, judged as it was
            # The first piece was judged with the action (_assess, on first_segment).
            seg_risk = self._page_risk(key_equivalent(segment), out.observation) if out.segments else risk
            first_approved = not out.segments and approval == "approved"
            out.sensitive = out.sensitive or seg_risk.sensitive
            info = {"risk": seg_risk.level, "reasons": list(seg_risk.reasons), "target": seg_risk.target}
            look = options if last else ObserveOptions(screenshot=False)
            try:
                if first_approved or seg_risk.level in self.policy.confirm_levels:
                    if not first_approved:
                        self.sm.to(RunState.VALIDATING, f"key segment {len(out.segments) + 1} of a {action.type} action")
                        self.sm.to(RunState.AWAITING_CONFIRMATION,
                                   f"{seg_risk.level}: {seg_risk.reasons[0] if seg_risk.reasons else ''}")
                    shown = redact_action(segment, proposal.sensitive or out.sensitive)
                    out.observation = await self._confirm(client, segment, proposal, shown, seg_risk, look, note)
                    info["approval"] = "approved"
                else:
                    out.observation = await client.act([segment], look, timeout_s=self.limits.action_timeout_s,
                                                       allow_downloads=_may_download(seg_risk))
                    info["approval"] = "not_required"
            except RunCancelledError:
                out.segments.append((segment, {**info, "approval": "refused"}))
                raise
            except BadReplyError:
                raise
            except DeskpodError as exc:
                out.error = exc
                return
            out.segments.append((segment, info))
            out.timings += out.observation.timings
            if isinstance(action, TypeText) and is_sensitive_field(out.observation.focused):
                out.sensitive = True
            if not last:
                self._observed(out.observation, f"step {self.steps}")

    async def _secret(self, client: SandboxAPI, action: RequestCredential | TypeSecret, index: int,
                      options: ObserveOptions) -> tuple[dict[str, Any], Observation, dict[str, Any]]:
        """Type a credential a person gives (``request_credential``) or a host-held secret
        (``type_secret``) into the focused password field (:mod:`.credentials`).

        The field is checked on a fresh observation (again after the person answered), and
        the keys go to the daemon bound to that whole screen, its URL and that focused
        element; a change voids it and the field is checked again (at most 3 times). The
        value is scrubbed from every later observation; records carry only the label or name.

        Returns:
            The action as recorded, the observation after it (``options``) and its risk entry.

        Raises:
            PolicyDeniedError: the field, a domain or the secret is refused, or the person
                declined (``detail["rule"]``; the step is refused, the run goes on); with
                ``detail["where"]`` ``"after"``: a tab left the allowlists (the run stops).
            RunCancelledError: the run was cancelled while waiting.
            ScreenChangedError: the screen or the focus kept changing.
            DeskpodError: the sandbox failed.
        """
        if self.credentials_refusal is not None:
            raise PolicyDeniedError(f"no secret is typed in this run: {self.credentials_refusal}",
                                    detail={"rule": "credential_sandbox"})
        current = await self._credential_look(client)
        if isinstance(action, TypeSecret):
            held = self.secrets.get(action.name)
            domains, by = list(held.domains), "host"
            shown: dict[str, Any] = {"type": "type_secret", "name": action.name}
        else:
            domains = list(action.domains) if action.domains else [url_host(current.url)]
            shown = {"type": "request_credential", "label": action.label, "domains": domains}
            by = ""
        for domain in domains:
            for allowed in (self.task.allowed_domains, self.policy.allowed_domains):
                if not domain or not check_url(f"https://{domain}/", allowed).allowed:
                    raise PolicyDeniedError(f"{domain or 'this page'} is not one of the run's domains: no secret is "
                                            "typed there", detail={"rule": "credential_domain"})
        self._field_check(current, domains)
        if isinstance(action, RequestCredential):
            value, by = await self._ask_credential(action, current, domains)
            current = await self._credential_look(client)
            self._field_check(current, domains)
        else:
            value = held.value.get_secret_value()
        why = check_secret_text(value)
        if why is not None:
            raise PolicyDeniedError(f"not typed: {why}", detail={"rule": "credential_invalid"})
        self.typed_secrets.append(value)
        for attempt in range(1, 4):
            self.sm.to(RunState.EXECUTING, f"typing the {shown['type'].replace('_', ' ')} into the checked field")
            shot = current.screenshot
            expect = ScreenExpectation(screenshot_sha256=shot.sha256 if shot else None, radius_px=None,
                                       tolerance_px=CREDENTIAL_SCREEN_TOLERANCE_PX, min_delta=1, url=current.url,
                                       focus=current.focused)
            try:
                after = await client.act([TypeText(type="type", text=value)], options,
                                         timeout_s=self.limits.action_timeout_s, expect=expect)
                break
            except ScreenChangedError as exc:
                self.emit("credential_void", attempt=attempt, reason=_changed_reason(exc), **shown)
                if attempt == 3:
                    raise
                self.sm.to(RunState.VALIDATING, "the screen or the focus changed: checking the field again")
                current = await self._credential_look(client)
                self._field_check(current, domains)
            except BadReplyError:
                raise
            except DeskpodError as exc:  # its message may quote what was typed: only the code is kept
                raise ExecutionError(f"typing the secret failed ({exc.code})", detail={"code": exc.code}) from None
        moved = None if after.focused is None else credential_field_refusal(after.focused, after.url, domains)
        if moved is not None:  # the page moved the focus during the keys (an unread focus is not known to have)
            self.emit("policy", decision="flagged", rule="credential_focus_moved", reason=moved,
                      url=redact_url(after.url))
        self.emit("credential_typed", **shown, by=by, url=redact_url(current.url),
                  field={"role": current.focused.role if current.focused else None,
                         "name": current.focused.name if current.focused else None})
        try:
            self._observed(after, f"step {self.steps}")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "after"
            raise
        entry = {"index": index, "risk": "L2", "reasons": ["a secret typed into a checked password field"],
                 "target": current.focused.name if current.focused else None, "approval": by}
        return {**shown, "by": by}, after, entry

    async def _credential_look(self, client: SandboxAPI) -> Observation:
        """A fresh observation with a screenshot, to check the focused field on and bind the keys to."""
        obs = self._count_screenshot(await client.act([], ObserveOptions(), timeout_s=self.limits.action_timeout_s))
        return self._observed(obs, f"step {self.steps}")

    def _field_check(self, current: Observation, domains: list[str]) -> None:
        """Raises:
            PolicyDeniedError: the focused element is not a password field on ``domains``.
        """
        refusal = credential_field_refusal(current.focused, current.url, domains)
        if refusal is not None:
            self.emit("policy", decision="denied", rule="credential_field", reason=refusal, url=redact_url(current.url))
            raise PolicyDeniedError(f"no secret is typed here: {refusal}", detail={"rule": "credential_field"})

    async def _ask_credential(self, action: RequestCredential, current: Observation, domains: list[str]
                              ) -> tuple[str, str]:
        """Ask a person for the credential; return it and ``human:<principal>``.

        Raises:
            PolicyDeniedError: no channel can ask, or the person declined or did not answer.
            RunCancelledError: the run was cancelled meanwhile.
        """
        if not isinstance(self.channel, CredentialChannel):
            raise PolicyDeniedError("this run's approval channel cannot ask a person for a credential",
                                    detail={"rule": "credential_unavailable"})
        focused = current.focused
        request = CredentialRequest(f"credential-{uuid.uuid4().hex[:12]}", self.run_id, action.label,
                                    redact_url(current.url), focused.role if focused else None,
                                    focused.name if focused else None, self.policy.confirmation_timeout_s)
        self.emit("credential_requested", id=request.request_id, label=action.label, domains=domains, url=request.url,
                  field={"role": request.field_role, "name": request.field_name})
        self.sm.to(RunState.AWAITING_CONFIRMATION, f"waiting for a person to give {action.label!r}")
        answer = await self._answer(self.channel.credential(request), self.policy.confirmation_timeout_s)
        self.sm.to(RunState.VALIDATING, "the credential request was answered")
        outcome = "timeout" if answer is None else ("declined" if answer.secret is None else "given")
        self.emit("credential_answer", id=request.request_id, outcome=outcome, by=answer.by if answer else "")
        if answer is None or answer.secret is None:
            raise PolicyDeniedError(f"credential {outcome}: {action.label}", detail={"rule": f"credential_{outcome}"})
        return answer.secret.get_secret_value(), f"human:{answer.by}"

    def _keys_record(self, entry: dict[str, Any], action: BaseModel, sensitive: bool, keyed: _KeysOutcome
                     ) -> dict[str, Any]:
        """Put a keyboard action's per-segment risks into its ``entry`` of the step's risks (the
        highest level on the entry); return the action as recorded (typed text redacted when
        ``sensitive``)."""
        if len(keyed.segments) > 1 or (keyed.segments and keyed.segments[0][0] is not action):
            entry["segments"] = [{"action": redact_action(seg, sensitive), **info} for seg, info in keyed.segments]
            top = max([entry["risk"], *(info["risk"] for _, info in keyed.segments)], key=level_rank)
            if top != entry["risk"]:
                highest = [info for _, info in keyed.segments if info["risk"] == top]
                entry.update(risk=top, reasons=[r for info in highest for r in info["reasons"]],
                             target=highest[0]["target"])
            if any(info["approval"] == "approved" for _, info in keyed.segments):
                entry["approval"] = "approved"
        return redact_action(action, sensitive)

    def _interrupted(self, record: dict[str, Any], done: list[dict[str, Any]], risks: list[dict[str, Any]],
                     entry: dict[str, Any], action: BaseModel, keyed: _KeysOutcome) -> None:
        """Record a keyboard action stopped at a segment's confirmation: its earlier segments
        ran. Typed text is redacted whatever the focus (its destination is not known)."""
        shown = self._keys_record(entry, action, True, keyed)
        self.recent_actions.append(shown)
        ran = len(keyed.segments) - 1
        self.emit("step", **record, actions=[*done, shown], risks=risks, finished_at=utc_now(), decision="denied",
                  rule="confirmation", outcome="cancelled", refused_index=entry["index"], segments_done=ran)

    async def _by_ref(self, client: SandboxAPI, actions: list[BaseModel], index: int,
                      via_of: dict[int, dict[str, str]]) -> tuple[BaseModel, Observation, tuple[int, int] | None]:
        """Replace the element action ``actions[index]`` by what it runs as (resolved now,
        :func:`~deskpod.controller.elements.expand_element_action`); each replacement
        remembers the ref it came from in ``via_of`` (by object id) for the audit record.

        Returns:
            The action now at ``index``, the observation of the control at its point, and
            that point (model space; ``None`` when the action has none).

        Raises:
            StaleRefError: the ref is not valid now.
            DeskpodError: the sandbox failed.
        """
        action = actions[index]
        resolved: Observation | None = None
        while str(getattr(action, "type", "")) in ELEMENT_ACTION_TYPES and resolved is None:
            origin = via_of.get(id(action)) or {"type": str(getattr(action, "type", "")),
                                                "ref": str(getattr(action, "ref", ""))}
            expanded, resolved = await expand_element_action(client, action, self.limits.action_timeout_s)
            actions[index:index + 1] = expanded
            for item in expanded:
                via_of[id(item)] = {**origin, "ref": str(getattr(item, "ref", origin["ref"]) or origin["ref"])}
            action = actions[index]
        assert resolved is not None and resolved.element_ref_point is not None
        point = resolved.element_ref_point
        self.emit("element_ref", step=self.steps, index=index, **via_of[id(action)], action=str(getattr(action, "type", "")),
                  point=[point.x, point.y])
        return action, resolved, (point.x, point.y) if action_point(action) == (point.x, point.y) else None

    async def _context(self, client: SandboxAPI, action: BaseModel, current: Observation,
                       asked: tuple[int, int] | None) -> Observation:
        """An observation describing the control under ``action``'s point: ``current`` when it
        was taken with ``element_at`` at that point (``asked``), else a fresh one."""
        point = action_point(action)
        if point is None and str(getattr(action, "type", "")) in _POINTLESS_POINTER:
            where = await client.act([CursorPosition(type="cursor_position")], ObserveOptions(screenshot=False,
                                     settle=False), timeout_s=self.limits.action_timeout_s)
            point = (where.cursor.x, where.cursor.y) if where.cursor else None
        if point is None or point == asked:
            return current
        return await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=point[0], y=point[1])),
                                timeout_s=self.limits.action_timeout_s)

    def _page_risk(self, action: BaseModel, current: Observation) -> ActionRisk:
        """The level of ``action`` from the page as ``current`` shows it (no proposal rules).
        Call it once per action or piece that is about to run: the address bar's typed
        text is followed across calls (:class:`~deskpod.controller.omnibox.OmniboxTracker`).

        Raises:
            PolicyDeniedError: an allowlist refuses the URL the address bar would load.
        """
        kind = str(getattr(action, "type", ""))
        tab_id = getattr(action, "tab_id", None)
        dialog = next((d for d in current.dialogs if d.tab_id == tab_id), None) if tab_id else current.dialog
        context = ActionContext(url=current.url, element=current.element_at, focused=current.focused,
                                visited_hosts=frozenset(self.visited_hosts), dialog=dialog)
        risk = self.classifier.classify(action, context)
        typed = self.omnibox.step(action, current.focused)
        if typed is not None:
            risk = self._omnibox_risk(risk, typed, current.url)
        if current.url is None and risk.level != "L0":
            risk = risk.raised("L2", "the page could not be inspected, so the target is unknown")
        if current.dialog is not None and risk.level != "L0" and kind not in _DIALOG_ANSWERS:  # rated above
            risk = risk.raised("L2", f"answers a {current.dialog.type} dialog: {current.dialog.message[:80]!r}")
            if any(w.lower() in current.dialog.message.lower() for w in self.policy.l3_words):
                risk = risk.raised("L3", "the dialog asks about an irreversible action")
        return risk

    def _assess(self, action: BaseModel, proposal: Proposal, current: Observation) -> ActionRisk:
        # A keyboard action is judged by what lands on the element focused now; the rest of
        # it is judged as it lands (_keyed). The proposal's rules apply to the whole action.
        risk = self._page_risk(first_segment(action, current.focused), current)
        kind = str(getattr(action, "type", ""))
        if kind in self.policy.confirm_actions:
            risk = risk.raised("L2", f"the policy asks for a confirmation of every {kind!r}")
        if proposal.safety_checks:
            risk = risk.raised("L2", "the model vendor flagged it: " + "; ".join(proposal.safety_checks)[:300])
        if proposal.risk is not None and risk.level != max_level(risk.level, proposal.risk):
            risk = risk.raised(proposal.risk, "the agent itself rated it higher")
        return risk

    def _omnibox_risk(self, risk: ActionRisk, url: str, at: str | None) -> ActionRisk:
        """Judge an address-bar navigation to ``url`` like a link to it (:mod:`.omnibox`).

        Raises:
            PolicyDeniedError: an allowlist refuses ``url``: the key is not pressed and the run
                stops, as when a tab leaves the allowlist.
        """
        self._enforce_url(url, "omnibox", "the address bar would load")
        host = url_host(url)
        if host and host != url_host(at) and host not in self.visited_hosts:
            risk = risk.raised("L2", f"loads {host} from the address bar, a domain this run has not visited")
        if looks_like_download(url):
            risk = risk.raised("L2", "starts a download from the address bar")
        return risk

    async def _confirm(self, client: SandboxAPI, action: BaseModel, proposal: Proposal, shown: dict[str, Any],
                       risk: ActionRisk, options: ObserveOptions, note: str) -> Observation:
        """Ask until an approval binds to the screen as it is when the input is sent; run
        ``action`` then and return the observation after it (``options``).

        The approved action goes to the daemon bound to the whole screen and the control
        the human saw (:func:`~deskpod.controller.screen_binding.expectation`): the daemon
        checks them right before the input. When they changed, the approval is void and
        the human is asked again about the new screen.

        Raises:
            RunCancelledError: denied, not answered in time, or the screen kept changing.
            DeskpodError: the sandbox failed the action.
        """
        point = action_point(action)
        # An element action kept as it is (select_option...) is judged at its ref's point again.
        ref = action_ref(action) if point is None else None
        look = ObserveOptions(element_at=Point(x=point[0], y=point[1]) if point else None, element_ref=ref)
        screen = self._count_screenshot(await client.act([], look, timeout_s=self.limits.action_timeout_s))
        raw = action.model_dump(mode="json")
        for attempt in range(1, self.policy.max_confirmation_asks + 1):
            assert screen.screenshot is not None
            request = self._confirmation(raw, shown, risk, screen, attempt)
            self.emit("confirmation_requested", id=request.id, digest=request.digest, summary=request.summary,
                      level=risk.level, reasons=list(risk.reasons), action=shown, url=redact_url(screen.url),
                      screenshot_sha256=screen.screenshot.sha256, attempt=attempt, self_approval=self.self_approval)
            answer = await self._answer(self.channel.confirm(request), self.policy.confirmation_timeout_s)
            if answer is None or not answer.approved or answer.digest != request.digest:
                outcome = "timeout" if answer is None else ("denied" if not answer.approved else "wrong_digest")
                self.emit("confirmation_answer", id=request.id, outcome=outcome, by=getattr(answer, "by", ""),
                          self_approval=self.self_approval)
                raise RunCancelledError(f"confirmation {outcome}: {request.summary}",
                                        detail={"cause": f"confirmation_{outcome}"})
            self.emit("confirmation_answer", id=request.id, outcome="approved", by=answer.by,
                      self_approval=self.self_approval)
            self.sm.to(RunState.EXECUTING, note)
            try:
                return await client.act([action], options, timeout_s=self.limits.action_timeout_s,
                                        expect=expectation(action, screen, screen, whole_screen=True),
                                        allow_downloads=_may_download(risk))
            except ScreenChangedError as exc:
                reason = f"the URL or the screen changed after the approval ({_changed_reason(exc)})"
            fresh = self._count_screenshot(await client.act([], look, timeout_s=self.limits.action_timeout_s))
            fresh_sha = fresh.screenshot.sha256 if fresh.screenshot else None
            self.emit("confirmation_void", id=request.id, reason=reason, url=redact_url(fresh.url),
                      screenshot_sha256=fresh_sha, self_approval=self.self_approval)
            self.sm.to(RunState.VALIDATING, reason)
            self.sm.to(RunState.AWAITING_CONFIRMATION, "asking again about the new screen")
            screen = fresh
            risk = self._assess(action, proposal, fresh)
        raise RunCancelledError(f"the screen kept changing: asked {self.policy.max_confirmation_asks} times",
                                detail={"cause": "confirmation_void"})

    def _confirmation(self, raw: dict[str, Any], shown: dict[str, Any], risk: ActionRisk, screen: Observation,
                      attempt: int) -> ConfirmationRequest:
        shot = screen.screenshot
        assert shot is not None
        kind = raw.get("type", "")
        point = f" at ({raw['x']}, {raw['y']})" if "x" in raw and raw.get("x") is not None else ""
        target = risk.target or "the page"
        data = shown.get("text") if kind == "type" else None
        if kind in ("keypress", "hold_key"):
            summary = f"press {'+'.join(raw.get('keys', []))} on {target}"
        elif kind == "type":
            summary = f"type {data!r} into {target}"
        else:
            summary = f"{kind.replace('_', ' ')} {target}{point}"
        return ConfirmationRequest(
            id=f"confirm-{uuid.uuid4().hex[:12]}", run_id=self.run_id, step=self.steps, summary=summary,
            subject=ActionSubject(action=shown, data=data, url=redact_url(screen.url), screenshot_format=shot.format,
                                  screenshot_data=shot.data, screenshot_sha256=shot.sha256),
            level=risk.level, reasons=risk.reasons, reversible=risk.level != "L3",
            digest=binding_digest(raw, screen.url, shot.sha256),
            timeout_s=self.policy.confirmation_timeout_s, attempt=attempt,
        )

    async def _refuse(self, client: SandboxAPI, record: dict[str, Any], done: list[dict[str, Any]],
                      risks: list[dict[str, Any]], rule: str, message: str, index: int = 0) -> StepOutcome:
        self.emit("step", **record, actions=done, risks=risks, finished_at=utc_now(), decision="denied", rule=rule,
                  reason=message, refused_index=index, outcome="denied")
        self.sm.to(RunState.RECOVERY, message)
        obs = await self._look(client)
        return StepOutcome("denied", obs, {"code": "policy_denied", "message": message, "rule": rule})

    async def _screen_changed(self, client: SandboxAPI, record: dict[str, Any], done: list[dict[str, Any]],
                              risks: list[dict[str, Any]], exc: ScreenChangedError, index: int) -> StepOutcome:
        """The daemon refused an action whose screen changed: the step is refused (nothing of
        that action was sent) and the agent gets a fresh observation to plan on."""
        reason = _changed_reason(exc)
        message = (f"the screen under action {index} changed since the screenshot it was planned on ({reason}); "
                   "nothing was pressed: plan again on this observation")
        self.emit("step", **record, actions=done, risks=risks, finished_at=utc_now(), decision="denied",
                  rule="screen_changed", reason=message, refused_index=index, outcome="denied")
        self.sm.to(RunState.RECOVERY, message)
        obs = await self._look(client)
        return StepOutcome("denied", obs, {"code": "screen_changed", "message": message, "rule": "screen_changed"})

    async def _failed(self, client: SandboxAPI, record: dict[str, Any], done: list[dict[str, Any]],
                      risks: list[dict[str, Any]], exc: DeskpodError, index: int) -> StepOutcome:
        self.emit("step", **record, actions=done, risks=risks, finished_at=utc_now(), decision="allowed",
                  outcome="error", failed_index=index, error={"code": exc.code, "message": exc.message})
        self.sm.to(RunState.RECOVERY, f"{exc.code}: {exc.message}")
        obs = await self._look(client)
        return StepOutcome("error", obs, {"code": exc.code, "message": exc.message})

    async def _look(self, client: SandboxAPI) -> Observation:
        obs = await client.act([], ObserveOptions(page_text=True, text_sources=self._scans, snapshot=self.snapshots),
                               timeout_s=self.limits.action_timeout_s)
        return self._observed(self._count_screenshot(obs), f"step {self.steps}")


def _changed_reason(exc: ScreenChangedError) -> str:
    """The sandbox's reason for a ``screen_changed`` refusal, if it is one of the known ones
    (the detail is untrusted: anything else is ``"unspecified"``)."""
    reason = exc.detail.get("reason")
    return reason if reason in ("region", "element", "url", "unknown_screenshot") else "unspecified"


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

