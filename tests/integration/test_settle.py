"""Settling by signal, end to end in the hardened sandbox: the settled screenshot is
the settled screen, whatever the page still did after the input (a CSS transition
that starts late, a fetch that answers late), and the observation says which signal
ended the wait (``settle_signal``).

The fixtures change nothing on screen for longer than the old 50 ms quiet window after
the click (a 150 ms transition delay, a 300 ms fetch), so a quiet window alone would
return the screen before the change.
"""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from deskpod_stack import Stack, with_client
from deskpod.client import SandboxClient
from deskpod.protocol import Observation, ObserveOptions

pytestmark = pytest.mark.integration

GO = (200, 200)
"""The fixtures' button, screen pixels (the 1280x800 stack: model space = screen); the
fixtures' elements are large enough for the browser's toolbar above the page."""

GREEN, RED, WHITE = (0, 160, 0), (255, 0, 0), (255, 255, 255)


def pixel(obs: Observation, x: int, y: int) -> tuple[int, int, int]:
    """The screenshot's RGB at (x, y)."""
    assert obs.screenshot is not None
    image = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data))).convert("RGB")
    r, g, b = image.getpixel((x, y))  # type: ignore[misc]
    return r, g, b


def close(color: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(color, expected, strict=True))


def test_transition_page_screenshot_shows_the_end_state(stack: Stack) -> None:
    """A click whose effect is a CSS transition that waits 150 ms, then runs 250 ms: the
    reply's screenshot shows the box at its end (green, moved right), not the start."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/fixtures/settle-transition")
        obs = await client.act([{"type": "click", "x": GO[0], "y": GO[1]}])
        assert obs.settled is True
        assert obs.settle_signal == "animation"
        assert close(pixel(obs, 950, 520), GREEN), pixel(obs, 950, 520)
        assert close(pixel(obs, 250, 520), WHITE), pixel(obs, 250, 520)

    with_client(stack, body)


def test_fetch_page_screenshot_shows_the_fetched_answer(stack: Stack) -> None:
    """A click that fetches (answered after 300 ms) and only then paints: the reply's
    screenshot shows the painted answer and the page text holds it."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/fixtures/settle-fetch")
        obs = await client.act([{"type": "click", "x": GO[0], "y": GO[1]}], ObserveOptions(page_text=True))
        assert obs.settled is True
        assert obs.settle_signal == "network"
        assert close(pixel(obs, 600, 520), GREEN), pixel(obs, 600, 520)
        assert "fetched-ok" in (obs.page_text or "")

    with_client(stack, body)


def test_a_paint_two_frames_after_the_click_is_in_the_screenshot_at_the_sandboxs_rate(stack: Stack) -> None:
    """The sandbox's display runs at DESKPOD_DISPLAY_REFRESH_HZ (240 by default), and the
    page's frames follow it: 500 ms hold far more than the 30 of 60 Hz. A click whose
    handler paints only in the second animation frame after it (nothing in the first) is
    settled with that paint in the screenshot, at that rate too."""

    async def body(client: SandboxClient) -> None:
        for _ in range(3):
            await client.navigate("http://demo.test/fixtures/settle-frames")
            await client.act([{"type": "move", "x": 900, "y": 700}])  # the page's listener is there
            obs = await client.act([{"type": "click", "x": GO[0], "y": GO[1]}])
            assert obs.settled is True
            assert close(pixel(obs, 250, 520), GREEN), pixel(obs, 250, 520)
        later = await client.act([{"type": "wait", "seconds": 0.8}], ObserveOptions(page_text=True))
        frames = int((later.page_text or "").split("frames: ")[1].split()[0])
        assert frames > 60, later.page_text

    with_client(stack, body)


def slider_row(obs: Observation) -> bytes:
    """The pixels of the events fixture's slider row (screen x 90..1110, y 280..320)."""
    assert obs.screenshot is not None
    image = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data))).convert("RGB")
    return image.crop((90, 280, 1110, 320)).tobytes()


def test_settled_screenshot_is_the_screen_a_later_look_sees(stack: Stack) -> None:
    """After a click that moves the slider's thumb, the settled screenshot shows the
    thumb where a second settled observation afterwards sees it (not stale), and the
    signal is reported; without settling no signal is."""

    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/fixtures/events")
        for x in (300, 800, 400):
            obs = await client.act([{"type": "click", "x": x, "y": 300}])
            again = await client.act([])
            assert obs.settled is True and obs.settle_signal in ("damage", "frame")
            assert slider_row(obs) == slider_row(again)
        unsettled = await client.act([], ObserveOptions(settle=False))
        assert unsettled.settle_signal is None

    with_client(stack, body)
