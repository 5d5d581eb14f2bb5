"""Time from ``finish`` (``claim_done``) to verdict: the clean room beside the in-place check it replaced.

``python -m bench verdict [--rounds 10]`` (from the repository root, package
installed). It builds the images, starts its own compose project (egress, host
guard, workspace, sandbox; removed at the end, also on failure) and plays the
mini-billing fix task (``runtime/deskpod/tasks/code_mini_billing.yaml``) through
:func:`deskpod.controller.code_agent.run_code_task` ``--rounds`` times. Each round
reports, from the run's audit log:

- **clean-room verdict**: the ``verify`` record's ``verdict_s``, from the claim to
  the verdict: the workspace manifest, the changed files read back, the clean-room
  archive, the isolated pytest run in a fresh folder, the JUnit report parsed;
- **seed collection**: ``workspace_seeded.seed_collect_s``, the new cost paid once
  per run at seeding (``pytest --collect-only`` in a clean room);

and then, on the same workspace right after the run (the fix still applied), the
**in-place check** the controller did before the clean room: a ``workspace_diff``, a
``read_file`` of every protected seed file and ``run_tests`` in the workspace.
Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import secrets
import statistics
import sys
import tempfile
import time

import docker

from bench.common import ROOT, compose, compose_env, exit_on_sigterm, pct, sandbox_url, teardown
from deskpod.client import SandboxClient
from deskpod.controller.code_agent import run_code_task
from deskpod.controller.code_task import CodeTaskSpec, load_code_task
from deskpod.protocol import ReadFileRequest, RunTestsRequest, WorkspaceDiffRequest

TASK = ROOT / "runtime" / "deskpod" / "tasks" / "code_mini_billing.yaml"
PROTECTED_SEED_FILES = ["tests/test_billing.py"]
"""The seed files the old check read back (the mini-billing seed's files matching its protected patterns)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verdict`` subcommand's options."""
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--project", default="deskpodbenchverdict")


async def _in_place(url: str, token: str, task: CodeTaskSpec) -> float:
    """The pre-clean-room check on the workspace as it is: diff, protected files read back, tests run."""
    client = await SandboxClient.connect(url, token, timeout_s=30)
    try:
        started = time.perf_counter()
        await client.request(WorkspaceDiffRequest(type="workspace_diff", id=client.next_id(), max_bytes=1))
        for path in PROTECTED_SEED_FILES:
            await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path=path))
        reply = await client.request(RunTestsRequest(type="run_tests", id=client.next_id(),
                                                     argv=task.success.test_command, timeout_s=task.success.timeout_s))
        elapsed = time.perf_counter() - started
        if not reply.workspace.passed:
            raise SystemExit(f"the in-place check failed: {reply.workspace.tail[-500:]}")
        return elapsed
    finally:
        await client.close()


async def _rounds(url: str, token: str, rounds: int) -> dict[str, list[float]]:
    task = load_code_task(TASK)
    out: dict[str, list[float]] = {"clean-room verdict": [], "seed collection": [], "in-place check": []}
    with tempfile.TemporaryDirectory() as audit_dir:
        for index in range(rounds):
            result = await run_code_task(task, url, token, audit_dir=audit_dir)
            if result.status != "succeeded":
                raise SystemExit(f"round {index}: {result.reason}")
            events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
            verify = next(e for e in events if e["event"] == "verify")
            seeded = next(e for e in events if e["event"] == "workspace_seeded")
            out["clean-room verdict"].append(verify["verdict_s"])
            out["seed collection"].append(seeded["seed_collect_s"])
            out["in-place check"].append(await _in_place(url, token, task))
            print(f"round {index + 1}/{rounds}", file=sys.stderr)
    return out


def run(args: argparse.Namespace) -> None:
    """Build, start, measure, print the table, tear down."""
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    env = compose_env(token)
    started = time.monotonic()
    try:
        compose(args.project, env, "build", "sandbox", "egress", "hostguard")
        compose(args.project, env, "up", "-d", "--no-build", "sandbox")
        url = sandbox_url(docker.from_env(), args.project)
        times = asyncio.run(_rounds(url, token, args.rounds))
    finally:
        teardown(args.project, env)
    print(f"`python -m bench verdict --rounds {args.rounds}`, {dt.date.today()}, {platform.system()} "
          f"{platform.release()}, {time.monotonic() - started:.0f} s in all.\n")
    print("| step | n | p50 s | p95 s | mean s |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {len(values)} | {pct(values, 0.5):.3f} | {pct(values, 0.95):.3f} | "
              f"{statistics.fmean(values):.3f} |")
