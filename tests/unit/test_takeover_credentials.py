"""Takeover, credentials and host-held secrets in the run loop, against the in-memory sandbox.

The fake here also reports a focused element (a password field, or a text field a page
moved the focus to) and refuses an ``act`` whose expectation names another focus, the
way the daemon does (:mod:`deskpod.agentd.screen_check`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from deskpod.controller.credentials import (
    CredentialAnswer,
    CredentialRequest,
    HostSecret,
    RequestCredential,
    SecretStore,
    TypeSecret,
    credential_field_refusal,
    scrub_observation,
)
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.errors import ScreenChangedError, SettingsError
from deskpod.protocol import AgentWindow, FocusedElement, Observation, ObserveOptions, ScreenExpectation, parse_action
from fake_sandbox import FakeSandbox, Page

START = "http://shop.test/login"
PASSWORD = FocusedElement(tag="input", role="textbox", name="Password", input_type="password", is_password=True,
                          editable=True)
TEXT = FocusedElement(tag="input", role="textbox", name="Comment", input_type="text", editable=True)
SECRET = "hunter2-Zq9!"


@dataclass
class FocusFake(FakeSandbox):
    """The fake sandbox with a focused element; ``steal_after`` observations the focus moves to a text field."""

    focus: FocusedElement | None = PASSWORD
    steal_after: int | None = None

    async def act(self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
                  timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *,
                  allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        if self.steal_after is not None and self.observations >= self.steal_after:
            self.focus = TEXT
        if expect is not None and expect.focus is not None and expect.focus != self.focus:
            self.expectations.append(expect)
            raise ScreenChangedError("the focus changed (fake)", detail={"reason": "focus"})
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        return obs.model_copy(update={"focused": self.focus})


class Agent:
    """Proposes ``moves`` in order, then done; keeps every observation and outcome it was given."""

    def __init__(self, moves: list[list[BaseModel]]) -> None:
        self.moves = moves
        self.seen: list[tuple[Observation, StepOutcome | None]] = []

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        self.seen.append((observation, last))
        if not self.moves:
            return Done("done")
        return Proposal(actions=self.moves.pop(0))

    async def close(self) -> None:
        """Nothing to release."""


class Channel:
    """Denies confirmations; answers credential requests with ``secret`` (``None``: declines)."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret
        self.asked: list[CredentialRequest] = []

    async def confirm(self, request: Any) -> None:
        return None

    async def review(self, notice: Any) -> None:
        return None

    async def credential(self, request: CredentialRequest) -> CredentialAnswer:
        self.asked.append(request)
        return CredentialAnswer(SecretStr(self.secret) if self.secret else None, "alice")


def spec() -> TaskSpec:
    return TaskSpec.model_validate({"name": "login", "start_url": START, "allowed_domains": ["shop.test"],
                                    "success": {"page_text_contains": "never", "timeout_s": 0.1}})


def play(sandbox: FakeSandbox, agent: Agent, tmp_path: Path, **kwargs: Any) -> tuple[RunResult, str]:
    result = asyncio.run(run_task(spec(), sandbox, audit_dir=tmp_path, agent=agent, **kwargs))
    # The fake's "screenshots" render typed text unmasked (Chromium masks a password field):
    # every other file is searched.
    every = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*")
                    if p.is_file() and p.suffix not in (".png", ".jpeg", ".webp"))
    return result, every


def typed(sandbox: FakeSandbox) -> str:
    return sandbox.typed.get(START, "")


def store() -> SecretStore:
    return SecretStore([HostSecret("SHOP_PW", SecretStr(SECRET), ("shop.test",)),
                        HostSecret("BANK_PW", SecretStr("bank-secret-1"), ("bank.test",))])


def test_a_host_secret_is_typed_into_the_checked_password_field_and_logged_by_name(tmp_path: Path) -> None:
    sandbox = FocusFake({START: Page("Sign in")})
    agent = Agent([[TypeSecret(type="type_secret", name="SHOP_PW")]])
    result, every = play(sandbox, agent, tmp_path, secrets=store())
    assert typed(sandbox) == SECRET
    bound = [e for e in sandbox.expectations if e.focus is not None]
    assert bound and bound[0].focus == PASSWORD and bound[0].radius_px is None and bound[0].screenshot_sha256
    assert SECRET not in every and "SHOP_PW" in every
    outcome = agent.seen[1][1]
    assert outcome is not None and outcome.status == "ok", outcome
    assert SECRET not in json.dumps([o.model_dump(mode="json") for o, _ in agent.seen])
    assert result.status == "succeeded" or "never" in result.reason


