"""Action → screenshot latency, deskpod vs the common demo baseline, side by side.

``python -m bench latency`` (from the repository root, package installed). For each
screen size it (re)starts the sandbox of its own compose project
(``-p deskpodbench -f compose.yaml -f bench/compose.bench.yaml``: the sandbox service
with all its hardening flags, running the bench-only image of bench/Dockerfile,
which adds xdotool, scrot and ImageMagick to the sandbox image compose builds), loads the
demo site's fixture page ``http://demo.test/fixtures/events`` and measures in that
one container. Click rounds alternate between two points of the page's range
slider, so every click moves its thumb (and never makes a double click); type
rounds type :data:`TEXT` (20 characters) into its text field. Every round changes the screen.

- **deskpod**: from the host over the websocket (``SandboxClient``, one persistent
  connection, as clients use it), one ``act`` request per round: a click (or
  ``type`` of :data:`TEXT`) and the observation after it, with ``settle`` on (the
  default window) and, as separate rows, off. Time = request sent → reply parsed.
  After each timed round an untimed settled observation checks whether the
  screen still changed after the screenshot was taken (a stale screenshot).
  The image is the model's size: at 1280x800 the screen itself, at 1920x1080
  1366x768 (``configure``), the same image the baseline produces; extra rows at
  1920x1080 return the full-size image.
- **baseline**: what common computer-use demos do (bench/baseline_inner.py):
  ``xdotool`` subprocess for the input, ``scrot`` subprocess for the screenshot,
  ``convert`` subprocess to resize to the model's size (PNG, or JPEG at the same
  quality), read + base64; without and with the demos' fixed 2 s delay after the
  action. Timed inside the container by a small Python script (one ``docker exec``
  per row with a fixed argv; its overhead is outside the timings).

Prints Markdown: the side-by-side table with ratios (baseline p50 / deskpod p50,
settle on) and where the time goes. Tears the project down at the end, also on
failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from bench.common import ROOT, compose, compose_env, exit_on_sigterm, image, pct, ready_client, sandbox_container, sandbox_url, teardown
from deskpod.client import SandboxClient
from deskpod.errors import ScreenChangedError
from deskpod.protocol import Observation, ObserveOptions, ScreenExpectation, Size

FILES = ("compose.yaml", "bench/compose.bench.yaml")
PAGE = "http://demo.test/fixtures/events"
CLICK_AT = ((300, 300), (800, 300))
"""Screen points of the click rounds, used in turn: two places on the fixture's range
slider (screen x 100..1100, y 290..310), so each click moves the thumb."""
FIELD_AT = (400, 440)
"""Screen point of the fixture's text field, clicked once before the type rounds."""
TEXT = "penguins waddle fast"
"""Typed in each type round: 20 characters, a short field entry."""
QUALITY = 80
"""JPEG quality on both sides."""
DELAY_S = 2.0
"""The demos' fixed delay after an action."""
MODEL_SIZE = {(1280, 800): (1280, 800), (1920, 1080): (1366, 768)}
"""The model image size per screen: Anthropic's demo scaling targets (WXGA for 16:10,
FWXGA for 16:9); its demo runs the resize subprocess in both cases."""
INNER = Path(__file__).with_name("baseline_inner.py")
SETTLE_PAGES = {"transition": "http://demo.test/fixtures/settle-transition",
                "fetch": "http://demo.test/fixtures/settle-fetch"}
"""The settle fixtures: a click on their button (screen 200, 200) starts a CSS transition
that waits 150 ms and runs 250 ms, or a fetch answered after 300 ms that then paints."""
SETTLE_GO = (200, 200)


@dataclass
class Phase:
    """One measured row: its label and the per-round samples (ms, bytes)."""

    screen: str
    action: str
    fmt: str
    system: str
    variant: str
    check_stale: bool = False
    page: str = "events"
    samples: list[dict[str, Any]] = field(default_factory=list)
    refused: int = 0

    def totals(self) -> list[float]:
        return [s["total"] for s in self.samples]

    def median(self, key: str) -> float:
        return statistics.median(s[key] for s in self.samples)

    def unchanged(self) -> int:
        """Rounds whose image equals the previous round's (the screen did not change)."""
        shas = [s["sha256"] for s in self.samples]
        return sum(1 for a, b in zip(shas, shas[1:], strict=False) if a == b)


def parse_size(text: str) -> tuple[int, int]:
    w, h = text.lower().split("x")
    return int(w), int(h)


def to_model(point: tuple[int, int], screen: tuple[int, int], model: tuple[int, int]) -> tuple[int, int]:
    return round(point[0] * model[0] / screen[0]), round(point[1] * model[1] / screen[1])


