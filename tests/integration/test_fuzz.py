"""Property-based fuzzing of the control websocket against the real daemon.

10,000 generated messages (arbitrary JSON, near-valid requests with hostile
fields, lone UTF-16 surrogates, broken UTF-8, binary frames, oversized frames) go to the sandbox of the
compose stack. Every one is answered with a typed error or a valid result, or,
for a frame over the size limit, the connection is closed (1009, or reset when the
daemon closes it while the frame's bytes are still arriving: the daemon takes no
compression, so the megabyte goes over the wire as it is); the daemon never crashes
and still serves a valid request afterwards. The messages are drawn first (Hypothesis,
derandomized), then sent 100 to a connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from deskpod_stack import Stack
from deskpod.errors.codes import _WIRE_CODES
from deskpod.protocol import (
    ACTION_TYPES,
    MAX_MESSAGE_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    ErrorReply,
    Result,
    parse_server_message,
)

pytestmark = pytest.mark.integration

BATCHES = 100
PER_BATCH = 100  # BATCHES * PER_BATCH = 10,000 messages, each batch over one connection
PER_EXAMPLE = 10
"""Frames per Hypothesis example. An example of all 100 frames of a batch often overran
Hypothesis's bound on one example's choices and was drawn again (more than half the draws:
most of the test's time, on the host's CPU); ten rarely do."""

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)),
    max_leaves=25,
)
# Any text, lone UTF-16 surrogates included (st.text leaves them out; json.dumps escapes them
# as "\ud800", which is valid JSON text that decodes to a string UTF-8 cannot encode).
any_text = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=30)
# Hostile but cheap: exec-like tools and real navigation are left out, so a message
# that happens to be valid never runs a command or loads a page.
request_types = st.sampled_from(["act", "configure", "list_dir", "read_file", "workspace_diff", "navigate",
                                 "warp", "", "ACT"])
action = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(sorted(ACTION_TYPES)), st.text(max_size=12))},
    optional={
        "x": scalars, "y": scalars, "keys": json_values, "text": any_text, "path": json_values,
        "scroll_y": scalars, "seconds": st.floats(min_value=-1, max_value=0.01), "button": st.text(max_size=8),
        "region": json_values, "hold_keys": json_values, "url": any_text,
    },
)
near_valid = st.fixed_dictionaries(
    {"type": request_types, "id": st.one_of(st.text(min_size=1, max_size=20), any_text, scalars)},
    optional={
        "actions": st.lists(action, max_size=4), "observe": json_values, "timeout_s": st.just(0.5),
        "model_size": json_values, "url": any_text, "path": any_text,
        "max_dimension": scalars,
    },
)
frames = st.one_of(
    json_values.map(json.dumps),
    near_valid.map(json.dumps),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.just(b"\xff\xfe\xfd"),
    st.integers(min_value=1, max_value=2000).map(lambda n: "[" * n + "]" * n),
)


async def _open(stack: Stack) -> Any:
    return await websockets.connect(
        stack.ws_url, additional_headers={"Authorization": f"Bearer {stack.token}"}, proxy=None,
        max_size=MAX_SERVER_MESSAGE_BYTES,
    )


async def _play(stack: Stack, batch: list[str | bytes]) -> None:
    ws = await _open(stack)
    await ws.recv()  # hello
    try:
        for frame in batch:
            await ws.send(frame)
            reply = parse_server_message(await asyncio.wait_for(ws.recv(), 30))
            assert isinstance(reply, (Result, ErrorReply)), (frame, reply)
            if isinstance(reply, ErrorReply):
                assert reply.error.code in _WIRE_CODES, (frame, reply)
        # An oversized frame closes this connection and nothing else: never a reply, and
        # never a close for another reason (no close frame at all when it was reset).
        with pytest.raises((websockets.ConnectionClosed, ConnectionResetError)) as closed:
            await ws.send(" " * (MAX_MESSAGE_BYTES + 1))
            await asyncio.wait_for(ws.recv(), 30)
        if isinstance(closed.value, websockets.ConnectionClosed) and closed.value.rcvd is not None:
            assert closed.value.rcvd.code == 1009, closed.value
    finally:
        await ws.close()


def _hostile_frames() -> list[str | bytes]:
    """``BATCHES * PER_BATCH`` frames of :data:`frames`, :data:`PER_EXAMPLE` to a Hypothesis
    example, derandomized (the same every run)."""
    drawn: list[str | bytes] = []

    @settings(max_examples=BATCHES * PER_BATCH // PER_EXAMPLE, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(st.lists(frames, min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def draw(messages: list[str | bytes]) -> None:
        drawn.extend(messages)

    draw()
    return drawn


def test_ten_thousand_hostile_messages_get_typed_answers_and_the_daemon_survives(stack: Stack) -> None:
    messages = _hostile_frames()
    assert len(messages) == BATCHES * PER_BATCH
    for start in range(0, len(messages), PER_BATCH):
        asyncio.run(_play(stack, messages[start:start + PER_BATCH]))

    async def still_serves() -> Any:
        ws = await _open(stack)
        await ws.recv()
        await ws.send('{"type": "configure", "id": "c"}')
        await ws.recv()
        await ws.send('{"type": "act", "id": "ok", "actions": [{"type": "screenshot"}]}')
        reply = parse_server_message(await ws.recv())
        await ws.close()
        return reply

    reply = asyncio.run(still_serves())
    assert isinstance(reply, Result) and reply.observation and reply.observation.screenshot
    assert stack.container("sandbox").attrs["RestartCount"] == 0


SURROGATE_FRAMES: list[tuple[str, str | bytes]] = [
    ("id", '{"type": "act", "id": "\\ud800", "actions": []}'),
    ("type_text", '{"type": "act", "id": "t", "actions": [{"type": "type", "text": "ab\\udc00cd"}]}'),
    ("url", '{"type": "navigate", "id": "u", "url": "http://demo.test/\\udbff"}'),
    ("workspace_path", '{"type": "read_file", "id": "p", "path": "a\\ud800/b"}'),
    ("key", '{"type": "act", "id": "k", "actions": [], "\\udfff": 1}'),
    ("binary_not_utf8", b'{"type": "act", "id": "b\xff\xfe", "actions": []}'),
]


def test_lone_surrogates_in_any_string_get_a_typed_error_and_the_connection_stays_open(stack: Stack) -> None:
    """On 55dbe26 a lone surrogate in an id dropped the control websocket
    (the reply echoing it could not be encoded). Each frame now gets invalid_request with an id
    that can be echoed, on the same connection, and the next request works."""

    async def play() -> list[tuple[str, Any]]:
        ws = await _open(stack)
        await ws.recv()  # hello
        answers: list[tuple[str, Any]] = []
        try:
            for name, frame in SURROGATE_FRAMES:
                await ws.send(frame)
                answers.append((name, parse_server_message(await asyncio.wait_for(ws.recv(), 30))))
            await ws.send('{"type": "act", "id": "after", "actions": []}')
            answers.append(("after", parse_server_message(await asyncio.wait_for(ws.recv(), 30))))
        finally:
            await ws.close()
        return answers

    answers = dict(asyncio.run(play()))
    for name, _ in SURROGATE_FRAMES:
        reply = answers[name]
        assert isinstance(reply, ErrorReply) and reply.error.code == "invalid_request", (name, reply)
    assert answers["id"].id == "\ufffd"
    assert answers["type_text"].id == "t" and "actions.0.text" in answers["type_text"].error.message
    assert answers["url"].id == "u" and answers["workspace_path"].id == "p"
    after = answers["after"]
    assert isinstance(after, Result) and after.id == "after" and after.observation is not None
    assert stack.container("sandbox").attrs["RestartCount"] == 0
