"""Which page is in front while a popup window shows beside its opener, on a real Chromium
through the daemon's :class:`~deskpod.agentd.browser.cdp.Browser`: every look after the popup
opened names the popup, and the page read for a point inside it (what a click there is judged
against) is the popup's, not the opener's under it."""

from __future__ import annotations

import asyncio
import json
import socket

from deskpod.agentd.browser.cdp import Browser
from test_page_logs_display import _run, base_url, chromium  # noqa: F401 - the fixtures: Chromium on its own Xvfb


def test_every_look_after_a_popup_window_opened_reads_the_popup(
        chromium: socket.socket, base_url: str) -> None:  # noqa: F811 - the fixtures imported above
    """On main the first look named the popup (new since the last look) but the page read next
    was the opener's (the look after compared with the page the daemon was attached to, not
    the one it had just named), and every look after named the opener while the popup window
    was on top: a click on the popup's sign-in form was judged against the opener's text field
    under it, and the popup's secrets were masked from the opener's page."""

    async def body(browser: Browser) -> tuple[list[str], list[str]]:
        await browser.navigate(f"{base_url}/input.html", 20)
        popup = json.dumps(f"{base_url}/secret.html")
        await browser._call("Runtime.evaluate", {  # a click's user activation, as a page's own button has
            "userGesture": True, "expression": f"window.open({popup}, 'p', 'popup,width=500,height=400,left=0,top=0'), 1"},
            browser._session, page=browser._target_id)
        for _ in range(100):
            if len((await browser.state()).tabs) == 2:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # the popup's document loaded
        fronts, read = [], []
        for _ in range(3):
            fronts.append((await browser.state()).url.rsplit("/", 1)[-1])
            read.append(await browser.evaluate_isolated("document.title"))  # on the page read_page reads
        return fronts, read

    fronts, read = _run(chromium, body)
    assert fronts[1:] == ["secret.html", "secret.html"], fronts
    assert read == ["deskpod sign-in fixture"] * 3, read
