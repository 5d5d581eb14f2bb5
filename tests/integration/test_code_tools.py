"""Code-agent workspace tools inside the real hardened sandbox, and the mini-billing example end to end."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from deskpod_stack import ROOT, Stack, ok, send, with_client
from deskpod.client import SandboxClient
from deskpod.controller.code_agent import run_code_task
from deskpod.controller.code_task import load_code_task
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseNotice
from deskpod.protocol import ErrorReply, ObserveOptions

pytestmark = pytest.mark.integration

TASKS = ROOT / "runtime" / "deskpod" / "tasks"


async def denied(client: SandboxClient, **fields: Any) -> str:
    """Send a request that must fail with ``path_denied``; return the reason."""
    reply = await send(client, **fields)
    assert isinstance(reply, ErrorReply), (fields, reply)
    assert reply.error.code == "path_denied", (fields, reply.error)
    return str(reply.error.detail["reason"])


def workspace_sh(stack: Stack, script: str) -> str:
    """Run a fixed script in the workspace container, where the workspace lives, with ``docker exec``
    (outside the daemon, to check results)."""
    result = stack.container("workspace").exec_run(["/bin/sh", "-c", script], demux=True)
    out, err = result.output
    return (out or b"").decode() + (err or b"").decode()


def test_file_tools_never_leave_the_workspace(stack: Stack) -> None:
    """"../../etc/passwd", "/etc/passwd", "sub/../../x.txt" and "a\\u0000b" are refused and create
    nothing outside; "sub/../ok.txt" writes <ws>/ok.txt."""

    async def body(client: SandboxClient) -> list[str]:
        await ok(client, type="seed_workspace")
        reasons = [
            await denied(client, type="read_file", path="../../etc/passwd"),
            await denied(client, type="read_file", path="/etc/passwd"),
            await denied(client, type="write_file", path="sub/../../x.txt", content="x"),
            await denied(client, type="read_file", path="a\u0000b"),
            await denied(client, type="write_file", path="/tmp/c30.txt", content="x"),
            await denied(client, type="write_file", path="../tmp/c30.txt", content="x"),
            await denied(client, type="list_dir", path=".."),
        ]
        written = await ok(client, type="write_file", path="sub/../ok.txt", content="ok\n")
        assert (written.path, written.created) == ("ok.txt", True)
        assert (await ok(client, type="read_file", path="/workspace/ok.txt")).content == "ok\n"
        return reasons

    reasons = with_client(stack, body)
    assert reasons == ["outside_workspace"] * 3 + ["nul_byte"] + ["outside_workspace"] * 3
    assert workspace_sh(
        stack, "cat /workspace/ok.txt; ls /workspace; ls /tmp/c30.txt /x.txt /workspace/sub 2>&1 | wc -l"
    ) == ("ok\nok.txt\n3\n")


def test_symlinks_inside_the_workspace_cannot_lead_out(stack: Stack) -> None:
    """A symlink to /etc (or /tmp, or up the tree) made by the agent's own exec gives no way out."""

    async def body(client: SandboxClient) -> list[str]:
        await ok(client, type="seed_workspace")
        made = await ok(
            client, type="exec", cmd="ln -s /etc etc; ln -s /tmp tmp; mkdir d; ln -s ../.. d/up; ln -s d in"
        )
        assert made.exit_code == 0, made
        reasons = [
            await denied(client, type="read_file", path="etc/passwd"),
            await denied(client, type="list_dir", path="etc"),
            await denied(client, type="write_file", path="tmp/escape.txt", content="x"),
            await denied(client, type="write_file", path="d/up/tmp/escape.txt", content="x"),
            await denied(client, type="exec", argv=["ls"], cwd="etc"),
            await denied(client, type="apply_patch", patch="--- /dev/null\n+++ b/tmp/escape.txt\n@@ -0,0 +1 @@\n+x\n"),
        ]
        assert (await ok(client, type="write_file", path="in/ok.txt", content="fine")).path == "d/ok.txt"
        return reasons

    assert with_client(stack, body) == ["symlink_escape"] * 6
    assert "No such file" in workspace_sh(stack, "ls /tmp/escape.txt 2>&1")


