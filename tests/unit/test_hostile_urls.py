"""A URL that does not parse, from a hostile page or daemon, is refused and shown as
unreadable, never an unhandled error.

Found while adding the page logs: a daemon reporting ``http://x:99999/?a=1`` (a port out
of range) or a broken IPv6 address as the page's URL went through the audit log's
redaction and the allowlist as a ``ValueError``, and the run ended as an internal error.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from deskpod.controller.gui import run_task
from deskpod.controller.policy.policy_file import UNREADABLE_URL, check_url, redact_url
from deskpod.controller.task import TaskSpec
from fake_sandbox import Button, FakeSandbox, Page

START = "http://shop.test/"


@pytest.mark.parametrize("url", ["http://x.test:99999/?token=1", "http://[::1/x?a=1", "https://u:p@[zz]:1/"])
def test_redaction_shows_an_unparsable_url_as_unreadable(url: str) -> None:
    assert redact_url(url) == UNREADABLE_URL


@pytest.mark.parametrize("url", ["http://[::1/x?a=1", "https://[zz/"])
def test_the_allowlist_refuses_an_unparsable_url(url: str) -> None:
    decision = check_url(url, ["shop.test"])
    assert (decision.allowed, decision.rule) == (False, "unparsable_url")
    assert check_url(url, []).allowed is False


@pytest.mark.parametrize("hostile", ["http://[::1/x?token=1", "http://shop.test:99999/?token=1"])
def test_a_run_whose_sandbox_reports_such_a_url_ends_typed_not_as_an_internal_error(
        hostile: str, tmp_path: object) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome", [Button((100, 100, 200, 140), "Next", goes_to=hostile)])})
    spec = TaskSpec.model_validate({"name": "t", "start_url": START, "allowed_domains": ["shop.test"],
                                    "success": {"page_text_contains": "never", "timeout_s": 0.3},
                                    "steps": [{"actions": [{"type": "click", "x": 150, "y": 120}]}]})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path))  # type: ignore[arg-type]
    assert not result.reason.startswith("internal error"), result.reason
    text = result.audit_log.read_text()
    assert "token=1" not in text and all(json.loads(line) for line in text.splitlines())
