"""Bounded everything: the pure parts of the size limits.

Images fit the vendors' limits (both sides at most 8000 px, base64 at most 5 MB),
oversized model and screen sizes are refused, page text and accessibility summaries
stay within their byte caps and say what was cut, and an oversized DevTools message
fails one command instead of ending the daemon's channel to the browser (on 27f402b a
message over the reader's limit closed it for good).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from deskpod.agentd.connection import declared_message_bytes
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.browser.axtree import AXSummary, bounded
from deskpod.agentd.browser.frames import summarize_ax
from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.browser.devtools import MAX_CDP_MESSAGE_BYTES
from deskpod.agentd.browser.cdp_pipe import OversizedMessage, read_message
from deskpod.agentd.display.fit import base64_length, fit_encode
from deskpod.agentd.reply_fit import cut_text
from deskpod.errors import BrowserError, ConfigError
from deskpod.protocol import (
    MAX_AX_NAME_CHARS,
    MAX_SCREENSHOT_BASE64_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    MESSAGE_SIZE_HEADER,
    ConfigureRequest,
    Screenshot,
    Size,
)


def _noise(width: int, height: int) -> Image.Image:
    """An incompressible image (random pixels): the worst case for every encoder."""
    return Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))


def test_a_small_image_is_sent_as_asked() -> None:
    image = Image.new("RGB", (64, 48), (200, 10, 10))
    fitted = fit_encode(image, "png", 80, (64, 48), MAX_SCREENSHOT_BASE64_BYTES)
    assert (fitted.format, fitted.size, fitted.fitted) == ("png", (64, 48), None)


def test_a_4k_screen_is_reencoded_or_scaled_under_five_megabytes() -> None:
    # 3840x2160 of noise is 24 MB as PNG, about 5 MB even as JPEG at quality 75.
    fitted = fit_encode(_noise(3840, 2160), "png", 80, (3840, 2160), MAX_SCREENSHOT_BASE64_BYTES)
    assert base64_length(len(fitted.data)) <= MAX_SCREENSHOT_BASE64_BYTES
    assert fitted.fitted in ("reencoded", "downscaled") and fitted.format == "jpeg"
    with Image.open(io.BytesIO(fitted.data)) as decoded:
        assert decoded.size == fitted.size


def test_a_lower_limit_scales_the_image_down_and_says_so() -> None:
    fitted = fit_encode(_noise(1280, 800), "png", 80, (1280, 800), 100_000)
    assert fitted.fitted == "downscaled"
    assert base64_length(len(fitted.data)) <= 100_000
    width, height = fitted.size
    assert width < 1280 and height < 800
    assert abs(width / height - 1280 / 800) < 0.05  # aspect kept


def test_configure_refuses_model_sizes_no_model_takes() -> None:
    with pytest.raises(ValidationError, match="too large"):
        ConfigureRequest(type="configure", id="c", model_size=Size(width=8192, height=4608))
    with pytest.raises(ValidationError, match="too large"):
        ConfigureRequest(type="configure", id="c", model_size=Size(width=7000, height=7000))
    ConfigureRequest(type="configure", id="c", model_size=Size(width=8000, height=4000))
    with pytest.raises(ValidationError):
        ConfigureRequest(type="configure", id="c", max_image_bytes=MAX_SCREENSHOT_BASE64_BYTES + 1)


@pytest.mark.parametrize("size", ["8400x1800", "8192x4608", "7000x7000"])
def test_the_daemon_refuses_a_screen_no_model_takes(size: str) -> None:
    env = {"DESKPOD_TOKEN_SHA256": "0" * 64}
    with pytest.raises(ConfigError, match="too large"):
        AgentdConfig.from_env({**env, "DESKPOD_SCREEN_SIZE": size})
    assert AgentdConfig.from_env({**env, "DESKPOD_SCREEN_SIZE": "3840x2160"}).screen == Size(width=3840, height=2160)


def test_a_reply_cannot_carry_an_image_over_the_limits() -> None:
    fields: dict[str, Any] = dict(id="s-1", format="png", width=100, height=100, screen_width=100,
                                  screen_height=100, scale_x=1.0, scale_y=1.0, sha256="0" * 64, data="")
    with pytest.raises(ValidationError):
        Screenshot(**{**fields, "data": "A" * (MAX_SCREENSHOT_BASE64_BYTES + 4)})
    with pytest.raises(ValidationError):
        Screenshot(**{**fields, "width": 8001})


def test_page_text_is_cut_to_its_json_bytes() -> None:
    text = 'é"\n' * 10_000  # each character is 2 bytes or an escape as JSON
    cut = cut_text(text, 1000)
    assert len(json.dumps(cut, ensure_ascii=False).encode()) <= 1000
    assert text.startswith(cut) and len(json.dumps(text[:len(cut) + 1], ensure_ascii=False).encode()) > 1000
    assert cut_text("short", 1000) == "short"


def _ax_node(nid: int, parent: int | None, children: list[int], role: str, name: str) -> dict[str, Any]:
    node: dict[str, Any] = {"nodeId": str(nid), "role": {"value": role}, "name": {"value": name},
                            "childIds": [str(c) for c in children]}
    if parent is not None:
        node["parentId"] = str(parent)
    return node


def _links(count: int, label_chars: int) -> list[dict[str, Any]]:
    root = _ax_node(0, None, list(range(1, count + 1)), "RootWebArea", "huge")
    return [root] + [_ax_node(i, 0, [], "link", "x" * label_chars) for i in range(1, count + 1)]


def summarize(raw_nodes: list[dict[str, Any]], max_nodes: int, max_bytes: int) -> AXSummary:
    """The daemon's summary of one document's DevTools AX nodes."""
    return bounded(summarize_ax({"top": raw_nodes}, "top", {}, {}, {}, 1_000_000), max_nodes, max_bytes)


def test_an_accessibility_summary_clips_labels_and_counts_every_node() -> None:
    summary = summarize(_links(20_000, 3000), 300, 10_000_000)
    assert len(summary.nodes) == 300 and summary.total == 20_001 and summary.reason == "max_nodes"
    assert all(len(n["name"]) <= MAX_AX_NAME_CHARS for n in summary.nodes)
    assert summary.clipped == 299


def test_an_accessibility_summary_stops_at_its_byte_cap() -> None:
    summary = summarize(_links(5000, 150), 5000, 100_000)
    assert summary.reason == "bytes"
    assert len(json.dumps(summary.nodes, ensure_ascii=False).encode()) <= 100_000


def test_the_declared_message_size_is_checked() -> None:
    header = MESSAGE_SIZE_HEADER.lower()
    assert declared_message_bytes({}) == MAX_SERVER_MESSAGE_BYTES
    assert declared_message_bytes({header: "1048576"}) == 1_048_576
    for bad in ("1000", "-5", "1e9", str(MAX_SERVER_MESSAGE_BYTES + 1), "٣٣٣٣٣٣٣", ""):
        assert declared_message_bytes({header: bad}) is None, bad


def test_an_oversized_message_is_skipped_and_the_next_one_read() -> None:
    async def scenario() -> None:
        stream = asyncio.StreamReader(limit=1000)
        stream.feed_data(b'{"id":42,"result":{"x":"' + b"y" * 5000 + b'"}}\0{"id":43}\0')
        stream.feed_eof()
        first = await read_message(stream)
        assert isinstance(first, OversizedMessage) and first.id == 42 and first.size > 5000
        assert await read_message(stream) == b'{"id":43}'

    asyncio.run(scenario())


class _FakeChromium:
    """The browser's end of the DevTools socket pair: answers every command with an
    empty result, except ``Accessibility.getFullAXTree``, answered with a message over
    the daemon's limit (as Chromium did for 20,000 long-labelled links)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def serve(self) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=self.sock, limit=1 << 20)
        while True:
            try:
                raw = await reader.readuntil(b"\0")
            except asyncio.IncompleteReadError:
                return
            message = json.loads(raw[:-1])
            if message["method"] == "Accessibility.getFullAXTree":
                filler = "x" * (MAX_CDP_MESSAGE_BYTES + 1000)
                writer.write(json.dumps({"id": message["id"], "result": {"nodes": [], "pad": filler}}).encode() + b"\0")
            else:
                writer.write(json.dumps({"id": message["id"], "result": {}}).encode() + b"\0")
            await writer.drain()