@pytest.mark.parametrize(("name", "focus", "rule"), [
    ("BANK_PW", PASSWORD, "credential_domain"),   # the secret's own domain is not this page's
    ("SHOP_PW", TEXT, "credential_field"),        # not a password field
    ("NOPE", PASSWORD, "unknown_secret"),
])
def test_a_host_secret_is_refused_off_its_domains_outside_a_password_field_or_unknown(
        tmp_path: Path, name: str, focus: FocusedElement, rule: str) -> None:
    sandbox = FocusFake({START: Page("Sign in")}, focus=focus)
    agent = Agent([[TypeSecret(type="type_secret", name=name)]])
    _, every = play(sandbox, agent, tmp_path, secrets=store())
    assert typed(sandbox) == ""
    outcome = agent.seen[1][1]
    assert outcome is not None and outcome.status == "denied" and outcome.error["rule"] == rule, outcome
    assert SECRET not in every and "bank-secret-1" not in every


def test_a_page_that_moves_the_focus_before_the_keys_gets_nothing(tmp_path: Path) -> None:
    # The focus is a password field when the controller checks it, a text field when the keys would go.
    sandbox = FocusFake({START: Page("Sign in")}, steal_after=2)
    agent = Agent([[TypeSecret(type="type_secret", name="SHOP_PW")]])
    _, every = play(sandbox, agent, tmp_path, secrets=store())
    assert typed(sandbox) == "" and SECRET not in every
    outcome = agent.seen[1][1]
    assert outcome is not None and outcome.status == "denied", outcome


def test_a_person_gives_a_credential_the_agent_and_the_log_never_see(tmp_path: Path) -> None:
    sandbox = FocusFake({START: Page("Sign in")})
    channel = Channel(SECRET)
    agent = Agent([[RequestCredential(type="request_credential", label="shop password")]])
    _, every = play(sandbox, agent, tmp_path, channel=channel)
    assert typed(sandbox) == SECRET and channel.asked[0].field_name == "Password"
    assert channel.asked[0].to_json()["field"] == {"role": "textbox", "name": "Password"}
    assert SECRET not in every and "shop password" in every and "human:alice" in every
    assert SECRET not in json.dumps([o.model_dump(mode="json") for o, _ in agent.seen])


def test_a_declined_credential_or_a_domain_off_the_run_types_nothing(tmp_path: Path) -> None:
    sandbox = FocusFake({START: Page("Sign in")})
    agent = Agent([[RequestCredential(type="request_credential", label="pw")],
                   [RequestCredential(type="request_credential", label="pw", domains=["evil.test"])]])
    play(sandbox, agent, tmp_path, channel=Channel(None))
    assert typed(sandbox) == ""
    rules = [last.error.get("rule") for _, last in agent.seen[1:] if last is not None]
    assert rules == ["credential_declined", "credential_domain"]


def test_a_page_that_shows_the_typed_secret_as_text_is_scrubbed_before_anyone_reads_it() -> None:
    obs = Observation(settled=True, url="http://shop.test/?echo=" + SECRET, title=f"hello {SECRET}",
                      page_text=f"you typed {SECRET}")
    clean = scrub_observation(obs, [SECRET])
    assert SECRET not in clean.model_dump_json() and clean.page_text == "you typed [secret]"


def test_the_credential_field_check() -> None:
    assert credential_field_refusal(PASSWORD, START, ["shop.test"]) is None
    # A one-time-code text field shows what is typed: the screenshot would hold the secret.
    otp = FocusedElement(tag="input", input_type="text", autocomplete="one-time-code", editable=True)
    assert "not a password field" in (credential_field_refusal(otp, START, ["shop.test"]) or "")
    masked_otp = otp.model_copy(update={"input_type": "password"})
    assert credential_field_refusal(masked_otp, START, ["shop.test"]) is None
    assert credential_field_refusal(TEXT, START, ["shop.test"]) is not None
    assert credential_field_refusal(None, START, ["shop.test"]) is not None
    assert credential_field_refusal(PASSWORD, "http://evil.test/", ["shop.test"]) is not None
    # A window of the agent's programs with the keyboard focus would get the keys, whatever the page's focus.
    terminal = AgentWindow(app="XTerm", box=[0, 0, 10, 10])
    assert "agent's own programs" in (credential_field_refusal(PASSWORD, START, ["shop.test"], terminal) or "")
    framed = PASSWORD.model_copy(update={"frame": "http://evil.test/frame"})
    assert credential_field_refusal(framed, START, ["shop.test"]) is not None


