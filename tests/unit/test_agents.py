"""Model agents against a fake vendor API: real SDKs, real HTTP on 127.0.0.1, recorded shapes.

Each test drives an agent the way the controller does (``propose(observation, last)``)
while :mod:`fake_vendor` replays documented response shapes and records the requests,
so the assertions read what actually went over the wire.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
from typing import Any

import pytest
from fake_vendor import (
    FakeVendor,
    anthropic_message,
    computer_call,
    openai_message,
    openai_response,
    tool_use,
)

from deskpod.agents import create_agent
from deskpod.agents.anthropic import AnthropicAgent
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.task import ModelAgentSpec
from deskpod.errors import AgentError
from deskpod.protocol import Click, Keypress, Observation, Screenshot, Size, TypeText

KEY_ENV = "DESKPOD_TEST_VENDOR_KEY"
KEY = "sk-test-0123456789abcdef"
DISPLAY = Size(width=1280, height=800)
TASK = "Search the demo site for penguin."


def obs(tag: str) -> Observation:
    """An observation whose screenshot's base64 data names it (the agents never decode it)."""
    data = base64.b64encode(f"png-{tag}".encode()).decode()
    shot = Screenshot(id=f"s-{tag}", format="png", width=1280, height=800, screen_width=1280, screen_height=800,
                      scale_x=1.0, scale_y=1.0, sha256="0" * 64, data=data)
    return Observation(screenshot=shot, url="http://demo.test/", title="Demo")


def data_url(tag: str) -> str:
    return "data:image/png;base64," + obs(tag).screenshot.data  # type: ignore[union-attr]


def ok(tag: str) -> StepOutcome:
    return StepOutcome(status="ok", observation=obs(tag))


def spec(kind: str, fake: FakeVendor, model: str, **extra: Any) -> ModelAgentSpec:
    base = fake.url + "/v1" if kind == "openai" else fake.url
    return ModelAgentSpec(type=kind, model=model, instructions=TASK, base_url=base, api_key_env=KEY_ENV, **extra)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def fake() -> Any:
    with FakeVendor() as server:
        yield server


def assert_key_only_in_auth_header(fake: FakeVendor, header: str, value: str) -> None:
    for request in fake.requests:
        assert request.headers[header] == value
        assert KEY not in json.dumps(request.body)
        assert all(KEY not in v for name, v in request.headers.items() if name != header)


def images(content: list[dict[str, Any]]) -> list[str]:
    """The base64 data of every image block, top level or inside tool_results, in order."""
    found: list[str] = []
    for block in content:
        if block.get("type") == "image":
            found.append(block["source"]["data"])
        elif block.get("type") == "tool_result":
            found.extend(images(block.get("content") or []))
    return found


# --- import cost ------------------------------------------------------------------------------


@pytest.mark.process
def test_importing_the_package_loads_neither_sdk_nor_the_controller() -> None:
    code = ("import sys, deskpod.agents; "
            "print(sorted(m for m in ('openai', 'anthropic', 'deskpod.controller', 'deskpod.controller.gui') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.process
def test_a_missing_sdk_is_a_typed_error() -> None:
    code = ("import os, sys; sys.modules['openai'] = None; os.environ['OPENAI_API_KEY'] = 'k'\n"
            "from deskpod.agents import create_agent\n"
            "from deskpod.controller.task import ModelAgentSpec\n"
            "from deskpod.errors import AgentError\n"
            "from deskpod.protocol import Size\n"
            "try:\n"
            "    create_agent(ModelAgentSpec(type='openai', model='m', instructions='t'), Size(width=8, height=8))\n"
            "except AgentError as exc:\n"
            "    print(exc.detail['reason'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "missing_sdk"


# --- OpenAI -----------------------------------------------------------------------------------


def test_openai_loop_turns_computer_calls_into_proposals_and_ends_with_the_claim(fake: FakeVendor) -> None:
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[
        {"type": "click", "button": "left", "x": 405, "y": 157},
        {"type": "type", "text": "penguin"},
    ])))
    fake.reply(openai_response("resp_2", computer_call("call_b", actions=[{"type": "keypress", "keys": ["ENTER"]}])))
    fake.reply(openai_response("resp_3", openai_message("I searched for penguin; the results page is open.")))

    async def body() -> list[Proposal | Done]:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            return [await agent.propose(obs("a"), None), await agent.propose(obs("b"), ok("b")),
                    await agent.propose(obs("c"), ok("c")), await agent.propose(obs("c"), None)]
        finally:
            await agent.close()

    first, second, done, again = asyncio.run(body())
    assert isinstance(first, Proposal) and isinstance(second, Proposal)
    assert list(first.actions) == [Click(type="click", x=405, y=157, button="left"),
                                   TypeText(type="type", text="penguin")]
    assert first.safety_checks == [] and KEY not in first.intent
    assert list(second.actions) == [Keypress(type="keypress", keys=["ENTER"])]
    assert done == Done(claim="I searched for penguin; the results page is open.") and again == done
    assert len(fake.requests) == 3, "a Done is final: no request after it"

    opening, follow, last = (r.body for r in fake.requests)
    assert fake.requests[0].path == "/v1/responses"
    assert opening["model"] == "gpt-5.4" and opening["tools"] == [{"type": "computer"}]
    assert opening["truncation"] == "auto" and opening["store"] is True and opening["instructions"]
    assert opening["max_output_tokens"] == 4096 and "previous_response_id" not in opening
    assert opening["input"] == [{"role": "user", "content": [
        {"type": "input_text", "text": TASK},
        {"type": "input_image", "image_url": data_url("a"), "detail": "original"},
    ]}]
    assert follow["previous_response_id"] == "resp_1" and follow["instructions"] == opening["instructions"]
    assert follow["input"] == [{"type": "computer_call_output", "call_id": "call_a",
                                "output": {"type": "computer_screenshot", "image_url": data_url("b")}}]
    assert last["previous_response_id"] == "resp_2"
    assert last["input"][0]["call_id"] == "call_b" and last["input"][0]["output"]["image_url"] == data_url("c")
    assert_key_only_in_auth_header(fake, "authorization", f"Bearer {KEY}")


