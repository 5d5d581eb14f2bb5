"""Run async clients from synchronous code: a private event loop in a thread.

The synchronous facades (:class:`deskpod.client.SyncSandbox`,
:class:`deskpod.service.client.SyncControllerClient`) each own one
:class:`LoopThread`; every call is submitted to that loop and waited for, so the
async client's connection lives on one loop for its whole life.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread of its own.

    Args:
        name: the thread's name (shown in thread dumps).
    """

    def __init__(self, name: str = "deskpod-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result.

        Args:
            coroutine: what to run.
            timeout_s: how long to wait, seconds; ``None``: until it ends. On a
                timeout the coroutine is cancelled.

        Returns:
            The coroutine's result.

        Raises:
            RuntimeError: called from the loop's own thread (it would wait for
                itself), or after :meth:`close`.
            TimeoutError: no result within ``timeout_s``.
            Exception: whatever the coroutine raised.
        """
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a synchronous facade was called from its own event loop: use the async client")
        if self._loop.is_closed():
            coroutine.close()
            raise RuntimeError("the synchronous facade is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """Iterate ``iterator`` (an async iterator bound to this loop) synchronously."""
        while True:
            try:
                yield self.run(_next(iterator))
            except StopAsyncIteration:
                return

    def close(self) -> None:
        """Stop the loop and its thread (idempotent)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


async def _next(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()
