"""Automatic tab recovery: a page that does not answer, recovered by the controller itself.

With the policy's ``recover_unresponsive`` on
(:class:`~deskpod.controller.policy.policy_file.Policy`), the observation after a step that
lists unresponsive tabs (:attr:`~deskpod.protocol.Observation.unresponsive`: pages stuck in
an endless script, found within 2.5 s) has each of them recovered before the agent plans
again: a ``recover_tab`` action (:class:`~deskpod.protocol.RecoverTab`, ``L1``: the page's
URL loaded again) sent by the controller, one ``tab_recovered`` audit record each (the tab,
its redacted URL, how long it had not answered, and the outcome: ``"recovered"`` or the
sandbox's error code), and the agent is given the observation after them. A policy that
blocks ``recover_tab`` actions, or would have a person confirm them, turns this off (the
agent is told, and its ``recover_tab`` is judged and confirmed as any action). Off (the
default), the agent is told and decides: a page busy with a long computation looks the same
for a while.
"""

from __future__ import annotations

from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.judge import Judge
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui_agent import StepOutcome
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.policy.risk import ActionContext
from deskpod.controller.sandbox import SandboxAPI
from deskpod.errors import BadReplyError, DeskpodError
from deskpod.protocol import RecoverTab

__all__ = ["TabRecovery"]


class TabRecovery:
    """Recovers the unresponsive tabs a step's observation lists, when the policy allows."""

    def __init__(self, record: RunRecord, allowlist: Allowlist, judge: Judge) -> None:
        self.record = record
        self.allowlist = allowlist
        self.judge = judge

    @property
    def enabled(self) -> bool:
        """Whether the run's policy recovers tabs itself: it asks for that, and neither blocks
        ``recover_tab`` actions nor would have a person confirm one (its level as the run's judge
        rates it with no page under it, ``confirm_actions`` included, in ``confirm_levels``): no
        person is asked here."""
        policy, action = self.record.policy, RecoverTab(type="recover_tab")
        risk = self.judge.confirmed_type(self.judge.classifier.classify(action, ActionContext()), action)
        return (policy.recover_unresponsive and "recover_tab" not in policy.blocked_actions
                and risk.level not in policy.confirm_levels)

    async def after_step(self, client: SandboxAPI, outcome: StepOutcome) -> StepOutcome:
        """``outcome`` with its observation taken after recovering each tab it lists as
        unresponsive (unchanged when none is, or the policy does not allow it).

        Raises:
            BadReplyError: the sandbox's reply broke the protocol.
            PolicyDeniedError: a tab is then at a URL the allowlists refuse (as after any step).
        """
        if not self.enabled or not outcome.observation.unresponsive:
            return outcome
        run, observation = self.record, outcome.observation
        for page in list(outcome.observation.unresponsive):
            try:
                observation = await client.act([RecoverTab(type="recover_tab", tab_id=page.tab_id)], run.full_look(),
                                               timeout_s=run.limits.action_timeout_s)
                result = "recovered"
            except BadReplyError:
                raise
            except DeskpodError as exc:
                result = exc.code
            run.emit("tab_recovered", step=run.steps, tab_id=page.tab_id, url=redact_url(page.url or ""),
                     unresponsive_s=page.unresponsive_s, result=result)
        if observation is outcome.observation:
            observation = await client.act([], run.full_look(), timeout_s=run.limits.action_timeout_s)
        self.allowlist.observed(run.count_screenshot(observation), f"tab recovery after step {run.steps}")
        return StepOutcome(outcome.status, observation, outcome.error)
