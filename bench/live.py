"""Live view: frame rate, glass-to-glass latency and CPU per viewer, deskpod beside noVNC over x11vnc.

``python -m bench live`` (from the repository root, package installed with the ``test``
extra for Playwright). It starts its own compose project (``-p deskpodbenchlive -f
compose.yaml -f bench/compose.live.yaml``: the sandbox with all its hardening flags,
running the bench-only image of bench/Dockerfile.live, which adds x11vnc, websockify
and noVNC), opens a ``deskpod serve`` session (in this process, with the live router)
on the demo site's ``/fixtures/live-screen?mode=blink``: a page that changes on every
animation frame and is red while ``floor(Date.now() / 500)`` is odd, blue while it is
even. The containers share this host's clock, so a viewer knows when each flip
happened on the sandbox's screen.

Viewers are pages of one headless Chromium (Debian's, through Playwright) on this host:

- **deskpod (H.264)**: the console's live view, a canvas with ``/console/static/live.js``
  (frames pushed by the daemon on X damage as JPEG, one stream per sandbox, encoded
  once as H.264 by the controller and decoded by WebCodecs in each viewer);
- **deskpod (JPEG)**: the same view with ``data-live-video="off"``: the daemon's JPEG
  frames fanned out as they are (the live view before the video, and its fallback);
- **noVNC**: ``vnc_lite.html`` served by websockify in the sandbox container, over
  x11vnc attached to the same display (default options: ``-shared -forever``).

In each viewer a sampler reads one canvas pixel on every animation frame: a changed
pixel is a new frame (frames/s), a change of colour is a flip (glass-to-glass latency =
the viewer's ``Date.now()`` minus the flip's 500 ms boundary: the change on the sandbox's
screen to its pixels in the viewer, decode and draw included, quantized by the viewer's
animation frames). CPU: the sandbox container's (cgroup usage over the window) and,
for deskpod, this process's (the controller's hub and service), in cores.

Prints Markdown for BENCHMARKS.md; tears the project down at the end, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from deskpod.protocol.live import DEFAULT_LIVE_FPS, DEFAULT_LIVE_QUALITY
from deskpod.service.live_video import CRF, PRESET

from bench.common import compose, compose_env, exit_on_sigterm, pct, sandbox_container, sandbox_url, teardown

FILES = ("compose.yaml", "bench/compose.live.yaml")
PAGE = "http://demo.test/fixtures/live-screen?mode=blink"
STATIC = Path(__file__).resolve().parents[1] / "runtime" / "deskpod" / "service" / "console" / "static"
PROBE = (20, 700)
"""The canvas pixel the sampler reads (screen pixels; the page's background there)."""
NOVNC_PORT = 6080
SAMPLER_JS = """(selector) => {
  const canvas = document.querySelector(selector);
  const ctx = canvas.getContext("2d");
  const s = window.__live = {changes: 0, flips: [], last: -1, parity: -1};
  (function tick() {
    const d = ctx.getImageData(PROBE_X, PROBE_Y, 1, 1).data;
    const key = d[0] * 65536 + d[1] * 256 + d[2];
    if (key !== s.last && (d[0] > 150 || d[2] > 150)) {
      s.changes += 1;
      s.last = key;
      const parity = d[0] > d[2] ? 1 : 0;
      if (s.parity !== -1 && parity !== s.parity) {
        const now = Date.now();
        s.flips.push(now - Math.floor(now / 500) * 500);
      }
      s.parity = parity;
    }
    requestAnimationFrame(tick);
  })();
  return true;
}""".replace("PROBE_X", str(PROBE[0])).replace("PROBE_Y", str(PROBE[1]))


@dataclass
class Row:
    """One measured configuration."""

    system: str
    viewers: int
    fps: list[float]
    latencies_ms: list[float]
    sandbox_cores: float
    controller_cores: float | None


def container_cpu_s(container: Any) -> float:
    """The container's CPU time so far (seconds, all cores), from the engine's stats."""
    stats = container.stats(stream=False)
    return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


@contextlib.asynccontextmanager
async def live_service(sandbox: str, token: str) -> AsyncIterator[tuple[int, str]]:
    """``deskpod serve`` with the live router, in this process, and a session on ``sandbox`` at
    :data:`PAGE`; yields the port and the session."""
    import uvicorn
    from fastapi.responses import HTMLResponse
    from starlette.staticfiles import StaticFiles
    from websockets.asyncio.client import connect

    from deskpod.console.live import live_router
    from deskpod.service.server.app import create_app
    from deskpod.service.server.service_state import ControllerService

    agent_token = secrets.token_urlsafe(32)
    service = ControllerService(hashlib.sha256(agent_token.encode()).hexdigest(),
                                audit_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "deskpod-bench-live"))

    async def authorize(_: Any) -> str:
        return "bench"

    app = create_app(service)
    app.include_router(live_router(service, authorize))
    app.mount("/console/static", StaticFiles(directory=STATIC), name="static")

    async def page(session: str, jpeg: int = 0) -> HTMLResponse:
        video = ' data-live-video="off"' if jpeg else ""
        return HTMLResponse(f'<!doctype html><html><body style="margin:0"><canvas id="live" width="1280" '
                            f'height="800" data-live-session="{session}"{video}></canvas>'
                            '<script src="/console/static/live.js"></script></body></html>')

    app.add_api_route("/bench/live/{session}", page, methods=["GET"])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, ws="websockets-sansio",
                                           log_level="warning"))
    running = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if running.done():
                raise SystemExit("the controller service did not start")
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}/v1/controller",
                           additional_headers={"Authorization": f"Bearer {agent_token}"}) as agent:
            await agent.send(json.dumps({
                "type": "open", "id": "o", "sandbox": {"url": sandbox, "token": token},
                "task": {"name": "bench-live", "start_url": PAGE, "allowed_domains": ["demo.test"],
                         "limits": {"max_wall_time_s": 3600},
                         "success": {"timeout_s": 1, "page_text_contains": "never on this page"}}}))
            session = ""
            while True:
                message = json.loads(await asyncio.wait_for(agent.recv(), 60))
                if message["type"] == "opened":
                    session = message["session"]
                elif message["type"] == "observation":
                    break
                elif message["type"] == "error":
                    raise SystemExit(f"the session did not open: {message['error']}")
            yield port, session
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)


