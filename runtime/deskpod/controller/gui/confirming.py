"""Confirming one action of a GUI run: a person's approval bound to the exact action, URL and screen.

The person is shown the action, its level and reasons, the page's URL and a fresh
screenshot (:class:`~deskpod.controller.confirm.ConfirmationRequest`, whose digest binds
them: :func:`~deskpod.controller.confirm.binding_digest`). An approval must repeat that
digest. The approved action then goes to the daemon bound to the whole screen the person
saw (:func:`~deskpod.protocol.expect.expectation`); when the daemon finds it changed, the approval
is void, the action is judged again on the new screen and the person asked again, at most
the policy's ``max_confirmation_asks`` times.
"""

from __future__ import annotations

import uuid
from typing import Any

from deskpod.controller.confirm import ActionSubject, ConfirmationRequest, binding_digest
from deskpod.controller.gui.element_actions import action_ref
from deskpod.controller.gui.judge import Judge, may_download
from deskpod.controller.gui.record import RunRecord, changed_reason
from deskpod.controller.gui_agent import Proposal
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.policy.risk import ActionRisk, action_point
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.errors import RunCancelledError, ScreenChangedError, StepWithdrawnError
from deskpod.protocol import WINDOW_ACTION_TYPES, Action, Observation, ObserveOptions, Point
from deskpod.protocol.expect import expectation
from deskpod.tracing import traced
from deskpod.tracing.spans import CONFIRMATION_WAIT

__all__ = ["Confirmer"]


class Confirmer:
    """Asks a person about one run's actions and sends each approved one bound to the screen they saw.

    Args:
        run: the run's record (its channel, policy and audit log).
        judge: judges the action again when the screen changed after an approval.
    """

    def __init__(self, run: RunRecord, judge: Judge) -> None:
        self.run = run
        self.judge = judge

    async def confirm(self, client: SandboxAPI, action: Action, proposal: Proposal, shown: dict[str, Any],
                      risk: ActionRisk, options: ObserveOptions, note: str) -> Observation:
        """Ask until an approval binds to the screen as it is when the input is sent; run
        ``action`` then.

        Args:
            client: the sandbox.
            action: the action (or piece of a keyboard action) to confirm.
            proposal: the proposal it belongs to (its rules apply when it is judged again).
            shown: the action as recorded (typed text redacted when sensitive).
            risk: its risk.
            options: what to observe after it.
            note: the reason written with the move to ``executing``.

        Returns:
            The observation after the action (``options``).

        Raises:
            RunCancelledError: denied, not answered in time, or the screen kept changing.
            StepWithdrawnError: the agent withdrew the step meanwhile (the run goes on).
            LimitExceededError: the run's wall time ended while waiting.
            DeskpodError: the sandbox failed the action.
        """
        run = self.run
        timeout_s = run.limits.action_timeout_s
        point = action_point(action)
        # An element action kept as it is (select_option...) is judged at its ref's point again.
        ref = action_ref(action) if point is None else None
        look = ObserveOptions(element_at=Point(x=point[0], y=point[1]) if point else None, element_ref=ref,
                              windows=action.type in WINDOW_ACTION_TYPES)
        screen = run.count_screenshot(await client.act([], look, timeout_s=timeout_s))
        raw = action.model_dump(mode="json")
        for attempt in range(1, run.policy.max_confirmation_asks + 1):
            assert screen.screenshot is not None
            request = self._request(raw, shown, risk, screen, attempt)
            run.emit("confirmation_requested", id=request.id, digest=request.digest, summary=request.summary,
                     level=risk.level, reasons=list(risk.reasons), action=shown, url=redact_url(screen.url),
                     screenshot_sha256=screen.screenshot.sha256, attempt=attempt, self_approval=run.self_approval)
            with traced(CONFIRMATION_WAIT, step=run.steps, risk=risk.level, attempt=attempt) as waited:
                try:
                    answer = await run.answer(run.channel.confirm(request), request.timeout_s, withdrawable=True)
                except StepWithdrawnError:
                    run.emit("confirmation_answer", id=request.id, outcome="withdrawn", by="",
                             self_approval=run.self_approval)
                    raise
                outcome = ("timeout" if answer is None else "denied" if not answer.approved
                           else "wrong_digest" if answer.digest != request.digest else "approved")
                waited.set(outcome=outcome)
            if answer is None or outcome != "approved":
                run.emit("confirmation_answer", id=request.id, outcome=outcome,
                         by=answer.by if answer is not None else "", self_approval=run.self_approval)
                raise RunCancelledError(f"confirmation {outcome}: {request.summary}",
                                        detail={"cause": f"confirmation_{outcome}"})
            run.emit("confirmation_answer", id=request.id, outcome="approved", by=answer.by,
                     self_approval=run.self_approval)
            run.sm.to(RunState.EXECUTING, note)
            try:
                return await client.act([action], options, timeout_s=timeout_s,
                                        expect=expectation(action, screen, screen, whole_screen=True),
                                        allow_downloads=may_download(risk))
            except ScreenChangedError as exc:
                reason = f"the URL or the screen changed after the approval ({changed_reason(exc)})"
            fresh = run.count_screenshot(await client.act([], look, timeout_s=timeout_s))
            fresh_sha = fresh.screenshot.sha256 if fresh.screenshot else None
            run.emit("confirmation_void", id=request.id, reason=reason, url=redact_url(fresh.url),
                     screenshot_sha256=fresh_sha, self_approval=run.self_approval)
            run.sm.to(RunState.VALIDATING, reason)
            run.sm.to(RunState.AWAITING_CONFIRMATION, "asking again about the new screen")
            screen = fresh
            risk = self.judge.assess(action, proposal, fresh)
        raise RunCancelledError(f"the screen kept changing: asked {run.policy.max_confirmation_asks} times",
                                detail={"cause": "confirmation_void"})

    def _request(self, raw: dict[str, Any], shown: dict[str, Any], risk: ActionRisk, screen: Observation,
                 attempt: int) -> ConfirmationRequest:
        """The request a person is asked (its summary, subject, level and binding digest)."""
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
        elif kind in WINDOW_ACTION_TYPES:  # "close the 'Mousepad' window 'notes.txt - Mousepad'"
            summary = f"{kind.removeprefix('window_')} the {target}"
        elif kind == "navigate":  # what it opens, whatever has the focus
            summary = f"open {redact_url(raw['url'])}"
        else:
            summary = f"{kind.replace('_', ' ')} {target}{point}"
        policy = self.run.policy
        return ConfirmationRequest(
            id=f"confirm-{uuid.uuid4().hex[:12]}", run_id=self.run.run_id, step=self.run.steps, summary=summary,
            subject=ActionSubject(action=shown, data=data, url=redact_url(screen.url), screenshot_format=shot.format,
                                  screenshot_data=shot.data, screenshot_sha256=shot.sha256),
            level=risk.level, reasons=risk.reasons, reversible=risk.level != "L3",
            digest=binding_digest(raw, screen.url, shot.sha256),
            timeout_s=self.run.question_timeout(policy.confirmation_timeout_s), attempt=attempt,
        )
