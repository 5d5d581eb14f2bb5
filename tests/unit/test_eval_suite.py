"""deskpod eval without Docker: suite files, the Wilson interval, the report, retries and exit codes.

The runner is exercised over a real :class:`SandboxPool` whose backend is a fake
(sandboxes as ids; one can be made to crash); the sandbox's readiness observation and
in-place reset (websocket requests) are replaced by no-ops, as these tests are about
the eval's scheduling and judging. Each fake run writes a real hash-chained audit log
sealed by a key of the test, so the verdict is read from a log that verifies.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deskpod.backend import Readiness, SandboxHandle, SandboxPool
from deskpod.backend import pool_reset as pool_module
from deskpod.backend.base import Backend
from deskpod.backend.kubernetes_backend import KubernetesBackend
from deskpod.cli.app import app
from deskpod.cli.eval import BackendChoice, eval_exit_code, make_backend
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from deskpod.controller.audit_log import AuditLog
from deskpod.controller.audit_sign import AuditSigner
from deskpod.errors import BackendError, SnapshotError, SuiteFileError, TaskFileError
from deskpod.eval.report import REPORT_CSS, render_html, report_csp, report_document, wilson_interval, write_report
from deskpod.eval.harness import (
    SNAPSHOT_MISSING, AuditVerdict, EvalResult, EvalRunner, Played, RunRecord, run_outcomes,
)
from deskpod.eval.suite import LoadedEntry, load_suite
from deskpod.controller.task import load_task
from deskpod.protocol import MAX_SNAPSHOT_BYTES
from deskpod.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "runtime" / "deskpod" / "tasks" / "regression" / "suite.yaml"

GUI_TASK = """name: {name}
start_url: http://demo.test/
allowed_domains: [demo.test]
steps:
  - actions: [{{type: wait, seconds: 0.1}}]
success: {{page_text_contains: done}}
"""


def write_suite(tmp_path: Path, body: str, tasks: tuple[str, ...] = ("a", "b")) -> Path:
    for name in tasks:
        (tmp_path / f"{name}.yaml").write_text(GUI_TASK.format(name=name))
    path = tmp_path / "suite.yaml"
    path.write_text(body)
    return path


# ---- suite files -----------------------------------------------------------------------------


def test_the_shipped_suite_loads_with_its_ten_kinds_of_task() -> None:
    suite = load_suite(SHIPPED)
    names = [e.name for e in suite.entries]
    assert len(names) >= 10 and len(set(names)) == len(names)
    by_name = {e.name: e for e in suite.entries}
    assert by_name["pay-denied"].spec.expected == ("cancelled",)
    assert by_name["allowlist-refusal"].spec.expected == ("policy_denied",)
    assert by_name["mini-billing-claim-only"].spec.expected == ("not_verified",)
    assert by_name["mini-billing"].kind == "code" and by_name["search"].kind == "gui"
    assert by_name["login-snapshot"].setup is not None and by_name["login-snapshot"].setup.name == "login-setup"
    assert by_name["download"].spec.approver == "approve" and by_name["download"].spec.downloads == ["eval-report.txt"]


def test_the_shipped_suite_runs_denied_but_for_the_download() -> None:
    """The guard of the third security review: the regression suite passes under ``--confirm deny``
    (tests/integration/test_eval.py runs it). Every task is answered by the deny approver (as
    ``deskpod run --confirm deny``) but the download, whose attachment link is L2 by design: a
    fix that made an ordinary step L2 cannot be hidden by switching its task to ``approve``."""
    approvers = {e.name: e.spec.approver for e in load_suite(SHIPPED).entries}
    assert {name for name, approver in approvers.items() if approver != "deny"} == {"download"}, approvers


DESKTOP = ROOT / "runtime" / "deskpod" / "tasks" / "desktop"


@pytest.mark.parametrize("suite", ["suite.yaml", "ci.yaml"])
def test_the_desktop_suites_pair_every_task_with_an_idle_agent_that_must_fail(suite: str) -> None:
    """The desktop suite (15 tasks, each twice) and its CI subset (5): each task's idle twin runs
    with an agent that does nothing (one wait) and expects its check to fail; only the terminal's
    Enter and the Save As dialogs' input (L2) have the scripted approver say yes."""
    entries = load_suite(DESKTOP / suite).entries
    tasks = {e.name for e in entries if not e.spec.idle}
    assert {f"{name}-idle" for name in tasks} == {e.name for e in entries if e.spec.idle}
    assert len(tasks) == (15 if suite == "suite.yaml" else 5)
    for entry in entries:
        assert entry.task.setup.apps, entry.name  # a desktop task opens its applications itself
        if entry.spec.idle:
            assert entry.spec.expected == ("not_verified",)
            assert [a.type for step in entry.task.steps for a in step.actions] == ["wait"]
        else:
            assert entry.spec.expected == ("succeeded",)
        asks = entry.name.startswith(("terminal", "save-dialog")) and not entry.spec.idle
        assert (entry.spec.approver == "approve") == asks, entry.name


