"""A click that opens a tab, beside a click that does not, and beside a sandbox image from
before the settle followed the tab the click brought to the front.

``python -m bench tabs --baseline-image IMAGE [--rounds 20]`` (from the repository root,
package installed; IMAGE a sandbox image built from main before this change) starts its own
compose project (``-p deskpodtabs``: egress, demo, the hardened sandbox) once with this
tree's sandbox image (``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each times:

- **opens a tab**: a click on ``/fixtures/tabs-open``'s big ``target=_blank`` link, with the
  default observation (settled screenshot, tabs); the new tab is closed (``ctrl+w``) and the
  page loaded again between rounds, untimed;
- **other click**: a click on an empty spot of the same page, the same observation.

Time = the request sent → the reply parsed (one persistent connection). The table also
counts the replies whose settle ended on its timeout and those that named the new tab as
the active one. Prints Markdown for BENCHMARKS.md; tears the project down, also on failure.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from typing import Any


from bench.common import beside_baseline, pct, ready_client, run_line
from deskpod.protocol import ObserveOptions

PAGE = "http://demo.test/fixtures/tabs-open"
OPENED = "http://demo.test/fixtures/tabs-opened"
QUIET = ObserveOptions(screenshot=False)
CLICKS = {"opens a tab": {"type": "click", "x": 640, "y": 380}, "other click": {"type": "click", "x": 640, "y": 700}}
"""Screen points (1280x800): inside the fixture's big link, and below it."""
WARMUP = 2


async def measure(url: str, token: str, rounds: int) -> dict[str, dict[str, Any]]:
    client = await ready_client(url, token, PAGE)
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, click in CLICKS.items():
            times: list[float] = []
            signals: collections.Counter[str] = collections.Counter()
            named = 0
            for index in range(rounds + WARMUP):
                await client.navigate(PAGE, QUIET)
                t0 = time.perf_counter()
                obs = await client.act([click], ObserveOptions())
                elapsed = (time.perf_counter() - t0) * 1000
                tabs = obs.tabs or []
                if len(tabs) > 1:
                    await client.act([{"type": "keypress", "keys": ["ctrl+w"]}], QUIET)
                if index >= WARMUP:
                    times.append(elapsed)
                    signals[str(obs.settle_signal)] += 1
                    named += bool(tabs) and tabs[0].url == OPENED
            out[name] = {"times": times, "signals": signals, "named": named}
            print(f"  {name} done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return out


def report(rows: dict[str, dict[str, dict[str, Any]]], meta: str) -> str:
    lines = [meta, "", "| click | sandbox | n | p50 ms | p95 ms | max ms | settle signals | reply names the new tab |",
             "|---|---|---|---|---|---|---|---|"]
    for click in CLICKS:
        for system, by_click in rows.items():
            row = by_click[click]
            signals = ", ".join(f"{k} {v}" for k, v in sorted(row["signals"].items()))
            named = f"{row['named']}/{len(row['times'])}" if click == "opens a tab" else "–"
            lines.append(f"| {click} | {system} | {len(row['times'])} | {statistics.median(row['times']):.0f} | "
                         f"{pct(row['times'], 0.95):.0f} | {max(row['times']):.0f} | {signals} | {named} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20, help="clicks timed per row (default 20)")
    parser.add_argument("--baseline-image", required=True, help="a sandbox image from before this change (main's)")
    parser.add_argument("--project", default="deskpodtabs", help="compose project name (default deskpodtabs)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    rows = beside_baseline(args.project, args.baseline_image, lambda url, token: measure(url, token, args.rounds))
    meta = run_line("tabs", started)
    print(report(rows, meta))