def test_openai_preview_model_declares_the_model_space_and_sends_one_action(fake: FakeVendor) -> None:
    fake.reply(openai_response("resp_1", computer_call("call_a", action={
        "type": "scroll", "x": 640, "y": 400, "scroll_x": 0, "scroll_y": 530}), model="computer-use-preview"))

    async def body() -> Proposal | Done:
        agent = create_agent(spec("openai", fake, "computer-use-preview"), DISPLAY)
        try:
            return await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    proposal = asyncio.run(body())
    assert isinstance(proposal, Proposal)
    assert [a.model_dump() for a in proposal.actions] == [
        {"type": "scroll", "x": 640, "y": 400, "hold_keys": [], "scroll_x": 0, "scroll_y": 10}]
    sent = fake.requests[0].body
    assert sent["tools"] == [{"type": "computer_use_preview", "display_width": 1280, "display_height": 800,
                              "environment": "browser"}]


CHECK = {"id": "cu_sc_67cb", "code": "malicious_instructions",
         "message": "We've detected instructions that may cause your application to perform malicious or "
                    "unauthorized actions. Please acknowledge this warning if you'd like to proceed."}


def test_openai_safety_checks_are_surfaced_and_acknowledged_only_after_an_executed_step(fake: FakeVendor) -> None:
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[{"type": "click", "button": "left",
                                                                           "x": 10, "y": 20}],
                                                       safety_checks=[CHECK])))
    fake.reply(openai_response("resp_2", openai_message("Clicked.")))

    async def body() -> Proposal | Done:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            proposal = await agent.propose(obs("a"), None)
            assert isinstance(await agent.propose(obs("b"), ok("b")), Done)
            return proposal
        finally:
            await agent.close()

    proposal = asyncio.run(body())
    assert isinstance(proposal, Proposal) and proposal.safety_checks == [CHECK["message"]]
    output = fake.requests[1].body["input"][0]
    assert output["call_id"] == "call_a" and output["acknowledged_safety_checks"] == [CHECK]


@pytest.mark.parametrize(("status", "tag", "error", "expected"), [
    ("denied", "a", {"code": "policy_denied", "message": "the human refused the confirmation"},
     "Not executed: refused (policy_denied): the human refused the confirmation"),
    ("error", "e", {"code": "out_of_bounds", "message": "x=2000"}, "Failed (out_of_bounds): x=2000"),
])
def test_openai_denied_or_failed_steps_are_reported_without_acknowledging(
        fake: FakeVendor, status: str, tag: str, error: dict[str, str], expected: str) -> None:
    outcome = StepOutcome(status=status, observation=obs(tag), error=error)  # type: ignore[arg-type]
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[{"type": "click", "button": "left",
                                                                           "x": 10, "y": 20}],
                                                       safety_checks=[CHECK])))
    fake.reply(openai_response("resp_2", openai_message("I could not do it.")))

    async def body() -> Proposal | Done:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            await agent.propose(obs("a"), None)
            return await agent.propose(outcome.observation, outcome)
        finally:
            await agent.close()

    assert asyncio.run(body()) == Done(claim="I could not do it.")
    output, note = fake.requests[1].body["input"]
    assert output == {"type": "computer_call_output", "call_id": "call_a",
                      "output": {"type": "computer_screenshot", "image_url": data_url(tag)}}
    assert "acknowledged_safety_checks" not in output
    assert note["role"] == "user" and expected in note["content"][0]["text"]
    assert "call_a" in note["content"][0]["text"]


