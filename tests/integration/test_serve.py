"""``deskpod serve``: a remote service drives a real sandbox through the controller's websocket API.

The service runs in this process on a loopback port; the remote service is a plain
``websockets`` client. Sessions run on the integration stack's real sandbox, so the
policy, confirmations and events are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deskpod_stack import Stack, page_state
from running_service import running_service
from deskpod.controller.audit_log import verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.service.server.metrics_settings import MetricsSettings
from deskpod.tokens import token_sha256

pytestmark = pytest.mark.integration

PAY = {"type": "click", "x": 640, "y": 380}
NOTE = {"type": "click", "x": 640, "y": 560}
APPROVER = secrets.token_urlsafe(32)
"""The approver connections' token: the human's console in these tests."""


def with_service(tmp_path: Path, body: Callable[[str, str], Awaitable[Any]]) -> Any:
    """Start a service with a fresh agent token (and :data:`APPROVER`); run ``body(url, token)``; stop it."""
    token = secrets.token_urlsafe(32)

    async def main() -> Any:
        async with running_service(token, tmp_path / "audit", approver_token=APPROVER) as port:
            return await asyncio.wait_for(body(f"ws://127.0.0.1:{port}/v1/controller", token), 120)

    return asyncio.run(main())


def approver(url: str) -> Any:
    """A connection of the human who approves (the approver token)."""
    return connect(url, additional_headers={"Authorization": f"Bearer {APPROVER}"})


async def next_of(ws: Any, kind: str, seen: list[dict] | None = None) -> dict:
    """The next message of ``type`` ``kind``; other messages are kept in ``seen``."""
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if message["type"] == kind:
            return message
        if seen is not None:
            seen.append(message)


def open_message(stack: Stack, success: dict) -> dict:
    return {"type": "open", "id": "o1", "sandbox": {"url": stack.ws_url, "token": stack.token},
            "task": {"name": "remote", "start_url": "http://demo.test/fixtures/pay", "allowed_domains": ["demo.test"],
                     "success": {"timeout_s": 3, **success}}}


def test_a_remote_agent_submits_actions_and_answers_a_bound_confirmation(stack: Stack, tmp_path: Path) -> None:
    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws, \
                approver(url) as human:
            seen: list[dict] = []
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "Payment sent"})))
            session = (await next_of(ws, "opened"))["session"]
            ready = await next_of(ws, "observation", seen)
            assert ready["status"] == "ready" and ready["observation"]["url"] == "http://demo.test/fixtures/pay"
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [NOTE]}))
            after = await next_of(ws, "observation", seen)
            assert after["status"] == "ok" and page_state(after["observation"]["page_text"])["notes"] == 1
            await ws.send(json.dumps({"type": "submit", "id": "s2", "session": session, "actions": [PAY]}))
            ask = (await next_of(human, "confirmation_required"))["request"]
            assert ask["level"] == "L3" and "Pay now" in ask["summary"] and ask["screenshot_data"]
            await human.send(json.dumps({"type": "confirm", "id": "c0", "request_id": ask["id"], "approve": True,
                                         "digest": "0" * 64}))
            finished = await next_of(ws, "finished", seen)
            events = [m["record"]["event"] for m in seen if m["type"] == "event"]
            return {"finished": finished, "events": events, "ask": ask}

    outcome = with_service(tmp_path, body)
    result = outcome["finished"]["result"]
    assert result["status"] == "cancelled" and "wrong_digest" in result["reason"]
    assert "confirmation_requested" in outcome["events"] and "step" in outcome["events"]
    assert verify_log(result["audit_log"], result["audit_head"], public_key=AuditSigner.load_or_create().public_key).ok


def test_an_approval_with_the_requests_digest_executes_and_the_run_is_verified(stack: Stack, tmp_path: Path) -> None:
    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws, \
                approver(url) as human:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "Payment sent"})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            ask = (await next_of(human, "confirmation_required"))["request"]
            await human.send(json.dumps({"type": "confirm", "id": "c1", "request_id": ask["id"], "approve": True,
                                         "digest": ask["digest"]}))
            return (await next_of(ws, "finished"))["result"]

    result = with_service(tmp_path, body)
    assert result["status"] == "succeeded", result["reason"]


def test_bad_input_gets_typed_errors_and_the_connection_stays_usable(stack: Stack, tmp_path: Path) -> None:
    async def body(url: str, token: str) -> list[dict]:
        replies = []
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            for bad in ["not json", "[]", json.dumps({"type": "teleport", "id": "x"}),
                        json.dumps({"type": "submit", "id": "y", "session": "nope", "actions": [NOTE]}),
                        json.dumps({"type": "confirm", "id": "z", "request_id": "r", "approve": True,
                                    "digest": "0" * 64}),
                        json.dumps({"type": "open", "id": "w", "sandbox": {"url": "http://x", "token": "t"}})]:
                await ws.send(bad)
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": '"notes":1'})))
            replies.append(await next_of(ws, "opened"))
            session = replies[-1]["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "s", "session": session, "actions": [NOTE]}))
            replies.append(await next_of(ws, "finished"))
        return replies

    replies = with_service(tmp_path, body)
    assert [r["type"] for r in replies[:6]] == ["error"] * 6
    assert all(r["error"]["code"] == "invalid_request" for r in replies[:6])
    assert replies[3]["id"] == "y" and "no session" in replies[3]["error"]["message"]
    assert replies[-1]["result"]["status"] == "succeeded"


def test_the_service_refuses_connections_without_the_token_or_from_a_browser(tmp_path: Path) -> None:
    async def body(url: str, token: str) -> list[int]:
        codes = []
        for headers in ({}, {"Authorization": "Bearer wrong"},
                        {"Authorization": f"Bearer {token}", "Origin": "http://evil.test"}):
            try:
                async with connect(url, additional_headers=headers):
                    codes.append(101)
            except InvalidStatus as exc:
                codes.append(exc.response.status_code)
        return codes

    assert with_service(tmp_path, body) == [401, 401, 403]


def test_closing_the_connection_cancels_its_session(stack: Stack, tmp_path: Path) -> None:
    """A pending confirmation is a denial when the remote service goes away: nothing is paid."""

    async def body(url: str, token: str) -> None:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "Payment sent"})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            await next_of(ws, "confirmation_required")
        await asyncio.sleep(1)

    with_service(tmp_path, body)
    logs = sorted((tmp_path / "audit").glob("run-*.jsonl"))
    finished = json.loads(logs[-1].read_text().splitlines()[-1])
    assert finished["event"] == "run_finished" and finished["status"] == "cancelled"


def test_a_run_is_paused_handed_to_a_human_and_resumed(stack: Stack, tmp_path: Path) -> None:
    """The remote service pauses the run while the agent plans, a human takes over
    and drives the sandbox through the run's own executor, then hands it back: the agent's step,
    planned on a screen that no longer exists, is discarded, and the run is verified on what the
    human did."""

    async def body(url: str, token: str) -> tuple[list[dict], dict]:
        notices: list[dict] = []
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws, \
                approver(url) as console:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": '"notes":2'})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "pause", "id": "p", "session": session}))
            notice = (await next_of(console, "pause_required"))["notice"]
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [NOTE]}))
            notices.append(notice)
            await ws.send(json.dumps({"type": "review", "id": "r0", "pause_id": notice["id"], "answer": "resume"}))
            notices.append((await next_of(ws, "error"))["error"])
            await console.send(json.dumps({"type": "review", "id": "r1", "pause_id": notice["id"],
                                           "answer": "takeover"}))
            notices.append(await next_of(console, "takeover_state"))
            for n, action in enumerate([NOTE, {"type": "wait", "seconds": 0.6}, NOTE]):
                await console.send(json.dumps({"type": "human_input", "id": f"h{n}", "session": session,
                                               "action": action}))
                assert (await next_of(console, "ok"))["id"] == f"h{n}"
            await console.send(json.dumps({"type": "handback", "id": "b", "session": session}))
            return notices, (await next_of(ws, "finished"))["result"]

    notices, result = with_service(tmp_path, body)
    refused = notices.pop(1)
    assert refused["code"] == "unauthorized", "the agent's connection resumed its own pause"
    assert notices[0]["kind"] == "requested" and notices[1]["active"] and notices[1]["by"] == "approver"
    assert result["status"] == "succeeded", result["reason"]
    log = [json.loads(line) for line in Path(result["audit_log"]).read_text().splitlines()]
    assert [e["event"] for e in log if e["event"] in ("step", "proposal_discarded")] == ["proposal_discarded"]
    assert [e["actor"] for e in log if e["event"] == "human_input"] == ["human:approver"] * 3


def test_a_session_resets_its_sandbox_and_the_new_token_comes_back_only_to_the_caller(
    stack: Stack, tmp_path: Path
) -> None:
    """Between tasks the service resets the session's sandbox in place: the token rotates,
    the old one is refused, and the next run on the new one starts clean."""
    from deskpod.client import SandboxClient
    from deskpod.errors import UnauthorizedError

    old = stack.token

    async def identity(token: str) -> str:
        client = await SandboxClient.connect(stack.ws_url, token, timeout_s=30)
        try:
            return client.hello.sandbox_id
        finally:
            await client.close()

    before = asyncio.run(identity(old))

    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": '"notes":1'})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "reset", "id": "early", "session": session}))
            early = await next_of(ws, "error")
            await ws.send(json.dumps({"type": "submit", "id": "s", "session": session, "actions": [NOTE]}))
            assert (await next_of(ws, "finished"))["result"]["status"] == "succeeded"
            await ws.send(json.dumps({"type": "reset", "id": "r", "session": session,
                                      "start_url": "http://demo.test/fixtures/pay"}))
            done = await next_of(ws, "reset_done")
            stack.token = done["token"]
            return {"early": early, "done": done}

    outcome = with_service(tmp_path, body)
    assert "still going" in outcome["early"]["error"]["message"]
    assert outcome["done"]["url"] == "http://demo.test/fixtures/pay" and outcome["done"]["token"] != old
    with pytest.raises(UnauthorizedError):
        asyncio.run(SandboxClient.connect(stack.ws_url, old, timeout_s=10))
    assert asyncio.run(identity(stack.token)) == before, "an in-place reset keeps the sandbox's identity"

    async def fresh(client: Any) -> dict:
        from deskpod.protocol import ObserveOptions

        return page_state((await client.act([], ObserveOptions(screenshot=False, page_text=True))).page_text)

    from deskpod_stack import with_client

    assert with_client(stack, fresh)["notes"] == 0


def test_a_session_cannot_loosen_the_operators_policy_and_misuse_gets_typed_errors(
    stack: Stack, tmp_path: Path
) -> None:
    """Found by a fresh-user trial: a client's policy replaced the operator's (confirmations off),
    a submit during a pending confirmation was queued silently, a lone surrogate in an id dropped the
    connection, and two sessions could drive one sandbox."""

    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws, \
                approver(url) as human:
            loose = open_message(stack, {"page_text_contains": "Payment sent"})
            loose["policy"] = {"confirm_levels": [], "pause_on_injection": False}
            await ws.send(json.dumps(loose))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "x"}) | {"id": "o2"}))
            second = await next_of(ws, "error")
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            ask = (await next_of(ws, "confirmation_required"))["request"]
            await ws.send(json.dumps({"type": "submit", "id": "s2", "session": session, "actions": [NOTE]}))
            queued = await next_of(ws, "error")
            await ws.send('{"type": "pause", "id": "\\ud800", "session": "s"}')
            surrogate = await next_of(ws, "error")
            await human.send(json.dumps({"type": "confirm", "id": "c", "request_id": ask["id"], "approve": False,
                                         "digest": ask["digest"]}))
            return {"second": second, "ask": ask, "queued": queued, "surrogate": surrogate,
                    "finished": (await next_of(ws, "finished"))["result"]}

    out = with_service(tmp_path, body)
    assert out["second"]["id"] == "o2" and out["second"]["error"]["code"] == "busy"
    assert out["ask"]["level"] == "L3", "the operator's confirmation levels still apply"
    assert out["queued"]["id"] == "s2" and out["queued"]["error"]["code"] == "busy"
    assert out["surrogate"]["error"]["code"] == "invalid_request"
    assert out["finished"]["status"] == "cancelled" and out["finished"]["steps"] == 1


def test_cancel_while_the_session_waits_for_a_proposal_ends_the_run_at_once(stack: Stack, tmp_path: Path) -> None:
    """Found by a fresh-user trial: the cancel waited for the next submit. (Each wait here gives up
    after 60 s, well inside the run's 300 s wall time.)"""

    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "never"})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
            return (await next_of(ws, "finished"))["result"]

    result = with_service(tmp_path, body)
    assert result["status"] == "cancelled" and "cancelled by request" in result["reason"]


