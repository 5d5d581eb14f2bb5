"""The controller as the policy enforcement point, against a real sandbox (and against hostile pages).

Every run here goes through :func:`deskpod.controller.run_task` to the stack's real
daemon, real Chromium and the demo site's fixture pages; the human is a scripted
:class:`ApprovalChannel` standing in for the terminal or the serve API. What a test
asserts is read back from the page (the fixtures' ``STATE`` line), the audit log
and the failure scene.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider

from deskpod_stack import Stack, page_state, with_client
from deskpod.controller import load_task, run_task
from deskpod.controller.audit_log import verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.confirm import ActionSubject, ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import RunResult
from deskpod.protocol import ObserveOptions
from deskpod.tracing import SPANS
from trace_capture import capture, exported_text, parent_names

pytestmark = pytest.mark.integration

PAY = {"type": "click", "x": 640, "y": 380}
"""The centre of the pay fixture's "Pay now" button at 1280x800."""
NOTE = {"type": "click", "x": 640, "y": 560}
"""The centre of its "Add a note" button."""


class Human:
    """A scripted human: ``on_confirm`` / ``on_review`` decide; every question is kept."""

    def __init__(
        self,
        on_confirm: Callable[[ConfirmationRequest], Awaitable[ConfirmationAnswer | None]] | None = None,
        on_review: Callable[[PauseNotice], Awaitable[PauseAnswer | None]] | None = None,
    ) -> None:
        self.requests: list[ConfirmationRequest] = []
        self.notices: list[PauseNotice] = []
        self._on_confirm = on_confirm
        self._on_review = on_review

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        self.requests.append(request)
        if self._on_confirm is None:
            return ConfirmationAnswer(False, request.digest, "test", "denied")
        return await self._on_confirm(request)

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        self.notices.append(notice)
        return "cancel" if self._on_review is None else await self._on_review(notice)


async def approve(request: ConfirmationRequest) -> ConfirmationAnswer:
    return ConfirmationAnswer(True, request.digest, "test")


async def never(request: Any) -> None:
    await asyncio.sleep(3600)


def task_file(tmp_path: Path, start: str, steps: list[list[dict]], success: dict, **extra: Any) -> Path:
    body = {"name": "controller-test", "start_url": start, "allowed_domains": ["demo.test"],
            "limits": {"max_steps": 10, "max_wall_time_s": 90}, "steps": [{"actions": a} for a in steps],
            "success": {"timeout_s": 2, **success}, **extra}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def play(stack: Stack, tmp_path: Path, path: Path, human: Human | None = None, policy: Policy | None = None,
         tracer_provider: TracerProvider | None = None) -> RunResult:
    return asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path / "audit",
                                channel=human, policy=policy, tracer_provider=tracer_provider))


def events(result: RunResult) -> list[dict]:
    return [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def fixture_state(stack: Stack) -> dict:
    async def body(client: Any) -> dict:
        obs = await client.act([], ObserveOptions(screenshot=False, page_text=True))
        return page_state(obs.page_text)

    return with_client(stack, body)


def test_pay_now_waits_for_a_confirmation_and_a_denial_cancels_it(stack: Stack, tmp_path: Path) -> None:
    """Pressing "Pay now" is L3; the human is asked with the action, target, page and
    screen, says no, and the click never happens: the run ends cancelled with its scene saved."""
    human = Human()
    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[PAY]], {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
    assert fixture_state(stack)["paid"] == 0
    [request] = human.requests
    assert request.level == "L3" and "pay" in " ".join(request.reasons).lower()
    assert isinstance(request.subject, ActionSubject)
    assert "Pay now" in request.summary and request.subject.url == "http://demo.test/fixtures/pay"
    assert not request.reversible and len(request.subject.screenshot_sha256) == 64 and request.subject.screenshot_data
    assert result.scene is not None and (result.scene / "scene.json").is_file()
    kinds = [e["event"] for e in events(result)]
    assert "confirmation_requested" in kinds and "step" not in kinds


def test_an_unanswered_confirmation_is_a_denial(stack: Stack, tmp_path: Path) -> None:
    human = Human(on_confirm=never)
    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[PAY]], {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human, Policy(confirmation_timeout_s=1.5))
    assert result.status == "cancelled" and "confirmation timeout" in result.reason, result.reason
    assert fixture_state(stack)["paid"] == 0


