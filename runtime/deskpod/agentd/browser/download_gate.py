"""The browser's download permission for each request the daemon serves.

Chromium saves downloads only while the permission is on
(:meth:`deskpod.agentd.browser.cdp.Browser.permit_downloads`, see :mod:`deskpod.agentd.browser.downloads`);
:class:`DownloadGate` turns it on for a request that carries the controller's
permission, keeps it on for :data:`GRACE_S` after that request's reply, and turns it
off before the next request that is not permitted sends input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from deskpod.agentd.browser.cdp import Browser
from deskpod.errors import BrowserError

__all__ = ["DownloadGate", "GRACE_S"]

log = logging.getLogger(__name__)

GRACE_S = 1.0
"""Seconds downloads stay permitted after a permitted request's reply (see :class:`DownloadGate`)."""


class DownloadGate:
    """Sets the browser's download permission for each request it serves.

    A permitted request leaves downloads permitted for :data:`GRACE_S` after its reply:
    a download begins only when its server's answer has come, and Chromium reports
    nothing before that of a link with the ``download`` attribute (no navigation, no
    request of the page's), so the page may have settled, and the reply gone, first.
    The next request that sends input or navigates and is not permitted waits until that
    grace has run out and the permission is taken back, then runs: what it starts is
    refused, what the permitted one started is not. A request that sends no input
    (:data:`~deskpod.protocol.NO_INPUT_ACTION_TYPES` only, or none: an observation)
    neither waits nor ends the grace.

    Args:
        browser: the daemon's DevTools client.
    """

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self._later: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def serving(self, permitted: bool, sends_input: bool = True) -> AsyncIterator[None]:
        """Serve one request whose ``allow_downloads`` is ``permitted``; ``sends_input``:
        whether it sends input or navigates (see the class docstring). A browser that
        cannot be told keeps its previous setting (logged, never raised)."""
        if permitted or sends_input:
            await self._set(permitted)
        try:
            yield
        finally:
            if permitted and self.browser.downloads.permitted:
                self._later = asyncio.create_task(self._refuse_after(GRACE_S))

    async def _set(self, permitted: bool) -> None:
        """Permit or refuse downloads from now on; refusing waits out a running grace."""
        later, self._later = self._later, None
        if later is not None and permitted:
            later.cancel()
        elif later is not None:
            try:
                await asyncio.shield(later)
            except asyncio.CancelledError:
                self._later = later  # this request was cancelled; the grace runs on
                raise
        try:
            await self.browser.permit_downloads(permitted)
        except BrowserError as exc:
            log.warning("cannot set the download permission: %s", exc)

    async def _refuse_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        try:
            await self.browser.permit_downloads(False)
        except BrowserError as exc:
            log.warning("cannot refuse downloads again: %s", exc)