def test_openai_call_deskpod_cannot_run_is_answered_without_a_proposal(fake: FakeVendor) -> None:
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[{"type": "teleport", "x": 1}])))
    fake.reply(openai_response("resp_2", computer_call("call_b", actions=[{"type": "wait"}])))

    async def body() -> Proposal | Done:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            return await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    proposal = asyncio.run(body())
    assert isinstance(proposal, Proposal) and [a.model_dump()["type"] for a in proposal.actions] == ["wait"]
    output, note = fake.requests[1].body["input"]
    assert output["call_id"] == "call_a" and fake.requests[1].body["previous_response_id"] == "resp_1"
    assert "unknown_action" in note["content"][0]["text"] and "teleport" in note["content"][0]["text"]


def test_openai_gives_up_when_every_call_is_refused(fake: FakeVendor) -> None:
    for n in range(10):
        fake.reply(openai_response(f"resp_{n}", computer_call(f"call_{n}", actions=[{"type": "teleport"}])))

    async def body() -> None:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    with pytest.raises(AgentError) as caught:
        asyncio.run(body())
    assert caught.value.detail["reason"] == "too_many_rejected_calls" and len(fake.requests) == 6


# --- Anthropic --------------------------------------------------------------------------------


def test_anthropic_loop_proposes_each_tool_use_and_returns_all_results_together(fake: FakeVendor) -> None:
    fake.reply(anthropic_message(
        {"type": "text", "text": "I'll click the search box, then type."},
        tool_use("toolu_01", {"action": "left_click", "coordinate": [640, 400]}),
        tool_use("toolu_02", {"action": "type", "text": "penguin"}),
    ))
    fake.reply(anthropic_message({"type": "text", "text": "The results for penguin are shown."},
                                 stop_reason="end_turn"))

    async def body() -> list[Proposal | Done]:
        agent = create_agent(spec("anthropic", fake, "claude-opus-4-7", max_output_tokens=2048), DISPLAY)
        try:
            first = await agent.propose(obs("a"), None)
            second = await agent.propose(obs("b"), ok("b"))
            assert len(fake.requests) == 1, "the second tool_use of a response needs no new request"
            return [first, second, await agent.propose(obs("c"), ok("c"))]
        finally:
            await agent.close()

    first, second, done = asyncio.run(body())
    assert isinstance(first, Proposal) and isinstance(second, Proposal)
    assert list(first.actions) == [Click(type="click", x=640, y=400, button="left")]
    assert first.intent == "I'll click the search box, then type."
    assert list(second.actions) == [TypeText(type="type", text="penguin")]
    assert done == Done(claim="The results for penguin are shown.")

    opening, follow = (r.body for r in fake.requests)
    assert fake.requests[0].path == "/v1/messages"
    assert fake.requests[0].headers["anthropic-beta"] == "computer-use-2025-11-24"
    assert opening["tools"] == [{"type": "computer_20251124", "name": "computer", "display_width_px": 1280,
                                 "display_height_px": 800, "enable_zoom": True}]
    assert opening["model"] == "claude-opus-4-7" and opening["max_tokens"] == 2048 and opening["system"]
    assert opening["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": TASK},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": obs("a").screenshot.data}},
    ]}]
    assert follow["messages"][1] == {"role": "assistant", "content": fake_first_content()}
    results = follow["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_01", "toolu_02"]
    assert all(r["type"] == "tool_result" and "is_error" not in r for r in results)
    assert images(results) == [obs("b").screenshot.data, obs("c").screenshot.data]
    assert_key_only_in_auth_header(fake, "authorization", f"Bearer {KEY}")


def fake_first_content() -> list[dict[str, Any]]:
    return anthropic_message(
        {"type": "text", "text": "I'll click the search box, then type."},
        tool_use("toolu_01", {"action": "left_click", "coordinate": [640, 400]}),
        tool_use("toolu_02", {"action": "type", "text": "penguin"}),
    )["content"]


