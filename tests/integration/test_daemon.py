"""The daemon over its real websocket, inside the real hardened sandbox.

Input cases run against the demo image's fixture form (``/fixtures/form``),
which shows its state as a ``STATE {json}`` line that the daemon reads back as
page text through CDP.
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import pytest
import websockets
from PIL import Image

from deskpod_stack import Stack, page_state, with_client
from deskpod.client import SandboxClient
from deskpod.errors import OutOfBoundsError, UnauthorizedError, UnknownKeyError
from deskpod.protocol import ErrorReply, ObserveOptions, Result

pytestmark = pytest.mark.integration

FORM = "http://demo.test/fixtures/form"
FIELD = (640, 400)  # screen pixels inside the fixture's big text field
TEXT = ObserveOptions(screenshot=False, page_text=True)


async def open_form(client: SandboxClient, value: str = "") -> None:
    url = FORM + (f"?value={value}" if value else "")
    await client.navigate(url)
    await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}])


async def state(client: SandboxClient) -> dict:
    obs = await client.act([], TEXT)
    return page_state(obs.page_text)


def test_websocket_refuses_missing_wrong_token_and_foreign_origin(stack: Stack) -> None:
    """No token, a wrong token, or a foreign Origin: the upgrade is refused."""

    async def attempt(headers: dict[str, str]) -> int:
        try:
            async with websockets.connect(stack.ws_url, additional_headers=headers, proxy=None) as ws:
                await ws.recv()
        except websockets.InvalidStatus as exc:
            return exc.response.status_code
        return 101

    assert asyncio.run(attempt({})) == 403
    assert asyncio.run(attempt({"Authorization": "Bearer " + "x" * 43})) == 403
    assert asyncio.run(attempt({"Authorization": f"Bearer {stack.token}", "Origin": "http://evil.test"})) == 403
    with pytest.raises(UnauthorizedError):
        asyncio.run(SandboxClient.connect(stack.ws_url, "not-the-token-at-all", timeout_s=5))
    logs = stack.container("sandbox").logs().decode(errors="replace")
    assert stack.token not in logs, "the token must never be logged"


def test_the_daemon_refuses_compression_a_client_offers(stack: Stack) -> None:
    """A client that offers permessage-deflate (websockets does by default) gets a
    connection without it: typed secrets never share a compression context with page
    text, and no reply pays for deflating a screenshot's base64."""

    async def extensions() -> str | None:
        async with websockets.connect(stack.ws_url, additional_headers={"Authorization": f"Bearer {stack.token}"},
                                      proxy=None, compression="deflate") as ws:
            assert ws.request is not None and ws.response is not None
            assert "permessage-deflate" in (ws.request.headers.get("Sec-WebSocket-Extensions") or "")
            return ws.response.headers.get("Sec-WebSocket-Extensions")

    assert asyncio.run(extensions()) is None


def test_bad_input_gets_typed_errors_and_the_session_survives(stack: Stack) -> None:
    """Bad JSON, an unknown action, wrong types and out-of-bounds points get typed errors naming the problem;
    the same connection then serves a valid screenshot."""

    async def body(client: SandboxClient) -> None:
        cases = [
            ("{not json", "invalid_request", "JSON"),
            ('{"type": "act", "id": "a1", "actions": [{"type": "foo"}]}', "unknown_action", "foo"),
            ('{"type": "act", "id": "a2", "actions": [{"type": "click", "x": "ten", "y": 1}]}', "invalid_action", "x"),
            ('{"type": "act", "id": "a3", "actions": [{"type": "click", "x": 5000, "y": 1}]}', "out_of_bounds", "5000"),
            ('{"type": "act", "id": "a4", "actions": [{"type": "keypress", "keys": ["Entr"]}]}', "unknown_key", "Entr"),
            ('{"type": "warp", "id": "a5"}', "invalid_request", "warp"),
            ("[1, 2, 3]", "invalid_request", "object"),
        ]
        for raw, code, named in cases:
            reply = await client.send_raw(raw)
            assert isinstance(reply, ErrorReply), raw
            assert reply.error.code == code, (raw, reply)
            assert named in reply.error.message, (raw, reply.error.message)
        reply = await client.send_raw('{"type": "act", "id": "ok", "actions": [{"type": "screenshot"}]}')
        assert isinstance(reply, Result) and reply.id == "ok"
        assert reply.observation and reply.observation.screenshot

    with_client(stack, body)