def test_idle_is_for_gui_tasks_only(tmp_path: Path) -> None:
    code = ROOT / "runtime" / "deskpod" / "tasks" / "code_mini_billing.yaml"
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: s\ntasks:\n  - task: {code}\n    idle: true\n")
    with pytest.raises(SuiteFileError, match="idle"):
        load_suite(path)


@pytest.mark.parametrize(("body", "message"), [
    ("name: s\ntasks: []\n", "tasks"),
    ("name: s\ntasks:\n  - task: missing.yaml\n", "is not a file"),
    ("name: s\ntasks:\n  - task: a.yaml\n    expect: paid\n", "tasks.0.expect: Input should be 'succeeded', "),
    ("name: s\ntasks:\n  - task: a.yaml\n  - task: a.yaml\n", "another task is named 'a'"),
    ("name: s\ntasks:\n  - task: a.yaml\n    snapshot: {setup: b.yaml, file: b.yaml}\n", "exactly one"),
    ("name: s\ntasks:\n  - task: a.yaml\n    colour: red\n", "colour"),
    ("name: s\nname: t\ntasks:\n  - task: a.yaml\n", "duplicate key"),
    ("name: s\nrepeat: 0\ntasks:\n  - task: a.yaml\n", "repeat"),
    ("name: s\ntasks:\n  - task: a.yaml\n    policy: nopolicy.yaml\n", "policy file"),
])
def test_a_bad_suite_is_refused_with_the_field_or_file_named(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SuiteFileError) as caught:
        load_suite(write_suite(tmp_path, body))
    assert message in caught.value.message, caught.value.message


def test_every_bad_field_of_a_suite_is_named_at_once(tmp_path: Path) -> None:
    """A suite with several mistakes names each (a field once, however many members of a
    union it failed), so one edit fixes them all."""
    body = ("name: s\nrepeat: 0\ntasks:\n  - task: a.yaml\n    expect: paid\n    colour: red\n"
            + "".join(f"  - task: a.yaml\n    hue{i}: x\n" for i in range(6)))
    with pytest.raises(SuiteFileError) as caught:
        load_suite(write_suite(tmp_path, body))
    message = caught.value.message
    assert "repeat:" in message and "tasks.0.expect: Input should be 'succeeded'" in message, message
    assert "tasks.0.colour:" in message and message.count("tasks.0.expect:") == 1, message
    assert "and 4 more" in message, message


