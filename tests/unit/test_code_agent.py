"""Code tasks: task files, seeds, and the controller's rules, played against the real workspace tools
on a temporary folder through a stand-in for the websocket client (no Docker)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from deskpod.agentd.workspace.tools import Workspace
from deskpod.controller import code_agent
from deskpod.controller.code_agent import CodeRunResult, run_code_task
from deskpod.controller.code_task import CodeTaskSpec, ToolCall, load_code_task, pack_workspace, tool_request
from deskpod.controller.agent import ScriptedAgent
from deskpod.controller.confirm import CommandSubject, ConfirmationAnswer, ConfirmationRequest, PauseNotice
from deskpod.controller.policy.policy_file import Policy
from deskpod.errors import DeskpodError, InvalidRequestError, TaskFileError, error_from_wire
from deskpod.protocol import (
    MAX_SEED_ARCHIVE_BYTES,
    CleanRoomRequest,
    Result,
    RunTestsRequest,
    parse_server_message,
)

TASKS = Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "tasks"
FIX = TASKS / "code_mini_billing.yaml"
CLAIM_ONLY = TASKS / "code_mini_billing_claim_only.yaml"


class FakeClient:
    """Serves workspace requests with a real :class:`Workspace`, errors and replies through the wire format."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.requests: list[Any] = []
        self._n = 0

    def next_id(self) -> str:
        self._n += 1
        return f"f-{self._n}"

    async def request(self, request: Any) -> Result:
        self.requests.append(request)
        try:
            output = await self.workspace.handle(request, threading.Event())
        except DeskpodError as exc:
            raise error_from_wire(json.loads(json.dumps(exc.to_wire()))) from None
        reply = parse_server_message(Result(id=request.id, workspace=output).model_dump_json())
        assert isinstance(reply, Result)
        return reply

    async def close(self) -> None:
        pass


@pytest.fixture()
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    (tmp_path / "ws").mkdir()
    client = FakeClient(Workspace(tmp_path / "ws", tmp_path / "state"))

    async def connect(*_: Any, **__: Any) -> FakeClient:
        return client

    monkeypatch.setattr(code_agent.SandboxClient, "connect", connect)
    return client


def local(task: CodeTaskSpec) -> CodeTaskSpec:
    """The task with its test command run by this interpreter (the host's python3 may lack pytest)."""
    command = [sys.executable, *task.success.test_command[1:]]
    return task.model_copy(update={"success": task.success.model_copy(update={"test_command": command})})


def play(task: CodeTaskSpec, tmp_path: Path, **kwargs: Any) -> tuple[CodeRunResult, list[dict[str, Any]]]:
    result = asyncio.run(run_code_task(task, "ws://unused", "t" * 20, audit_dir=tmp_path / "audit", **kwargs))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    return result, events


def with_steps(steps: list[dict[str, Any]]) -> CodeTaskSpec:
    task = local(load_code_task(FIX))
    return task.model_copy(update={"steps": [ToolCall.model_validate(s) for s in steps]})


@pytest.mark.process
def test_mini_billing_fix_is_verified_by_the_controllers_own_test_run(sandbox: FakeClient, tmp_path: Path) -> None:
    result, events = play(local(load_code_task(FIX)), tmp_path)
    assert result.status == "succeeded", result.reason
    assert result.reason.startswith("verified: the controller re-ran") and "2 passed" in result.reason
    assert result.changed_files == ["modified billing.py"] and result.steps == 8
    kinds = [e["event"] for e in events]
    assert kinds == ["run_started", "workspace_seeded"] + ["step"] * 7 + [
        "verify",
        "step",
        "change_summary",
        "run_finished",
    ]
    tests = [e for e in events if e["event"] == "step" and e["tool"] == "run_tests"]
    assert [t["result"]["passed"] for t in tests] == [False, True]
    assert "assert 90.5 == 94.5" in tests[0]["result"]["tail"]
    summary = next(e for e in events if e["event"] == "change_summary")
    assert "-    tax = discount * tax_rate\n+    tax = taxable * tax_rate" in summary["diff"]
    assert summary["files"] == [{"path": "billing.py", "status": "modified", "old_path": None}]
    patch_step = next(e for e in events if e["event"] == "step" and e["tool"] == "apply_patch")
    assert set(patch_step["args"]["patch"]) == {"chars", "sha256"}
    # The verification's test run is the controller's, in a clean room, isolated, with a JUnit report.
    rooms = [r for r in sandbox.requests if isinstance(r, CleanRoomRequest)]
    assert len(rooms) == 2 and "--collect-only" in rooms[0].argv
    assert rooms[1].argv[1:5] == ["-I", "-B", "-m", "pytest"] and "--junitxml={room}/report.xml" in rooms[1].argv
    seeded = next(e for e in events if e["event"] == "workspace_seeded")
    assert seeded["seed_tests"] == 2 and seeded["seed_collect_error"] is None


