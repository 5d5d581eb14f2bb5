"""The run's state machine.

::

    Initializing → Observing → Verifying → Planning → Validating
    Validating → Executing (low risk) | AwaitingConfirmation (high risk) | Failed (refused)
    AwaitingConfirmation → Executing (approved, same screen) | Validating (screen changed) | Cancelled
    Executing → Waiting → Observing;  Executing → Recovery (the sandbox refused or failed)
    Verifying → Succeeded (the environment shows success) | Planning | Recovery
    Recovery → Planning (recoverable) | Failed;  any live state → Paused → its state again | Cancelled
    any live state → Failed | Cancelled (limits, policy, the human)
    any live state → Ended (its agent ended the session without asking for a verdict)

Transitions are decided by the controller's code from evidence in the
environment; an agent's words never move the machine (a "done" claim only leads
to Verifying). Every transition goes to the audit log with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from deskpod.errors import InvalidTransition

__all__ = ["RunState", "StateMachine", "TERMINAL"]


class RunState(str, Enum):
    """A state of a run; the value is what the audit log shows."""

    INITIALIZING = "initializing"
    OBSERVING = "observing"
    VERIFYING = "verifying"
    PLANNING = "planning"
    VALIDATING = "validating"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    EXECUTING = "executing"
    WAITING = "waiting"
    RECOVERY = "recovery"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ENDED = "ended"


TERMINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.ENDED})
"""States a run ends in."""

S = RunState
_NEXT: dict[RunState, frozenset[RunState]] = {
    S.INITIALIZING: frozenset({S.OBSERVING}),
    S.OBSERVING: frozenset({S.VERIFYING, S.RECOVERY}),
    S.VERIFYING: frozenset({S.SUCCEEDED, S.PLANNING, S.RECOVERY}),
    S.PLANNING: frozenset({S.VALIDATING, S.VERIFYING}),
    S.VALIDATING: frozenset({S.EXECUTING, S.AWAITING_CONFIRMATION, S.RECOVERY}),
    S.AWAITING_CONFIRMATION: frozenset({S.EXECUTING, S.VALIDATING}),
    S.EXECUTING: frozenset({S.WAITING, S.VALIDATING, S.RECOVERY}),
    S.WAITING: frozenset({S.OBSERVING}),
    S.RECOVERY: frozenset({S.PLANNING, S.OBSERVING}),
    S.PAUSED: frozenset(),
}
_ANYTIME = frozenset({S.FAILED, S.CANCELLED, S.ENDED, S.PAUSED})


class StateMachine:
    """Holds the current state and checks every transition.

    Args:
        on_change: called as ``on_change(old, new, reason)`` after each transition
            (the runner writes it to the audit log).
    """

    def __init__(self, on_change: Callable[[RunState, RunState, str], None]) -> None:
        self.state = RunState.INITIALIZING
        self._before_pause: RunState | None = None
        self._on_change = on_change

    def to(self, new: RunState, reason: str = "") -> None:
        """Move to ``new``.

        Raises:
            InvalidTransition: ``new`` is not reachable from the current state
                (a paused run may only return to the state it paused in, or end).
        """
        old = self.state
        if old in TERMINAL:
            raise InvalidTransition(f"the run already ended ({old.value})")
        if old is RunState.PAUSED:
            allowed = {self._before_pause} | {S.FAILED, S.CANCELLED, S.ENDED}
        else:
            allowed = set(_NEXT[old] | _ANYTIME)
        if new not in allowed:
            raise InvalidTransition(f"no transition from {old.value} to {new.value}")
        if new is RunState.PAUSED:
            self._before_pause = old
        self.state = new
        self._on_change(old, new, reason)

    @property
    def ended(self) -> bool:
        """Whether the run is in a terminal state."""
        return self.state in TERMINAL
