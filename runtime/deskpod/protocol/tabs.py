"""The tab recovery action: stop a page that does not answer and load it again.

A page stuck in an endless script (``while (true) {}``) holds its renderer's main thread:
nothing it shows changes and no DevTools command it must run is answered. The daemon reports
it in the observation's ``unresponsive`` list (:class:`~deskpod.protocol.UnresponsivePage`);
``recover_tab`` is what a user does then (the browser's "Page unresponsive" dialog: wait or
exit the page), done in one action that leaves the tab usable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from deskpod.protocol._base import STRICT, TabId

__all__ = ["RecoverTab"]


class RecoverTab(BaseModel):
    """An action: recover the tab ``tab_id`` (``None``: the tab the observation lists first
    in ``unresponsive``) whose page does not answer.

    The daemon asks the page once more (two seconds); a page that answers is left alone and
    the action fails with ``page_responsive``. Otherwise it stops the page's running script
    (DevTools ``Runtime.terminateExecution``, which Chromium delivers beside the page's busy
    main thread) and loads the tab's URL again (a ``GET``, as a ``navigate`` to it; what was
    typed there is lost); a page that still does not answer then, or whose renderer is stuck
    outside script, is closed and its URL opened in a new tab in its place (a new ``tab_id``).
    Either way the daemon and every other tab go on. No such tab: ``execution_failed``
    (``detail["reason"] == "no_such_tab"``); a tab whose JavaScript dialog is open (it waits
    for an answer, :class:`~deskpod.protocol.DialogAccept`): ``execution_failed``
    (``"dialog_open"``), nothing done.
    """

    model_config = STRICT
    type: Literal["recover_tab"]
    tab_id: TabId | None = None