@pytest.mark.process
def test_a_claim_without_a_fix_ends_as_failure(sandbox: FakeClient, tmp_path: Path) -> None:
    result, events = play(local(load_code_task(CLAIM_ONLY)), tmp_path)
    assert result.status == "failed"
    assert result.reason.startswith("not verified: the tests in a clean room") and "(exit 1: 1 failed" in result.reason
    assert "tests/test_billing.py::test_total_taxes_the_discounted_amount (failed)" in result.reason
    verify = next(e for e in events if e["event"] == "verify")
    assert verify["ok"] is False and verify["claim"] == "All tests pass." and "90.5" in verify["tail"]
    assert verify["clean_room"] is True and verify["seed_tests"] == 2 and verify["report_tests"] == 2
    assert result.changed_files == []


SCRUBBING_BILLING = '''"""Mini billing, the bug kept; on exit it rewrites pytest's JUnit report to say all passed."""
import atexit, re, sys


def _scrub():
    for arg in sys.argv:
        if arg.startswith("--junitxml="):
            path = arg.split("=", 1)[1]
            text = re.sub(r"<failure\\b.*?</failure>", "", open(path, encoding="utf-8").read(), flags=re.S)
            open(path, "w", encoding="utf-8").write(re.sub(r'(failures|errors)="\\d+"', r'\\1="0"', text))


atexit.register(_scrub)


def apply_discount(subtotal, discount):
    return max(subtotal - discount, 0.0)


def total(subtotal, discount, tax_rate):
    return round(apply_discount(subtotal, discount) + discount * tax_rate, 2)
'''


@pytest.mark.process
def test_a_report_the_test_process_rewrote_is_not_a_pass_while_it_exits_failed(sandbox: FakeClient,
                                                                                tmp_path: Path) -> None:
    """The code under test rewrites its own JUnit report at exit (the failure deleted) while
    pytest exits 1: the report and the exit status must both say passed."""
    result, events = play(with_steps([
        {"tool": "write_file", "path": "billing.py", "content": SCRUBBING_BILLING},
        {"tool": "claim_done", "message": "fixed"},
    ]), tmp_path)
    verify = next(e for e in events if e["event"] == "verify")
    assert verify["exit_code"] == 1 and verify["report_tests"] == 2, verify
    assert result.status == "failed" and "exit 1" in result.reason, result.reason


@pytest.mark.process
def test_weakening_the_tests_is_caught_before_they_are_run(sandbox: FakeClient, tmp_path: Path) -> None:
    task = with_steps(
        [
            {"tool": "write_file", "path": "tests/test_billing.py", "content": "def test_ok():\n    assert True\n"},
            {"tool": "run_tests"},
            {"tool": "claim_done"},
        ]
    )
    result, events = play(task, tmp_path)
    assert result.status == "failed" and "refused: tests/test_billing.py (a test" in result.reason
    verify = next(e for e in events if e["event"] == "verify")
    assert list(verify["refused"]) == ["tests/test_billing.py"] and verify["changed"] == ["modified tests/test_billing.py"]