def test_an_oversized_devtools_answer_fails_one_call_and_the_channel_stays() -> None:
    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        fake = asyncio.create_task(_FakeChromium(theirs).serve())
        browser = Browser()
        await browser.attach(ours)
        with pytest.raises(BrowserError) as caught:
            await browser._call("Accessibility.getFullAXTree")
        assert caught.value.detail["reason"] == "too_large"
        assert not browser.channel_lost
        assert await browser._call("Target.getTargets") == {}
        await browser.close()
        fake.cancel()

    asyncio.run(scenario())


def test_the_schema_index_lists_the_limits() -> None:
    from deskpod.schema import index, wire_messages

    caps = index(wire_messages())["limits"]
    assert caps["MAX_SCREENSHOT_BASE64_BYTES"] == MAX_SCREENSHOT_BASE64_BYTES
    assert caps["MAX_PAGE_TEXT_BYTES"] == 1_048_576 and caps["MESSAGE_SIZE_HEADER"] == MESSAGE_SIZE_HEADER
    assert Screenshot.model_json_schema()["properties"]["data"]["maxLength"] == MAX_SCREENSHOT_BASE64_BYTES


def test_a_closed_devtools_pipe_is_seen_as_a_lost_channel() -> None:
    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        fake = asyncio.create_task(_FakeChromium(theirs).serve())
        browser = Browser()
        await browser.attach(ours)
        assert not browser.channel_lost
        fake.cancel()
        theirs.close()
        for _ in range(100):
            if browser.channel_lost:
                break
            await asyncio.sleep(0.01)
        assert browser.channel_lost  # the session watcher restarts Chromium on this
        await browser.close()
        assert not browser.channel_lost

    asyncio.run(scenario())


