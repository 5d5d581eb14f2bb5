"""A typed secret the page shows is masked in every image of the run, through the
controller's credential path against the in-memory sandbox.

The fake's screen shows what was typed (as a sign-in page does once its "Show password"
box is ticked) and draws a secret as ``*`` once a request named it in ``mask``, the way
the daemon paints it over: the request typing the secret and every request after it must
name it, so the agent's screenshots and the failure scene hold only the masked screen."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from deskpod.controller.credentials import HostSecret, SecretStore, TypeSecret
from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.run_api import RunResult
from deskpod.controller.task import TaskSpec
from deskpod.protocol import FocusedElement, Observation, ObserveOptions, ScreenExpectation, parse_action
from fake_sandbox import FakeSandbox, Page

START = "http://shop.test/login"
PASSWORD = FocusedElement(tag="input", role="textbox", name="Password", input_type="password", is_password=True,
                          editable=True)
SECRET = "hunter2-Zq9!"


@dataclass
class ShowPasswordPage(FakeSandbox):
    """A sign-in page whose password field has the focus, with each act's actions and mask kept."""

    requests: list[tuple[list[str], list[str]]] = field(default_factory=list)

    async def act(self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
                  timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *,
                  allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        kinds = [a.type if isinstance(a, BaseModel) else a["type"] for a in actions]  # type: ignore[attr-defined]
        self.requests.append((kinds, list(mask)))
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        return obs.model_copy(update={"focused": PASSWORD})


class Agent:
    """Proposes ``moves`` in order, then done; keeps every observation it was given."""

    def __init__(self, moves: list[list[BaseModel]]) -> None:
        self.moves = moves
        self.seen: list[Observation] = []

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        self.seen.append(observation)
        if not self.moves:
            return Done("done")
        return Proposal(actions=self.moves.pop(0))

    async def close(self) -> None:
        """Nothing to release."""


def _pixels(obs: Observation) -> bytes:
    assert obs.screenshot is not None
    return base64.b64decode(obs.screenshot.data)


def test_the_shown_secret_is_masked_in_the_agents_screenshots_and_the_failure_scene(tmp_path: Path) -> None:
    sandbox = ShowPasswordPage({START: Page("Sign in")})
    show_password = parse_action({"type": "click", "x": 40, "y": 212})
    agent = Agent([[TypeSecret(type="type_secret", name="SHOP_PW")], [show_password], [show_password]])
    secrets = SecretStore([HostSecret("SHOP_PW", SecretStr(SECRET), ("shop.test",))])
    spec = TaskSpec.model_validate({"name": "login", "start_url": START, "allowed_domains": ["shop.test"],
                                    "success": {"page_text_contains": "never", "timeout_s": 0.1}})
    result: RunResult = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path, agent=agent, secrets=secrets))
    assert sandbox.typed.get(START) == SECRET
    # The request typing the secret names it, and so does every request of the run after it.
    typing = next(i for i, (kinds, _) in enumerate(sandbox.requests) if "type" in kinds)
    assert all(SECRET in mask for _, mask in sandbox.requests[typing:]), sandbox.requests
    assert not any(mask for _, mask in sandbox.requests[:typing])
    # The screen showed it: every image the agent got after the keys has it masked.
    after = agent.seen[1:]
    assert after and all(b"*" * len(SECRET) in _pixels(o) and SECRET.encode() not in _pixels(o) for o in after)
    assert SECRET not in json.dumps([o.model_dump(mode="json") for o in agent.seen])
    # The failure scene keeps the masked screen.
    assert result.status != "succeeded"
    shots = list((tmp_path / "scenes").rglob("screenshot.*"))
    assert shots and all(SECRET.encode() not in p.read_bytes() for p in shots)
    assert all(b"*" * len(SECRET) in p.read_bytes() for p in shots)
    every = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in every
    # The audit log says which steps' screens the daemon masked.
    steps = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    masked = [e.get("screenshot_masked") for e in steps if e["event"] == "step" and e.get("outcome") == "ok"]
    assert masked == [1, 1, 1], masked  # the typing step and the two clicks after it
