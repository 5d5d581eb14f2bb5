"""JavaScript dialogs as first-class state, in the real hardened sandbox against the demo
site's ``dialogs-*`` fixtures: a dialog is reported in the very reply that meets it (type,
message, default prompt, its tab), from the active tab, a popup or a background tab;
navigation and observation return promptly with what they could read and mark what they
could not; ``dialog_accept`` and ``dialog_dismiss`` answer it.

On main before this change each of these replies stalled for 10 to 30 s (or failed) and
reported no dialog; a reply is bounded here at :data:`PROMPT_S`, well under that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deskpod_stack import Stack, start_stack, with_client
from deskpod.client import SandboxClient
from deskpod.errors import NoDialogError
from deskpod.protocol import Observation, ObserveOptions, Point

pytestmark = pytest.mark.integration

DEMO = "http://demo.test/fixtures/"
PROMPT_S = 8.0
"""Longest a reply may take here: generous for a loaded 2-core machine (a reply should take
about a second), under the shortest old stall (10 s) and well under the others (16-30 s)."""

BUTTON = {"type": "click", "x": 640, "y": 380}
"""Inside the fixtures' big button (or text area) on the 1280x800 screen."""

FULL = ObserveOptions(page_text=True, accessibility=True, element_at=Point(x=640, y=380))


@pytest.fixture(scope="module")
def dstack() -> Iterator[Stack]:
    """A stack of its own: these cases leave popups and tabs behind. One page is loaded
    first, so no case times the browser's first (cold) page load."""
    for stack in start_stack("dlg", "1280x800"):
        with_client(stack, lambda client: client.navigate(DEMO + "form", ObserveOptions(screenshot=False)))
        yield stack


async def timed(call: Awaitable[Observation]) -> tuple[Observation, float]:
    """The call's observation and its duration in seconds, failing past :data:`PROMPT_S`."""
    started = time.monotonic()
    obs = await asyncio.wait_for(call, PROMPT_S * 3)
    elapsed = time.monotonic() - started
    assert elapsed < PROMPT_S, f"the reply took {elapsed:.1f} s"
    return obs, elapsed


def run(stack: Stack, body: Callable[[SandboxClient], Awaitable[Any]]) -> None:
    """Run ``body`` with a client; afterwards answer whatever dialogs it left open."""

    async def wrapped(client: SandboxClient) -> None:
        try:
            await body(client)
        finally:
            await _answer_all(client)

    with_client(stack, wrapped)


def test_alert_while_loading_navigate_returns_at_once_with_the_dialog(dstack: Stack) -> None:
    """navigate used to wait its whole timeout (load_timeout); now it returns with the alert
    reported, url/title/tabs read, and page text, focus, element and AX marked unread."""

    async def body(client: SandboxClient) -> None:
        obs, _ = await timed(client.navigate(DEMO + "dialogs-load", FULL))
        assert obs.dialog is not None and obs.dialog.type == "alert"
        assert obs.dialog.message == "dialogs-load: welcome, read the terms"
        assert obs.url == DEMO + "dialogs-load" and obs.tabs and obs.tabs[0].active
        assert obs.dialog.tab_id == obs.tabs[0].id and obs.dialog.url == DEMO + "dialogs-load"
        assert [d.tab_id for d in obs.dialogs] == [obs.tabs[0].id]
        assert {(u.part, u.reason) for u in obs.unread} == {
            ("page_text", "dialog_open"), ("focused", "dialog_open"), ("element_at", "dialog_open"),
            ("accessibility", "dialog_open")}
        assert obs.page_text is None and obs.accessibility is None and obs.screenshot is not None
        assert obs.settled is True, "an open dialog counts as settled"
        again, _ = await timed(client.act([], FULL))
        assert again.dialog == obs.dialog
        done, _ = await timed(client.act([{"type": "dialog_accept"}], FULL))
        assert done.dialog is None and done.dialogs == [] and done.unread == []
        assert "after the alert" in (done.page_text or "") and done.title == "fixture: dialogs-load answered"

    run(dstack, body)


