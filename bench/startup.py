"""Start-up time and click + screenshot round trips vs a per-action connection.

``python -m bench startup [--rounds 20]`` (``python -m bench --rounds 20`` still
works). It starts its own compose project (egress, demo, sandbox), measures,
prints a Markdown table and tears the project down. Figures:

- image size of ``deskpod/sandbox:latest``;
- start to first screenshot: from ``compose up -d workspace sandbox`` to the first
  screenshot received over the websocket, seconds;
- click + screenshot round trip over one persistent connection, PNG and JPEG,
  milliseconds (median and p95 of ``--rounds``);
- baseline, measured side by side in the same run: the same click + screenshot
  over a new connection per action (connect, authenticate, hello, act, close), the
  way per-request HTTP sandboxes work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time

import docker

from bench.common import compose, compose_env, exit_on_sigterm, pct, sandbox_url, teardown
from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions

CLICK = {"type": "click", "x": 640, "y": 700}


async def rounds(url: str, token: str, n: int, fmt: str) -> list[float]:
    client = await SandboxClient.connect(url, token)
    try:
        await client.navigate("http://demo.test/")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            await client.act([CLICK], ObserveOptions(format=fmt))  # type: ignore[arg-type]
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        await client.close()


async def baseline(url: str, token: str, n: int, fmt: str) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client = await SandboxClient.connect(url, token)
        await client.act([CLICK], ObserveOptions(format=fmt))  # type: ignore[arg-type]
        await client.close()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def first_screenshot(url: str, token: str, started: float) -> float:
    client = await SandboxClient.connect(url, token, timeout_s=120)
    await client.act([{"type": "screenshot"}])
    elapsed = time.monotonic() - started
    await client.close()
    return elapsed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20)


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    project = f"deskpodbench{os.getpid()}"
    env = compose_env(token)
    dk = docker.from_env()
    compose(project, env, "build")
    try:
        compose(project, env, "up", "-d", "egress", "demo")
        compose(project, env, "run", "--rm", "hostguard")  # the host firewall rule, before the sandbox
        started = time.monotonic()
        # The workspace container (the agent's zone) is part of every sandbox's start.
        compose(project, env, "up", "-d", "--no-deps", "workspace", "sandbox")
        url = sandbox_url(dk, project)
        start_s = asyncio.run(first_screenshot(url, token, started))
        rows = []
        for fmt in ("png", "jpeg"):
            ours = asyncio.run(rounds(url, token, args.rounds, fmt))
            base = asyncio.run(baseline(url, token, args.rounds, fmt))
            rows.append((fmt, ours, base))
    finally:
        teardown(project, env)
    size = dk.images.get(os.environ.get("DESKPOD_SANDBOX_IMAGE", "deskpod/sandbox:latest")).attrs["Size"] / 1e9
    print(f"sandbox image: {size:.2f} GB; start to first screenshot: {start_s:.2f} s; {os.cpu_count()} cores\n")
    print("| click + screenshot, 1280x800 | median ms | p95 ms | baseline: new connection per action, median ms | p95 ms | ratio |")
    print("|---|---|---|---|---|---|")
    for fmt, ours, base in rows:
        ratio = statistics.median(base) / statistics.median(ours)
        print(f"| {fmt.upper()} | {statistics.median(ours):.1f} | {pct(ours, 0.95):.1f} | "
              f"{statistics.median(base):.1f} | {pct(base, 0.95):.1f} | {ratio:.2f}x |")
