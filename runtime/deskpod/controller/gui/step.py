"""One step of a GUI run: a proposal validated and executed action by action.

Before each action the run honours a pause, cancel or take-over (:mod:`.human`) and
refuses the policy's blocked actions. A secret is typed by :mod:`.secrets`; typing and Enter
while a file chooser is reported answer it (:mod:`.chooser`); an element
action is replaced by what it runs as (:meth:`~.judge.Judge.by_ref`); every other action
is judged on the control under its point (:mod:`.judge`; a ``navigate`` to a URL off the
allowlists is refused there, nothing sent, and the run goes on), waits for a person's approval
at a confirmation level (:mod:`.confirming`), runs key by key when it is keyed input
(:mod:`.keyed`) or else goes to the daemon bound to the screen it was planned on
(:func:`~deskpod.protocol.expect.expectation`), and the URLs after it are checked (:mod:`.allowlist`).

The step ends with one ``step`` audit event written from its :class:`~.step_record.StepRecord`:
``ok`` when every action ran; ``denied`` (nothing of the refused action was sent: the
policy, a person's take-over, a secret's check, or the screen changed under the action);
``error`` (the sandbox failed an action); ``cancelled`` (a person refused a keyed
input's piece: the run ends). A step its agent withdrew (:meth:`~deskpod.controller.run_api.RunControl.withdraw`)
ends ``denied`` (rule ``withdrawn``) before its next action or at the question it waits
on. The agent is told the outcome with a fresh observation.
"""

from __future__ import annotations

import re
from typing import Any

from deskpod.controller.audit_log import redact_action
from deskpod.controller.credentials import ProposedAction, RequestCredential, TypeSecret
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.chooser import ChooserTyping
from deskpod.controller.gui.confirming import Confirmer
from deskpod.controller.gui.human import Human
from deskpod.controller.gui.judge import ELEMENT_ACTIONS, Judge, may_download
from deskpod.controller.gui.keyed import KeyedInput
from deskpod.controller.gui.record import RunRecord, changed_reason
from deskpod.controller.gui.secrets import Secrets
from deskpod.controller.gui.step_record import StepRecord
from deskpod.controller.gui_agent import Proposal, StepOutcome
from deskpod.controller.keysplit import may_move_focus
from deskpod.controller.policy.risk import ActionRisk, action_point
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.errors import (
    BadReplyError,
    DeskpodError,
    PolicyDeniedError,
    PolicyError,
    RunCancelledError,
    ScreenChangedError,
    StaleRefError,
    StepWithdrawnError,
)
from deskpod.protocol import Action, HoldKey, Keypress, Navigate, Observation, ObserveOptions, Point, TypeText
from deskpod.protocol.expect import expectation
from deskpod.tracing import traced
from deskpod.tracing.spans import POLICY_DECISION

__all__ = ["Step"]

_REASON = re.compile(r"[a-z][a-z0-9_]{0,39}")
"""A failure's ``detail["reason"]`` passed on to the agent: an identifier (the daemon's word, untrusted)."""