def test_host_secrets_come_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    env = {"DESKPOD_SECRET_SHOP_PW": SECRET, "DESKPOD_SECRET_SHOP_PW_DOMAINS": "shop.test, www.shop.test"}
    held = SecretStore.from_env(env).get("SHOP_PW")
    assert held.value.get_secret_value() == SECRET and held.domains == ("shop.test", "www.shop.test")
    assert SECRET not in repr(held)
    with pytest.raises(SettingsError, match="domains"):
        SecretStore.from_env({"DESKPOD_SECRET_X": "value"})
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"BANK": {"value": "b-secret", "domains": ["bank.test"]}}))
    os.chmod(path, 0o600)
    assert SecretStore.from_env({}, path).names == ["BANK"]
    for mode in (0o644, 0o640, 0o606):
        os.chmod(path, mode)
        with pytest.raises(SettingsError, match="0600"):
            SecretStore.from_env({}, path)
    os.chmod(path, 0o600)
    path.write_text("not json")
    with pytest.raises(SettingsError, match="not JSON"):
        SecretStore.from_env({}, path)


def test_a_taken_over_run_runs_the_persons_inputs_then_the_agent_plans_on_a_fresh_observation(
        tmp_path: Path) -> None:
    sandbox = FocusFake({START: Page("Sign in")}, focus=TEXT)
    control = RunControl()
    states: list[tuple[bool, str | None]] = []
    control.takeover.listener = lambda active, by: states.append((active, by))
    started, handed = asyncio.Event(), asyncio.Event()

    class Slow(Agent):
        async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
            started.set()
            if not self.seen:  # planning while the person drives: this proposal is stale when it comes
                self.seen.append((observation, last))
                await handed.wait()
                return Proposal(actions=[parse_action({"type": "click", "x": 9, "y": 9})])
            return await super().propose(observation, last)

    agent = Slow([])

    async def person() -> None:
        await started.wait()
        control.take_over("alice")
        while not control.takeover.active:
            await asyncio.sleep(0.01)
        await control.takeover.submit(parse_action({"type": "type", "text": "hello"}), "alice")
        await control.takeover.submit(parse_action({"type": "mouse_down", "x": 5, "y": 5}), "alice")
        with pytest.raises(Exception, match="taken over by alice"):
            await control.takeover.submit(parse_action({"type": "type", "text": "x"}), "mallory")
        control.takeover.handback("alice")
        handed.set()

    async def main() -> RunResult:
        helper = asyncio.create_task(person())
        result = await run_task(spec(), sandbox, audit_dir=tmp_path, agent=agent, control=control)
        await helper
        return result

    result = asyncio.run(main())
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    human = [e for e in events if e["event"] == "human_input"]
    assert [e["actor"] for e in human] == ["human:alice", "human:alice"]
    assert human[0]["action"] == {"type": "type", "text": "hello"}
    assert typed(sandbox) == "hello"
    assert states == [(True, "alice"), (False, None)]
    assert sandbox.executed[-1]["type"] == "mouse_up"  # the button the person held is released on handback
    assert [e for e in events if e["event"] == "takeover"][-1]["released"] == ["left"]
    # The stale proposal was dropped; the agent was asked again on the observation taken after the handback.
    assert not [a for a in sandbox.executed if a["type"] == "click"]
    assert any(e["event"] == "proposal_discarded" for e in events)
    after, last = agent.seen[-1]
    assert after.screenshot is not None and last is not None and last.error["rule"] == "handed_over"


def test_the_daemon_refuses_keys_when_the_focus_is_not_the_checked_one() -> None:
    from deskpod.agentd.screen_check import check_control

    expect = ScreenExpectation(radius_px=None, focus=PASSWORD)
    check_control(expect, None, None, 0, False, PASSWORD)
    for now in (TEXT, None, PASSWORD.model_copy(update={"frame": "http://evil.test/"})):
        with pytest.raises(ScreenChangedError) as refused:
            check_control(expect, None, None, 0, False, now)
        assert refused.value.detail["reason"] == "focus"