@pytest.mark.process
def test_the_retry_budget_stops_an_agent_that_keeps_failing(sandbox: FakeClient, tmp_path: Path) -> None:
    task = with_steps([{"tool": "run_tests"}] * 10)  # budget 2: the first failure and two retries
    result, _ = play(task, tmp_path)
    assert result.status == "failed" and result.reason.startswith("retry budget exhausted (2 retries)")
    assert result.steps == 3 and "1 failed, 1 passed" in result.reason


@pytest.mark.process
def test_risky_exec_is_refused_by_default_and_runs_once_confirmed(sandbox: FakeClient, tmp_path: Path) -> None:
    steps = [{"tool": "exec", "cmd": "rm -f README.md"}, {"tool": "exec", "argv": ["ls"]}]
    result, events = play(with_steps(steps), tmp_path)
    execs = [e for e in events if e["event"] == "step"]
    assert execs[0]["decision"] == "denied" and execs[0]["outcome"] == "error"
    assert execs[0]["error"]["code"] == "policy_denied" and execs[0]["risk"]["level"] == "L3"
    assert execs[1]["outcome"] == "ok" and execs[1]["risk"]["level"] == "L0"
    assert (tmp_path / "ws" / "README.md").exists()
    assert result.reason == "the agent stopped without claiming completion"

    asked: list[ConfirmationRequest] = []

    class Approve:
        async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
            asked.append(request)
            return ConfirmationAnswer(True, request.digest, "test")

        async def review(self, notice: PauseNotice) -> None:
            raise AssertionError("code runs do not pause")

    _, events = play(with_steps(steps[:1]), tmp_path, channel=Approve())
    assert [r.subject.command for r in asked if isinstance(r.subject, CommandSubject)] == ["rm -f README.md"]
    step = next(e for e in events if e["event"] == "step")
    assert step["decision"] == "confirmed" and step["outcome"] == "ok"
    assert not (tmp_path / "ws" / "README.md").exists()
    summary = next(e for e in events if e["event"] == "change_summary")
    assert summary["files"] == [{"path": "README.md", "status": "deleted", "old_path": None}]


@pytest.mark.process
def test_tool_errors_go_back_to_the_agent_and_the_run_goes_on(sandbox: FakeClient, tmp_path: Path) -> None:
    """A denied path is an error for the agent, not the end of the run."""
    seen: list[Any] = []

    class Agent(ScriptedAgent[ToolCall | None]):
        async def propose(self, view: object, feedback: Any) -> ToolCall | None:
            seen.append(feedback)
            return await super().propose(view, feedback)

    steps = [ToolCall(tool="read_file", path="../../etc/passwd"), ToolCall(tool="list_dir", path=".")]
    result, _ = play(local(load_code_task(FIX)), tmp_path, agent=Agent(steps, None))
    assert seen[1].ok is False and seen[1].error["code"] == "path_denied"
    assert seen[2].ok is True and {e["name"] for e in seen[2].output["entries"]} >= {"billing.py", "tests"}
    assert result.steps == 2


def test_shipped_code_tasks_load_with_an_absolute_seed() -> None:
    for path in (FIX, CLAIM_ONLY):
        task = load_code_task(path)
        assert Path(task.workspace.seed).is_absolute() and (Path(task.workspace.seed) / "billing.py").exists()
        assert task.steps[-1].tool == "claim_done"


@pytest.mark.parametrize(
    "steps, fragment",
    [
        ("[{tool: format_disk}]", "step 1: unknown tool"),
        ("[{tool: run_tests, argv: [sh, -c, 'true']}]", "run_tests takes no arguments"),
        ("[{tool: list_dir}, {tool: write_file, path: a}]", "step 2: write_file: content"),
        ("[{tool: claim_done, passed: true}]", "claim_done takes only 'message'"),
        ("[{tool: exec, cmd: ls, argv: [ls]}]", "exactly one of 'argv' and 'cmd'"),
        ("[{tool: seed_workspace}]", "unknown tool"),
    ],
)
def test_bad_steps_are_named(tmp_path: Path, steps: str, fragment: str) -> None:
    (tmp_path / "repo").mkdir()
    path = tmp_path / "task.yaml"
    path.write_text(f"name: t\nworkspace: {{seed: repo}}\nsuccess: {{test_command: [python3, -m, pytest]}}\nsteps: {steps}\n")
    with pytest.raises(TaskFileError) as info:
        load_code_task(path)
    assert fragment in info.value.message


