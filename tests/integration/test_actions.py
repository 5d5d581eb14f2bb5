"""Actions and observations end to end: vendor formats, the coordinate
contract, input that never sticks, settling, and the observation's structure.

Each case runs in the real hardened sandbox against the demo image's
``/fixtures/events`` page, which places its elements at screen pixel positions and
records DOM events (with their ``screenX``/``screenY``) as a ``STATE {json}`` line.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import pytest
from PIL import Image

from deskpod_stack import Stack, page_state, with_client
from deskpod.adapters import anthropic, openai
from deskpod.client import SandboxClient
from deskpod.errors import ActionTimeoutError
from deskpod.protocol import ObserveOptions, Size

pytestmark = pytest.mark.integration

EVENTS = "http://demo.test/fixtures/events"
TEXT = ObserveOptions(screenshot=False, page_text=True, settle=False)


async def fixture_state(client: SandboxClient) -> dict:
    obs = await client.act([], ObserveOptions(screenshot=False, page_text=True))
    return page_state(obs.page_text)


async def run_a(client: SandboxClient, tool_input: dict[str, Any], call_id: str = "toolu_1") -> dict:
    return await anthropic.execute(client, {"type": "tool_use", "id": call_id, "name": "computer", "input": tool_input})


async def run_o(client: SandboxClient, action: dict[str, Any]) -> dict:
    [out] = await openai.execute(client, {"type": "computer_call", "id": "cu_1", "call_id": "call_1",
                                          "action": action, "pending_safety_checks": [], "status": "completed"})
    return out


def clicks_on(state: dict, target: str) -> list[dict]:
    return [e for e in state["events"] if e["type"] == "click" and e["target"] == target]


# --- coordinate contract (1920x1080 screen, device scale factors 1, 1.5 and 2) -------------
#
# Screen coordinates are X11 pixels whatever the browser's device scale factor; the
# fixture page is told the factor (?dsf=) to place its elements at screen pixels and
# to report events' screenX/screenY (device-independent pixels) in screen pixels.


def events_url(stack: Stack, query: str = "") -> str:
    """The events fixture for ``stack``'s device scale factor, with ``query`` (``a=1&b=2``) added."""
    return f"{EVENTS}?dsf={stack.device_scale_factor:g}" + (f"&{query}" if query else "")


def near(value: float, expected: float, stack: Stack) -> bool:
    """``value`` is ``expected`` (screen pixels) within rounding: one pixel, plus one device-independent
    pixel's worth where the factor is fractional (Chromium rounds window metrics to whole ones)."""
    factor = stack.device_scale_factor
    return abs(value - expected) <= 1 + (factor if factor != int(factor) else 0)


def test_downscaled_anthropic_click_lands_on_the_target(scaled_stack: Stack) -> None:
    """Screen 1920x1080, model 1366x768; left_click [1067, 640] hits the 20x20 target at (1500, 900)."""

    async def body(client: SandboxClient) -> None:
        model = await client.configure(Size(width=1366, height=768))
        assert anthropic.tool_definition(model)["display_width_px"] == 1366
        await client.navigate(events_url(scaled_stack, "tx=1490&ty=890"))
        result = await run_a(client, {"action": "left_click", "coordinate": [1067, 640]})
        image = Image.open(io.BytesIO(base64.b64decode(result["content"][0]["source"]["data"])))
        assert image.size == (1366, 768), "the declared display size is the size of the image sent"
        state = await fixture_state(client)
        hits = clicks_on(state, "target")
        assert len(hits) == 1, state["events"]
        assert near(hits[0]["x"], 1500, scaled_stack) and near(hits[0]["y"], 900, scaled_stack), hits

    with_client(scaled_stack, body)


