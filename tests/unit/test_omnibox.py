"""The address bar classified like a link: the tracker alone, then the run loop refusing an
off-allowlist URL typed into it and asking before a new host, without Docker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.gui.omnibox import OmniboxTracker, typed_url
from deskpod.controller.policy.risk import looks_like_download
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.protocol import FocusedElement, parse_action
from fake_sandbox import FakeSandbox, Page

START = "http://shop.test/"
FOCUS = {"type": "keypress", "keys": ["ctrl", "l"]}
ENTER = {"type": "keypress", "keys": ["Return"]}
FIELD = FocusedElement(tag="input", role="textbox", name="Search", editable=True)


def follow(actions: list[dict[str, Any]], focus: FocusedElement | None = None) -> list[str | None]:
    tracker = OmniboxTracker()
    return [tracker.step(parse_action(a, i), focus) for i, a in enumerate(actions)]


@pytest.mark.parametrize(("text", "url"), [
    ("http://evil.test/x?d=1", "http://evil.test/x?d=1"), ("evil.test/x", "http://evil.test/x"),
    ("evil.test:8080", "http://evil.test:8080"), ("cats and dogs", None), ("hello", None), ("", None),
])
def test_what_the_address_bar_loads_for_typed_text(text: str, url: str | None) -> None:
    assert typed_url(text) == url


def test_a_focus_chord_text_and_enter_is_a_navigation_whatever_the_page_focus() -> None:
    for chord in (["ctrl", "l"], ["alt", "d"], ["F6"], ["ctrl+l"]):
        steps = follow([{"type": "keypress", "keys": chord}, {"type": "type", "text": "evil.test/a"}, ENTER], FIELD)
        assert steps == [None, None, "http://evil.test/a"], chord
    assert follow([FOCUS, {"type": "type", "text": "evil.test/a\n"}], FIELD) == [None, "http://evil.test/a"]


def test_text_into_a_focused_page_field_is_not_the_address_bar() -> None:
    assert follow([{"type": "type", "text": "evil.test\n"}], FIELD) == [None]
    assert follow([FOCUS, {"type": "keypress", "keys": ["Escape"]}, {"type": "type", "text": "evil.test"}, ENTER],
                  FIELD) == [None, None, None, None]


def test_a_url_typed_with_nothing_focused_in_the_page_counts_too() -> None:
    assert follow([{"type": "type", "text": "evil.test/x"}, ENTER]) == [None, "http://evil.test/x"]


def test_downloads_are_recognised_by_path_or_query() -> None:
    assert looks_like_download("http://demo.test/files/report.pdf")
    assert looks_like_download("http://demo.test/download?name=notes.zip")
    assert not looks_like_download("http://demo.test/search?q=cats")


def spec(steps: list[list[dict[str, Any]]]) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "omnibox", "start_url": START, "allowed_domains": ["shop.test"],
        "limits": {"max_steps": 10, "max_wall_time_s": 30, "max_errors": 1},
        "success": {"page_text_contains": "never"}, "steps": [{"actions": s} for s in steps],
    })


def test_an_off_allowlist_url_typed_into_the_address_bar_is_refused_before_enter(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    result = asyncio.run(run_task(spec([[FOCUS, {"type": "type", "text": "http://evil.test/?d=secret"}, ENTER]]),
                                  sandbox, audit_dir=tmp_path))
    assert [a["type"] for a in sandbox.executed] == ["keypress", "type"], "Enter was never pressed"
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    (denied,) = [e for e in events if e["event"] == "policy"]
    assert denied["where"] == "omnibox" and denied["rule"] == "domain_not_allowed"
    assert result.status == "failed" and result.reason.startswith("policy_denied: omnibox"), result.reason


class Asked:
    def __init__(self) -> None:
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(False, request.digest, "test", "no")

    async def review(self, notice: Any) -> str:
        return "cancel"


@pytest.mark.parametrize(("typed", "reason"), [
    ("new.shop.test/", "a domain this run has not visited"),
    ("shop.test/download?name=data.zip", "starts a download"),
])
def test_a_new_host_or_a_download_from_the_address_bar_is_l2(tmp_path: Path, typed: str, reason: str) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    human = Asked()
    asyncio.run(run_task(spec([[FOCUS, {"type": "type", "text": typed}, ENTER]]), sandbox, audit_dir=tmp_path,
                         channel=human))
    (asked,) = human.requests
    assert asked.level == "L2" and any(reason in r for r in asked.reasons), asked
    assert [a["type"] for a in sandbox.executed] == ["keypress", "type"]


def test_keys_while_another_window_has_the_focus_do_not_reach_the_address_bar() -> None:
    """A desktop application's Save As dialog has the keyboard focus (the observation's
    ``focus_window``): a file name typed there and Enter load nothing. On main the name was taken
    for a host the address bar would load ("report.txt" -> ``http://report.txt``) and the run was
    refused."""
    tracker = OmniboxTracker()
    typed = [tracker.step(parse_action(a, i), None, elsewhere=True)
             for i, a in enumerate([{"type": "type", "text": "report.txt"}, ENTER])]
    assert typed == [None, None]
    assert follow([{"type": "type", "text": "report.txt"}, ENTER]) == [None, "http://report.txt"]
