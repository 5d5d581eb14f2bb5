"""Virtual time for asyncio tests whose assertions are about durations of milliseconds.

Under :func:`virtual_time`, ``asyncio.run`` makes loops whose clock stands still while a
callback runs and jumps to the next timer when nothing is ready, and ``time.monotonic()``
reads that clock while such a loop runs. A test of "a paint 5 ms after the first is waited
out" then sees exactly 5 ms pass, however loaded the machine is: on a busy one the real
event loop woke late and such tests failed now and then.

Only for code that waits on timers and on other coroutines: an await that a thread or a
socket completes would see the clock jump past its timeout.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["virtual_time"]


class _Selector(selectors.DefaultSelector):
    """A selector that never blocks: waiting ``timeout`` seconds moves its loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0 if timeout is not None else None)
        if not ready and timeout is not None and timeout > 0:
            self.now += timeout
        return ready


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _Selector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


class _Policy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _VirtualTimeLoop()


@contextmanager
def virtual_time() -> Iterator[None]:
    """Run every ``asyncio.run`` in the block on virtual time (``time.monotonic`` too, inside it)."""
    real_monotonic = time.monotonic

    def monotonic() -> float:
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            return real_monotonic()
        return loop.time() if isinstance(loop, _VirtualTimeLoop) else real_monotonic()

    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_Policy())
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(time, "monotonic", monotonic)
            yield
    finally:
        asyncio.set_event_loop_policy(previous)
