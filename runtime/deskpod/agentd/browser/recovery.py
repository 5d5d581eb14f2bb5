"""Recovering a tab whose page does not answer (the ``recover_tab`` action,
:class:`~deskpod.protocol.RecoverTab`).

An endless script holds the page's main thread, where every DevTools command the page must
run waits (:mod:`deskpod.agentd.browser.unresponsive`). Chromium runs a few commands beside
that thread, on the renderer's I/O thread, among them ``Runtime.terminateExecution``, which
ends the running script as V8's ``Isolate::TerminateExecution`` does
(https://chromedevtools.github.io/devtools-protocol/tot/Runtime/#method-terminateExecution).
Only a session attached before the page stopped answering can carry it: a new session is
set up on the page's main thread, which the script holds. :func:`recover_tab` asks the page
once more, stops its script through the sessions the daemon attached to the tab earlier,
and loads its URL again; a renderer still stuck then (a synchronous request that never
completes, a hang outside script), or a tab with no earlier session, has its tab closed
through the browser target, which always answers, and the URL opened in a new tab. Other tabs are not touched: a same-site
tab in the same renderer is freed by the same termination. Durations are float seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from deskpod.agentd.browser.devtools import DevTools
from deskpod.agentd.browser.unresponsive import PROBE_TIMEOUT_S
from deskpod.errors import BrowserError, ExecutionError, PageResponsiveError
from deskpod.protocol import RecoverTab

__all__ = ["TERMINATE_TIMEOUT_S", "recover_tab"]

TERMINATE_TIMEOUT_S: Final = 2.0
"""How long ``Runtime.terminateExecution`` and the probe after it are waited for."""


def _reload_url(url: str) -> str:
    """The URL loaded again: the page's own when it is ``http(s)``, else ``about:blank``."""
    return url if urlsplit(url).scheme in ("http", "https") else "about:blank"


async def recover_tab(devtools: DevTools, action: RecoverTab, active_id: str | None,
                      sessions: Callable[[str], list[str]]) -> str:
    """Recover the tab ``action.tab_id`` (``None``: the tab unresponsive the longest, else
    ``active_id``, the tab the screen shows) as :class:`~deskpod.protocol.RecoverTab` says.

    Args:
        devtools: the channel to the browser.
        action: the action.
        active_id: the tab the last look found active.
        sessions: the sessions attached to a tab so far, by its id
            (:meth:`~deskpod.agentd.browser.targets.BrowserTargets.sessions_of`).

    Returns:
        The recovered tab's id: the same tab, or the new one its URL was opened in.

    Raises:
        PageResponsiveError: the page answers: it was left alone.
        ExecutionError: no such tab (``detail["reason"] == "no_such_tab"``), a JavaScript
            dialog open in it (``"dialog_open"``: answering it is a dialog action's, judged as
            one; a ``beforeunload`` left by closing its tab would pass at ``L1``), or the
            browser refused to close or open a tab.
    """
    marked = devtools.unresponsive.report()
    tab = action.tab_id or (marked[0][0] if marked else active_id)
    pages = (await devtools.call("Target.getTargets")).get("targetInfos", [])
    info = next((p for p in pages if p.get("type") == "page" and p.get("targetId") == tab), None)
    if tab is None or info is None:
        raise ExecutionError("no such tab", detail={"reason": "no_such_tab", "tab_id": (tab or "")[:128]})
    if devtools.dialogs.get(tab) is not None:
        raise ExecutionError("a JavaScript dialog is open in the tab: answer it (dialog_accept or dialog_dismiss); "
                             "it is not a page stuck in a script", detail={"reason": "dialog_open", "tab_id": tab})
    url = _reload_url(str(info.get("url", "")))
    attached = sessions(tab)
    fresh = not attached
    if fresh:
        attached = [str((await devtools.call("Target.attachToTarget", {"targetId": tab, "flatten": True}))["sessionId"])]
    try:
        if await devtools.answers(attached[0], PROBE_TIMEOUT_S):
            devtools.unresponsive.answered(tab)
            raise PageResponsiveError("the tab's page answers: nothing to recover", detail={"tab_id": tab})
        for session in attached:
            try:
                await devtools.call("Runtime.terminateExecution", {}, session, TERMINATE_TIMEOUT_S)
                break
            except BrowserError:
                continue  # a session the renderer had not set up: the next one
        if await devtools.answers(attached[0], PROBE_TIMEOUT_S):
            devtools.unresponsive.answered(tab)
            await devtools.call("Page.navigate", {"url": url}, attached[0])
            return tab
    finally:
        if fresh:
            devtools.post("Target.detachFromTarget", {"sessionId": attached[0]})
    return await _replace(devtools, tab, url, background=tab != active_id)


async def _replace(devtools: DevTools, tab: str, url: str, background: bool) -> str:
    """Close ``tab`` and open ``url`` in a new tab (behind the front one when ``background``).

    Raises:
        ExecutionError: the browser refused.
    """
    try:
        opened: dict[str, Any] = await devtools.call("Target.createTarget", {"url": url, "background": background})
        await devtools.call("Target.closeTarget", {"targetId": tab})
    except BrowserError as exc:
        raise ExecutionError(f"the tab could not be replaced: {exc.message}", detail={"reason": "replace_failed"}) from exc
    devtools.unresponsive.answered(tab)
    return str(opened.get("targetId", ""))