def test_the_agents_connection_cannot_approve_its_own_payment(stack: Stack, tmp_path: Path) -> None:
    """Found by a security review: the connection that submitted "Pay now" answered its own L3
    confirmation with the request's digest and the payment went through. Now that answer is
    refused, nothing is paid, and only the approver's denial ends the run."""
    from deskpod.protocol import ObserveOptions
    from deskpod_stack import with_client

    async def body(url: str, token: str) -> dict:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "Payment sent"})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            ask = await next_of(ws, "confirmation_required")
            await ws.send(json.dumps({"type": "confirm", "id": "self", "request_id": ask["request"]["id"],
                                      "approve": True, "digest": ask["request"]["digest"]}))
            refused = await next_of(ws, "error")
            await asyncio.sleep(1.5)
            async with approver(url) as human:
                late = (await next_of(human, "confirmation_required"))["request"]
                await human.send(json.dumps({"type": "confirm", "id": "h", "request_id": late["id"],
                                             "approve": False, "digest": late["digest"]}))
                return {"ask": ask, "refused": refused, "finished": (await next_of(ws, "finished"))["result"]}

    async def state(client: Any) -> dict:
        return page_state((await client.act([], ObserveOptions(screenshot=False, page_text=True))).page_text)

    out = with_service(tmp_path, body)
    assert out["ask"]["approver"] == "approver"
    assert out["refused"]["id"] == "self" and out["refused"]["error"]["code"] == "unauthorized"
    assert out["finished"]["status"] == "cancelled" and "denied" in out["finished"]["reason"]
    assert with_client(stack, state)["paid"] == 0
    assert verify_log(out["finished"]["audit_log"], out["finished"]["audit_head"],
                      public_key=AuditSigner.load_or_create().public_key).ok


