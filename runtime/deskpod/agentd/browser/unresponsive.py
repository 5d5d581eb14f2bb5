"""Pages whose renderer stopped answering: an endless script (``while (true) {}``) holds
its main thread, so every DevTools command the page must run waits for ever.

A command a page must run that has no answer after :data:`WATCH_AFTER_S` makes the
channel (:mod:`deskpod.agentd.browser.devtools`) ask the page for the value ``0``
(``Runtime.evaluate``: nothing a page's script can see; a page awaiting a promise or
loading still answers it at once). No answer within :data:`PROBE_TIMEOUT_S` marks the page
unresponsive, since the first command it left unanswered: the command fails then
(:class:`~deskpod.errors.PageUnresponsiveError`), and so does every later one for that
page, each after one more short probe (:data:`RETRY_PROBE_TIMEOUT_S`); the mark is
cleared when the page answers again. The browser target (tabs, URLs, titles, closing a tab)
answers throughout. Chromium's site isolation keeps a cross-site tab in another renderer
process, so it answers; a same-site tab shares the renderer and is marked on its own
next command. A page with a JavaScript dialog open is blocked by design and never
marked (:mod:`deskpod.agentd.browser.dialogs`). Durations are float seconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

from deskpod.agentd.browser.request_filter import clean_url
from deskpod.protocol import MAX_TABS, UnresponsivePage

__all__ = ["PROBE_TIMEOUT_S", "RETRY_PROBE_TIMEOUT_S", "UnresponsivePages", "WATCH_AFTER_S"]

WATCH_AFTER_S: Final = 0.5
"""How long a command a page must run waits before the page is probed."""

PROBE_TIMEOUT_S: Final = 2.0
"""How long the probe waits for the page's answer before the page counts as unresponsive:
with :data:`WATCH_AFTER_S`, known 2.5 s after the command, within the default settle timeout
(3 s) of the action that froze it. The probe waits behind whatever the page's main thread
is doing: a page busy longer than this (a long synchronous script) counts as unresponsive
until it answers again."""

RETRY_PROBE_TIMEOUT_S: Final = 0.5
"""How long a marked page is probed again before each later command, which fails at once
when it does not answer."""


class UnresponsivePages:
    """The tabs whose page does not answer, each with the monotonic time of the first
    command it left unanswered."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def mark(self, target_id: str, since: float) -> None:
        """Note that ``target_id``'s page has not answered since ``since`` (``time.monotonic()``);
        an earlier mark is kept."""
        self._since.setdefault(target_id, since)

    def answered(self, target_id: str) -> None:
        """The page answered: it is responsive (again)."""
        self._since.pop(target_id, None)

    def since(self, target_id: str) -> float | None:
        """When ``target_id``'s page stopped answering (``time.monotonic()``), or ``None``."""
        return self._since.get(target_id)

    def report(self, now: float | None = None) -> list[tuple[str, float]]:
        """Every unresponsive tab with how long its page has not answered, seconds, the
        longest first."""
        at = time.monotonic() if now is None else now
        return sorted(((t, max(0.0, at - s)) for t, s in self._since.items()), key=lambda item: -item[1])

    def pages(self, urls: Mapping[str, str]) -> list[UnresponsivePage]:
        """:meth:`report` for an observation: each tab with its URL as ``urls`` (tab id →
        URL, as the tabs were read) has it, at most :data:`~deskpod.protocol.MAX_TABS`."""
        return [UnresponsivePage(tab_id=tab[:128], url=clean_url(urls[tab]) if tab in urls else None,
                                 unresponsive_s=round(seconds, 3)) for tab, seconds in self.report()[:MAX_TABS]]

    def clear(self) -> None:
        """Forget every tab (the channel closed)."""
        self._since.clear()