def test_a_hostile_suite_names_huge_or_false_files_and_is_refused_before_any_sandbox(tmp_path: Path) -> None:
    """A suite that names a task file of gigabytes, or a snapshot larger than the daemon takes or
    that is no archive, is refused when it is read, naming the entry (main read every byte of
    each into memory, and a bad snapshot failed every run of its entry on a filled pool)."""
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(4 * 1024 ** 3)  # sparse: 4 GiB that a loader would read
    with pytest.raises(SuiteFileError) as caught:
        load_suite(write_suite(tmp_path, "name: s\ntasks:\n  - task: huge.yaml\n"))
    assert "task 1 (huge.yaml)" in caught.value.message and "larger than 1048576 bytes" in caught.value.message
    big = tmp_path / "big.tar.gz"
    with big.open("wb") as f:
        f.write(b"\x1f\x8b")
        f.truncate(MAX_SNAPSHOT_BYTES + 1)
    (tmp_path / "notes.tar.gz").write_text("not an archive")
    for name, message in (("big.tar.gz", f"the limit is {MAX_SNAPSHOT_BYTES}"), ("notes.tar.gz", "not a snapshot archive")):
        with pytest.raises(SuiteFileError) as caught:
            load_suite(write_suite(tmp_path, f"name: s\ntasks:\n  - task: a.yaml\n    snapshot: {{file: {name}}}\n"))
        assert message in caught.value.message and "task 1 (a.yaml)" in caught.value.message, caught.value.message
    with pytest.raises(TaskFileError) as read:
        load_task(huge)
    assert "larger than" in read.value.message


def test_a_bad_task_file_is_refused_with_the_entry_named(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n  - task: c.yaml\n")
    (tmp_path / "c.yaml").write_text("name: c\nstart_url: ftp://x\nsteps: []\nsuccess: {page_text_contains: x}\n")
    with pytest.raises(SuiteFileError) as caught:
        load_suite(path)
    assert "task 2 (c.yaml)" in caught.value.message and "start_url" in caught.value.message


def test_a_code_task_cannot_ask_for_a_snapshot(tmp_path: Path) -> None:
    code = ROOT / "runtime" / "deskpod" / "tasks" / "code_mini_billing.yaml"
    path = write_suite(tmp_path, f"name: s\ntasks:\n  - task: {code}\n    snapshot: {{setup: a.yaml}}\n")
    with pytest.raises(SuiteFileError) as caught:
        load_suite(path)
    assert "code task" in caught.value.message


def test_outcomes_are_the_status_the_reasons_code_and_a_refused_claim() -> None:
    assert run_outcomes("failed", "policy_denied: navigate: ...", []) == ("failed", "policy_denied")
    assert run_outcomes("cancelled", "cancelled: confirmation denied", []) == ("cancelled",)
    refused = [{"event": "verify", "ok": False}]
    assert run_outcomes("failed", "the tests in a clean room: 1 failed", refused) == ("failed", "not_verified")
    assert run_outcomes("succeeded", "verified: ...", [{"event": "verify", "ok": True}]) == ("succeeded",)


# ---- the Wilson interval ---------------------------------------------------------------------


def test_the_wilson_interval_matches_published_values_and_stays_in_bounds() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)  # Wilson 95 % for 8/10
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and round(high, 3) == 0.278
    low, high = wilson_interval(10, 10)
    assert round(low, 3) == 0.722 and high == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


# ---- the report ------------------------------------------------------------------------------

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


def record(task: str = "t", status: str = "passed", index: int = 0, **changes: Any) -> RunRecord:
    base = RunRecord(task, index, "gui", status, "succeeded", ("succeeded",), ("succeeded",), "verified: ok", 3,
                     1.5, None, "run-1", "/tmp/run-1.jsonl", AuditVerdict(True, 5, "ab" * 32, "k" * 32))
    return replace(base, **changes)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs


