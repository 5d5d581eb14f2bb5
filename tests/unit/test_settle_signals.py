"""Settling by signal (agentd/settle.py) against a fake page and fake damage reports:
which signal ends the wait, what is waited for, and the fallbacks; and how typed text
is cut for insertion (agentd/browser/fasttype.py). The real thing runs in
tests/integration/test_settle.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from virtual_time import virtual_time

from deskpod.agentd.browser.fasttype import INSERT_MIN_CHARS, split_for_insertion
from deskpod.agentd.browser.activity import NavigationActivity, NetworkActivity
from deskpod.agentd.display.popups import POPUP_DRAW_S, POPUP_MAP_S, Opened
from deskpod.agentd.settle import (
    DIALOG_DRAW_MAX_S,
    DIALOG_QUIET_S,
    EXACT_QUIET_SLACK_S,
    INPUT_WAIT_MS,
    MAX_DOCUMENTS,
    NAVIGATION_START_S,
    PAGE_QUIET_S,
    PDF_QUIET_S,
    POPUP_QUIET_S,
    ExpectedInput,
    SettleResult,
    Settler,
    expected_input,
)
from deskpod.errors import BrowserError
from deskpod.protocol import CoordinateMap, Size, parse_action



@pytest.fixture(autouse=True)
def _on_virtual_time() -> Iterator[None]:
    """Every wait here runs on virtual time (``tests/support/virtual_time.py``): the
    milliseconds the tests count pass exactly, however loaded the machine is."""
    with virtual_time():
        yield


class FakePopups:
    """A popup created ``created_at`` and mapped ``mapped_at`` s after ``damage``'s wait began (``None``: never)."""

    def __init__(self, damage: FakeDamage, created_at: float | None, mapped_at: float | None) -> None:
        self._damage, self._at = damage, (created_at, mapped_at)

    def _when(self, at: float | None) -> float | None:  # when it happened; None: not (yet)
        t0 = self._damage.t0
        return t0 + at if at is not None and t0 is not None and asyncio.get_running_loop().time() >= t0 + at else None

    @property
    def seq(self) -> int:
        return sum(self._when(at) is not None for at in self._at)

    def since(self, seq: int) -> Opened:
        created, mapped = (self._when(at) for at in self._at)
        return Opened(mapped, created if mapped is None else None)


class FakeDamage:
    """Damage reports: ``bursts`` are seconds after the wait starts at which the screen is
    drawn; a popup is created at ``popup_created`` and mapped at ``popup_at`` (``None``: never)."""

    def __init__(self, bursts: list[float] | None = None, forever_s: float | None = None,
                 popup_at: float | None = None, popup_created: float | None = None) -> None:
        self.seq = 0
        self._bursts = sorted(bursts or [])
        self._forever_s = forever_s
        self.t0: float | None = None
        self.popups = FakePopups(self, popup_created if popup_created is not None else popup_at, popup_at)

    async def wait_for_change(self, after_seq: int, timeout_s: float) -> int:
        loop = asyncio.get_running_loop()
        if self.t0 is None:
            self.t0 = loop.time()
        if self._forever_s is not None:  # drawn every few ms, never quiet
            await asyncio.sleep(min(timeout_s, self._forever_s))
            self.seq += 1
            return self.seq
        now = loop.time() - self.t0
        upcoming = [b for b in self._bursts if b >= now]
        if upcoming and upcoming[0] - now <= timeout_s:
            await asyncio.sleep(max(0.0, upcoming[0] - now))
            self._bursts.remove(upcoming[0])
            self.seq += 1
            return self.seq
        await asyncio.sleep(timeout_s)
        return self.seq


