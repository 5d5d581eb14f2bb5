"""The GUI side of the agent interface: proposals of actions, and what the agent is told.

The controller owns the loop: it observes, asks the agent for a
:class:`Proposal`, validates it, asks for a confirmation when the risk calls for
one, executes it, and tells the agent the :class:`StepOutcome` on the next call.
Nothing an agent says is trusted: a :class:`Done` is a claim the controller then
verifies from the environment, and a proposal's own ``risk`` label can raise the
risk level the controller assigns, never lower it.

A GUI agent is a :data:`GuiAgent` (the :class:`~deskpod.controller.agent.Agent`
interface over observations); the scripted agent of a task file is
:func:`scripted_gui_agent`. Model agents (OpenAI, Anthropic) live in
:mod:`deskpod.agents` and reach the runner through a :data:`GuiAgentFactory`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from deskpod.controller.agent import Agent, ScriptedAgent
from deskpod.controller.credentials import ProposedAction
from deskpod.controller.policy.levels import RiskLevel
from deskpod.protocol import WINDOW_ACTION_TYPES, Observation, Size

if TYPE_CHECKING:
    from deskpod.controller.task import ModelAgentSpec

__all__ = ["Done", "GuiAgent", "GuiAgentFactory", "Proposal", "StepOutcome", "TITLE_PREFIX", "scripted_gui_agent"]

TITLE_PREFIX = "title:"
"""A scripted window action's ``window_id`` that starts with it names its window by title
(:func:`scripted_gui_agent`)."""


@dataclass(frozen=True)
class Proposal:
    """One batch of actions the agent wants executed.

    ``actions``: protocol actions, coordinates in the model space. ``sensitive``:
    typed text is redacted in the audit log. ``risk``: the agent's own label, which
    may raise the controller's level, never lower it (``"L0"``..``"L3"``). ``safety_checks``: warnings
    the model vendor attached (OpenAI's ``pending_safety_checks`` messages); any
    makes the step need a confirmation. ``intent``: the agent's stated reason, kept
    in the audit log as untrusted text. ``console``, ``network``: the observation after
    it also carries the page's console messages, its network requests
    (:attr:`~deskpod.protocol.ObserveOptions.console`, :attr:`~deskpod.protocol.ObserveOptions.network`).
    """

    actions: Sequence[ProposedAction]
    sensitive: bool = False
    risk: RiskLevel | None = None
    safety_checks: Sequence[str] = ()
    intent: str = ""
    console: bool = False
    network: bool = False


@dataclass(frozen=True)
class Done:
    """The agent says the task is finished. ``claim`` is its own words (untrusted);
    the controller decides success from the environment."""

    claim: str = ""


@dataclass(frozen=True)
class StepOutcome:
    """What happened to the agent's previous proposal.

    ``status``: ``"ok"`` (executed), ``"error"`` (the sandbox refused or failed it:
    ``error`` holds ``{"code", "message"}`` and the failure's ``"reason"`` when it gave one,
    an identifier such as ``"no_desktop"``), ``"denied"`` (policy or the human
    refused it: ``error`` holds the reason and nothing was executed).
    ``observation``: the screen after the step (after ``"ok"``), or the current one.
    """

    status: Literal["ok", "error", "denied"]
    observation: Observation
    error: dict[str, str] = field(default_factory=dict)


GuiAgent: TypeAlias = Agent[Observation, StepOutcome, Proposal | Done]
"""A GUI run's agent: ``propose(observation, last outcome)`` → :class:`Proposal` or :class:`Done`.
The observation's screenshot is the model space's size unless the daemon scaled it down
(:attr:`~deskpod.protocol.Screenshot.fitted`); a proposal's coordinates are in the model space."""

GuiAgentFactory: TypeAlias = Callable[["ModelAgentSpec", Size], GuiAgent]
"""Builds the model agent a task's ``agent:`` block names for screenshots of a size
(:func:`deskpod.agents.create_agent`)."""


class _ScriptedGuiAgent:
    """A GUI task file's steps in order, then ``end``; a step the sandbox refused with
    ``screen_changed`` (nothing of it was pressed) is proposed once more, on the fresh
    observation: a script's plan is its coordinates, so re-planning is playing it again,
    and the controller judges the control there again before it is sent. A window action whose
    ``window_id`` is ``title:TEXT`` acts on the first window of the observation's list whose
    title holds ``TEXT`` (left as it is when none does: the sandbox then answers ``no_window``)."""

    def __init__(self, moves: Sequence[Proposal], end: Done) -> None:
        self._script = ScriptedAgent[Proposal | Done](moves, end)
        self._last: Proposal | Done | None = None
        self._retried = False

    async def propose(self, view: Observation, last: StepOutcome | None) -> Proposal | Done:
        if (last is not None and last.error.get("code") == "screen_changed" and not self._retried
                and self._last is not None):
            self._retried = True
            return self._last
        self._retried = False
        move = await self._script.propose(view, last)
        if isinstance(move, Proposal):
            move = dataclasses.replace(move, actions=[_by_title(a, view) for a in move.actions])
        self._last = move
        return move

    async def close(self) -> None:
        await self._script.close()


def _by_title(action: ProposedAction, view: Observation) -> ProposedAction:
    """``action`` with a ``title:TEXT`` window id replaced by the id of the first listed window
    whose title holds ``TEXT`` (the agent's windows first)."""
    wanted = getattr(action, "window_id", "")
    if action.type not in WINDOW_ACTION_TYPES or not wanted.startswith(TITLE_PREFIX):
        return action
    listed = sorted(view.windows or [], key=lambda window: window.zone != "agent")
    found = next((w for w in listed if wanted[len(TITLE_PREFIX):] in (w.title or "")), None)
    return action if found is None else action.model_copy(update={"window_id": found.id})


def scripted_gui_agent(steps: Sequence[tuple[Sequence[ProposedAction], bool]]) -> GuiAgent:
    """The scripted agent of a GUI task file: its steps in order, then :class:`Done`; a step
    refused with ``screen_changed`` is proposed once more on the fresh observation; a window
    action may name its window ``title:TEXT`` (:data:`TITLE_PREFIX`).

    Args:
        steps: ``(actions, sensitive)`` pairs.

    Returns:
        A :data:`GuiAgent`.
    """
    moves = [Proposal(actions=actions, sensitive=sensitive) for actions, sensitive in steps]
    return _ScriptedGuiAgent(moves, Done("the script has no more steps"))
