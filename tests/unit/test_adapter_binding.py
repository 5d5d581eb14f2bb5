"""The bare vendor adapters bind and declare truthfully, against an in-memory sandbox (no Docker).

A vendor-format pointer action through ``deskpod.adapters.anthropic``/``openai`` is bound to
the screenshot the adapter last returned (the controller's binding, a ``ScreenExpectation``):
a click planned on a screen that has since shifted is refused with ``screen_changed`` and
nothing is pressed. And the size declared to the model is the size of the images sent:
when the daemon scales a screenshot down to fit the vendors' limits (a 7680x4320 screen sent
as 3049x1715), the Anthropic tool definition declares 3049x1715 and the model's coordinates,
that image's pixels, are mapped back to the model space.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from deskpod.adapters import anthropic, openai
from deskpod.protocol import Hello, Observation, ObserveOptions, Point, Size
from fake_sandbox import Button, FakeSandbox, Page

START = "http://shop.test/"
PAID = "http://shop.test/paid"
PAY = Button((100, 200, 300, 240), "Pay now", goes_to=PAID)


@dataclass
class _Sandbox(FakeSandbox):
    """The fake sandbox with a model space (as ``SandboxClient.model_size``) and, when ``sent``
    is given, every screenshot scaled down to that size as the daemon fits a large one."""

    sent: Size | None = None

    @property
    def model_size(self) -> Size:
        return self.hello.model_size

    def _observe(self, options: ObserveOptions, cursor: Point | None) -> Observation:
        obs = super()._observe(options, cursor)
        if self.sent is None or obs.screenshot is None:
            return obs
        screen = self.hello.screen
        shot = obs.screenshot.model_copy(update={
            "width": self.sent.width, "height": self.sent.height, "screen_width": screen.width,
            "screen_height": screen.height, "scale_x": screen.width / self.sent.width,
            "scale_y": screen.height / self.sent.height, "fitted": "downscaled"})
        return obs.model_copy(update={"screenshot": shot})


def _sandbox(**fields: Any) -> _Sandbox:
    sandbox = _Sandbox({START: Page("Shop", "Total: 10 EUR", [PAY]), PAID: Page("Paid", "Payment sent")}, **fields)
    asyncio.run(sandbox.navigate(START))
    return sandbox


def _claude(sandbox: _Sandbox, tool_input: dict[str, Any]) -> dict[str, Any]:
    use = {"type": "tool_use", "id": "toolu_1", "name": "computer", "input": tool_input}
    return asyncio.run(anthropic.execute(sandbox, use))  # type: ignore[arg-type]


def _gpt(sandbox: _Sandbox, action: dict[str, Any]) -> list[dict[str, Any]]:
    call = {"type": "computer_call", "call_id": "call_1", "action": action, "pending_safety_checks": []}
    return asyncio.run(openai.execute(sandbox, call))  # type: ignore[arg-type]


def _clicks(sandbox: _Sandbox) -> list[dict[str, Any]]:
    return [a for a in sandbox.executed if a["type"] == "click"]


def test_an_anthropic_click_planned_on_a_shifted_screen_is_refused_and_nothing_is_pressed() -> None:
    sandbox = _sandbox()
    shot = _claude(sandbox, {"action": "screenshot"})
    sandbox.change_screen()  # a banner moved in after the model saw the screen
    result = _claude(sandbox, {"action": "left_click", "coordinate": [150, 220]})
    assert result["is_error"] and result["content"][0]["text"].startswith("screen_changed:"), result
    assert _clicks(sandbox) == [] and sandbox.url == START
    assert sandbox.expectations[-1].screenshot_sha256 is not None and shot["content"][0]["type"] == "image"
    # Planned again on a fresh screenshot, the click is bound to that one and lands.
    _claude(sandbox, {"action": "screenshot"})
    result = _claude(sandbox, {"action": "left_click", "coordinate": [150, 220]})
    assert "is_error" not in result and sandbox.url == PAID
    assert sandbox.expectations[-1].url == START  # bound to the page it was planned on, too


def test_an_openai_click_planned_on_a_shifted_screen_is_refused_with_the_screen_as_it_is_now() -> None:
    sandbox = _sandbox()
    _gpt(sandbox, {"type": "screenshot"})
    sandbox.change_screen()
    output, note = _gpt(sandbox, {"type": "click", "button": "left", "x": 150, "y": 220})
    assert output["type"] == "computer_call_output" and "screen_changed" in note["content"][0]["text"], note
    assert _clicks(sandbox) == [] and sandbox.url == START
    # The screen shown with the refusal is the one the next call is bound to: it lands.
    [output] = _gpt(sandbox, {"type": "click", "button": "left", "x": 150, "y": 220})
    assert output["type"] == "computer_call_output" and sandbox.url == PAID


def test_a_toolset_click_is_bound_to_the_last_screenshot_member_not_to_an_acknowledgment() -> None:
    """A pure member's result carries no image ("Clicked."): the model still plans on the last
    ``screenshot`` member's image, and the binding is to that one."""
    sandbox = _sandbox()
    use = {"type": "tool_use", "id": "t", "toolset_name": "computer", "name": "screenshot", "input": {}}
    asyncio.run(anthropic.execute(sandbox, use))  # type: ignore[arg-type]
    move = {"type": "tool_use", "id": "m", "toolset_name": "computer", "name": "mouse_move",
            "input": {"coordinate": [5, 5]}}
    asyncio.run(anthropic.execute(sandbox, move))  # type: ignore[arg-type]
    sandbox.change_screen()
    click = {"type": "tool_use", "id": "c", "toolset_name": "computer", "name": "left_click",
             "input": {"coordinate": [150, 220]}}
    result = asyncio.run(anthropic.execute(sandbox, click))  # type: ignore[arg-type]
    assert result["is_error"] and "screen_changed" in result["content"][0]["text"]
    assert _clicks(sandbox) == []


