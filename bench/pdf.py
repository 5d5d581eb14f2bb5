"""Replies that load a PDF, beside an ordinary page, and beside a sandbox image from before the
settle waited for the browser's PDF viewer.

``python -m bench pdf --baseline-image IMAGE [--rounds 10]`` (from the repository root,
package installed; IMAGE a sandbox image built from main before this change) starts its own
compose project (``-p deskpodpdf``: egress, demo, the hardened sandbox) once with this tree's
sandbox image (``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each times, from the
demo site's ``/fixtures/pdf-link`` page (loaded again between rounds, untimed):

- **PDF**: ``navigate`` to ``/fixtures/pdf-text.pdf``;
- **PDF sent over 1.5 s**: ``navigate`` to it with ``?ms=1500`` (the server sends it in pieces);
- **click on a link to it**: a click on the page's link to the slow one;
- **PDF in a frame**: ``navigate`` to ``/fixtures/pdf-frame`` (the viewer in a frame, not waited for);
- **ordinary page**: ``navigate`` to the demo site's search page.

Each with the default observation (settled PNG screenshot) and ``settle_timeout_s`` 10. Time
= the request sent → the reply parsed (one persistent connection). The table also counts the
replies whose screenshot shows the PDF's first page drawn (white, with its text, where the
viewer draws it in the 1280x800 screen) and the signals that ended the settles. Prints
Markdown for BENCHMARKS.md; tears the project down, also on failure.
"""

from __future__ import annotations

import argparse
import base64
import collections
import io
import statistics
import sys
import time
from typing import Any

from PIL import Image

from bench.common import beside_baseline, pct, ready_client, run_line
from deskpod.protocol import Observation, ObserveOptions

LINK_PAGE = "http://demo.test/fixtures/pdf-link"
PDF = "http://demo.test/fixtures/pdf-text.pdf"
QUIET = ObserveOptions(screenshot=False)
OBSERVE = ObserveOptions(settle_timeout_s=10)
CASES: dict[str, dict[str, Any]] = {
    "PDF": {"url": PDF},
    "PDF sent over 1.5 s": {"url": f"{PDF}?ms=1500"},
    "click on a link to it": {"click": {"type": "click", "x": 200, "y": 200}},
    "PDF in a frame": {"url": "http://demo.test/fixtures/pdf-frame"},
    "ordinary page": {"url": "http://demo.test/"},
}
"""What each row does: a ``navigate`` to ``url``, or the ``click`` (a screen point inside the
link page's link, 1280x800)."""
DRAWN_CASES = ("PDF", "PDF sent over 1.5 s", "click on a link to it")
PAGE_BOX = (500, 350, 1100, 750)
"""Screen box inside the viewer's first page below its text: white once drawn, grey before."""
TEXT_BOX = (471, 220, 850, 310)
"""Screen box of the first page's text lines."""
WARMUP = 1


def drawn(observation: Observation) -> bool:
    """Whether the screenshot shows the PDF's first page: :data:`PAGE_BOX` white, and text
    (dark pixels) in :data:`TEXT_BOX`."""
    if observation.screenshot is None:
        return False
    image = Image.open(io.BytesIO(base64.b64decode(observation.screenshot.data))).convert("L")
    page, text = image.crop(PAGE_BOX).histogram(), image.crop(TEXT_BOX).histogram()
    return sum(page[241:]) / sum(page) > 0.95 and sum(text[:100]) > 100


async def measure(url: str, token: str, rounds: int) -> dict[str, dict[str, Any]]:
    client = await ready_client(url, token, LINK_PAGE)
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, case in CASES.items():
            times: list[float] = []
            signals: collections.Counter[str] = collections.Counter()
            shown = 0
            for index in range(rounds + WARMUP):
                await client.navigate(LINK_PAGE, QUIET)
                t0 = time.perf_counter()
                if "url" in case:
                    obs = await client.navigate(case["url"], OBSERVE)
                else:
                    obs = await client.act([case["click"]], observe=OBSERVE)
                elapsed = (time.perf_counter() - t0) * 1000
                if index >= WARMUP:
                    times.append(elapsed)
                    signals[str(obs.settle_signal)] += 1
                    shown += drawn(obs)
            out[name] = {"times": times, "signals": signals, "drawn": shown}
            print(f"  {name} done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return out


def report(rows: dict[str, dict[str, dict[str, Any]]], meta: str) -> str:
    lines = [meta, "", "| reply | sandbox | n | p50 ms | p95 ms | max ms | settle signals | first page drawn |",
             "|---|---|---|---|---|---|---|---|"]
    for case in CASES:
        for system, by_case in rows.items():
            row = by_case[case]
            signals = ", ".join(f"{k} {v}" for k, v in sorted(row["signals"].items()))
            shown = f"{row['drawn']}/{len(row['times'])}" if case in DRAWN_CASES else "–"
            lines.append(f"| {case} | {system} | {len(row['times'])} | {statistics.median(row['times']):.0f} | "
                         f"{pct(row['times'], 0.95):.0f} | {max(row['times']):.0f} | {signals} | {shown} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=10, help="replies timed per row (default 10)")
    parser.add_argument("--baseline-image", required=True, help="a sandbox image from before this change (main's)")
    parser.add_argument("--project", default="deskpodpdf", help="compose project name (default deskpodpdf)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    rows = beside_baseline(args.project, args.baseline_image, lambda url, token: measure(url, token, args.rounds))
    meta = run_line("pdf", started)
    print(report(rows, meta))