def test_anthropic_denial_is_an_error_result_and_skips_the_rest_of_the_turn(fake: FakeVendor) -> None:
    fake.reply(anthropic_message(
        tool_use("toolu_01", {"action": "left_click", "coordinate": [640, 400]}),
        tool_use("toolu_02", {"action": "type", "text": "penguin"}),
    ))
    fake.reply(anthropic_message({"type": "text", "text": "Stopped."}, stop_reason="end_turn"))
    denied = StepOutcome(status="denied", observation=obs("a"),
                         error={"code": "policy_denied", "message": "blocked.test is not on the allowlist"})

    async def body() -> Proposal | Done:
        agent = create_agent(spec("anthropic", fake, "claude-opus-4-7"), DISPLAY)
        try:
            await agent.propose(obs("a"), None)
            return await agent.propose(obs("a"), denied)
        finally:
            await agent.close()

    assert asyncio.run(body()) == Done(claim="Stopped.")
    content = fake.requests[1].body["messages"][2]["content"]
    first, skipped, shot = content
    assert first["tool_use_id"] == "toolu_01" and first["is_error"] is True
    assert first["content"] == [{"type": "text", "text": "Not executed: refused (policy_denied): "
                                                         "blocked.test is not on the allowlist"}]
    assert skipped["tool_use_id"] == "toolu_02" and skipped["is_error"] is True
    assert "Skipped" in skipped["content"][0]["text"]
    assert shot["type"] == "image" and shot["source"]["data"] == obs("a").screenshot.data


def test_anthropic_unconvertible_tool_use_is_answered_with_is_error(fake: FakeVendor) -> None:
    fake.reply(anthropic_message(tool_use("toolu_01", {"action": "left_click", "coordinate": "middle"}),
                                 tool_use("toolu_02", {"command": "ls"}, name="bash")))
    fake.reply(anthropic_message(tool_use("toolu_03", {"action": "key", "text": "ctrl+l"})))

    async def body() -> Proposal | Done:
        agent = create_agent(spec("anthropic", fake, "claude-haiku-4-5"), DISPLAY)
        try:
            return await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    proposal = asyncio.run(body())
    assert isinstance(proposal, Proposal) and [a.model_dump()["type"] for a in proposal.actions] == ["keypress"]
    assert fake.requests[0].headers["anthropic-beta"] == "computer-use-2025-01-24"
    assert fake.requests[0].body["tools"][0]["type"] == "computer_20250124"
    bad, other, shot = fake.requests[1].body["messages"][2]["content"]
    assert bad["is_error"] and "invalid_action" in bad["content"][0]["text"]
    assert other["is_error"] and "bash" in other["content"][0]["text"]
    assert shot["type"] == "image"


def test_anthropic_history_keeps_only_the_newest_screenshots(fake: FakeVendor) -> None:
    for n in range(5):
        fake.reply(anthropic_message(tool_use(f"toolu_{n}", {"action": "screenshot"})))

    async def body() -> None:
        agent = AnthropicAgent(spec("anthropic", fake, "claude-opus-4-7"), DISPLAY, keep_screenshots=2)
        try:
            await agent.propose(obs("0"), None)
            for n in range(1, 5):
                await agent.propose(obs(str(n)), ok(str(n)))
        finally:
            await agent.close()

    asyncio.run(body())
    messages = fake.requests[-1].body["messages"]
    sent = [image for m in messages if m["role"] == "user" for image in images(m["content"])]
    assert sent == [obs("3").screenshot.data, obs("4").screenshot.data]
    placeholders = json.dumps(messages).count("[older screenshot removed]")
    assert placeholders == 3


# --- errors (both vendors) --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_missing_key_is_a_typed_error_naming_the_variable(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(AgentError) as caught:
        create_agent(ModelAgentSpec(type=kind, model="m", instructions=TASK, api_key_env=KEY_ENV), DISPLAY)
    assert caught.value.code == "agent_failed" and caught.value.detail["reason"] == "missing_api_key"
    assert KEY_ENV in caught.value.message