def test_prompts_return_at_once_and_a_timeout_kills_the_whole_group(stack: Stack) -> None:
    """Stdin is at EOF, so `read -p` and `input()` return at once; a `sleep 60` past its 2 s timeout
    is killed together with its child; then "echo ok" answers "ok"."""

    async def body(client: SandboxClient) -> dict[str, Any]:
        await ok(client, type="seed_workspace")
        out: dict[str, Any] = {}
        started = time.monotonic()
        out["read"] = await ok(client, type="exec", cmd="read -p 'Ok to proceed? (y) ' a; echo got:$a", timeout_s=5)
        out["read_s"] = time.monotonic() - started
        started = time.monotonic()
        out["input"] = await ok(client, type="exec", cmd="python3 -c 'input()'", timeout_s=5)
        out["input_s"] = time.monotonic() - started
        started = time.monotonic()
        out["sleep"] = await ok(client, type="exec", cmd="sleep 60 & echo $! > child.pid; sleep 60", timeout_s=2)
        out["sleep_s"] = time.monotonic() - started
        pid = (await ok(client, type="read_file", path="child.pid")).content.strip()
        out["child"] = await ok(
            client,
            type="exec",
            argv=["/bin/sh", "-c", 'sleep 0.3; test -d "/proc/$1" && cat "/proc/$1/stat" || echo gone', "-", pid],
        )
        out["echo"] = await ok(client, type="exec", cmd="echo ok")
        return out

    out = with_client(stack, body)
    assert out["read"].exit_code == 0 and out["read"].stdout == "got:\n" and out["read_s"] < 2
    assert out["input"].exit_code == 1 and "EOFError" in out["input"].stderr and out["input_s"] < 3
    sleep = out["sleep"]
    assert sleep.timed_out and sleep.exit_code is None and sleep.signal == 9 and 1.9 < out["sleep_s"] < 5
    assert out["child"].stdout == "gone\n", out["child"]
    assert (out["echo"].exit_code, out["echo"].stdout) == (0, "ok\n")


def test_huge_output_is_capped_with_head_tail_and_marker_and_gui_requests_still_run(stack: Stack) -> None:
    """50 MB of output comes back as a 10 KiB head + tail around a truncation marker; the daemon stays healthy,
    a screenshot on another connection is served while an exec runs, and a second exec meanwhile gets busy."""

    async def main() -> dict[str, Any]:
        a = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        b = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        c = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        try:
            await ok(a, type="seed_workspace")
            out: dict[str, Any] = {}
            out["big"] = await ok(a, type="exec", cmd="head -c 50000000 /dev/zero | tr '\\0' x; echo; echo THE-END")
            slow = asyncio.create_task(ok(a, type="exec", cmd="sleep 3; echo slow-done", timeout_s=10))
            await asyncio.sleep(0.5)
            started = time.monotonic()
            shot = await b.act([], ObserveOptions(format="jpeg"))
            out["shot_s"] = time.monotonic() - started
            out["shot"] = shot.screenshot
            out["busy"] = await send(c, type="exec", cmd="echo second")
            out["slow"] = await slow
            return out
        finally:
            for client in (a, b, c):
                await client.close()

    out = asyncio.run(main())
    big = out["big"]
    assert big.exit_code == 0 and big.truncated and big.stdout_bytes == 50_000_009
    assert big.stdout.startswith("x" * 1000) and big.stdout.endswith("x\nTHE-END\n")
    assert "output truncated: 49989769 bytes and 0 line breaks omitted" in big.stdout and len(big.stdout) < 10_500
    assert out["shot"] is not None and out["shot_s"] < 2.5, "a GUI request must not wait for the exec"
    assert isinstance(out["busy"], ErrorReply) and out["busy"].error.code == "busy"
    assert out["slow"].stdout == "slow-done\n"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{stack.ip('sandbox', 'sandbox_net')}:8765/healthz", timeout=5) as resp:
        assert resp.status == 200


def test_exec_environment_is_scrubbed(stack: Stack) -> None:
    """No token, proxy, display or daemon variable reaches a command unless it asks for the network."""

    async def body(client: SandboxClient) -> tuple[str, str]:
        await ok(client, type="seed_workspace")
        plain = await ok(client, type="exec", argv=["env"])
        networked = await ok(client, type="exec", argv=["env"], network=True)
        return plain.stdout, networked.stdout

    plain, networked = with_client(stack, body)
    names = {line.split("=", 1)[0] for line in plain.splitlines()}
    assert stack.token not in plain and stack.token not in networked
    assert not names & {"DESKPOD_TOKEN", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "DISPLAY", "XDG_RUNTIME_DIR"}
    assert "HOME=/home/agent" in plain and "PATH=/usr/local/bin:/usr/bin:/bin" in plain
    # The proxy with this command's egress grant (a credential revoked when it ended).
    assert re.search(r"^HTTPS_PROXY=http://deskpod:[A-Za-z0-9_-]{43}@egress:3128$", networked, re.M), networked


