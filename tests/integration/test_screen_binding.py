"""Pointer actions bound to the screen they were planned on, against the real sandbox.

Two demo fixtures change what is under a point between the agent's screenshot and
its click: ``screen-banner`` inserts a banner link where a button was, 4 s after
load; ``screen-swap`` turns "Add a note" into "Pay now" on the first ``mousemove``
over it. Without an expectation the click lands on what moved in (the behaviour of
main before the check); with one the daemon refuses with ``screen_changed`` and
nothing is pressed; a run gives the agent the fresh observation and goes on. What a
test asserts is read back from the page's ``STATE`` line.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from deskpod_stack import Stack, page_state, with_client
from deskpod.client import SandboxClient
from deskpod.controller import run_task
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.protocol.expect import expectation
from deskpod.controller.task import TaskSpec
from deskpod.errors import ScreenChangedError
from deskpod.protocol import Click, Move, Observation, ObserveOptions, Point, ScreenExpectation

pytestmark = pytest.mark.integration

BANNER = "http://demo.test/fixtures/screen-banner?after_ms=4000"
SWAP = "http://demo.test/fixtures/screen-swap"
BUTTON = Click(type="click", x=640, y=330)
"""The centre of either fixture's button at 1280x800 (the banner's place once it is in)."""


async def fresh_page(client: SandboxClient, url: str) -> Observation:
    """Park the pointer off the page's controls, load ``url`` and return a screenshot of it
    painted (the first load of a new browser can be observed before its first paint)."""
    await client.act([Move(type="move", x=20, y=780)], ObserveOptions(screenshot=False, settle=False))
    await client.navigate(url, ObserveOptions(screenshot=False))
    await asyncio.sleep(0.3)
    return await client.act([], ObserveOptions(page_text=True))


async def state_of(client: SandboxClient) -> dict:
    obs = await client.act([], ObserveOptions(screenshot=False, page_text=True))
    return page_state(obs.page_text)


async def wait_banner(client: SandboxClient) -> None:
    for _ in range(100):
        if (await state_of(client))["shown"]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the banner never appeared")


async def judged(client: SandboxClient) -> Observation:
    """The controller's probe of the control under the button's point."""
    return await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=BUTTON.x, y=BUTTON.y)))


def test_without_a_check_the_click_lands_on_the_banner_that_moved_in(stack: Stack) -> None:
    """The old behaviour: planned on the screen before the banner, the click presses the banner."""

    async def body(client: SandboxClient) -> dict:
        seen = await fresh_page(client, BANNER)
        assert not page_state(seen.page_text)["shown"]
        await wait_banner(client)
        await client.act([BUTTON], ObserveOptions(screenshot=False))
        return await state_of(client)

    state = with_client(stack, body)
    assert state["banner"] == 1 and state["saved"] == 0


def test_the_daemon_refuses_a_click_whose_region_changed_and_presses_nothing(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[dict, dict]:
        seen = await fresh_page(client, BANNER)
        assert not page_state(seen.page_text)["shown"]
        await wait_banner(client)
        probe = await judged(client)
        expect = expectation(BUTTON, seen, probe)
        assert expect is not None
        with pytest.raises(ScreenChangedError) as caught:
            await client.act([BUTTON], ObserveOptions(screenshot=False), expect=expect)
        return caught.value.detail, await state_of(client)

    detail, state = with_client(stack, body)
    assert detail["reason"] == "region" and detail["action_index"] == 0 and detail["changed_px"] > 64
    assert state["banner"] == 0 and state["saved"] == 0


def test_a_click_on_an_unchanged_screen_goes_through(stack: Stack) -> None:
    """The check does not refuse the ordinary case: the same screen, the same control
    (the button repaints under the pointer on hover, which the check allows for)."""

    async def body(client: SandboxClient) -> dict:
        seen = await fresh_page(client, BANNER.replace("4000", "600000"))
        expect = expectation(BUTTON, seen, await judged(client))
        await client.act([BUTTON], ObserveOptions(screenshot=False), expect=expect)
        return await state_of(client)

    state = with_client(stack, body)
    assert state["saved"] == 1 and state["banner"] == 0


def test_without_a_check_a_label_swapped_on_mousemove_gets_pay_pressed(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Observation, dict]:
        await fresh_page(client, SWAP)
        probe = await judged(client)
        await client.act([BUTTON], ObserveOptions(screenshot=False))
        return probe, await state_of(client)

    probe, state = with_client(stack, body)
    assert probe.element_at is not None and probe.element_at.text == "Add a note"
    assert state["paid"] == 1 and state["notes"] == 0


def test_the_daemon_refuses_a_click_whose_label_changed_under_the_pointer(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[dict, dict]:
        seen = await fresh_page(client, SWAP)
        expect = expectation(BUTTON, seen, await judged(client))
        with pytest.raises(ScreenChangedError) as caught:
            await client.act([BUTTON], ObserveOptions(screenshot=False), expect=expect)
        return caught.value.detail, await state_of(client)

    detail, state = with_client(stack, body)
    assert detail["reason"] == "element"
    assert state == {"paid": 0, "notes": 0, "swapped": True}


def test_a_screenshot_the_daemon_never_took_is_refused(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[dict, dict]:
        await fresh_page(client, SWAP)
        with pytest.raises(ScreenChangedError) as caught:
            await client.act([BUTTON], ObserveOptions(screenshot=False),
                             expect=ScreenExpectation(screenshot_sha256="0" * 64))
        return caught.value.detail, await state_of(client)

    detail, state = with_client(stack, body)
    assert detail["reason"] == "unknown_screenshot" and state["paid"] == 0 and state["notes"] == 0


class SlowAgent:
    """Plans each proposal for ``think_s`` seconds (a model's latency) and keeps what it was shown."""

    def __init__(self, proposals: list[Proposal], think_s: float) -> None:
        self.proposals = proposals
        self.think_s = think_s
        self.seen: list[tuple[Observation, StepOutcome | None]] = []

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        self.seen.append((observation, last))
        if not self.proposals:
            return Done("done")
        await asyncio.sleep(self.think_s)
        return self.proposals.pop(0)

    async def close(self) -> None:
        return None


def run(stack: Stack, tmp_path: Path, start: str, agent: SlowAgent) -> tuple[Any, list[dict]]:
    task = TaskSpec.model_validate({"name": "screen-binding", "start_url": start, "allowed_domains": ["demo.test"],
                                    "limits": {"max_steps": 5, "max_wall_time_s": 90},
                                    "success": {"timeout_s": 1, "page_text_contains": "never shown"}})

    async def main() -> Any:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        try:
            await fresh_page(client, start)  # the run's own first load is then painted before it is observed
            return await run_task(task, client, audit_dir=tmp_path / "audit", agent=agent)
        finally:
            await client.close()

    result = asyncio.run(main())
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


@pytest.mark.parametrize("start, reason", [(BANNER, "region"), (SWAP, "element")])
def test_a_run_refuses_the_step_and_shows_the_agent_the_new_screen(stack: Stack, tmp_path: Path, start: str,
                                                                  reason: str) -> None:
    """The agent plans on the first screenshot; by the time its click is sent the banner is
    in (or the label swaps under the pointer). The step is refused with ``screen_changed``,
    nothing is pressed, and the agent's next turn gets a fresh observation of the new screen."""
    agent = SlowAgent([Proposal(actions=[BUTTON])], think_s=5.0 if start == BANNER else 0.0)
    result, log = run(stack, tmp_path, start, agent)
    (first, _), (second, last) = agent.seen[:2]
    assert last is not None and last.status == "denied" and last.error["code"] == "screen_changed"
    assert reason in last.error["message"]
    state = page_state(second.page_text)
    assert state.get("banner", 0) == 0 and state.get("saved", 0) == 0 and state.get("paid", 0) == 0
    assert state.get("notes", 0) == 0
    assert first.screenshot is not None and second.screenshot is not None
    assert first.screenshot.sha256 != second.screenshot.sha256
    steps = [e for e in log if e["event"] == "step"]
    assert steps[0]["decision"] == "denied" and steps[0]["rule"] == "screen_changed"
    assert result.status == "failed" and "not_verified" in result.reason


LOGIN = "http://demo.test/fixtures/login"
PASSWORD = Click(type="click", x=640, y=370)
"""A click at the centre of the sign-in fixture's password field at 1280x800..."""
PASSWORD_POINT = Point(x=640, y=370)
"""... and that point, for the controller's probe."""


def test_a_click_on_a_password_field_that_holds_a_value_goes_through(stack: Stack) -> None:
    """An agent clicks back into a password field it has typed into: the same screen and
    the same control, so the check lets the click through (a refusal with reason
    ``element`` was reported from a takeover session)."""

    async def body(client: SandboxClient) -> tuple[Any, dict]:
        await fresh_page(client, LOGIN)
        await client.act([PASSWORD, {"type": "type", "text": "hunter2"}], ObserveOptions(screenshot=False))
        await client.act([Move(type="move", x=20, y=780)], ObserveOptions(screenshot=False))
        seen = await client.act([], ObserveOptions())
        probe = await client.act([], ObserveOptions(screenshot=False, element_at=PASSWORD_POINT))
        try:
            await client.act([PASSWORD], ObserveOptions(screenshot=False), expect=expectation(PASSWORD, seen, probe))
        except ScreenChangedError as exc:
            after = await client.act([], ObserveOptions(screenshot=False, element_at=PASSWORD_POINT))
            raise AssertionError(f"{exc.detail}: judged {probe.element_at}, now {after.element_at}") from exc
        return probe.element_at, await state_of(client)

    element, state = with_client(stack, body)
    assert element is not None and element.input_type == "password"
    assert state == {"password_length": 7}


FLIP = "http://demo.test/fixtures/screen-flip?ms=2&swap="
"""The fixture whose button flips between "Add a note" and "Pay now" every 2 ms, by its
text (``label``) or by another node swapped in (``node``), whatever the pointer does."""


async def press_stage_tries(client: SandboxClient, url: str, wanted: int) -> tuple[Counter[str], dict]:
    """Clicks judged on "Add a note" (the controller's probe, read until it says so), each
    bound to that control and the URL (no region: the page flips under any screenshot), until
    ``wanted`` of them passed the daemon's checks before the press (at most 30 times as many
    tries). Returns the outcomes of those and the page's counters."""
    await fresh_page(client, url)
    for _ in range(100):
        probe = await client.act([], ObserveOptions(screenshot=False, settle=False,
                                                    element_at=Point(x=BUTTON.x, y=BUTTON.y)))
        if probe.element_at is not None and probe.element_at.text == "Add a note":
            break
    else:
        raise AssertionError("the probe never read \"Add a note\"")
    expect = ScreenExpectation(element=probe.element_at, url=probe.url)
    outcomes: Counter[str] = Counter()
    for _ in range(30 * wanted):
        if sum(outcomes.values()) >= wanted:
            break
        try:
            await client.act([BUTTON], ObserveOptions(screenshot=False, settle=False), expect=expect)
        except ScreenChangedError as exc:
            if exc.detail["reason"] == "element":
                continue  # refused before the press: the daemon's own check saw the flip
            outcomes[exc.detail["reason"]] += 1
        else:
            outcomes["sent"] += 1
        await client.act([Move(type="move", x=20, y=780)], ObserveOptions(screenshot=False, settle=False))
    await asyncio.sleep(0.3)
    return outcomes, await state_of(client)


@pytest.mark.parametrize("swap, tries", [("label", 20), ("node", 6), ("label&listen=document", 4),
                                         ("node&frame=same", 4), ("label&frame=cross&listen=window", 4)])
def test_a_control_flipped_on_a_2_ms_timer_is_never_pressed_as_pay_now(stack: Stack, swap: str, tries: int) -> None:
    """The residual between the daemon's last check and the press: a page flipping its button
    every 2 ms got "Pay now" pressed in about 1 of 8 clicks judged on "Add a note" (``python
    -m bench swap``). With the press guard, of the clicks that passed every check before the
    press, none presses "Pay now": each either lands on "Add a note" or is refused (reason
    ``press``) with the page's events stopped. On main before the guard, about half of them
    paid. Also when the page counts presses from a capture listener on ``document`` (inner
    capture path) or ``window`` (added by its first script), and when the button is in a
    same-origin frame or an out-of-process (cross-site) one."""

    async def body(client: SandboxClient) -> tuple[Counter[str], dict]:
        return await press_stage_tries(client, FLIP + swap, tries)

    outcomes, state = with_client(stack, body)
    assert sum(outcomes.values()) == tries, outcomes
    assert state["paid"] == 0, (outcomes, state)
    assert state["notes"] == outcomes["sent"], (outcomes, state)
    assert set(outcomes) <= {"sent", "press"}, outcomes


def test_a_control_taken_out_and_put_back_during_the_press_is_refused_not_reported_pressed(stack: Stack) -> None:
    """The page's own ``mousedown`` listener takes the judged button out of the page and
    puts it straight back: Chromium makes no click of that press, so the daemon must not
    answer that it landed. A clean-clone CI run saw the same from the 2 ms node swap (the
    button swapped out and back between ``mousedown`` and ``mouseup``): a press reported
    sent, nothing counted. On main each such press was reported sent."""

    async def body(client: SandboxClient) -> tuple[Counter[str], dict]:
        return await press_stage_tries(client, FLIP + "label&stop=1&reinsert=1", 2)

    outcomes, state = with_client(stack, body)
    assert outcomes == Counter(press=2) and state["notes"] == 0 and state["paid"] == 0, (outcomes, state)


FRAMED = FLIP + "label&stop=1&frame=same"
"""The honest page ("Add a note" only) that is nothing but a same-origin ``<iframe>`` holding it."""


def test_a_click_chromium_drops_before_the_page_is_drawn_is_refused_and_the_next_click_lands(stack: Stack) -> None:
    """A page that is only a same-origin frame is not drawn for about a second after it loads,
    and Chromium drops input sent to it meanwhile (``DropInputEventsWhilePaintHolding``): the
    agent's first guarded click there, right after loading it, never reached the page. On
    main it was answered sent with nothing pressed (5 of 6 loads; a clean-clone CI run met it
    as the flipping test's one "sent" without a note). Now such a press is refused (reason
    ``press``, its ``pointerup`` ``not_received``), every press answered sent is one the page
    counted, and the next click lands, also one sent without the guard (the closed guard
    stops only the dropped press's own events, should they arrive late)."""

    async def body(client: SandboxClient) -> tuple[str, int]:
        await client.act([Move(type="move", x=20, y=780)], ObserveOptions(screenshot=False, settle=False))
        await client.navigate(FRAMED, ObserveOptions(screenshot=False))
        probe = await client.act([], ObserveOptions(screenshot=False, settle=False,
                                                    element_at=Point(x=BUTTON.x, y=BUTTON.y)))
        expect = ScreenExpectation(element=probe.element_at, url=probe.url)
        outcomes = []
        for guarded in (expect, None):
            try:
                await client.act([BUTTON], ObserveOptions(screenshot=False, settle=False), expect=guarded)
            except ScreenChangedError as exc:
                outcomes.append(",".join(why for _, why in exc.detail.get("stopped", [])) or exc.detail["reason"])
            else:
                outcomes.append("sent")
        await asyncio.sleep(0.3)
        return "+".join(outcomes), (await state_of(client))["notes"]

    rounds = [with_client(stack, body) for _ in range(6)]  # each a new session, as an agent's
    assert all(notes == outcome.count("sent") for outcome, notes in rounds), rounds
    assert all(outcome in ("sent+sent", "not_received+sent") for outcome, _ in rounds), rounds
    assert any(outcome == "not_received+sent" for outcome, _ in rounds), rounds


def test_the_press_guard_lets_an_honest_click_through(stack: Stack) -> None:
    """The same page, not flipping: ten guarded clicks on "Add a note" all land."""

    async def body(client: SandboxClient) -> tuple[Counter[str], dict]:
        return await press_stage_tries(client, FLIP + "label&stop=1", 10)

    outcomes, state = with_client(stack, body)
    assert outcomes == Counter(sent=10) and state["notes"] == 10 and state["paid"] == 0
