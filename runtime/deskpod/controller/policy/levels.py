"""Risk levels shared by GUI actions and code commands: the levels, their order, their combination.

Four levels, from least to most consequential:

- ``L0`` observation: reading only (a screenshot, ``ls``, ``git diff``).
- ``L1`` reversible work: editing, typing into an ordinary field, building.
- ``L2`` widening data access or sending data: submitting a form, a network tool.
- ``L3`` irreversible or high impact: a payment, a deletion, installing packages,
  privilege changes.

The GUI classifier (:mod:`.risk`) and the code classifier (:mod:`.exec_risk`)
both assign these levels; the default policy asks a human before ``L2`` and ``L3``
(:data:`CONFIRM_LEVELS`).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CONFIRM_LEVELS", "RiskLevel", "level_rank", "max_level"]

RiskLevel = Literal["L0", "L1", "L2", "L3"]

CONFIRM_LEVELS: frozenset[str] = frozenset({"L2", "L3"})
"""Levels that run only after a confirmation (the default policy's ``confirm_levels``)."""

_RANK: dict[str, int] = {"L0": 0, "L1": 1, "L2": 2, "L3": 3}


def level_rank(level: RiskLevel) -> int:
    """The position of ``level`` in the order ``L0 < L1 < L2 < L3``.

    Args:
        level: a risk level.

    Returns:
        0 for ``L0`` up to 3 for ``L3``.
    """
    return _RANK[level]


def max_level(*levels: RiskLevel) -> RiskLevel:
    """The highest of ``levels``.

    Args:
        levels: any number of risk levels.

    Returns:
        The highest one, ``"L0"`` when none is given.
    """
    best: RiskLevel = "L0"
    for level in levels:
        if _RANK[level] > _RANK[best]:
            best = level
    return best