class FakePage:
    """The browser as settling sees it: loading, dialogs, network and the page script."""

    def __init__(self, answers: list[Any] | None = None, fails: bool = False) -> None:
        self.loading = False
        self.network = NetworkActivity()
        self.navigation = NavigationActivity()
        self.answers = list(answers or [{"animations": 0, "endless": False}])
        self.fails = fails
        self.evaluated = 0
        self.expressions: list[str] = []
        self.dialog = False
        self.device_scale_factor = 2.0
        self.pdf_shown = False
        self.pdf_loaded_after: float | None = None  # seconds until the PDF viewer has its document (None: never)

    def dialog_open(self) -> bool:
        return self.dialog

    async def wait_loaded(self, timeout_s: float) -> bool:
        await asyncio.sleep(0.01)
        self.loading = False
        return True

    async def wait_pdf_loaded(self, timeout_s: float) -> bool:
        loaded = self.pdf_loaded_after is not None and self.pdf_loaded_after <= timeout_s
        await asyncio.sleep(self.pdf_loaded_after if loaded else timeout_s)  # type: ignore[arg-type]
        return loaded

    async def evaluate_isolated(self, expression: str, await_promise: bool = False) -> Any:
        self.evaluated += 1
        self.expressions.append(expression)
        if self.fails:
            raise BrowserError("no page")
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def _ping() -> bool:
    return True


def settler(page: FakePage, damage: FakeDamage | None, by_signal: bool = True,
            polled: list[float] | None = None, sent: dict[str, int] | None = None) -> Settler:
    """A settler of ``page``; ``sent`` is the input's DOM events sent so far (changed in place by a test)."""
    async def poll(window_s: float, timeout_s: float) -> tuple[bool, float]:
        if polled is not None:
            polled.append(window_s)
        return True, window_s

    tally = sent if sent is not None else {}
    s = Settler(page, lambda: damage, poll, _ping, lambda: tally, by_signal)  # type: ignore[arg-type]
    s.mark()
    return s


def run(s: Settler, window_s: float = 0.05, timeout_s: float = 2.0) -> SettleResult:
    return asyncio.run(s.settle(window_s, timeout_s))


def test_a_frame_without_damage_ends_with_frame() -> None:
    result = run(settler(FakePage(), FakeDamage()))
    assert result.settled and result.signal == "frame"


def test_damage_after_the_frame_is_waited_out() -> None:
    result = run(settler(FakePage(), FakeDamage([0.005, 0.015])))
    assert result.settled and result.signal == "damage"
    assert result.waited_s >= 0.015


def test_a_late_first_paint_after_the_page_signal_is_waited_for() -> None:
    """No damage yet when the page says its frame is painted: the first damage, 30 ms
    later (longer than the quiet time), is still waited for."""
    result = run(settler(FakePage(), FakeDamage([0.03])))
    assert result.settled and result.signal == "damage" and result.waited_s >= 0.03


def test_a_popup_opened_after_the_mark_is_waited_for_until_it_has_drawn() -> None:
    """A popup created 5 ms after the input maps 60 ms later and draws parts then and 60 ms
    after: the wait lasts :data:`POPUP_DRAW_S` past the map and :data:`POPUP_QUIET_S` past the
    last part (``popup``); for one that never maps, :data:`POPUP_MAP_S` past its creation."""
    parts = [0.065, 0.125]
    result = run(settler(FakePage(), FakeDamage(parts, popup_created=0.005, popup_at=0.065)))
    assert result.settled and result.signal == "popup", result
    assert result.waited_s >= max(0.065 + POPUP_DRAW_S, parts[-1] + POPUP_QUIET_S), result
    late = [0.065, 0.2]  # a part drawn just before POPUP_DRAW_S past the map is over: waited out too
    result = run(settler(FakePage(), FakeDamage(late, popup_created=0.005, popup_at=0.065)))
    assert result.signal == "popup" and result.waited_s >= 0.2 + POPUP_QUIET_S, result
    result = run(settler(FakePage(), FakeDamage(popup_created=0.01)))  # one that never maps: bounded
    assert result.signal == "popup" and 0.01 + POPUP_MAP_S <= result.waited_s < 0.01 + POPUP_MAP_S + 0.05, result


def test_a_popup_over_an_endless_animation_stretches_its_cap_to_the_popups_drawing() -> None:
    """The page runs an endless animation (damage every 10 ms): the wait ends at the
    fallback's cap, but not before the popup has had :data:`POPUP_DRAW_S` to draw."""
    page = FakePage([{"animations": 0, "endless": True}])
    result = run(settler(page, FakeDamage(forever_s=0.01, popup_at=0.1)))
    assert result.settled and result.signal == "quiet_window", result
    assert 0.1 + POPUP_DRAW_S <= result.waited_s < 0.1 + POPUP_DRAW_S + 0.05, result


