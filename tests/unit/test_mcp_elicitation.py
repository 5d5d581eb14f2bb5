"""``deskpod mcp``'s confirmations tried by the MCP client as an attacker: the client runs the
model, so whatever it answers to an MCP elicitation is the model's word, not a person's.

The MCP SDK's in-process client (with an elicitation callback standing in for the model's side)
calls the tools; the embedded controller service runs the session; the daemon is
:class:`hostile_daemon.HostileDaemon` on loopback, so the tests see exactly which actions
reached the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client

from deskpod import ControllerClient
from deskpod.controller.policy.policy_file import Policy
from deskpod.mcp_server.app import EmbeddedController, embedded_controller
from deskpod.mcp_server.server import build_server
from deskpod.mcp_server.sessions import McpConfig
from deskpod.mcp_server.sources import GivenSandbox
from deskpod.service.messages import ServiceConfirmationRequired
from deskpod.tokens import token_sha256
from hostile_daemon import HostileDaemon
from mcp_support import TOKEN, acts, audit_records, gui_task
from mcp_support import text as text_of
from running_service import free_port

APPROVER = "h" * 32


@contextlib.asynccontextmanager
async def _session(daemon: HostileDaemon, tmp_path: Path, policy: Policy, answer: Any, *,
                   elicit: bool) -> AsyncIterator[tuple[Client, McpConfig]]:
    """An MCP client whose elicitation callback is ``answer``, of a session of ``deskpod mcp``
    (``--approve-by-elicitation`` when ``elicit``); a human approver may connect with :data:`APPROVER`."""
    source = GivenSandbox(daemon.url, TOKEN)
    config = McpConfig(gui_task(), source.lease, source.release, policy=policy, audit_dir=tmp_path,
                       elicit_approvals=elicit)
    async with embedded_controller(config, EmbeddedController(free_port(), token_sha256(APPROVER), str(tmp_path))):
        async with Client(build_server(config), mode="legacy", elicitation_callback=answer) as client:
            yield client, config


async def _human_denies(url: str, asked: list[Any]) -> None:
    """The operator's approver: deny the first confirmation."""
    async with await ControllerClient.connect(url, APPROVER, role="approver") as human:
        async for notice in human.events():
            if isinstance(notice, ServiceConfirmationRequired):
                asked.append(notice.request)
                await human.confirm(notice.request["id"], False, notice.request["digest"])
                return


def test_a_client_that_approves_every_elicitation_is_never_asked_and_the_human_decides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default (no ``--approve-by-elicitation``) a confirmation goes to the operator's approver
    only: the MCP client, whose callback says yes to anything, is not asked, and the approver's
    denial stands."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))
    elicited: list[str] = []

    async def yes(context: Any, params: Any) -> Any:
        elicited.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with _session(daemon, tmp_path, Policy(confirm_actions=["click"]), yes, elicit=False) as (client, config):
                await client.call_tool("screenshot", {})
                asked: list[Any] = []
                human = asyncio.create_task(_human_denies(config.controller_url, asked))
                result = await asyncio.wait_for(client.call_tool("left_click", {"coordinate": [10, 10]}), 30)
                await asyncio.wait_for(human, 10)
                return result, asked, acts(daemon)

    result, asked, done = asyncio.run(main())
    assert elicited == [] and len(asked) == 1
    assert result.is_error and not any(a["type"] == "click" for a in done)
    answers = [r for r in audit_records(tmp_path) if r.get("event") == "confirmation_answer"]
    assert [r["outcome"] for r in answers] == ["denied"] and not any(r.get("self_approval") for r in answers)


def test_an_elicitation_answered_after_its_confirmation_timed_out_approves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the opt-in (``allow_self_approval`` and ``--approve-by-elicitation``) the client's
    answer is the approval, but only within the confirmation's time: an accept that comes after
    it ran out is refused by the service, and the action never runs."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))
    late: list[str] = []

    async def late_yes(context: Any, params: Any) -> Any:
        await asyncio.sleep(1.5)
        late.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    policy = Policy(confirm_actions=["click"], allow_self_approval=True, confirmation_timeout_s=0.6)

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with _session(daemon, tmp_path, policy, late_yes, elicit=True) as (client, _):
                await client.call_tool("screenshot", {})
                result = await asyncio.wait_for(client.call_tool("left_click", {"coordinate": [10, 10]}), 30)
                await asyncio.sleep(1.5)  # the late accept arrives, and is sent on
                after = await client.call_tool("screenshot", {})
                return result, after, acts(daemon)

    result, after, done = asyncio.run(main())
    assert late, "the client was asked"
    assert result.is_error, text_of(result)
    assert not any(a["type"] == "click" for a in done), done
    answers = [r for r in audit_records(tmp_path) if r.get("event") == "confirmation_answer"]
    assert answers and all(r["outcome"] != "approved" for r in answers), answers
    assert after.is_error and "has ended" in text_of(after)


def test_an_accept_held_back_for_a_withdrawn_click_does_not_approve_the_next_action(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the opt-in, the client asks to click, lets the call time out (its card is withdrawn)
    while holding back its accept, then asks for another click and sends the held accept while the
    second question is open, declining that one: the accept was for the first question only, so
    neither click runs."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))
    asked: list[str] = []
    second_asked = asyncio.Event()

    async def held_back(context: Any, params: Any) -> Any:
        asked.append(params.message)
        if len(asked) == 1:
            await second_asked.wait()
            return types.ElicitResult(action="accept", content={"approve": True})
        second_asked.set()
        await asyncio.sleep(1.0)  # the first question's accept goes first
        return types.ElicitResult(action="decline")

    policy = Policy(confirm_actions=["click"], allow_self_approval=True)

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with _session(daemon, tmp_path, policy, held_back, elicit=True) as (client, _):
                await client.call_tool("screenshot", {})
                with pytest.raises(Exception) as timed_out:  # the client's timeout: notifications/cancelled
                    await client.call_tool("left_click", {"coordinate": [10, 10]}, read_timeout_seconds=2.0)
                assert "time" in str(timed_out.value).lower(), timed_out.value
                second = await asyncio.wait_for(client.call_tool("left_click", {"coordinate": [200, 150]}), 30)
                await asyncio.sleep(0.5)
                return second, acts(daemon)

    second, done = asyncio.run(main())
    assert len(asked) == 2
    assert second.is_error, text_of(second)
    assert not any(a["type"] == "click" for a in done), done
    answers = [r for r in audit_records(tmp_path) if r.get("event") == "confirmation_answer"]
    assert answers and all(r["outcome"] != "approved" for r in answers), answers