def test_scale_comes_from_the_declared_size_even_before_any_screenshot(scaled_stack: Stack) -> None:
    """Model 1280x720 over 1920x1080; O click (640, 360) lands at (960, 540) first thing and after a screenshot."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(events_url(scaled_stack), ObserveOptions(screenshot=False))
        await client.configure(Size(width=1280, height=720))
        for _ in range(2):
            out = await run_o(client, {"type": "click", "x": 640, "y": 360, "button": "left"})
            assert out["type"] == "computer_call_output"
            state = await fixture_state(client)
            last = [e for e in state["events"] if e["type"] == "click"][-1]
            assert near(last["x"], 960, scaled_stack) and near(last["y"], 540, scaled_stack), last

    with_client(scaled_stack, body)


def test_element_at_maps_css_pixels_to_screen_and_model_pixels(scaled_stack: Stack) -> None:
    """The 600x40 CSS-pixel text field placed at screen (100, 420) is found under screen and model
    points, its box is 600 x 40 times the device scale factor in screen pixels (and that over 1.5 in
    a 1280x720 model space), and a click at the box's centre, typed into, fills it: screenshot pixels,
    model pixels and CSS pixels agree at every factor."""
    factor = scaled_stack.device_scale_factor
    screen_box = [100, 420, 100 + 600 * factor, 420 + 40 * factor]

    async def body(client: SandboxClient) -> None:
        await client.configure(None)
        await client.navigate(events_url(scaled_stack), ObserveOptions(screenshot=False))
        obs = await client.act([], ObserveOptions(screenshot=False, element_at={"x": 310, "y": 440}))
        assert obs.element_at is not None and obs.element_at.tag == "input", obs.element_at
        assert all(near(got, want, scaled_stack) for got, want in zip(obs.element_at.box, screen_box, strict=True)), (
            obs.element_at.box, screen_box)
        await client.configure(Size(width=1280, height=720))
        obs = await client.act([], ObserveOptions(screenshot=False, element_at={"x": 207, "y": 293}))
        assert obs.element_at is not None and obs.element_at.tag == "input", obs.element_at
        model_box = [v / 1.5 for v in screen_box]
        assert all(near(got, want, scaled_stack) for got, want in zip(obs.element_at.box, model_box, strict=True)), (
            obs.element_at.box, model_box)
        x0, y0, x1, y1 = obs.element_at.box
        obs = await client.act([{"type": "click", "x": (x0 + x1) // 2, "y": (y0 + y1) // 2},
                                {"type": "type", "text": "scaled"}], ObserveOptions(screenshot=False, page_text=True))
        assert page_state(obs.page_text)["field"] == "scaled"

    with_client(scaled_stack, body)


def test_bounds_are_checked_in_model_space(hd_stack: Stack) -> None:
    """(1800, 100) and (-5, 10) are rejected against 1366x768 and the pointer stays; (1365, 767) is the corner."""

    async def body(client: SandboxClient) -> None:
        await client.configure(None)
        await client.act([{"type": "move", "x": 50, "y": 60}])
        await client.configure(Size(width=1366, height=768))
        for coordinate in ([1800, 100], [-5, 10]):
            result = await run_a(client, {"action": "left_click", "coordinate": coordinate})
            assert result["is_error"] and "out_of_bounds" in result["content"][0]["text"], result
        await client.configure(None)
        obs = await client.act([{"type": "cursor_position"}], ObserveOptions(screenshot=False))
        assert (obs.cursor.x, obs.cursor.y) == (50, 60), "the pointer must not move"
        await client.configure(Size(width=1366, height=768))
        await client.act([{"type": "move", "x": 1365, "y": 767}])
        await client.configure(None)
        obs = await client.act([{"type": "cursor_position"}], ObserveOptions(screenshot=False))
        assert abs(obs.cursor.x - 1919) <= 1 and abs(obs.cursor.y - 1079) <= 1

    with_client(hd_stack, body)


def test_scroll_amounts_are_notches_and_never_scaled(scaled_stack: Stack) -> None:
    """Model 960x540; scroll down 5 at (480, 270): pointer at (960, 540), exactly 5 notches down."""

    async def body(client: SandboxClient) -> None:
        await client.configure(None)
        await client.navigate(events_url(scaled_stack), ObserveOptions(screenshot=False))
        await client.act([{"type": "scroll", "x": 1200, "y": 700, "scroll_y": 1}])
        one_notch = (await fixture_state(client))["wheel"]["dy"]
        assert one_notch > 0
        await client.navigate(events_url(scaled_stack), ObserveOptions(screenshot=False))
        await client.configure(Size(width=960, height=540))
        await run_a(client, {"action": "scroll", "coordinate": [480, 270], "scroll_direction": "down",
                             "scroll_amount": 5})
        state = await fixture_state(client)
        assert state["wheel"]["dy"] == pytest.approx(5 * one_notch), state["wheel"]
        assert state["wheel"]["dx"] == 0
        await client.configure(None)
        obs = await client.act([{"type": "cursor_position"}], ObserveOptions(screenshot=False))
        assert (obs.cursor.x, obs.cursor.y) == (960, 540)

    with_client(scaled_stack, body)


def test_heavy_page_does_not_crash_the_renderer(hd_stack: Stack) -> None:
    """1920x1080, ~256 MB of canvases, scrolled through: no renderer crash; /dev/shm is 1 GiB
    (with 512 MiB the renderer crashed; the memory limit is sized around it)."""
    shm = hd_stack.exec_python("sandbox", "import os, json; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)")
    assert shm >= 1 << 30

    async def body(client: SandboxClient) -> None:
        await client.configure(None)
        obs = await client.navigate("http://demo.test/fixtures/heavy", TEXT.model_copy(update={"page_text": True}))
        assert "drawn 32 canvases" in obs.page_text
        events: list[str] = list(obs.events)
        for _ in range(6):
            obs = await client.act([{"type": "scroll", "x": 960, "y": 540, "scroll_y": 40}])
            events += obs.events
        obs = await client.act([{"type": "screenshot"}], ObserveOptions(page_text=True))
        events += obs.events
        assert "renderer_crashed" not in events
        assert obs.title == "fixture: heavy" and "canvas" in (obs.page_text or "")
        assert obs.screenshot.width == 1920

    with_client(hd_stack, body)


# --- pointer and keyboard (1280x800 screen) ------------------------------------------------


def test_drag_moves_the_slider_and_buttons_map(stack: Stack) -> None:
    """O drag along y=300 to x=600 sets the slider near the middle; right, wheel and back clicks map
    to contextmenu (button 2), auxclick (button 1) and the back button (3)."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        await run_o(client, {"type": "drag", "path": [{"x": 200, "y": 300}, {"x": 600, "y": 300}]})
        state = await fixture_state(client)
        assert 45 <= state["slider"] <= 55, state["slider"]
        for button in ("right", "wheel", "back"):
            await run_o(client, {"type": "click", "x": 900, "y": 700, "button": button})
        events = (await fixture_state(client))["events"]
        assert any(e["type"] == "contextmenu" and e["button"] == 2 for e in events)
        assert any(e["type"] == "auxclick" and e["button"] == 1 for e in events)
        assert any(e["type"] == "mouseup" and e["button"] == 3 for e in events)
        assert (await client.act([], TEXT)).url.startswith(EVENTS), "the back button must not navigate away"

    with_client(stack, body)


