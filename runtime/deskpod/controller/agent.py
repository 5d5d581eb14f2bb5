"""The agent interface of both run kinds: whatever proposes the next move (a script, a model loop).

The controller owns the loop: it shows the agent what it may see, asks it for its
next move with :meth:`Agent.propose`, decides whether that move may happen, carries
it out, and reports what happened on the next call. Nothing an agent says is
trusted. GUI runs (:mod:`.gui_agent`) see observations and propose batches of
actions; code runs (:mod:`.code_agent`) see their last tool call's feedback and
propose tool calls. The scripted agent of a task file is :class:`ScriptedAgent`
for both; the model agents (OpenAI, Anthropic) live in :mod:`deskpod.agents`,
which depends on this interface, never the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["Agent", "ScriptedAgent"]

ViewT = TypeVar("ViewT", contravariant=True)
FeedbackT = TypeVar("FeedbackT", contravariant=True)
MoveT = TypeVar("MoveT", covariant=True)
ScriptT = TypeVar("ScriptT")


@runtime_checkable
class Agent(Protocol[ViewT, FeedbackT, MoveT]):
    """Proposes moves.

    ``propose`` is called with what the agent may see now (``ViewT``: a GUI run's
    observation, nothing for a code run) and the feedback on its previous move
    (``None`` at the first call); it returns the next move (``MoveT``), which
    includes the agent's way of saying it has finished. ``close`` releases what the
    agent holds (HTTP clients).
    """

    async def propose(self, view: ViewT, last: FeedbackT | None) -> MoveT:
        """Return the next move."""
        ...

    async def close(self) -> None:
        """Release what the agent holds."""
        ...


class ScriptedAgent(Generic[ScriptT]):
    """The scripted agent of a task file: its moves in order, whatever the feedback, then ``end``.

    Args:
        moves: the moves to play.
        end: returned once every move has been played (a GUI run's ``Done``, a code
            run's ``None``).
    """

    def __init__(self, moves: Sequence[ScriptT], end: ScriptT) -> None:
        self._moves = list(moves)
        self._end = end
        self._next = 0

    async def propose(self, view: object, last: object) -> ScriptT:
        """Return the next scripted move, or ``end`` after the last one.

        Args:
            view: ignored. last: ignored.

        Returns:
            The next move.
        """
        if self._next >= len(self._moves):
            return self._end
        move = self._moves[self._next]
        self._next += 1
        return move

    async def close(self) -> None:
        """Nothing to release."""
