"""Binding pointer actions to the screen they were planned on: the pure parts (region
comparison, control identity, the controller's expectation, the wire) and the run loop's
handling of ``screen_changed`` against the in-memory sandbox. The daemon's enforcement
against a real browser is in ``tests/integration/test_screen_binding.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deskpod.agentd.display.capture import Frame
from deskpod.agentd.screen_check import FrameStore, changed_pixels, check_control, check_region, region_box, same_control
from deskpod.controller.agent import ScriptedAgent
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome, scripted_gui_agent
from deskpod.controller.gui import run_task
from deskpod.protocol.expect import (
    SCREEN_CHECK_MIN_DELTA,
    SCREEN_CHECK_RADIUS_PX,
    SCREEN_CHECK_TOLERANCE_PX,
    expectation,
)
from deskpod.controller.task import TaskSpec
from deskpod.errors import ScreenChangedError, error_from_wire
from deskpod.protocol import (
    ActRequest,
    AgentWindow,
    Click,
    CoordinateMap,
    ElementInfo,
    FocusedElement,
    Keypress,
    Observation,
    Screenshot,
    ScreenExpectation,
    Size,
    parse_action,
)
from fake_sandbox import Button, FakeSandbox, Page

SIZE = (64, 48)


def frame(paint: dict[tuple[int, int], tuple[int, int, int]] | None = None) -> Frame:
    """A white BGRX frame of SIZE with the given pixels painted (RGB)."""
    raw = bytearray(b"\xff\xff\xff\x00" * SIZE[0] * SIZE[1])
    for (x, y), (r, g, b) in (paint or {}).items():
        i = 4 * (y * SIZE[0] + x)
        raw[i:i + 3] = bytes((b, g, r))
    return Frame(bytes(raw), SIZE)


def coords() -> CoordinateMap:
    return CoordinateMap(Size(width=SIZE[0], height=SIZE[1]))


def test_region_box_is_clipped_to_the_screen_and_never_empty() -> None:
    assert region_box((32, 24), 8, SIZE) == (24, 16, 40, 32)
    assert region_box((0, 0), 8, SIZE) == (0, 0, 8, 8)
    assert region_box((63, 47), 8, SIZE) == (55, 39, 64, 48)
    assert region_box((5, 5), None, SIZE) == (0, 0, 64, 48)


def test_changed_pixels_counts_any_difference_inside_the_box_only() -> None:
    before = frame()
    assert changed_pixels(before, frame(), (0, 0, 64, 48)) == 0
    now = frame({(10, 10): (254, 255, 255), (11, 10): (0, 0, 0), (50, 40): (0, 0, 0)})
    assert changed_pixels(before, now, (0, 0, 64, 48)) == 3
    assert changed_pixels(before, now, (0, 0, 20, 20)) == 2
    hover = frame({(x, 5): (229, 229, 229) for x in range(64)})  # #efefef-like shading, 26 levels off white
    assert changed_pixels(before, hover, (0, 0, 64, 48)) == 64
    assert changed_pixels(before, hover, (0, 0, 64, 48), min_delta=48) == 0
    assert changed_pixels(before, now, (0, 0, 64, 48), min_delta=48) == 2
    assert changed_pixels(before, Frame(b"\0" * 16, (2, 2)), (0, 0, 4, 4)) == 16


def test_check_region_refuses_a_changed_region_and_an_unknown_screenshot() -> None:
    store = FrameStore()
    store.put("a" * 64, frame())
    expect = ScreenExpectation(screenshot_sha256="a" * 64, radius_px=4, tolerance_px=1)
    caret = frame({(30, 20): (0, 0, 0)})
    check_region(expect, store, caret, [(30, 20)], coords(), 0)  # one pixel: within the tolerance
    shifted = frame({(x, y): (255, 204, 0) for x in range(64) for y in range(10, 30)})
    with pytest.raises(ScreenChangedError) as caught:
        check_region(expect, store, shifted, [(5, 40), (30, 20)], coords(), 2)
    assert caught.value.detail["reason"] == "region" and caught.value.detail["action_index"] == 2
    check_region(expect, store, shifted, [(5, 40)], coords(), 0)  # far from the change
    with pytest.raises(ScreenChangedError) as caught:
        check_region(ScreenExpectation(screenshot_sha256="b" * 64), store, frame(), [(1, 1)], coords(), 0)
    assert caught.value.detail["reason"] == "unknown_screenshot"
    with pytest.raises(ScreenChangedError):  # the whole screen, exactly
        check_region(ScreenExpectation(screenshot_sha256="a" * 64, radius_px=None), store,
                     frame({(63, 0): (0, 0, 0)}), [(1, 1)], coords(), 0)
    check_region(ScreenExpectation(), store, shifted, [(30, 20)], coords(), 0)  # nothing expected


def test_the_frame_store_keeps_only_the_last_frames() -> None:
    store = FrameStore(capacity=2)
    for name in "abc":
        store.put(name * 64, frame())
    assert store.get("a" * 64) is None and store.get("c" * 64) is not None
    store.clear()
    assert store.get("c" * 64) is None


NOTE = ElementInfo(tag="button", name=None, text="Add a note", box=[1, 2, 3, 4])


def test_the_control_is_the_same_on_every_field_but_its_box() -> None:
    assert same_control(NOTE, NOTE.model_copy(update={"box": [9, 9, 90, 90]}))
    assert not same_control(NOTE, NOTE.model_copy(update={"text": "Pay now"}))
    assert not same_control(NOTE, NOTE.model_copy(update={"href": "http://x.test/"}))
    assert not same_control(NOTE, None) and same_control(None, None)


def test_check_control_compares_the_element_of_the_first_press_and_the_url() -> None:
    expect = ScreenExpectation(element=NOTE, url="http://a.test/")
    check_control(expect, NOTE, "http://a.test/", 0, True)
    check_control(expect, None, "http://a.test/", 1, False)  # not the press the element describes
    for element, url, reason in ((NOTE.model_copy(update={"text": "Pay now"}), "http://a.test/", "element"),
                                 (NOTE, "http://b.test/", "url")):
        with pytest.raises(ScreenChangedError) as caught:
            check_control(expect, element, url, 0, True)
        assert caught.value.detail["reason"] == reason


def test_check_control_refuses_an_agents_window_come_over_the_point_or_holding_the_focus() -> None:
    """A command granted the display maps a window over the judged control, or its window has the keyboard
    focus when a credential is typed: nothing is pressed or typed. One judged as on top stays allowed."""
    terminal = AgentWindow(app="XTerm", title="t", box=[0, 0, 10, 10])
    expect = ScreenExpectation(element=NOTE)
    check_control(expect, NOTE, None, 0, True)
    with pytest.raises(ScreenChangedError) as caught:
        check_control(expect, NOTE, None, 0, True, window=terminal)
    assert caught.value.detail["reason"] == "element"
    judged_on_it = ScreenExpectation(element=NOTE, window=terminal)
    check_control(judged_on_it, NOTE, None, 0, True, window=terminal.model_copy(update={"box": [5, 5, 15, 15]}))
    with pytest.raises(ScreenChangedError):
        check_control(judged_on_it, NOTE, None, 0, True)
    field = FocusedElement(tag="input", is_password=True, editable=True)
    typing = ScreenExpectation(focus=field)
    check_control(typing, None, None, 0, False, focus=field)
    with pytest.raises(ScreenChangedError) as caught:
        check_control(typing, None, None, 0, False, focus=field, focus_window=terminal)
    assert caught.value.detail["reason"] == "focus"
    # Without a judged focus the keyboard focus is not compared (the controller judged the keys).
    check_control(ScreenExpectation(), None, None, 0, False, focus_window=terminal)


def shot(sha: str) -> Screenshot:
    return Screenshot(id="s", format="png", width=8, height=8, screen_width=8, screen_height=8, scale_x=1.0,
                      scale_y=1.0, sha256=sha, data="")


def test_the_controller_binds_pointer_actions_to_the_agents_screenshot_and_the_judged_control() -> None:
    seen = Observation(screenshot=shot("a" * 64))
    judged = Observation(url="http://a.test/", element_at=NOTE)
    click = Click(type="click", x=3, y=4)
    expect = expectation(click, seen, judged)
    assert expect == ScreenExpectation(screenshot_sha256="a" * 64, radius_px=SCREEN_CHECK_RADIUS_PX,
                                       tolerance_px=SCREEN_CHECK_TOLERANCE_PX, min_delta=SCREEN_CHECK_MIN_DELTA,
                                       element=NOTE, url="http://a.test/")
    keys = Keypress(type="keypress", keys=["Return"])
    assert expectation(keys, seen, judged) is None
    whole = expectation(keys, seen, judged, whole_screen=True)
    assert whole is not None and whole.radius_px is None and whole.tolerance_px == 0 and whole.min_delta == 1


def test_the_expectation_travels_on_the_act_request_and_the_error_code_maps_back() -> None:
    request = ActRequest(type="act", id="r", actions=[Click(type="click", x=1, y=1)],
                         expect=ScreenExpectation(screenshot_sha256="a" * 64, element=NOTE))
    assert ActRequest.model_validate_json(request.model_dump_json()) == request
    with pytest.raises(ValidationError):
        ActRequest.model_validate({"type": "act", "id": "r", "actions": [], "expect": {"screenshot_sha256": "xyz"}})
    err = error_from_wire({"code": "screen_changed", "message": "m", "detail": {"reason": "region"}})
    assert type(err) is ScreenChangedError and err.code == "screen_changed"


# ---- the run loop against the in-memory sandbox

START = "http://shop.test/"
SAVE = Button((100, 100, 300, 160), "Save draft")


class Agent:
    """Proposes its moves in order; changes the fake screen while it "thinks" on its first one."""

    def __init__(self, sandbox: FakeSandbox, moves: list[Proposal | Done], change: bool) -> None:
        self.sandbox, self.moves, self.change = sandbox, moves, change
        self.seen: list[tuple[Observation, StepOutcome | None]] = []

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        self.seen.append((observation, last))
        if self.change and len(self.seen) == 1:
            self.sandbox.change_screen()
        return self.moves.pop(0) if self.moves else Done("done")

    async def close(self) -> None:
        return None


def run(sandbox: FakeSandbox, agent: Any, tmp_path: Path, **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
    spec = TaskSpec.model_validate({"name": "fake", "start_url": START, "limits": {"max_steps": 5},
                                    "success": {"page_text_contains": "never", "timeout_s": 0.2}})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path, agent=agent, **kwargs))
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def click_save() -> Proposal:
    return Proposal(actions=[parse_action({"type": "click", "x": 150, "y": 120})])


def test_a_click_planned_on_a_screen_that_changed_is_refused_and_the_agent_sees_the_new_one(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome", [SAVE])})
    agent = Agent(sandbox, [click_save()], change=True)
    result, events = run(sandbox, agent, tmp_path)
    assert [a for a in sandbox.executed if a["type"] == "click"] == []
    (first, _), (second, last) = agent.seen[:2]
    assert last is not None and last.status == "denied" and last.error["code"] == "screen_changed"
    assert first.screenshot is not None and second.screenshot is not None
    assert first.screenshot.sha256 != second.screenshot.sha256
    [expect] = sandbox.expectations
    assert expect.screenshot_sha256 == first.screenshot.sha256 and expect.element is not None
    assert expect.element.name == "Save draft" and expect.url == START
    [step] = [e for e in events if e["event"] == "step"]
    assert step["decision"] == "denied" and step["rule"] == "screen_changed" and "region" in step["reason"]
    assert result.status == "failed" and "not_verified" in result.reason


def test_a_click_on_the_screen_the_agent_saw_runs(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome", [SAVE])})
    agent = Agent(sandbox, [click_save()], change=False)
    run(sandbox, agent, tmp_path)
    assert [(a["x"], a["y"]) for a in sandbox.executed if a["type"] == "click"] == [(150, 120)]
    assert agent.seen[1][1] is not None and agent.seen[1][1].status == "ok"


def test_an_approved_action_is_sent_bound_to_the_whole_screen_the_human_saw(tmp_path: Path) -> None:
    pay = Button((100, 200, 300, 240), "Pay now")
    sandbox = FakeSandbox({START: Page("Pay", "Total", [pay])})
    shown: list[str] = []

    async def approve(request: ConfirmationRequest) -> ConfirmationAnswer:
        shown.append(request.subject.screenshot_sha256)  # type: ignore[union-attr]
        return ConfirmationAnswer(True, request.digest, "test")

    class Channel:
        async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
            return await approve(request)

        async def review(self, notice: Any) -> None:
            return None

    agent = ScriptedAgent([Proposal(actions=[parse_action({"type": "click", "x": 150, "y": 220})])], Done(""))
    run(sandbox, agent, tmp_path, channel=Channel())
    [expect] = sandbox.expectations
    assert expect.radius_px is None and expect.tolerance_px == 0 and expect.screenshot_sha256 == shown[0]
    assert expect.element is not None and expect.element.name == "Pay now"
    assert [(a["x"], a["y"]) for a in sandbox.executed if a["type"] == "click"] == [(150, 220)]


def test_a_scripted_step_refused_for_a_changed_screen_is_played_once_more() -> None:
    agent = scripted_gui_agent([([parse_action({"type": "click", "x": 1, "y": 1})], False)])
    obs = Observation()
    changed = StepOutcome("denied", obs, {"code": "screen_changed"})

    async def play() -> list[Proposal | Done]:
        return [await agent.propose(obs, None), await agent.propose(obs, changed), await agent.propose(obs, changed)]

    first, again, then = asyncio.run(play())
    assert isinstance(first, Proposal) and again is first and isinstance(then, Done)


def test_the_focus_check_compares_the_element_not_the_labels_beside_it() -> None:
    """The focused element's description names the buttons beside it and its form's labels (how a
    key there is judged); a live label beside a password field does not make it another field."""
    field = FocusedElement(tag="input", role="textbox", name="Password", input_type="password", is_password=True,
                           editable=True, in_form=True, form_labels=["login"], near_buttons=["Resend code (29 s)"])
    typing = ScreenExpectation(focus=field)
    check_control(typing, None, None, 0, False, focus=field.model_copy(update={"near_buttons": ["Resend code (28 s)"]}))
    for other in (field.model_copy(update={"name": "Search"}), field.model_copy(update={"in_form": False}), None):
        with pytest.raises(ScreenChangedError) as caught:
            check_control(typing, None, None, 0, False, focus=other)
        assert caught.value.detail["reason"] == "focus"