def test_double_and_triple_clicks_are_real_multi_clicks(stack: Stack) -> None:
    """One dblclick with detail 2 selecting the word; a triple click (detail 3) selects the paragraph."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        await run_a(client, {"action": "double_click", "coordinate": [130, 374]})
        state = await fixture_state(client)
        assert state["dblclicks"] == 1
        assert [e["detail"] for e in state["events"] if e["type"] == "dblclick"] == [2]
        assert state["selection"].strip() == "Penguins"
        await run_a(client, {"action": "wait", "duration": 1})  # past the double-click interval
        await run_a(client, {"action": "triple_click", "coordinate": [130, 374]})
        state = await fixture_state(client)
        assert max(e["detail"] for e in state["events"] if e["type"] == "click") == 3
        assert state["selection"].strip() == "Penguins waddle across icy shores."
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        # A click is bound to the screenshot the adapter last returned, which showed the old
        # selection: the model looks at the reloaded page first, as an agent does.
        await run_o(client, {"type": "screenshot"})
        await run_o(client, {"type": "double_click", "x": 130, "y": 374})
        assert (await fixture_state(client))["dblclicks"] == 1

    with_client(stack, body)


def test_horizontal_scroll_in_both_formats(stack: Stack) -> None:
    """O scroll_x 300 moves scrollLeft right; A scroll left 3 moves it back; scrollTop stays 0."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS + "?layout=hscroll", ObserveOptions(screenshot=False))
        await run_o(client, {"type": "scroll", "x": 500, "y": 300, "scroll_x": 300, "scroll_y": 0})
        right = (await fixture_state(client))["scroll"]
        assert right[0] > 0 and right[1] == 0
        await run_a(client, {"action": "scroll", "coordinate": [500, 300], "scroll_direction": "left",
                             "scroll_amount": 3})
        left = (await fixture_state(client))["scroll"]
        assert left[0] < right[0] and left[1] == 0

    with_client(stack, body)


