"""``ControllerClient`` drives whole ``deskpod serve`` sessions on the integration stack's real sandbox.

The service runs in this process on a loopback port (as in ``test_serve.py``); the
client is the remote service. The policy, confirmations, pauses and verification are
the real ones, on the demo site's payment fixture.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from deskpod import ControllerClient, SyncControllerClient, SyncSandbox
from deskpod.controller.audit_log import verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.service.messages import (
    ServiceConfirmationRequired,
    ServiceFinished,
    ServiceObservation,
    ServicePauseRequired,
)
from deskpod_stack import Stack, page_state
from running_service import running_service

pytestmark = pytest.mark.integration

PAY = {"type": "click", "x": 640, "y": 380}
NOTE = {"type": "click", "x": 640, "y": 560}


APPROVER = secrets.token_urlsafe(32)
"""The approver token: the human's console in these tests."""


def _with_service(tmp_path: Path, body: Callable[[str, str], Awaitable[Any]]) -> Any:
    token = secrets.token_urlsafe(32)

    async def main() -> Any:
        async with running_service(token, tmp_path / "audit", approver_token=APPROVER) as port:
            return await asyncio.wait_for(body(f"ws://127.0.0.1:{port}/v1/controller", token), 150)

    return asyncio.run(main())


def _task(success: dict[str, Any]) -> dict[str, Any]:
    return {"name": "client", "start_url": "http://demo.test/fixtures/pay", "allowed_domains": ["demo.test"],
            "success": {"timeout_s": 3, **success}}


async def _next(client: ControllerClient, kind: type, seen: list[Any]) -> Any:
    async for notice in client.events():
        if isinstance(notice, kind):
            return notice
        seen.append(notice)
    raise AssertionError(f"the connection closed before a {kind.__name__}")


def test_a_client_session_with_a_pause_and_an_approved_confirmation_ends_verified(
    stack: Stack, tmp_path: Path
) -> None:
    async def body(url: str, token: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with await ControllerClient.connect(url, token) as client, \
                await ControllerClient.connect(url, APPROVER, role="approver") as human:
            session = (await client.open(stack.ws_url, stack.token, _task({"page_text_contains": "Payment sent"}))
                       ).session
            out["ready"] = await client.ready(session)
            out["note"] = await client.submit(session, [NOTE])
            await client.pause(session)
            notice = await asyncio.wait_for(_next(human, ServicePauseRequired, []), 60)
            await human.review(notice.notice["id"], "resume")
            step = asyncio.create_task(client.submit(session, [PAY], intent="pay the invoice"))
            ask = await asyncio.wait_for(_next(human, ServiceConfirmationRequired, []), 60)
            out["ask"] = ask.request
            await human.confirm(ask.request["id"], True, ask.request["digest"])
            out["paid"] = await asyncio.wait_for(step, 60)
        return out

    out = _with_service(tmp_path, body)
    assert isinstance(out["ready"], ServiceObservation) and out["ready"].status == "ready"
    assert out["ready"].observation.url == "http://demo.test/fixtures/pay"
    assert isinstance(out["note"], ServiceObservation) and out["note"].status == "ok"
    assert page_state(out["note"].observation.page_text)["notes"] == 1
    assert out["ask"]["level"] == "L3" and "Pay now" in out["ask"]["summary"]
    assert isinstance(out["paid"], ServiceFinished), out["paid"]
    result = out["paid"].result
    assert result.status == "succeeded", result.reason
    events = [json.loads(line)["event"] for line in Path(result.audit_log).read_text().splitlines()]
    assert "confirmation_requested" in events and "step" in events
    assert verify_log(result.audit_log, result.audit_head, public_key=AuditSigner.load_or_create().public_key).ok


def test_a_denied_confirmation_cancels_the_run_and_nothing_is_paid(stack: Stack, tmp_path: Path) -> None:
    async def body(url: str, token: str) -> Any:
        seen: list[Any] = []
        async with await ControllerClient.connect(url, token) as client, \
                await ControllerClient.connect(url, APPROVER, role="approver") as human:
            session = (await client.open(stack.ws_url, stack.token, _task({"page_text_contains": "Payment sent"}))
                       ).session
            await client.ready(session)
            step = asyncio.create_task(client.submit(session, [PAY]))
            ask = await asyncio.wait_for(_next(human, ServiceConfirmationRequired, seen), 60)
            await human.confirm(ask.request["id"], False, ask.request["digest"])
            return await asyncio.wait_for(step, 60)

    reply = _with_service(tmp_path, body)
    assert isinstance(reply, ServiceFinished) and reply.result.status == "cancelled", reply


def test_the_sync_facade_runs_a_session_and_finish_verifies_the_claim(stack: Stack, tmp_path: Path) -> None:
    """A plain script: the agent adds a note, then claims a payment it never made; the
    controller checks the page and refuses the claim."""

    async def body(url: str, token: str) -> Any:
        def script() -> Any:
            with SyncControllerClient.connect(url, token) as client:
                session = client.open(stack.ws_url, stack.token, _task({"page_text_contains": "Payment sent"})).session
                ready = client.ready(session)
                note = client.submit(session, [NOTE])
                return ready, note, client.finish(session, "the payment is sent")

        return await asyncio.to_thread(script)

    ready, note, summary = _with_service(tmp_path, body)
    assert isinstance(ready, ServiceObservation) and isinstance(note, ServiceObservation) and note.status == "ok"
    assert summary.status == "failed" and "Payment sent" in summary.reason, summary
    assert verify_log(summary.audit_log, summary.audit_head, public_key=AuditSigner.load_or_create().public_key).ok


def test_sync_sandbox_drives_the_daemon_from_a_plain_script(stack: Stack) -> None:
    from deskpod.protocol import ObserveOptions
    from deskpod_stack import with_client

    with SyncSandbox.open(stack.ws_url, stack.token) as sandbox:
        loaded = sandbox.navigate("http://demo.test/fixtures/pay")
        sandbox.click(NOTE["x"], NOTE["y"])
        png = sandbox.screenshot()

    async def notes(client: Any) -> int:
        observation = await client.act([], ObserveOptions(screenshot=False, page_text=True))
        return int(page_state(observation.page_text)["notes"])

    assert loaded.url == "http://demo.test/fixtures/pay"
    assert png.startswith(b"\x89PNG")
    assert with_client(stack, notes) == 1