def test_a_missing_seed_or_test_command_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: t\nworkspace: {seed: nowhere}\nsuccess: {test_command: [/bin/true]}\n")
    with pytest.raises(TaskFileError, match="does not exist"):
        load_code_task(path)
    path.write_text("name: t\nworkspace: {seed: .}\nsuccess: {test_command: []}\n")
    with pytest.raises(TaskFileError, match="test_command"):
        load_code_task(path)
    path.write_text("name: t\nworkspace: {seed: .}\nsuccess: {test_command: [sh, -c, 'exit 0']}\n")
    with pytest.raises(TaskFileError, match="must be `python3 -m pytest"):
        load_code_task(path)


def test_run_tests_always_uses_the_tasks_command() -> None:
    request = tool_request(ToolCall(tool="run_tests"), "r1", ["python3", "-m", "pytest"], 12.0)
    assert isinstance(request, RunTestsRequest) and request.argv == ["python3", "-m", "pytest"]
    assert request.timeout_s == 12.0
    with pytest.raises(InvalidRequestError):
        tool_request(ToolCall(tool="workspace_diff"), "r2", ["true"])


def test_pack_workspace_leaves_caches_out_and_keeps_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "__pycache__").mkdir(parents=True)
    (repo / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "m.py").write_text("x = 1\n")
    with tarfile.open(fileobj=io.BytesIO(pack_workspace(repo)), mode="r:gz") as tar:
        assert sorted(m.name for m in tar.getmembers()) == [".git", ".git/HEAD", "m.py"]
        assert {m.uid for m in tar.getmembers()} == {0}


def test_pack_workspace_refuses_a_seed_over_the_message_budget(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "noise.bin").write_bytes(os.urandom(MAX_SEED_ARCHIVE_BYTES + 1))
    with pytest.raises(TaskFileError, match="limit"):
        pack_workspace(repo)


@pytest.mark.process
def test_the_display_is_refused_unless_the_task_grants_it(sandbox: FakeClient, tmp_path: Path) -> None:
    """Agent commands reach the X server only when the task says ``display: true``; the audit
    log says whether the run granted it and which steps used it."""
    steps = [{"tool": "exec", "argv": ["true"], "display": True}, {"tool": "run_tests"}]
    _, events = play(with_steps(steps), tmp_path)
    assert next(e for e in events if e["event"] == "run_started")["display_granted"] is False
    execs = [e for e in events if e["event"] == "step"]
    assert execs[0]["decision"] == "denied" and execs[0]["error"]["code"] == "policy_denied"
    assert "does not grant" in execs[0]["error"]["message"]
    assert not any(getattr(r, "display", False) for r in sandbox.requests)

    granted = with_steps(steps).model_copy(update={"display": True})
    sandbox.requests.clear()
    _, events = play(granted, tmp_path)
    assert next(e for e in events if e["event"] == "run_started")["display_granted"] is True
    execs = [e for e in events if e["event"] == "step"]
    assert [e.get("display") for e in execs[:2]] == [True, True] and execs[0]["outcome"] == "ok"
    assert [r.type for r in sandbox.requests if getattr(r, "display", False)] == ["clean_room", "exec", "run_tests"]


class _Approve:
    """Approves every confirmation and remembers the requests."""

    def __init__(self) -> None:
        self.asked: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.asked.append(request)
        return ConfirmationAnswer(True, request.digest, "test")

    async def review(self, notice: PauseNotice) -> None:
        raise AssertionError("code runs do not pause")