def _connection(max_reply_bytes: int) -> Any:
    from types import SimpleNamespace

    from deskpod.agentd.connection import Connection

    return Connection(SimpleNamespace(screen=Size(width=1280, height=800)), "0" * 64,  # type: ignore[arg-type]
                       max_reply_bytes)


def test_a_reply_over_the_declared_size_drops_page_content_or_is_an_error() -> None:
    from deskpod.errors import MessageTooLargeError
    from deskpod.protocol import ActReply, AXNode, Observation

    conn = _connection(300_000)
    observation = Observation(page_text="x" * 400_000, accessibility=[AXNode(depth=0, role="link", name="a")])
    text = conn._fit(ActReply(id="r-1", observation=observation))
    assert len(text.encode()) <= 300_000
    slim = json.loads(text)["observation"]
    assert slim["page_text"] is None and slim["accessibility"] is None
    assert slim["truncated"]["page_text"] and slim["truncated"]["accessibility"]
    # Nothing left to drop: a typed error, never an oversized frame.
    huge = Observation(title="t", url="http://x/" + "a" * 8000, tabs=[
        {"id": str(i), "url": "http://x/" + "b" * 8000, "title": "c" * 2000, "active": i == 0} for i in range(40)])
    with pytest.raises(MessageTooLargeError) as caught:
        conn._fit(ActReply(id="r-2", observation=huge))
    assert caught.value.detail["reason"] == "reply_too_large"


def test_a_dom_summary_is_checked_and_clipped_like_page_data() -> None:
    from deskpod.agentd.browser.axtree import dom_summary

    value = {"total": 20_000, "nodes": [
        {"depth": 1, "role": "link", "name": "x" * 201, "value": None, "focused": False},
        {"depth": -3, "role": "button", "name": "ok", "value": 5, "focused": "yes"},
        {"role": ""}, "junk",
    ]}
    summary = dom_summary(value, 1_000_000)
    assert summary.reason == "too_large" and summary.total == 20_000 and summary.clipped == 1
    assert summary.nodes == [
        {"depth": 1, "role": "link", "name": "x" * MAX_AX_NAME_CHARS, "value": None, "focused": False},
        {"depth": 0, "role": "button", "name": "ok", "value": None, "focused": False},
    ]
    assert dom_summary("not a dict", 1000).nodes == []
