"""The ``deskpod`` command: exit codes by class, one JSON document per reporting
command, ``--version``, global options after the subcommand, defaults in the help.

Driven through typer's ``CliRunner`` (in process) and, for the installed script, as
a subprocess. The sandbox is the hostile daemon of ``tests/support`` left
well-behaved (a real websocket server on loopback); "unreachable" is a closed
loopback port; "no Docker" is an engine address nothing listens on, or a docker SDK
that cannot be imported.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from typer.testing import CliRunner

import deskpod
from deskpod.cli import (
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_UNAUTHORIZED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    app,
    main,
)
from deskpod.cli.context import shown_defaults, shown_path
from deskpod.settings import get_settings

pytestmark = pytest.mark.timeout(120)

TASKS = Path(deskpod.__file__).resolve().parent / "tasks"
DESKPOD = Path(sys.executable).with_name("deskpod")
TOKEN = "t" * 43


def _task(tmp_path: Path, success_url: str) -> Path:
    """A GUI task that waits once and then checks the URL against ``success_url``."""
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: cli\nstart_url: http://demo.test/done\nallowed_domains: [demo.test]\n"
        "limits: {max_steps: 2, max_wall_time_s: 30, action_timeout_s: 5}\n"
        "steps:\n  - actions: [{type: wait, seconds: 0.01}]\n"
        f"success: {{url_matches: '{success_url}', timeout_s: 1}}\n",
        encoding="utf-8",
    )
    return task


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A token, a private state folder, no Docker engine to reach; yields the audit folder."""
    monkeypatch.setenv("DESKPOD_TOKEN", TOKEN)
    monkeypatch.setenv("DESKPOD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{_closed_port()}")
    monkeypatch.delenv("DESKPOD_SANDBOX_URL", raising=False)
    monkeypatch.delenv("DESKPOD_AUDIT_DIR", raising=False)
    monkeypatch.delenv("DESKPOD_SERVE_PORT", raising=False)
    monkeypatch.setenv("DESKPOD_STACK_ENV", str(tmp_path / "stack.env"))
    yield tmp_path / "state" / "audit"
    monkeypatch.undo()
    get_settings.cache_clear()  # the next test's settings are its own


@pytest.fixture
def daemon() -> Iterator[HostileDaemon]:
    with HostileDaemon() as d:
        yield d


