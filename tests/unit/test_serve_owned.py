"""``deskpod serve`` owns the sandboxes its operator registers by name (``DESKPOD_SERVE_SANDBOXES``).

Found on e28e94d: sessions of the stack's service ran one after another on the same
sandbox and nothing reset it between them, every opener had to hold the sandbox's
control token, and a second session on a busy sandbox got a ``busy`` without any hint
of when to come back. Here the real service on loopback, a real websocket client and a
stand-in daemon (:mod:`hostile_daemon`, well behaved) show: a session opens by name
with no token, the sandbox is reset before it (the rotated token goes to the registry's
token file and never to the opener), a second session gets a typed ``busy`` with
``retry_after_s``, and the registry's entries parse (today's bare URLs included).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from running_service import running_service
from websockets.asyncio.client import ClientConnection, connect

from deskpod.client.snapshot_store import SnapshotStore
from deskpod.protocol import SnapshotRestored
from deskpod.service.server.service_state import BUSY_RETRY_AFTER_S
from deskpod.settings import load_settings
from deskpod.settings.sandboxes import SandboxEntry, parse_sandbox_entries, parse_sandbox_entry

pytestmark = pytest.mark.timeout(60)

TOKEN = "a" * 43
FIRST = "first-token-of-the-sandbox-0123456789"
TASK = {"name": "owned", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "success": {"page_text_contains": "never", "timeout_s": 0.1}}


async def _next(ws: ClientConnection, *kinds: str) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if message["type"] in kinds:
            return dict(message)


def _play(tmp_path: Path, daemon: HostileDaemon, talk: Any, snapshots: SnapshotStore | None = None) -> Any:
    """Serve with ``lab`` registered on ``daemon`` (its token file holding :data:`FIRST`) and
    run ``talk(agent_ws)``."""
    token_file = tmp_path / "lab.token"
    token_file.write_text(FIRST + "\n")

    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit", snapshots=snapshots,
                                   sandboxes=frozenset({f"lab={daemon.url} token_file={token_file}"})) as port:
            async with connect(f"ws://127.0.0.1:{port}/v1/controller", proxy=None,
                               additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                return await talk(ws)

    return asyncio.run(main())


def test_a_session_opens_by_name_without_a_token_on_a_sandbox_reset_before_it(tmp_path: Path) -> None:
    async def talk(ws: ClientConnection) -> dict[str, Any]:
        await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"name": "lab"}, "task": TASK}))
        opened = await _next(ws, "opened", "error")
        ready = await _next(ws, "observation")
        await ws.send(json.dumps({"type": "cancel", "id": "c", "session": opened["session"]}))
        await _next(ws, "finished")
        await ws.send(json.dumps({"type": "reset", "id": "r", "session": opened["session"]}))
        return {"opened": opened, "ready": ready, "reset": await _next(ws, "reset_done", "error")}

    with HostileDaemon() as daemon:
        out = _play(tmp_path, daemon, talk)
    assert out["opened"]["type"] == "opened", out["opened"]
    assert out["ready"]["status"] == "ready"
    kinds = [r.get("type") for r in daemon.requests if isinstance(r, dict)]
    assert kinds[0] == "reset", f"the sandbox was not reset before the session: {kinds[:5]}"
    rotated = (tmp_path / "lab.token").read_text().strip()
    assert rotated != FIRST, "the reset's new token did not go to the token file"
    resets = [r for r in daemon.requests if isinstance(r, dict) and r.get("type") == "reset"]
    assert resets[-1]["token_sha256"] == hashlib.sha256(rotated.encode()).hexdigest()
    assert out["reset"]["type"] == "reset_done" and out["reset"]["token"] == "", "the opener got a sandbox token"
    assert (tmp_path / "lab.token").stat().st_mode & 0o777 == 0o600


def test_a_second_session_on_a_busy_sandbox_gets_busy_with_a_retry_hint(tmp_path: Path) -> None:
    async def talk(ws: ClientConnection) -> dict[str, Any]:
        await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"name": "lab"}, "task": TASK}))
        session = (await _next(ws, "opened"))["session"]
        await _next(ws, "observation")
        await ws.send(json.dumps({"type": "open", "id": "o2", "sandbox": {"name": "lab"}, "task": TASK}))
        second = await _next(ws, "error", "opened")
        await ws.send(json.dumps({"type": "open", "id": "o3", "sandbox": {"name": "nope"}, "task": TASK}))
        unknown = await _next(ws, "error", "opened")
        await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
        await _next(ws, "finished")
        return {"second": second, "unknown": unknown}

    with HostileDaemon() as daemon:
        out = _play(tmp_path, daemon, talk)
    assert out["second"]["id"] == "o2" and out["second"]["error"]["code"] == "busy", out["second"]
    assert out["second"]["error"]["detail"] == {"sandbox": "lab", "retry_after_s": BUSY_RETRY_AFTER_S}
    assert "retry in" in out["second"]["error"]["message"]
    assert out["unknown"]["error"]["code"] == "invalid_request" and "nope" in out["unknown"]["error"]["message"]


def test_an_open_naming_the_owned_url_with_a_stale_token_still_opens_it(tmp_path: Path) -> None:
    """Today's form (``{url, token}``) on a sandbox the service owns: its token rotates at
    every session, so the opener's may be stale; the service uses its own."""
    async def talk(ws: ClientConnection) -> dict[str, Any]:
        await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"url": daemon.url, "token": "s" * 40},
                                  "task": TASK}))
        opened = await _next(ws, "opened", "error")
        await _next(ws, "observation")
        await ws.send(json.dumps({"type": "cancel", "id": "c", "session": opened["session"]}))
        await _next(ws, "finished")
        return opened

    with HostileDaemon() as daemon:
        opened = _play(tmp_path, daemon, talk)
        assert opened["type"] == "opened", opened
        assert [r.get("type") for r in daemon.requests if isinstance(r, dict)][0] == "reset"