async def prepare(client: SandboxClient, action: str, screen: tuple[int, int], model: tuple[int, int]) -> None:
    """Load the fixture page afresh; for typing, focus its text field first."""
    await client.configure(Size(width=model[0], height=model[1]))
    await client.navigate(PAGE)
    if action == "type":
        x, y = to_model(FIELD_AT, screen, model)
        await client.act([{"type": "click", "x": x, "y": y}])


def expectation(obs: Observation | None, enabled: bool) -> ScreenExpectation | None:
    """The pre-click screen check the controller sends: bound to the last screenshot and URL."""
    if not enabled or obs is None or obs.screenshot is None:
        return None
    return ScreenExpectation(screenshot_sha256=obs.screenshot.sha256, url=obs.url)


async def deskpod_phase(client: SandboxClient, phase: Phase, screen: tuple[int, int], model: tuple[int, int],
                        rounds: int, warmup: int, screen_check: bool = True) -> None:
    observe = ObserveOptions(format=phase.fmt, quality=QUALITY, settle=phase.variant != "no settle")  # type: ignore[arg-type]
    if phase.page in SETTLE_PAGES:
        await settle_page_phase(client, phase, model, rounds, warmup, observe, screen_check)
        return
    await prepare(client, phase.action, screen, model)
    last = await client.act([], ObserveOptions(format=phase.fmt, quality=QUALITY))  # type: ignore[arg-type]
    if phase.action == "click":
        acts: list[dict[str, Any]] = [{"type": "click", "x": x, "y": y}
                                      for x, y in (to_model(p, screen, model) for p in CLICK_AT)]
    else:
        acts = [{"type": "type", "text": TEXT}]
    check = ObserveOptions(format=phase.fmt, quality=QUALITY, settle=True)  # type: ignore[arg-type]
    for i in range(warmup + rounds):
        expect = expectation(last, screen_check and phase.action == "click")
        t0 = time.perf_counter()
        try:
            obs = await client.act([acts[i % len(acts)]], observe, expect=expect)
        except ScreenChangedError:
            phase.refused += i >= warmup
            last = await client.act([], check)
            continue
        total = (time.perf_counter() - t0) * 1000
        last = obs
        if i < warmup:
            continue
        assert obs.screenshot is not None and (obs.screenshot.width, obs.screenshot.height) == model
        later = await client.act([], check) if phase.check_stale else None
        action_ms = sum(t.duration_s for t in obs.timings) * 1000
        phase.samples.append({
            "total": total,
            "action": action_ms,
            "settle": obs.settle_s * 1000,
            "observe": (obs.observe_s - obs.settle_s) * 1000,
            "rest": total - action_ms - obs.observe_s * 1000,
            "bytes": len(obs.screenshot.data) * 3 // 4,
            "sha256": obs.screenshot.sha256,
            "settled": obs.settled,
            "signal": obs.settle_signal,
            "stale": later is not None and later.screenshot is not None
                     and later.screenshot.sha256 != obs.screenshot.sha256,
        })


async def settle_page_phase(client: SandboxClient, phase: Phase, model: tuple[int, int], rounds: int, warmup: int,
                            observe: ObserveOptions, screen_check: bool) -> None:
    """Rounds on a settle fixture: load it afresh (untimed), click its button (timed)."""
    check = ObserveOptions(format=phase.fmt, quality=QUALITY, settle=True)  # type: ignore[arg-type]
    await client.configure(Size(width=model[0], height=model[1]))
    x, y = SETTLE_GO
    for i in range(warmup + rounds):
        loaded = await client.navigate(SETTLE_PAGES[phase.page], check)
        t0 = time.perf_counter()
        try:
            obs = await client.act([{"type": "click", "x": x, "y": y}], observe,
                                   expect=expectation(loaded, screen_check))
        except ScreenChangedError:
            phase.refused += i >= warmup
            continue
        total = (time.perf_counter() - t0) * 1000
        if i < warmup:
            continue
        assert obs.screenshot is not None
        # The page's end state, once nothing changes any more: well past the fixture's 400 ms.
        later = await client.act([{"type": "wait", "seconds": 0.6}], check)
        action_ms = sum(t.duration_s for t in obs.timings) * 1000
        phase.samples.append({
            "total": total, "action": action_ms, "settle": obs.settle_s * 1000,
            "observe": (obs.observe_s - obs.settle_s) * 1000, "rest": total - action_ms - obs.observe_s * 1000,
            "bytes": len(obs.screenshot.data) * 3 // 4, "sha256": obs.screenshot.sha256, "settled": obs.settled,
            "signal": obs.settle_signal,
            "stale": later.screenshot is not None and later.screenshot.sha256 != obs.screenshot.sha256,
        })