class Step:
    """Validates and executes one run's proposals (see the module).

    Args:
        run: the run's record.
        allowlist: checks the URLs after each action; the fresh observation after a refusal.
        human: the checkpoint before each action.
        judge: judges each action.
        confirmer: asks the person about an action at a confirmation level.
        keyed: runs keyed input piece by piece.
        secrets: types secrets.
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist, human: Human, judge: Judge, confirmer: Confirmer,
                 keyed: KeyedInput, secrets: Secrets) -> None:
        self.run = run
        self.allowlist = allowlist
        self.human = human
        self.judge = judge
        self.confirmer = confirmer
        self.keyed = keyed
        self.secrets = secrets
        self.chooser = ChooserTyping()
        """Typing and Enter while a file chooser is reported, read as its answer (:mod:`.chooser`)."""

    async def run_step(self, client: SandboxAPI, proposal: Proposal, before: Observation) -> StepOutcome:
        """Validate and execute ``proposal``, planned on ``before``, action by action.

        Returns:
            The outcome for the agent.

        Raises:
            PolicyError: the run stops (an allowlist refused a URL, a limit was reached, a
                person refused a confirmation or cancelled the run).
            BadReplyError: the sandbox broke the wire contract.
        """
        step = StepRecord.open(self.run.steps, proposal, before)
        if not step.actions:
            return await self._refuse(client, step, "empty_proposal", "the proposal has no actions")
        for index, action in enumerate(step.actions):
            step.index = index
            try:
                ended = await self._action(client, step, action)
            except StepWithdrawnError as exc:
                ended = await self._withdrawn(client, step, exc.message)
            if ended is not None:
                return ended
            if not step.last:
                self.run.sm.to(RunState.VALIDATING, f"action {index + 2}/{len(step.actions)}")
        self.run.count_screenshot(step.current)
        self.run.emit("step", **step.finished())
        return StepOutcome("ok", step.current)

    async def _action(self, client: SandboxAPI, step: StepRecord, action: ProposedAction) -> StepOutcome | None:
        """Validate and run the action at ``step.index``; the step's outcome when it ends the step."""
        blocked = self.run.policy.blocked_actions
        if self.run.control.withdrawn:
            return await self._withdrawn(client, step, self.run.control.withdraw_reason or "")
        if await self.human.checkpoint(client):
            return await self._refuse(client, step, "handed_over",
                                      "a human took the sandbox over: observe again before acting")
        if action.type in blocked:
            return await self._refuse(client, step, "blocked_action", f"the policy blocks {action.type!r} actions")
        if isinstance(action, (RequestCredential, TypeSecret)):
            return await self._secret(client, step, action)
        answered = self.chooser.answer(action, step.current)
        if isinstance(action, TypeText) and answered is None:  # only typed text fills the chooser's field
            await self._typed_into_chooser(client, step, action)
            return None
        if answered is not None and answered is not action:
            step.actions[step.index] = action = answered
            if action.type in blocked:
                return await self._refuse(client, step, "blocked_action", f"the policy blocks {action.type!r} actions")
        if isinstance(action, ELEMENT_ACTIONS):  # judged as the pixels it lands on
            try:
                action = await self.judge.by_ref(client, step, action)
            except (BadReplyError, PolicyError):
                raise
            except DeskpodError as exc:  # stale_ref included
                return await self._not_run(client, step, exc)
            if action.type in blocked:
                return await self._refuse(client, step, "blocked_action", f"the policy blocks {action.type!r} actions")
        try:
            risk = await self._judged(client, step, action)
        except PolicyDeniedError as exc:  # an address-bar URL off the allowlist stops the run
            if not isinstance(action, Navigate):
                raise
            return await self._refuse(client, step, str(exc.detail.get("rule", "allowlist")),
                                      f"the allowlists refuse {exc.detail.get('url')}: nothing was opened; "
                                      "open a page on the domains this run allows")
        except BadReplyError:
            raise
        except DeskpodError as exc:
            return await self._failed(client, step, exc)
        return await self._execute(client, step, action, risk)

    async def _judged(self, client: SandboxAPI, step: StepRecord, action: Action) -> ActionRisk:
        """Judge ``action`` on the control under it (probed: ``step.current`` becomes that look) and
        return its risk, in a ``policy_decision`` span saying the decision.

        Raises:
            PolicyDeniedError: an address-bar URL off the allowlists.
            DeskpodError: the probe failed.
        """
        with traced(POLICY_DECISION, step=self.run.steps, action_index=step.index, action=action.type) as decided:
            try:
                step.current = await self.judge.context(client, action, step.current, step.asked)
                risk = self.judge.assess(action, step.proposal, step.current)
            except PolicyDeniedError:
                decided.set(decision="deny")
                raise
            decided.set(risk=risk.level, decision="confirm" if risk.level in self.run.policy.confirm_levels
                        else "allow")
            return risk

    async def _secret(self, client: SandboxAPI, step: StepRecord,
                      action: RequestCredential | TypeSecret) -> StepOutcome | None:
        """Type a secret (:mod:`.secrets`); the step's outcome when it is refused or fails."""
        last = step.last
        options = ObserveOptions(screenshot=last, page_text=last, text_sources=last and self.run.scans)
        try:
            await self.secrets.type_secret(client, step, action, options)
        except (BadReplyError, RunCancelledError):
            raise
        except PolicyDeniedError as exc:
            if exc.detail.get("where") == "after":
                raise
            return await self._refuse(client, step, str(exc.detail.get("rule", "credential")), exc.message)
        except DeskpodError as exc:
            return await self._not_run(client, step, exc)
        return None

    async def _execute(self, client: SandboxAPI, step: StepRecord, action: Action,
                       risk: ActionRisk) -> StepOutcome | None:
        """Run the judged ``action`` (after a person's approval at a confirmation level) and
        record it; the step's outcome when the sandbox refused or failed it."""
        run, proposal, index = self.run, step.proposal, step.index
        # Text that moves the focus may carry a secret into a field not focused yet.
        shown = redact_action(action, proposal.sensitive or risk.sensitive or may_move_focus(action))
        approval = "not_required"
        if risk.level in run.policy.confirm_levels:
            run.sm.to(RunState.AWAITING_CONFIRMATION, f"{risk.level}: {risk.reasons[0] if risk.reasons else ''}")
            approval = "approved"
        entry: dict[str, Any] = {"index": index, "risk": risk.level, "reasons": list(risk.reasons),
                                 "target": risk.target, "approval": approval}
        if id(action) in step.via_of:
            entry["element"] = step.via_of[id(action)]
        step.risks.append(entry)
        note = f"action {index + 1}/{len(step.actions)}: {action.type}"
        last = step.last
        following = _point(step.actions[index + 1]) if not last else None
        options = ObserveOptions(screenshot=last, page_text=last, text_sources=last and run.scans,
                                 element_at=Point(x=following[0], y=following[1]) if following else None,
                                 snapshot=last and run.snapshots, console=last and proposal.console,
                                 network=last and proposal.network, windows=last)
        step.asked = following
        if isinstance(action, (TypeText, Keypress, HoldKey)):
            keyed = await self.keyed.run_action(client, step, action, risk, entry, options, note)
            step.current, shown, ran = keyed.observation, keyed.shown, keyed.timings
            if keyed.error is not None:
                run.recent_actions.append(shown)
                return await self._failed(client, step, keyed.error)
        else:
            try:
                if approval == "approved":
                    step.current = await self.confirmer.confirm(client, action, proposal, shown, risk, options, note)
                else:
                    run.sm.to(RunState.EXECUTING, note)
                    step.current = await client.act([action], options, timeout_s=run.limits.action_timeout_s,
                                                    expect=expectation(action, step.before, step.current),
                                                    allow_downloads=may_download(risk))
            except (BadReplyError, PolicyError):
                raise
            except DeskpodError as exc:
                return await self._not_run(client, step, exc)
            shown, ran = redact_action(action, proposal.sensitive or risk.sensitive), step.current.timings
        step.done.append(shown)
        step.timings += [{"index": index, "type": t.type, "duration_s": t.duration_s} for t in ran]
        run.recent_actions.append(shown)
        self.allowlist.observed(step.current, f"step {run.steps}")
        return None

    async def _typed_into_chooser(self, client: SandboxAPI, step: StepRecord, action: TypeText) -> None:
        """Typing that only filled the open file chooser's name field (:mod:`.chooser`): nothing is
        sent to the sandbox; the step looks at the screen as after any action."""
        run, last = self.run, step.last
        run.emit("file_chooser_typed", step=run.steps, index=step.index, chars=len(self.chooser.field))
        run.sm.to(RunState.EXECUTING, f"action {step.index + 1}/{len(step.actions)}: typed into the file chooser")
        step.current = await client.act([], ObserveOptions(screenshot=last, page_text=last),
                                        timeout_s=run.limits.action_timeout_s)
        shown = redact_action(action, step.proposal.sensitive)
        step.done.append(shown)
        run.recent_actions.append(shown)

    async def _refuse(self, client: SandboxAPI, step: StepRecord, rule: str, message: str,
                      code: str = "policy_denied") -> StepOutcome:
        """End the step refused at ``step.index`` (nothing of that action was sent)."""
        self.run.emit("step", **step.denied(rule, message))
        self.run.sm.to(RunState.RECOVERY, message)
        obs = await self.allowlist.look(client)
        return StepOutcome("denied", obs, {"code": code, "message": message, "rule": rule})

    async def _withdrawn(self, client: SandboxAPI, step: StepRecord, reason: str) -> StepOutcome:
        """End the step the agent withdrew at ``step.index`` (that action and the rest did not run)."""
        if self.run.sm.state is RunState.AWAITING_CONFIRMATION:
            self.run.sm.to(RunState.VALIDATING, "the step was withdrawn")
        return await self._refuse(client, step, "withdrawn",
                                  f"the step was withdrawn ({reason or 'by its agent'}): nothing more of it ran")

    async def _not_run(self, client: SandboxAPI, step: StepRecord, exc: DeskpodError) -> StepOutcome:
        """End the step on the sandbox's error for the action at ``step.index``: refused when the
        daemon found the screen changed under it (nothing of it was sent; the agent plans
        again on a fresh observation), failed otherwise."""
        if not isinstance(exc, ScreenChangedError):
            return await self._failed(client, step, exc)
        if isinstance(exc, StaleRefError):  # its own code (stale_ref, ref_obscured): the ref, not the screen
            message = f"{exc.message}; nothing was pressed: take a new snapshot and act on its refs"
        else:
            message = (f"the screen under action {step.index} changed since the screenshot it was planned on "
                       f"({changed_reason(exc)}); nothing was pressed: plan again on this observation")
        return await self._refuse(client, step, exc.code, message, code=exc.code)

    async def _failed(self, client: SandboxAPI, step: StepRecord, exc: DeskpodError) -> StepOutcome:
        """End the step on the sandbox's failure of the action at ``step.index``; the outcome's
        error carries the failure's ``detail["reason"]`` as ``reason`` when it is an identifier
        (``open_app``'s ``no_desktop``)."""
        self.run.emit("step", **step.failed(exc))
        self.run.sm.to(RunState.RECOVERY, f"{exc.code}: {exc.message}")
        obs = await self.allowlist.look(client)
        error = {"code": exc.code, "message": exc.message}
        reason = exc.detail.get("reason")
        if isinstance(reason, str) and _REASON.fullmatch(reason):
            error["reason"] = reason
        return StepOutcome("error", obs, error)


def _point(action: ProposedAction) -> tuple[int, int] | None:
    """Where ``action`` presses or releases a button (model space; a secret has no point)."""
    return None if isinstance(action, (RequestCredential, TypeSecret)) else action_point(action)
