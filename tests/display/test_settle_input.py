"""The page's settle script waits for the request's input to reach the page before it
counts frames (agentd/settle_script.py, ``PAGE_SETTLE_SCRIPT``), in real Chromium on Xvfb.

The input reaches the page's main thread on another channel than the script. When the
click came after the script had run its frames, the transition the click starts was
missed: the script reported no animation, and the settled screenshot could be taken
before the click's effect."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from deskpod.agentd.settle import INPUT_WAIT_MS
from deskpod.agentd.settle_script import PAGE_SETTLE_SCRIPT

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop, Page

    from deskpod.agentd.display.xinput import XInput

LATE_S = 0.3
"""How long after the script starts the click is sent: far past the script's own frames
(about 50 ms), well inside the wait the test allows (1 s)."""


def _start(page: Page, expect: dict[str, Any] | None) -> None:
    """Start the settle script with ``expect``; its answer lands in ``window.__settled``,
    with the fixture's click effects and text field as they were when it resolved."""
    page.evaluate(f"window.__settled = null; {PAGE_SETTLE_SCRIPT}(3000, {json.dumps(expect)})"
                  ".then(answer => { window.__settled = {...answer, effects: {...document.body.dataset},"
                  " field: document.getElementById('field').value}; }); 0")


def _answer(page: Page) -> dict[str, Any]:
    answer: dict[str, Any] = page.wait_until(lambda: page.evaluate("window.__settled"), timeout_s=5)
    return answer


def test_a_late_click_is_waited_for_and_its_transition_counted(desktop: Desktop, page: Page, xinput: XInput) -> None:
    page.open(f"{desktop.base_url}/settle.html")
    _start(page, None)
    seen = _answer(page)["input"]
    x, y = page.center("go")
    _start(page, {"doc": seen["doc"], "event": "pointerup", "count": seen["counts"]["pointerup"],
                  "x": x, "y": y, "scale": 1, "wait_ms": 1000})
    time.sleep(LATE_S)
    xinput.click(x, y)
    answer = _answer(page)
    assert answer["animations"] >= 1, answer
    assert answer["input"]["counts"]["pointerup"] == seen["counts"]["pointerup"] + 1


def test_no_wait_for_a_point_off_the_page_or_another_document(desktop: Desktop, page: Page) -> None:
    """A point outside the viewport, or an expectation of another document, is not waited for."""
    page.open(f"{desktop.base_url}/settle.html")
    _start(page, None)
    seen = _answer(page)["input"]
    for expect in ({"doc": seen["doc"], "event": "pointerup", "count": 0, "x": -50, "y": -50, "scale": 1},
                   {"doc": "another", "event": "pointerup", "count": 0, "x": 10, "y": 10, "scale": 1}):
        started = time.monotonic()
        _start(page, {**expect, "wait_ms": 2000})
        _answer(page)
        assert time.monotonic() - started < 1.5, expect


def _expect(seen: dict[str, Any], event: str, more: int, point: tuple[int, int] | None = None,
            wait_ms: int = INPUT_WAIT_MS) -> dict[str, Any]:
    """An exact expectation: ``more`` ``event`` events after the ``seen`` counts."""
    x, y = point or (None, None)
    return {"doc": seen["doc"], "event": event, "count": seen["counts"][event] + more - 1, "exact": True,
            "x": x, "y": y, "scale": 1, "wait_ms": wait_ms}


def test_the_page_sees_as_many_events_as_the_input_says_it_sent(desktop: Desktop, page: Page,
                                                                 xinput: XInput) -> None:
    """What makes the wait exact: for clicks, a double click, a chord with Shift added and
    text off the keymap, the page's listener counts exactly the releases the input
    counted as sent (never more, or the wait would end before the input's last event)."""
    page.open(f"{desktop.base_url}/settle.html")
    later, field = page.center("later"), page.center("field")
    xinput.click(*field)
    _start(page, None)
    before, sent_before = _answer(page)["input"]["counts"], xinput.sent
    xinput.click(*later)
    xinput.click(*later, count=2)
    xinput.click(*field)
    xinput.keypress(["ctrl", "a"])
    xinput.keypress(["!"])
    xinput.type_text("Grüße, 世界!\n")
    xinput.wait_until_handled()
    for event in ("pointerdown", "pointerup", "keyup"):
        sent = xinput.sent[event] - sent_before[event]
        page.wait_until(lambda event=event, sent=sent: _counts(page)[event] - before[event] >= sent)
        time.sleep(0.2)  # anything more would have come by now
        assert _counts(page)[event] - before[event] == sent, event
    assert xinput.sent["pointerup"] - sent_before["pointerup"] == 4


def _counts(page: Page) -> dict[str, int]:
    """The page's listener's counts now."""
    _start(page, None)
    counts: dict[str, int] = _answer(page)["input"]["counts"]
    return counts