def test_a_session_continues_from_a_named_snapshot_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``restore``: the reset, then the snapshot's browser session; refused on a sandbox the
    service does not own, and for a snapshot the store does not hold."""
    import deskpod.client.wire as wire

    store = SnapshotStore(tmp_path / "snapshots")
    store.save("alice", b"\x1f\x8b alice's session")
    restored: list[bytes] = []

    def upload(url: str, token: str, data: bytes, start_url: str | None) -> SnapshotRestored:
        restored.append(data)
        return SnapshotRestored(files=3, size=len(data), url=start_url or "about:blank")

    monkeypatch.setattr(wire, "upload_snapshot", upload)

    async def talk(ws: ClientConnection) -> list[dict[str, Any]]:
        answers = []
        for n, (sandbox, name) in enumerate([({"name": "lab"}, "nobody"), ({"url": "ws://127.0.0.1:9/v1/ws", "token": "t" * 20},
                                             "alice"), ({"name": "lab"}, "alice")]):
            await ws.send(json.dumps({"type": "open", "id": f"o{n}", "sandbox": sandbox, "task": TASK,
                                      "restore": name}))
            answers.append(await _next(ws, "opened", "error"))
        await _next(ws, "observation")
        await ws.send(json.dumps({"type": "cancel", "id": "c", "session": answers[-1]["session"]}))
        await _next(ws, "finished")
        return answers

    with HostileDaemon() as daemon:
        missing, unowned, opened = _play(tmp_path, daemon, talk, snapshots=store)
    assert missing["error"]["code"] == "snapshot_failed" and "nobody" in missing["error"]["message"], missing
    assert unowned["error"]["code"] == "invalid_request" and unowned["error"]["detail"] == {
        "rule": "restore_owned_only"}, unowned
    assert opened["type"] == "opened", opened
    assert restored == [b"\x1f\x8b alice's session"]
    assert [r.get("type") for r in daemon.requests if isinstance(r, dict)][0] == "reset"


@pytest.mark.parametrize("sandbox", [
    pytest.param({"name": "lab", "token": "t" * 20}, id="name-and-token"),
    pytest.param({"url": "ws://x.test/v1/ws"}, id="url-without-token"),
    pytest.param({"name": "Bad Name"}, id="bad-name"),
])
def test_an_open_names_its_sandbox_one_way(tmp_path: Path, sandbox: dict[str, Any]) -> None:
    async def talk(ws: ClientConnection) -> dict[str, Any]:
        await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": sandbox, "task": TASK}))
        return await _next(ws, "error", "opened")

    with HostileDaemon() as daemon:
        answer = _play(tmp_path, daemon, talk)
        assert answer["type"] == "error" and answer["error"]["code"] == "invalid_request", answer
        assert not daemon.requests


def test_registry_entries_parse_in_both_forms() -> None:
    assert parse_sandbox_entry("ws://sandbox:8765/v1/ws") == SandboxEntry(name=None, url="ws://sandbox:8765/v1/ws")
    entry = parse_sandbox_entry("stack=ws://sandbox:8765/v1/ws token_file=/var/lib/t token_env=DESKPOD_TOKEN")
    assert entry == SandboxEntry(name="stack", url="ws://sandbox:8765/v1/ws", token_file=Path("/var/lib/t"),
                                 token_env="DESKPOD_TOKEN")
    settings = load_settings({"DESKPOD_SERVE_SANDBOXES": "ws://a.test/v1/ws , lab=wss://b.test/v1/ws  "
                                                         "token_file=/t/lab.token"}, config_file=None)
    assert settings.serve_sandboxes == frozenset({"ws://a.test/v1/ws", "lab=wss://b.test/v1/ws token_file=/t/lab.token"})


@pytest.mark.parametrize(("text", "says"), [
    ("lab=ws://b.test/v1/ws", "needs token_file"),
    ("lab=ws://b.test/v1/ws token_file=relative", "absolute"),
    ("lab=http://b.test/", "ws:// or wss://"),
    ("Lab=ws://b.test/v1/ws token_file=/t", "bad sandbox name"),
    ("ws://b.test/v1/ws token_file=/t", "options need a name"),
    ("lab=ws://b.test/v1/ws token_file=/t color=red", "unknown option"),
    ("lab=ws://b.test/v1/ws token_file=/t token_file=/u", "twice"),
    ("lab=ws://b.test/v1/ws token_file=/t token_env=1X", "token_env"),
])
def test_a_bad_registry_entry_is_refused_with_its_reason(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_sandbox_entry(text)
    with pytest.raises(Exception, match="DESKPOD_SERVE_SANDBOXES"):
        load_settings({"DESKPOD_SERVE_SANDBOXES": text}, config_file=None)


def test_a_name_or_an_owned_url_is_registered_once() -> None:
    with pytest.raises(ValueError, match="name 'lab'"):
        parse_sandbox_entries(["lab=ws://a.test/v1/ws token_file=/a", "lab=ws://b.test/v1/ws token_file=/b"])
    with pytest.raises(ValueError, match="URL"):
        parse_sandbox_entries(["a=ws://a.test/v1/ws token_file=/a", "b=ws://a.test/v1/ws token_file=/b"])
    assert len(parse_sandbox_entries(["ws://a.test/v1/ws", "a=ws://a.test/v1/ws token_file=/a"])) == 2


def test_the_token_the_sandbox_started_with_seeds_a_missing_token_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deskpod.service.server.service_state import ControllerService

    token_file = tmp_path / "lab.token"
    monkeypatch.setenv("LAB_TOKEN", FIRST)
    service = ControllerService("0" * 64, sandboxes=frozenset({
        f"lab=ws://lab.test/v1/ws token_file={token_file} token_env=LAB_TOKEN"}))
    assert token_file.read_text().strip() == FIRST and token_file.stat().st_mode & 0o777 == 0o600
    assert "ws://lab.test/v1/ws" in service.vouched and set(service.owned) == {"lab"}
