"""Element actions in a run (deskpod.controller.gui.element_actions): judged, bound and logged
as the pixels they land on, so acting by ref never lowers a risk level (the fake sandbox)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.controller.run_api import RunResult
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.protocol import ElementInfo, parse_action, pixel_actions
from fake_sandbox import Button, FakeSandbox, Page

PAY_PAGE = "http://shop.test/pay"
PAID = "http://shop.test/paid"
NOTE = Button((100, 100, 300, 140), "Add a note")
PAY = Button((100, 200, 300, 240), "Pay now", goes_to=PAID)


def pages() -> dict[str, Page]:
    return {PAY_PAGE: Page("Pay", "Total: 10 EUR", [NOTE, PAY]), PAID: Page("Paid", "Payment sent")}


class Human:
    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(self.approve, request.digest, "test", "" if self.approve else "no")

    async def review(self, notice: Any) -> str:
        return "cancel"


def play(steps: list[list[dict[str, Any]]], sandbox: FakeSandbox, tmp_path: Path,
         human: Human | None = None) -> tuple[RunResult, list[dict[str, Any]]]:
    """Play ``steps`` on ``sandbox``; a run that never reaches the paid page fails after 0.5 s of
    re-observing (the fake sandbox's pages change only when an action runs)."""
    spec = TaskSpec.model_validate({
        "name": "refs", "start_url": PAY_PAGE, "allowed_domains": [],
        "limits": Limits.model_validate({}).model_dump(), "success": {"page_text_contains": "Payment sent", "timeout_s": 0.5},
        "steps": [{"actions": s} for s in steps]})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path, channel=human, snapshots=True))
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def test_pay_now_by_ref_asks_for_the_same_l3_confirmation_as_by_pixels(tmp_path: Path) -> None:
    """e2 is "Pay now" in the first snapshot: the click by ref is L3, asked about as the
    click at its centre, and denied: nothing is pressed."""
    by_ref, by_pixels = FakeSandbox(pages()), FakeSandbox(pages())
    ref_human, pixel_human = Human(False), Human(False)
    result, events = play([[{"type": "click_element", "ref": "e2"}]], by_ref, tmp_path / "ref", ref_human)
    play([[{"type": "click", "x": 200, "y": 220}]], by_pixels, tmp_path / "px", pixel_human)
    assert result.status == "cancelled" and "confirmation denied" in result.reason
    [asked_ref], [asked_px] = ref_human.requests, pixel_human.requests
    assert asked_ref.level == asked_px.level == "L3"
    assert asked_ref.reasons == asked_px.reasons and asked_ref.summary == asked_px.summary
    assert [a for a in by_ref.executed if a["type"] == "click"] == []
    [resolved] = [e for e in events if e["event"] == "element_ref"]
    assert resolved["ref"] == "e2" and resolved["type"] == "click_element" and resolved["point"] == [200, 220]


def test_an_approved_click_by_ref_is_the_pixel_click_bound_to_the_agents_screen(tmp_path: Path) -> None:
    sandbox = FakeSandbox(pages())
    result, events = play([[{"type": "click_element", "ref": "e2"}]], sandbox, tmp_path, Human(True))
    assert result.status == "succeeded", result.reason
    assert [(a["type"], a["x"], a["y"]) for a in sandbox.executed] == [("click", 200, 220)]
    assert sandbox.expectations[-1].element is not None and sandbox.expectations[-1].element.name == "Pay now"
    [step] = [e for e in events if e["event"] == "step" and e["outcome"] == "ok"]
    assert step["risks"][0]["element"] == {"type": "click_element", "ref": "e2"}
    assert step["actions"][0]["type"] == "click"


def test_a_harmless_ref_runs_at_once_and_a_stale_ref_is_refused_with_a_fresh_look(tmp_path: Path) -> None:
    """e1 ("Add a note") is L1; after the step the agent's next observation is a new
    snapshot (e3, e4), so e1 again is stale: refused as stale_ref (its own code, not
    screen_changed: the ref is what changed), nothing pressed."""
    sandbox = FakeSandbox(pages())
    result, events = play([[{"type": "click_element", "ref": "e1"}], [{"type": "click_element", "ref": "e1"}]],
                          sandbox, tmp_path)
    assert [a["type"] for a in sandbox.executed] == ["click"]
    denied = [e for e in events if e["event"] == "step" and e.get("rule") == "stale_ref"]
    assert denied, [e["event"] for e in events]
    assert result.status == "failed"


