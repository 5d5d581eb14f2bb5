"""Tabs and timing, in the real hardened sandbox against the demo site's ``tabs-*``,
``dialogs-popup`` and ``dialogs-background`` fixtures: a click that opens a tab settles on the tab it brought to
the front (on main the settle waited for a frame of the hidden opener until its timeout,
about 3 s), and the reply names the tab the screen shows, a popup that alerts on load
included (on main it named the opener); a page stuck in an endless script is reported
as unresponsive in the reply that meets it, a navigation there fails at once saying so,
and closing its tab recovers (on main every reply took 7 s, said nothing, and a
navigation failed after 30 s with load_timeout); a dialog in a background tab is
answered as a user would, switching to its tab by key or click, then Escape or Return,
through the daemon and the vendor adapters (on main Chromium dropped the switching keys
and the reply kept naming the other tab).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from PIL import Image

from deskpod_stack import Stack, with_client
from deskpod.adapters import anthropic, openai
from deskpod.client import SandboxClient
from deskpod.errors import NavigationError, PageResponsiveError
from deskpod.protocol import Observation, ObserveOptions

pytestmark = pytest.mark.integration

DEMO = "http://demo.test/fixtures/"
BUTTON = {"type": "click", "x": 640, "y": 380}
"""Inside the fixtures' big link or button on the 1280x800 screen."""

QUIET = ObserveOptions(screenshot=False)


def run(stack: Stack, body: Callable[[SandboxClient], Awaitable[Any]]) -> None:
    """Run ``body`` with a client; afterwards answer the dialogs and close the tabs it left."""

    async def wrapped(client: SandboxClient) -> None:
        try:
            await body(client)
        finally:
            obs = await client.act([], QUIET)
            for dialog in obs.dialogs:
                await client.act([{"type": "dialog_accept", "tab_id": dialog.tab_id}], QUIET)
            for _ in range(len(obs.tabs or []) - 1):
                await client.act([{"type": "keypress", "keys": ["ctrl+w"]}], QUIET)

    with_client(stack, wrapped)


async def _until(client: SandboxClient, done: Callable[[Observation], bool]) -> Observation:
    """Observe every quarter second until ``done`` holds (at most 8 s); the last observation."""
    for _ in range(32):
        obs = await client.act([{"type": "wait", "seconds": 0.25}], QUIET)
        if done(obs):
            break
    return obs


def test_a_click_that_opens_a_tab_settles_on_the_new_tab(stack: Stack) -> None:
    """Twice (on main one round in three ended early by chance): the settle ends on a
    signal of the new tab, never its timeout (a long one here: a loaded machine's slow
    rounds are no failure, a wait for a frame that never comes is), and the reply names
    that tab."""
    settled = ObserveOptions(screenshot=False, settle_timeout_s=10.0)

    async def body(client: SandboxClient) -> None:
        for _ in range(2):
            await client.navigate(DEMO + "tabs-open", QUIET)
            obs = await client.act([BUTTON], settled)
            assert obs.settle_signal != "timeout", obs.settle_signal
            assert obs.tabs is not None and len(obs.tabs) == 2 and obs.tabs[0].active
            assert obs.tabs[0].url == DEMO + "tabs-opened" and obs.url == DEMO + "tabs-opened", obs.tabs
            await client.act([{"type": "keypress", "keys": ["ctrl+w"]}], QUIET)

    run(stack, body)


def test_a_popup_that_alerts_on_load_is_named_as_the_tab_in_front(stack: Stack) -> None:
    """The popup window, its alert open, covers the opener on screen: the reply names the
    popup as the active tab (on main: the opener, whose window is behind)."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-popup", QUIET)
        opener = (await client.act([], QUIET)).tabs[0].id  # type: ignore[index]
        await client.act([BUTTON], QUIET)
        obs = await _until(client, lambda o: o.dialog is not None)
        assert obs.dialog is not None and obs.dialog.url == DEMO + "dialogs-popup-child"
        assert obs.tabs is not None and len(obs.tabs) == 2
        assert obs.tabs[0].id == obs.dialog.tab_id != opener and obs.tabs[0].active, obs.tabs
        assert obs.url == obs.tabs[0].url
        obs = await client.act([{"type": "dialog_accept", "tab_id": obs.dialog.tab_id}], QUIET)
        assert obs.dialogs == [] and obs.tabs is not None and obs.tabs[0].url == DEMO + "dialogs-popup-child"

    run(stack, body)


def _dimmed(obs: Observation) -> bool:
    """Whether the screenshot shows a tab-modal dialog: Chromium greys the page behind it
    (the fixtures' pages are white below their big button)."""
    assert obs.screenshot is not None
    pixel = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data))).convert("RGB").getpixel((640, 720))
    return max(pixel) < 160  # type: ignore[arg-type]