@pytest.mark.parametrize(("kind", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")])
def test_default_key_variable_is_the_vendors(kind: str, variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(AgentError, match=variable):
        create_agent(ModelAgentSpec(type=kind, model="m", instructions=TASK), DISPLAY)


def _drive(kind: str, fake_url: str) -> None:
    async def body() -> None:
        base = fake_url + "/v1" if kind == "openai" else fake_url
        agent = create_agent(ModelAgentSpec(type=kind, model="m", instructions=TASK, base_url=base,
                                            api_key_env=KEY_ENV), DISPLAY)
        try:
            await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    asyncio.run(body())


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_vendor_500_is_retried_then_a_typed_error(kind: str, fake: FakeVendor) -> None:
    for _ in range(3):
        fake.reply({"type": "error", "error": {"type": "api_error", "message": f"overloaded, key {KEY}"}},
                   status=500, headers={"retry-after-ms": "10"})
    with pytest.raises(AgentError) as caught:
        _drive(kind, fake.url)
    assert caught.value.detail == {"reason": "vendor_status", "vendor": kind, "status": 500}
    assert len(fake.requests) == 3, "the SDK retried twice"
    assert KEY not in caught.value.message and "[redacted]" in caught.value.message
    assert not isinstance(caught.value.__cause__, AgentError)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("garbage", [b"<html>502 Bad Gateway</html>", b"{\"id\": 7}", b"[1, 2]", b"{truncated"])
def test_garbage_answer_is_a_typed_error(kind: str, garbage: bytes, fake: FakeVendor) -> None:
    fake.reply(garbage, headers={"content-type": "text/html" if garbage.startswith(b"<") else "application/json"})
    with pytest.raises(AgentError) as caught:
        _drive(kind, fake.url)
    assert caught.value.detail["reason"] == "bad_response"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_unreachable_vendor_is_a_typed_error(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def body() -> None:
        agent = create_agent(ModelAgentSpec(type=kind, model="m", instructions=TASK,
                                            base_url=f"http://127.0.0.1:{port}", api_key_env=KEY_ENV), DISPLAY)
        try:
            await agent.propose(obs("a"), None)
        finally:
            await agent.close()

    with pytest.raises(AgentError) as caught:
        asyncio.run(body())
    assert caught.value.detail["reason"] == "vendor_unreachable"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_cut_output_is_an_incomplete_response(kind: str, fake: FakeVendor) -> None:
    if kind == "openai":
        fake.reply(openai_response("resp_1", status="incomplete"))
    else:
        fake.reply(anthropic_message({"type": "text", "text": "Let me thi"}, stop_reason="max_tokens"))
    with pytest.raises(AgentError) as caught:
        _drive(kind, fake.url)
    assert caught.value.detail["reason"] == "incomplete_response"


def test_observation_without_screenshot_is_a_typed_error(fake: FakeVendor) -> None:
    async def body() -> None:
        agent = create_agent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        try:
            await agent.propose(Observation(url="http://demo.test/"), None)
        finally:
            await agent.close()

    with pytest.raises(AgentError) as caught:
        asyncio.run(body())
    assert caught.value.detail["reason"] == "no_screenshot" and fake.requests == []


# --- token usage (deskpod eval's report) --------------------------------------------------------


def test_each_agent_adds_up_the_tokens_its_responses_report(fake: FakeVendor) -> None:
    fake.reply(openai_response("resp_1", computer_call("call_a", actions=[{"type": "keypress", "keys": ["ENTER"]}])))
    fake.reply(openai_response("resp_2", openai_message("Done.")))
    fake.reply(anthropic_message({"type": "text", "text": "Done."}, stop_reason="end_turn"))

    from deskpod.agents.openai import OpenAIAgent

    async def body() -> tuple[int, int]:
        openai_agent = OpenAIAgent(spec("openai", fake, "gpt-5.4"), DISPLAY)
        claude = AnthropicAgent(spec("anthropic", fake, "claude-opus-4-7"), DISPLAY)
        try:
            await openai_agent.propose(obs("a"), None)
            await openai_agent.propose(obs("b"), ok("b"))
            await claude.propose(obs("a"), None)
            return openai_agent.tokens_used, claude.tokens_used
        finally:
            await openai_agent.close()
            await claude.close()

    assert asyncio.run(body()) == (2 * (1200 + 40), 2095 + 503)


@pytest.mark.parametrize("usage", [None, "lots", {"input_tokens": -5}, {"input_tokens": True},
                                   {"input_tokens": 10**12}, {"output_tokens": "3"}])
def test_a_malformed_usage_counts_nothing(usage: Any) -> None:
    from deskpod.agents._common import usage_tokens

    assert usage_tokens({"usage": usage}) == 0
    assert usage_tokens({"usage": {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 5}}) == 15