def test_running_animations_are_reported() -> None:
    result = run(settler(FakePage([{"animations": 2, "endless": False}]), FakeDamage()))
    assert result.settled and result.signal == "animation"


def test_requests_started_after_the_mark_are_waited_for_then_the_page_asked_again() -> None:
    page = FakePage()
    s = settler(page, FakeDamage())
    page.network.on_event("Network.requestWillBeSent", {"requestId": "1", "type": "Fetch"})

    async def body() -> SettleResult:
        async def answer() -> None:
            await asyncio.sleep(0.05)
            page.network.on_event("Network.loadingFinished", {"requestId": "1"})

        task = asyncio.create_task(answer())
        result = await s.settle(0.05, 2.0)
        await task
        return result

    result = asyncio.run(body())
    assert result.settled and result.signal == "network" and result.waited_s >= 0.05
    assert page.evaluated >= 1


@pytest.mark.parametrize(("action", "expected"), [
    ({"type": "click", "x": 100, "y": 50}, ExpectedInput("pointerup", 200, 100)),
    ({"type": "double_click", "x": 10, "y": 20}, ExpectedInput("pointerup", 20, 40)),
    ({"type": "mouse_down", "x": 10, "y": 20}, ExpectedInput("pointerdown", 20, 40)),
    ({"type": "mouse_up", "x": 10, "y": 20}, ExpectedInput("pointerup", 20, 40)),
    ({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 30, "y": 40}]}, ExpectedInput("pointerup", 60, 80)),
    ({"type": "scroll", "x": 5, "y": 6, "scroll_y": 3}, ExpectedInput("wheel", 10, 12)),
    ({"type": "type", "text": "hi"}, ExpectedInput("keyup")),
    ({"type": "keypress", "keys": ["ENTER"]}, ExpectedInput("keyup")),
    ({"type": "hold_key", "keys": ["shift"], "seconds": 0.1}, ExpectedInput("keyup")),
    ({"type": "click"}, None),  # where the pointer is: not known here
    ({"type": "click", "x": 1, "y": 1, "button": "right"}, None),  # a context menu takes the release
    ({"type": "scroll", "x": 5, "y": 6}, None),  # no notch: no wheel event
    ({"type": "type", "text": ""}, None),
    ({"type": "wait", "seconds": 0.1}, None),
])
def test_the_last_action_says_which_dom_event_to_wait_for(action: dict[str, Any],
                                                          expected: ExpectedInput | None) -> None:
    coords = CoordinateMap(Size(width=2560, height=1600), Size(width=1280, height=800))
    assert expected_input([parse_action({"type": "wait", "seconds": 0}), parse_action(action)], coords) == expected
    assert expected_input([], coords) is None


def test_the_expected_input_is_sent_once_counted_from_the_listeners_last_counts() -> None:
    """The first settle has no listener counts to go by (null); the page reports them, and
    the next request's page call asks for one event more than that, once: a settle
    without a new mark asks for nothing. With no such event sent since (a wheel, which
    the executor does not count), the wait is not exact."""
    seen = {"doc": "d1", "counts": {"pointerup": 3, "keyup": 9, "bogus": "x"}}
    page = FakePage([{"animations": 0, "endless": False, "input": seen}])
    s = settler(page, FakeDamage())
    run(s)
    assert page.expressions[-1].endswith(", null)"), page.expressions[-1]
    s.mark(ExpectedInput("pointerup", 200, 100))
    run(s)
    assert page.expressions[-1].endswith(
        ', {"doc": "d1", "event": "pointerup", "count": 3, "exact": false, "x": 200, "y": 100, "scale": 2.0, '
        f'"wait_ms": {INPUT_WAIT_MS}}})'), page.expressions[-1]
    run(s)
    assert page.expressions[-1].endswith(", null)"), page.expressions[-1]


def _expected(expression: str) -> dict[str, Any]:
    """The expected input a page call was given (its second argument)."""
    args = expression.rsplit(")(", 1)[1]
    expect: dict[str, Any] = json.loads(args[args.index(",") + 1:-1])
    return expect


