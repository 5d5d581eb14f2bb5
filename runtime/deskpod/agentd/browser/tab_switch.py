"""Tab-switching keys carried out through DevTools beside a JavaScript dialog.

Chromium drops a key pressed in any tab of a renderer whose tab has a dialog open, its
own tab-switching shortcuts included (:mod:`deskpod.agentd.browser.tab_keys` says why and
which keys). :class:`TabSwitching` brings the tab such a key names to the front with
``Target.activateTarget`` (Chrome DevTools Protocol, Target domain:
https://chromedevtools.github.io/devtools-protocol/tot/Target/#method-activateTarget),
where Chromium shows its dialog, and takes it as the active tab from then on.
"""

from __future__ import annotations

import contextlib

from deskpod.agentd.browser.tab_keys import strip_order, switched_to, tab_move
from deskpod.agentd.browser.targets import BrowserTargets
from deskpod.errors import BrowserError

__all__ = ["TabSwitching"]


class TabSwitching(BrowserTargets):
    """The browser's targets (:class:`~deskpod.agentd.browser.targets.BrowserTargets`) that
    carry out a tab-switching key beside a dialog (see the module docstring)."""

    async def switch_tab(self, keysyms: list[str]) -> bool:
        """Bring the tab a tab-switching key names to the front (``Target.activateTarget``;
        the keys and the strip's order: :mod:`deskpod.agentd.browser.tab_keys`) while a dialog
        open in another tab than the front one makes Chromium drop the key; that tab is the
        active one from then on. ``keysyms``: one chord (:func:`deskpod.keys.resolve_chord`).

        Returns:
            True when done here (the key is not to be pressed); False for another key, with
            no dialog open elsewhere, or with one open in the front tab (it takes the key).

        Raises:
            BrowserError: the browser could not be asked.
        """
        move = tab_move(keysyms)
        if move is None or not self.dialogs.any_open():
            return False
        async with self._lock:
            front = str((await self._ordered_pages())[0].get("targetId", ""))
            if self.dialogs.get(front) is not None:
                return False
            window = await self._window_of(front)  # a popup window's page is in no tab strip
            pages = [p for p in await self._pages() if await self._window_of(str(p.get("targetId", ""))) == window]
            target = switched_to(move, strip_order(pages, self.created), front)
            if target not in (None, front):
                await self._call("Target.activateTarget", {"targetId": target})
                self.active_id = target
        return True

    async def _window_of(self, target_id: str) -> int | None:
        """The id of the browser window holding page ``target_id`` (``None``: not known)."""
        with contextlib.suppress(BrowserError, KeyError, TypeError, ValueError):
            return int((await self._call("Browser.getWindowForTarget", {"targetId": target_id}))["windowId"])
        return None
