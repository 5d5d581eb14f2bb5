"""Sessions of ``deskpod serve`` on a sandbox the service owns start clean, one at a time,
and a run's allowlist ends with the run.

Found on e28e94d: consecutive sessions of the stack's service ran on the same sandbox
and nothing reset it between them (cookies, storage and history of one were there for
the next); every opener had to hold the sandbox's control token; and a run's browser
allowlist outlived the run (the next client's navigation to another host the stack
allows showed "Blocked by deskpod"). The service runs in this process on a loopback
port (as in ``test_serve.py``) with the integration stack's sandbox registered by name;
its token file starts with the stack's token and the stack's token is taken back from
it afterwards, as the operator's own tools do.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from deskpod import ControllerClient
from deskpod.client import Sandbox
from deskpod.errors import BusyError, NavigationError
from deskpod.protocol import ObserveOptions
from deskpod.service.messages import ServiceObservation
from deskpod_stack import Stack, page_state
from running_service import running_service

pytestmark = pytest.mark.integration

STORAGE = "http://demo.test/fixtures/storage"
TEXT = ObserveOptions(screenshot=False, page_text=True)


def _task(start_url: str) -> dict[str, Any]:
    return {"name": "clean", "start_url": start_url, "allowed_domains": ["demo.test"],
            "success": {"page_text_contains": "never", "timeout_s": 0.5}}


def _with_owned_stack(stack: Stack, tmp_path: Path, body: Callable[[str, str], Awaitable[Any]]) -> Any:
    """Serve with the stack's sandbox registered as ``stack`` (token file seeded with its token);
    run ``body(service_url, service_token)``; the stack's token is the file's afterwards."""
    token, token_file = secrets.token_urlsafe(32), tmp_path / "stack.token"
    token_file.write_text(stack.token + "\n")
    entry = f"stack={stack.ws_url} token_file={token_file}"

    async def main() -> Any:
        async with running_service(token, tmp_path / "audit", sandboxes=frozenset({entry})) as port:
            return await asyncio.wait_for(body(f"ws://127.0.0.1:{port}/v1/controller", token), 150)

    try:
        return asyncio.run(main())
    finally:
        stack.token = token_file.read_text().strip()


async def _state(client: ControllerClient, session: str, reply: Any) -> dict[str, Any]:
    """The storage fixture's STATE, once its IndexedDB request answered (a short wait per try)."""
    for _ in range(20):
        assert isinstance(reply, ServiceObservation), reply
        try:
            return page_state(reply.observation.page_text)
        except AssertionError:
            reply = await client.submit(session, [{"type": "wait", "seconds": 0.3}])
    raise AssertionError(f"no STATE on the page: {reply}")