def test_prompt_is_answered_with_text_and_dismissed(dstack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-prompt", ObserveOptions(screenshot=False))
        obs, _ = await timed(client.act([BUTTON], ObserveOptions(screenshot=False, page_text=True)))
        assert obs.dialog is not None and obs.dialog.type == "prompt"
        assert obs.dialog.message == "dialogs-prompt: your name?" and obs.dialog.default_prompt == "anonymous"
        obs, _ = await timed(client.act([{"type": "dialog_accept", "text": "Ada"}], ObserveOptions(page_text=True)))
        assert obs.dialog is None and "answer: Ada" in (obs.page_text or "")
        await timed(client.act([BUTTON], ObserveOptions(screenshot=False)))
        obs, _ = await timed(client.act([{"type": "dialog_dismiss"}], ObserveOptions(page_text=True)))
        assert obs.dialog is None and "answer: null" in (obs.page_text or "")
        with pytest.raises(NoDialogError):
            await client.act([{"type": "dialog_dismiss"}], ObserveOptions(screenshot=False))

    run(dstack, body)


def test_beforeunload_navigate_returns_with_the_question_and_accepting_leaves(dstack: Stack) -> None:
    """A beforeunload handler made navigate fail after 10 s ("Page.navigate got no answer")."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-beforeunload", ObserveOptions(screenshot=False))
        await client.act([BUTTON, {"type": "type", "text": " more"}], ObserveOptions(screenshot=False))
        obs, _ = await timed(client.navigate(DEMO + "form", ObserveOptions(screenshot=False)))
        assert obs.dialog is not None and obs.dialog.type == "beforeunload"
        # The tab's URL already shows where the navigation would go (Chromium's visible URL);
        # the dialog names the page that asks.
        assert obs.dialog.url == DEMO + "dialogs-beforeunload" and obs.url == DEMO + "form"
        obs, _ = await timed(client.act([{"type": "dialog_dismiss"}], ObserveOptions(screenshot=False)))
        assert obs.dialog is None and obs.url == DEMO + "dialogs-beforeunload", "dismissing stays"
        obs, _ = await timed(client.navigate(DEMO + "form", ObserveOptions(screenshot=False)))
        assert obs.dialog is not None and obs.dialog.type == "beforeunload"
        obs, _ = await timed(client.act([{"type": "dialog_accept"}], ObserveOptions(screenshot=False)))
        assert obs.dialog is None and obs.url == DEMO + "form", "accepting leaves the page"

    run(dstack, body)


def test_confirm_in_a_background_tab_is_reported_and_answered(dstack: Stack) -> None:
    """A confirm() in a background tab made every call take ~19 s with url, tabs and dialog empty."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-background", ObserveOptions(screenshot=False))
        first = await client.act([], ObserveOptions(screenshot=False))
        assert first.tabs is not None
        opener = first.tabs[0].id
        await timed(client.act([BUTTON], ObserveOptions(screenshot=False)))
        obs = await _until(client, FULL, lambda o: o.dialog is not None)
        assert obs.dialog is not None and obs.dialog.type == "confirm"
        assert obs.dialog.message == "dialogs-background: delete all your files?" and obs.dialog.tab_id == opener
        assert obs.url is not None and obs.tabs is not None and len(obs.tabs) == 2
        for _ in range(2):
            await timed(client.act([], FULL))
        obs, _ = await timed(client.act([{"type": "dialog_dismiss", "tab_id": opener}], ObserveOptions()))
        assert obs.dialogs == []
        tabs = obs.tabs or []
        assert any(t.id == opener and t.title == "cancelled" for t in tabs), tabs

    run(dstack, body)


def test_navigate_beside_a_dialog_that_blocks_the_tab_returns_with_the_dialog(dstack: Stack) -> None:
    """A dialog in a background tab blocks the renderer it shares with the active tab:
    navigating the active tab waited its whole timeout and failed with load_timeout
    (30 s). It now returns at once with that dialog reported; answering it lets the
    navigation finish."""

    async def body(client: SandboxClient) -> None:
        quiet = ObserveOptions(screenshot=False)
        await client.navigate(DEMO + "dialogs-beside", quiet)
        first = await client.act([], quiet)
        assert first.tabs is not None
        opener = first.tabs[0].id
        await client.act([BUTTON], quiet)
        obs = await _until(client, quiet, lambda o: o.url == DEMO + "dialogs-beside-child")
        assert obs.url == DEMO + "dialogs-beside-child", obs.tabs
        await timed(client.act([BUTTON], quiet))
        obs = await _until(client, quiet, lambda o: o.dialog is not None)
        assert obs.dialog is not None and obs.dialog.tab_id == opener
        assert obs.url == DEMO + "dialogs-beside-child", "the tab beside the dialog is the active one"
        obs, _ = await timed(client.navigate(DEMO + "form", FULL))
        assert obs.dialog is not None and obs.dialog.message == "dialogs-beside: leave the other tab?"
        assert obs.dialog.tab_id == opener
        obs, _ = await timed(client.act([{"type": "dialog_dismiss", "tab_id": opener}], quiet))
        assert obs.dialogs == []
        obs = await _until(client, quiet, lambda o: o.url == DEMO + "form")
        assert obs.url == DEMO + "form", "the navigation goes on once the dialog is answered"
        assert any(t.id == opener and t.title == "cancelled" for t in obs.tabs or []), obs.tabs

    run(dstack, body)