def test_the_wait_is_exact_for_every_event_the_input_sent_since_the_page_counted() -> None:
    """The page counted 3 releases when 10 had been sent; a double click then sends two
    more: the page must count 5 (the 4 of ``count`` exceeded), whatever it saw before
    it was asked. Input sent while it answers is counted by the page, not expected again."""
    sent = {"pointerdown": 10, "pointerup": 10, "keyup": 40}
    page = FakePage([{"animations": 0, "endless": False, "input": {"doc": "d1", "counts": {"pointerup": 3},
                                                                   "exact": True}}])
    s = settler(page, FakeDamage(), sent=sent)
    run(s)
    sent.update(pointerdown=12, pointerup=12)
    s.mark(ExpectedInput("pointerup", 200, 100))
    run(s)
    expect = _expected(page.expressions[-1])
    assert expect["exact"] is True and expect["count"] == 4, expect
    sent.update(keyup=43)
    s.mark(ExpectedInput("keyup"))
    run(s)
    expect = _expected(page.expressions[-1])
    assert expect["event"] == "keyup" and expect["exact"] is True and expect["count"] == 2, expect


def test_an_exact_wait_waits_out_a_paint_one_frame_later() -> None:
    """After the page's exact wait (one frame counted), a paint 18 ms after the first
    (the next frame at 60 Hz) is still waited for; after an inexact one (three frames
    counted) the shorter quiet time ends the wait before it."""
    answer = {"animations": 0, "endless": False, "input": {"doc": "d1", "counts": {}, "exact": True}}
    damage = FakeDamage([0.005, 0.023])
    exact = run(settler(FakePage([answer]), damage))
    assert exact.settled and damage.seq == 2 and exact.waited_s >= 0.023 + 1 / 60 + EXACT_QUIET_SLACK_S, exact
    damage = FakeDamage([0.005, 0.023])
    inexact = run(settler(FakePage([{**answer, "input": {**answer["input"], "exact": False}}]), damage))
    assert inexact.settled and damage.seq == 1, inexact


def test_the_browser_is_pinged_only_when_the_page_cannot_wait_for_the_input_itself() -> None:
    """The page counted the listener's events before; a click then sends one more
    release: the page is asked to wait for it (exact) and the focused client is not
    pinged. When the page answers that it could not wait (the point was on a frame), the
    client is pinged then and the page asked again without an expectation. Without an
    expectation the client is pinged first, as before."""
    exact = {"animations": 0, "endless": False, "input": {"doc": "d1", "counts": {"pointerup": 1}, "exact": True}}
    inexact = {**exact, "input": {**exact["input"], "exact": False}}
    for answers, pings_wanted, asked_wanted in (([exact], 0, 1), ([inexact, exact], 1, 2)):
        pings: list[int] = []

        async def ping(pings: list[int] = pings) -> bool:
            pings.append(1)
            return True

        sent = {"pointerup": 1}
        page = FakePage([{**exact, "input": {**exact["input"], "exact": False}}, *answers])
        s = Settler(page, lambda: FakeDamage(), None, ping, lambda sent=sent: sent)  # type: ignore[arg-type]
        s.mark()
        run(s)  # the first settle in the document: no listener counts known yet
        assert len(pings) == 1
        sent["pointerup"] = 2
        s.mark(ExpectedInput("pointerup", 200, 100))
        run(s)
        assert len(pings) - 1 == pings_wanted and page.evaluated - 1 == asked_wanted, (answers, pings, page.evaluated)
        assert _expected(page.expressions[1])["exact"] is True
        if asked_wanted == 2:
            assert _expected(page.expressions[2]) is None


class FetchingPage(FakePage):
    """A page whose first script run given an expectation starts a request, answered 20 ms later."""

    async def evaluate_isolated(self, expression: str, await_promise: bool = False) -> Any:
        if not expression.endswith(", null)") and "r1" not in self.network._started:
            self.network.on_event("Network.requestWillBeSent", {"requestId": "r1", "type": "Fetch"})
            asyncio.get_running_loop().call_later(
                0.02, self.network.on_event, "Network.loadingFinished", {"requestId": "r1"})
        return await super().evaluate_isolated(expression, await_promise)