def test_unknown_action_then_down_move_up_drags_and_screenshot_works(stack: Stack) -> None:
    """"foo" gets an error naming it and the session stays; down/move/up drags the item; screenshot works."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        result = await run_a(client, {"action": "foo"})
        assert result["is_error"] and "'foo'" in result["content"][0]["text"]
        await run_a(client, {"action": "left_mouse_down", "coordinate": [100, 100]})
        await run_a(client, {"action": "mouse_move", "coordinate": [300, 100]})
        await run_a(client, {"action": "left_mouse_up", "coordinate": [300, 100]})
        state = await fixture_state(client)
        assert abs(state["item"][0] - 280) <= 2 and abs(state["item"][1] - 80) <= 2, state["item"]
        shot = await run_a(client, {"action": "screenshot"})
        assert shot["content"][0]["type"] == "image" and "is_error" not in shot

    with_client(stack, body)


def test_keys_and_buttons_are_released_when_the_client_disconnects(stack: Stack) -> None:
    """Hold shift for 5 s and drop the socket after 1 s; press the mouse and drop it: nothing stays down."""

    async def drop_mid(payload: dict[str, Any]) -> None:
        client = await SandboxClient.connect(stack.ws_url, stack.token)
        await client._ws.send(json.dumps(payload))
        await asyncio.sleep(1.0)
        await client._ws.close()

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        await client.act([{"type": "click", "x": 300, "y": 440}])
        await drop_mid({"type": "act", "id": "h", "actions": [{"type": "hold_key", "keys": ["shift"], "seconds": 5}]})
        await asyncio.sleep(0.5)
        await drop_mid({"type": "act", "id": "d", "actions": [{"type": "mouse_down", "x": 1000, "y": 700},
                                                              {"type": "wait", "seconds": 5}]})
        await asyncio.sleep(0.5)
        await client.act([{"type": "click", "x": 300, "y": 440}, {"type": "type", "text": "abc"}])
        state = await fixture_state(client)
        assert state["field"] == "abc"
        downs = [e for e in state["events"] if e["type"] == "mousedown" and e["x"] == 1000]
        ups = [e for e in state["events"] if e["type"] == "mouseup" and e["x"] == 1000]
        assert len(downs) == 1 and len(ups) == 1, "the daemon released the button it pressed"

    with_client(stack, body)


def test_big_scrolls_return_within_the_deadline_and_the_lock_is_released(stack: Stack) -> None:
    """Scroll up 30 and O scroll_y -3000 each return (success or timeout) within 10 s; screenshot still works."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/fixtures/heavy", ObserveOptions(screenshot=False))
        for action in ({"type": "scroll", "x": 640, "y": 400, "scroll_y": -30},
                       *openai.to_actions({"type": "scroll", "x": 640, "y": 400, "scroll_x": 0, "scroll_y": -3000})):
            try:
                await asyncio.wait_for(client.act([action], timeout_s=10), 12)
            except ActionTimeoutError:
                pass
        with pytest.raises(ActionTimeoutError):
            await client.act([{"type": "wait", "seconds": 5}], timeout_s=0.5)
        obs = await client.act([{"type": "screenshot"}])
        assert obs.screenshot is not None

    with_client(stack, body)


# --- observation ----------------------------------------------------------------------------


def test_recorded_vendor_calls_run_unchanged_and_answer_in_vendor_shape(stack: Stack) -> None:
    """A recorded OpenAI computer_call and a recorded Anthropic tool_use, executed as they came."""
    recorded_call = {
        "type": "computer_call", "id": "cu_67cc", "call_id": "call_zw3",
        "action": {"type": "click", "button": "left", "x": 300, "y": 440},
        "pending_safety_checks": [], "status": "completed",
    }
    recorded_tool_use = {"type": "tool_use", "id": "toolu_01A", "name": "computer",
                         "input": {"action": "type", "text": "hello"}}

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        [out] = await openai.execute(client, recorded_call)
        assert set(out) == {"type", "call_id", "output"} and out["call_id"] == "call_zw3"
        assert out["output"]["type"] == "computer_screenshot"
        assert out["output"]["image_url"].startswith("data:image/png;base64,")
        res = await anthropic.execute(client, recorded_tool_use)
        assert res["type"] == "tool_result" and res["tool_use_id"] == "toolu_01A"
        assert res["content"][0]["source"]["media_type"] == "image/png"
        assert (await fixture_state(client))["field"] == "hello"
        pos = await anthropic.execute(client, {"type": "tool_use", "id": "t2", "name": "computer",
                                               "input": {"action": "cursor_position"}})
        assert pos["content"][0]["text"] == "X=300,Y=440"

    with_client(stack, body)


