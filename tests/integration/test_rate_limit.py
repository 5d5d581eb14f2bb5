"""The daemon's per-connection message-rate limit, against the real sandbox: a flood gets
typed ``rate_limited`` replies (one reply per message, ids kept), nothing over the limit
is carried out, and the same connection works again once the bucket has refilled."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from deskpod_stack import Stack, with_client
from deskpod.agentd.connection import RATE_LIMIT_BURST, RATE_LIMIT_MESSAGES_PER_S
from deskpod.client import SandboxClient
from deskpod.errors import RateLimitedError
from deskpod.protocol import MAX_SERVER_MESSAGE_BYTES, ErrorReply, Result, parse_server_message

pytestmark = pytest.mark.integration

FLOOD = 6 * RATE_LIMIT_BURST
REFILL_S = RATE_LIMIT_BURST / RATE_LIMIT_MESSAGES_PER_S + 0.5


def test_a_flood_gets_rate_limited_replies_and_the_connection_stays_usable(stack: Stack) -> None:
    async def body() -> None:
        async with websockets.connect(
            stack.ws_url, additional_headers={"Authorization": f"Bearer {stack.token}"}, proxy=None,
            max_size=MAX_SERVER_MESSAGE_BYTES,
        ) as ws:
            await ws.recv()  # hello
            sent = [f"f{i}" for i in range(FLOOD)]
            for rid in sent:
                await ws.send(json.dumps({"type": "configure", "id": rid}))
            replies = [parse_server_message(await asyncio.wait_for(ws.recv(), 30)) for _ in sent]
            assert [r.id for r in replies if isinstance(r, (Result, ErrorReply))] == sent
            limited = [r for r in replies if isinstance(r, ErrorReply)]
            carried_out = [r for r in replies if isinstance(r, Result)]
            assert limited and all(r.error.code == "rate_limited" for r in limited), limited[:3]
            assert all(r.error.detail["retry_after_s"] > 0 for r in limited)
            assert RATE_LIMIT_BURST <= len(carried_out) < FLOOD
            await asyncio.sleep(REFILL_S)
            await ws.send('{"type": "act", "id": "after", "actions": []}')
            reply = parse_server_message(await asyncio.wait_for(ws.recv(), 30))
            assert isinstance(reply, Result) and reply.observation is not None and reply.observation.screenshot

    asyncio.run(body())


def test_the_client_maps_rate_limited_to_its_exception(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        with pytest.raises(RateLimitedError) as caught:
            for _ in range(FLOOD):
                await client.configure(None)
        assert caught.value.detail["retry_after_s"] > 0
        await asyncio.sleep(REFILL_S)
        assert (await client.act([])).screenshot is not None

    with_client(stack, body)
