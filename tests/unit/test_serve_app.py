"""``deskpod serve`` as a FastAPI app on loopback: health, the handshake's refusals, the message cap.

The real service under uvicorn and a real websocket client, as a remote service (or a
browser, or a stranger without the token) would connect.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from running_service import running_service
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from deskpod.service.messages import MAX_MESSAGE_BYTES

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43


def _with_service(tmp_path: Path, body: Callable[[int], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit") as port:
            return await body(port)

    return asyncio.run(main())


def _get(url: str) -> tuple[int, dict[str, Any]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def test_healthz_answers_the_sessions_open(tmp_path: Path) -> None:
    async def body(port: int) -> tuple[int, dict[str, Any]]:
        return await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/healthz")

    assert _with_service(tmp_path, body) == (200, {"ok": True, "sessions": 0, "running": 0})


def test_the_handshake_is_refused_without_the_token_or_from_a_browser(tmp_path: Path) -> None:
    async def body(port: int) -> list[int]:
        codes = []
        for headers in ({}, {"Authorization": "Bearer wrong"},
                        {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.test"}):
            try:
                async with connect(f"ws://127.0.0.1:{port}/v1/controller", additional_headers=headers, proxy=None):
                    codes.append(101)
            except InvalidStatus as exc:
                codes.append(exc.response.status_code)
        async with connect(f"ws://127.0.0.1:{port}/v1/controller",
                           additional_headers={"Authorization": f"Bearer {TOKEN}"}, proxy=None):
            codes.append(101)
        return codes

    assert _with_service(tmp_path, body) == [401, 401, 403, 101]


def test_a_message_over_the_cap_closes_the_connection_with_1009(tmp_path: Path) -> None:
    async def body(port: int) -> int | None:
        async with connect(f"ws://127.0.0.1:{port}/v1/controller", max_size=None,
                           additional_headers={"Authorization": f"Bearer {TOKEN}"}, proxy=None) as ws:
            await ws.send(json.dumps({"type": "pause", "id": "p", "session": "x" * MAX_MESSAGE_BYTES}))
            try:
                await asyncio.wait_for(ws.recv(), 10)
            except ConnectionClosedError as exc:
                return exc.rcvd.code if exc.rcvd else None
        return None

    assert _with_service(tmp_path, body) == 1009


def test_a_proposal_sent_as_soon_as_the_observation_arrives_is_accepted() -> None:
    """The client may answer an observation before the service's send has returned: the
    session must already be waiting then (it set ``waiting`` only after the send)."""
    from deskpod.controller.gui_agent import Done
    from deskpod.service.server.session import RemoteAgent
    from deskpod.service.messages import FinishMessage
    from deskpod.protocol import Observation

    waiting_at_send: list[bool] = []

    async def send(message: Any) -> None:
        waiting_at_send.append(agent.waiting)
        agent.inbox.put_nowait(FinishMessage(type="finish", id="f1", session="s1", claim="done"))

    agent = RemoteAgent(send, "s1")
    observation = Observation.model_construct()
    outcome = asyncio.run(agent.propose(observation, None))
    assert waiting_at_send == [True]
    assert isinstance(outcome, Done) and outcome.claim == "done"
    assert agent.waiting is False
