"""The vendor adapters' pure conversions (no sandbox): OpenAI computer calls, Anthropic tool definitions."""

from __future__ import annotations

import pytest

from deskpod.adapters import anthropic, openai
from deskpod.errors import InvalidActionError, UnknownActionError
from deskpod.protocol import Screenshot, Size

SHOT = Screenshot(id="s1", format="jpeg", width=1280, height=800, screen_width=1920, screen_height=1200,
                  scale_x=1.5, scale_y=1.5, sha256="0" * 64, data="QUJD")


def test_openai_keys_held_during_clicks_and_scrolls_become_hold_keys() -> None:
    click, = openai.to_actions({"type": "click", "button": "left", "x": 5, "y": 6, "keys": ["SHIFT"]})
    assert click.model_dump() == {"type": "click", "x": 5, "y": 6, "button": "left", "hold_keys": ["SHIFT"]}
    double, = openai.to_actions({"type": "double_click", "x": 5, "y": 6, "keys": None})
    assert double.model_dump()["hold_keys"] == []
    scroll, = openai.to_actions({"type": "scroll", "x": 1, "y": 2, "scroll_x": 0, "scroll_y": -106,
                                 "keys": ["CTRL"]})
    assert scroll.model_dump() == {"type": "scroll", "x": 1, "y": 2, "hold_keys": ["CTRL"], "scroll_x": 0,
                                   "scroll_y": -2}


@pytest.mark.parametrize("action", [
    {"type": "click", "x": 1, "y": 2, "keys": "SHIFT"},
    {"type": "move", "x": 1, "y": 2, "keys": {"SHIFT": True}},
])
def test_openai_keys_that_are_not_a_list_are_refused(action: dict) -> None:
    with pytest.raises(InvalidActionError) as caught:
        openai.to_actions(action)
    assert caught.value.detail["field"] == "keys"


def test_openai_call_actions_reads_the_batch_or_the_single_action() -> None:
    batch = openai.call_actions({"type": "computer_call", "call_id": "c", "actions": [
        {"type": "click", "button": "left", "x": 405, "y": 157}, {"type": "type", "text": "penguin"},
        {"type": "keypress", "keys": ["ENTER"]}]})
    assert [a.model_dump()["type"] for a in batch] == ["click", "type", "keypress"]
    single = openai.call_actions({"type": "computer_call", "call_id": "c", "action": {"type": "screenshot"}})
    assert [a.model_dump()["type"] for a in single] == ["screenshot"]
    with pytest.raises(InvalidActionError):
        openai.call_actions({"type": "computer_call", "call_id": "c", "actions": []})
    with pytest.raises(InvalidActionError):
        openai.call_actions({"type": "computer_call", "call_id": "c"})
    with pytest.raises(UnknownActionError):
        openai.call_actions({"type": "computer_call", "call_id": "c", "actions": [{"type": "wait"}, {"type": "fly"}]})


def test_openai_output_acknowledges_only_the_checks_it_is_given() -> None:
    call = {"type": "computer_call", "call_id": "call_1", "action": {"type": "screenshot"}}
    plain = openai.computer_call_output(call, SHOT)
    assert plain == {"type": "computer_call_output", "call_id": "call_1",
                     "output": {"type": "computer_screenshot", "image_url": "data:image/jpeg;base64,QUJD"}}
    check = {"id": "cu_sc_1", "code": "irrelevant_domain", "message": "The page is off-task."}
    acked = openai.computer_call_output(call, SHOT, [check])
    assert acked["acknowledged_safety_checks"] == [check]


def test_openai_tool_definitions() -> None:
    display = Size(width=1024, height=768)
    assert openai.tool_definition(display) == {"type": "computer"}
    assert openai.tool_definition(display, openai.PREVIEW_TOOL_TYPE) == {
        "type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "browser"}


def test_anthropic_tool_definitions_and_beta_flags() -> None:
    display = Size(width=1280, height=800)
    assert anthropic.tool_definition(display) == {"type": "computer_20250124", "name": "computer",
                                                  "display_width_px": 1280, "display_height_px": 800}
    zoom = anthropic.tool_definition(display, anthropic.ZOOM_TOOL_TYPE)
    assert zoom["type"] == "computer_20251124" and zoom["enable_zoom"] is True
    assert anthropic.BETA_FLAGS == {"computer_20250124": "computer-use-2025-01-24",
                                    "computer_20251124": "computer-use-2025-11-24"}


def test_anthropic_error_results() -> None:
    assert anthropic.text_error_result("toolu_1", "Skipped.") == {
        "type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
        "content": [{"type": "text", "text": "Skipped."}]}
    result = anthropic.error_result("toolu_2", InvalidActionError("scroll: bad"))
    assert result["content"] == [{"type": "text", "text": "invalid_action: scroll: bad"}]
    assert anthropic.image_block(SHOT) == {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                                                      "data": "QUJD"}}