def test_observation_is_structured_and_settled(stack: Stack) -> None:
    """Settle instead of sleep: after Enter the observation already shows the results page; focus, tabs,
    element at a point, the accessibility summary and an open dialog are reported from CDP."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/")
        obs = await client.act([{"type": "click", "x": 640, "y": 400}])
        assert obs.focused and obs.focused.tag == "input" and obs.focused.editable and not obs.focused.is_password
        obs = await client.act([{"type": "type", "text": "penguin"}, {"type": "keypress", "keys": ["ENTER"]}],
                               ObserveOptions(page_text=True, accessibility=True, element_at={"x": 640, "y": 400}))
        assert obs.settled is True and obs.settle_s > 0
        assert obs.url == "http://demo.test/search?q=penguin", "the observation waited for the navigation"
        assert [t.active for t in obs.tabs] == [True]
        assert any(n.role == "link" for n in obs.accessibility)
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        obs = await client.act([], ObserveOptions(screenshot=False, element_at={"x": 310, "y": 440}))
        assert obs.element_at.tag == "input" and obs.element_at.box[0] <= 310 < obs.element_at.box[2]

    with_client(stack, body)


def test_encodings_cursor_zoom_and_reuse(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/", ObserveOptions(screenshot=False))
        shots = {}
        for fmt in ("png", "jpeg", "webp"):
            obs = await client.act([], ObserveOptions(format=fmt, quality=60))
            image = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data)))
            assert image.format == {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}[fmt] and image.size == (1280, 800)
            shots[fmt] = obs.screenshot
        again = await client.act([], ObserveOptions(format="png"))
        assert again.screenshot.sha256 == shots["png"].sha256, "an unchanged screen reuses the encoded image"
        with_cursor = await client.act([{"type": "move", "x": 1000, "y": 600}], ObserveOptions(cursor=True))
        assert with_cursor.screenshot.sha256 != shots["png"].sha256
        obs = await client.act([{"type": "zoom", "region": [0, 0, 320, 200]}], ObserveOptions(screenshot=False))
        assert (obs.zoom.width, obs.zoom.height) == (320, 200) and (obs.zoom.offset_x, obs.zoom.offset_y) == (0, 0)
        assert await client.configure(None) == Size(width=1280, height=800)
        from deskpod.protocol import ConfigureRequest

        result = await client.request(ConfigureRequest(type="configure", id="m", max_dimension=640))
        assert result.model_size == Size(width=640, height=400)
        obs = await client.act([], ObserveOptions(format="jpeg"))
        assert (obs.screenshot.width, obs.screenshot.scale_x) == (640, 2.0)

    with_client(stack, body)


def test_wait_for_conditions(stack: Stack) -> None:
    """Condition waits: URL, text and screen change, each with a timeout."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/", ObserveOptions(screenshot=False))
        obs = await client.act(
            [{"type": "click", "x": 640, "y": 400}, {"type": "type", "text": "seal"},
             {"type": "keypress", "keys": ["Return"]},
             {"type": "wait_for", "url_matches": r"q=seal$", "timeout_s": 10},
             {"type": "wait_for", "text_present": "You searched for: seal", "timeout_s": 10}],
            ObserveOptions(screenshot=False, settle=False),
        )
        assert obs.url.endswith("q=seal")
        with pytest.raises(ActionTimeoutError):
            await client.act([{"type": "wait_for", "text_present": "never there", "timeout_s": 0.5}])
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        # A focused text field's caret blinks, so the screen changes within a second.
        obs = await client.act([{"type": "click", "x": 300, "y": 440},
                                {"type": "wait_for", "screen_changed": True, "timeout_s": 3}])
        assert [t.type for t in obs.timings] == ["click", "wait_for"]

    with_client(stack, body)


