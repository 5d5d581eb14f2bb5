"""Cold start and click + screenshot round trips vs a per-action connection.

``python -m bench startup [--rounds 20] [--cold-rounds 5] [--baseline-image IMAGE]
[--no-build]`` (``python -m bench --rounds 20`` still works). It starts its own compose
project (egress, demo, sandbox), measures, prints Markdown tables and tears the project
down. Figures:

- image size of the sandbox image compose builds;
- cold start, ``--cold-rounds`` times: the sandbox and its workspace container are
  removed, then ``compose up -d workspace sandbox``; seconds from that command, and from
  the sandbox container's start (Docker's ``State.StartedAt``), to the first screenshot
  received over the websocket. With ``--baseline-image`` (a sandbox image built from
  the code before), the same rounds alternate between that image and this one;
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
import re
import secrets
import sys
import statistics
import time
from datetime import datetime
from typing import Any

import docker

from bench.common import (
    compose, compose_env, exit_on_sigterm, image, pct, sandbox_container, sandbox_url, teardown,
)
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


async def first_screenshot(url: str, token: str) -> float:
    """Connect (retrying until the daemon listens), take one screenshot; the wall-clock
    time (``time.time()``) it arrived."""
    client = await SandboxClient.connect(url, token, timeout_s=120)
    await client.act([{"type": "screenshot"}])
    arrived = time.time()
    await client.close()
    return arrived


def started_at(container: Any) -> float:
    """Docker's ``State.StartedAt`` of ``container`` as a Unix time (its nanoseconds cut
    to the microseconds ``datetime`` holds)."""
    container.reload()
    stamp = container.attrs["State"]["StartedAt"]
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", stamp).replace("Z", "+00:00")).timestamp()


def cold_start(project: str, env: dict[str, str], dk: docker.DockerClient, token: str) -> tuple[float, float]:
    """Remove the sandbox and workspace containers, start them again and take the first
    screenshot. Returns (from ``compose up``, from the sandbox container's start), seconds."""
    compose(project, env, "rm", "--stop", "--force", "workspace", "sandbox")
    issued = time.time()
    compose(project, env, "up", "-d", "--no-deps", "workspace", "sandbox")
    url = sandbox_url(dk, project)
    arrived = asyncio.run(first_screenshot(url, token))
    return arrived - issued, arrived - started_at(sandbox_container(dk, project))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cold-rounds", type=int, default=5, help="cold starts per image")
    parser.add_argument("--baseline-image", default="",
                        help="a sandbox image of the code before, cold-started alternately with this one")
    parser.add_argument("--no-build", action="store_true", help="use the images already built")


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    project = f"deskpodbench{os.getpid()}"
    env = compose_env(token)
    variants = {"this checkout": env}
    if args.baseline_image:
        variants = {f"baseline {args.baseline_image}": dict(env, DESKPOD_SANDBOX_IMAGE=args.baseline_image), **variants}
    dk = docker.from_env()
    if not args.no_build:
        compose(project, env, "--profile", "demo", "build")
    cold: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    try:
        compose(project, env, "up", "-d", "egress", "demo")
        # The host firewall rule, before the sandbox; a service container (not a one-off
        # `run`), so compose.sh `down` finds the guard and takes the rule off again.
        compose(project, env, "up", "--no-deps", "--exit-code-from", "hostguard", "hostguard")
        for n in range(args.cold_rounds):
            for name, variant_env in variants.items():
                cold[name].append(cold_start(project, variant_env, dk, token))
                print(f"cold start {n + 1}/{args.cold_rounds}, {name}: {cold[name][-1][0]:.2f} s", file=sys.stderr)
        url = sandbox_url(dk, project)
        rows = []
        for fmt in ("png", "jpeg"):
            ours = asyncio.run(rounds(url, token, args.rounds, fmt))
            base = asyncio.run(baseline(url, token, args.rounds, fmt))
            rows.append((fmt, ours, base))
    finally:
        teardown(project, env)
    size = dk.images.get(image("sandbox")).attrs["Size"] / 1e9
    load = os.getloadavg()[0]
    print(f"sandbox image: {size:.2f} GB; {os.cpu_count()} cores; load average at the end {load:.2f}\n")
    print("| cold start → first screenshot | image | n | from compose up, p50 s | p95 s "
          "| from the container's start, p50 s | p95 s |")
    print("|---|---|---|---|---|---|---|")
    for name, times in cold.items():
        up, start = [t[0] for t in times], [t[1] for t in times]
        print(f"| 1280x800 | {name} | {len(times)} | {statistics.median(up):.2f} | {pct(up, 0.95):.2f} "
              f"| {statistics.median(start):.2f} | {pct(start, 0.95):.2f} |")
    print()
    print("| click + screenshot, 1280x800 | median ms | p95 ms | baseline: new connection per action, median ms | p95 ms | ratio |")
    print("|---|---|---|---|---|---|")
    for fmt, ours, base in rows:
        ratio = statistics.median(base) / statistics.median(ours)
        print(f"| {fmt.upper()} | {statistics.median(ours):.1f} | {pct(ours, 0.95):.1f} | "
              f"{statistics.median(base):.1f} | {pct(base, 0.95):.1f} | {ratio:.2f}x |")
