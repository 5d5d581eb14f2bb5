"""Replies and navigate time on a huge page, beside a sandbox image without the content budget.

``python -m bench huge --baseline-image IMAGE [--rounds 5]`` (from the repository root, package
installed; IMAGE a sandbox image built from main before ``max_content_bytes``) starts its own
compose project (``-p deskpodhuge``: egress, demo, the hardened sandbox) once with this tree's
sandbox image (``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each, on the demo site's
``/fixtures/bounds-huge`` page (20,000 long-labelled links: over 6 million characters of text):

- **navigate, default**: ``navigate`` with the default observation (a settled screenshot, the tabs
  and the focused element), timed from the request sent to the reply parsed;
- **navigate, agent's look**: ``navigate`` with what the controller's agent observes (screenshot,
  page text, text sources and the element snapshot: ``Run.full_look`` with the scan and snapshots);
- **reply, every part at its largest**: ``act([])`` asking page text (1,000,000 characters),
  the accessibility summary (5,000 nodes), text sources (200,000 characters), the snapshot and both
  page logs, without a screenshot and without a declared message size: the reply's bytes.

Each navigate starts from the demo search page. Prints Markdown for BENCHMARKS.md; tears the
project down, also on failure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any


from bench.common import beside_baseline, ready_client, run_line
from deskpod.protocol import ObserveOptions

HUGE = "http://demo.test/fixtures/bounds-huge"
LOOKS = {
    "navigate, default": ObserveOptions(),
    "navigate, agent's look": ObserveOptions(page_text=True, text_sources=True, snapshot=True),
}
EVERY_PART = {"screenshot": False, "page_text": True, "max_text_chars": 1_000_000, "accessibility": True,
              "max_ax_nodes": 5000, "text_sources": True, "max_scan_chars": 200_000, "snapshot": True,
              "console": True, "network": True}


async def measure(url: str, token: str, rounds: int) -> dict[str, Any]:
    client = await ready_client(url, token, "http://demo.test/")
    out: dict[str, Any] = {}
    try:
        for name, look in LOOKS.items():
            times = []
            for _ in range(rounds):
                await client.navigate("http://demo.test/", ObserveOptions(screenshot=False))
                t0 = time.perf_counter()
                await client.navigate(HUGE, look, timeout_s=180)
                times.append(time.perf_counter() - t0)
            out[name] = times
        sizes = []
        for _ in range(rounds):
            reply = await client.send_raw(json.dumps({"type": "act", "id": client.next_id(), "actions": [],
                                                      "observe": EVERY_PART}), timeout_s=180)
            sizes.append(len(reply.model_dump_json().encode()))
        out["reply bytes"] = sizes
        print("  done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return out


def report(rows: dict[str, dict[str, Any]], meta: str) -> str:
    lines = [meta, "", "| sandbox | navigate, default: median s (max) | navigate, agent's look: median s (max) | "
             "reply with every part at its largest, no screenshot: bytes |", "|---|---|---|---|"]
    for system, row in rows.items():
        cells = [f"{statistics.median(row[n]):.2f} ({max(row[n]):.2f})" for n in LOOKS]
        lines.append(f"| {system} | {' | '.join(cells)} | {max(row['reply bytes']):,} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5, help="navigations timed per look (default 5)")
    parser.add_argument("--baseline-image", required=True, help="a sandbox image without the content budget")
    parser.add_argument("--project", default="deskpodhuge", help="compose project name (default deskpodhuge)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    rows = beside_baseline(args.project, args.baseline_image, lambda url, token: measure(url, token, args.rounds))
    meta = run_line("huge", started)
    print(report(rows, meta))
