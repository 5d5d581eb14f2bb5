"""WebGL on llvmpipe: Chromium's CPU and memory, and the click round trip, beside an image without WebGL.

``python -m bench webgl --baseline-image IMAGE [--seconds 10] [--rounds 30]`` (from the
repository root, package installed; IMAGE a sandbox image with ``--disable-gpu``, e.g.
main's before WebGL) starts its own compose project (``-p deskpodwebgl``: egress, demo, the
hardened sandbox of compose.yaml at its default 240 Hz) once with this tree's sandbox image
(``$DESKPOD_SANDBOX_IMAGE``) and once with IMAGE, and in each measures three scenes over one
persistent connection:

- **idle**: the demo site's search page, loaded and left alone;
- **page loads**: the demo's ``events`` fixture loaded again and again (``navigate``, one
  after the other) for the whole sampling time;
- **WebGL page**: ``/fixtures/webgl-triangle#spin``, a 640x400 WebGL canvas redrawn at
  every animation frame (without WebGL the page draws nothing).

For each scene, after 2 s on the page: Chromium's CPU over ``--seconds`` (the sum of
``utime + stime`` of every ``chromium`` process and of the children each reaped, read from
``/proc`` inside the container, in cores), the sum of their resident sets (MiB; pages shared
between processes count once per process), the GPU process's own resident set and the container's memory (its cgroup's
usage, Docker's stats). Then, on the demo's ``events`` fixture, ``--rounds`` click +
screenshot round trips (PNG, settled; two points of its range slider in turn, as
``bench latency`` does), from the request sent to the reply parsed. Prints Markdown for
BENCHMARKS.md; tears the project down, also on failure. With ``--passes N`` (default 2) the
two images take turns N times, each pass a row of its own, so a change in the machine's
load shows as a difference between passes of one image.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import docker

from bench.common import (
    beside_baseline, chromium_sample, container_mib, pct, ready_client, run_line, sandbox_container,
)
from deskpod.protocol import ObserveOptions

SCENES = {
    "idle (demo search page)": "http://demo.test/",
    "page loads (events fixture, one after another)": "http://demo.test/fixtures/events",
    "WebGL page (turning triangle, 640x400)": "http://demo.test/fixtures/webgl-triangle#spin",
}
LOADS = "page loads (events fixture, one after another)"
"""The scene that navigates for its whole sampling time."""
CLICK_PAGE = "http://demo.test/fixtures/events"
CLICK_AT = ((300, 300), (800, 300))
"""Screen points of the click rounds, in turn: two places on the fixture's range slider."""
async def measure(url: str, token: str, container: Any, seconds: float, rounds: int) -> dict[str, Any]:
    """Each scene's CPU and memory, then the click round trips (ms)."""
    client = await ready_client(url, token, "http://demo.test/")
    found: dict[str, Any] = {}
    try:
        for scene, page in SCENES.items():
            await client.navigate(page, ObserveOptions(screenshot=False))
            await asyncio.sleep(2.0)
            before = chromium_sample(container)
            loads = 0
            if scene == LOADS:
                while time.monotonic() - before["at"] < seconds:
                    await client.navigate(page, ObserveOptions(screenshot=False))
                    loads += 1
            else:
                await asyncio.sleep(seconds)
            after = chromium_sample(container)
            found[scene] = {"loads": loads, "cores": (after["cpu_s"] - before["cpu_s"]) / (after["at"] - before["at"]),
                            "rss_mib": after["rss_mib"], "gpu_mib": after["gpu_mib"],
                            "container_mib": container_mib(container)}
            print(f"  {scene} done", file=sys.stderr, flush=True)
        await client.navigate(CLICK_PAGE)
        times = []
        for index in range(rounds + 3):
            x, y = CLICK_AT[index % 2]
            t0 = time.perf_counter()
            await client.act([{"type": "click", "x": x, "y": y}], ObserveOptions(format="png"))
            if index >= 3:
                times.append((time.perf_counter() - t0) * 1000)
        found["click_ms"] = times
    finally:
        await client.close()
    return found


def report(rows: dict[str, dict[str, Any]], meta: str) -> str:
    lines = [meta, "", "| scene | sandbox | Chromium CPU (cores) | Chromium RSS, sum (MiB) | GPU process RSS (MiB) "
             "| container memory (MiB) |", "|---|---|---|---|---|---|"]
    for scene in SCENES:
        for system, found in rows.items():
            row = found[scene]
            label = f"{scene}, {row['loads']} loads" if row["loads"] else scene
            lines.append(f"| {label} | {system} | {row['cores']:.3f} | {row['rss_mib']:.0f} | {row['gpu_mib']:.0f} | "
                         f"{row['container_mib']:.0f} |")
    lines += ["", "| click + screenshot (PNG, settled) | n | p50 ms | p95 ms |", "|---|---|---|---|"]
    for system, found in rows.items():
        times = found["click_ms"]
        lines.append(f"| {system} | {len(times)} | {statistics.median(times):.1f} | {pct(times, 0.95):.1f} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline-image", required=True, help="a sandbox image without WebGL (e.g. main's)")
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU sampling time per scene (default 10)")
    parser.add_argument("--rounds", type=int, default=30, help="click + screenshot round trips (default 30)")
    parser.add_argument("--passes", type=int, default=2, help="turns of the two images (default 2)")
    parser.add_argument("--project", default="deskpodwebgl", help="compose project name (default deskpodwebgl)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    dk = docker.from_env()
    rows = beside_baseline(args.project, args.baseline_image, lambda url, token: measure(
        url, token, sandbox_container(dk, args.project), args.seconds, args.rounds), passes=args.passes)
    print(report(rows, run_line("webgl", started)))
