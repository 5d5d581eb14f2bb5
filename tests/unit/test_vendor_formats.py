"""The adapters' newer vendor paths over recorded payloads (tests/support/vendor_payloads.py):
Anthropic's computer toolset, OpenAI's keys held during move and drag, errors in band."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deskpod.adapters import anthropic, openai
from deskpod.errors import InvalidActionError, ScreenChangedError, UnknownActionError
from deskpod.protocol import Observation, Point, Screenshot, Size
from vendor_payloads import ANTHROPIC_TOOLSET_ENTRY, ANTHROPIC_TOOLSET_MESSAGE, OPENAI_KEYS_CALL

SHOT = Screenshot(id="s1", format="png", width=1280, height=800, screen_width=1280, screen_height=800,
                  scale_x=1.0, scale_y=1.0, sha256="0" * 64, data="QUJD")


def test_openai_keys_are_held_during_move_and_drag() -> None:
    move, drag, click = openai.call_actions(OPENAI_KEYS_CALL)
    assert move.model_dump() == {"type": "move", "x": 300, "y": 200, "hold_keys": ["SHIFT"]}
    assert drag.model_dump()["hold_keys"] == ["CTRL", "SHIFT"]
    assert click.model_dump()["hold_keys"] == ["CTRL"]


def test_the_toolset_entry_and_its_per_member_configs() -> None:
    assert anthropic.toolset_definition(ANTHROPIC_TOOLSET_ENTRY["configs"]) == ANTHROPIC_TOOLSET_ENTRY
    assert anthropic.toolset_definition() == {"type": "computer_toolset_20260801"}
    enabled = anthropic.enabled_members(ANTHROPIC_TOOLSET_ENTRY["configs"])
    assert "zoom" not in enabled and "left_click" in enabled and len(enabled) == 16
    for bad in ({"fly": {"enabled": True}}, {"zoom": {"enabled": "no"}}, {"zoom": {"display_number": 1}}):
        with pytest.raises(InvalidActionError):
            anthropic.toolset_definition(bad)


def test_a_toolset_turn_converts_member_by_member() -> None:
    uses = [b for b in ANTHROPIC_TOOLSET_MESSAGE["content"] if b["type"] == "tool_use"]
    assert all(anthropic.is_member_use(u) for u in uses)
    converted = [anthropic.member_actions(u["name"], u["input"]) for u in uses]
    assert [[a.model_dump()["type"] for a in c] for c in converted] == [
        ["click"], ["type"], ["keypress"], ["scroll"], ["screenshot"]]
    assert converted[3][0].model_dump()["hold_keys"] == ["shift"] and converted[3][0].model_dump()["scroll_y"] == 3
    assert len(anthropic.member_actions("key", {"text": "Down", "repeat": 3})) == 3
    assert not anthropic.is_member_use({"type": "tool_use", "name": "computer", "input": {"action": "key"}})


def test_a_disabled_or_unknown_member_and_bad_inputs_are_refused() -> None:
    enabled = anthropic.enabled_members({"zoom": {"enabled": False}})
    with pytest.raises(UnknownActionError):
        anthropic.member_actions("zoom", {"region": [0, 0, 10, 10]}, enabled)
    with pytest.raises(UnknownActionError):
        anthropic.member_actions("fly", {})
    for name, bad in (("left_mouse_down", {"coordinate": [1, 2]}), ("key", {"text": "a", "repeat": 0}),
                      ("left_click", {"action": "left_click"})):
        with pytest.raises(InvalidActionError):
            anthropic.member_actions(name, bad)


def test_member_results_follow_the_sdks_toolset() -> None:
    obs = Observation(screenshot=SHOT, cursor=Point(x=3, y=4))
    assert anthropic.member_result("t1", "left_click", {}, obs)["content"] == [{"type": "text", "text": "Clicked."}]
    scrolled = anthropic.member_result("t2", "scroll", {"scroll_direction": "down"}, obs)
    assert scrolled["content"][0]["text"] == "Scrolled down."
    assert anthropic.member_result("t3", "screenshot", {}, obs)["content"][0]["type"] == "image"
    assert anthropic.member_result("t4", "cursor_position", {}, obs)["content"][0]["text"] == "X=3,Y=4"


class Refusing:
    """A client whose actions are refused (and whose plain observation works)."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.model_size = Size(width=1280, height=800)

    async def act(self, actions: list[Any], observe: Any = None, *args: Any, **kwargs: Any) -> Observation:
        self.calls.append(list(actions))
        if actions:
            raise ScreenChangedError("the screen changed", detail={"reason": "region"})
        return Observation(screenshot=SHOT)


