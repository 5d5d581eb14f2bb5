"""Unit tests for task files, success checks and the audit log (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskpod.controller.audit_log import AuditLog, redact_actions
from deskpod.controller.run_api import SHOWN_TITLE_CHARS, check_success
from deskpod.controller.task import SuccessCheck, load_task
from deskpod.errors import TaskFileError
from deskpod.protocol import Observation, parse_action

DEMO = Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "tasks" / "demo.yaml"


def test_the_shipped_demo_task_loads() -> None:
    task = load_task(DEMO)
    assert task.start_url == "http://demo.test/"
    assert [s.actions[0].type for s in task.steps] == ["click", "type", "keypress"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("name: t\nstart_url: file:///etc/passwd\nsteps: []\nsuccess: {}\n", "start_url"),
        ("name: t\nstart_url: http://a.test/\nsteps: [{actions: [{type: foo}]}]\nsuccess: {}\n", "steps"),
        ("name: t\nstart_url: http://a.test/\nsteps: []\nsuccess: {url_matches: '('}\n", "url_matches"),
        (": : :\n", "cannot read"),
    ],
)
def test_bad_task_files_name_the_problem(tmp_path: Path, body: str, fragment: str) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(body)
    with pytest.raises(TaskFileError) as info:
        load_task(path)
    assert fragment in info.value.message


def test_success_needs_both_url_and_text_from_the_environment() -> None:
    check = SuccessCheck(url_matches=r"/search\?q=penguin$", page_text_contains="penguin")
    good = Observation(url="http://demo.test/search?q=penguin", page_text="You searched for: penguin")
    assert check_success(check, good)[0]
    assert not check_success(check, Observation(url="http://demo.test/search?q=penguin", page_text="nothing"))[0]
    assert not check_success(check, Observation(url="http://demo.test/", page_text="penguin"))[0]
    assert not check_success(check, Observation(url=None, page_text=None))[0]


def test_a_failed_success_check_names_the_page_it_saw() -> None:
    """A site the egress proxy could not reach shows the proxy's error page: the reason
    says so, not only that the URL did not match."""
    check = SuccessCheck(url_matches=r"/search\?q=penguin$", page_text_contains="penguin")
    proxy_page = Observation(url="http://demo.test/search?q=penguin", title="ERROR: The requested URL could not be "
                             "retrieved", page_text="The following error was encountered")
    ok, why = check_success(check, proxy_page)
    assert not ok and why.endswith("; the page's title is 'ERROR: The requested URL could not be retrieved'")
    ok, why = check_success(check, Observation(url="http://demo.test/", title="x" * 500))
    assert not ok and why.endswith(f"{'x' * SHOWN_TITLE_CHARS}'") and "does not match" in why
    assert check_success(check, Observation(url="http://demo.test/")) == (
        False, "URL 'http://demo.test/' does not match '/search\\\\?q=penguin$'")


def test_sensitive_typed_text_is_redacted() -> None:
    actions = [parse_action({"type": "type", "text": "hunter22"}), parse_action({"type": "keypress", "keys": ["ENTER"]})]
    assert redact_actions(actions, sensitive=True)[0] == {"type": "type", "text": "[redacted 8 chars]"}
    assert redact_actions(actions, sensitive=False)[0]["text"] == "hunter22"


def test_audit_log_lines_are_whole_json_objects(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a" / "run.jsonl", "run-1")
    log.write("step", step=1, url="http://x.test/")
    log.write("run_finished", status="succeeded")
    log.close()
    lines = (tmp_path / "a" / "run.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["event"] for r in records] == ["step", "run_finished"]
    assert all(r["run_id"] == "run-1" and r["time"].endswith("Z") for r in records)
    assert oct((tmp_path / "a" / "run.jsonl").stat().st_mode & 0o777) == "0o600"