def test_hostile_strings_from_a_sandbox_render_as_inert_text(tmp_path: Path) -> None:
    """A task name, reason, scene reason and mismatch holding markup are escaped: the page
    has no script element, no event handler attribute and no element the strings named."""
    runs = [record(task=HOSTILE, status="failed", reason=HOSTILE, mismatch=HOSTILE, scene_reason=HOSTILE,
                   scene=str(tmp_path / HOSTILE), run_status="failed", outcomes=("failed",))]
    document = report_document(EvalResult(HOSTILE, runs, 2.0, 1, None, "docker", [HOSTILE]), 1.0)
    page = render_html(document)
    parser = _Tags()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert not [name for name, _ in parser.attrs if name.startswith("on")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_page_is_self_contained_under_a_strict_policy(tmp_path: Path) -> None:
    runs = [record(), record(index=1, status="failed", run_status="failed", outcomes=("failed",))]
    json_path, html_path, document = write_report(EvalResult("s", runs, 2.0, 2, 2, "docker"), tmp_path, 0.5)
    page = html_path.read_text()
    csp = report_csp()
    parser = _Tags()
    parser.feed(page)
    assert ("content", csp) in parser.attrs and "default-src 'none'" in csp and "unsafe-inline" not in csp
    # The one stylesheet is exactly the hashed text, so the policy admits it.
    assert f"<style>{REPORT_CSS}</style>" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert json.loads(json_path.read_text())["success_rate"] == 0.5
    assert document["interval"] is not None and "95% Wilson interval" in page


def test_the_rate_leaves_infrastructure_errors_out_and_an_interval_needs_repeats() -> None:
    runs = [record(), record(task="u", status="infrastructure_error", run_status=None, outcomes=())]
    document = report_document(EvalResult("s", runs, 1.0, 1, None), 1.0)
    assert (document["passed"], document["judged"], document["success_rate"]) == (1, 1, 1.0)
    assert document["infrastructure_errors"] == 1 and document["interval"] is None


# ---- exit codes ------------------------------------------------------------------------------


def test_exit_codes_follow_the_threshold_and_infrastructure_errors_win() -> None:
    ok = report_document(EvalResult("s", [record(), record(task="u", status="failed")], 1.0, 1, None), 0.5)
    assert eval_exit_code(ok) == EXIT_OK
    assert eval_exit_code({**ok, "min_success": 0.51}) == EXIT_FAILURE
    assert eval_exit_code({**ok, "infrastructure_errors": 1}) == EXIT_UNAVAILABLE
    assert eval_exit_code({**ok, "setup_errors": ["x"]}) == EXIT_UNAVAILABLE
    assert eval_exit_code({**ok, "success_rate": None}) == EXIT_FAILURE


def test_a_bad_suite_exits_2_before_any_sandbox(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "name: s\ntasks:\n  - task: missing.yaml\n")
    result = CliRunner().invoke(app, ["eval", str(path), "--backend", "docker"])
    assert result.exit_code == EXIT_USAGE and "is not a file" in result.output


def test_a_bad_threshold_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", str(SHIPPED), "--min-success", "1.5"])
    assert result.exit_code == EXIT_USAGE


# ---- the Kubernetes backend from the settings ---------------------------------------------------


def test_the_kubernetes_backend_is_built_from_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "bootstrap"
    token.write_text("b" * 40 + "\n")
    for name, value in {"K8S_NAMESPACE": "evals", "K8S_WARM_POOL": "warm", "K8S_API_URL": "http://127.0.0.1:1",
                        "K8S_BOOTSTRAP_TOKEN_FILE": str(token), "EGRESS_CONTROL": "http://deskpod-egress:3129",
                        "EGRESS_CONTROL_TOKEN": "c" * 40, "EGRESS_ALLOWLIST": "demo.test, allowed.test"}.items():
        monkeypatch.setenv(f"DESKPOD_{name}", value)
    get_settings.cache_clear()
    try:
        backend = make_backend(BackendChoice.kubernetes)
        assert isinstance(backend, KubernetesBackend)
        assert (backend.config.namespace, backend.config.warm_pool, backend.config.api_url) == (
            "evals", "warm", "http://127.0.0.1:1")
        assert backend.config.bootstrap_token == "b" * 40
        # The shared egress proxy's tenants are registered with the run's allowlist.
        assert (backend.config.egress_control_url, backend.config.egress_control_token,
                backend.config.egress_allowlist) == ("http://deskpod-egress:3129", "c" * 40, ("demo.test", "allowed.test"))
        monkeypatch.delenv("DESKPOD_K8S_BOOTSTRAP_TOKEN_FILE")
        get_settings.cache_clear()
        with pytest.raises(BackendError) as caught:
            make_backend(BackendChoice.kubernetes)
        assert caught.value.detail["reason"] == "config"
    finally:
        get_settings.cache_clear()


# ---- the runner: retries and verdicts -------------------------------------------------------------


class CrashingBackend(Backend):
    """Sandboxes as ids; :meth:`crash` makes one look exited (code 137), as a killed container does."""

    def __init__(self) -> None:
        self.made = 0
        self.alive: set[str] = set()
        self.crashed: set[str] = set()

    def crash(self, sandbox_id: str) -> None:
        self.crashed.add(sandbox_id)

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        self.made += 1
        handle = SandboxHandle(id=f"s{self.made}", container="c", network="n", egress="e", address="127.0.0.1",
                               token=token or "t" * 32, pool=pool)
        self.alive.add(handle.id)
        return handle

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
        return Readiness(1, 0.0, "running, /healthz 200")

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        return handle

    async def destroy(self, sandbox_id: str) -> None:
        self.alive.discard(sandbox_id)

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        return handle.id in self.alive and handle.id not in self.crashed

    async def failure(self, handle: SandboxHandle) -> str | None:
        return "exited (code 137)" if handle.id in self.crashed else None

    async def list_ids(self, pool: str | None = None) -> list[str]:
        return sorted(self.alive)


@pytest.fixture()
def no_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """No websocket: readiness observations and in-place resets succeed at once."""

    async def observed(handle: SandboxHandle, start_url: str | None = None, timeout_s: float = 0) -> None:
        return None

    async def in_place(self: SandboxPool, handle: SandboxHandle, phases: dict[str, float]) -> SandboxHandle:
        return replace(handle, token="r" * 32)

    monkeypatch.setattr(pool_module, "ready_observation", observed)
    monkeypatch.setattr(SandboxPool, "_in_place", in_place)


class FakePlays:
    """Plays each entry by writing a sealed audit log that ends as ``outcomes[name]`` says;
    the first play of a task in ``crash_first`` crashes its sandbox instead."""

    def __init__(self, backend: CrashingBackend, outcomes: dict[str, tuple[str, str]],
                 crash_first: set[str] = frozenset(), crash_always: set[str] = frozenset()) -> None:
        self.backend = backend
        self.outcomes = outcomes
        self.crash_first = set(crash_first)
        self.crash_always = crash_always
        self.sandboxes: dict[str, list[str]] = {}

    async def __call__(self, entry: LoadedEntry, handle: SandboxHandle, audit_dir: Path, signer: AuditSigner,
                       snapshot: bytes | None) -> Played:
        self.sandboxes.setdefault(entry.name, []).append(handle.id)
        run_id = f"run-{entry.name}-{len(self.sandboxes[entry.name])}-{handle.id}"
        log = AuditLog(audit_dir / f"{run_id}.jsonl", run_id, signer)
        log.write("run_started", task=entry.name)
        if entry.name in self.crash_always or entry.name in self.crash_first:
            self.crash_first.discard(entry.name)
            self.backend.crash(handle.id)
            status, reason = "failed", "internal: the sandbox stopped answering"
        else:
            status, reason = self.outcomes[entry.name]
        log.finish(status=status, reason=reason, steps=2, duration_s=0.1)
        return Played(run_id, status, reason, 2, 0.1, log.path, log.head)


def run_suite(tmp_path: Path, plays: FakePlays, backend: CrashingBackend, parallel: int = 2,
              repeat: int | None = None) -> EvalResult:
    suite = load_suite(write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n  - task: b.yaml\n"
                                             "    expect: cancelled\n"))
    signer = AuditSigner.generate()

    async def go() -> EvalResult:
        pool = SandboxPool(backend, name="eval-test", size=parallel)
        try:
            return await EvalRunner(suite, pool, audit_dir=tmp_path / "audit", signer=signer, parallel=parallel,
                                    repeat=repeat, play=plays).run()
        finally:
            await pool.close()

    return asyncio.run(go())


