"""Exec output a model can read, through the real sandbox (daemon, workspace runner, websocket client),
and exec confirmations an agent's command cannot get around."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from deskpod_stack import ROOT, Stack, ok, with_client
from deskpod.client import SandboxClient
from deskpod.controller.code_agent import run_code_task
from deskpod.controller.code_task import ToolCall, load_code_task
from deskpod.controller.policy.policy_file import Policy
from deskpod.protocol import ErrorReply

pytestmark = pytest.mark.integration

TASKS = ROOT / "runtime" / "deskpod" / "tasks"


async def refused(client: SandboxClient, **fields: Any) -> ErrorReply:
    reply = await client.send_raw(json.dumps({"id": client.next_id(), **fields}))
    assert isinstance(reply, ErrorReply), (fields, reply)
    return reply


def _no_raw_controls(text: str) -> bool:
    return not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in text)


def test_exec_output_is_capped_cleaned_and_kept_apart(stack: Stack) -> None:
    """The review's cases: `seq 1 2000000` returned 10,873 lines and /dev/urandom 62,069
    characters with raw NUL/ESC/BEL; now about 10 KB and 256 lines per stream, a marker, no raw control byte."""

    async def body(client: SandboxClient) -> dict[str, Any]:
        await ok(client, type="seed_workspace")
        out: dict[str, Any] = {}
        out["seq"] = await ok(client, type="exec", cmd="seq 1 2000000")
        out["random"] = await ok(client, type="exec", cmd="head -c 20000000 /dev/urandom", timeout_s=60)
        out["controls"] = await ok(
            client, type="exec", cmd="printf 'a plain line of output\\n'; printf 'red \\033[31mtext\\033[0m bell\\a nul\\0 "
            "end\\n'; printf 'err\\033]0;title\\a\\n' >&2; exit 3",
        )
        out["line"] = await ok(client, type="exec", cmd="head -c 5000000 /dev/zero | tr '\\0' y; echo")
        out["utf8"] = await ok(
            client, type="exec", argv=["python3", "-c", "print('\u00e9\u20ac' * 100000)"], max_output_bytes=1001,
        )
        out["wide"] = await ok(client, type="exec", cmd="seq 1 100000", max_output_bytes=1_000_000,
                               max_output_lines=2000)
        out["too_big"] = await refused(client, type="exec", cmd="true", max_output_bytes=4 * 1_048_576)
        out["tests"] = await ok(client, type="run_tests", argv=["bash", "-c", "seq 1 500000; printf '\\033[1mbold\\a\\n'"])
        return out

    out = with_client(stack, body)
    seq = out["seq"]
    lines = seq.stdout.splitlines()
    assert seq.exit_code == 0 and seq.truncated and seq.stdout_lines == 2_000_000
    assert lines[0] == "1" and lines[-1] == "2000000" and seq.stdout.count("\n") <= 256 + 2
    assert len(seq.stdout) <= 10_240 + 200 and "line breaks omitted (of 14888896 bytes, 2000000 line breaks)" in seq.stdout

    random = out["random"]
    assert random.stdout_binary and random.stdout_bytes == 20_000_000 and len(random.stdout) < 200
    assert "binary output not shown: 20000000 bytes" in random.stdout and _no_raw_controls(random.stdout)

    controls = out["controls"]
    assert controls.exit_code == 3 and not controls.stdout_binary
    assert controls.stdout.splitlines()[1] == "red text bell\\x07 nul\\x00 end"
    assert controls.stderr == "err\n" and _no_raw_controls(controls.stdout + controls.stderr)

    line = out["line"]
    assert line.truncated and len(line.stdout) <= 10_240 + 200 and line.stdout.startswith("y" * 5000)
    assert "0 line breaks omitted (of 5000001 bytes, 1 line breaks)" in line.stdout

    utf8 = out["utf8"].stdout
    head, tail = utf8.split("\n[...")[0], utf8.split("...]\n")[1]
    assert "\ufffd" not in utf8 and "\\x" not in utf8 and set(head + tail.strip()) <= {"\u00e9", "\u20ac"}

    wide = out["wide"]
    assert wide.stdout.splitlines()[:1000] == [str(i) for i in range(1, 1001)] and wide.stdout.endswith("100000\n")

    assert out["too_big"].error.code == "invalid_request"

    tests = out["tests"]
    assert tests.passed and tests.tail.endswith("bold\\x07\n") and tests.tail.count("\n") <= 256 + 2
    assert _no_raw_controls(tests.tail)


def test_a_write_outside_the_workspace_is_refused_without_a_confirmation(stack: Stack, tmp_path: Path) -> None:
    """`touch /tmp/marker` ran as L1 and the change summary did not show it; now it waits for a
    confirmation (refused by the default channel) and no marker appears in the workspace container."""
    task = load_code_task(TASKS / "code_mini_billing.yaml")
    cheats = ["touch /tmp/marker", 'X=touch; $X /tmp/marker', "cd /tmp && touch marker",
              "echo dG91Y2ggL3RtcC9tYXJrZXI= | base64 -d | sh"]
    steps = [ToolCall.model_validate({"tool": "exec", "cmd": c}) for c in cheats]
    steps.append(ToolCall.model_validate({"tool": "exec", "cmd": "ls /tmp/marker"}))
    result = asyncio.run(run_code_task(task.model_copy(update={"steps": steps}), stack.ws_url, stack.token,
                                       audit_dir=tmp_path, policy=Policy()))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    ran = [e for e in events if e["event"] == "step"]
    assert [e["decision"] for e in ran] == ["denied"] * 4 + ["allowed"], ran
    assert ran[-1]["result"]["exit_code"] != 0, "the marker must not exist"
