"""A click that opens UI the browser draws itself (a popup), beside a click that does not,
and beside a sandbox image from before the settle waited for popups.

``python -m bench popups --baseline-image IMAGE [--rounds 15]`` (from the repository root,
package installed; IMAGE a sandbox image built from main before this change) starts its
own compose project (``-p deskpodpopups``: egress, demo, the hardened sandbox) once with
this tree's sandbox image (``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each
times, on the demo site's ``/fixtures/popups``:

- **select list**: a click on the ``<select>``, which opens its list;
- **colour picker**: a click on the ``<input type=color>``, which opens the picker;
- **context menu**: a right click on the grey box;
- **other click**: a click on an empty spot of the same page.

Each with the default observation (settled PNG screenshot); time = the request sent → the
reply parsed (one persistent connection). One second after each reply the screen is
captured again (untimed): "reply = screen 1 s later" counts the replies whose screenshot
equals it (a popup half drawn in the reply differs). Escape and a fresh load of the page
between rounds, untimed. Prints Markdown for BENCHMARKS.md; tears the project down, also
on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import os
import secrets
import statistics
import sys
import time
from typing import Any

import docker

from bench.common import compose, compose_env, exit_on_sigterm, image, pct, sandbox_url, teardown
from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError
from deskpod.protocol import ObserveOptions

FILES = ("compose.yaml",)
PAGE = "http://demo.test/fixtures/popups"
QUIET = ObserveOptions(screenshot=False)
LATER_S = 1.0
"""How long after the reply the screen is captured again."""
CLICKS: dict[str, dict[str, Any]] = {
    "select list": {"type": "click", "x": 190, "y": 220},
    "colour picker": {"type": "click", "x": 800, "y": 220},
    "context menu": {"type": "click", "x": 240, "y": 500, "button": "right"},
    "other click": {"type": "click", "x": 900, "y": 760},
}
"""Screen points (1280x800): on the fixture's select, colour input and grey box, and below them."""
WARMUP = 2


async def connect(url: str, token: str) -> SandboxClient:
    client = await SandboxClient.connect(url, token, timeout_s=300)
    deadline = time.monotonic() + 60
    while True:  # the daemon may answer before Chromium does
        try:
            await client.navigate(PAGE)
            return client
        except DeskpodError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def measure(url: str, token: str, rounds: int) -> dict[str, dict[str, Any]]:
    client = await connect(url, token)
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, click in CLICKS.items():
            times: list[float] = []
            signals: collections.Counter[str] = collections.Counter()
            same = 0
            for index in range(rounds + WARMUP):
                await client.navigate(PAGE, QUIET)
                t0 = time.perf_counter()
                obs = await client.act([click], ObserveOptions())
                elapsed = (time.perf_counter() - t0) * 1000
                await asyncio.sleep(LATER_S)
                later = await client.act([], ObserveOptions(settle=False))
                await client.act([{"type": "keypress", "keys": ["Escape"]}], QUIET)
                if index >= WARMUP:
                    times.append(elapsed)
                    signals[str(obs.settle_signal)] += 1
                    same += obs.screenshot is not None and later.screenshot is not None \
                        and obs.screenshot.sha256 == later.screenshot.sha256
            out[name] = {"times": times, "signals": signals, "same": same}
            print(f"  {name} done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return out


def report(rows: dict[str, dict[str, dict[str, Any]]], meta: str) -> str:
    lines = [meta, "", "| click | sandbox | n | p50 ms | p95 ms | max ms | settle signals | reply = screen 1 s later |",
             "|---|---|---|---|---|---|---|---|"]
    for click in CLICKS:
        for system, by_click in rows.items():
            row = by_click[click]
            signals = ", ".join(f"{k} {v}" for k, v in sorted(row["signals"].items()))
            lines.append(f"| {click} | {system} | {len(row['times'])} | {statistics.median(row['times']):.0f} | "
                         f"{pct(row['times'], 0.95):.0f} | {max(row['times']):.0f} | {signals} | "
                         f"{row['same']}/{len(row['times'])} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=15, help="clicks timed per row (default 15)")
    parser.add_argument("--baseline-image", required=True, help="a sandbox image from before this change (main's)")
    parser.add_argument("--project", default="deskpodpopups", help="compose project name (default deskpodpopups)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    dk = docker.from_env()
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for system, sandbox in (("this tree", image("sandbox")), ("baseline", args.baseline_image)):
        env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800", DESKPOD_SANDBOX_IMAGE=sandbox)
        teardown(args.project, env, FILES)
        try:
            compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", "sandbox", files=FILES)
            rows[f"{system} ({sandbox})"] = asyncio.run(measure(sandbox_url(dk, args.project), token, args.rounds))
        finally:
            teardown(args.project, env, FILES)
    meta = (f"`python -m bench popups {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} cores; "
            f"load average at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - started:.0f} s.")
    print(report(rows, meta))
