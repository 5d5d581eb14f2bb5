"""The daemon's side of the press guard (:mod:`deskpod.agentd.browser.press_guard`) against a
scripted DevTools: which frames are armed with what, and what a stopped press becomes.
The guard's script itself runs in a real page: ``tests/integration/test_screen_binding.py``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from deskpod.agentd.browser import press_guard
from deskpod.agentd.browser.frame_calls import FrameCalls
from deskpod.agentd.browser.press_guard import GUARD_WORLD, PRESS_EVENTS, arm, finish, wait_pressed
from deskpod.errors import BrowserError, ScreenChangedError
from deskpod.protocol import ScreenExpectation

TREE = {"frameTree": {"frame": {"id": "top", "url": "http://shop.test/"},
                      "childFrames": [{"frame": {"id": "ad", "url": "http://shop.test/ad"}}]}}


class Page:
    """Answers the calls the guard makes; ``states`` is what each frame's guard reports on
    ``state``/``disarm``/``close`` (by context id: ``top`` 1, ``ad`` 2)."""

    def __init__(self, states: dict[int, Any] | None = None, failing: frozenset[str] = frozenset()) -> None:
        self.states = states or {}
        self.failing = failing
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        params = params or {}
        self.sent.append((method, params))
        if method == "Page.getFrameTree":
            return TREE
        if method == "Page.createIsolatedWorld":
            if params["frameId"] in self.failing:
                raise BrowserError("no answer")
            assert params["worldName"] == GUARD_WORLD
            return {"executionContextId": {"top": 1, "ad": 2}[params["frameId"]]}
        if method == "DOM.resolveNode":
            return {"object": {"objectId": "node-7"}}
        if method == "Runtime.callFunctionOn":
            return {"result": {"value": {"early": True}}}
        if method == "Runtime.evaluate":
            expression = params["expression"]
            if expression.startswith(tuple(f"globalThis.__deskpodPressGuard.{verb}(" for verb in ("state", "disarm", "close"))):
                return {"result": {"value": self.states.get(params["contextId"])}}
            return {"result": {"value": {"early": True}}}
        return {}


def calls(page: Page) -> FrameCalls:
    return FrameCalls(page, "page", "top", [])


def test_the_frame_under_the_point_is_armed_with_its_node_and_every_other_with_none() -> None:
    page = Page()
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    assert armed.target == ("page", 1) and sorted(armed.frames) == [("page", 1), ("page", 2)]
    evaluated = {p["contextId"]: p["expression"] for m, p in page.sent if m == "Runtime.evaluate"}
    assert evaluated[2].endswith(f"globalThis.__deskpodPressGuard.arm(null, {json.dumps(armed.token)})")
    assert evaluated[1].endswith("; null")  # installed (when it was not yet), armed below on the node
    resolved = next(p for m, p in page.sent if m == "DOM.resolveNode")
    assert resolved["backendNodeId"] == 7 and resolved["executionContextId"] == 1
    armed_on = next(p for m, p in page.sent if m == "Runtime.callFunctionOn")
    assert armed_on["objectId"] == "node-7"
    assert armed_on["arguments"] == [{"value": armed.token}, {"value": "pointerup"}, {"value": 1}]


def test_a_frame_that_does_not_answer_is_left_unarmed_but_the_judged_frame_must_be_armed() -> None:
    armed = asyncio.run(arm(calls(Page(failing=frozenset({"ad"}))), ("page", "top", 7), "click"))
    assert armed.frames == [("page", 1)]
    with pytest.raises(BrowserError, match="press guard could not be armed"):
        asyncio.run(arm(calls(Page(failing=frozenset({"top"}))), ("page", "top", 7), "click"))


def test_a_stopped_press_is_a_screen_change_with_what_was_stopped() -> None:
    seen = ["pointerdown", "mousedown", "pointerup", "mouseup", "click"]
    page = Page({1: {"seen": seen, "blocked": [["pointerdown", "changed"], ["mousedown", "after"]]},
                 2: {"seen": [], "blocked": []}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    with pytest.raises(ScreenChangedError) as caught:
        asyncio.run(finish(calls(page), armed, "click"))
    assert caught.value.detail["reason"] == "press"
    assert caught.value.detail["stopped"] == [["pointerdown", "changed"], ["mousedown", "after"]]
    assert caught.value.detail["seen"] == seen
    assert "pointerdown (changed)" in caught.value.message


def test_a_press_in_a_frame_armed_with_none_is_stopped_too() -> None:
    page = Page({1: {"seen": [], "blocked": []}, 2: {"seen": ["pointerdown"], "blocked": [["pointerdown", "frame"]]}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    with pytest.raises(ScreenChangedError):
        asyncio.run(finish(calls(page), armed, "mouse_down"))


def test_a_press_that_landed_is_not_refused_and_every_frame_is_disarmed() -> None:
    page = Page({1: {"seen": ["pointerdown", "mousedown", "pointerup", "mouseup", "click"], "blocked": []}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    asyncio.run(finish(calls(page), armed, "click"))
    disarmed = [p["contextId"] for m, p in page.sent
                if m == "Runtime.evaluate" and p["expression"].startswith("globalThis.__deskpodPressGuard.disarm(")]
    assert sorted(disarmed) == [1, 2]


def test_disarming_a_press_never_sent_refuses_nothing() -> None:
    """The check refused first, or the action failed: the guards are disarmed, nothing refused."""
    page = Page({1: {"seen": [], "blocked": [["pointerdown", "target"]]}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    asyncio.run(finish(calls(page), armed, None))


def test_the_wait_ends_at_the_press_s_last_pointer_event() -> None:
    """A stopped ``pointerdown`` suppresses ``mousedown`` and ``mouseup``: ``pointerup`` ends the wait."""
    page = Page({1: {"seen": ["pointerdown", "pointerup", "click"], "blocked": [["pointerdown", "target"]]}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    started = time.monotonic()
    asyncio.run(wait_pressed(calls(page), armed, "click"))
    assert time.monotonic() - started < 0.5
    polls = [p for m, p in page.sent
             if m == "Runtime.evaluate" and p["expression"].startswith("globalThis.__deskpodPressGuard.state(")]
    assert len(polls) == 1 and polls[0]["contextId"] == 1


def guard_calls(page: Page, verb: str) -> list[int]:
    """The contexts whose guard was asked ``verb`` (``disarm``, ``close``...)."""
    return sorted(p["contextId"] for m, p in page.sent
                  if m == "Runtime.evaluate" and p["expression"].startswith(f"globalThis.__deskpodPressGuard.{verb}("))


@pytest.mark.parametrize("seen", [[], ["pointerdown", "mousedown"]])
def test_a_press_the_page_never_received_is_refused_and_its_late_events_stopped(
        seen: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromium dropped the press (a page it had not drawn yet: a clean-clone CI run and a
    same-origin frame page's first click), or delivered only part of it within the wait: the
    judged frame's guard never saw its last event. Before, the guards were disarmed and the
    press answered landed; now it is refused, and the guards closed rather than disarmed, so a
    press that arrives after the wait is stopped too."""
    monkeypatch.setattr(press_guard, "SEEN_WAIT_S", 0.05)
    page = Page({1: {"seen": seen, "blocked": []}, 2: {"seen": [], "blocked": []}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    assert asyncio.run(wait_pressed(calls(page), armed, "click")) is False
    with pytest.raises(ScreenChangedError) as caught:
        asyncio.run(finish(calls(page), armed, "click", received=False))
    assert caught.value.detail["reason"] == "press"
    assert caught.value.detail["stopped"] == [["pointerup", "not_received"]]
    assert caught.value.detail["seen"] == seen
    assert ("nothing was pressed" in caught.value.message) == (not seen)
    assert guard_calls(page, "close") == [1, 2] and guard_calls(page, "disarm") == []


def test_a_press_seen_whole_is_received_and_one_never_sent_is_not_waited_for() -> None:
    page = Page({1: {"seen": ["pointerdown", "mousedown", "pointerup"], "blocked": []}})
    armed = asyncio.run(arm(calls(page), ("page", "top", 7), "click"))
    assert asyncio.run(wait_pressed(calls(page), armed, "click")) is True
    asyncio.run(finish(calls(page), armed, None, received=False))
    assert guard_calls(page, "disarm") == [1, 2] and guard_calls(page, "close") == []


def test_the_guard_holds_every_event_of_a_press() -> None:
    assert set(PRESS_EVENTS) == {"pointerdown", "mousedown", "pointerup", "mouseup", "click", "auxclick", "dblclick",
                                 "contextmenu"}


def test_the_guard_is_on_unless_asked_off_and_only_off_is_on_the_wire() -> None:
    """An expectation as before the guard serializes as before (an older daemon accepts it)."""
    assert ScreenExpectation().press_guard is True
    assert "press_guard" not in ScreenExpectation().model_dump()
    off = ScreenExpectation.model_validate({"press_guard": False})
    assert off.model_dump()["press_guard"] is False
