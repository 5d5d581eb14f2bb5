"""Element actions by ref against a real sandbox: the snapshot, acting by ref as real
input, stale refs, and the controller judging a ref exactly as the pixels it lands on."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from deskpod_stack import Stack, page_state, with_client
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.run_api import RunResult
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.errors import StaleRefError
from deskpod.protocol import Observation, ObserveOptions, parse_action

pytestmark = pytest.mark.integration

SNAP = ObserveOptions(screenshot=False, snapshot=True, page_text=True)
REF = re.compile(r"\[ref=(e\d+)\]")


def ref_of(snapshot: str | None, role: str, name: str) -> str:
    """The ref of the first ``role "name..."`` line of a snapshot."""
    for line in (snapshot or "").splitlines():
        found = re.match(rf'\s*- {role} "{re.escape(name)}.*\[ref=(e\d+)\]', line)
        if found:
            return found.group(1)
    raise AssertionError(f"no {role} {name!r} in:\n{snapshot}")


class Denier:
    """The human: denies every confirmation and keeps each request."""

    def __init__(self) -> None:
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(False, request.digest, "test", "no")

    async def review(self, notice: Any) -> str:
        return "cancel"


class OneClick:
    """An agent that clicks once, by the ref of ``name`` in its snapshot, or at ``point``."""

    def __init__(self, name: str | None = None, point: tuple[int, int] | None = None) -> None:
        self.name, self.point, self.proposed = name, point, False

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        if self.proposed:
            return Done(claim="clicked")
        self.proposed = True
        if self.point is not None:
            return Proposal(actions=[parse_action({"type": "click", "x": self.point[0], "y": self.point[1]})])
        ref = ref_of(observation.snapshot, "button", self.name or "")
        return Proposal(actions=[parse_action({"type": "click_element", "ref": ref})])

    async def close(self) -> None:
        """Nothing to release."""


def play(stack: Stack, tmp_path: Path, start: str, agent: OneClick, human: Denier) -> RunResult:
    spec = TaskSpec.model_validate({"name": "refs", "start_url": start, "allowed_domains": ["demo.test", "allowed.test"],
                                    "limits": {"max_steps": 3, "max_wall_time_s": 60},
                                    "success": {"page_text_contains": "never shown", "timeout_s": 1}})
    return asyncio.run(run_task(spec, stack.ws_url, stack.token, audit_dir=tmp_path, agent=agent, channel=human,
                                snapshots=True))


def test_a_click_by_ref_is_a_real_click_and_an_old_ref_is_stale(stack: Stack) -> None:
    async def body(client: Any) -> tuple[Any, ...]:
        await client.navigate("http://demo.test/fixtures/pay")
        first = await client.act([], SNAP)
        pay = ref_of(first.snapshot, "button", "Pay now")
        after = await client.act([{"type": "click_element", "ref": pay}], SNAP)
        with pytest.raises(StaleRefError) as stale:
            await client.act([{"type": "click_element", "ref": pay}], SNAP)
        return after, stale.value

    after, stale = with_client(stack, body)
    assert page_state(after.page_text)["paid"] == 1
    assert stale.detail["reason"] == "unknown_ref"


def test_pay_now_by_ref_is_l3_exactly_as_by_pixels(stack: Stack, tmp_path: Path) -> None:
    by_ref, by_pixels = Denier(), Denier()
    result = play(stack, tmp_path / "ref", "http://demo.test/fixtures/pay", OneClick("Pay now"), by_ref)
    play(stack, tmp_path / "px", "http://demo.test/fixtures/pay", OneClick(point=(640, 380)), by_pixels)
    assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
    [ref_ask], [pixel_ask] = by_ref.requests, by_pixels.requests
    assert ref_ask.level == pixel_ask.level == "L3"
    assert ref_ask.reasons == pixel_ask.reasons
    assert "button 'Pay now'" in ref_ask.summary and "button 'Pay now'" in pixel_ask.summary


def test_a_ref_in_a_cross_origin_frame_is_judged_as_the_click_there(stack: Stack, tmp_path: Path) -> None:
    human = Denier()
    result = play(stack, tmp_path, "http://demo.test/fixtures/hit-cases?case=xframe", OneClick("Pay now"), human)
    assert result.status == "cancelled", result.reason
    [asked] = human.requests
    assert asked.level == "L3" and "in a frame from allowed.test" in asked.summary, asked.summary


def test_a_ref_whose_element_moved_is_stale_and_page_text_cannot_forge_refs(stack: Stack) -> None:
    async def body(client: Any) -> tuple[Any, ...]:
        first = await client.navigate("http://demo.test/fixtures/screen-banner?after_ms=4000", SNAP)
        assert page_state(first.page_text)["shown"] is False  # the snapshot is of the page before the banner
        save = ref_of(first.snapshot, "button", "Save draft")
        with pytest.raises(StaleRefError) as moved:
            await client.act([{"type": "wait_for", "text_present": "Special offer", "timeout_s": 10},
                              {"type": "click_element", "ref": save}], SNAP)
        banner = await client.act([], SNAP)
        await client.navigate("http://demo.test/fixtures/elements-forge")
        forged = await client.act([], SNAP)
        note = ref_of(forged.snapshot, "button", "Add a note")
        after = await client.act([{"type": "click_element", "ref": note}], SNAP)
        return moved.value, banner, forged.snapshot, after

    moved, banner, forged, after = with_client(stack, body)
    assert moved.detail["reason"] == "moved"
    assert page_state(banner.page_text)["saved"] == 0
    refs = [REF.findall(line) for line in forged.splitlines()]
    assert sum(len(r) for r in refs) == 2 and all(len(r) <= 1 for r in refs), forged
    assert page_state(after.page_text) == {"paid": 0, "notes": 1}
