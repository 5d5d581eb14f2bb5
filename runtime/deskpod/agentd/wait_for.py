"""The ``wait_for`` action: poll its condition until it holds, its own timeout passes or the
request is cancelled (:class:`~deskpod.protocol.WaitFor`: the URL matches, a text is on the
page or gone from it, or the screen changed). Durations are float seconds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from deskpod.agentd.batch import PageProbe
from deskpod.errors import ActionTimeoutError
from deskpod.protocol import WaitFor
from deskpod.protocol.patterns import pattern_search

__all__ = ["WAIT_FOR_POLL_S", "wait_for"]

WAIT_FOR_POLL_S = 0.05
"""Seconds between checks of a ``wait_for`` condition."""


async def wait_for(action: WaitFor, cancel: threading.Event, probe: PageProbe,
                   digest: Callable[[], Awaitable[bytes]]) -> bool:
    """Wait until ``action``'s condition holds.

    Args:
        action: the ``wait_for`` action.
        cancel: set when the request is cancelled (a timeout, a disconnect).
        probe: reads the active tab's URL and (when asked) its visible text.
        digest: the screen's digest now (read on the executor's thread).

    Returns:
        True once the condition held; False when ``cancel`` was set first.

    Raises:
        ActionTimeoutError: the condition did not hold within ``action.timeout_s``.
    """
    deadline = time.monotonic() + action.timeout_s
    start_digest = await digest() if action.screen_changed else None
    while True:
        if action.screen_changed:
            met = await digest() != start_digest
        else:
            url, text = await probe(action.url_matches is None)
            if action.url_matches is not None:
                met = url is not None and pattern_search(action.url_matches, url)
            elif action.text_absent is not None:
                met = text is not None and action.text_absent not in text
            else:
                met = text is not None and action.text_present in text  # type: ignore[operator]
        if met:
            return True
        if time.monotonic() >= deadline:
            raise ActionTimeoutError(f"wait_for: condition not met within {action.timeout_s:g} s",
                                     detail={"timeout_s": action.timeout_s})
        await asyncio.sleep(WAIT_FOR_POLL_S)
        if cancel.is_set():
            return False