def test_both_adapters_answer_errors_in_band_with_the_code_and_message() -> None:
    client: Any = Refusing()
    a = asyncio.run(anthropic.execute(client, ANTHROPIC_TOOLSET_MESSAGE["content"][1]))
    assert a["is_error"] and a["content"] == [{"type": "text", "text": "screen_changed: the screen changed"}]
    o = asyncio.run(openai.execute(client, OPENAI_KEYS_CALL))
    assert o[0]["type"] == "computer_call_output" and o[0]["call_id"] == "call_kz1"
    assert o[1]["content"][0]["text"] == "Computer call call_kz1: screen_changed: the screen changed"


# --- the Anthropic agent loop with the toolset, against the fake vendor ----------------------

def _loop_fixtures() -> Any:
    from test_agents import KEY, KEY_ENV, TASK, obs, ok  # the agent tests' shared helpers
    return KEY, KEY_ENV, TASK, obs, ok


def test_the_anthropic_loop_sends_the_toolset_and_answers_several_members_per_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_vendor import FakeVendor, anthropic_message

    from deskpod.agents import create_agent
    from deskpod.controller.gui_agent import Done, Proposal
    from deskpod.controller.task import ModelAgentSpec
    from deskpod.protocol import Size

    key, key_env, task, obs, ok = _loop_fixtures()
    monkeypatch.setenv(key_env, key)
    turn = [b for b in ANTHROPIC_TOOLSET_MESSAGE["content"] if b["type"] != "tool_use" or b["id"] <= "toolu_01C"]
    zoom = {"type": "tool_use", "id": "toolu_01Z", "name": "zoom", "toolset_name": "computer",
            "input": {"region": [0, 0, 10, 10]}}
    with FakeVendor() as fake:
        fake.reply({**ANTHROPIC_TOOLSET_MESSAGE, "content": [*turn, zoom]})
        fake.reply(anthropic_message({"type": "text", "text": "Done."}, stop_reason="end_turn"))

        async def body() -> list[Any]:
            agent = create_agent(ModelAgentSpec(type="anthropic", model="claude-opus-5", instructions=task,
                                                base_url=fake.url, api_key_env=key_env,
                                                computer_configs=ANTHROPIC_TOOLSET_ENTRY["configs"]),
                                 Size(width=1280, height=800))
            try:
                out = [await agent.propose(obs("a"), None)]
                for tag in "bcd":
                    out.append(await agent.propose(obs(tag), ok(tag)))
                return out
            finally:
                await agent.close()

        click, typed, key_press, done = asyncio.run(body())
        opening, follow = (r.body for r in fake.requests)
        headers = fake.requests[0].headers
    assert all(isinstance(p, Proposal) for p in (click, typed, key_press)) and isinstance(done, Done)
    assert [a.type for a in click.actions] == ["click"] and [a.type for a in key_press.actions] == ["keypress"]
    assert opening["tools"] == [ANTHROPIC_TOOLSET_ENTRY] and "anthropic-beta" not in headers
    results = follow["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results[:4]] == ["toolu_01A", "toolu_01B", "toolu_01C", "toolu_01Z"]
    assert results[0]["content"] == [{"type": "text", "text": "Clicked."}]
    assert results[2]["content"] == [{"type": "text", "text": "Pressed Return."}]
    assert results[3]["is_error"] and "zoom" in results[3]["content"][0]["text"]  # disabled by its config
    assert results[-1]["type"] == "image"  # the screen now, after results without an image