def baseline_phase(container: Any, phase: Phase, screen: tuple[int, int], model: tuple[int, int],
                   rounds: int, warmup: int, delay_s: float, tool: str) -> None:
    cfg = {"action": phase.action, "points": CLICK_AT, "text": TEXT, "rounds": rounds,
           "warmup": warmup, "delay_s": delay_s, "tool": tool, "size": list(model), "format": phase.fmt,
           "quality": QUALITY, "check_stale": phase.check_stale}
    code, (out, err) = container.exec_run(["/usr/bin/python3", "-c", INNER.read_text(), json.dumps(cfg)],
                                          user="deskpod", environment={"DISPLAY": ":99", "XAUTHORITY": "/tmp/deskpod/Xauthority"},
                                          demux=True)
    if code != 0:
        raise SystemExit(f"baseline failed in the container ({code}): {(err or b'').decode()[-2000:]}")
    phase.samples = json.loads(out)["rounds"]


async def measure_window_baseline(url: str, token: str, screen: tuple[int, int],
                                  args: argparse.Namespace) -> list[Phase]:
    """The deskpod rows again on a sandbox started with ``DESKPOD_SETTLE_BY_SIGNAL=0``:
    the quiet-window settle of before (the screen unchanged for 50 ms, frames every 8 ms)."""
    label = f"{screen[0]}x{screen[1]}"
    model = MODEL_SIZE.get(screen, screen)
    client = await ready_client(url, token, PAGE, timeout_s=120)
    phases: list[Phase] = []
    try:
        for fmt in ("png", "jpeg"):
            for action, page in (("click", "events"), ("type", "events"), *(("click", p) for p in SETTLE_PAGES)):
                phase = Phase(label, action, fmt, "deskpod", "quiet window (before)", True, page)
                await deskpod_phase(client, phase, screen, model, args.rounds, args.warmup, args.screen_check)
                phases.append(phase)
            print(f"  {label} {fmt} quiet-window baseline done ({time.monotonic() - args.started:.0f} s)",
                  file=sys.stderr, flush=True)
    finally:
        await client.close()
    return phases


async def measure_screen(url: str, token: str, container: Any, screen: tuple[int, int],
                         args: argparse.Namespace) -> list[Phase]:
    label = f"{screen[0]}x{screen[1]}"
    model = MODEL_SIZE.get(screen, screen)
    client = await ready_client(url, token, PAGE, timeout_s=120)
    phases: list[Phase] = []
    try:
        hello = client.hello.screen
        if (hello.width, hello.height) != screen:
            raise SystemExit(f"sandbox screen is {hello.width}x{hello.height}, expected {label}")
        for fmt in ("png", "jpeg"):
            for action in ("click", "type"):
                variants = [("settle", model, True), ("no settle", model, True)]
                if model != screen:
                    variants.append((f"settle, {label} image", screen, False))
                for variant, out_size, check in variants:
                    phase = Phase(label, action, fmt, "deskpod", variant, check)
                    await deskpod_phase(client, phase, screen, out_size, args.rounds, args.warmup, args.screen_check)
                    phases.append(phase)
                for variant, delay, rounds, warmup in (("no delay", 0.0, args.rounds, args.warmup),
                                                       (f"+ {DELAY_S:g} s delay", DELAY_S, args.delay_rounds, 0)):
                    phase = Phase(label, action, fmt, "baseline", variant, check_stale=delay == 0)
                    await prepare(client, action, screen, model)
                    await asyncio.to_thread(baseline_phase, container, phase, screen, model, rounds, warmup,
                                            delay, args.tool)
                    phases.append(phase)
                print(f"  {label} {fmt} {action} done ({time.monotonic() - args.started:.0f} s)",
                      file=sys.stderr, flush=True)
            for page in SETTLE_PAGES:
                for variant in ("settle", "no settle"):
                    phase = Phase(label, "click", fmt, "deskpod", variant, True, page)
                    await deskpod_phase(client, phase, screen, model, args.rounds, args.warmup, args.screen_check)
                    phases.append(phase)
    finally:
        await client.close()
    return phases