def test_mini_billing_example_from_the_readme_ends_verified(stack: Stack) -> None:
    """The command of the docs' code-agents guide (docs/guides/code-agents.md): the controller container
    plays the task; the controller's own test run passes."""
    result = stack.run_compose(
        "run",
        "--rm",
        "controller",
        "deskpod",
        "code",
        "/opt/deskpod/tasks/code_mini_billing.yaml",
        "--sandbox",
        "ws://sandbox:8765/v1/ws",
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VERIFIED SUCCESS" in result.stdout and "2 passed" in result.stdout
    assert "changed: modified billing.py" in result.stdout


def test_mini_billing_claim_without_fix_fails_and_the_audit_log_tells_why(stack: Stack, tmp_path: Path) -> None:
    """An agent that claims success without fixing anything: the controller re-runs the tests, the run fails."""
    task = load_code_task(TASKS / "code_mini_billing_claim_only.yaml")
    result = asyncio.run(run_code_task(task, stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "failed", result.reason
    assert result.reason.startswith("not verified:") and "1 failed, 1 passed" in result.reason
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [e["event"] for e in events] == [
        "run_started",
        "workspace_seeded",
        "step",
        "step",
        "verify",
        "step",
        "change_summary",
        "run_finished",
    ]
    verify = next(e for e in events if e["event"] == "verify")
    assert verify["ok"] is False and "assert 90.5 == 94.5" in verify["tail"]
    summary = next(e for e in events if e["event"] == "change_summary")
    assert summary["files"] == [] and summary["diff"] == ""


CHEATS = {
    # Rewrite the failing test, commit, and make the seed commit point at the new tree.
    "git_replace": "printf 'def test_ok():\\n    assert True\\n' > tests/test_billing.py && git add -A && "
                   "git commit -qm x && git replace $(git rev-list --max-parents=0 HEAD) HEAD",
    # A usercustomize module that makes every Python run report success.
    "user_site": "d=$(python3 -m site --user-site) && mkdir -p \"$d\" && "
                 "printf 'import sys\\nif \"pytest\" in \" \".join(sys.argv):\\n    print(\"2 passed\"); sys.exit(0)\\n'"
                 " > \"$d/usercustomize.py\"",
    # A process that escapes the command's process group and keeps rewriting the test file.
    "escaped_process": "setsid bash -c 'while true; do printf \"def test_ok():\\n    pass\\n\" > tests/test_billing.py;"
                       " sleep 0.05; done' >/dev/null 2>&1 < /dev/null & sleep 0.5",
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_an_agent_cannot_fake_passing_tests(stack: Stack, tmp_path: Path, cheat: str) -> None:
    """Whatever an agent does inside the sandbox (even commands a human approved), the claim is checked
    against the host's own copy of the protected files and a clean test run: it still fails."""

    class Approve:
        async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
            return ConfirmationAnswer(True, request.digest, "test")

        async def review(self, notice: PauseNotice) -> None:
            raise AssertionError("code runs do not pause")

    task_file = tmp_path / "cheat.yaml"
    task_file.write_text(
        (TASKS / "code_mini_billing_claim_only.yaml").read_text()
        .replace("seed: ../examples/mini_billing", f"seed: {ROOT / 'runtime' / 'deskpod' / 'examples' / 'mini_billing'}")
        .replace("  - {tool: claim_done", "  - {tool: exec, cmd: " + json.dumps(CHEATS[cheat]) + "}\n  - {tool: claim_done")
    )
    result = asyncio.run(run_code_task(load_code_task(task_file), stack.ws_url, stack.token, channel=Approve(),
                                       audit_dir=tmp_path))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    ran = [e for e in events if e["event"] == "step" and e.get("tool") == "exec"]
    assert ran and ran[0]["outcome"] == "ok" and ran[0]["decision"] != "denied", ran
    assert result.status == "failed", result.reason