def test_an_exact_wait_counts_one_frame_and_still_sees_the_clicks_deferred_effects(
        desktop: Desktop, page: Page, xinput: XInput) -> None:
    """A click whose handler changes the page in a later task and in the next animation
    frame, sent while the script waits for it: with the exact expectation the script
    ends one frame after the click (``exact``), and both changes are in the document
    when it does."""
    page.open(f"{desktop.base_url}/settle.html")
    later = page.center("later")
    for round_ in range(1, 6):
        _start(page, None)
        seen = _answer(page)["input"]
        _start(page, _expect(seen, "pointerup", 1, later, wait_ms=2000))
        time.sleep(0.05)
        xinput.click(*later)
        answer = _answer(page)
        assert answer["input"]["exact"] is True, answer
        assert answer["effects"] == {"timeout": str(round_), "frame": str(round_)}, answer


def test_an_event_that_does_not_come_ends_the_wait_in_time_and_not_exact(desktop: Desktop, page: Page) -> None:
    """Expecting one event more than the page will see (a key the browser kept): the wait
    ends after ``wait_ms`` and the script counts the frames of an inexact wait."""
    page.open(f"{desktop.base_url}/settle.html")
    _start(page, None)
    seen = _answer(page)["input"]
    started = time.monotonic()
    _start(page, _expect(seen, "keyup", 1, wait_ms=300))
    answer = _answer(page)
    assert answer["input"]["exact"] is False, answer
    assert time.monotonic() - started >= 0.3


def test_a_page_that_hides_the_input_from_the_listener_makes_the_wait_late_not_early(
        desktop: Desktop, page: Page, xinput: XInput) -> None:
    """A hostile page stops every release before the settle listener sees it (its own
    capturing listener, added first) and dispatches releases of its own: the exact wait
    does not end on either, it runs its whole ``wait_ms`` and the script counts the
    frames of an inexact wait."""
    page.open(f"{desktop.base_url}/settle.html")
    page.evaluate("addEventListener('pointerup', e => e.stopImmediatePropagation(), {capture: true}); 0")
    later = page.center("later")
    _start(page, None)
    seen = _answer(page)["input"]
    started = time.monotonic()
    _start(page, _expect(seen, "pointerup", 1, later, wait_ms=400))
    page.evaluate("for (let i = 0; i < 5; i++) document.getElementById('later')"
                  ".dispatchEvent(new PointerEvent('pointerup', {bubbles: true})); 0")
    xinput.click(*later)
    answer = _answer(page)
    assert answer["input"]["exact"] is False, answer
    assert answer["input"]["counts"]["pointerup"] == seen["counts"]["pointerup"]
    assert time.monotonic() - started >= 0.4


def test_an_exact_wait_for_typed_text_ends_on_its_last_key(desktop: Desktop, page: Page, xinput: XInput) -> None:
    """Typing sent while the script waits for every key release it makes (Shift's
    included): the script ends exact, with the whole text in the field."""
    page.open(f"{desktop.base_url}/settle.html")
    xinput.click(*page.center("field"))
    _start(page, None)
    seen = _answer(page)["input"]
    releases = len("Hello World") + 2  # two capitals, each with Shift
    _start(page, _expect(seen, "keyup", releases, wait_ms=2000))
    sent = xinput.sent["keyup"]
    xinput.type_text("Hello World")
    assert xinput.sent["keyup"] - sent == releases
    answer = _answer(page)
    assert answer["input"]["exact"] is True, answer
    assert answer["field"] == "Hello World", answer


def test_a_form_that_enter_submits_is_asked_for_before_the_page_answers_or_leaves(
        desktop: Desktop, page: Page, xinput: XInput) -> None:
    """What lets the wait follow a navigation the input started (agentd/settle.py,
    ``NavigationActivity``): after Enter in a form's field, the script's exact wait (one
    frame after Enter's release) either answers in the document being left, or never
    answers because the new one came first (most rounds on an idle machine). Either
    way the page has asked for the navigation (``Page.frameRequestedNavigation``) on the
    same DevTools session before: before the answer, and before the browser begins it."""
    page.open(f"{desktop.base_url}/navigate.html")
    xinput.click(*page.center("field"))
    page.call("Page.enable")
    page.call("Runtime.enable")
    for _ in range(5):
        _start(page, None)
        seen = _answer(page)["input"]
        page.evaluate(f"{PAGE_SETTLE_SCRIPT}(3000, {json.dumps(_expect(seen, 'keyup', 1, wait_ms=2000))})"
                      ".then(answer => console.debug('deskpod-settled', JSON.stringify(answer.input))); 0")
        xinput.keypress(["Return"])
        events = page.read_events(1.0)
        methods = [e["method"] for e in events]
        answers = [i for i, e in enumerate(events) if e["method"] == "Runtime.consoleAPICalled"
                   and e["params"]["args"][0].get("value") == "deskpod-settled"]
        asked = methods.index("Page.frameRequestedNavigation")
        assert asked < methods.index("Page.frameStartedLoading") < methods.index("Page.frameNavigated"), methods
        for answered in answers:
            assert asked < answered, methods
            assert json.loads(events[answered]["params"]["args"][1]["value"])["exact"] is True, events[answered]
        page.wait_until(lambda: page.evaluate("document.readyState === 'complete' && location.search.includes('q=')"))
        page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
        xinput.click(*page.center("field"))