def test_one_sandbox_is_one_session_however_its_url_is_spelled(stack: Stack, tmp_path: Path) -> None:
    """Found by a security review: a second session opened on the same sandbox as ``URL?x=1`` or
    with the port ``08765``. The service knows the sandbox by its daemon's ``sandbox_id``."""
    host = stack.ws_url.split("//")[1].split(":")[0]

    async def body(url: str, token: str) -> list[dict]:
        replies = []
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(open_message(stack, {"page_text_contains": "never"})))
            session = (await next_of(ws, "opened"))["session"]
            await next_of(ws, "observation")
            for n, spelling in enumerate([f"{stack.ws_url}?x=1", f"ws://{host}:08765/v1/ws",
                                          f"ws://{host}:8765/v1/ws?"]):
                other = open_message(stack, {"page_text_contains": "never"}) | {"id": f"o{n + 2}"}
                other["sandbox"] = {"url": spelling, "token": stack.token}
                await ws.send(json.dumps(other))
                replies.append(await next_of(ws, "error"))
            await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
            await next_of(ws, "finished")
        return replies

    replies = with_service(tmp_path, body)
    assert [r["error"]["code"] for r in replies] == ["busy"] * 3, replies
    assert len({r["error"]["detail"]["sandbox_id"] for r in replies}) == 1


