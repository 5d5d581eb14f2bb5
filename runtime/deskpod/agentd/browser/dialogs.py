"""JavaScript dialogs as state the daemon tracks per tab.

While an ``alert``, ``confirm``, ``prompt`` or ``beforeunload`` dialog is open, its
tab's renderer runs no script and answers no DevTools command that needs the page
(``Runtime.evaluate``, the accessibility tree, even ``Page.enable``): such a call
waits until the dialog closes. Chromium reports each dialog with
``Page.javascriptDialogOpening`` on every session of that tab that enabled the
Page domain, and answers it through ``Page.handleJavaScriptDialog`` on such a
session (Chrome DevTools Protocol, Page domain:
https://chromedevtools.github.io/devtools-protocol/tot/Page/#event-javascriptDialogOpening).

So the DevTools client (:mod:`deskpod.agentd.browser.cdp`) attaches to every page target
as it appears (``Target.setAutoAttach``), enables Page there before a new page
runs (``waitForDebuggerOnStart``), and feeds every dialog event to a
:class:`DialogTracker`. The tracker knows, for
each tab, whether a dialog is open, which session can answer it, and wakes
anything waiting on that tab when one opens, so a call that needs the page gives
up at once instead of waiting for its timeout. Everything here is page data:
untrusted.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

from deskpod.errors import NoDialogError
from deskpod.protocol import MAX_DIALOG_CHARS

__all__ = ["DialogTracker", "OpenDialog"]


@dataclass(frozen=True)
class OpenDialog:
    """One open dialog: its ``type``, ``message`` and ``default_prompt`` (cut to
    :data:`~deskpod.protocol.MAX_DIALOG_CHARS`), the tab (``target_id``) and its page
    ``url``, the DevTools ``session`` that can answer it, and ``order`` (larger: newer)."""

    type: str
    message: str
    default_prompt: str | None
    target_id: str
    url: str
    session: str
    order: int


class DialogTracker:
    """The dialogs open in the browser's tabs, at most one per tab (a tab's dialog is modal)."""

    def __init__(self) -> None:
        self._open: dict[str, OpenDialog] = {}
        self._waiters: dict[str | None, list[asyncio.Future[None]]] = {}
        self._order = itertools.count(1)

    def opened(self, target_id: str, session: str, params: dict[str, Any]) -> OpenDialog:
        """Record a ``Page.javascriptDialogOpening`` event of ``target_id``, received on
        ``session``, and wake whatever waits on that tab.

        Returns:
            The recorded dialog.
        """
        prompt = params.get("defaultPrompt")
        kind = str(params.get("type", ""))
        dialog = OpenDialog(
            type=kind[:MAX_DIALOG_CHARS],
            message=str(params.get("message", ""))[:MAX_DIALOG_CHARS],
            default_prompt=str(prompt)[:MAX_DIALOG_CHARS] if kind == "prompt" and prompt is not None else None,
            target_id=target_id,
            url=str(params.get("url", "")),
            session=session,
            order=next(self._order),
        )
        self._open[target_id] = dialog
        for waiter in self._waiters.pop(target_id, []) + self._waiters.pop(None, []):
            if not waiter.done():
                waiter.set_result(None)
        return dialog

    def closed(self, target_id: str) -> None:
        """Forget the dialog of ``target_id`` (it was answered, or the tab went away)."""
        self._open.pop(target_id, None)

    def clear(self) -> None:
        """Forget every dialog (the browser is gone); waiters are left to their own timeouts."""
        self._open.clear()

    def any_open(self) -> bool:
        """True while a dialog is open in any tab."""
        return bool(self._open)

    def get(self, target_id: str | None) -> OpenDialog | None:
        """The dialog open in tab ``target_id``, if any."""
        return None if target_id is None else self._open.get(target_id)

    def ordered(self, active_id: str | None, tab_ids: list[str] | None = None) -> list[OpenDialog]:
        """Every open dialog, the active tab's first, then the newest first.

        Args:
            active_id: the active tab.
            tab_ids: the tabs that exist now; dialogs of other tabs are forgotten
                (``None``: keep them all).
        """
        if tab_ids is not None:
            for gone in set(self._open) - set(tab_ids):
                del self._open[gone]
        return sorted(self._open.values(), key=lambda d: (d.target_id != active_id, -d.order))

    def pick(self, tab_id: str | None, active_id: str | None) -> OpenDialog:
        """The dialog an answer applies to: that of ``tab_id`` when given, else the one
        an observation reports (the active tab's, else the newest).

        Raises:
            NoDialogError: no dialog is open there.
        """
        if tab_id is not None:
            dialog = self._open.get(tab_id)
            if dialog is None:
                raise NoDialogError(f"no JavaScript dialog is open in tab {tab_id[:128]!r}",
                                    detail={"tab_id": tab_id[:128]})
            return dialog
        ordered = self.ordered(active_id)
        if not ordered:
            raise NoDialogError("no JavaScript dialog is open")
        return ordered[0]

    def wait_opened(self, target_id: str | None) -> asyncio.Future[None]:
        """A future that completes when a dialog opens in ``target_id`` (``None``: in any
        tab); cancel it when no longer needed."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(target_id, []).append(waiter)
        waiter.add_done_callback(self._forget_waiter(target_id))
        return waiter

    def _forget_waiter(self, target_id: str | None) -> Any:
        def forget(waiter: asyncio.Future[None]) -> None:
            waiters = self._waiters.get(target_id)
            if waiters and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[target_id]

        return forget
