"""What the active tab still has in progress, from its DevTools events: requests in
flight and navigations asked for but not begun.

The browser's event routing (:mod:`deskpod.agentd.browser.targets`) feeds them; settling
(:mod:`deskpod.agentd.settle`) waits on them. Durations are float seconds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

__all__ = ["NETWORK_IGNORED_TYPES", "NavigationActivity", "NetworkActivity"]

NETWORK_IGNORED_TYPES: Final = frozenset({"EventSource", "WebSocket", "Ping", "CSPViolationReport", "Prefetch"})
"""Resource types never waited for: they stay open by design or answer nobody on screen."""


class NetworkActivity:
    """The page's requests in flight, from the DevTools ``Network`` events of the
    active tab (fed by :class:`~deskpod.agentd.browser.targets.BrowserTargets`)."""

    def __init__(self) -> None:
        self._started: dict[str, int] = {}  # request id -> generation it started in
        self._documents: dict[str, str] = {}  # a document request's id -> its frame's id
        self._generation = 0
        self._changed = asyncio.Event()

    def mark(self) -> int:
        """Start a new generation; returns it (requests from now on are "since" it)."""
        self._generation += 1
        return self._generation

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Record one ``Network.*`` event of the active tab."""
        request_id = params.get("requestId")
        if not isinstance(request_id, str):
            return
        if method == "Network.requestWillBeSent":
            if params.get("type") not in NETWORK_IGNORED_TYPES:
                self._started.setdefault(request_id, self._generation)
                if params.get("type") == "Document" and isinstance(params.get("frameId"), str):
                    self._documents[request_id] = params["frameId"]
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            self._documents.pop(request_id, None)
            if self._started.pop(request_id, None) is not None:
                self._changed.set()

    def frame_loaded(self, frame_id: str) -> None:
        """The out-of-process frame ``frame_id`` stopped loading (``Page.frameStoppedLoading``
        in its own session): its document's request, begun in the tab's session before the
        frame moved to a process of its own, ends there, and the tab's session never sees it
        finish (a cross-site frame's, the PDF viewer's)."""
        for request_id in [r for r, frame in self._documents.items() if frame == frame_id]:
            del self._documents[request_id]
            if self._started.pop(request_id, None) is not None:
                self._changed.set()

    def clear(self) -> None:
        """Forget every request (the tab's session was replaced)."""
        self._started.clear()
        self._documents.clear()
        self._changed.set()

    def pending_since(self, generation: int) -> int:
        """Requests started in ``generation`` or later and not finished."""
        return sum(1 for g in self._started.values() if g >= generation)

    async def wait_idle(self, generation: int, timeout_s: float) -> bool:
        """Wait until no request since ``generation`` is in flight, at most ``timeout_s``.

        Returns:
            True when none is.
        """
        deadline = time.monotonic() + timeout_s
        while self.pending_since(generation):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return False
        return True


class NavigationActivity:
    """The active tab's main-frame navigations, from the DevTools ``Page`` events (fed by
    :class:`~deskpod.agentd.browser.targets.BrowserTargets`): the ones the page asked for and the browser
    has not begun yet, and how many loads began.

    A page's navigation is asked for in the renderer (``Page.frameRequestedNavigation``)
    and begun by the browser (``Page.frameStartedLoading``, or
    ``Page.navigatedWithinDocument`` for a fragment); in between neither the page nor the
    tab reports it loading. The request comes on the same DevTools session as the page
    script's answer, so a navigation asked for before the script resolved is known when
    its answer arrives."""

    def __init__(self) -> None:
        self.loads = 0
        """Main-frame loads begun so far."""
        self._unanswered = 0
        self._changed = asyncio.Event()

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Record one ``Page.*`` event of the active tab's main frame."""
        if method == "Page.frameRequestedNavigation":
            if params.get("disposition", "currentTab") == "currentTab":
                self._unanswered += 1
        elif method in ("Page.frameStartedLoading", "Page.navigatedWithinDocument"):
            self.loads += method == "Page.frameStartedLoading"
            self._unanswered = 0
            self._changed.set()

    def pending(self) -> bool:
        """True while a navigation the page asked for has not begun."""
        return self._unanswered > 0

    def forget(self) -> None:
        """Forget the navigations asked for (the tab's session was replaced, or one never began)."""
        self._unanswered = 0
        self._changed.set()

    async def wait_begun(self, timeout_s: float) -> bool:
        """Wait until no navigation the page asked for is still to begin, at most
        ``timeout_s``; the ones still not begun then are forgotten.

        Returns:
            True when they began.
        """
        deadline = time.monotonic() + timeout_s
        while self.pending():
            left = deadline - time.monotonic()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, left))
            except TimeoutError:
                self.forget()
                return False
        return True