def test_websocket_survives_a_vendor_shaped_error_storm(stack: Stack) -> None:
    """Bad vendor inputs become typed errors; the session stays usable."""

    async def body(client: SandboxClient) -> None:
        for bad in ({"action": "left_click", "coordinate": [1, 2, 3]}, {"action": "scroll", "coordinate": [1, 1],
                    "scroll_direction": "sideways", "scroll_amount": 1}, {"action": "key"}, {"nope": 1}):
            result = await run_a(client, bad)
            assert result["is_error"], bad
        assert "content" in await run_a(client, {"action": "screenshot"})

    with_client(stack, body)


def test_open_javascript_dialog_is_reported_and_does_not_block_observation(stack: Stack) -> None:
    """A page's alert is reported as a dialog (untrusted page content) while it is open; observing
    does not hang on the blocked page, and a keypress closes it."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/fixtures/dialog", ObserveOptions(screenshot=False))
        obs = await asyncio.wait_for(client.act([{"type": "click", "x": 640, "y": 400}]), 30)
        assert obs.dialog is not None and obs.dialog.type == "alert"
        assert obs.dialog.message == "Session expired: enter your password"
        assert obs.url == "http://demo.test/fixtures/dialog" and obs.screenshot is not None
        obs = await client.act([{"type": "keypress", "keys": ["Return"]}], ObserveOptions(page_text=True))
        assert obs.dialog is None and "alert closed" in (obs.page_text or "")

    with_client(stack, body)


def test_browser_is_restarted_after_its_last_tab_closes_and_loopback_is_blocked(stack: Stack) -> None:
    """Closing the last tab (or the window) ends Chromium; the daemon restarts it and reports
    ``browser_restarted``. Pages cannot reach the sandbox's loopback, where the daemon listens."""
    from deskpod.errors import NavigationError

    async def body(client: SandboxClient) -> None:
        with pytest.raises(NavigationError):
            await client.navigate("http://127.0.0.1:8765/healthz")
        await client.navigate("http://demo.test/", ObserveOptions(screenshot=False))
        await client.act([{"type": "keypress", "keys": ["ctrl", "w"]}], ObserveOptions(screenshot=False))
        events: list[str] = []
        for _ in range(60):
            events += (await client.act([], ObserveOptions(screenshot=False, settle=False))).events
            if "browser_restarted" in events:
                break
            await asyncio.sleep(0.5)
        assert "browser_restarted" in events
        obs = await client.navigate("http://demo.test/", ObserveOptions(screenshot=False))
        assert obs.title == "deskpod demo search"

    with_client(stack, body)


def test_page_zoom_is_accounted_for_between_css_and_screen_pixels(stack: Stack) -> None:
    """With the page zoomed to 125%, the element at a screen point and its box are still mapped
    through devicePixelRatio, so CSS pixels never leak into screenshot coordinates."""

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS, ObserveOptions(screenshot=False))
        plain = await client.act([], ObserveOptions(screenshot=False, element_at={"x": 310, "y": 440}))
        plain_width = plain.element_at.box[2] - plain.element_at.box[0]
        for _ in range(2):  # Chromium's zoom steps: 110%, 125%
            await client.act([{"type": "keypress", "keys": ["ctrl", "equal"]}], ObserveOptions(screenshot=False))
        try:
            await client.navigate(EVENTS, ObserveOptions(screenshot=False))  # re-place at 125%
            obs = await client.act([{"type": "click", "x": 310, "y": 440}, {"type": "type", "text": "zoomed"}],
                                   ObserveOptions(screenshot=False, page_text=True, element_at={"x": 310, "y": 440}))
            assert page_state(obs.page_text)["field"] == "zoomed"
            box = obs.element_at.box
            assert obs.element_at.tag == "input" and box[0] <= 310 < box[2] and box[1] <= 440 < box[3], box
            assert abs((box[2] - box[0]) / plain_width - 1.25) <= 0.01, (box, plain_width)
        finally:
            await client.act([{"type": "keypress", "keys": ["ctrl", "0"]}], ObserveOptions(screenshot=False))

    with_client(stack, body)