def test_a_page_that_waited_for_the_input_and_then_for_its_requests_is_not_asked_again() -> None:
    """The page waited exactly for the click, which started a fetch: the script runs again
    after the fetch (without an expectation, so that run is not exact), but the browser
    is not pinged and the page not asked a third time."""
    exact = {"animations": 0, "endless": False, "input": {"doc": "d1", "counts": {"pointerup": 1}, "exact": True}}
    inexact = {**exact, "input": {**exact["input"], "exact": False}}
    pings: list[int] = []

    async def ping() -> bool:
        pings.append(1)
        return True

    sent = {"pointerup": 1}
    page = FetchingPage([inexact, exact, inexact])
    s = Settler(page, lambda: FakeDamage(), None, ping, lambda: sent)  # type: ignore[arg-type]
    s.mark()
    run(s)
    sent["pointerup"] = 2
    s.mark(ExpectedInput("pointerup", 200, 100))
    result = run(s)
    assert result.signal == "network" and len(pings) == 1 and page.evaluated == 3, (result, pings, page.evaluated)


def test_the_exact_quiet_time_is_a_frame_of_the_display_and_never_under_the_page_quiet_time() -> None:
    """A paint 18 ms after the first is one frame later at 60 Hz (waited out); at 240 Hz
    the wait ends before it, after the page quiet time (12 ms), not after one 4.2 ms frame
    and the slack (7.5 ms): a paint 10 ms after the first is still waited out there."""
    answer = {"animations": 0, "endless": False, "input": {"doc": "d1", "counts": {}, "exact": True}}
    results = {}
    for hz, second in ((60, 0.023), (240, 0.023), (240, 0.015)):
        damage = FakeDamage([0.005, second])
        s = Settler(FakePage([answer]), lambda d=damage: d, None, _ping, dict, True,  # type: ignore[arg-type]
                    lambda hz=hz: 1 / hz)
        s.mark()
        results[hz, second] = (run(s), damage.seq)
    assert results[60, 0.023][0].settled and results[60, 0.023][1] == 2, results
    assert results[240, 0.023][0].settled and results[240, 0.023][1] == 1, results
    assert results[240, 0.023][0].waited_s >= 0.005 + PAGE_QUIET_S, results
    assert results[240, 0.015][0].settled and results[240, 0.015][1] == 2, results


class NavigatingPage(FakePage):
    """A page whose first script run sees the input ask for a navigation (a form's
    submission): the browser begins it ``begin_s`` later (``None``: never, the page
    cancelled it; ``"fragment"``: within the document) and it loads for 30 ms."""

    def __init__(self, begin_s: float | str | None, load_s: float = 0.03) -> None:
        super().__init__()
        self.begin_s, self.load_s = begin_s, load_s
        self.begun: list[asyncio.Task[None]] = []

    async def _begin(self) -> None:
        assert isinstance(self.begin_s, float)
        await asyncio.sleep(self.begin_s)
        self.navigation.on_event("Page.frameStartedLoading", {})
        self.loading = True
        await asyncio.sleep(self.load_s)
        self.loading = False

    async def wait_loaded(self, timeout_s: float) -> bool:
        while self.loading:
            await asyncio.sleep(0.002)
        return True

    async def evaluate_isolated(self, expression: str, await_promise: bool = False) -> Any:
        if self.evaluated == 0:
            self.navigation.on_event("Page.frameRequestedNavigation", {"disposition": "currentTab"})
            if self.begin_s == "fragment":
                self.navigation.on_event("Page.navigatedWithinDocument", {})
            elif self.begin_s is not None:
                self.begun.append(asyncio.ensure_future(self._begin()))
        return await super().evaluate_isolated(expression, await_promise)


def test_a_navigation_the_page_asked_for_is_waited_for_and_the_new_document_asked() -> None:
    """The page's answer comes before the browser has begun the navigation the input
    asked for (Enter in a form): the wait follows it to the new document and asks that
    one too, instead of ending on the document being left."""
    page = NavigatingPage(begin_s=0.02)
    result = run(settler(page, FakeDamage()))
    assert result.settled and result.signal == "navigation" and page.evaluated == 2, result
    assert not page.loading and page.navigation.loads == 1 and result.waited_s >= 0.05