def invoke(*args: str) -> Any:
    """Run the app in process; ``result.stdout`` and ``result.stderr`` apart."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def document(result: Any) -> dict[str, Any]:
    """The one JSON document on standard output (fails if there is anything else)."""
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


# ---- --version, global options, help -------------------------------------------------------------------


def test_version_prints_the_package_version_and_exits_0() -> None:
    result = invoke("--version")
    assert result.exit_code == EXIT_OK and result.stdout.strip() == f"deskpod {deskpod.__version__}"
    assert document(invoke("--version", "--json")) == {"name": "deskpod", "version": deskpod.__version__}


def test_global_options_are_accepted_after_the_subcommand(tmp_path: Path, env: Path) -> None:
    after = invoke("schema", "--out", str(tmp_path / "a"), "-v", "--json")
    before = invoke("-v", "--json", "schema", "--out", str(tmp_path / "b"))
    for result in (after, before):
        assert result.exit_code == EXIT_OK, result.output
        assert document(result)["ok"] is True and document(result)["schemas"] > 40


def test_help_shows_the_real_defaults_and_positional_help() -> None:
    get_settings.cache_clear()
    shown = shown_defaults()
    run_help = invoke("run", "--help").stdout
    assert "ws://127.0.0.1:8765/v1/ws" in run_help and shown_path(shown.audit_dir) in run_help
    assert "the task file (YAML)" in run_help and "[default: 90.0]" in run_help
    assert "Exit codes: 0 verified success" in run_help
    assert "the sandbox container's name or id" in invoke("audit", "--help").stdout
    release_help = invoke("pool", "release", "--help").stdout
    assert "the sandbox's id" in release_help and "the pool's reset mode" in release_help
    assert "127.0.0.1:8766" in invoke("serve", "--help").stdout


@pytest.mark.process
def test_help_shows_the_stacks_service_port_from_its_env_file(tmp_path: Path) -> None:
    """``run --help`` names the stack's service as this host reaches it: the port the stack's
    .env records (scripts/up.sh's choice), not a fixed 8766; the environment's wins."""
    (tmp_path / "stack.env").write_text("DESKPOD_SERVE_PORT=9123\n", encoding="utf-8")
    base = {k: v for k, v in os.environ.items() if k != "DESKPOD_SERVE_PORT"}
    run_env = dict(base, DESKPOD_STACK_ENV=str(tmp_path / "stack.env"), COLUMNS="300")
    shown = subprocess.run([sys.executable, "-m", "deskpod", "run", "--help"], capture_output=True, text=True,
                           timeout=60, env=run_env)
    assert shown.returncode == 0 and "ws://127.0.0.1:9123/v1/controller" in shown.stdout, shown.stdout
    explicit = subprocess.run([sys.executable, "-m", "deskpod", "run", "--help"], capture_output=True, text=True,
                              timeout=60, env=dict(run_env, DESKPOD_SERVE_PORT="9555"))
    assert "ws://127.0.0.1:9555/v1/controller" in explicit.stdout, explicit.stdout


def test_the_docs_document_the_exit_code_table() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for code, (name, _) in EXIT_CODES.items():
        assert re.search(rf"^\| `{code}` \| `{name}` \|", page, re.M), f"the CLI reference lacks exit code {code}"


# ---- 2: usage or input errors, refused at once ----------------------------------------------------------


def test_a_sandbox_url_that_is_not_a_websocket_url_exits_2_at_once(tmp_path: Path, env: Path) -> None:
    started = time.monotonic()
    result = invoke("run", str(_task(tmp_path, "x")), "--sandbox", "notaurl", "--json")
    assert time.monotonic() - started < 5
    assert result.exit_code == EXIT_USAGE
    error = document(result)
    assert error["ok"] is False and error["exit_code"] == 2 and error["error"]["code"] == "usage"
    assert "notaurl" in error["error"]["message"] and "ws://" in error["error"]["message"]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("deskpod run: ")
    assert not env.exists(), "nothing was run, so nothing was logged"


@pytest.mark.parametrize("case", ["task", "policy", "token", "token_file", "option", "config", "confirm"])
def test_bad_input_exits_2_with_one_json_document(case: str, tmp_path: Path, env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    task = str(_task(tmp_path, "x"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits: [not, a, mapping]\n", encoding="utf-8")
    args = {
        "task": ["run", str(bad)],
        "policy": ["run", task, "--policy", str(bad)],
        "token": ["run", task],
        "token_file": ["code", str(TASKS / "code_mini_billing.yaml"), "--token-file", str(tmp_path / "none")],
        "option": ["run", task, "--no-such-option"],
        "config": ["run", task, "--config", str(bad)],
        "confirm": ["code", task, "--confirm", "maybe"],
    }[case]
    if case == "token":
        monkeypatch.delenv("DESKPOD_TOKEN")
    with pytest.raises(SystemExit) as exited:
        main([*args, "--sandbox", "ws://127.0.0.1:1/v1/ws", "--json"])
    assert exited.value.code == EXIT_USAGE


def test_bad_input_json_documents_parse(tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["run", str(tmp_path / "missing.yaml")], ["run", "--no-such-option"],
                 ["verify-log", str(tmp_path / "missing.jsonl")], ["serve", "--listen", "nohostport"]):
        with pytest.raises(SystemExit) as exited:
            main([*args, "--json"])
        out = capsys.readouterr().out
        assert exited.value.code == EXIT_USAGE, args
        assert json.loads(out)["error"]["code"] == "usage", args


# ---- 3: infrastructure unavailable ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "code"])
def test_a_closed_loopback_port_exits_3_not_1(command: str, tmp_path: Path, env: Path) -> None:
    task = str(_task(tmp_path, "x")) if command == "run" else str(TASKS / "code_mini_billing.yaml")
    started = time.monotonic()
    result = invoke(command, task, "--sandbox", f"ws://127.0.0.1:{_closed_port()}/v1/ws",
                    "--connect-timeout", "1", "--json")
    assert time.monotonic() - started < 10
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    error = document(result)["error"]
    assert error["code"] == "unavailable" and "not reachable" in error["message"]


def test_a_sandbox_that_refuses_connections_is_waited_for_aloud(tmp_path: Path, env: Path) -> None:
    """The wait for a sandbox still starting (``--connect-timeout``) was silent: after the first
    seconds the command says what it waits for, how long, and why, then exits 3 as before."""
    port = _closed_port()
    result = invoke("run", str(_task(tmp_path, "x")), "--sandbox", f"ws://127.0.0.1:{port}/v1/ws",
                    "--connect-timeout", "3", "--json")
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    waiting, refused = result.stderr.splitlines()
    assert waiting.startswith(f"deskpod run: sandbox at ws://127.0.0.1:{port}/v1/ws does not accept connections yet")
    assert "waiting up to 3 s (--connect-timeout)" in waiting and "ConnectionRefusedError" in waiting
    assert "not reachable within 3 s" in refused


@pytest.mark.parametrize("command", ["run", "code"])
def test_a_host_name_that_does_not_resolve_exits_3_at_once_naming_it_and_the_fix(
        command: str, tmp_path: Path, env: Path) -> None:
    """``deskpod run --sandbox ws://sandbox:8765/v1/ws`` from the Docker host waited the whole
    --connect-timeout (90 s) in silence: a name that does not resolve is reported at once, with
    the stack's service (its port from the stack's .env) as the way in."""
    (tmp_path / "stack.env").write_text("DESKPOD_SERVE_PORT=9123\n", encoding="utf-8")
    task = str(_task(tmp_path, "x")) if command == "run" else str(TASKS / "code_mini_billing.yaml")
    result = invoke(command, task, "--sandbox", "ws://nonexistent.invalid:8765/v1/ws", "--json")
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    message = document(result)["error"]["message"]
    assert "'nonexistent.invalid' does not resolve" in message, message
    way_in = ("--service ws://127.0.0.1:9123/v1/controller" if command == "run" else
              "scripts/compose.sh --profile demo run --rm controller deskpod code TASK_FILE --sandbox ws://")
    assert way_in in message, message
    assert not list(env.glob("*.jsonl")), "nothing was run, so nothing was logged"


def test_audit_without_a_docker_engine_exits_3(env: Path) -> None:
    result = invoke("audit", "some-sandbox", "--json")
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert document(result)["error"]["code"] == "unavailable"


@pytest.mark.parametrize("failing", [False, True])
def test_audit_prints_its_table_and_exits_by_verdict(failing: bool, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--json`` the report is the table (tests/integration/test_audit.py runs the
    command on a real sandbox, with ``--json``): exit 0 when every check passed, 1 when one failed."""
    from deskpod.audit import AuditReport
    from deskpod.audit.report import Check

    checks = [Check("seccomp_custom", "a custom seccomp profile", "pass", "the shipped one"),
              Check("read_only_root", "a read-only root", "fail" if failing else "pass", "rw")]
    audited: list[tuple[str | None, str | None]] = []

    def audit_sandbox(sandbox: str | None = None, *, project: str | None = None) -> AuditReport:
        audited.append((sandbox, project))
        return AuditReport("box", "f" * 64, "deskpod/sandbox", checks)

    monkeypatch.setattr("deskpod.audit.audit_sandbox", audit_sandbox)
    result = invoke("audit", "box", "--project", "p")
    assert audited == [("box", "p")]
    assert result.exit_code == (EXIT_FAILURE if failing else EXIT_OK), result.output
    assert "PASS  seccomp_custom" in result.stdout
    assert ("FAILED: read_only_root" if failing else "PASSED") in result.stdout, result.stdout