def test_switching_to_a_background_dialogs_tab_shows_it_and_escape_or_return_answers_it(stack: Stack) -> None:
    """A confirm() in a background tab, whose renderer the tab in front shares: Escape or
    Return pressed in front reaches no dialog; a tab-switching key (Ctrl+1; Ctrl+PageUp with
    three tabs) or a click on its tab brings it to the front with the dialog shown and named,
    and Escape or Return answers it as in a front tab. On main Chromium dropped the switching
    key (the dialog's renderer ignores its tabs' input), and after the click the reply still
    named the other tab. The click's round starts from the opener alone: while a dialog is
    open, every reply waits for each tab of the dialog's renderer that does not answer (four
    tabs made each step of that round take about 8 s)."""
    screen = ObserveOptions()
    rounds = (({"type": "keypress", "keys": ["ctrl+1"]}, "Escape", "cancelled"),
              ({"type": "keypress", "keys": ["ctrl+Page_Up"]}, "Return", "confirmed"),
              ({"type": "click", "x": 100, "y": 20}, "Escape", "cancelled"))  # the first tab of the strip

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-background", QUIET)
        opener = (await client.act([], QUIET)).tabs[0].id  # type: ignore[index]
        for switch, answer, title in rounds:
            if switch["type"] == "click":
                obs = await client.act([], QUIET)
                for _ in range(8):  # the new tabs (just right of the opener) closed, each once in front
                    if len(obs.tabs or []) <= 1:
                        break
                    key = "ctrl+2" if obs.tabs[0].id == opener else "ctrl+w"  # type: ignore[index]
                    obs = await client.act([{"type": "keypress", "keys": [key]}], QUIET)
                assert obs.tabs is not None and [t.id for t in obs.tabs] == [opener], obs.tabs
            await client.act([BUTTON], QUIET)  # opens a tab just right of the opener, which asks a second later
            obs = await _until(client, lambda o: o.dialog is not None)
            assert obs.dialog is not None and obs.dialog.tab_id == opener and obs.tabs is not None
            assert obs.tabs[0].id != opener and obs.tabs[0].active, obs.tabs
            obs = await client.act([{"type": "keypress", "keys": [answer]}], QUIET)
            assert [d.tab_id for d in obs.dialogs] == [opener], "a key in front answers no background dialog"
            obs = await client.act([switch], screen)
            assert obs.tabs is not None and obs.tabs[0].id == opener and obs.tabs[0].active, (switch, obs.tabs)
            assert obs.url == DEMO + "dialogs-background" and obs.dialog is not None and obs.dialog.tab_id == opener
            assert _dimmed(obs), "the screenshot shows the opener with its dialog"
            obs = await client.act([{"type": "keypress", "keys": [answer]}], screen)
            assert obs.dialogs == [] and obs.tabs is not None and obs.tabs[0].id == opener, (answer, obs.tabs)
            obs = await _until(client, lambda o, t=title: bool(o.tabs) and o.tabs[0].title == t)  # type: ignore[misc,index]
            assert obs.tabs is not None and obs.tabs[0].title == title and obs.url == DEMO + "dialogs-background"

    run(stack, body)


