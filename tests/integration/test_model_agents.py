"""Model agents (OpenAI Responses API, Anthropic Messages API) drive a real sandbox through the controller.

The vendor is a local fake HTTP server (:mod:`fake_vendor`) replaying the documented
response shapes; everything else is real: the vendor SDK's HTTP client, the runner
and its policy, the sandbox's daemon, Chromium and the demo site. The API key stays
on the controller host: it reaches the vendor's Authorization header and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from deskpod_stack import Stack, page_state, with_client
from deskpod.controller import load_task, run_task
from deskpod.agents import create_agent
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.run_api import RunResult
from deskpod.protocol import ObserveOptions
from fake_vendor import FakeVendor, anthropic_message, computer_call, openai_response, tool_use

pytestmark = pytest.mark.integration

KEY = "sk-test-deskpod-never-in-the-sandbox-0123456789"


class Approver:
    def __init__(self) -> None:
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(True, request.digest, "test")

    async def review(self, notice: PauseNotice) -> PauseAnswer:
        return "cancel"


def run_model_task(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vendor: str, base_url: str,
                   start: str, success: dict, channel: Any = None) -> RunResult:
    monkeypatch.setenv("DESKPOD_TEST_VENDOR_KEY", KEY)
    body = {"name": f"{vendor}-agent", "start_url": start, "allowed_domains": ["demo.test"],
            "limits": {"max_steps": 10, "max_wall_time_s": 120},
            "agent": {"type": vendor, "model": "claude-opus-4-7" if vendor == "anthropic" else "gpt-5.4",
                      "instructions": "Search the demo site for penguin.", "base_url": base_url,
                      "api_key_env": "DESKPOD_TEST_VENDOR_KEY"},
            "success": {"timeout_s": 5, **success}}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(body))
    return asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path / "audit",
                                channel=channel, agent_factory=create_agent))


def png_size(data_url_or_b64: str) -> tuple[int, int]:
    raw = base64.b64decode(data_url_or_b64.split(",", 1)[-1])
    return Image.open(io.BytesIO(raw)).size


def assert_key_only_in_auth_headers(fake: FakeVendor, result: RunResult) -> None:
    assert fake.requests and all(KEY in (r.headers.get("authorization", "") + r.headers.get("x-api-key", ""))
                                 for r in fake.requests)
    assert all(KEY not in json.dumps(r.body) for r in fake.requests)
    assert KEY not in result.audit_log.read_text()


def test_an_anthropic_agent_searches_the_demo_site(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeVendor() as fake:
        fake.reply(anthropic_message(tool_use("toolu_1", {"action": "left_click", "coordinate": [640, 400]})))
        fake.reply(anthropic_message(tool_use("toolu_2", {"action": "type", "text": "penguin"}),
                                     tool_use("toolu_3", {"action": "key", "text": "Return"})))
        fake.reply(anthropic_message({"type": "text", "text": "I searched for penguin."}, stop_reason="end_turn"))
        result = run_model_task(stack, tmp_path, monkeypatch, "anthropic", fake.url, "http://demo.test/",
                                {"url_matches": r"^http://demo\.test/search\?q=penguin$"})
    assert result.status == "succeeded", result.reason
    assert result.url == "http://demo.test/search?q=penguin" and result.steps == 3
    second = fake.requests[1].body
    results = [block for block in second["messages"][-1]["content"] if block["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_1"]
    image = next(c for c in results[0]["content"] if c["type"] == "image")
    assert png_size(image["source"]["data"]) == (1280, 800), "the real sandbox's screenshot went to the model"
    assert len(fake.requests) == 2, "success is read from the page after the step: the model is not asked again"
    assert_key_only_in_auth_headers(fake, result)


def test_an_openai_agent_searches_the_demo_site(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeVendor() as fake:
        fake.reply(openai_response("resp_1", computer_call("call_1", actions=[
            {"type": "click", "x": 640, "y": 400, "button": "left"}, {"type": "type", "text": "penguin"}])))
        fake.reply(openai_response("resp_2", computer_call("call_2", actions=[{"type": "keypress", "keys": ["ENTER"]}])))
        result = run_model_task(stack, tmp_path, monkeypatch, "openai", fake.url + "/v1", "http://demo.test/",
                                {"url_matches": r"^http://demo\.test/search\?q=penguin$", "page_text_contains": "penguin"})
    assert result.status == "succeeded", result.reason
    follow_up = fake.requests[1].body
    assert follow_up["previous_response_id"] == "resp_1"
    [output] = [item for item in follow_up["input"] if item.get("type") == "computer_call_output"]
    assert output["call_id"] == "call_1" and png_size(output["output"]["image_url"]) == (1280, 800)
    assert_key_only_in_auth_headers(fake, result)


def test_a_vendor_safety_check_needs_a_human_and_is_acknowledged_after_approval(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI's pending_safety_checks make a harmless click need a confirmation; only after the human
    approved it does the next request acknowledge the check."""
    check = {"id": "cu_sc_1", "code": "malicious_instructions", "message": "The page may contain instructions."}
    with FakeVendor() as fake:
        fake.reply(openai_response("resp_1", computer_call("call_1", actions=[
            {"type": "click", "x": 640, "y": 560, "button": "left"}], safety_checks=[check])))
        fake.reply(openai_response("resp_2", computer_call("call_2", actions=[
            {"type": "click", "x": 640, "y": 560, "button": "left"}])))
        human = Approver()
        result = run_model_task(stack, tmp_path, monkeypatch, "openai", fake.url + "/v1",
                                "http://demo.test/fixtures/pay", {"page_text_contains": '"notes":2'}, human)
    assert result.status == "succeeded", result.reason
    [request] = human.requests  # the second click carries no safety check: no confirmation
    assert request.level == "L2" and "The page may contain instructions." in " ".join(request.reasons)
    [output] = [i for i in fake.requests[1].body["input"] if i.get("type") == "computer_call_output"]
    assert output["acknowledged_safety_checks"][0]["id"] == "cu_sc_1"

    def state(client: Any) -> Any:
        return client.act([], ObserveOptions(screenshot=False, page_text=True))

    assert page_state(with_client(stack, state).page_text)["paid"] == 0
