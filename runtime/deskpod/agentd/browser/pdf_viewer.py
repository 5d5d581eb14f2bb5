"""Chromium's PDF viewer, as settling waits for it: has it drawn the document yet?

A tab whose document is a PDF (``application/pdf``) shows it in the browser's PDF viewer:
the top document holds only an ``<embed>``; the viewer is an out-of-process frame of the
browser's own extension (``chrome-extension://mhjfbmdgcfjbbpaeojofohoefgiehjai/index.html``)
whose ``<pdf-viewer>`` element runs the PDF plugin in a frame of its own. The tab stops
loading (``Page.frameStoppedLoading``) before the viewer's scripts have even run, and the
viewer shows an empty grey area until the plugin has the whole document: its
``documentLoaded`` message moves the element's ``loadState_`` from ``loading`` to
``success`` (or ``failed``), and the first page is drawn right after (10-35 ms later on the
idle 2-core machine, Chromium 156; a PDF sent over 1.6 s: 1.5 s after the tab stopped
loading). The element's ``loaded`` promise is not used: the viewer resolves it on a reload
only, never for the first load (``PdfViewerBaseElement.setLoadState`` skips its first change).

:func:`wait_loaded` asks the viewer's frame (the out-of-process frames attached under the
tab), in its main world: the element's state is its scripts' own, and no page script runs
in the browser's extension frame. :data:`PRESENTED_SCRIPT` then asks the tab's document
whether it is on the screen at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Final

from deskpod.agentd.browser.frame_calls import Call
from deskpod.errors import BrowserError

__all__ = ["PRESENTED_SCRIPT", "VIEWER_EXTENSION", "VIEWER_POLL_S", "VIEWER_SCRIPT", "wait_loaded"]

VIEWER_POLL_S: Final = 0.01
"""How often the viewer's frames are looked for again while none answers with a viewer
(its frame is attached and its document made some 50 ms after the tab's PDF arrives)."""

VIEWER_EXTENSION: Final = "mhjfbmdgcfjbbpaeojofohoefgiehjai"
"""The id of Chromium's PDF viewer extension (its frames' origin is ``chrome-extension://`` it)."""

VIEWER_SCRIPT: Final = """(async (budgetMs) => {
  if (location.origin !== "chrome-extension://""" + VIEWER_EXTENSION + """") return "absent";
  if (document.visibilityState !== "visible") return "absent";
  const t0 = performance.now();
  for (;;) {
    const viewer = document.querySelector("pdf-viewer");
    const state = viewer ? viewer.loadState_ : undefined;
    if (viewer && viewer.shadowRoot && viewer.shadowRoot.querySelector("viewer-password-dialog")) return "password";
    if (typeof state === "string" && state !== "loading") return state;
    if (performance.now() - t0 >= budgetMs) return viewer ? "loading" : "absent";
    await new Promise(resolve => setTimeout(resolve, 10));
  }
})"""
"""Run in a frame with the time budget in ms: ``"absent"`` when the frame is not the PDF
viewer's (another document, or the empty one its frame starts with), is hidden (the viewer of
a PDF the tab left, kept in the back-forward cache, has its document long since) or its
element was not made within the budget; else, once the viewer no longer loads its document, its load state
(``"success"``, ``"failed"``), ``"password"`` when it asks for the document's password, or
``"loading"`` when the budget ran out."""


PRESENTED_SCRIPT: Final = """(async (budgetMs) => {
  const t0 = performance.now();
  while (!performance.getEntriesByType("paint").length) {
    if (performance.now() - t0 >= budgetMs) return false;
    await new Promise(resolve => setTimeout(resolve, 10));
  }
  return true;
})"""
"""Run in the tab's document with the time budget in ms: resolves ``true`` once the document's
first paint has been presented (its ``first-paint`` entry is recorded when the frame reached
the screen), ``false`` when the budget ran out first. After a same-origin navigation the
browser keeps the previous page on the screen until the new one's first contentful paint
or a timeout (paint holding), and a PDF's document has no contentful paint of its own: in
the sandbox the viewer had its document while the screen still showed the page before in
10 of 25 navigations."""


async def wait_loaded(call: Call, sessions: Callable[[], Sequence[str]], timeout_s: float) -> bool:
    """Wait until the PDF viewer in one of the frames ``sessions()`` names (their DevTools
    sessions, read again while none holds a viewer) has its document loaded, failed to
    load it or asks for its password; at most ``timeout_s`` seconds.

    Args:
        call: sends one DevTools command (:class:`~deskpod.agentd.browser.frame_calls.Call`).
        sessions: the sessions of the out-of-process frames attached under the tab now.
        timeout_s: the longest wait.

    Returns:
        True when the viewer is done loading; False when no viewer was done in time.
    """
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        for session in sessions():
            params = {"expression": f"{VIEWER_SCRIPT}({int(left * 1000)})", "returnByValue": True,
                      "awaitPromise": True}
            try:
                # A frame that has not yet made its document answers from the one it leaves.
                answer = await call("Runtime.evaluate", params, session, left + 0.5)
            except BrowserError:
                continue
            state = answer.get("result", {}).get("value")
            if state in ("success", "failed", "password"):
                return True
            if state == "loading":
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
        await asyncio.sleep(min(VIEWER_POLL_S, max(0.0, deadline - time.monotonic())))
    return False
