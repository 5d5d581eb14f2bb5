"""A run's screen recording: what it costs per minute of run, beside the same run not recorded.

``python -m bench recording`` (from the repository root, package installed with the
``serve`` extra for PyAV). It starts its own compose project (``-p deskpodbenchrec``:
egress, demo, workspace and the sandbox with all its hardening flags, 1280x800) and
drives its sandbox from this process through three kinds of "run" of ``--seconds`` each:

- **agent**: what an agent's run does to the screen: navigate to a form, click its
  field, type a sentence, go to another page, again and again (bursts of change, then
  a still screen);
- **animated**: the demo site's ``/fixtures/live-screen?mode=blink``, a page that
  changes on every animation frame (the recording's worst case: a frame every
  1/:data:`~deskpod.controller.recording.RECORDING_FPS` s);
- **idle**: a page that does not change.

Each is measured twice in a row, side by side: once without a recording (the baseline)
and once with a :class:`~deskpod.controller.recording.RunRecorder` on the sandbox, as
every GUI run has. Measured: this process's CPU time (the controller's: the recorder's
stream, JPEG decoding and H.264 encoding; and the driving, which the baseline has too),
the sandbox container's CPU (its cgroup: the daemon's captures and JPEGs for the
stream), the MP4's bytes and frames, all per minute of run. Prints Markdown for
BENCHMARKS.md; tears the project down at the end, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from deskpod.client import SandboxClient
from deskpod.controller.recording import RECORDING_FPS, RECORDING_QUALITY, LiveSource, RunRecorder
from deskpod.controller.video import CRF, PRESET

from bench.common import (
    compose, compose_env, container_cpu_s, exit_on_sigterm, ready_client, run_line, sandbox_container, sandbox_url,
    teardown,
)

FILES = ("compose.yaml",)
FORM = "http://demo.test/fixtures/form.html"
PAY = "http://demo.test/fixtures/pay.html"
BLINK = "http://demo.test/fixtures/live-screen?mode=blink"
STILL = "http://demo.test/fixtures/pay.html"


@dataclass
class Row:
    """One window: the kind of run, recorded or not, and what it cost over ``seconds``."""

    kind: str
    recorded: bool
    seconds: float
    controller_cpu_s: float
    sandbox_cpu_s: float
    size_bytes: int = 0
    frames: int = 0
    dropped: int = 0

    def per_minute(self, value: float) -> float:
        return value * 60.0 / self.seconds


async def drive_agent(client: SandboxClient, until: float) -> None:
    """An agent's run: a form, a click, a typed sentence, another page; until ``until``."""
    while time.monotonic() < until:
        await client.navigate(FORM)
        await client.act([{"type": "click", "x": 640, "y": 300},
                          {"type": "type", "text": "A sentence an agent types into a form field."}])
        await asyncio.sleep(1.0)
        await client.navigate(PAY)
        await asyncio.sleep(1.0)


async def drive_still(client: SandboxClient, until: float) -> None:
    """Nothing happens: the page that is open stays as it is."""
    await asyncio.sleep(max(0.0, until - time.monotonic()))


KINDS: dict[str, tuple[str, Callable[[SandboxClient, float], Awaitable[None]]]] = {
    "agent": (FORM, drive_agent),
    "animated": (BLINK, drive_still),
    "idle": (STILL, drive_still),
}


async def window(client: SandboxClient, url: str, token: str, container: Any, kind: str, recorded: bool,
                 seconds: float, folder: Path) -> Row:
    """One measured window of ``kind``, with a recording or without."""
    start_page, drive = KINDS[kind]
    await client.navigate(start_page)
    await asyncio.sleep(1.0)
    recorder = RunRecorder(folder, f"bench-{kind}", LiveSource(url, token)) if recorded else None
    cpu0, own0, t0 = container_cpu_s(container), time.process_time(), time.monotonic()
    if recorder is not None:
        recorder.start()
    await drive(client, t0 + seconds)
    fields = await recorder.stop(keep=True) if recorder is not None else {}
    cpu1, own1, t1 = container_cpu_s(container), time.process_time(), time.monotonic()
    if recorder is not None and not fields.get("recorded"):
        raise SystemExit(f"no recording: {fields.get('reason')}")
    (folder / "recordings" / f"bench-{kind}.mp4").unlink(missing_ok=True)
    return Row(kind, recorded, t1 - t0, own1 - own0, cpu1 - cpu0, int(fields.get("size_bytes", 0)),
               int(fields.get("frames", 0)), int(fields.get("dropped", 0)))


async def measure_all(url: str, token: str, container: Any, args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    client = await ready_client(url, token, FORM)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in args.kinds.split(","):
                for recorded in (False, True):
                    print(f"{kind}, {'recorded' if recorded else 'baseline'} ...", file=sys.stderr, flush=True)
                    rows.append(await window(client, url, token, container, kind, recorded, args.seconds, Path(tmp)))
    finally:
        await client.close()
    return rows


def report(rows: list[Row], meta: str) -> str:
    lines = [
        "| run | recorded | controller CPU s/min | sandbox CPU s/min | MP4 MB/min | frames/min | dropped |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cost = (f"{r.per_minute(r.size_bytes) / 1e6:.2f} | {r.per_minute(r.frames):.0f} | {r.dropped}" if r.recorded
                else "- | - | -")
        lines.append(f"| {r.kind} | {'yes' if r.recorded else 'no (baseline)'} | "
                     f"{r.per_minute(r.controller_cpu_s):.2f} | {r.per_minute(r.sandbox_cpu_s):.2f} | {cost} |")
    return "\n".join([*lines, "", meta])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of each window (default 30)")
    parser.add_argument("--kinds", default="agent,animated,idle", help="kinds of run (default agent,animated,idle)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodbenchrec", help="compose project name (default deskpodbenchrec)")


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800")
    dk = docker.from_env()
    started = time.monotonic()
    if not args.no_build:
        print("building images ...", file=sys.stderr, flush=True)
        compose(args.project, env, "--profile", "demo", "build", files=FILES)
    teardown(args.project, env, FILES)  # leftovers of an interrupted run
    try:
        compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", "workspace", "sandbox", files=FILES)
        url = sandbox_url(dk, args.project)
        container = sandbox_container(dk, args.project)
        rows = asyncio.run(measure_all(url, token, container, args))
    finally:
        teardown(args.project, env, FILES)
    meta = (f"{run_line('recording', started)} Screen 1280x800; the recorder at its defaults: at most "
            f"{RECORDING_FPS} frames/s, JPEG quality {RECORDING_QUALITY} from the daemon, libx264 preset {PRESET}, "
            f"CRF {CRF}, one thread. CPU: this process's (the controller's) and the sandbox container's, per minute "
            "of run; the baseline is the same run in the same stack without a recording, measured just before it.")
    print(report(rows, meta))
