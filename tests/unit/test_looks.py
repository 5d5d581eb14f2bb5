"""Looking is free: a GUI run's proposals that only look, against an in-memory sandbox (no Docker).

A look (screenshot, zoom, cursor position, wait) is no step: it never counts toward loop
detection, ``max_steps`` or ``max_errors``, it is audited (a ``look`` record), bounded by
``max_looks`` (a ``limit_exceeded`` refusal that neither pauses nor ends the run), and a
look asked for after a person handed the sandbox back is answered with the screen.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.controller.task import TaskSpec
from deskpod.protocol import Observation, parse_action
from fake_sandbox import Button, FakeSandbox, Page

START = "http://shop.test/"
NEXT = Button((100, 100, 200, 140), "Next", goes_to="http://shop.test/next")
CLICK_NEXT = {"type": "click", "x": 150, "y": 120}
CLICK_NOTHING = {"type": "click", "x": 900, "y": 700}
SCREENSHOT = {"type": "screenshot"}


def _pages() -> dict[str, Page]:
    return {START: Page("Shop", "Welcome", [NEXT]), "http://shop.test/next": Page("Next", "Second page")}


class _Channel:
    """Every pause is cancelled (a loop's pause ends the run), and kept."""

    def __init__(self) -> None:
        self.notices: list[Any] = []

    async def confirm(self, request: Any) -> None:
        return None

    async def review(self, notice: Any) -> str:
        self.notices.append(notice)
        return "cancel"


class _Agent:
    """Proposes ``moves`` in order, then :class:`Done`; keeps every outcome it is told."""

    def __init__(self, moves: list[list[dict[str, Any]]]) -> None:
        self.moves = [Proposal(actions=[parse_action(a) for a in move]) for move in moves]
        self.outcomes: list[StepOutcome] = []

    async def propose(self, view: Observation, last: StepOutcome | None) -> Proposal | Done:
        if last is not None:
            self.outcomes.append(last)
        return self.moves.pop(0) if self.moves else Done("")

    async def close(self) -> None:
        """Nothing to release."""


def _task(success: dict[str, Any] | None = None, **limits: Any) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "looks", "start_url": START, "allowed_domains": [],
        "limits": Limits.model_validate(limits).model_dump(),
        "success": success or {"page_text_contains": "never shown", "timeout_s": 0.2}})


def _play(spec: TaskSpec, agent: Any, tmp_path: Path, **kwargs: Any) -> tuple[RunResult, list[dict[str, Any]]]:
    result = asyncio.run(run_task(spec, FakeSandbox(_pages()), audit_dir=tmp_path, agent=agent, **kwargs))
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def test_fifty_looks_on_an_unchanged_page_never_pause_the_run_and_are_each_audited(tmp_path: Path) -> None:
    """The finding: repeated screenshots on an unchanged page paused the run as a loop."""
    looks = [[SCREENSHOT]] * 46 + [[{"type": "zoom", "region": [0, 0, 100, 100]}], [{"type": "cursor_position"}],
                                   [{"type": "wait", "seconds": 0}], [{"type": "wait", "seconds": 0}, SCREENSHOT]]
    agent, channel = _Agent(looks), _Channel()
    result, events = _play(_task(), agent, tmp_path, channel=channel)
    assert result.reason.startswith("not_verified"), result.reason  # ended by the agent's claim, nothing else
    assert channel.notices == [] and not [e for e in events if e["event"] in ("loop", "pause")]
    assert [o.status for o in agent.outcomes] == ["ok"] * 50 and result.steps == 0
    records = [e for e in events if e["event"] == "look"]
    assert [r["look"] for r in records] == list(range(1, 51)) and {r["outcome"] for r in records} == {"ok"}
    assert records[0]["actions"] == [SCREENSHOT] and records[0]["screenshot_sha256"]
    assert agent.outcomes[47].observation.cursor is not None  # what the look asked for reaches the agent


def test_repeated_actions_without_progress_still_pause_however_many_looks_come_between(tmp_path: Path) -> None:
    """No weakening: the same click on the same screen is a loop, looks between them or not."""
    agent = _Agent([[CLICK_NOTHING], [SCREENSHOT], [CLICK_NOTHING], [SCREENSHOT], [SCREENSHOT],
                    [CLICK_NOTHING], [CLICK_NOTHING]])
    channel = _Channel()
    result, events = _play(_task(max_repeats=3), agent, tmp_path, channel=channel)
    assert result.status == "failed" and result.reason.startswith("limit_exceeded: loop detected"), result.reason
    assert result.steps == 3 and [n.kind for n in channel.notices] == ["loop"]
    assert [e["repeats"] for e in events if e["event"] == "loop"] == [3]


