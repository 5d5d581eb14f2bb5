"""Timings: how many seconds a sequence spent in each of its named steps, and how long one operation took and how it ended."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from deskpod.errors import error_code

__all__ = ["timed_outcome", "timed_phase"]


@contextmanager
def timed_phase(phases: dict[str, float] | None, name: str) -> Iterator[None]:
    """Add the time spent in the block to ``phases[name]``, seconds.

    Args:
        phases: the timings to add to; ``None``: nothing is recorded.
        name: the phase.
    """
    started = time.monotonic()
    try:
        yield
    finally:
        if phases is not None:
            phases[name] = phases.get(name, 0.0) + time.monotonic() - started


@contextmanager
def timed_outcome(report: Callable[[str, float], None]) -> Iterator[None]:
    """Call ``report(outcome, duration_s)`` once the block ends, however it ends; the block's exception propagates.

    Args:
        report: told the outcome, ``"ok"`` or the code of the exception that ended the block
            (:func:`~deskpod.errors.error_code`: ``"timeout"``, ``"bad_reply"``, ``"cancelled"``...),
            and the block's duration, seconds.
    """
    started = time.monotonic()
    outcome = "ok"
    try:
        yield
    except BaseException as exc:
        outcome = error_code(exc)
        raise
    finally:
        report(outcome, time.monotonic() - started)
