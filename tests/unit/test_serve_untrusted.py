"""``deskpod serve`` against untrusted input on both sides.

The real service on loopback, a real websocket client, and as its sandbox the hostile
daemon of :mod:`hostile_daemon`: a lone surrogate anywhere in a client's message gets a
typed ``invalid_request`` (with an id that can be echoed) and the connection and its
session go on; a sandbox's bad reply ends that session's run with ``bad_reply`` and the
service keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon, Reply, screenshot
from running_service import running_service
from websockets.asyncio.client import connect


pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43


async def _next(ws: Any, kind: str) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if message["type"] == kind:
            return message


def _open(daemon: HostileDaemon) -> str:
    return json.dumps({"type": "open", "id": "o", "sandbox": {"url": daemon.url, "token": "t" * 43},
                       "task": {"name": "serve", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                                "limits": {"action_timeout_s": 2, "max_wall_time_s": 30},
                                "success": {"url_matches": "^http://demo\\.test/done$", "timeout_s": 1}}})


def _with_service(tmp_path: Path, daemon: HostileDaemon, body: Any) -> Any:
    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit") as port, \
                connect(f"ws://127.0.0.1:{port}/v1/controller",
                        additional_headers={"Authorization": f"Bearer {TOKEN}"}, proxy=None) as ws:
            return await body(ws)

    return asyncio.run(main())


def test_lone_surrogates_in_a_clients_message_get_invalid_request_and_the_session_goes_on(tmp_path: Path) -> None:
    async def body(ws: Any) -> dict[str, Any]:
        await ws.send(_open(daemon))
        session = (await _next(ws, "opened"))["session"]
        await _next(ws, "observation")
        out: dict[str, Any] = {}
        await ws.send(f'{{"type": "submit", "id": "\\ud800", "session": "{session}", '
                      '"actions": [{"type": "type", "text": "a\\udc00"}]}')
        out["id"] = await _next(ws, "error")
        await ws.send(f'{{"type": "submit", "id": "s0", "session": "{session}", '
                      '"actions": [{"type": "type", "text": "a\\udc00"}]}')
        out["text"] = await _next(ws, "error")
        await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session,
                                  "actions": [{"type": "wait", "seconds": 0}]}))
        out["after"] = await _next(ws, "observation")
        await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
        out["finished"] = await _next(ws, "finished")
        return out

    with HostileDaemon() as daemon:
        out = _with_service(tmp_path, daemon, body)
    assert out["id"]["id"] == "\ufffd" and out["id"]["error"]["code"] == "invalid_request"
    assert out["text"]["id"] == "s0" and "actions.0.text" in out["text"]["error"]["message"]
    assert out["after"]["id"] == "s1" and out["after"]["status"] == "ok"
    assert not any(r.get("actions") and "\udc00" in json.dumps(r) for r in daemon.requests)
    assert out["finished"]["result"]["status"] == "cancelled"


def test_a_sandboxs_bad_reply_ends_the_session_with_bad_reply_and_the_service_goes_on(tmp_path: Path) -> None:
    evil = "../" * 12 + str(tmp_path / "outside" / "x").lstrip("/")
    (tmp_path / "outside").mkdir()

    def tamper(n: int, request: dict[str, Any], reply: dict[str, Any]) -> Reply:
        if n == 1:
            reply["observation"]["screenshot"] = screenshot(sha256=evil)
        return reply

    async def body(ws: Any) -> dict[str, Any]:
        await ws.send(_open(daemon))
        await _next(ws, "opened")
        finished = await _next(ws, "finished")
        await ws.send(json.dumps({"type": "pause", "id": "p", "session": "nope"}))
        return {"finished": finished, "then": await _next(ws, "error")}

    with HostileDaemon(tamper) as daemon:
        out = _with_service(tmp_path, daemon, body)
    result = out["finished"]["result"]
    assert result["status"] == "failed" and result["reason"].startswith("bad_reply: "), result
    assert out["then"]["error"]["code"] == "invalid_request"
    assert not any((tmp_path / "outside").iterdir())