async def measure(browser: Any, urls: list[str], selector: str, container: Any, seconds: float,
                  warmup_s: float, system: str) -> Row:
    """Open one page per URL, sample for ``seconds`` after ``warmup_s``; return the row."""
    pages = []
    try:
        for url in urls:
            page = await browser.new_page(viewport={"width": 1300, "height": 820})
            await page.goto(url)
            await page.wait_for_selector(selector, timeout=30_000)
            pages.append(page)
        await asyncio.sleep(warmup_s)
        for page in pages:
            await page.evaluate(SAMPLER_JS, selector)
        cpu0, own0, t0 = container_cpu_s(container), time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, own1, t1 = container_cpu_s(container), time.process_time(), time.monotonic()
        samples = [await page.evaluate("window.__live") for page in pages]
    finally:
        for page in pages:
            await page.close()
    window = t1 - t0
    return Row(system, len(urls), [s["changes"] / window for s in samples],
               [float(v) for s in samples for v in s["flips"]], (cpu1 - cpu0) / window,
               (own1 - own0) / window if system.startswith("deskpod") else None)


def start_novnc(container: Any) -> None:
    """x11vnc on the sandbox's display and websockify serving noVNC, inside the bench container."""
    container.exec_run(["x11vnc", "-display", ":99", "-auth", "/tmp/deskpod/Xauthority", "-rfbport", "5900",
                        "-localhost", "-shared", "-forever", "-nopw", "-quiet"], user="deskpod", detach=True)
    container.exec_run(["websockify", "--web", "/usr/share/novnc", str(NOVNC_PORT), "127.0.0.1:5900"],
                       user="deskpod", detach=True)