def test_a_navigation_that_never_begins_is_waited_for_a_bounded_time_once() -> None:
    page = NavigatingPage(begin_s=None)
    s = settler(page, FakeDamage())
    first = run(s)
    assert first.settled and first.signal == "navigation" and page.evaluated == 1
    assert NAVIGATION_START_S <= first.waited_s < NAVIGATION_START_S + 0.1, first
    s.mark()
    again = run(s)
    assert again.settled and again.waited_s < NAVIGATION_START_S and not page.navigation.pending(), again


def test_a_fragment_navigation_is_not_followed_to_another_document() -> None:
    page = NavigatingPage(begin_s="fragment")
    result = run(settler(page, FakeDamage()))
    assert result.settled and page.evaluated == 1 and result.waited_s < NAVIGATION_START_S, result


def test_a_document_hidden_by_a_new_tab_is_left_and_the_tab_in_front_asked() -> None:
    """A click opened a tab in front of the page: the page, hidden, paints no frame, so
    its settle script answers ``hidden`` at once (on main it waited for a frame until the
    timeout) and the tab now in front, the next one connected, is asked instead."""
    page = FakePage([{"hidden": True}, {"animations": 0, "endless": False}])
    result = run(settler(page, FakeDamage([0.005])), timeout_s=3.0)
    assert result.settled and result.signal == "navigation" and page.evaluated == 2, result
    assert result.waited_s < 0.2, result


def test_a_page_that_stays_hidden_ends_in_the_quiet_window() -> None:
    """Every tab asked is hidden (a minimized window): asked a bounded number of times, then the
    quiet window decides, well before the timeout."""
    page = FakePage([{"hidden": True}])
    result = run(settler(page, FakeDamage()), window_s=0.05, timeout_s=3.0)
    assert result.settled and result.signal == "quiet_window" and page.evaluated == MAX_DOCUMENTS, result
    assert result.waited_s < 0.5, result


def test_a_navigation_to_another_tab_is_not_waited_for() -> None:
    activity = NavigationActivity()
    activity.on_event("Page.frameRequestedNavigation", {"disposition": "newForegroundTab"})
    assert not activity.pending()
    activity.on_event("Page.frameRequestedNavigation", {"disposition": "currentTab"})
    assert activity.pending()
    activity.on_event("Page.frameStartedLoading", {})
    assert not activity.pending() and activity.loads == 1


def test_requests_before_the_mark_and_event_streams_are_not_waited_for() -> None:
    page = FakePage()
    page.network.on_event("Network.requestWillBeSent", {"requestId": "old", "type": "XHR"})
    s = settler(page, FakeDamage())
    page.network.on_event("Network.requestWillBeSent", {"requestId": "es", "type": "EventSource"})
    result = run(s)
    assert result.signal == "frame" and result.waited_s < 0.5


def test_no_page_signal_falls_back_to_the_quiet_window() -> None:
    result = run(settler(FakePage(fails=True), FakeDamage([0.01])), window_s=0.05)
    assert result.settled and result.signal == "quiet_window" and result.waited_s >= 0.05


def test_an_endless_animation_is_bounded_by_the_fallback_cap() -> None:
    result = run(settler(FakePage([{"animations": 0, "endless": True}]), FakeDamage(forever_s=0.004)), timeout_s=3)
    assert result.settled and result.signal == "quiet_window" and result.waited_s < 1.0


def test_a_screen_that_never_stops_without_page_signal_times_out() -> None:
    result = run(settler(FakePage(fails=True), FakeDamage(forever_s=0.004)), timeout_s=0.3)
    assert not result.settled and result.signal == "timeout"


def test_an_open_dialog_counts_as_settled() -> None:
    page = FakePage()
    page.dialog = True
    result = run(settler(page, FakeDamage()))
    assert result.settled and result.signal == "dialog" and page.evaluated == 0


