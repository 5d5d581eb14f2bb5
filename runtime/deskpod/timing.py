"""Timings: how many seconds a sequence spent in each of its named steps, and how long one operation took and how it ended."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from deskpod.errors import DeskpodError

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
        report: told the outcome, ``"ok"``, the :class:`~deskpod.errors.DeskpodError` code the
            block raised (``"bad_reply"``, ``"timeout"``...), ``"cancelled"``, or ``"error"`` for
            any other exception, and the block's duration, seconds.
    """
    started = time.monotonic()
    outcome = "error"
    try:
        yield
        outcome = "ok"
    except DeskpodError as exc:
        outcome = exc.code
        raise
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        report(outcome, time.monotonic() - started)
