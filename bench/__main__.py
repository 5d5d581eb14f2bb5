"""Measure deskpod's start-up and action round trips against a real compose stack.

Usage (from the repository root, with the package installed)::

    python -m bench [--rounds 20]

It starts its own compose project (egress, demo, sandbox), measures, prints a
Markdown table and tears the project down. Figures:

- image size of ``deskpod/sandbox:latest``;
- start to first screenshot: from ``compose up -d sandbox`` to the first
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
import subprocess
import time
from pathlib import Path

import docker

from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions

ROOT = Path(__file__).resolve().parents[1]
CLICK = {"type": "click", "x": 640, "y": 700}


def compose(project: str, env: dict[str, str], *args: str) -> None:
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    cmd = ["docker", "compose"] if probe.returncode == 0 else ["docker-compose"]
    subprocess.run([*cmd, "-p", project, *args], cwd=ROOT, env=env, check=True, capture_output=True)


def sandbox_url(client: docker.DockerClient, project: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                          "com.docker.compose.service=sandbox"]})
        if found:
            nets = found[0].attrs["NetworkSettings"]["Networks"]
            ip = nets.get(f"{project}_sandbox_net", {}).get("IPAddress")
            if ip:
                return f"ws://{ip}:8765/v1/ws"
        time.sleep(0.05)
    raise SystemExit("sandbox container did not appear")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    token = secrets.token_urlsafe(32)
    project = f"deskpodbench{os.getpid()}"
    env = dict(os.environ, DESKPOD_TOKEN=token)
    dk = docker.from_env()
    compose(project, env, "build")
    compose(project, env, "up", "-d", "egress", "demo")
    try:
        started = time.monotonic()
        compose(project, env, "up", "-d", "--no-deps", "sandbox")
        url = sandbox_url(dk, project)
        start_s = asyncio.run(first_screenshot(url, token, started))
        rows = []
        for fmt in ("png", "jpeg"):
            ours = asyncio.run(rounds(url, token, args.rounds, fmt))
            base = asyncio.run(baseline(url, token, args.rounds, fmt))
            rows.append((fmt, ours, base))
    finally:
        compose(project, env, "down", "-v", "-t", "5")
    size = dk.images.get("deskpod/sandbox:latest").attrs["Size"] / 1e9
    print(f"sandbox image: {size:.2f} GB; start to first screenshot: {start_s:.2f} s; {os.cpu_count()} cores\n")
    print("| click + screenshot, 1280x800 | median ms | p95 ms | baseline: new connection per action, median ms | p95 ms | ratio |")
    print("|---|---|---|---|---|---|")
    for fmt, ours, base in rows:
        ratio = statistics.median(base) / statistics.median(ours)
        print(f"| {fmt.upper()} | {statistics.median(ours):.1f} | {pct(ours, 0.95):.1f} | "
              f"{statistics.median(base):.1f} | {pct(base, 0.95):.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
