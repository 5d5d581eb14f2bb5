"""Property-based fuzzing of the control websocket against the real daemon (issue 6).

10,000 generated messages (arbitrary JSON, near-valid requests with hostile
fields, broken UTF-8, binary frames, oversized frames) go to the sandbox of the
compose stack. Every one is answered with a typed error or a valid result, or,
for a frame over the size limit, the connection is closed cleanly (1009); the
daemon never crashes and still serves a valid request afterwards.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskpod_stack import Stack
from deskpod.errors import _WIRE_CODES
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
PER_BATCH = 100  # BATCHES * PER_BATCH = 10,000 messages

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)),
    max_leaves=25,
)
# Hostile but cheap: exec-like tools and real navigation are left out, so a message
# that happens to be valid never runs a command or loads a page.
request_types = st.sampled_from(["act", "configure", "list_dir", "read_file", "workspace_diff", "navigate",
                                 "warp", "", "ACT"])
action = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(sorted(ACTION_TYPES)), st.text(max_size=12))},
    optional={
        "x": scalars, "y": scalars, "keys": json_values, "text": st.text(max_size=30), "path": json_values,
        "scroll_y": scalars, "seconds": st.floats(min_value=-1, max_value=0.01), "button": st.text(max_size=8),
        "region": json_values, "hold_keys": json_values,
    },
)
near_valid = st.fixed_dictionaries(
    {"type": request_types, "id": st.one_of(st.text(min_size=1, max_size=20), scalars)},
    optional={
        "actions": st.lists(action, max_size=4), "observe": json_values, "timeout_s": st.just(0.5),
        "model_size": json_values, "url": st.text(max_size=30), "path": st.text(max_size=30),
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
            assert isinstance(reply, (Result, ErrorReply)), reply
            if isinstance(reply, ErrorReply):
                assert reply.error.code in _WIRE_CODES, reply
        # An oversized frame closes this connection cleanly and nothing else.
        await ws.send(" " * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    finally:
        await ws.close()


def test_ten_thousand_hostile_messages_get_typed_answers_and_the_daemon_survives(stack: Stack) -> None:
    @settings(max_examples=BATCHES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(frames, min_size=PER_BATCH, max_size=PER_BATCH))
    def batch(messages: list[str | bytes]) -> None:
        asyncio.run(_play(stack, messages))

    batch()

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
