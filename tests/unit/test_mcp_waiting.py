"""A call of ``deskpod mcp`` that waits for a person: progress while it waits, and a cancel that withdraws it.

Found trying ``deskpod mcp`` as a new user would: an MCP call the client cancelled kept its confirmation card
up and its action pending, and the next call waited for it and then failed with a wrong
"the run was paused"; a call waiting for an approver sent no progress notification. The MCP
SDK's in-process client calls the tools (its ``read_timeout_seconds`` sends the
``notifications/cancelled`` a real client sends); the embedded controller service runs the
session; an approver connection plays the person; the daemon is the fake of
:mod:`hostile_daemon`, which records what reached the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from deskpod import ControllerClient
from deskpod.controller.policy.policy_file import Policy
from deskpod.errors import SandboxError
from deskpod.mcp_server.app import EmbeddedController, embedded_controller
from deskpod.mcp_server.runs import GuiRun, SandboxLease
from deskpod.mcp_server.server import NO_SUCCESS_CHECK, build_server
from deskpod.mcp_server.sessions import McpConfig
from deskpod.mcp_server.sources import GivenSandbox
from deskpod.protocol import Observation
from deskpod.service.messages import (
    ServiceConfirmationRequired,
    ServiceError,
    ServiceObservation,
    ServiceQuestionWithdrawn,
    SessionTask,
)
from deskpod.tokens import token_sha256
from hostile_daemon import HostileDaemon
from running_service import free_port

pytestmark = pytest.mark.timeout(60)

TOKEN = "t" * 32
APPROVER = "a" * 32


def _task() -> SessionTask:
    return SessionTask.model_validate({"name": "mcp", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                                       "success": {"url_matches": NO_SUCCESS_CHECK, "timeout_s": 0.2}})


@contextlib.asynccontextmanager
async def _session(daemon: HostileDaemon, tmp_path: Path) -> AsyncIterator[tuple[Client, ControllerClient]]:
    """An MCP client whose clicks need a confirmation, and an approver connection."""
    source = GivenSandbox(daemon.url, TOKEN)
    config = McpConfig(_task(), source.lease, source.release, policy=Policy(confirm_actions=["click"]),
                       audit_dir=tmp_path)
    async with embedded_controller(config, EmbeddedController(free_port(), token_sha256(APPROVER), str(tmp_path))):
        async with await ControllerClient.connect(config.controller_url, APPROVER, role="approver") as human:
            async with Client(build_server(config)) as client:
                yield client, human


def _clicks(daemon: HostileDaemon) -> int:
    return sum(1 for r in daemon.requests if r.get("type") == "act"
               for a in r.get("actions", []) if a.get("type") == "click")


async def _next(human: ControllerClient, kind: type) -> Any:
    async for notice in human.events():
        if isinstance(notice, kind):
            return notice
    raise AssertionError(f"no {kind.__name__}")


def test_a_cancelled_call_withdraws_its_card_and_action_and_the_next_call_answers_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with _session(daemon, tmp_path) as (client, human):
                await client.call_tool("screenshot", {})
                asked = asyncio.create_task(_next(human, ServiceConfirmationRequired))
                with pytest.raises(Exception) as cancelled:  # the client's timeout: it sends notifications/cancelled
                    await client.call_tool("left_click", {"coordinate": [10, 10]}, read_timeout_seconds=2.0)
                card = await asyncio.wait_for(asked, 10)
                withdrawn = await asyncio.wait_for(_next(human, ServiceQuestionWithdrawn), 10)
                started = time.monotonic()
                after = await client.call_tool("screenshot", {})
                waited = time.monotonic() - started
                await human.confirm(card.request["id"], True, card.request["digest"])
                late = await asyncio.wait_for(_next(human, ServiceError), 10)
                await asyncio.sleep(0.5)
                return cancelled.value, card, withdrawn, after, waited, late.error, _clicks(daemon)

    cancelled, card, withdrawn, after, waited, late, clicks = asyncio.run(main())
    assert "timed out" in str(cancelled).lower() or "timeout" in str(cancelled).lower(), cancelled
    assert withdrawn.id == card.request["id"] and "withdrew" in withdrawn.reason
    assert not after.is_error, after  # no "the run was paused" for a call nobody paused
    assert waited < 3.0, waited
    assert late.detail["rule"] == "withdrawn" and "too late" in late.message
    assert clicks == 0  # the withdrawn click never reached the sandbox


def test_a_call_waiting_for_a_person_reports_progress_until_the_approval(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import deskpod.mcp_server.runs as runs

    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))
    monkeypatch.setattr(runs, "PROGRESS_INTERVAL_S", 0.3)
    seen: list[tuple[float, str]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message or ""))

    async def approve(human: ControllerClient) -> None:
        card = await _next(human, ServiceConfirmationRequired)
        await asyncio.sleep(1.5)
        await human.confirm(card.request["id"], True, card.request["digest"])

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with _session(daemon, tmp_path) as (client, human):
                await client.call_tool("screenshot", {})
                person = asyncio.create_task(approve(human))
                result = await client.call_tool("left_click", {"coordinate": [10, 10]}, progress_callback=progress)
                await person
                return result, _clicks(daemon)

    result, clicks = asyncio.run(main())
    assert not result.is_error and clicks == 1
    assert len(seen) >= 3, seen
    assert all("waiting for a person to approve this call's action (L2)" in message and "s left" in message for _, message in seen)
    values = [value for value, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values)  # increasing, as MCP requires


def test_a_cancelled_call_whose_step_then_fails_does_not_fail_the_next_call() -> None:
    """The step of a cancelled call that ends with an error (here the sandbox's) stayed in flight,
    and every later call of the session waited for it and failed with that error. Its error was
    the cancelled call's: the next calls submit their own steps and answer them. The service is a
    fake of :class:`ControllerClient` (the case is the run's bookkeeping, not the wire)."""
    screen = Observation(url="http://demo.test/")

    class Service:
        def __init__(self) -> None:
            self.submits: list[str] = []
            self.withdrawn = asyncio.Event()

        async def submit(self, session: str, actions: list[Any], *, intent: str = "", console: bool = False,
                         network: bool = False) -> ServiceObservation:
            self.submits.append(actions[0]["type"])
            if len(self.submits) == 1:
                await self.withdrawn.wait()
                raise SandboxError("the sandbox went away while the withdrawn step ran")
            return ServiceObservation(id=str(len(self.submits)), session=session, status="ok", observation=screen)

        async def withdraw(self, session: str) -> None:
            self.withdrawn.set()

    async def main() -> Any:
        service = Service()
        run = GuiRun("ws://127.0.0.1:1/v1/controller", TOKEN, SandboxLease("ws://sandbox.test", TOKEN), _task(),
                     session="s1", _client=service)
        run._ready = asyncio.get_running_loop().create_future()
        run._ready.set_result(ServiceObservation(id=None, session="s1", status="ready", observation=screen))
        cancelled = asyncio.create_task(run.step([{"type": "click", "x": 1, "y": 1}]))
        while not service.submits:
            await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        first = await run.step([{"type": "screenshot"}])
        second = await run.step([{"type": "screenshot"}])
        return first, second, service.submits

    first, second, submits = asyncio.run(main())
    assert first.status == "ok" and second.status == "ok"
    assert submits == ["click", "screenshot", "screenshot"]
