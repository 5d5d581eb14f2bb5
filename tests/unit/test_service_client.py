"""``ControllerClient`` against the real ``deskpod serve`` on loopback, the test daemon as its sandbox.

The daemon of :mod:`hostile_daemon`, without tampering, answers like a well-behaved
sandbox, so these tests check the client's side of the service wire: replies matched
by id, confirmations and pauses out of ``events()``, typed errors, a peer's bad message.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from running_service import running_service

from deskpod import ControllerClient, SyncControllerClient
from deskpod.errors import BadReplyError, BusyError, InvalidRequestError, UnauthorizedError
from deskpod.service.messages import (
    ServiceConfirmationRequired,
    ServiceFinished,
    ServiceObservation,
    ServicePauseRequired,
)

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43
APPROVER = "a" * 43
WAIT = {"type": "wait", "seconds": 0}
TASK = {"name": "client", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "limits": {"action_timeout_s": 2, "max_wall_time_s": 30},
        "success": {"url_matches": "^http://demo\\.test/done$", "timeout_s": 1}}
DONE = {"type": "type", "text": "done"}


def _done_later() -> Any:
    """A daemon that shows ``/done`` from the request after the one typing "done" (a page that
    navigates a little later), so a ``finish`` is what verifies it."""
    flags = {"done": False}

    def tamper(n: int, request: dict[str, Any], reply: Any) -> Any:
        if flags["done"] and isinstance(reply, dict) and "observation" in reply:
            reply["observation"]["url"] = "http://demo.test/done"
            for tab in reply["observation"].get("tabs", []):
                tab["url"] = "http://demo.test/done"
        if DONE in request.get("actions", []):
            flags["done"] = True
        return reply

    return tamper


def _with_service(tmp_path: Path, body: Callable[[str], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER) as port:
            return await body(f"ws://127.0.0.1:{port}/v1/controller")

    return asyncio.run(main())


async def _next(client: ControllerClient, kind: type) -> Any:
    async for notice in client.events():
        if isinstance(notice, kind):
            return notice
    raise AssertionError(f"no {kind.__name__}")


def test_a_session_with_a_confirmation_and_a_pause_ends_verified(tmp_path: Path) -> None:
    async def body(url: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with await ControllerClient.connect(url, TOKEN) as client, \
                await ControllerClient.connect(url, APPROVER, role="approver") as approver:
            session = (await client.open(daemon.url, "t" * 43, TASK)).session
            out["ready"] = await client.ready(session)
            out["ok"] = await client.submit(session, [WAIT])
            with pytest.raises(InvalidRequestError, match="no session"):
                await client.finish("nope")
            step = asyncio.create_task(client.submit(session, [WAIT], risk="L3", intent="pay"))
            ask = await asyncio.wait_for(_next(approver, ServiceConfirmationRequired), 20)
            with pytest.raises(BusyError):
                await client.submit(session, [WAIT])
            await approver.confirm(ask.request["id"], True, ask.request["digest"])
            out["confirmed"] = await asyncio.wait_for(step, 20)
            await client.pause(session)
            notice = await asyncio.wait_for(_next(approver, ServicePauseRequired), 20)
            await approver.review(notice.notice["id"], "resume")
            out["typed"] = await client.submit(session, [DONE])
            out["summary"] = await client.finish(session, "done")
        return out

    with HostileDaemon(_done_later()) as daemon:
        out = _with_service(tmp_path, body)
    assert out["ready"].status == "ready" and out["ready"].id is None
    assert isinstance(out["ok"], ServiceObservation) and out["ok"].status == "ok"
    assert isinstance(out["confirmed"], ServiceObservation) and out["confirmed"].status == "ok"
    assert out["summary"].status == "succeeded", out["summary"].reason


def test_errors_are_typed_and_a_finished_run_answers_a_pending_submit(tmp_path: Path) -> None:
    async def body(url: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with pytest.raises(UnauthorizedError):
            await ControllerClient.connect(url, "wrong")
        async with await ControllerClient.connect(url, TOKEN) as client, \
                await ControllerClient.connect(url, APPROVER, role="approver") as approver:
            with pytest.raises(InvalidRequestError):
                await client.open(daemon.url, "short", TASK)
            with pytest.raises(InvalidRequestError, match="no session"):
                await client.cancel("nope")
            session = (await client.open(daemon.url, "t" * 43, TASK)).session
            await client.ready(session)
            step = asyncio.create_task(client.submit(session, [WAIT], risk="L3"))
            ask = await asyncio.wait_for(_next(approver, ServiceConfirmationRequired), 20)
            await approver.confirm(ask.request["id"], False, ask.request["digest"])
            out["denied"] = await asyncio.wait_for(step, 20)
        return out

    with HostileDaemon() as daemon:
        out = _with_service(tmp_path, body)
    assert isinstance(out["denied"], (ServiceObservation, ServiceFinished))


def test_the_sync_facade_runs_a_session_from_a_plain_thread(tmp_path: Path) -> None:
    async def body(url: str) -> Any:
        def script() -> Any:
            with SyncControllerClient.connect(url, TOKEN) as client:
                session = client.open(daemon.url, "t" * 43, TASK).session
                client.ready(session)
                client.submit(session, [DONE])
                return client.finish(session)

        return await asyncio.to_thread(script)

    with HostileDaemon(_done_later()) as daemon:
        summary = _with_service(tmp_path, body)
    assert summary.status == "succeeded", summary.reason
    assert not [t for t in threading.enumerate() if t.name == "deskpod-controller-client"]


def test_a_message_that_is_not_a_service_model_breaks_the_connection(tmp_path: Path) -> None:
    """The service is a peer: an unknown message type (or a reply with a forged field) is refused."""
    from websockets.asyncio.server import serve as ws_serve

    async def evil(ws: Any) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "opened", "id": "c-1", "session": "s", "extra": 1}))
        await ws.wait_closed()  # connected until the client breaks the connection

    async def main() -> None:
        async with ws_serve(evil, "127.0.0.1", 0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/", TOKEN) as client:
                with pytest.raises(BadReplyError, match="bad message"):
                    await client.open("ws://127.0.0.1:1/v1/ws", "t" * 43, TASK)
                with pytest.raises(BadReplyError):
                    async for _ in client.events():
                        pass

    asyncio.run(main())


def test_attach_finds_the_stacks_service_from_its_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script on the host had to load ``.env`` into its environment and write the port in its
    code; ``attach()`` reads the published port and the tokens from the stack's ``.env``, as
    agent or approver, and says which variable is missing when it is."""
    from deskpod import attach, attach_sync
    from deskpod.errors import SettingsError
    from deskpod.settings import get_settings

    for name in ("DESKPOD_SERVE_PORT", "DESKPOD_SERVE_TOKEN", "DESKPOD_SERVE_APPROVER_TOKEN", "DESKPOD_STACK_ENV"):
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / ".env"

    async def body(url: str) -> list[str]:
        port = url.split(":")[2].split("/")[0]
        env_file.write_text(f"DESKPOD_SERVE_PORT={port}\nDESKPOD_SERVE_TOKEN={TOKEN}\n"
                            f"DESKPOD_SERVE_APPROVER_TOKEN={APPROVER}\n", encoding="utf-8")
        async with await attach(env_file) as agent, await attach(env_file, role="approver") as approver:
            roles = [agent.role, approver.role]
        monkeypatch.chdir(tmp_path)  # the default file: .env in the current folder
        blocking = await asyncio.to_thread(attach_sync)
        roles.append(blocking.client.role)
        await asyncio.to_thread(blocking.close)  # off this loop, which serves the service
        env_file.write_text(f"DESKPOD_SERVE_PORT={port}\nDESKPOD_SERVE_TOKEN={'w' * 43}\n", encoding="utf-8")
        with pytest.raises(UnauthorizedError):
            await attach(env_file)
        env_file.write_text(f"DESKPOD_SERVE_PORT={port}\n", encoding="utf-8")
        with pytest.raises(SettingsError, match="DESKPOD_SERVE_TOKEN"):
            await attach(env_file)
        return roles

    get_settings.cache_clear()
    try:
        assert _with_service(tmp_path, body) == ["agent", "approver", "agent"]
    finally:
        get_settings.cache_clear()