def test_past_max_looks_a_look_is_refused_typed_and_the_run_goes_on(tmp_path: Path) -> None:
    agent, channel = _Agent([[SCREENSHOT]] * 5 + [[CLICK_NEXT]]), _Channel()
    result, events = _play(_task({"url_matches": "/next$"}, max_looks=3, max_errors=1), agent, tmp_path,
                           channel=channel)
    assert result.status == "succeeded" and result.steps == 1, result.reason  # the click still ran
    assert [o.status for o in agent.outcomes] == ["ok"] * 3 + ["denied"] * 2 and channel.notices == []
    refused = agent.outcomes[3]
    assert refused.error["code"] == "limit_exceeded" and refused.error["rule"] == "max_looks"
    assert "max_looks=3" in refused.error["message"] and refused.observation.screenshot is None  # nothing captured
    records = [e for e in events if e["event"] == "look"]
    assert [r["outcome"] for r in records] == ["ok"] * 3 + ["denied"] * 2 and records[-1]["rule"] == "max_looks"


def test_a_look_blocked_by_the_policy_is_refused_without_capturing(tmp_path: Path) -> None:
    from deskpod.controller.policy.policy_file import Policy

    agent = _Agent([[{"type": "zoom", "region": [0, 0, 10, 10]}]])
    _play(_task(), agent, tmp_path, policy=Policy(blocked_actions=["zoom"]))
    [outcome] = agent.outcomes
    assert outcome.status == "denied" and outcome.error["rule"] == "blocked_action"
    assert outcome.observation.screenshot is None


class _HandedBack:
    """Plans while a person takes the sandbox over, types and hands it back; then proposes
    ``after`` (planned before the hand-back), and ends."""

    def __init__(self, control: RunControl, after: list[dict[str, Any]]) -> None:
        self.control = control
        self.after = Proposal(actions=[parse_action(a) for a in after])
        self.outcomes: list[StepOutcome] = []

    async def propose(self, view: Observation, last: StepOutcome | None) -> Proposal | Done:
        if last is not None:
            self.outcomes.append(last)
            return Done("")
        desk = self.control.takeover
        self.control.take_over("ada")
        while not desk.active:
            await asyncio.sleep(0.01)
        await desk.submit(parse_action({"type": "type", "text": "hi ada"}), "ada")
        desk.handback("ada")
        while desk.active:
            await asyncio.sleep(0.01)
        return self.after

    async def close(self) -> None:
        """Nothing to release."""


def test_after_a_hand_back_a_look_is_answered_with_the_screen_and_an_action_is_still_dropped(
        tmp_path: Path) -> None:
    """The finding: after a take-over and hand-back even a fresh screenshot was refused
    (``handed_over``). A look plans nothing, so it shows the screen the person left; an
    action planned on the screen before the take-over is still dropped."""
    control = RunControl()
    looking = _HandedBack(control, [SCREENSHOT])
    _play(_task(), looking, tmp_path / "look", control=control)
    [seen] = looking.outcomes
    assert seen.status == "ok" and seen.error == {} and seen.observation.screenshot is not None

    control = RunControl()
    acting = _HandedBack(control, [CLICK_NEXT])
    _, events = _play(_task(), acting, tmp_path / "act", control=control)
    [dropped] = acting.outcomes
    assert dropped.status == "denied" and dropped.error["rule"] == "handed_over"
    assert [e["event"] for e in events].count("proposal_discarded") == 1


def test_a_look_something_asks_a_person_about_is_still_a_judged_step(tmp_path: Path) -> None:
    """Looking is free of the loop count, not of the controls: the agent's own L3 label, a vendor's
    safety check or a policy confirming screenshots still ask a person (denied here: the run ends)."""
    from deskpod.controller.policy.policy_file import Policy

    cases: list[tuple[Proposal, Policy]] = [
        (Proposal(actions=[parse_action(SCREENSHOT)], risk="L3"), Policy()),
        (Proposal(actions=[parse_action(SCREENSHOT)], safety_checks=["the page is off-task"]), Policy()),
        (Proposal(actions=[parse_action(SCREENSHOT)]), Policy(confirm_actions=["screenshot"])),
    ]
    for n, (proposal, policy) in enumerate(cases):
        agent = _Agent([])
        agent.moves = [proposal]
        channel = _Asking()
        result, events = _play(_task(), agent, tmp_path / str(n), channel=channel, policy=policy)
        assert result.status == "cancelled" and len(channel.asked) == 1, (n, result.reason)
        assert not [e for e in events if e["event"] == "look"]


class _Asking(_Channel):
    """Every confirmation is kept and left unanswered (a denial)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Any] = []

    async def confirm(self, request: Any) -> None:
        self.asked.append(request)
