"""Recovering a tab whose page does not answer: the daemon's ``recover_tab`` against a
stand-in DevTools channel (what Chromium answers a stuck page is the integration test's,
``tests/integration/test_tabs.py``), its risk level, and the controller's automatic
recovery under the policy's ``recover_unresponsive`` on an in-memory sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from deskpod.adapters import anthropic
from deskpod.adapters._common import CHOOSER_NOTE, UNRESPONSIVE_NOTE, state_note
from deskpod.agentd.browser.devtools import DevTools
from deskpod.agentd.browser.dialogs import DialogTracker
from deskpod.agentd.browser.recovery import recover_tab
from deskpod.agentd.browser.unresponsive import UnresponsivePages
from deskpod.controller.gui import run_task
from deskpod.controller.policy.policy_file import Policy, tightened
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.controller.task import TaskSpec
from deskpod.errors import BadReplyError, BrowserError, ExecutionError, PageResponsiveError
from deskpod.protocol import FileChooser, Observation, RecoverTab, Tab, UnresponsivePage, parse_action, parse_server_message
from fake_sandbox import Button, FakeSandbox, Page

FROZEN, OTHER = "T-FROZEN", "T-OTHER"


class Channel:
    """Answers the DevTools commands :func:`recover_tab` sends like Chromium does for a tab
    whose page runs an endless script: the browser target always answers, the page's session
    answers a probe only once ``Runtime.terminateExecution`` has freed it (or never, when
    ``terminates`` is false: a renderer stuck outside script)."""

    def __init__(self, url: str = "http://shop.test/slow", *, stuck: bool = True, terminates: bool = True) -> None:
        self.url, self.stuck, self.terminates = url, stuck, terminates
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.posted: list[str] = []
        self.unresponsive = UnresponsivePages()
        self.dialogs = DialogTracker()

    answers = DevTools.answers  # the real probe, through this stand-in's call

    async def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                   timeout_s: float = 10.0, page: str | None = None, beside_dialog: bool = True) -> dict[str, Any]:
        self.calls.append((method, params or {}))
        if method == "Target.getTargets":
            return {"targetInfos": [{"type": "page", "targetId": FROZEN, "url": self.url},
                                    {"type": "page", "targetId": OTHER, "url": "http://shop.test/"}]}
        if method == "Target.attachToTarget":
            return {"sessionId": "S1"}
        if method == "Runtime.evaluate" and self.stuck:
            raise BrowserError("Runtime.evaluate got no answer") from TimeoutError()
        if method == "Runtime.terminateExecution":
            self.stuck = self.stuck and not self.terminates
        if method == "Target.createTarget":
            return {"targetId": "T-NEW"}
        return {}

    def post(self, method: str, params: dict[str, Any]) -> None:
        self.posted.append(method)

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]


def recover(channel: Channel, action: dict[str, Any], active: str | None = FROZEN, attached: tuple[str, ...] = ("S0",)) -> str:
    parsed = parse_action(action)
    assert isinstance(parsed, RecoverTab)
    return asyncio.run(recover_tab(channel, parsed, active, lambda tab: list(attached)))  # type: ignore[arg-type]


def test_a_stuck_page_has_its_script_stopped_and_its_url_loaded_again_in_the_same_tab() -> None:
    channel = Channel()
    channel.unresponsive.mark(FROZEN, 0.0)
    assert recover(channel, {"type": "recover_tab"}) == FROZEN
    assert channel.methods() == ["Target.getTargets", "Runtime.evaluate", "Runtime.terminateExecution",
                                 "Runtime.evaluate", "Page.navigate"]  # on the session attached before it froze
    assert channel.calls[-1][1] == {"url": "http://shop.test/slow"}
    assert channel.unresponsive.since(FROZEN) is None and channel.posted == []


def test_a_tab_without_an_earlier_session_gets_one_for_the_attempt_and_gives_it_back() -> None:
    channel = Channel(terminates=False)
    assert recover(channel, {"type": "recover_tab", "tab_id": FROZEN}, attached=()) == "T-NEW"
    assert channel.methods()[:2] == ["Target.getTargets", "Target.attachToTarget"]
    assert channel.posted == ["Target.detachFromTarget"]


def test_a_renderer_stuck_outside_script_has_its_tab_replaced_never_leaving_the_browser_without_one() -> None:
    channel = Channel(terminates=False)
    channel.unresponsive.mark(FROZEN, 0.0)
    assert recover(channel, {"type": "recover_tab", "tab_id": FROZEN}, active=OTHER) == "T-NEW"
    assert channel.methods()[-2:] == ["Target.createTarget", "Target.closeTarget"]  # opened before closing
    assert channel.calls[-2][1] == {"url": "http://shop.test/slow", "background": True}
    assert channel.unresponsive.since(FROZEN) is None


def test_only_web_urls_are_loaded_again() -> None:
    channel = Channel(url="chrome-error://chromewebdata/")
    recover(channel, {"type": "recover_tab", "tab_id": FROZEN})
    assert channel.calls[-1] == ("Page.navigate", {"url": "about:blank"})


def test_a_page_that_answers_is_left_alone() -> None:
    channel = Channel(stuck=False)
    with pytest.raises(PageResponsiveError) as caught:
        recover(channel, {"type": "recover_tab", "tab_id": OTHER})
    assert caught.value.code == "page_responsive" and caught.value.detail == {"tab_id": OTHER}
    assert "Runtime.terminateExecution" not in channel.methods()


def test_a_tab_whose_dialog_is_open_is_not_recovered() -> None:
    """A tab with a JavaScript dialog open does not answer either, but it waits for an answer:
    closing or reloading it answers the dialog unjudged (a ``beforeunload``, "leave the page,
    what was typed is lost", is L2 to accept; recover_tab is L1). On main the daemon went on,
    stopped its script and put a new tab in its place."""
    channel = Channel(terminates=False)
    channel.dialogs.opened(FROZEN, "S0", {"type": "beforeunload", "message": "", "url": "http://shop.test/slow"})
    with pytest.raises(ExecutionError) as caught:
        recover(channel, {"type": "recover_tab", "tab_id": FROZEN})
    assert caught.value.code == "execution_failed" and caught.value.detail == {"reason": "dialog_open", "tab_id": FROZEN}
    assert channel.methods() == ["Target.getTargets"]


def test_an_unknown_tab_is_a_typed_error() -> None:
    with pytest.raises(ExecutionError) as caught:
        recover(Channel(), {"type": "recover_tab", "tab_id": "T-GONE"})
    assert caught.value.detail["reason"] == "no_such_tab"


def test_recover_tab_is_reversible_input() -> None:
    risk = ActionClassifier().classify(RecoverTab(type="recover_tab"), ActionContext(url="http://shop.test/"))
    assert risk.level == "L1" and "loads its URL again" in risk.reasons[0]


def test_automatic_recovery_needs_both_policies() -> None:
    assert tightened(Policy(recover_unresponsive=True), Policy(recover_unresponsive=True)).recover_unresponsive
    assert not tightened(Policy(recover_unresponsive=True), Policy()).recover_unresponsive
    assert not tightened(Policy(), Policy(recover_unresponsive=True)).recover_unresponsive


START = "http://shop.test/"
PAGES = {START: Page("Shop", "Welcome", [Button((100, 100, 300, 140), "Compute", freezes=True),
                                          Button((100, 200, 300, 240), "Next", goes_to="http://shop.test/next")]),
         "http://shop.test/next": Page("Next", "Second page")}
SPEC = TaskSpec.model_validate({"name": "frozen", "start_url": START, "success": {"page_text_contains": "Second page"},
                                "steps": [{"actions": [{"type": "click", "x": 150, "y": 120}]},
                                          {"actions": [{"type": "click", "x": 150, "y": 220}]}]})


def play(tmp_path: Path, policy: Policy) -> tuple[FakeSandbox, list[dict[str, Any]], str]:
    sandbox = FakeSandbox(PAGES)
    result = asyncio.run(run_task(SPEC, sandbox, audit_dir=tmp_path, policy=policy))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    return sandbox, events, result.status


def test_the_controller_recovers_a_stuck_tab_itself_when_the_policy_allows(tmp_path: Path) -> None:
    sandbox, events, status = play(tmp_path, Policy(recover_unresponsive=True))
    assert status == "succeeded"
    assert [a["type"] for a in sandbox.executed] == ["click", "recover_tab", "click"]
    assert sandbox.executed[1] == {"type": "recover_tab", "tab_id": "t1"}
    [record] = [e for e in events if e["event"] == "tab_recovered"]
    assert record["tab_id"] == "t1" and record["url"] == START and record["result"] == "recovered"
    assert record["unresponsive_s"] == 2.5 and record["step"] == 1


@pytest.mark.parametrize("policy", [
    Policy(), Policy(recover_unresponsive=True, blocked_actions=["recover_tab"]),
    # A policy that would have a person confirm a recover_tab: the controller asks no one, so it
    # recovers nothing itself (on main it reloaded the tab unconfirmed, a client's tightening
    # through deskpod serve included).
    Policy(recover_unresponsive=True, confirm_actions=["recover_tab"]),
    tightened(Policy(recover_unresponsive=True), Policy(recover_unresponsive=True, confirm_actions=["recover_tab"])),
])
def test_by_default_or_when_blocked_the_agent_is_told_and_nothing_is_recovered(tmp_path: Path, policy: Policy) -> None:
    sandbox, events, _ = play(tmp_path, policy)
    assert "recover_tab" not in [a["type"] for a in sandbox.executed]
    assert not [e for e in events if e["event"] == "tab_recovered"]


def test_the_vendor_formats_tell_the_model_the_front_tab_does_not_answer() -> None:
    """Their computer tools have no recover_tab: the note says how to get out (on main the
    model saw a still screen and nothing else)."""
    tabs = [Tab(id="A", url="http://shop.test/", title="", active=True), Tab(id="B", url="http://x.test/", title="", active=False)]
    stuck = UnresponsivePage(tab_id="A", url="http://shop.test/", unresponsive_s=3.0)
    front = Observation(tabs=tabs, unresponsive=[stuck])
    assert anthropic.dialog_note(front) == UNRESPONSIVE_NOTE and "ctrl+w" in UNRESPONSIVE_NOTE
    behind = Observation(tabs=tabs, unresponsive=[stuck.model_copy(update={"tab_id": "B"})])
    assert anthropic.dialog_note(behind) is None  # ctrl+w would close the tab that works
    both = Observation(tabs=tabs, unresponsive=[stuck], file_chooser=FileChooser(tab="A"))
    assert state_note(both) == f"{CHOOSER_NOTE} {UNRESPONSIVE_NOTE}"


@pytest.mark.parametrize("part", [
    {"unresponsive": [{"tab_id": "", "unresponsive_s": 3.0}]},
    {"dialogs": [{"type": "alert", "message": "hi", "tab_id": ""}]},
])
def test_a_hostile_reply_naming_a_tab_no_action_can_name_is_a_bad_reply(part: dict[str, Any]) -> None:
    """A tab a reply names is one the controller may send back in an action (``recover_tab``
    after the ``unresponsive`` list, a dialog's ``tab_id``): the reply's type for it is the
    action's. On main a daemon listing an unresponsive tab with an empty id passed the client's
    checks, and the controller's automatic recovery then died building its ``recover_tab``
    (a pydantic ValidationError out of the run, not a typed error)."""
    with pytest.raises(BadReplyError):
        parse_server_message(json.dumps({"type": "result", "id": "r", "observation": part}))
    with pytest.raises(BadReplyError):
        parse_server_message(json.dumps({"type": "result", "id": "r", "observation": {
            "unresponsive": [{"tab_id": "x" * 129, "unresponsive_s": 3.0}]}}))
    listed = parse_server_message(json.dumps({"type": "result", "id": "r", "observation": {
        "unresponsive": [{"tab_id": "x" * 128, "unresponsive_s": 3.0}],
        "dialogs": [{"type": "alert", "message": "hi", "tab_id": "y" * 128}]}}))
    assert listed.observation is not None
    for page in listed.observation.unresponsive:
        RecoverTab(type="recover_tab", tab_id=page.tab_id)
    for dialog in listed.observation.dialogs:
        parse_action({"type": "dialog_accept", "tab_id": dialog.tab_id})