async def wait_http(url: str, timeout_s: float = 30.0) -> None:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with opener.open(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer") from None
            await asyncio.sleep(0.3)


async def measure_all(sandbox: str, token: str, container: Any, args: argparse.Namespace) -> list[Row]:
    from playwright.async_api import async_playwright

    counts = [int(n) for n in args.viewers.split(",")]
    rows: list[Row] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium")
        try:
            async with live_service(sandbox, token) as (port, session):
                for system, query in (("deskpod (H.264)", ""), ("deskpod (JPEG)", "?jpeg=1")):
                    for n in counts:
                        print(f"{system}, {n} viewer(s) ...", file=sys.stderr, flush=True)
                        url = f"http://127.0.0.1:{port}/bench/live/{session}{query}"
                        rows.append(await measure(browser, [url] * n, "canvas#live[data-live-frames]", container,
                                                  args.seconds, args.warmup, system))
            container.reload()
            ip = sandbox.split("//")[1].split(":")[0]
            start_novnc(container)
            await wait_http(f"http://{ip}:{NOVNC_PORT}/vnc_lite.html")
            url = f"http://{ip}:{NOVNC_PORT}/vnc_lite.html?host={ip}&port={NOVNC_PORT}&scale=false"
            for n in counts:
                print(f"noVNC, {n} viewer(s) ...", file=sys.stderr, flush=True)
                rows.append(await measure(browser, [url] * n, "#screen canvas", container, args.seconds,
                                          args.warmup, "noVNC (x11vnc)"))
        finally:
            await browser.close()
    return rows


def report(rows: list[Row], meta: list[str]) -> str:
    lines = [
        "| live view | viewers | frames/s per viewer (median) | glass-to-glass p50 / p95 (ms) | flips seen "
        "| sandbox CPU (cores) | controller CPU (cores) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lat = row.latencies_ms
        latency = f"{pct(lat, 0.5):.0f} / {pct(lat, 0.95):.0f}" if lat else "—"
        controller = "—" if row.controller_cores is None else f"{row.controller_cores:.2f}"
        lines.append(f"| {row.system} | {row.viewers} | {statistics.median(row.fps):.1f} | {latency} | {len(lat)} "
                     f"| {row.sandbox_cores:.2f} | {controller} |")
    return "\n".join([*lines, "", *meta])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each row's window (default 2)")
    parser.add_argument("--viewers", default="1,3", help="viewer counts (default 1,3)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodbenchlive", help="compose project name (default deskpodbenchlive)")


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800")
    dk = docker.from_env()
    started = time.monotonic()
    if not args.no_build:
        print("building images ...", file=sys.stderr, flush=True)
        compose(args.project, env, "--profile", "demo", "build", files=FILES[:1])
        compose(args.project, env, "build", "sandbox", files=FILES)
    teardown(args.project, env, FILES)  # leftovers of an interrupted run
    try:
        compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", "workspace", "sandbox", files=FILES)
        url = sandbox_url(dk, args.project)
        container = sandbox_container(dk, args.project)
        rows = asyncio.run(measure_all(url, token, container, args))
    finally:
        teardown(args.project, env, FILES)
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = [
        f"`python -m bench {' '.join(sys.argv[1:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} cores, "
        f"{mem_gib:.0f} GiB, Linux {platform.release()}, Docker {dk.version().get('Version', '?')}; load average "
        f"at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - started:.0f} s. Screen 1280x800, page "
        f"{PAGE}; deskpod at its defaults ({DEFAULT_LIVE_FPS} frames/s at most, JPEG quality {DEFAULT_LIVE_QUALITY}; "
        f"H.264 by x264 {PRESET}, zerolatency, CRF {CRF}); "
        "noVNC 1.3 (vnc_lite.html, "
        "scale off) over x11vnc 0.9.16 (-shared -forever) and websockify 0.10 in the same container.",
    ]
    print(report(rows, meta))