def test_eval_help_gives_its_own_exit_codes() -> None:
    """``deskpod eval --help`` says what 0, 1 and 3 mean for a suite (``--min-success``,
    infrastructure errors), not the generic run's "verified success"."""
    result = CliRunner().invoke(app, ["eval", "--help"], terminal_width=200)
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "1 the rate is below --min-success" in text and "a run hit an infrastructure error twice" in text
    assert "verified success" not in text


def test_a_crashed_sandbox_is_retried_once_on_a_fresh_one_and_is_not_the_agents_failure(
        tmp_path: Path, no_daemon: None) -> None:
    backend = CrashingBackend()
    plays = FakePlays(backend, {"a": ("succeeded", "verified: done"), "b": ("cancelled", "cancelled: denied")},
                      crash_first={"a"})
    result = run_suite(tmp_path, plays, backend)
    a, b = result.runs
    assert a.status == "passed" and a.attempts == 2 and "exited (code 137)" in a.infrastructure[0]
    first, second = plays.sandboxes["a"]
    assert first in backend.crashed and second not in backend.crashed and second != first
    assert b.status == "passed" and b.outcomes == ("cancelled",) and b.attempts == 1
    assert a.audit.ok and b.audit.ok


def test_two_crashes_are_an_infrastructure_error_outside_the_rate(tmp_path: Path, no_daemon: None) -> None:
    backend = CrashingBackend()
    plays = FakePlays(backend, {"b": ("cancelled", "cancelled: denied")}, crash_always={"a"})
    result = run_suite(tmp_path, plays, backend)
    a = result.runs[0]
    assert a.status == "infrastructure_error" and a.attempts == 2 and len(a.infrastructure) == 2
    assert len(set(plays.sandboxes["a"])) == 2
    document = report_document(result, 1.0)
    assert (document["judged"], document["success_rate"]) == (1, 1.0)
    assert eval_exit_code(document) == EXIT_UNAVAILABLE


