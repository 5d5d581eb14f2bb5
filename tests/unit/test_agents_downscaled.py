"""Model agents on screenshots the daemon scaled down: the declared size and the model's points.

When a screenshot is over the vendors' limits the daemon sends it smaller than the model
space (:attr:`~deskpod.protocol.Screenshot.fitted` ``"downscaled"``, e.g. 3049x1715 from a
7680x4320 model space). The model's coordinates are the pixels of the image it was sent,
so each request must declare that image's size and each point must be mapped back to the
model space before it becomes a proposal. The vendor is :mod:`fake_vendor` (real SDKs, real
HTTP on 127.0.0.1, recorded requests).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from fake_vendor import FakeVendor, anthropic_message, computer_call, openai_message, openai_response, tool_use

from deskpod.agents import create_agent
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.task import ModelAgentSpec
from deskpod.protocol import Click, Drag, Observation, Point, Screenshot, Size

KEY_ENV = "DESKPOD_TEST_VENDOR_KEY"
MODEL_SPACE = Size(width=7680, height=4320)


def obs(tag: str, width: int, height: int, cursor: Point | None = None) -> Observation:
    """An observation whose screenshot is ``width`` x ``height``: scaled down from the model
    space unless that is its size."""
    downscaled = (width, height) != (MODEL_SPACE.width, MODEL_SPACE.height)
    shot = Screenshot(id=f"s-{tag}", format="jpeg", width=width, height=height, screen_width=MODEL_SPACE.width,
                      screen_height=MODEL_SPACE.height, scale_x=MODEL_SPACE.width / width,
                      scale_y=MODEL_SPACE.height / height, sha256="0" * 64,
                      data=base64.b64encode(f"jpeg-{tag}".encode()).decode(),
                      fitted="downscaled" if downscaled else "reencoded")
    return Observation(screenshot=shot, cursor=cursor, url="http://demo.test/", title="Demo")


def ok(observation: Observation) -> StepOutcome:
    return StepOutcome(status="ok", observation=observation)


def spec(kind: str, fake: FakeVendor, model: str) -> ModelAgentSpec:
    base = fake.url + "/v1" if kind == "openai" else fake.url
    return ModelAgentSpec(type=kind, model=model, instructions="Open the first result.", base_url=base,
                          api_key_env=KEY_ENV)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-0123456789abcdef")


@pytest.fixture
def fake() -> Any:
    with FakeVendor() as server:
        yield server


def proposals(fake: FakeVendor, kind: str, model: str,
              turns: list[tuple[Observation, StepOutcome | None]]) -> list[Proposal | Done]:
    """What a ``kind`` agent of ``model`` on ``fake`` proposes for each ``(observation, last
    outcome)`` of ``turns``, in order (the agent closed after)."""

    async def body() -> list[Proposal | Done]:
        agent = create_agent(spec(kind, fake, model), MODEL_SPACE)
        try:
            return [await agent.propose(observation, outcome) for observation, outcome in turns]
        finally:
            await agent.close()

    return asyncio.run(body())


def test_anthropic_declares_each_sent_size_and_maps_the_models_points_to_the_model_space(fake: FakeVendor) -> None:
    """3049x1715 sent: the tool says 3049x1715 and a click at the image's centre lands at the
    model space's centre; cursor_position answers in that image's pixels; a later 2560x1440
    image is declared in the next request and its drag is mapped by its own scale."""
    first, second, third = obs("a", 3049, 1715), obs("b", 3049, 1715), obs("c", 2560, 1440)
    at_cursor = obs("b2", 3049, 1715, cursor=Point(x=3840, y=2160))
    fake.reply(anthropic_message(tool_use("toolu_01", {"action": "left_click", "coordinate": [1524, 857]}),
                                 tool_use("toolu_02", {"action": "cursor_position"})))
    fake.reply(anthropic_message(tool_use("toolu_03", {"action": "left_click_drag", "start_coordinate": [100, 200],
                                                       "coordinate": [2000, 1000]})))
    fake.reply(anthropic_message({"type": "text", "text": "Done."}, stop_reason="end_turn"))

    click, _cursor, drag, done = proposals(fake, "anthropic", "claude-opus-4-7", [
        (first, None), (second, ok(second)), (third, ok(at_cursor)), (third, ok(third))])
    assert isinstance(click, Proposal) and isinstance(drag, Proposal) and isinstance(done, Done)
    assert list(click.actions) == [Click(type="click", x=3839, y=2159, button="left")]
    assert list(drag.actions) == [Drag(type="drag", path=[Point(x=300, y=600), Point(x=6000, y=3000)])]
    declared = [(r.body["tools"][0]["display_width_px"], r.body["tools"][0]["display_height_px"])
                for r in fake.requests]
    assert declared == [(3049, 1715), (2560, 1440), (2560, 1440)]
    answered = fake.requests[1].body["messages"][2]["content"]
    assert answered[1]["content"] == [{"type": "text", "text": "X=1524,Y=858"}]


def test_anthropic_toolset_members_are_mapped_from_the_image_too(fake: FakeVendor) -> None:
    """The computer toolset declares no size, but its coordinates are the screenshot's pixels as well."""
    fake.reply(anthropic_message(tool_use("toolu_01", {"coordinate": [400, 300]}, name="left_click"),
                                 model="claude-opus-5"))

    [proposal] = proposals(fake, "anthropic", "claude-opus-5", [(obs("a", 3049, 1715), None)])
    assert isinstance(proposal, Proposal)
    assert list(proposal.actions) == [Click(type="click", x=1008, y=756, button="left")]


def test_openai_preview_declares_each_sent_size_and_maps_the_models_points(fake: FakeVendor) -> None:
    """The preview tool declares the 3049x1715 image sent and its click is mapped to the model
    space; once a screenshot comes at the model space's size, that is declared and taken as is."""
    small, whole = obs("a", 3049, 1715), obs("b", 7680, 4320)
    fake.reply(openai_response("resp_1", computer_call("call_a", action={"type": "click", "button": "left",
                                                                         "x": 2900, "y": 1600}),
                               model="computer-use-preview"))
    fake.reply(openai_response("resp_2", computer_call("call_b", action={"type": "click", "button": "left",
                                                                         "x": 2900, "y": 1600}),
                               model="computer-use-preview"))
    fake.reply(openai_response("resp_3", openai_message("Done."), model="computer-use-preview"))

    first, second, done = proposals(fake, "openai", "computer-use-preview",
                                    [(small, None), (whole, ok(whole)), (whole, ok(whole))])
    assert isinstance(first, Proposal) and isinstance(second, Proposal) and isinstance(done, Done)
    assert list(first.actions) == [Click(type="click", x=7305, y=4030, button="left")]
    assert list(second.actions) == [Click(type="click", x=2900, y=1600, button="left")]
    declared = [(r.body["tools"][0]["display_width"], r.body["tools"][0]["display_height"]) for r in fake.requests]
    assert declared == [(3049, 1715), (7680, 4320), (7680, 4320)]


def test_openai_ga_tool_maps_the_models_points_from_the_image(fake: FakeVendor) -> None:
    """The GA tool reads the size from the image (sent at ``detail: "original"``): its points are mapped too."""
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[
        {"type": "click", "button": "left", "x": 2900, "y": 1600}])))

    [proposal] = proposals(fake, "openai", "gpt-5.4", [(obs("a", 3049, 1715), None)])
    assert isinstance(proposal, Proposal)
    assert list(proposal.actions) == [Click(type="click", x=7305, y=4030, button="left")]
