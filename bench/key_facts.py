"""The cost of reading a page's key facts per observation, beside a sandbox image without it.

``python -m bench keys --baseline-image IMAGE [--rounds 100]`` (from the repository root,
package installed; IMAGE a sandbox image built from the commit before key facts, e.g. main's)
starts its own compose project (``-p deskpodkeys``: egress, demo, the hardened sandbox) once
with this tree's sandbox image (``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each
times one observation without screenshot or settling (``act([])``: the tabs, the focused element
and, with key facts, :class:`~deskpod.protocol.PageKeys`) in three scenes:

- **field focused**: the demo search page with its text field focused (shortcuts read, key
  listeners not: a key typed there is typing);
- **nothing focused, listening page**: ``/fixtures/keys-shortcut`` after a click on an empty
  spot (shortcuts and the window's, document's and body's listeners read);
- **button focused**: ``/fixtures/keys-accesskey`` with its "Pay now" button focused by Tab
  (the focused chain's listeners read as well).

Time = the request sent → the reply parsed (one persistent connection); ``observe_s`` is the
daemon's own time observing. Prints Markdown for BENCHMARKS.md; tears the project down, also
on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any


from bench.common import beside_baseline, pct, ready_client, run_line
from deskpod.protocol import ObserveOptions

QUICK = ObserveOptions(screenshot=False, settle=False)
SCENES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "field focused": ("http://demo.test/", [{"type": "click", "x": 640, "y": 400}]),
    "nothing focused, listening page": ("http://demo.test/fixtures/keys-shortcut",
                                        [{"type": "click", "x": 1200, "y": 200}]),
    "button focused": ("http://demo.test/fixtures/keys-accesskey",
                       [{"type": "click", "x": 1200, "y": 200}, {"type": "keypress", "keys": ["Tab"]}]),
}
"""Each scene's page and the actions that set its focus (screen 1280x800)."""
PACE_S = 0.03
"""Pause between observations: the daemon answers at most 50 messages a second."""


async def measure(url: str, token: str, rounds: int) -> dict[str, dict[str, Any]]:
    client = await ready_client(url, token, "http://demo.test/")
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, (page, setup) in SCENES.items():
            await client.navigate(page, timeout_s=120)
            await client.act(setup, ObserveOptions(screenshot=False))
            times, inside = [], []
            for index in range(rounds + 5):
                t0 = time.perf_counter()
                obs = await client.act([], QUICK)
                if index >= 5:
                    times.append((time.perf_counter() - t0) * 1000)
                    inside.append(obs.observe_s * 1000)
                await asyncio.sleep(PACE_S)
            keys = obs.model_dump(mode="json").get("page_keys")
            out[name] = {"times": times, "inside": inside, "focused": obs.focused.tag if obs.focused else None,
                         "keys": keys}
            print(f"  {name} done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return out


def report(rows: dict[str, dict[str, dict[str, Any]]], rounds: int, meta: str) -> str:
    lines = [meta, "", "| scene | sandbox | focused | page_keys read | n | round trip p50 ms | p95 ms | "
             "daemon observe_s p50 ms | p95 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for scene in SCENES:
        for system, by_scene in rows.items():
            row = by_scene[scene]
            keys = row["keys"]
            shown = "–" if keys is None else (f"{len(keys['shortcuts'])} shortcuts, listeners "
                                              f"{', '.join(keys['listeners']) or 'none'}")
            lines.append(f"| {scene} | {system} | {row['focused'] or 'none'} | {shown} | {len(row['times'])} | "
                         f"{statistics.median(row['times']):.1f} | {pct(row['times'], 0.95):.1f} | "
                         f"{statistics.median(row['inside']):.1f} | {pct(row['inside'], 0.95):.1f} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=100, help="observations timed per scene (default 100)")
    parser.add_argument("--baseline-image", required=True, help="a sandbox image without key facts (e.g. main's)")
    parser.add_argument("--project", default="deskpodkeys", help="compose project name (default deskpodkeys)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    rows = beside_baseline(args.project, args.baseline_image, lambda url, token: measure(url, token, args.rounds))
    meta = run_line("keys", started)
    print(report(rows, args.rounds, meta))