def test_consecutive_sessions_by_name_share_nothing_and_a_second_one_meanwhile_is_busy(
        stack: Stack, tmp_path: Path) -> None:
    marker = "carry" + secrets.token_hex(4)

    async def body(url: str, token: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with await ControllerClient.connect(url, token) as first, \
                await ControllerClient.connect(url, token) as other:
            started = time.monotonic()
            session = (await first.open_named("stack", _task(f"{STORAGE}?set={marker}"))).session
            out["open_s"] = time.monotonic() - started
            out["first"] = await _state(first, session, await first.ready(session))
            with pytest.raises(BusyError) as busy:
                await other.open_named("stack", _task(STORAGE))
            out["busy"] = busy.value
            await first.finish(session, "stored")
            session = (await other.open_named("stack", _task(STORAGE))).session
            out["second"] = await _state(other, session, await other.ready(session))
            out["finished"] = await other.finish(session, "looked")
        return out

    out = _with_owned_stack(stack, tmp_path, body)
    print(f"open by name (a reset first): {out['open_s']:.2f} s")
    assert out["first"]["cookie"] == out["first"]["local"] == out["first"]["idb"] == marker, out["first"]
    assert out["busy"].detail == {"sandbox": "stack", "retry_after_s": 5.0}, out["busy"].detail
    # The second session's tab is a fresh one: its history as long as the first's was at its start.
    assert out["second"] == {"cookie": None, "local": None, "session": None, "idb": None,
                             "history": out["first"]["history"], "value": ""}, out["second"]
    assert out["finished"].status == "failed", out["finished"]

    # The operator's own tool, with the token the service keeps (it rotated twice): the
    # sandbox is not held to the last run's hosts.
    async def operator() -> str:
        async with await Sandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
            return await _title(sb, "http://allowed.test/")

    assert "Blocked by deskpod" not in asyncio.run(operator())


async def _title(sb: Sandbox, url: str) -> str:
    """The title of the page ``url`` loads (deskpod's blocked page says "Blocked by deskpod")."""
    try:
        return (await sb.navigate(url, observe=TEXT)).title or ""
    except NavigationError as exc:
        return exc.message


def _health(port: int) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
        return dict(json.loads(resp.read()))


def test_a_runs_allowlist_ends_when_its_opener_goes_away(stack: Stack, tmp_path: Path) -> None:
    """The finding through today's ``{url, token}`` open (no reset between): the opener's
    connection closes mid-run; the next client reaches another host the stack allows."""
    token = secrets.token_urlsafe(32)

    async def body() -> None:
        async with running_service(token, tmp_path / "audit") as port:
            async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", token) as client:
                session = (await client.open(stack.ws_url, stack.token, _task("http://demo.test/"))).session
                await client.ready(session)
            for _ in range(200):  # the run has ended once the service holds no sandbox
                if (await asyncio.to_thread(_health, port))["running"] == 0:
                    break
                await asyncio.sleep(0.1)

    async def next_client() -> str:
        async with await Sandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
            return await _title(sb, "http://allowed.test/")

    asyncio.run(asyncio.wait_for(body(), 120))
    assert "Blocked by deskpod" not in asyncio.run(next_client())


def test_an_agent_holding_only_the_service_token_never_holds_a_sandbox_token(stack: Stack, tmp_path: Path) -> None:
    """The review's finding: ``open`` required the sandbox token and ``reset_done`` handed the new
    one back, so while its session waited the same client drove the daemon directly, and the
    session's audit log had no record of it. Now, as that agent (a raw client of the service
    wire, the service token only): it opens the owned sandbox by name, and while its session
    runs a wait it tries the daemon with everything it holds (the service token) and with the
    sandbox's token from before the session (rotated by the reset): both refused. No message
    it was sent, through the session's end and a ``reset``, carries either sandbox token."""
    from websockets.asyncio.client import connect

    from deskpod.errors import UnauthorizedError

    before = stack.token
    received: list[str] = []
    refused: list[str] = []

    async def next_of(ws: Any, *kinds: str) -> dict[str, Any]:
        while True:
            raw = await asyncio.wait_for(ws.recv(), 60)
            received.append(raw)
            message = json.loads(raw)
            if message["type"] in kinds:
                return dict(message)

    async def body(url: str, token: str) -> None:
        async with connect(url, proxy=None, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps({"type": "open", "id": "o", "sandbox": {"name": "stack"},
                                      "task": _task("http://demo.test/")}))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "s", "session": session,
                                      "actions": [{"type": "wait", "seconds": 3}]}))
            for held in (token, before):
                try:
                    async with await Sandbox.open(stack.ws_url, held, timeout_s=15):
                        pass
                except UnauthorizedError as exc:
                    refused.append(exc.code)
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "finish", "id": "f", "session": session, "claim": "done"}))
            await next_of(ws, "finished")
            await ws.send(json.dumps({"type": "reset", "id": "r", "session": session}))
            reset = await next_of(ws, "reset_done", "error")
            assert reset["type"] == "reset_done" and reset["token"] == "", reset

    _with_owned_stack(stack, tmp_path, body)
    assert stack.token != before, "the service did not rotate the sandbox's token"
    assert refused == ["unauthorized", "unauthorized"], refused
    assert received and not [m for m in received if before in m or stack.token in m]
