"""What the console's connections receive: session views in the run's order, and ``deskpod run --service``.

The real service on loopback; the sandbox is the well-behaved test daemon of
:mod:`hostile_daemon`. A console connection (approver or viewer role, through the
service's handler) must see each session's task, state and page, and see a question
only after the view that says the run waits for it: the page drops a card when a later
view says the run has moved on, so an out-of-order view would drop a live question.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from running_service import running_service
from websockets.asyncio.client import connect

from deskpod.cli.service_run import run_via_service
from deskpod.controller.confirm import ActionSubject, ConfirmationRequest, TerminalChannel
from deskpod.controller.task import TaskSpec

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43
APPROVER = "a" * 43
WAIT = {"type": "wait", "seconds": 0}
TASK = {"name": "relay", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "limits": {"action_timeout_s": 2, "max_wall_time_s": 30},
        "success": {"url_matches": "^http://demo\\.test/never$", "timeout_s": 1}}


async def _next(ws: Any, kind: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        seen.append(message)
        if message["type"] == kind:
            return message


def test_a_console_sees_each_view_before_the_question_it_leads_to(tmp_path: Path) -> None:
    async def main(daemon: HostileDaemon) -> list[dict[str, Any]]:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER) as port:
            url = f"ws://127.0.0.1:{port}/v1/controller"
            async with connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, proxy=None) as agent, \
                    connect(url, additional_headers={"Authorization": f"Bearer {APPROVER}"}, proxy=None) as human:
                mine: list[dict[str, Any]] = []
                await agent.send(json.dumps({"type": "open", "id": "o", "task": TASK,
                                             "sandbox": {"url": daemon.url, "token": "t" * 43}}))
                session = (await _next(agent, "opened", mine))["session"]
                await _next(agent, "observation", mine)
                await agent.send(json.dumps({"type": "submit", "id": "s", "session": session, "actions": [WAIT],
                                             "risk": "L3", "intent": "pay"}))
                seen: list[dict[str, Any]] = []
                ask = await _next(human, "confirmation_required", seen)
                await human.send(json.dumps({"type": "confirm", "id": "c", "request_id": ask["request"]["id"],
                                             "approve": False, "digest": ask["request"]["digest"]}))
                await _next(agent, "finished", mine)
                while not (seen[-1]["type"] == "session" and seen[-1]["state"] == "cancelled"):
                    seen.append(json.loads(await asyncio.wait_for(human.recv(), 20)))
                return seen

    with HostileDaemon() as daemon:
        seen = asyncio.run(main(daemon))
    views = [m for m in seen if m["type"] == "session"]
    assert views[0]["task"] == "relay" and views[0]["screen"]["width"] > 0
    assert any(v["url"] == "http://demo.test/" for v in views)
    ask = next(i for i, m in enumerate(seen) if m["type"] == "confirmation_required")
    before = [m for m in seen[:ask] if m["type"] == "session"]
    assert before[-1]["state"] == "awaiting_confirmation", [v["state"] for v in views]
    assert views[-1]["state"] == "cancelled"


def test_deskpod_run_service_plays_the_steps_as_a_session_of_the_service(tmp_path: Path) -> None:
    move = {"type": "move", "x": 5, "y": 5}  # a step (a wait only looks: no step)
    task = TaskSpec.model_validate({**TASK, "steps": [{"actions": [move]}, {"actions": [move]}]})

    async def main(daemon: HostileDaemon) -> Any:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER) as port:
            return await run_via_service(task, f"ws://127.0.0.1:{port}/v1/controller", TOKEN, daemon.url, "t" * 43)

    with HostileDaemon() as daemon:
        summary = asyncio.run(main(daemon))
        acts = [r for r in daemon.requests if r.get("type") == "act" and [a["type"] for a in r["actions"]] == ["move"]]
    assert summary.steps == 2 and len(acts) == 2
    assert summary.status == "failed" and Path(summary.audit_log).parent == tmp_path / "audit"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_terminal_prompt_points_at_the_console_and_writes_no_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    request = ConfirmationRequest("q1", "run-1", 1, "click Pay now", ActionSubject(
        {"type": "click", "x": 1, "y": 2}, None, "http://demo.test/", "png", "iVBORw0KGgo=", "0" * 64),
        "L3", ("pays",), False, "d" * 64, 30.0)
    out = io.StringIO()
    answer = asyncio.run(TerminalChannel(_Tty("n\n"), out).confirm(request))
    assert answer is not None and answer.approved is False
    assert "deskpod run --service" in out.getvalue() and "/console/" in out.getvalue()
    assert list(tmp_path.iterdir()) == []