def test_navigate_with_a_dialog_open_says_so_at_once(dstack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-prompt", ObserveOptions(screenshot=False))
        await client.act([BUTTON], ObserveOptions(screenshot=False))
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            await client.navigate(DEMO + "form", ObserveOptions(screenshot=False))
        assert time.monotonic() - started < PROMPT_S
        assert getattr(caught.value, "code", "") == "navigation_failed"
        assert caught.value.detail.get("reason") == "dialog_open"  # type: ignore[attr-defined]

    run(dstack, body)


def test_accepting_a_payment_confirm_goes_through_the_policy(dstack: Stack, tmp_path: Path) -> None:
    """dialog_accept is an action like any other: on a confirm that asks to pay it is L3 and
    waits for the human (denied here: nothing is paid); dismissing is L1 and runs at once."""
    from test_enforcement import Human, play, task_file

    path = task_file(tmp_path, DEMO + "dialogs-pay", [[BUTTON], [{"type": "dialog_accept"}]],
                     {"page_text_contains": "paid"})
    human = Human()
    result = play(dstack, tmp_path, path, human)
    assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
    assert len(human.requests) == 1 and human.requests[0].level == "L3"
    assert "'pay'" in " ".join(human.requests[0].reasons), human.requests[0].reasons
    with_client(dstack, _answer_all)

    path = task_file(tmp_path, DEMO + "dialogs-pay", [[BUTTON], [{"type": "dialog_dismiss"}]],
                     {"page_text_contains": "not paid"})
    human = Human()
    result = play(dstack, tmp_path, path, human)
    assert result.status == "succeeded", result.reason
    assert human.requests == []


def test_popup_that_alerts_on_load_is_reported_with_its_tab(dstack: Stack) -> None:
    """A popup alerting on load gave a 16 s reply with tabs: []."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(DEMO + "dialogs-popup", ObserveOptions(screenshot=False))
        obs, _ = await timed(client.act([BUTTON], FULL))
        if obs.dialog is None:  # the popup's page may still be loading when the click's reply is built
            obs, _ = await timed(client.act([{"type": "wait", "seconds": 1.0}], FULL))
        assert obs.dialog is not None and obs.dialog.message == "dialogs-popup-child: popup says hello"
        assert obs.tabs is not None and len(obs.tabs) == 2
        # The popup's own tab entry may still show its first URL; the dialog names its page.
        popup = next(t for t in obs.tabs if t.id == obs.dialog.tab_id)
        assert obs.dialog.url == DEMO + "dialogs-popup-child" and popup.id == obs.dialog.tab_id
        obs, _ = await timed(client.act([{"type": "dialog_accept", "tab_id": popup.id}], ObserveOptions()))
        assert obs.dialog is None and obs.dialogs == []

    run(dstack, body)


async def _until(client: SandboxClient, observe: ObserveOptions,
                 done: Callable[[Observation], bool]) -> Observation:
    """Observe every quarter second until ``done`` holds, at most :data:`PROMPT_S`, and
    return the last observation (page events come late: Chromium throttles a background
    tab's timers, and a new tab takes a moment to load)."""
    for _ in range(int(PROMPT_S / 0.25)):
        obs, _ = await timed(client.act([{"type": "wait", "seconds": 0.25}], observe))
        if done(obs):
            break
    return obs


async def _answer_all(client: SandboxClient) -> None:
    """Accept every open dialog (a beforeunload page is left), then close every tab but one.
    Escape first closes a dialog the daemon might have missed, so one case cannot stall the next."""
    obs = await client.act([{"type": "keypress", "keys": ["Escape"]}], ObserveOptions(screenshot=False, settle=False))
    for dialog in obs.dialogs:
        await client.act([{"type": "dialog_accept", "tab_id": dialog.tab_id}], ObserveOptions(screenshot=False))
    await client.navigate(DEMO + "form", ObserveOptions(screenshot=False))
    obs = await client.act([], ObserveOptions(screenshot=False))
    for _ in range(len(obs.tabs or []) - 1):
        await client.act([{"type": "keypress", "keys": ["ctrl+w"]}], ObserveOptions(screenshot=False))