def test_an_approved_payment_happens_once_and_harmless_clicks_are_not_asked(stack: Stack, tmp_path: Path) -> None:
    human = Human(on_confirm=approve)
    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[NOTE], [PAY]],
                     {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "succeeded", result.reason
    assert len(human.requests) == 1 and human.requests[0].level == "L3"
    state = fixture_state(stack)
    assert state["paid"] == 1 and state["notes"] == 1
    steps = [e for e in events(result) if e["event"] == "step"]
    assert [s["risks"][0]["approval"] for s in steps] == ["not_required", "approved"]
    assert [s["risks"][0]["risk"] for s in steps] == ["L1", "L3"]


def test_an_approval_given_before_the_page_changed_does_not_apply_after_it(stack: Stack, tmp_path: Path) -> None:
    """The total changes from $10 to $990 while the human thinks; the approval is bound
    to the old screen, so it is void, the human is asked again about the new screen, and says no."""

    async def slow_then_deny(request: ConfirmationRequest) -> ConfirmationAnswer:
        if len(human.requests) == 1:
            await asyncio.sleep(4)
            return ConfirmationAnswer(True, request.digest, "test")
        return ConfirmationAnswer(False, request.digest, "test")

    human = Human(on_confirm=slow_then_deny)
    path = task_file(tmp_path, "http://demo.test/fixtures/pay?change_ms=2500", [[PAY]],
                     {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled", result.reason
    assert fixture_state(stack) == {"paid": 0, "notes": 0, "total": "$990.00"}
    first, second = human.requests
    assert isinstance(first.subject, ActionSubject) and isinstance(second.subject, ActionSubject)
    assert first.digest != second.digest and first.subject.screenshot_sha256 != second.subject.screenshot_sha256
    assert second.attempt == 2
    void = [e for e in events(result) if e["event"] == "confirmation_void"]
    assert len(void) == 1 and void[0]["id"] == first.id


def test_an_approval_for_another_screen_is_refused(stack: Stack, tmp_path: Path) -> None:
    """An answer must repeat the digest of the request it approves; any other digest is a denial."""

    async def wrong(request: ConfirmationRequest) -> ConfirmationAnswer:
        return ConfirmationAnswer(True, "0" * 64, "test")

    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[PAY]], {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, Human(on_confirm=wrong))
    assert result.status == "cancelled" and "wrong_digest" in result.reason
    assert fixture_state(stack)["paid"] == 0


@pytest.mark.parametrize("page", ["inject-system", "inject-phish", "inject-dialog"])
def test_a_hostile_page_pauses_the_run_and_nothing_it_asks_for_happens(stack: Stack, tmp_path: Path, page: str) -> None:
    """The page tells the agent to run a command, hand over credentials or press "Allow".
    The agent here obeys blindly; the controller pauses before its first action, shows the human the
    quoted evidence, and on cancel nothing the page asked for has been typed or pressed."""
    obey = [{"type": "click", "x": 640, "y": 400}, {"type": "type", "text": "hunter2 4111 1111 1111 1111"}]
    if page == "inject-dialog":
        obey = [{"type": "click", "x": 860, "y": 460}]
    human = Human()
    path = task_file(tmp_path, f"http://demo.test/fixtures/{page}", [obey], {"page_text_contains": "never"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled" and "not resumed" in result.reason, result.reason
    [notice] = human.notices
    assert notice.kind == "injection" and notice.evidence
    assert fixture_state(stack) in ({"value": ""}, {"allowed": 0})
    log = events(result)
    assert not [e for e in log if e["event"] == "step"]
    assert [e for e in log if e["event"] == "pause"][0]["evidence"] == list(notice.evidence)


def test_resuming_after_an_injection_pause_authorizes_nothing(stack: Stack, tmp_path: Path) -> None:
    """The human resumes; the page is not asked about again, but the agent's typing of a card number
    is still L2 and needs its own confirmation, which is denied."""

    async def resume(notice: PauseNotice) -> PauseAnswer:
        return "resume"

    human = Human(on_review=resume)
    obey = [{"type": "click", "x": 640, "y": 400}, {"type": "type", "text": "4111 1111 1111 1111"}]
    path = task_file(tmp_path, "http://demo.test/fixtures/inject-phish", [obey], {"page_text_contains": "never"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
    assert len(human.notices) == 1 and len(human.requests) == 1
    assert "card number" in " ".join(human.requests[0].reasons)
    assert fixture_state(stack) == {"value": ""}


def test_an_ordinary_sign_in_page_does_not_pause_and_typed_passwords_stay_out_of_the_log(
    stack: Stack, tmp_path: Path
) -> None:
    """No false alarm on a plain sign-in form; typing into its password field is L2 (confirmed here),
    the text never reaches the audit log nor the run's trace, and the log's hash chain verifies (and
    breaks when edited). The run is one trace: its steps, their policy decisions, the confirmation
    wait, the verifications and the daemon requests, with the real daemon's execute, settle and
    capture phases inside them."""
    secret = "correct-horse-battery-staple"

    async def slow_approve(request: ConfirmationRequest) -> ConfirmationAnswer:
        await asyncio.sleep(1.3)  # longer than a caret blink: the focused field must not void the approval
        return ConfirmationAnswer(True, request.digest, "test")

    human = Human(on_confirm=slow_approve)
    path = task_file(tmp_path, "http://demo.test/fixtures/login",
                     [[{"type": "click", "x": 640, "y": 380}], [{"type": "type", "text": secret}]],
                     {"page_text_contains": '"password_length":28'})
    provider, exporter = capture()
    result = play(stack, tmp_path, path, human, tracer_provider=provider)
    assert result.status == "succeeded", result.reason
    assert not human.notices
    spans = exporter.get_finished_spans()
    assert len({span.context.trace_id for span in spans}) == 1 and {span.name for span in spans} == set(SPANS)
    parents = parent_names(spans)
    assert parents["deskpod.run"] == {""} and parents["deskpod.step"] == parents["deskpod.verification"] == {
        "deskpod.run"}
    assert parents["deskpod.policy_decision"] == parents["deskpod.confirmation_wait"] == {"deskpod.step"}
    assert all(parents[f"deskpod.daemon.{phase}"] == {"deskpod.daemon_request"}
               for phase in ("execute", "settle", "capture"))
    [wait] = [span.attributes for span in spans if span.name == "deskpod.confirmation_wait"]
    assert (wait["deskpod.risk"], wait["deskpod.outcome"]) == ("L2", "approved")
    exported = exported_text(spans)
    assert "deskpod.status=succeeded" in exported
    for shown in (secret, "demo.test", "Password", "demo shop", "sign in"):  # typed, URL, field, page text, title
        assert shown not in exported, shown
    [request] = human.requests
    assert request.level == "L2" and "password" in " ".join(request.reasons)
    assert isinstance(request.subject, ActionSubject)
    assert request.subject.data == "[redacted 28 chars]" and secret not in json.dumps(request.to_json(with_screenshot=False))
    text = result.audit_log.read_text()
    assert secret not in text and "[redacted 28 chars]" in text
    check = verify_log(result.audit_log, result.audit_head, public_key=AuditSigner.load_or_create().public_key)
    assert check.ok and check.lines == len(text.splitlines()), check
    lines = text.splitlines()
    lines[3] = lines[3].replace('"event":', '"edited":true,"event":')
    result.audit_log.write_text("\n".join(lines) + "\n")
    broken = verify_log(result.audit_log, result.audit_head, public_key=AuditSigner.load_or_create().public_key)
    assert not broken.ok and "line 5" in broken.error


def test_a_redirect_off_the_allowlist_is_stopped(stack: Stack, tmp_path: Path) -> None:
    """The start page answers 302 to allowed.test, which the proxy lets through but the
    task's allowlist does not: the real URL is checked and the run stops as policy_denied."""
    path = task_file(tmp_path, "http://demo.test/redirect?to=http://allowed.test/", [[NOTE]],
                     {"page_text_contains": "never"})
    result = play(stack, tmp_path, path)
    assert result.status == "failed" and result.reason.startswith("policy_denied:"), result.reason
    assert "allowed.test" in result.reason
    policy = [e for e in events(result) if e["event"] == "policy"]
    assert [e["rule"] for e in policy if e["decision"] == "denied"] == ["domain_not_allowed"]
    # The hop itself was refused in the browser before it left (preventive egress).
    assert ("allowed.test", True) in [(e["host"], e["document"]) for e in policy if e["decision"] == "blocked"]


def test_a_blocked_action_is_refused_and_the_agent_told(stack: Stack, tmp_path: Path) -> None:
    path = task_file(tmp_path, "http://demo.test/fixtures/pay",
                     [[{"type": "drag", "path": [{"x": 100, "y": 300}, {"x": 300, "y": 300}]}], [NOTE]],
                     {"page_text_contains": '"notes":1'})
    result = play(stack, tmp_path, path, policy=Policy(blocked_actions=["drag"]))
    assert result.status == "succeeded", result.reason
    steps = [e for e in events(result) if e["event"] == "step"]
    assert [s["decision"] for s in steps] == ["denied", "allowed"] and steps[0]["rule"] == "blocked_action"


def test_wall_time_limit_stops_the_run_with_its_failure_scene(stack: Stack, tmp_path: Path) -> None:
    """Past max_wall_time_s the run stops and saves the last screenshot, the recent
    actions, URL, window and reason. (The limit ends during the wait, whose end the failure
    scene's screenshot waits for.)"""
    path = task_file(tmp_path, "http://demo.test/fixtures/pay",
                     [[NOTE], [{"type": "wait", "seconds": 6}]], {"page_text_contains": "never"},
                     limits={"max_steps": 10, "max_wall_time_s": 4})
    result = play(stack, tmp_path, path)
    assert result.status == "failed" and "max_wall_time_s=4" in result.reason
    scene = json.loads((result.scene / "scene.json").read_text())
    assert scene["reason"] == result.reason and scene["url"] == "http://demo.test/fixtures/pay"
    assert scene["title"] == "fixture: checkout" and scene["recent_actions"][0] == NOTE | {"button": "left",
                                                                                          "hold_keys": []}
    assert (result.scene / scene["screenshot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert verify_log(result.audit_log, result.audit_head, public_key=AuditSigner.load_or_create().public_key).ok


def test_max_screenshots_stops_the_run(stack: Stack, tmp_path: Path) -> None:
    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[NOTE]] * 5, {"page_text_contains": "never"},
                     limits={"max_steps": 10, "max_wall_time_s": 60, "max_screenshots": 3, "max_repeats": 10})
    result = play(stack, tmp_path, path)
    assert result.status == "failed" and "max_screenshots=3" in result.reason
    assert result.scene is not None


def test_a_focused_text_field_does_not_blink(stack: Stack) -> None:
    """Approvals bind to the screenshot's hash, so a still page must stay byte-identical: the image
    turns GTK's caret blinking off for Chromium."""

    async def body(client: Any) -> list[str]:
        await client.navigate("http://demo.test/fixtures/form")
        await client.act([{"type": "click", "x": 640, "y": 400}], ObserveOptions(screenshot=False))
        hashes = []
        for _ in range(5):
            obs = await client.act([], ObserveOptions())
            hashes.append(obs.screenshot.sha256)
            await asyncio.sleep(0.35)
        return hashes

    assert len(set(with_client(stack, body))) == 1


@pytest.mark.parametrize("press", [{"type": "type", "text": " "}, {"type": "keypress", "keys": ["shift+Return"]}])
def test_pressing_a_focused_pay_button_from_the_keyboard_needs_a_confirmation(
    stack: Stack, tmp_path: Path, press: dict
) -> None:
    """Found by a fresh-user trial: with "Pay now" focused (shift+Tab from the note button), a typed
    space or a chord written as one string paid as L1. Both are L3 now and wait for the human."""
    human = Human()
    path = task_file(tmp_path, "http://demo.test/fixtures/pay",
                     [[NOTE], [{"type": "keypress", "keys": ["shift+Tab"]}], [press]],
                     {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled", result.reason
    assert fixture_state(stack)["paid"] == 0
    [request] = human.requests
    assert request.level == "L3" and "Pay now" in request.summary