def test_an_entry_whose_snapshot_could_not_be_made_is_reported_once_and_not_retried(
        tmp_path: Path, no_daemon: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its setup failed before the suite: every run of it is an infrastructure error at
    once, after one attempt, without a sandbox or a retry (a second attempt would find the
    snapshot missing too); the other entry runs as usual."""

    async def setup_fails(self: EvalRunner, entry: LoadedEntry, setup: Any) -> bytes:
        raise SnapshotError("the setup run r-1 ended failed: not_verified")

    monkeypatch.setattr(EvalRunner, "_setup", setup_fails)
    backend = CrashingBackend()
    plays = FakePlays(backend, {"b": ("succeeded", "verified: done")})
    suite = load_suite(write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n    snapshot: {setup: b.yaml}\n"
                                             "  - task: b.yaml\n"))
    events: list[str] = []

    async def go() -> EvalResult:
        pool = SandboxPool(backend, name="eval-test", size=1)
        try:
            return await EvalRunner(suite, pool, audit_dir=tmp_path / "audit", signer=AuditSigner.generate(),
                                    play=plays, on_progress=lambda e: events.append(f"{e.kind} {e.task}")).run()
        finally:
            await pool.close()

    result = asyncio.run(go())
    a, b = result.runs
    assert (a.status, a.attempts, a.infrastructure) == ("infrastructure_error", 1, (SNAPSHOT_MISSING,))
    assert "a" not in plays.sandboxes and "retry a" not in events
    assert result.setup_errors == ["a: snapshot setup 'b': the setup run r-1 ended failed: not_verified"]
    assert b.status == "passed" and b.attempts == 1


def test_a_failure_on_a_healthy_sandbox_is_the_agents_and_not_retried(tmp_path: Path, no_daemon: None) -> None:
    backend = CrashingBackend()
    plays = FakePlays(backend, {"a": ("failed", "not_verified: page text does not contain 'done'"),
                                "b": ("succeeded", "verified: done")})
    result = run_suite(tmp_path, plays, backend, repeat=2)
    assert [(r.task, r.index, r.status) for r in result.runs] == [
        ("a", 0, "failed"), ("a", 1, "failed"), ("b", 0, "failed"), ("b", 1, "failed")]
    assert all(r.attempts == 1 for r in result.runs)
    assert result.runs[0].mismatch == "expected succeeded, got failed / not_verified"
    assert result.runs[2].mismatch == "expected cancelled, got succeeded"
    assert eval_exit_code(report_document(result, 0.0)) == EXIT_OK


def test_a_log_that_does_not_verify_fails_the_run_whatever_it_says(tmp_path: Path, no_daemon: None) -> None:
    """The run claims success, but its log was sealed by another key: the verdict is read
    from the log only after its seal verifies, so the run fails."""
    backend = CrashingBackend()
    plays = FakePlays(backend, {"a": ("succeeded", "verified: done"), "b": ("cancelled", "cancelled: denied")})
    other = AuditSigner.generate()

    async def forged(entry: LoadedEntry, handle: SandboxHandle, audit_dir: Path, signer: AuditSigner,
                     snapshot: bytes | None) -> Played:
        return await plays(entry, handle, audit_dir, other if entry.name == "a" else signer, snapshot)

    suite = load_suite(write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n  - task: b.yaml\n"
                                             "    expect: cancelled\n"))

    async def go() -> EvalResult:
        pool = SandboxPool(backend, name="eval-test", size=1)
        try:
            return await EvalRunner(suite, pool, audit_dir=tmp_path / "audit", signer=AuditSigner.generate(),
                                    play=forged).run()
        finally:
            await pool.close()

    a, b = asyncio.run(go()).runs
    assert a.status == "failed" and not a.audit.ok and "does not verify" in a.mismatch
    assert b.status == "passed" and b.audit.ok


def test_no_docker_engine_exits_3_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key" / "signing.key"))
    get_settings.cache_clear()
    path = write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n")
    result = CliRunner().invoke(app, ["eval", str(path), "--report", str(tmp_path / "report")])
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(("reason", "infra"), [
    ("internal: connection to the sandbox closed: code 1006", True),
    ("internal: sandbox at ws://10.0.0.2:8765/v1/ws not reachable after 3 attempts in 60 s; last: refused", True),
    ("workspace_unavailable: the workspace runner does not answer", True),
    ("not_verified: page text does not contain 'done'", False),
    ("policy_denied: the browser is at http://elsewhere.test/", False),
])
def test_a_broken_connection_is_an_infrastructure_reason_and_a_refusal_is_not(reason: str, infra: bool) -> None:
    from deskpod.eval.harness import INFRA_REASONS

    assert bool(INFRA_REASONS.match(reason)) is infra


def test_kubernetes_without_a_bootstrap_token_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKPOD_K8S_BOOTSTRAP_TOKEN_FILE", raising=False)
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key" / "signing.key"))
    get_settings.cache_clear()
    path = write_suite(tmp_path, "name: s\ntasks:\n  - task: a.yaml\n")
    result = CliRunner().invoke(app, ["eval", str(path), "--backend", "kubernetes"])
    assert result.exit_code == EXIT_USAGE and "DESKPOD_K8S_BOOTSTRAP_TOKEN_FILE" in result.output
