"""Looks: proposals that only look, answered outside the steps.

A proposal whose every action sends the sandbox no input (``screenshot``, ``zoom``,
``cursor_position``, ``wait``, ``wait_for``: :data:`~deskpod.protocol.NO_INPUT_ACTION_TYPES`)
is a *look*, unless something asks a person about it: the agent's own risk label above
``L0``, a vendor's safety check, or a policy that confirms one of its action types or
level ``L0`` (such a proposal is a step, judged and confirmed as ever). Polling the
screen while a page loads is what agents do, and looking is not acting, so a look

- is no step: it does not count toward ``max_steps`` or ``max_errors``, and the loop
  detector (:mod:`deskpod.controller.policy.loops`: the same *actions* again without
  progress) never sees it;
- is never discarded as planned before a take-over: it plans nothing, so after the
  person hands the sandbox back it is answered with the screen as they left it;
- is audited, one ``look`` record each (the actions, the URL and title, the screenshot's
  SHA-256, the outcome), and its screenshot counts toward ``max_screenshots`` like any other;
- is bounded by its own limit, ``max_looks`` per run
  (:class:`~deskpod.controller.policy.run_limits.Limits`): past it a look is refused
  with ``limit_exceeded`` (rule ``max_looks``) and nothing is captured, while the run
  goes on, neither paused nor failed; the agent may still act, and each action's answer
  carries the screen after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deskpod.controller.audit_log import redact_action, utc_now
from deskpod.controller.credentials import ProposedAction, RequestCredential, TypeSecret
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.human import Human
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui_agent import Proposal, StepOutcome
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.sandbox import SandboxAPI
from deskpod.errors import BadReplyError, DeskpodError, PolicyError
from deskpod.protocol import NO_INPUT_ACTION_TYPES, Action, Observation

__all__ = ["Looks"]


class Looks:
    """Answers one run's looks (see the module).

    Args:
        run: the run's record.
        allowlist: checks the URLs of what a look shows.
        human: the checkpoint before each look (a pause, a cancel, a take-over).
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist, human: Human) -> None:
        self.run = run
        self.allowlist = allowlist
        self.human = human
        self.count = 0

    def takes(self, proposal: Proposal) -> bool:
        """Whether ``proposal`` is a look (see the module): at least one action, none that sends
        the sandbox input, and nothing that asks a person about it."""
        policy = self.run.policy
        actions: Sequence[ProposedAction] = proposal.actions
        return (bool(actions) and all(a.type in NO_INPUT_ACTION_TYPES for a in actions)
                and proposal.risk in (None, "L0") and not proposal.safety_checks
                and "L0" not in policy.confirm_levels and not any(a.type in policy.confirm_actions for a in actions))

    async def look(self, client: SandboxAPI, proposal: Proposal) -> StepOutcome:
        """Answer ``proposal``, a look (:meth:`takes`), with the screen after its actions.

        Returns:
            ``ok`` with the observation after the actions; ``denied`` (nothing sent, nothing
            captured: the last observation without its screenshot) when the policy blocks one
            of the action types (rule ``blocked_action``) or the run's ``max_looks`` looks
            were answered (code ``limit_exceeded``, rule ``max_looks``); ``error`` with a
            fresh observation when the sandbox failed them.

        Raises:
            RunCancelledError: the run was cancelled (or paused and not resumed) before the look.
            PolicyDeniedError: a tab is off an allowlist (the run stops).
            LimitExceededError: the run took more than ``max_screenshots``.
            BadReplyError: the sandbox broke the wire contract.
        """
        run = self.run
        actions: list[Action] = [a for a in proposal.actions if not isinstance(a, (RequestCredential, TypeSecret))]
        record: dict[str, Any] = {"look": self.count + 1, "started_at": utc_now(), "intent": proposal.intent[:500],
                                  "actions": [redact_action(a, False) for a in actions]}
        await self.human.checkpoint(client)  # after a take-over the look shows the screen handed back
        blocked = next((a.type for a in actions if a.type in run.policy.blocked_actions), None)
        if blocked is not None:
            return self._refused(record, "policy_denied", "blocked_action", f"the policy blocks {blocked!r} actions")
        if self.count >= run.limits.max_looks:
            return self._refused(record, "limit_exceeded", "max_looks",
                                 f"limit reached: max_looks={run.limits.max_looks} looks (screenshot, zoom, cursor "
                                 "position, wait) in this run; nothing was captured. The run goes on: act, or "
                                 "finish (every action's answer shows the screen after it)")
        self.count += 1
        try:
            obs = await client.act(actions, run.full_look(proposal.console, proposal.network),
                                   timeout_s=run.limits.action_timeout_s * len(actions))
        except (BadReplyError, PolicyError):
            raise
        except DeskpodError as exc:
            run.emit("look", **record, finished_at=utc_now(), outcome="error",
                     error={"code": exc.code, "message": exc.message})
            return StepOutcome("error", await self.allowlist.look(client), {"code": exc.code, "message": exc.message})
        self.allowlist.observed(run.count_screenshot(obs), f"look {self.count}")
        shot = obs.screenshot
        run.emit("look", **record, finished_at=utc_now(), outcome="ok", url=redact_url(obs.url),
                 title=obs.title, screenshot_sha256=shot.sha256 if shot is not None else None)
        return StepOutcome("ok", obs)

    def _refused(self, record: dict[str, Any], code: str, rule: str, message: str) -> StepOutcome:
        """A look refused before anything was sent, written to the audit log."""
        self.run.emit("look", **record, finished_at=utc_now(), outcome="denied", rule=rule, reason=message)
        return StepOutcome("denied", self._unchanged(), {"code": code, "message": message, "rule": rule})

    def _unchanged(self) -> Observation:
        """The last observation without its screenshot: a refused look captures nothing."""
        last = self.run.last_obs
        assert last is not None, "a look comes after the start page's observation"
        return last.model_copy(update={"screenshot": None})
