"""Run limits of both run kinds: one base with the common fields, and each kind's own.

A run stops when it reaches any limit; the reason names it
(``limit reached: max_steps=...``). :class:`RunLimits` holds what every run has (a
step count and a wall-time bound); :class:`Limits` (GUI runs) and
:class:`CodeLimits` (code runs) add their own and keep their own defaults.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT

__all__ = ["CodeLimits", "Limits", "RunLimits"]

_L = TypeVar("_L", bound="RunLimits")


class RunLimits(BaseModel):
    """``max_steps``: steps the agent proposes (GUI: action batches; code: tool calls);
    ``max_wall_time_s``: seconds for the whole run, time waiting for a human included."""

    model_config = STRICT
    max_steps: Annotated[int, Field(ge=1, le=10_000)] = 50
    max_wall_time_s: Annotated[float, Field(gt=0, le=86_400)] = 300.0

    def capped(self: _L, other: _L | None) -> _L:
        """Each limit as the smaller of this one's and ``other``'s.

        Args:
            other: the caps (an operator's policy), or ``None``.

        Returns:
            The capped limits (this object when ``other`` is ``None``).
        """
        if other is None:
            return self
        return type(self)(**{name: min(getattr(self, name), getattr(other, name)) for name in type(self).model_fields})


class Limits(RunLimits):
    """GUI run limits: the common ones, and ``max_repeats`` (this many
    identical steps in a row, same actions, URL and screen, are a loop that pauses the
    run), ``max_screenshots`` (screenshots taken for the agent and for confirmations),
    ``action_timeout_s`` (seconds one action may take in the sandbox, settling
    included), ``max_errors`` (consecutive failed or refused steps before the run
    fails instead of letting the agent retry) and ``max_looks`` (proposals that only
    look: screenshot, zoom, cursor position, wait; they are no steps and no loop, and
    past this many each is refused with ``limit_exceeded`` while the run goes on:
    :mod:`deskpod.controller.gui.looks`)."""

    max_repeats: Annotated[int, Field(ge=2, le=1000)] = 3
    max_screenshots: Annotated[int, Field(ge=1, le=100_000)] = 500
    action_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    max_errors: Annotated[int, Field(ge=1, le=100)] = 3
    max_looks: Annotated[int, Field(ge=0, le=100_000)] = 200


class CodeLimits(RunLimits):
    """Code run limits: the common ones (wall time 600 s by default), and
    ``retry_budget``: failed test runs (the agent's or a claim's verification) allowed
    after the first one before the run stops."""

    max_wall_time_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0
    retry_budget: Annotated[int, Field(ge=0, le=100)] = 3
