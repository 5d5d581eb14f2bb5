"""What the browser's egress interception costs, beside the same work without it.

Two measurements, printed as Markdown for BENCHMARKS.md:

- **per paused request, daemon CPU** (always): parsing one ``Fetch.requestPaused``
  message off the DevTools pipe (``json.loads``, which the daemon pays for every DevTools
  event anyway: the baseline), and the same plus deciding and encoding the answer
  (:meth:`RequestFilter.answer` and ``json.dumps``), for an allowed image, a refused
  beacon and a refused document (which gets the blocked page), in microseconds;
- **page load in a real sandbox** (with ``--sandbox URL --token TOKEN``): ``navigate``
  to a page with subresources, alternating rounds with the interception off
  (``egress`` ``null``) and on (the page's own host allowed), request sent → reply
  parsed, seconds. Every subresource then makes one extra pipe round trip between
  Chromium and the daemon.

``python -m bench egress [--rounds 20000] [--sandbox ws://.../v1/ws --token T
--page http://demo.test/fixtures/egress-many --loads 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from deskpod.agentd.browser.request_filter import RequestFilter
from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions

CASES: list[tuple[str, dict[str, Any]]] = [
    ("allowed image", {"requestId": "interception-job-1.0", "resourceType": "Image", "frameId": "F" * 32,
                       "request": {"url": "http://demo.test/static/logo.png?v=3", "method": "GET",
                                   "headers": {"Accept": "image/avif,image/webp,*/*", "Referer": "http://demo.test/"}}}),
    ("refused beacon", {"requestId": "interception-job-2.0", "resourceType": "Ping", "frameId": "F" * 32,
                        "request": {"url": "http://allowed.test/collect?d=" + "x" * 200, "method": "POST",
                                    "headers": {"Content-Type": "text/plain"}}}),
    ("refused document", {"requestId": "interception-job-3.0", "resourceType": "Document", "frameId": "F" * 32,
                          "request": {"url": "http://allowed.test/bounce?d=secret", "method": "GET",
                                      "headers": {"Upgrade-Insecure-Requests": "1"}}}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m bench egress``."""
    parser.add_argument("--rounds", type=int, default=20_000, help="timed repetitions per CPU case (default 20000)")
    parser.add_argument("--sandbox", help="a running sandbox's websocket URL, for the page-load rows")
    parser.add_argument("--token", default=os.environ.get("DESKPOD_TOKEN"), help="its control token")
    parser.add_argument("--page", default="http://demo.test/fixtures/egress-many", help="the page to load")
    parser.add_argument("--loads", type=int, default=30, help="page loads per mode (default 30)")


def _cpu(rounds: int) -> list[str]:
    rows = ["| paused request | baseline: parse (µs) | parse + decide + encode (µs) | overhead (µs) |",
            "| --- | ---: | ---: | ---: |"]
    flt = RequestFilter()
    flt.set(["demo.test"])
    for name, params in CASES:
        raw = json.dumps({"method": "Fetch.requestPaused", "params": params}).encode()
        base, full = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            json.loads(raw)
            t1 = time.perf_counter()
            msg = json.loads(raw)
            method, answer = flt.answer(msg["params"])
            json.dumps({"id": 1, "method": method, "params": answer}).encode()
            t2 = time.perf_counter()
            base.append(t1 - t0)
            full.append(t2 - t1)
            flt.take_blocked()
        b, f = statistics.median(base) * 1e6, statistics.median(full) * 1e6
        rows.append(f"| {name} | {b:.1f} | {f:.1f} | {f - b:.1f} |")
    return rows


async def _loads(url: str, token: str, page: str, loads: int) -> list[str]:
    host = page.split("/")[2]
    client = await SandboxClient.connect(url, token, timeout_s=30)
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for i in range(2 * loads + 2):
            mode = "on" if i % 2 else "off"
            await client.set_egress([host] if mode == "on" else None)
            t0 = time.perf_counter()
            await client.navigate(page, ObserveOptions(screenshot=False, settle=False))
            if i >= 2:  # the first load of each mode warms caches
                times[mode].append(time.perf_counter() - t0)
        await client.set_egress(None)
    finally:
        await client.close()
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    return ["| page load (navigate → reply) | interception off p50 (s) | on p50 (s) | overhead |",
            "| --- | ---: | ---: | ---: |",
            f"| {page} | {off:.3f} | {on:.3f} | {(on - off) * 1000:+.1f} ms |"]


def run(args: argparse.Namespace) -> None:
    """Print the tables."""
    print(f"## Egress interception ({args.rounds} rounds per CPU case)\n")
    print("\n".join(_cpu(args.rounds)))
    if args.sandbox:
        print()
        print("\n".join(asyncio.run(_loads(args.sandbox, args.token or "", args.page, args.loads))))