def test_type_element_is_a_click_select_all_and_typing_each_judged(tmp_path: Path) -> None:
    sandbox = FakeSandbox(pages())
    play([[{"type": "type_element", "ref": "e1", "text": "hello", "submit": True}]], sandbox, tmp_path)
    assert [a["type"] for a in sandbox.executed] == ["click", "keypress", "type", "keypress"]
    assert sandbox.executed[1]["keys"] == ["ctrl", "a"] and sandbox.executed[3]["keys"] == ["Return"]


def test_a_chosen_option_counts_as_the_controls_label() -> None:
    select = ElementInfo(tag="select", role="combobox", name="Action")
    choose = parse_action({"type": "select_option", "ref": "e4", "values": ["Delete account"]})
    assert classify_action(choose, ActionContext(element=select)).level == "L3"
    harmless = parse_action({"type": "select_option", "ref": "e4", "values": ["Blue"]})
    assert classify_action(harmless, ActionContext(element=select)).level == "L1"


def test_pixel_actions_of_each_element_action() -> None:
    kinds = {
        "click_element": ["click"], "hover_element": ["move"],
        "type_element": ["click", "keypress", "type"],
    }
    for kind, expected in kinds.items():
        raw: dict[str, Any] = {"type": kind, "ref": "e9"}
        if kind == "type_element":
            raw["text"] = "x"
        assert [a.type for a in pixel_actions(parse_action(raw), (5, 6))] == expected  # type: ignore[attr-defined]
    double = pixel_actions(parse_action({"type": "click_element", "ref": "e9", "count": 2}), (5, 6))
    assert double[0].type == "double_click"  # type: ignore[attr-defined]
    drag = pixel_actions(parse_action({"type": "drag_element", "ref": "e9", "to_ref": "e10"}), (5, 6), (50, 60))
    assert [(p.x, p.y) for p in drag[0].path] == [(5, 6), (50, 60)]  # type: ignore[union-attr]


def test_a_fill_form_field_is_judged_and_filled_by_one_function_of_the_control_hit() -> None:
    """The controller judges a field and the daemon fills it by
    :func:`deskpod.protocol.form_field_kind` of the control a click at the ref's point
    hits, so a checkbox there is a click on both sides, never text typed unjudged."""
    from deskpod.protocol import form_field_kind
    assert form_field_kind("input", "checkbox", "checkbox") == "choice"
    assert form_field_kind("div", None, "switch") == "choice"
    assert form_field_kind("select", None, "combobox") == "select"
    assert form_field_kind("input", "text", "textbox") == form_field_kind(None, None, None) == "text"


def test_an_obscured_ref_crosses_the_wire_as_a_stale_ref_the_run_refuses() -> None:
    from deskpod.errors import RefObscuredError, ScreenChangedError, error_from_wire
    error = error_from_wire({"code": "ref_obscured", "message": "covered", "detail": {"reason": "obscured"}})
    assert isinstance(error, RefObscuredError) and isinstance(error, ScreenChangedError)


def test_a_select_by_value_becomes_the_labels_of_the_options_it_chooses() -> None:
    """As Playwright's ``selectOption``: each string the first option whose value or label it
    is; a value no option has, or a control that is no select, is an invalid action."""
    import pytest

    from deskpod.controller.gui.element_actions import by_label
    from deskpod.errors import InvalidActionError
    from deskpod.protocol import SelectChoice, SelectOption

    options = [SelectChoice(value="a", label="Blue"), SelectChoice(value="b", label="a"),
               SelectChoice(value="del", label="Delete account")]
    select = ElementInfo(tag="select", role="combobox", name="Action", options=options)
    chosen = by_label(SelectOption(type="select_option", ref="e4", values=["a", "Delete account"], by="value"), select)
    assert (chosen.values, chosen.by) == (["Blue", "Delete account"], "label")
    assert classify_action(by_label(SelectOption(type="select_option", ref="e4", values=["del"], by="value"), select),
                           ActionContext(element=select)).level == "L3"
    for values, control in ((["zzz"], select), (["a"], ElementInfo(tag="input", role="textbox"))):
        with pytest.raises(InvalidActionError):
            by_label(SelectOption(type="select_option", ref="e4", values=values, by="value"), control)
