"""The agent side of a run: whatever proposes actions (a script, a model loop).

The controller owns the loop (seed 002 §5.2): it observes, asks the agent for a
:class:`Proposal`, validates it, asks for a confirmation when the risk calls for
one, executes it, and tells the agent the :class:`StepOutcome` on the next call.
Nothing an agent says is trusted: a :class:`Done` is a claim the controller then
verifies from the environment, and a proposal's own ``risk`` label can raise the
risk level the controller assigns, never lower it.

An agent is any object with the :class:`Agent` methods; the scripted agent of a
task file is :class:`ScriptedAgent`. Model agents (OpenAI, Anthropic) live in
:mod:`deskpod.agents`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from deskpod.controller.levels import RiskLevel
from deskpod.protocol import Observation

__all__ = ["Agent", "Done", "Proposal", "ScriptedAgent", "StepOutcome"]


@dataclass(frozen=True)
class Proposal:
    """One batch of actions the agent wants executed.

    ``actions``: protocol actions, coordinates in the model space. ``sensitive``:
    typed text is redacted in the audit log. ``risk``: the agent's own label, which
    may raise the controller's level, never lower it (``"L0"``..``"L3"``, seed 002 §8.3). ``safety_checks``: warnings
    the model vendor attached (OpenAI's ``pending_safety_checks`` messages); any
    makes the step need a confirmation. ``intent``: the agent's stated reason, kept
    in the audit log as untrusted text.
    """

    actions: Sequence[BaseModel]
    sensitive: bool = False
    risk: RiskLevel | None = None
    safety_checks: Sequence[str] = ()
    intent: str = ""


@dataclass(frozen=True)
class Done:
    """The agent says the task is finished. ``claim`` is its own words (untrusted);
    the controller decides success from the environment."""

    claim: str = ""


@dataclass(frozen=True)
class StepOutcome:
    """What happened to the agent's previous proposal.

    ``status``: ``"ok"`` (executed), ``"error"`` (the sandbox refused or failed it:
    ``error`` holds ``{"code", "message"}``), ``"denied"`` (policy or the human
    refused it: ``error`` holds the reason and nothing was executed).
    ``observation``: the screen after the step (after ``"ok"``), or the current one.
    """

    status: Literal["ok", "error", "denied"]
    observation: Observation
    error: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Agent(Protocol):
    """Proposes actions. ``propose`` is called with the current observation (screenshot
    in the model space) and the outcome of the previous proposal (``None`` at the
    first call); it returns the next :class:`Proposal`, or :class:`Done`.
    ``close`` releases what the agent holds (HTTP clients)."""

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        ...

    async def close(self) -> None:
        ...


class ScriptedAgent:
    """The scripted agent of a task file: its steps in order, then :class:`Done`.

    Args:
        steps: ``(actions, sensitive)`` pairs.
    """

    def __init__(self, steps: Sequence[tuple[Sequence[BaseModel], bool]]) -> None:
        self._steps = list(steps)
        self._next = 0

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        """Return the next scripted step, or :class:`Done` after the last one."""
        if self._next >= len(self._steps):
            return Done("the script has no more steps")
        actions, sensitive = self._steps[self._next]
        self._next += 1
        return Proposal(actions=actions, sensitive=sensitive)

    async def close(self) -> None:
        """Nothing to release."""
