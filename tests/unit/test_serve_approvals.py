"""``deskpod serve``: approvals come from a principal other than the agent, one session per sandbox.

Found by a security review of the controller: the connection that submitted an action
also answered its L2/L3 confirmation (the agent approved itself), and the
one-session-per-sandbox rule was bypassed by spelling the same sandbox's URL
differently. Each test plays the agent's side as an attacker would, against the real
service on loopback; the sandbox is the test daemon of :mod:`hostile_daemon`
(well-behaved here), which greets with its ``sandbox_id`` like the real one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from running_service import running_service

from deskpod import ControllerClient
from deskpod.controller.policy.policy_file import Policy
from deskpod.service.server.service_state import ControllerService
from deskpod.errors import BusyError, InvalidRequestError, UnauthorizedError
from deskpod.service.messages import ServiceConfirmationRequired, ServiceError, ServiceFinished, ServiceObservation

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43
APPROVER = "a" * 43
WAIT = {"type": "wait", "seconds": 0}
TASK = {"name": "approvals", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "limits": {"action_timeout_s": 2, "max_wall_time_s": 30},
        "success": {"url_matches": "^http://demo\\.test/never$", "timeout_s": 1}}


def with_service(tmp_path: Path, body: Callable[[str], Awaitable[Any]], policy: Policy | None = None) -> Any:
    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER, policy=policy) as port:
            return await asyncio.wait_for(body(f"ws://127.0.0.1:{port}/v1/controller"), 50)

    return asyncio.run(main())


async def next_of(client: ControllerClient, kind: type) -> Any:
    async for notice in client.events():
        if isinstance(notice, kind):
            return notice
    raise AssertionError(f"no {kind.__name__}")


def records(tmp_path: Path) -> list[dict[str, Any]]:
    [log] = (tmp_path / "audit").glob("run-*.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()]


def executed(daemon: HostileDaemon) -> int:
    """How many ``act`` requests carried the agent's (waiting) action."""
    return sum(1 for r in daemon.requests if r.get("type") == "act" and WAIT in r.get("actions", []))


def test_the_agent_cannot_answer_its_own_confirmation_an_approver_does(tmp_path: Path) -> None:
    """The agent submits an L3 step and approves it with the right digest: refused, nothing runs;
    an approver that connects only afterwards still gets the question, and its answer counts."""

    async def body(url: str) -> dict[str, Any]:
        async with await ControllerClient.connect(url, TOKEN) as agent:
            session = (await agent.open(daemon.url, "t" * 43, TASK)).session
            await agent.ready(session)
            step = asyncio.create_task(agent.submit(session, [WAIT], risk="L3", intent="pay"))
            ask = await asyncio.wait_for(next_of(agent, ServiceConfirmationRequired), 20)
            await agent.confirm(ask.request["id"], True, ask.request["digest"])
            refused = await asyncio.wait_for(next_of(agent, ServiceError), 20)
            await asyncio.sleep(0.3)
            before = executed(daemon)
            async with await ControllerClient.connect(url, APPROVER, role="approver") as approver:
                late = await asyncio.wait_for(next_of(approver, ServiceConfirmationRequired), 20)
                await approver.confirm(late.request["id"], False, late.request["digest"])
                denied = await asyncio.wait_for(step, 20)
        return {"ask": ask, "refused": refused, "before": before, "late": late, "denied": denied}

    with HostileDaemon() as daemon:
        out = with_service(tmp_path, body)
    assert out["ask"].approver == "approver"
    assert out["refused"].error.code == "unauthorized" and "approver" in out["refused"].error.message
    assert out["before"] == 0, "the agent's own approval executed its action"
    assert out["late"].request["id"] == out["ask"].request["id"]
    assert isinstance(out["denied"], ServiceFinished) and out["denied"].result.status == "cancelled"
    answers = [r for r in records(tmp_path) if r["event"] == "confirmation_answer"]
    assert [(a["outcome"], a["by"], a["self_approval"]) for a in answers] == [("denied", "serve:approver", False)]
    assert executed(daemon) == 0


def test_an_approver_connection_only_answers(tmp_path: Path) -> None:
    async def body(url: str) -> list[type[Exception]]:
        caught = []
        async with await ControllerClient.connect(url, APPROVER, role="approver") as approver:
            for attempt in (approver.open(daemon.url, "t" * 43, TASK), approver.cancel("session-x")):
                try:
                    await attempt
                except Exception as exc:  # noqa: BLE001 - the test collects the types
                    caught.append(type(exc))
        for token, role in ((APPROVER, "agent"), (TOKEN, "approver")):
            try:
                await ControllerClient.connect(url, token, role=role)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001
                caught.append(type(exc))
        return caught

    with HostileDaemon() as daemon:
        assert with_service(tmp_path, body) == [UnauthorizedError] * 4
    with pytest.raises(InvalidRequestError, match="differ"):
        ControllerService("0" * 64, approver_token_sha256="0" * 64)


