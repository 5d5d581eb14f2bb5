"""The display's refresh rate: the frames a page gets and the CPU they cost, rate by rate.

``python -m bench frame-clock [--rates 60,240] [--seconds 5] [--no-build]`` (from the
repository root, package installed). For each rate it (re)starts the sandbox of its own
compose project (compose.yaml: every hardening flag) with ``DESKPOD_DISPLAY_REFRESH_HZ``
set to it, and measures there, over one persistent connection:

- **frames/s**: a page's ``requestAnimationFrame`` callbacks in 500 ms (the demo's
  ``settle-frames`` fixture counts them after a click and writes the count);
- **CPU**: the sandbox container's CPU time (Docker's stats, one-shot samples
  ``--seconds`` apart), in cores, on an idle page (``events``) and on a page with an
  endless CSS animation (``spinner``: a loading spinner).

60 Hz is the baseline: the rate Chromium took from Xvfb's own mode (no refresh rate)
before the daemon gave the display one. Prints Markdown; tears the project down at the
end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import secrets
import sys
import time
from typing import Any

import docker

from bench.common import compose, compose_env, exit_on_sigterm, ready_client, sandbox_container, sandbox_url, teardown
from deskpod.protocol import ObserveOptions

SITE = "http://demo.test/fixtures"
GO = (200, 200)
"""The settle-frames fixture's button, screen pixels."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", default="60,240", help="refresh rates to measure, Hz (default 60,240)")
    parser.add_argument("--seconds", type=float, default=5.0, help="CPU sampling time per page (default 5)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodbenchclock", help="compose project name")


def cpu_ns(container: Any) -> int:
    """The container's CPU time so far, nanoseconds (a one-shot stats sample)."""
    stats = container.stats(stream=False, one_shot=True)
    return int(stats["cpu_stats"]["cpu_usage"]["total_usage"])


async def measure(url: str, token: str, container: Any, seconds: float) -> dict[str, float]:
    """Frames per second, then the CPU in cores on the idle and the animated page."""
    client = await ready_client(url, token, f"{SITE}/events")
    found: dict[str, float] = {}
    try:
        await client.navigate(f"{SITE}/settle-frames")
        await client.act([{"type": "click", "x": GO[0], "y": GO[1]}])
        later = await client.act([{"type": "wait", "seconds": 0.8}], ObserveOptions(page_text=True))
        found["frames_per_s"] = int((later.page_text or "").split("frames: ")[1].split()[0]) / 0.5
        for page in ("events", "spinner"):
            await client.navigate(f"{SITE}/{page}")
            await asyncio.sleep(1.0)
            t0, c0 = time.monotonic(), cpu_ns(container)
            await asyncio.sleep(seconds)
            t1, c1 = time.monotonic(), cpu_ns(container)
            found[page] = (c1 - c0) / 1e9 / (t1 - t0)
    finally:
        await client.close()
    return found


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    rates = [int(r) for r in args.rates.split(",")]
    token = secrets.token_urlsafe(32)
    env = compose_env(token)
    dk = docker.from_env()
    started = time.monotonic()
    if not args.no_build:
        print("building images ...", file=sys.stderr, flush=True)
        compose(args.project, env, "--profile", "demo", "build")
    rows: list[tuple[int, dict[str, float]]] = []
    try:
        compose(args.project, env, "up", "-d", "--no-build", "egress", "demo")
        for rate in rates:
            rate_env = dict(env, DESKPOD_DISPLAY_REFRESH_HZ=str(rate))
            compose(args.project, rate_env, "up", "-d", "--no-build", "--no-deps", "--force-recreate",
                    "sandbox")
            container = sandbox_container(dk, args.project)
            rows.append((rate, asyncio.run(measure(sandbox_url(dk, args.project), token, container, args.seconds))))
            print(f"  {rate} Hz done ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    finally:
        teardown(args.project, env)
    print(f"`python -m bench frame-clock {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; "
          f"{os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.2f}; "
          f"run took {time.monotonic() - started:.0f} s.\n")
    print("| refresh rate | a page's animation frames/s | sandbox CPU, idle page (cores) "
          "| sandbox CPU, endless CSS animation (cores) |")
    print("|---|---|---|---|")
    for rate, found in rows:
        label = f"{rate} Hz" + (" (baseline: the rate Chromium took from Xvfb's own mode)" if rate == 60 else "")
        print(f"| {label} | {found['frames_per_s']:.0f} | {found['events']:.3f} | {found['spinner']:.3f} |")