@pytest.mark.parametrize("missing", ["engine", "sdk"])
def test_pool_up_without_docker_exits_3_and_saves_no_pool(missing: str, tmp_path: Path, env: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if missing == "sdk":
        monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError
        monkeypatch.setitem(sys.modules, "docker.errors", None)
    result = invoke("pool", "up", "--size", "1", "--json")
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert document(result)["error"]["code"] == "unavailable"
    assert not (tmp_path / "state" / "pools" / "default.json").exists()
    assert invoke("pool", "down").exit_code == EXIT_USAGE, "no pool record was left for `down` to trip on"


@pytest.mark.parametrize("args", [["status"], ["acquire"], ["release", "x", "--lease", "l"], ["snapshot", "x", "n"],
                                  ["down"]])
def test_every_pool_command_reports_one_json_document(args: list[str], env: Path, tmp_path: Path) -> None:
    result = invoke("pool", *args, "--pool", "nosuch", "--json")
    assert result.exit_code == EXIT_USAGE
    assert "no pool 'nosuch'" in document(result)["error"]["message"]
    assert document(invoke("reset", "x", "--json", "--pool", "nosuch"))["exit_code"] == EXIT_USAGE
    assert not (tmp_path / "state").exists(), "a missing pool's command left files (a lock file) behind"


def test_pool_up_help_shows_the_images_and_settings_it_really_uses() -> None:
    from deskpod.backend.config import EGRESS_IMAGE, SANDBOX_IMAGE

    shown = " ".join(invoke("pool", "up", "--help").stdout.split())
    assert ":latest" not in shown
    assert f"$DESKPOD_SANDBOX_IMAGE, else {SANDBOX_IMAGE}" in shown and SANDBOX_IMAGE.endswith(f":{deskpod.__version__}")
    assert f"$DESKPOD_EGRESS_IMAGE, else {EGRESS_IMAGE}" in shown
    assert "$DESKPOD_SUBNET_SIZE, else 28" in shown and "$DESKPOD_SCREEN_SIZE, else 1280x800" in shown
    assert "--hold" in invoke("pool", "acquire", "--help").stdout


def _lease_taken_back(monkeypatch: pytest.MonkeyPatch,
                      tmp_path: Path) -> tuple[Callable[[], Any], dict[str, Any], dict[str, Any]]:
    """A one-sandbox pool ``default`` whose slot A acquired for 0.2 s and, once that lapsed, B
    for 600 s: ``(stored, a, b)``, ``stored()`` the slot's record as saved now, ``a`` and ``b``
    the two ``pool acquire --json`` documents."""
    from lease_backend import one_sandbox_pool

    import deskpod.cli.pool

    state = one_sandbox_pool(monkeypatch, tmp_path / "state", "default", "t" * 32, (deskpod.cli.pool, "DockerBackend"))
    monkeypatch.setenv("DESKPOD_POOL_LEASE_S", "0.2")
    a = document(invoke("pool", "acquire", "--json"))
    time.sleep(0.3)
    monkeypatch.setenv("DESKPOD_POOL_LEASE_S", "600")
    b = document(invoke("pool", "acquire", "--json"))
    assert b["id"] == a["id"] and b["lease"] != a["lease"]

    def stored() -> Any:
        record = state.load()
        assert record is not None
        return record.members[0]

    return stored, a, b


def test_a_holder_whose_lease_was_taken_back_cannot_release_its_successors_sandbox(
        env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A's lease (0.2 s) expires and B acquires the slot: `pool release ID --lease A` exits 1
    (lease_lost) and leaves B's lease, token and token file alone; B's release works. A release
    names its lease: without `--lease` it is a usage error."""
    stored, a, b = _lease_taken_back(monkeypatch, tmp_path)
    b_token = Path(b["token_file"]).read_text()
    before = stored()
    assert (before.state, before.lease, before.token) == ("leased", b["lease"], b_token)
    refused = invoke("pool", "release", a["id"], "--lease", a["lease"], "--json")
    assert refused.exit_code == EXIT_FAILURE, refused.output
    assert "no longer leased" in document(refused)["error"]["message"]
    assert stored() == before, "A's release changed B's lease"
    assert Path(b["token_file"]).read_text() == b_token, "A's release removed or changed B's token file"
    assert invoke("pool", "release", a["id"]).exit_code == EXIT_USAGE  # which lease? none named
    shown = document(invoke("pool", "status", "--json"))["sandboxes"][0]
    assert (shown["state"], shown["lease"]) == ("leased", b["lease"])
    released = invoke("pool", "release", b["id"], "--lease", b["lease"], "--json")
    assert released.exit_code == EXIT_OK, released.output
    assert document(released)["performed"] == "recreate"
    assert (stored().state, stored().lease, stored().resets) == ("idle", "", before.resets + 1)
    assert not Path(b["token_file"]).exists()


def test_a_leased_sandbox_is_reset_only_by_naming_its_lease(env: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`deskpod reset ID` of a leased sandbox without `--lease`, or with a lease the pool took
    back, exits 1 (lease_lost) and leaves the lease, token and token file alone; with the lease it
    resets, keeps the lease and writes the new token file; an idle sandbox needs no lease."""
    stored, a, b = _lease_taken_back(monkeypatch, tmp_path)
    b_token = Path(b["token_file"]).read_text()
    before = stored()
    for stale in (["--lease", a["lease"]], []):
        refused = invoke("reset", a["id"], *stale, "--json")
        assert refused.exit_code == EXIT_FAILURE, refused.output
        message = document(refused)["error"]["message"]
        assert ("no longer leased" if stale else "is leased: only its holder may change it") in message, message
        assert stored() == before, "a reset without B's lease changed B's sandbox"
        assert Path(b["token_file"]).read_text() == b_token, "a reset without B's lease changed B's token file"
    human = invoke("reset", a["id"])
    assert human.exit_code == EXIT_FAILURE and "is leased" in human.stderr, human.output
    reset = invoke("reset", b["id"], "--lease", b["lease"], "--json")
    assert reset.exit_code == EXIT_OK, reset.output
    assert (stored().state, stored().lease, stored().resets) == ("leased", b["lease"], before.resets + 1)
    assert Path(document(reset)["token_file"]).read_text() == stored().token != b_token
    assert invoke("pool", "release", b["id"], "--lease", b["lease"]).exit_code == EXIT_OK
    idle = invoke("reset", b["id"], "--json")
    assert idle.exit_code == EXIT_OK, idle.output
    assert (stored().state, document(idle)["token_file"]) == ("idle", None)


# ---- 0 and 1: verified outcomes -------------------------------------------------------------------------


class _Refusing(BaseHTTPRequestHandler):
    """A daemon that refuses every token: HTTP 401 to the websocket handshake (and the probe)."""

    protocol_version = "HTTP/1.1"  # websockets reads only HTTP/1.1 answers

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


@pytest.mark.parametrize("command", ["run", "code"])
def test_a_refused_sandbox_token_exits_4_not_1(command: str, tmp_path: Path, env: Path) -> None:
    """A wrong token exited 1, the code of a failed task: a harness could not tell it from an
    agent's failure. The sandbox's refusal is its own code."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        task = str(_task(tmp_path, "x")) if command == "run" else str(TASKS / "code_mini_billing.yaml")
        result = invoke(command, task, "--sandbox", f"ws://127.0.0.1:{server.server_address[1]}/v1/ws",
                        "--connect-timeout", "5", "--confirm", "deny", "--json")
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == EXIT_UNAUTHORIZED, result.output
    assert document(result)["reason"].startswith("unauthorized:"), result.output


def test_a_refused_token_through_the_service_exits_4_as_without_it(tmp_path: Path, env: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A token the other end refuses is its own code (4), not an unavailable service (3): a
    harness that retries on 3 would retry it for ever, and not a failed task (1)."""
    import asyncio
    import threading

    from running_service import running_service

    started, stop = threading.Event(), threading.Event()
    port: list[int] = []

    async def serve() -> None:
        async with running_service("s" * 43, tmp_path / "service-audit") as listening:
            port.append(listening)
            started.set()
            await asyncio.to_thread(stop.wait)

    server = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    server.start()
    try:
        assert started.wait(20)
        monkeypatch.setenv("DESKPOD_SERVE_TOKEN", "w" * 43)
        get_settings.cache_clear()
        result = invoke("run", str(_task(tmp_path, "x")), "--service", f"ws://127.0.0.1:{port[0]}/v1/controller",
                        "--json")
    finally:
        stop.set()
        server.join(20)
    assert result.exit_code == EXIT_UNAUTHORIZED, result.output
    assert document(result)["error"]["code"] == "unauthorized"
    assert "refused" in document(result)["error"]["message"], result.output


def test_a_verified_success_exits_0_and_a_failure_1(tmp_path: Path, env: Path, daemon: HostileDaemon) -> None:
    ok = invoke("run", str(_task(tmp_path, "^http://demo\\.test/done$")), "--sandbox", daemon.url,
                "--confirm", "deny", "--json")
    assert ok.exit_code == EXIT_OK, ok.output
    success = document(ok)
    assert success["ok"] is True and success["status"] == "succeeded" and success["scene"] is None
    assert Path(success["audit_log"]).parent == env, "the audit folder defaults to the state folder's audit/"

    failed = invoke("run", str(_task(tmp_path, "^http://demo\\.test/elsewhere$")), "--sandbox", daemon.url,
                    "--confirm", "deny", "--json")
    assert failed.exit_code == EXIT_FAILURE, failed.output
    failure = document(failed)
    assert failure["ok"] is False and failure["status"] == "failed" and failure["reason"].startswith("not_verified:")
    assert Path(failure["scene"]).is_dir()

    human = invoke("run", str(_task(tmp_path, "^x$")), "--sandbox", daemon.url, "--confirm", "deny")
    assert human.exit_code == EXIT_FAILURE and human.stdout.startswith("FAILED: task 'cli'")

    log, head = failure["audit_log"], failure["audit_head"]
    pinned = tmp_path / "controller.pub"
    pinned.write_text(invoke("audit-key").stdout)
    intact = invoke("verify-log", log, "--head", head, "--public-key", str(pinned), "--json")
    assert intact.exit_code == EXIT_OK and document(intact)["intact"] is True
    Path(log).write_text(Path(log).read_text().replace("run_started", "run_startet"))
    broken = invoke("verify-log", log, "--public-key", str(pinned), "--json")
    assert broken.exit_code == EXIT_FAILURE and document(broken)["intact"] is False


def test_code_reports_json_and_exits_1_when_not_verified(tmp_path: Path, daemon: HostileDaemon, env: Path) -> None:
    result = invoke("code", str(TASKS / "code_mini_billing.yaml"), "--sandbox", daemon.url, "--confirm", "deny",
                    "--audit-dir", str(tmp_path / "code-audit"), "--json")
    assert result.exit_code == EXIT_FAILURE, result.output
    report = document(result)
    assert report["status"] == "failed" and isinstance(report["changed_files"], list)
    assert Path(report["audit_log"]).parent == tmp_path / "code-audit"


def test_code_passes_its_policy_file_to_the_code_task_runner(tmp_path: Path, env: Path, daemon: HostileDaemon,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import deskpod.controller.code_agent as code_agent
    from deskpod.controller.policy.policy_file import Policy

    policy = tmp_path / "policy.yaml"
    policy.write_text("exec_confirm: all\nexec_confirm_patterns: ['git push*']\n", encoding="utf-8")
    seen: dict[str, Any] = {}
    real = code_agent.run_code_task

    async def runner(task: Any, sandbox: Any, token: str = "", *, policy: Policy | None = None,
                     **options: Any) -> Any:
        seen["policy"] = policy
        return await real(task, sandbox, token, **options)

    monkeypatch.setattr(code_agent, "run_code_task", runner)
    result = invoke("code", str(TASKS / "code_mini_billing.yaml"), "--sandbox", daemon.url, "--confirm", "deny",
                    "--policy", str(policy), "--json")
    assert result.exit_code == EXIT_FAILURE, result.output
    assert isinstance(seen["policy"], Policy)
    assert seen["policy"].exec_confirm == "all" and seen["policy"].exec_confirm_patterns == ["git push*"]
    policy.write_text("exec_confirm_patterns: ['re:(unclosed']\n", encoding="utf-8")
    result = invoke("code", str(TASKS / "code_mini_billing.yaml"), "--sandbox", daemon.url, "--policy", str(policy))
    assert result.exit_code == EXIT_USAGE, result.output


# ---- the installed script -------------------------------------------------------------------------------


@pytest.mark.process
def test_the_installed_script_and_python_m_deskpod(tmp_path: Path) -> None:
    run_env = dict(os.environ, DESKPOD_TOKEN=TOKEN, DESKPOD_STATE_DIR=str(tmp_path / "state"))
    for command in ([str(DESKPOD)], [sys.executable, "-m", "deskpod"]):
        version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
        assert version.returncode == 0 and version.stdout.strip() == f"deskpod {deskpod.__version__}"
    bad = subprocess.run([str(DESKPOD), "run", str(_task(tmp_path, "x")), "--sandbox", "notaurl"],
                         capture_output=True, text=True, timeout=60, env=run_env)
    assert bad.returncode == EXIT_USAGE and bad.stdout == "" and "notaurl" in bad.stderr
    down = subprocess.run([str(DESKPOD), "run", str(_task(tmp_path, "x")), "--json", "--connect-timeout", "0.5",
                           "--sandbox", f"ws://127.0.0.1:{_closed_port()}/v1/ws"],
                          capture_output=True, text=True, timeout=60, env=run_env)
    assert down.returncode == EXIT_UNAVAILABLE and json.loads(down.stdout)["exit_code"] == EXIT_UNAVAILABLE
    nothing = subprocess.run([str(DESKPOD)], capture_output=True, text=True, timeout=60)
    assert nothing.returncode == EXIT_USAGE and "Usage" in nothing.stdout + nothing.stderr
    completion = subprocess.run([str(DESKPOD)], capture_output=True, text=True, timeout=60, env=dict(
        os.environ, _DESKPOD_COMPLETE="complete_bash", COMP_WORDS="deskpod pool re", COMP_CWORD="2"))
    assert completion.returncode == 0 and completion.stdout.split() == ["release"], "typer's shell completion"


def test_config_file_before_or_after_the_subcommand_sets_defaults(tmp_path: Path, env: Path,
                                                                  daemon: HostileDaemon) -> None:
    config = tmp_path / "deskpod.toml"
    config.write_text(f'sandbox_url = "{daemon.url}"\naudit_dir = "{tmp_path / "from-config"}"\n', encoding="utf-8")
    task = str(_task(tmp_path, "^http://demo\\.test/done$"))
    for args in (["run", task, "--config", str(config)], ["--config", str(config), "run", task]):
        result = invoke(*args, "--confirm", "deny", "--json")
        assert result.exit_code == EXIT_OK, result.output
        assert Path(document(result)["audit_log"]).parent == tmp_path / "from-config"
        assert "DESKPOD_CONFIG" not in os.environ, "the command restores the environment"
    config.write_text('sandbox_url = "notaurl"\n', encoding="utf-8")
    refused = invoke("run", task, "--config", str(config), "--json")
    assert refused.exit_code == EXIT_USAGE and "notaurl" in document(refused)["error"]["message"]


def test_pool_up_with_a_bad_option_exits_2_and_saves_no_pool(tmp_path: Path, env: Path) -> None:
    result = invoke("pool", "up", "--screen-size", "huge", "--json")
    assert result.exit_code == EXIT_USAGE, result.output
    assert not (tmp_path / "state" / "pools" / "default.json").exists()
    assert invoke("pool", "up", "--size", "0").exit_code == EXIT_USAGE

