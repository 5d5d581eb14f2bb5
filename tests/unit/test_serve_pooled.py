"""``deskpod serve`` opens sessions on a warm pool by name (``NAME=pool:POOL``): each session
gets a sandbox leased for it, and the pool resets it when the session ends.

The issue asked that a session open "on a sandbox the operator registered by name or on a
pool slot", starting clean, the agent never holding a sandbox token. Here the real service
on loopback and a real websocket client drive a pool whose state file is real and whose
backend is the lease tests' records (``tests/support/lease_backend``); the leased sandbox's
daemon is the well-behaved stand-in (:mod:`hostile_daemon`), reached whatever address the
pool gives.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from lease_backend import one_sandbox_pool
from running_service import running_service
from websockets.asyncio.client import ClientConnection, connect

import deskpod.backend.pool_leases
import deskpod.client
from deskpod.backend import PoolStateFile
from deskpod.service.server.pooled import POOL_RETRY_AFTER_S
from deskpod.settings.sandboxes import parse_sandbox_entry

pytestmark = pytest.mark.timeout(60)

TOKEN = "a" * 43
SLOT_TOKEN = "slot-token-0123456789abcdef-0123456789"
TASK = {"name": "pooled", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "success": {"page_text_contains": "never", "timeout_s": 0.1}}


@pytest.fixture()
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PoolStateFile:
    """A one-sandbox pool ``lab-pool`` in ``tmp_path/state`` on the records backend."""
    return one_sandbox_pool(monkeypatch, tmp_path / "state", "lab-pool", SLOT_TOKEN,
                            (deskpod.backend.pool_leases, "_docker"))


async def _next(ws: ClientConnection, seen: list[str], *kinds: str) -> dict[str, Any]:
    while True:
        raw = await asyncio.wait_for(ws.recv(), 20)
        seen.append(str(raw))
        message = json.loads(raw)
        if message["type"] in kinds:
            return dict(message)


def _member(state: PoolStateFile) -> Any:
    record = state.load()
    assert record is not None
    return record.members[0]


def test_a_session_by_a_pools_name_leases_a_sandbox_and_the_pool_resets_it_after(
        pool: PoolStateFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    during: dict[str, Any] = {}

    with HostileDaemon() as daemon:
        real_connect = deskpod.client.SandboxClient.connect

        async def to_daemon(url: str, token: str, **kwargs: Any) -> Any:
            during.setdefault("tokens", []).append(token)
            return await real_connect(daemon.url, token, **kwargs)

        monkeypatch.setattr(deskpod.client.SandboxClient, "connect", staticmethod(to_daemon))

        async def main() -> dict[str, Any]:
            async with running_service(TOKEN, tmp_path / "audit", sandboxes=frozenset({"lab=pool:lab-pool"}),
                                       pool_state_dir=tmp_path / "state") as port:
                async with connect(f"ws://127.0.0.1:{port}/v1/controller", proxy=None,
                                   additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                    await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"name": "lab"}, "task": TASK}))
                    opened = await _next(ws, seen, "opened", "error")
                    await _next(ws, seen, "observation")
                    during["leased"] = _member(pool)
                    await ws.send(json.dumps({"type": "open", "id": "o2", "sandbox": {"name": "lab"}, "task": TASK}))
                    busy = await _next(ws, seen, "error", "opened")
                    await ws.send(json.dumps({"type": "finish", "id": "f", "session": opened["session"]}))
                    await _next(ws, seen, "finished")
                    for _ in range(100):
                        if _member(pool).state == "idle":
                            break
                        await asyncio.sleep(0.05)
                    during["after"] = _member(pool)
                    await ws.send(json.dumps({"type": "reset", "id": "r", "session": opened["session"]}))
                    reset = await _next(ws, seen, "reset_done", "error")
                    await ws.send(json.dumps({"type": "open", "id": "o3", "sandbox": {"name": "lab"}, "task": TASK}))
                    again = await _next(ws, seen, "opened", "error")
                    return {"opened": opened, "busy": busy, "reset": reset, "again": again}

        out = asyncio.run(main())
    assert out["opened"]["type"] == "opened", out["opened"]
    assert during["tokens"][0] == SLOT_TOKEN, "the session did not drive the leased sandbox"
    assert during["leased"].state == "leased" and during["leased"].lease
    assert out["busy"]["error"]["code"] == "busy", out["busy"]
    assert out["busy"]["error"]["detail"] == {"sandbox": "lab", "retry_after_s": POOL_RETRY_AFTER_S}
    after = during["after"]
    assert after.state == "idle" and after.resets == 1 and after.token != SLOT_TOKEN, "the pool did not reset it"
    assert out["reset"]["type"] == "error" and out["reset"]["error"]["detail"] == {"rule": "pool_session"}
    assert out["again"]["type"] == "opened", out["again"]
    assert during["tokens"][-1] == after.token, "the next session did not get the reset sandbox"
    assert not [m for m in seen if SLOT_TOKEN in m or after.token in m], "the agent was sent a slot's token"


def test_a_pool_entry_parses_and_takes_no_options() -> None:
    entry = parse_sandbox_entry("lab=pool:lab-pool")
    assert (entry.name, entry.pool, entry.url, entry.token_file) == ("lab", "lab-pool", "", None)
    for bad, says in (("lab=pool:Bad!", "bad pool name"), ("lab=pool:p token_file=/x", "takes no options"),
                      ("Lab=pool:p", "bad sandbox name")):
        with pytest.raises(ValueError, match=says):
            parse_sandbox_entry(bad)