def fmt_ms(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def action_label(p: Phase) -> str:
    return p.action if p.page == "events" else f"{p.action} ({p.page} page)"


def signals(p: Phase) -> str:
    """How the settle waits ended, e.g. ``damage 28, frame 2``."""
    counts: dict[str, int] = {}
    for s in p.samples:
        if s.get("signal"):
            counts[s["signal"]] = counts.get(s["signal"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "–"


def report(phases: list[Phase], meta: list[str]) -> str:
    lines = [*meta, ""]
    lines += ["| screen | action → screenshot | format | system, variant | n | p50 ms | p95 ms | "
              "vs deskpod, settle (p50) | stale | refused by the screen check | settle ended by |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    ref: dict[tuple[str, str, str, str], float] = {}
    for p in phases:
        if p.system == "deskpod" and p.variant == "settle" and p.samples:
            ref[(p.screen, p.action, p.fmt, p.page)] = statistics.median(p.totals())
    for p in phases:
        t = p.totals() or [float("nan")]
        key = (p.screen, p.action, p.fmt, p.page)
        ratio = ""
        if (p.system == "baseline" or p.variant == "quiet window (before)") and key in ref:
            ratio = f"{statistics.median(t) / ref[key]:.1f}x"
        stale = "–"
        if p.check_stale and p.samples and all(s["stale"] is not None for s in p.samples):
            stale = f"{sum(1 for s in p.samples if s['stale'])}/{len(p.samples)}"
        refused = f"{p.refused}" if p.system == "deskpod" else "–"
        lines.append(f"| {p.screen} | {action_label(p)} | {p.fmt.upper()} | {p.system}, {p.variant} | {len(p.samples)} | "
                     f"{fmt_ms(statistics.median(t))} | {fmt_ms(pct(t, 0.95))} | {ratio} | {stale} | {refused} | "
                     f"{signals(p)} |")
    lines += ["", "Where the time goes (medians, ms):", "",
              "| screen | action | format | system, variant | total | input | settle / delay | "
              "screenshot (+ resize, encode) | rest | image KB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in phases:
        if p.variant not in ("settle", "no delay", "quiet window (before)") or not p.samples:
            continue
        if p.system == "deskpod":
            # observe = capture + resize + encode + page state over CDP (+ settle, shown apart)
            cells = [p.median("action"), p.median("settle"), p.median("observe"), p.median("rest")]
            shot = f"{fmt_ms(cells[2])} (capture, encode, CDP state)"
            rest = f"{fmt_ms(cells[3])} (ws, JSON, client)"
        else:
            cells = [p.median("action"), p.median("delay"), p.median("shot"), p.median("resize") + p.median("encode")]
            shot = f"{fmt_ms(cells[2])} + {fmt_ms(p.median('resize'))} (scrot + convert)"
            rest = f"{fmt_ms(p.median('encode'))} (read, base64)"
        lines.append(f"| {p.screen} | {action_label(p)} | {p.fmt.upper()} | {p.system}, {p.variant} | "
                     f"{fmt_ms(p.median('total'))} | {fmt_ms(cells[0])} | {fmt_ms(cells[1])} | {shot} | {rest} | "
                     f"{p.median('bytes') / 1024:.0f} |")
    notes = []
    for p in phases:
        same = p.unchanged() if p.page == "events" else 0
        if same:
            notes.append(f"- {p.screen} {p.action} {p.fmt.upper()} {p.system}, {p.variant}: {same} of "
                         f"{len(p.samples) - 1} rounds returned the same image as the round before")
        if p.system == "deskpod" and p.variant.startswith("settle"):
            unsettled = sum(1 for s in p.samples if s["settled"] is False)
            if unsettled:
                notes.append(f"- {p.screen} {p.action} {p.fmt.upper()} deskpod, {p.variant}: {unsettled} rounds "
                             "hit the settle timeout")

    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds per row (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured rounds first (default 3)")
    parser.add_argument("--delay-rounds", type=int, default=5,
                        help="rounds of the baseline with its 2 s delay (default 5)")
    parser.add_argument("--sizes", default="1280x800,1920x1080", help="screen sizes (default 1280x800,1920x1080)")
    parser.add_argument("--tool", choices=("scrot", "import"), default="scrot",
                        help="the baseline's screenshot tool (default scrot)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodbench", help="compose project name (default deskpodbench)")
    parser.add_argument("--no-screen-check", dest="screen_check", action="store_false",
                        help="send clicks without the pre-click screen check (default: with it, as the controller)")
    parser.add_argument("--no-window-baseline", dest="window_baseline", action="store_false",
                        help="skip the rows of the old quiet-window settle (a sandbox with DESKPOD_SETTLE_BY_SIGNAL=0)")
    parser.add_argument("--sandbox", help="measure this running daemon (ws://...) instead of a compose project: "
                        "deskpod rows only, pages under --site")
    parser.add_argument("--window-sandbox", help="with --sandbox: a second daemon started with "
                        "DESKPOD_SETTLE_BY_SIGNAL=0, for the quiet-window rows")
    parser.add_argument("--token", help="with --sandbox: the daemons' token")
    parser.add_argument("--site", default="http://demo.test", help="with --sandbox: where the demo site answers")


def _version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "?"


def run_on_daemon(args: argparse.Namespace) -> None:
    """``--sandbox``: the deskpod rows on running daemons (no baseline container)."""
    global PAGE
    PAGE = PAGE.replace("http://demo.test", args.site)
    for name, url in SETTLE_PAGES.items():
        SETTLE_PAGES[name] = url.replace("http://demo.test", args.site)
    args.started = time.monotonic()
    screen = parse_size(args.sizes.split(",")[0])

    async def body() -> list[Phase]:
        client = await ready_client(args.sandbox, args.token, PAGE, timeout_s=120)
        label, model = f"{screen[0]}x{screen[1]}", MODEL_SIZE.get(screen, screen)
        phases: list[Phase] = []
        try:
            for fmt in ("png", "jpeg"):
                for action, page in (("click", "events"), ("type", "events"), *(("click", p) for p in SETTLE_PAGES)):
                    for variant in ("settle", "no settle"):
                        phase = Phase(label, action, fmt, "deskpod", variant, True, page)
                        await deskpod_phase(client, phase, screen, model, args.rounds, args.warmup, args.screen_check)
                        phases.append(phase)
                print(f"  {label} {fmt} done ({time.monotonic() - args.started:.0f} s)", file=sys.stderr, flush=True)
        finally:
            await client.close()
        if args.window_sandbox:
            phases += await measure_window_baseline(args.window_sandbox, args.token, screen, args)
        return phases

    phases = asyncio.run(body())
    meta = [f"`python -m bench latency {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} cores; "
            f"load average at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - args.started:.0f} s."]
    print(report(phases, meta))


def run(args: argparse.Namespace) -> None:
    if args.sandbox:
        run_on_daemon(args)
        return
    exit_on_sigterm()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    token = secrets.token_urlsafe(32)
    env = compose_env(token)
    dk = docker.from_env()
    started = args.started = time.monotonic()
    if not args.no_build:
        print("building images ...", file=sys.stderr, flush=True)
        compose(args.project, env, "--profile", "demo", "build", files=FILES[:1])
        compose(args.project, env, "build", "sandbox", files=FILES)
    phases: list[Phase] = []
    teardown(args.project, env, FILES)  # leftovers of an interrupted run
    try:
        compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", files=FILES)
        for screen in sizes:
            env["DESKPOD_SCREEN_SIZE"] = f"{screen[0]}x{screen[1]}"
            print(f"sandbox at {env['DESKPOD_SCREEN_SIZE']} ...", file=sys.stderr, flush=True)
            compose(args.project, env, "up", "-d", "--no-build", "--no-deps", "--force-recreate", "sandbox",
                    files=FILES)
            url = sandbox_url(dk, args.project)
            container = sandbox_container(dk, args.project)
            phases += asyncio.run(measure_screen(url, token, container, screen, args))
            if args.window_baseline:
                env["DESKPOD_SETTLE_BY_SIGNAL"] = "0"
                compose(args.project, env, "up", "-d", "--no-build", "--no-deps", "--force-recreate", "sandbox",
                        files=FILES)
                phases += asyncio.run(measure_window_baseline(sandbox_url(dk, args.project), token, screen, args))
                env["DESKPOD_SETTLE_BY_SIGNAL"] = "1"
    finally:
        teardown(args.project, env, FILES)
    sandbox_image = dk.images.get(image("sandbox"))
    bench_image = dk.images.get(os.environ.get("DESKPOD_BENCH_IMAGE", "deskpod/sandbox-bench:latest"))
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = [
        f"`python -m bench {' '.join(sys.argv[1:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} cores, {mem_gib:.0f} GiB, Linux {platform.release()}, "
        f"Docker {dk.version().get('Version', '?')}, {_version([str(ROOT / 'scripts' / 'compose.sh'), 'version'])}; "
        f"load average at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - started:.0f} s.",
        f"Images: deskpod/sandbox {sandbox_image.short_id.split(':')[1]}, bench image {bench_image.short_id.split(':')[1]} "
        f"(+ xdotool, scrot, ImageMagick); baseline screenshot tool: {args.tool}; JPEG quality {QUALITY}; "
        f"page {PAGE}.",
    ]
    print(report(phases, meta))
