"""Bounded everything, against the real hardened sandbox.

On 27f402b: a 3840x2160 screen gave 30 MiB base64 PNG screenshots; ``configure``
accepted an 8192x4608 model size and the next screenshot closed the connection (a
99 MB frame, close 1009); a page with 20,000 long-labelled links made the
accessibility call time out and return ``null``, after which the daemon's DevTools
channel closed on a message over its limit and the browser stayed lost until a reset;
page text had no byte cap and no truncation flag; and a client could not declare the
largest message it reads. Each test here fails there and passes now.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Iterator

import pytest
from PIL import Image

from deskpod_stack import Stack, send, start_stack, with_client
from deskpod.adapters import anthropic
from deskpod.client import SandboxClient
from deskpod.errors import InvalidRequestError
from deskpod.protocol import (
    MAX_AX_BYTES,
    MAX_IMAGE_SIDE_PX,
    MAX_PAGE_TEXT_BYTES,
    MAX_SCREENSHOT_BASE64_BYTES,
    ErrorReply,
    ObserveOptions,
    Result,
    Size,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

HUGE = "http://demo.test/fixtures/bounds-huge"
NOISE = "http://demo.test/fixtures/bounds-noise"
HUGE_REPLY_BOUND_S = 60.0
"""A generous bound on one reply on the huge page (its accessibility summary has
:data:`deskpod.agentd.browser.frame_calls.FRAME_READ_BUDGET_S` seconds; page text of 6 million characters
takes a few seconds to lay out on a loaded machine): proves there is no stall."""


def _json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())


@pytest.fixture(scope="module")
def big_stack() -> Iterator[Stack]:
    """A sandbox whose screen is 3840x2160 (``DESKPOD_SCREEN_SIZE``)."""
    yield from start_stack("bnd4k", "3840x2160")


def test_a_huge_page_is_bounded_and_the_daemon_stays_usable(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate(HUGE, ObserveOptions(screenshot=False), timeout_s=180)
        started = time.monotonic()
        obs = await client.act([], ObserveOptions(screenshot=False, page_text=True, max_text_chars=1_000_000,
                                                  accessibility=True, max_ax_nodes=5000))
        took_s = time.monotonic() - started
        assert took_s < HUGE_REPLY_BOUND_S
        # Page text: cut at its byte cap (1,000,000 characters of mostly "é" is 2 MB), and said so.
        assert obs.page_text is not None and obs.page_text.startswith("A huge page")
        assert _json_bytes(obs.page_text) <= MAX_PAGE_TEXT_BYTES
        assert obs.truncated is not None and obs.truncated.page_text
        assert obs.truncated.page_text_chars is not None and obs.truncated.page_text_chars > len(obs.page_text)
        # Accessibility: a list (never null), within its byte cap, incomplete and saying why.
        assert obs.accessibility is not None
        summary = "[" + ",".join(n.model_dump_json() for n in obs.accessibility) + "]"
        assert len(summary.encode()) <= MAX_AX_BYTES
        assert obs.truncated.accessibility and obs.truncated.accessibility_reason in (
            "max_nodes", "bytes", "too_large", "timeout")
        assert all(len(n.name or "") <= 200 for n in obs.accessibility)
        # The browser channel survived: the next request reads the page at once.
        after = await client.act([], ObserveOptions(screenshot=False))
        assert after.url == HUGE and after.tabs
        assert "browser_restarted" not in after.events
        back = await client.navigate("http://demo.test/", ObserveOptions(screenshot=True, page_text=True))
        assert back.title == "deskpod demo search" and back.screenshot is not None

    with_client(stack, body)


def test_no_reply_exceeds_the_message_size_the_client_declares(stack: Stack) -> None:
    small = 262_144

    async def main() -> None:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30, max_message_bytes=small)
        try:
            assert client.hello.max_message_bytes == small
            await client.navigate(HUGE, ObserveOptions(screenshot=False), timeout_s=180)
            # websockets closes the connection (1009) on any frame over max_size: a reply
            # that came back at all was within it.
            obs = await client.act([{"type": "zoom", "region": [0, 0, 1280, 800]}],
                                   ObserveOptions(page_text=True, max_text_chars=1_000_000, accessibility=True))
            assert obs.screenshot is not None and obs.zoom is not None
            assert obs.truncated is not None and obs.truncated.page_text
            reply = await send(client, type="act", actions=[],
                               observe={"page_text": True, "max_text_chars": 1_000_000, "accessibility": True})
            assert isinstance(reply, Result)
            assert len(reply.model_dump_json().encode()) <= small
        finally:
            await client.close()
        with pytest.raises(InvalidRequestError):
            await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=5, max_message_bytes=1000)

    asyncio.run(main())


def test_configure_refuses_a_model_size_no_model_takes(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        reply = await send(client, type="configure", model_size={"width": 8192, "height": 4608})
        assert isinstance(reply, ErrorReply) and reply.error.code == "invalid_request"
        assert "too large" in reply.error.message
        with pytest.raises(InvalidRequestError):
            await client.configure(Size(width=8192, height=4608))
        obs = await client.act([])  # the connection and its model space are unchanged
        assert obs.screenshot is not None and (obs.screenshot.width, obs.screenshot.height) == (1280, 800)

    with_client(stack, body)


def test_screenshots_of_a_large_screen_fit_the_vendor_limits(big_stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        assert (client.hello.screen.width, client.hello.screen.height) == (3840, 2160)
        await client.navigate(NOISE, ObserveOptions(screenshot=False))
        obs = await client.act([{"type": "wait_for", "text_present": "noise drawn", "timeout_s": 60},
                                {"type": "wait", "seconds": 1}], timeout_s=120)
        shot = obs.screenshot
        assert shot is not None and shot.fitted is not None
        assert len(shot.data) <= MAX_SCREENSHOT_BASE64_BYTES
        assert max(shot.width, shot.height) <= MAX_IMAGE_SIDE_PX
        assert abs(shot.width * shot.scale_x - 3840) < 2 and abs(shot.height * shot.scale_y - 2160) < 2
        assert base64.b64decode(shot.data)[:3] == b"\xff\xd8\xff"  # re-encoded as JPEG
        # A lower limit set by configure holds too, by scaling down (and saying so).
        await client.configure(max_image_bytes=300_000)
        low = (await client.act([])).screenshot
        assert low is not None and len(low.data) <= 300_000 and low.fitted == "downscaled"
        assert low.width < 3840 and abs(low.width * low.scale_x - 3840) < 2
        # The Anthropic adapter declares the size of the image it sent, not the model space, and
        # maps the model's points, that image's pixels, back to the model space.
        use = {"type": "tool_use", "id": "a1", "name": "computer", "input": {"action": "screenshot"}}
        sent = base64.b64decode((await anthropic.execute(client, use))["content"][0]["source"]["data"])
        declared = anthropic.tool_definition(anthropic.display_size(client))
        size = (declared["display_width_px"], declared["display_height_px"])
        assert size[0] < 3840 and size == Image.open(io.BytesIO(sent)).size, size
        move = {"action": "mouse_move", "coordinate": [size[0] // 2, size[1] // 2]}
        await anthropic.execute(client, {"type": "tool_use", "id": "a2", "name": "computer", "input": move})
        cursor = (await client.act([{"type": "cursor_position"}], ObserveOptions(screenshot=False))).cursor
        assert cursor is not None and abs(cursor.x - 1920) <= 4 and abs(cursor.y - 1080) <= 4, cursor
        # A zoom of the whole noisy screen is bounded the same way.
        zoom = (await client.act([{"type": "zoom", "region": [0, 0, 3840, 2160]}])).zoom
        assert zoom is not None and len(zoom.data) <= 300_000 and zoom.fitted == "downscaled"
        # Actions still take model-space coordinates: a click lands and the next reply comes.
        after = await client.act([{"type": "click", "x": 1920, "y": 1080}])
        assert after.screenshot is not None and after.url == NOISE

    with_client(big_stack, body)