def test_a_downscaled_screenshot_is_declared_at_its_size_and_the_click_mapped_back() -> None:
    """7680x4320 screen and model space, images sent as 3049x1715: the tool definition declares
    3049x1715, and a click on the button's pixels in that image lands on the button."""
    big = Size(width=7680, height=4320)
    sandbox = _sandbox(hello=Hello(screen=big, model_size=big, sandbox_id="fake-sandbox"), sent=Size(width=3049, height=1715))
    sandbox.pages[START].buttons = [Button((7000, 4000, 7200, 4100), "Pay now", goes_to=PAID)]
    assert anthropic.display_size(sandbox) == big  # nothing sent yet: the model space
    shot = _claude(sandbox, {"action": "screenshot"})
    assert shot["content"][0]["type"] == "image"
    definition = anthropic.tool_definition(anthropic.display_size(sandbox))
    assert (definition["display_width_px"], definition["display_height_px"]) == (3049, 1715)
    assert openai.tool_definition(openai.display_size(sandbox), openai.PREVIEW_TOOL_TYPE)["display_width"] == 3049
    # The button's centre (7100, 4050) is (2819, 1608) in the image the model saw.
    where = _claude(sandbox, {"action": "cursor_position"})
    assert where["content"][0]["text"] == "X=0,Y=0"
    result = _claude(sandbox, {"action": "left_click", "coordinate": [2819, 1608]})
    assert "is_error" not in result, result
    [click] = _clicks(sandbox)
    assert (click["x"], click["y"]) == (7101, 4050) and sandbox.url == PAID


def test_zoom_regions_and_drags_are_mapped_from_the_image_too() -> None:
    big = Size(width=7680, height=4320)
    sandbox = _sandbox(hello=Hello(screen=big, model_size=big, sandbox_id="fake-sandbox"), sent=Size(width=3840, height=2160))
    _claude(sandbox, {"action": "screenshot"})
    _claude(sandbox, {"action": "zoom", "region": [0, 0, 1920, 1080]})
    _claude(sandbox, {"action": "left_click_drag", "start_coordinate": [10, 20], "coordinate": [30, 40]})
    zoom, drag = (a for a in sandbox.executed if a["type"] in ("zoom", "drag"))
    assert zoom["region"] == [0, 0, 3840, 2160]
    assert drag["path"] == [{"x": 20, "y": 40}, {"x": 60, "y": 80}]