def test_beside_an_open_dialog_the_screen_is_waited_for() -> None:
    """A click on the tab of a background dialog: Chromium draws the tab and its dialog
    after the input, and an open dialog holds every page signal; the settle waits until
    the screen holds still (on main it ended at once, before the tab was drawn)."""
    page = FakePage()
    page.dialog = True
    result = run(settler(page, FakeDamage([0.04, 0.09])))
    assert result.settled and result.signal == "dialog" and result.waited_s >= 0.09 + DIALOG_QUIET_S
    result = run(settler(page, FakeDamage(forever_s=0.004)), timeout_s=3)
    assert result.settled and result.signal == "dialog" and result.waited_s < DIALOG_DRAW_MAX_S + 0.5


def test_a_navigation_is_waited_for() -> None:
    page = FakePage()
    page.loading = True
    result = run(settler(page, FakeDamage()))
    assert result.settled and result.signal == "navigation"


def test_without_damage_reports_frames_are_compared() -> None:
    polled: list[float] = []
    result = run(settler(FakePage(), None, polled=polled))
    assert result.settled and result.signal == "frame" and polled and polled[0] < 0.05


def test_the_window_only_mode_is_the_old_quiet_window() -> None:
    polled: list[float] = []
    page = FakePage()
    result = run(settler(page, FakeDamage(), by_signal=False, polled=polled), window_s=0.05)
    assert result.signal == "quiet_window" and polled == [0.05] and page.evaluated == 0


@pytest.mark.parametrize("text", ["", "short", "a" * (INSERT_MIN_CHARS - 1), "x\ny\tz"])
def test_short_runs_are_typed(text: str) -> None:
    assert all(not insertable for _, insertable in split_for_insertion(text))
    assert "".join(p for p, _ in split_for_insertion(text)) == text


def test_long_runs_are_inserted_but_their_last_character_and_breaks_are_typed() -> None:
    long = "é" * INSERT_MIN_CHARS
    text = f"{long}\n{long}\tend"
    pieces = split_for_insertion(text)
    assert "".join(p for p, _ in pieces) == text
    assert pieces == [(long[:-1], True), ("é\n", False), (long[:-1], True), ("é\tend", False)]


def test_the_screenshot_is_prepared_during_the_quiet_time_after_damage_one_at_a_time() -> None:
    """Each new damage starts a quiet time, and the screenshot is prepared then, unless
    the last preparation is still running; a screen that never changed prepares none."""
    calls: list[str] = []

    async def body(bursts: list[float], blocking: bool) -> SettleResult:
        hold = asyncio.Event()

        async def prepare() -> None:
            calls.append("prepare")
            if blocking:
                await hold.wait()  # still encoding when the later paints come

        result = await settler(FakePage(), FakeDamage(bursts)).settle(0.05, 2.0, prepare)
        hold.set()
        return result

    assert asyncio.run(body([0.005, 0.01], blocking=False)).signal == "damage"
    assert calls == ["prepare", "prepare"]
    calls.clear()
    assert asyncio.run(body([0.005, 0.01], blocking=True)).signal == "damage"
    assert calls == ["prepare"]
    calls.clear()
    assert asyncio.run(body([], blocking=False)).signal == "frame"
    assert calls == []


def test_a_pdf_is_settled_once_its_viewer_has_the_document_and_the_screen_is_quiet_after() -> None:
    """The tab's document is a PDF: its viewer, loaded 0.3 s after the page's signal, is
    waited for, then the page it draws 20 ms later (no frame signal follows it) and a quiet
    time of PDF_QUIET_S; an ordinary page is not asked about a viewer."""
    page = FakePage()
    page.pdf_shown, page.pdf_loaded_after = True, 0.3
    result = run(settler(page, FakeDamage([0.02])))  # its first page, 20 ms after the viewer loaded
    assert result.settled and result.signal == "navigation"
    assert result.waited_s >= 0.32 + PDF_QUIET_S
    plain = FakePage()
    plain.pdf_loaded_after = 0.3
    result = run(settler(plain, FakeDamage()))
    assert result.settled and result.waited_s < 0.3


def test_a_pdf_viewer_that_never_has_its_document_is_a_timeout() -> None:
    page = FakePage()
    page.pdf_shown = True
    result = run(settler(page, FakeDamage()), timeout_s=0.3)
    assert not result.settled and result.signal == "timeout"