def test_self_approval_needs_the_operators_policy_and_the_log_says_so(tmp_path: Path) -> None:
    async def refused(url: str) -> Exception | None:
        async with await ControllerClient.connect(url, TOKEN) as agent:
            try:
                await agent.open(daemon.url, "t" * 43, TASK, approver="self")
            except UnauthorizedError as exc:
                return exc
            return None

    async def unattended(url: str) -> Any:
        async with await ControllerClient.connect(url, TOKEN) as agent:
            session = (await agent.open(daemon.url, "t" * 43, TASK, approver="self")).session
            await agent.ready(session)
            step = asyncio.create_task(agent.submit(session, [WAIT], risk="L3", intent="pay"))
            ask = await asyncio.wait_for(next_of(agent, ServiceConfirmationRequired), 20)
            await agent.confirm(ask.request["id"], True, ask.request["digest"])
            return ask, await asyncio.wait_for(step, 20)

    with HostileDaemon() as daemon:
        assert "allow_self_approval" in str(with_service(tmp_path / "strict", refused))
        ask, reply = with_service(tmp_path, unattended, Policy(allow_self_approval=True))
    assert ask.approver == "self"
    assert isinstance(reply, ServiceObservation) and reply.status == "ok"
    confirmation = [r for r in records(tmp_path) if r["event"].startswith("confirmation_")]
    assert [r["event"] for r in confirmation] == ["confirmation_requested", "confirmation_answer"]
    assert all(r["self_approval"] is True for r in confirmation) and confirmation[1]["by"] == "serve:self"


def test_one_sandbox_has_one_session_whatever_url_reaches_it(tmp_path: Path) -> None:
    async def body(url: str) -> list[Any]:
        port = daemon.url.split(":")[2].split("/")[0]
        spellings = [daemon.url, f"{daemon.url}?x=1", f"ws://127.0.0.1:0{port}/v1/ws",
                     f"ws://localhost:{port}/v1/ws", f"ws://LOCALHOST:{port}/v1/ws"]
        outcomes: list[Any] = []
        async with await ControllerClient.connect(url, TOKEN) as first, \
                await ControllerClient.connect(url, TOKEN) as second:
            session = (await first.open(daemon.url, "t" * 43, TASK)).session
            await first.ready(session)
            for spelling in spellings:
                try:
                    outcomes.append(await second.open(spelling, "t" * 43, TASK))
                except BusyError as exc:
                    outcomes.append(exc.detail.get("sandbox_id"))
            await first.cancel(session)
            await asyncio.wait_for(next_of(first, ServiceFinished), 20)
            reopened = await second.open(f"{daemon.url}?x=1", "t" * 43, TASK)
            try:
                await first.reset(session)
            except BusyError as exc:
                outcomes.append(exc)
            outcomes.append(reopened)
        return outcomes

    with HostileDaemon() as daemon:
        outcomes = with_service(tmp_path, body)
    assert outcomes[:5] == [daemon.sandbox_id] * 5, outcomes
    assert isinstance(outcomes[5], BusyError), "a finished session reset the sandbox under the next session"
    assert outcomes[6].type == "opened"


GRANTING = {**TASK, "permissions": {"geolocation": {"allow": True, "position": {"lat": 48.8584, "lon": 2.2945}},
                                    "notifications": "deny"}}
"""A session's task that allows the browser's location (main dropped a task's permissions on the way
to a session, so a task file run through ``deskpod serve`` or ``deskpod mcp`` had none)."""


def test_a_sessions_task_grants_what_the_operators_policy_lets_sessions_grant(tmp_path: Path) -> None:
    def opening(task: dict[str, Any], policy: Policy | None = None) -> Callable[[str], Awaitable[Any]]:
        async def body(url: str) -> Any:
            async with await ControllerClient.connect(url, TOKEN) as agent:
                try:
                    session = (await agent.open(daemon.url, "t" * 43, task, policy=policy)).session
                    await agent.ready(session)
                except UnauthorizedError as exc:
                    return exc
                return session
        return body

    def grants() -> list[Any]:
        return [r["grants"] for r in daemon.requests if r.get("type") == "permissions"]

    with HostileDaemon() as daemon:
        refused = with_service(tmp_path / "strict", opening(GRANTING))
        assert isinstance(refused, UnauthorizedError) and refused.detail["rule"] == "session_permissions", refused
        widened = with_service(tmp_path / "own", opening(GRANTING, Policy(session_permissions=["geolocation"])))
        assert isinstance(widened, UnauthorizedError), "a client's own policy cannot widen the operator's"
        clipboard = with_service(tmp_path / "clip", opening({**TASK, "allow_clipboard_read": True}))
        assert isinstance(clipboard, UnauthorizedError) and clipboard.detail["rule"] == "session_clipboard_read"
        assert grants() == [] and executed(daemon) == 0
        opened = with_service(tmp_path, opening(GRANTING), Policy(session_permissions=["geolocation"]))
    assert isinstance(opened, str), opened
    assert grants()[0] == {"granted": ["geolocation"], "position": {"lat": 48.8584, "lon": 2.2945, "accuracy_m": 50.0}}