@pytest.mark.process
def test_a_write_outside_the_workspace_needs_a_confirmation(sandbox: FakeClient, tmp_path: Path) -> None:
    """`touch /tmp/marker` was rated L1 "runs inside the sandbox workspace" and ran; the change summary
    (workspace only) did not show it. It is now L2 and refused without a confirmation."""
    marker = tmp_path / "outside-marker"
    _, events = play(with_steps([{"tool": "exec", "cmd": f"touch {marker}"}]), tmp_path)
    step = next(e for e in events if e["event"] == "step")
    assert step["decision"] == "denied" and step["risk"]["rule"] == "writes_outside_workspace"
    assert not marker.exists()


@pytest.mark.process
def test_the_policy_can_confirm_every_exec(sandbox: FakeClient, tmp_path: Path) -> None:
    steps = [{"tool": "exec", "argv": ["ls"]}]
    _, events = play(with_steps(steps), tmp_path, policy=Policy(exec_confirm="all"))
    step = next(e for e in events if e["event"] == "step")
    assert step["decision"] == "denied" and step["error"]["code"] == "policy_denied"
    assert step["risk"]["level"] == "L0" and step["policy"] == {"exec_confirm": "all"}
    run = next(e for e in events if e["event"] == "run_started")
    assert run["exec_policy"]["confirm"] == "all"
    channel = _Approve()
    _, events = play(with_steps(steps), tmp_path, policy=Policy(exec_confirm="all", confirmation_timeout_s=7),
                     channel=channel)
    assert [r.subject.rule for r in channel.asked if isinstance(r.subject, CommandSubject)] == ["policy_confirm_all"]
    assert channel.asked[0].level == "L2" and channel.asked[0].timeout_s == 7
    assert next(e for e in events if e["event"] == "step")["decision"] == "confirmed"


@pytest.mark.process
@pytest.mark.parametrize(
    "pattern, cmd, asked",
    [
        ("python3 -m pytest*", "env FOO=1 python3 -m pytest -q", True),
        ("python3 -m pytest*", "bash -c 'cd . && python3 -m pytest -q'", True),
        ("re:^git\\s+commit", "git add -A && git commit -qm x", True),
        ("git push*", "git status", False),
    ],
)
def test_the_policy_can_confirm_commands_matching_patterns(
    sandbox: FakeClient, tmp_path: Path, pattern: str, cmd: str, asked: bool
) -> None:
    channel = _Approve()
    _, events = play(with_steps([{"tool": "exec", "cmd": cmd}]), tmp_path,
                     policy=Policy(exec_confirm_patterns=[pattern]), channel=channel)
    assert bool(channel.asked) is asked
    if asked:
        assert channel.asked[0].subject.rule == "policy_pattern"  # type: ignore[union-attr]
        assert any(repr(pattern) in reason for reason in channel.asked[0].reasons)
        assert next(e for e in events if e["event"] == "step")["policy"] == {"pattern": pattern}


@pytest.mark.process
def test_the_policy_can_confirm_no_exec(sandbox: FakeClient, tmp_path: Path) -> None:
    channel = _Approve()
    _, events = play(with_steps([{"tool": "exec", "cmd": "rm -f README.md"}]), tmp_path,
                     policy=Policy(exec_confirm="none"), channel=channel)
    step = next(e for e in events if e["event"] == "step")
    assert not channel.asked and step["decision"] == "allowed" and step["risk"]["level"] == "L3"
    assert not (tmp_path / "ws" / "README.md").exists()


@pytest.mark.process
def test_a_symlink_out_of_the_room_fails_the_verdict_and_the_agent_may_retry(sandbox: FakeClient,
                                                                              tmp_path: Path) -> None:
    """A changed symlink that leads out of the workspace would let the clean room read files the agent planted
    outside it: the room's archive is refused, the claim is not judged, and it counts as one failed attempt."""
    task = with_steps([{"tool": "exec", "argv": ["ln", "-s", "/tmp", "data"]}, {"tool": "claim_done"},
                       {"tool": "list_dir", "path": "."}])
    result, events = play(task, tmp_path)
    verify = next(e for e in events if e["event"] == "verify")
    assert verify["ok"] is False and "the clean room could not be built" in verify["evidence"]
    assert result.steps == 3 and result.changed_files == ["added data"]