def test_the_vendor_adapters_keys_reach_a_background_dialog(stack: Stack) -> None:
    """The same through the vendor formats, which have no dialog action: Anthropic's key
    ``ctrl+1`` shows the opener's dialog, OpenAI's keypress ``ESC`` dismisses it."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-background", QUIET)
        opener = (await client.act([], QUIET)).tabs[0].id  # type: ignore[index]
        await client.act([BUTTON], QUIET)
        await _until(client, lambda o: o.dialog is not None)
        await anthropic.execute(client, {"type": "tool_use", "id": "t1", "name": "computer",
                                         "input": {"action": "key", "text": "ctrl+1"}})
        obs = await client.act([], QUIET)
        assert obs.tabs is not None and obs.tabs[0].id == opener and obs.dialog is not None, obs.tabs
        await openai.execute(client, {"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
                                      "action": {"type": "keypress", "keys": ["ESC"]}, "pending_safety_checks": []})
        obs = await _until(client, lambda o: bool(o.tabs) and o.tabs[0].title == "cancelled")  # type: ignore[index]
        assert obs.dialogs == [] and obs.tabs is not None and obs.tabs[0].title == "cancelled", obs.tabs

    run(stack, body)


def test_a_page_stuck_in_a_script_is_reported_and_closing_its_tab_recovers(stack: Stack) -> None:
    """The stuck page is on demo.test, in a tab of its own beside a cross-site tab
    (allowed.test: another renderer process under site isolation)."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://allowed.test/fixtures/form", QUIET)
        await client.act([{"type": "keypress", "keys": ["ctrl+t"]}], QUIET)
        await client.navigate(DEMO + "frozen", QUIET)
        obs = await client.act([BUTTON], QUIET)
        if not obs.unresponsive:  # found 2.5 s after the first command it left unanswered
            obs = await client.act([], QUIET)
        assert obs.tabs is not None and len(obs.tabs) == 2
        frozen = obs.tabs[0]
        assert frozen.url == DEMO + "frozen" and [p.tab_id for p in obs.unresponsive] == [frozen.id], obs.unresponsive
        assert obs.unresponsive[0].url == DEMO + "frozen" and obs.unresponsive[0].unresponsive_s > 0
        with pytest.raises(NavigationError) as caught:
            await client.navigate(DEMO + "form", QUIET)
        assert caught.value.code == "navigation_failed"
        assert caught.value.detail["reason"] == "page_unresponsive" and caught.value.detail["tab_id"] == frozen.id
        obs = await client.act([{"type": "keypress", "keys": ["ctrl+w"]}], QUIET)
        obs = await _until(client, lambda o: len(o.tabs or []) == 1)
        assert obs.unresponsive == [] and obs.url == "http://allowed.test/fixtures/form"
        obs = await client.navigate("http://allowed.test/fixtures/tabs-opened", ObserveOptions(screenshot=False,
                                                                                               page_text=True))
        assert obs.page_text is not None and "the new tab" in obs.page_text and obs.unresponsive == []

    run(stack, body)


def test_recover_tab_stops_the_endless_script_and_loads_the_page_again(stack: Stack) -> None:
    """On main there was no way back but closing the tab (``recover_tab`` was an unknown
    action): now the stuck page's script is stopped and its URL loaded again in the same
    tab, which then navigates as any other; a page that answers is left alone."""
    texts = ObserveOptions(screenshot=False, page_text=True)

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://allowed.test/fixtures/form", QUIET)
        await client.act([{"type": "keypress", "keys": ["ctrl+t"]}], QUIET)
        await client.navigate(DEMO + "frozen", QUIET)
        obs = await client.act([BUTTON], QUIET)
        if not obs.unresponsive:
            obs = await client.act([], QUIET)
        assert obs.tabs is not None and [p.tab_id for p in obs.unresponsive] == [obs.tabs[0].id], obs.unresponsive
        frozen = obs.tabs[0].id
        obs = await client.act([{"type": "recover_tab"}], texts)
        assert obs.unresponsive == [] and obs.url == DEMO + "frozen", (obs.unresponsive, obs.url)
        assert obs.tabs is not None and obs.tabs[0].id == frozen and len(obs.tabs) == 2, obs.tabs
        assert obs.page_text is not None and "freeze this page" in obs.page_text
        obs = await client.navigate(DEMO + "form", QUIET)
        assert obs.url == DEMO + "form" and obs.unresponsive == []
        with pytest.raises(PageResponsiveError) as caught:
            await client.act([{"type": "recover_tab", "tab_id": frozen}], QUIET)
        assert caught.value.code == "page_responsive" and caught.value.detail["tab_id"] == frozen

    run(stack, body)
