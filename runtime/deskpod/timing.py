"""Phase timings: how many seconds a sequence spent in each of its named steps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["timed_phase"]


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