def test_screenshot_is_a_png_of_the_screen_and_not_blank(stack: Stack) -> None:
    """The PNG's size equals the Xvfb size and it is not one flat colour."""

    async def body(client: SandboxClient) -> Any:
        await client.navigate("http://demo.test/")
        return await client.act([{"type": "screenshot"}])

    obs = with_client(stack, body)
    shot = obs.screenshot
    assert (shot.width, shot.height) == (1280, 800) == (shot.screen_width, shot.screen_height)
    assert (shot.scale_x, shot.scale_y) == (1.0, 1.0)
    image = Image.open(io.BytesIO(base64.b64decode(shot.data)))
    assert image.format == "PNG" and image.size == (1280, 800)
    assert len(image.convert("RGB").getcolors(maxcolors=1 << 20) or range(2)) > 1
    assert obs.url == "http://demo.test/" and obs.title == "deskpod demo search"
    assert [t.type for t in obs.timings] == ["screenshot"]


def test_jpeg_on_request(stack: Stack) -> None:
    obs = with_client(stack, lambda c: c.act([], ObserveOptions(format="jpeg", quality=70)))
    image = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data)))
    assert image.format == "JPEG" and image.size == (1280, 800)


def test_out_of_bounds_click_is_rejected_before_anything_moves(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await open_form(client, "keep")
        with pytest.raises(OutOfBoundsError):
            await client.act([{"type": "type", "text": "zzz"}, {"type": "click", "x": 10, "y": 800}])
        assert (await state(client))["value"] == "keep"

    with_client(stack, body)


def test_enter_spellings_each_submit_once_and_unknown_keys_type_nothing(stack: Stack) -> None:
    """ENTER, Enter, Return, enter and KP_Enter each submit exactly once; "Entr" is an error naming it."""

    async def body(client: SandboxClient) -> None:
        await open_form(client)
        for n, keys in enumerate((["ENTER"], ["Enter"], ["Return"], ["enter"], ["KP_Enter"]), start=1):
            await client.act([{"type": "keypress", "keys": keys}])
            assert (await state(client))["submits"] == n, keys
        with pytest.raises(UnknownKeyError) as info:
            await client.act([{"type": "keypress", "keys": ["Entr"]}])
        assert "Entr" in info.value.message
        final = await state(client)
        assert final == {"submits": 5, "value": ""}

    with_client(stack, body)


@pytest.mark.parametrize("keys", [["CTRL", "A"], ["ctrl", "a"], ["Control", "a"], ["ctrl+a"]])
def test_select_all_chord_then_type_replaces_the_field(stack: Stack, keys: list[str]) -> None:
    """A chord holds the modifier while the letter is pressed, so the field ends as "x".

    ``"ctrl+a"`` is Anthropic's chord text; a keypress element may carry it whole."""

    async def body(client: SandboxClient) -> None:
        await open_form(client, "hello")
        await client.act([{"type": "keypress", "keys": keys}, {"type": "type", "text": "x"}])
        assert (await state(client))["value"] == "x"

    with_client(stack, body)


@pytest.mark.parametrize("text", ["--help", "-- -x --delay 5", "-v"])
def test_text_that_looks_like_options_is_typed_verbatim(stack: Stack, text: str) -> None:
    """Leading dashes are text, not options."""

    async def body(client: SandboxClient) -> None:
        await open_form(client)
        await client.act([{"type": "type", "text": text}])
        assert (await state(client))["value"] == text

    with_client(stack, body)


def test_unicode_text_is_typed_exactly(stack: Stack) -> None:
    """Emoji with a skin-tone modifier, CJK, Greek, check mark and euro sign, code point for code point."""
    text = "👍🏽 日本語 Ελληνικά ✓ €"

    async def body(client: SandboxClient) -> None:
        await open_form(client)
        await client.act([{"type": "type", "text": text}])
        assert (await state(client))["value"] == text

    with_client(stack, body)