SCRAPER = secrets.token_urlsafe(32)
"""The metrics token of :func:`test_the_metrics_move_as_a_run_goes`."""


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` of the service on ``port``, parsed by the Prometheus client's parser, by (name, labels)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
    with opener.open(request, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that carry ``labels``."""
    return sum(v for (n, have), v in found.items() if n == name and set(labels.items()) <= set(have))


def test_the_metrics_move_as_a_run_goes(stack: Stack, tmp_path: Path) -> None:
    """One session through an injection pause, a loop, a navigation and an approved L3 payment,
    then a reset: /metrics (read with the metrics token) moves for each of them."""
    token = secrets.token_urlsafe(32)
    blank = {"type": "click", "x": 640, "y": 700}  # nothing there: the same screen again, a loop

    async def main() -> dict[str, Any]:
        async with running_service(token, tmp_path / "audit", approver_token=APPROVER,
                                   metrics=MetricsSettings(token_sha256=token_sha256(SCRAPER))) as port:
            url = f"ws://127.0.0.1:{port}/v1/controller"
            seen: dict[str, Any] = {"before": await asyncio.to_thread(scrape, port)}
            async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws, \
                    approver(url) as human:
                message = open_message(stack, {"page_text_contains": "Payment sent"})
                message["task"]["start_url"] = "http://demo.test/fixtures/inject-short"
                await ws.send(json.dumps(message))
                session = (await next_of(ws, "opened"))["session"]
                for kind, steps in (("injection", []), ("loop", [blank] * 3)):
                    for n, action in enumerate(steps):
                        await ws.send(json.dumps({"type": "submit", "id": f"b{n}", "session": session,
                                                  "actions": [action]}))
                        if n < len(steps) - 1:
                            await next_of(ws, "observation")
                    notice = (await next_of(human, "pause_required"))["notice"]
                    assert notice["kind"] == kind, notice
                    seen[kind] = await asyncio.to_thread(scrape, port)
                    await human.send(json.dumps({"type": "review", "id": f"r-{kind}", "pause_id": notice["id"],
                                                 "answer": "resume"}))
                    await next_of(ws, "observation")
                await ws.send(json.dumps({"type": "submit", "id": "n", "session": session, "actions": [
                    {"type": "navigate", "url": "http://demo.test/fixtures/pay"}]}))
                await next_of(ws, "observation")
                await ws.send(json.dumps({"type": "submit", "id": "p", "session": session, "actions": [PAY]}))
                ask = (await next_of(human, "confirmation_required"))["request"]
                seen["asking"] = await asyncio.to_thread(scrape, port)
                await human.send(json.dumps({"type": "confirm", "id": "c", "request_id": ask["id"], "approve": True,
                                             "digest": ask["digest"]}))
                seen["result"] = (await next_of(ws, "finished"))["result"]
                await ws.send(json.dumps({"type": "reset", "id": "r", "session": session}))
                stack.token = (await next_of(ws, "reset_done"))["token"]
                seen["open"] = await asyncio.to_thread(scrape, port)
            for _ in range(50):  # the connection's sessions close as the service notices it went
                seen["after"] = await asyncio.to_thread(scrape, port)
                if not total(seen["after"], "deskpod_sessions_open"):
                    break
                await asyncio.sleep(0.1)
            return seen

    seen = asyncio.run(main())
    assert seen["result"]["status"] == "succeeded", seen["result"]["reason"]
    before, open_, after = seen["before"], seen["open"], seen["after"]
    assert total(before, "deskpod_sessions_open") == 0 and total(seen["asking"], "deskpod_sessions_open") == 1
    assert total(after, "deskpod_sessions_open") == 0
    assert total(seen["injection"], "deskpod_questions_waiting", kind="pause") == 1
    assert total(seen["asking"], "deskpod_questions_waiting", kind="confirmation") == 1
    assert total(open_, "deskpod_questions_waiting") == 0
    assert total(seen["injection"], "deskpod_pauses_total", kind="injection") == 1
    assert total(seen["loop"], "deskpod_pauses_total", kind="loop") == 1
    assert total(before, "deskpod_loops_total") == 0 and total(seen["loop"], "deskpod_loops_total") == 1
    assert total(open_, "deskpod_actions_total", type="click") == 4
    assert total(open_, "deskpod_actions_total", type="navigate", risk="L1") == 1
    assert total(open_, "deskpod_actions_total", type="click", risk="L3") == 1
    assert total(open_, "deskpod_steps_total", outcome="ok") == 5
    assert total(open_, "deskpod_confirmations_total", outcome="approved") == 1
    assert total(open_, "deskpod_confirmation_answer_seconds_count", outcome="approved") == 1
    assert total(open_, "deskpod_runs_total", status="succeeded") == 1
    assert total(open_, "deskpod_run_duration_seconds_count", status="succeeded") == 1
    assert total(open_, "deskpod_reset_seconds_count", kind="session", outcome="ok") == 1
    assert total(before, "deskpod_daemon_request_seconds_count") == 0
    for kind in ("navigate", "act", "reset"):
        assert total(open_, "deskpod_daemon_request_seconds_count", type=kind, outcome="ok") >= 1, kind
