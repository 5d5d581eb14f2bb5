"""Desktop tasks: a task's ``setup`` (workspace files, applications opened before the first step)
and success checks of workspace files, read through the workspace whatever the agent claims;
the GUI run loop against the in-memory sandbox (``fake_sandbox``). The applications' real zone:
``tests/integration/test_desktop_zone.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Proposal, scripted_gui_agent
from deskpod.protocol import Observation, Window, parse_action
from deskpod.controller.task import TaskSpec
from deskpod.errors import TaskFileError
from deskpod.controller.task import load_task
from fake_sandbox import FakeSandbox, Page

START = "http://demo.test/"


def task(steps: list[list[dict[str, Any]]], success: dict[str, Any], setup: dict[str, Any] | None = None) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "desktop", "start_url": START, "allowed_domains": ["demo.test"],
        "limits": {"max_steps": 5, "max_wall_time_s": 30}, "steps": [{"actions": s} for s in steps],
        "setup": setup or {}, "success": {"timeout_s": 0.2, **success}})


def events(audit_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in audit_log.read_text().splitlines()]


def test_setup_writes_the_files_and_opens_the_applications_before_the_first_step(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Demo", "")})
    spec = task([[{"type": "keypress", "keys": ["ctrl", "s"]}]], {"files": [{"path": "notes.txt", "contains": "v2"}]},
                {"files": {"notes.txt": "v1\n"}, "apps": [{"app": "editor", "path": "notes.txt"}, {"app": "terminal"}]})

    def saved_on_ctrl_s(original: Any) -> Any:
        async def act(actions: Any, *args: Any, **kwargs: Any) -> Any:
            observed = await original(actions, *args, **kwargs)
            if any(getattr(a, "type", None) == "keypress" or (isinstance(a, dict) and a.get("type") == "keypress")
                   for a in actions):
                sandbox.files["notes.txt"] = "v2\n"  # the editor saved the agent's edit
            return observed
        return act

    sandbox.act = saved_on_ctrl_s(sandbox.act)  # type: ignore[method-assign]
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path))
    assert result.status == "succeeded", result.reason
    assert "'notes.txt'" in result.reason
    assert [a["type"] for a in sandbox.executed] == ["open_app", "open_app", "keypress"]
    assert [(w.app, w.zone) for w in sandbox.windows] == [("terminal", "agent"), ("editor", "agent")]
    log = events(result.audit_log)
    setup = [(e["what"], e.get("path") or e.get("app")) for e in log if e["event"] == "setup"]
    assert setup == [("file", "notes.txt"), ("app", "notes.txt"), ("app", "terminal")]
    assert [e["outcome"] for e in log if e["event"] == "step"] == ["ok"], "setup is no step of the agent's"


@pytest.mark.parametrize(("files", "why"), [
    ({}, "'notes.txt' cannot be read (workspace_failed"),
    ({"notes.txt": "v1\n"}, "does not contain 'v2'"),
])
def test_a_file_that_does_not_hold_what_was_asked_fails_the_run_whatever_the_agent_claims(
        tmp_path: Path, files: dict[str, str], why: str) -> None:
    sandbox = FakeSandbox({START: Page("Demo", "")}, files=dict(files))
    spec = task([[{"type": "keypress", "keys": ["ctrl", "s"]}]], {"files": [{"path": "notes.txt", "contains": "v2"}]})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path))
    assert result.status == "failed" and why in result.reason, result.reason


def test_equals_compares_the_whole_text_a_final_newline_aside(tmp_path: Path) -> None:
    for text, status in (("a\nb\n", "succeeded"), ("a\nb", "succeeded"), ("a\nb\nc\n", "failed")):
        sandbox = FakeSandbox({START: Page("Demo", "")}, files={"out.txt": text})
        spec = task([[{"type": "wait", "seconds": 0}]], {"files": [{"path": "out.txt", "equals": "a\nb\n"}]})
        assert asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path)).status == status, text


@pytest.mark.parametrize("bad", [
    {"setup": {"files": {"../x": ""}}}, {"setup": {"apps": [{"app": "bash"}]}},
    {"success": {"files": [{"path": "/etc/passwd", "contains": "root"}]}}, {"success": {}},
])
def test_a_desktop_task_file_with_a_bad_setup_or_check_is_refused(tmp_path: Path, bad: dict[str, Any]) -> None:
    data = {"name": "t", "start_url": START, "steps": [{"actions": [{"type": "wait", "seconds": 0}]}],
            "success": {"files": [{"path": "a.txt", "contains": "x"}]}} | bad
    path = tmp_path / "task.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(TaskFileError):
        load_task(path)


def test_a_scripted_window_action_may_name_its_window_by_title() -> None:
    """Every window is maximized: a script cannot know the id of the window to bring to the front.
    ``title:TEXT`` names the first window whose title holds it, the agent's windows first; a title
    no window has is left as it is (the sandbox then answers ``no_window``)."""
    agent = scripted_gui_agent([([parse_action({"type": "window_focus", "window_id": "title:target.txt"}, 0),
                                  parse_action({"type": "keypress", "keys": ["ctrl", "v"]}, 1)], False),
                                ([parse_action({"type": "window_close", "window_id": "title:gone"}, 0)], False)])
    windows = [Window(id="0x600003", app="Chromium", title="target.txt - Chromium", box=[0, 0, 9, 9], zone="sandbox"),
               Window(id="0x1c00003", app="Mousepad", title="/workspace/target.txt - Mousepad", box=[0, 0, 9, 9],
                      zone="agent")]
    view = Observation(windows=windows)
    first = asyncio.run(agent.propose(view, None))
    second = asyncio.run(agent.propose(view, None))
    assert isinstance(first, Proposal) and isinstance(second, Proposal)
    assert first.actions[0].window_id == "0x1c00003" and first.actions[1].type == "keypress"
    assert second.actions[0].window_id == "title:gone"
