"""The desktop profile beside the browser-only one: image size, cold start, reset and memory.

``python -m bench desktop [--rounds 3] [--settle-s 5] [--no-build]`` (from the repository
root, package installed). It builds the images (compose.yaml with the ``demo`` and ``desktop``
profiles), then, ``--rounds`` times, starts each of two stacks in turn from nothing, as compose
projects of their own with compose.yaml's every hardening flag and a 1280x800 screen: the
browser-only stack (egress, demo, workspace, sandbox) and the desktop profile's (the same and
the ``desktop`` service, the applications' zone). Same images in both. Figures:

- **image size**: the sandbox image, the desktop image, and what the desktop image adds on
  disk beside the sandbox image (its size less the base image both are built on, when its
  layers start with the base's);
- **cold start**: seconds from ``compose up -d`` to the sandbox's ``/healthz`` answering 200
  (polled every 0.1 s); for the desktop stack also to the first ``open_app`` of the terminal
  the applications runner answers (tried every 0.1 s while it answers ``no_desktop``), and from
  that answer to the terminal's window in the observation's list of windows (polled);
- **reset**: the daemon's in-place reset (request to its answer, the new token's connection
  not counted), with no application open, and for the desktop stack also with a terminal and
  an editor open (the reset kills the zone's processes); beside it the daemon's own
  ``workspace`` phase of that reset (its log line ``reset done (...)``), where it asks the
  workspace runner, and the applications runner when an application was asked for since the
  last reset, to clear their zones;
- **memory per ready sandbox**: Docker's usage less the page cache (what ``docker stats``
  shows) of the sandbox's containers, summed: sandbox, workspace, egress proxy and, in the
  desktop profile, desktop (the demo site is the bench's web, not the sandbox's), ``--settle-s``
  seconds after a reset with no application open, and for the desktop stack with the terminal
  and the editor open.

Each round of a stack: cold start (the desktop's terminal opened, then an editor), memory with
both open, reset with both open, memory idle, reset with none open (the browser-only stack's
first reset is not timed: nothing is open there to compare). Prints Markdown for BENCHMARKS.md
(medians over the rounds); each project is torn down after its round, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import docker

from bench.common import (
    compose, compose_env, exit_on_sigterm, image, memory_bytes, run_line, sandbox_container, sandbox_url, teardown,
)
from deskpod.client import SandboxClient
from deskpod.client.wire import reset_and_reconnect
from deskpod.errors import ExecutionError
from deskpod.protocol import ObserveOptions

COMPOSE_FILES = ("compose.yaml",)
PROFILES: dict[str, tuple[str, ...]] = {"browser-only": (), "desktop": ("desktop",)}
"""Each stack's compose profiles beyond ``demo`` (the bench's web site)."""
SANDBOX_SERVICES = ("sandbox", "workspace", "egress", "desktop")
"""The containers whose memory is the sandbox's (those of them a stack runs)."""
POLL_S = 0.1
START_TIMEOUT_S = 300.0
APP_WINDOW = {"terminal": "XTerm", "editor": "Mousepad"}
"""The application's name in the window list (its ``WM_CLASS``)."""
LOOK = ObserveOptions(screenshot=False, settle=False, windows=True)


@dataclass
class Round:
    """One round of one stack: seconds, and bytes of memory by service."""

    healthy_s: float
    runner_s: float | None = None
    window_s: float | None = None
    reset_idle_s: float | None = None
    reset_apps_s: float | None = None
    runners_idle_s: float | None = None
    runners_apps_s: float | None = None
    memory_idle: dict[str, int] = field(default_factory=dict)
    memory_apps: dict[str, int] = field(default_factory=dict)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each stack (default 3)")
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="seconds before each memory reading (default 5)")
    parser.add_argument("--no-build", action="store_true", help="use the images already built")


def desktop_added_bytes(desktop: dict[str, Any], base: dict[str, Any] | None) -> int:
    """What the desktop image adds on disk beside the sandbox image: its ``Size`` less the
    base image's, when its layers (``RootFS.Layers``, as ``docker image inspect`` gives
    them) start with all of the base's, else its whole ``Size``, bytes."""
    size = int(desktop["Size"])
    if base is None:
        return size
    ours, theirs = desktop["RootFS"]["Layers"], base["RootFS"]["Layers"]
    return size - int(base["Size"]) if ours[:len(theirs)] == theirs else size


def image_sizes(dk: docker.DockerClient) -> dict[str, int]:
    """The sandbox and desktop images' sizes and what the desktop one adds on disk, bytes."""
    sandbox, desktop = (dk.images.get(image(name)).attrs for name in ("sandbox", "desktop"))
    base_name = (desktop["Config"].get("Labels") or {}).get("org.opencontainers.image.base.name")
    try:
        base = dk.images.get(base_name).attrs if base_name else None
    except docker.errors.ImageNotFound:
        base = None
    return {"sandbox": int(sandbox["Size"]), "desktop": int(desktop["Size"]),
            "desktop_added": desktop_added_bytes(desktop, base)}


def wait_healthy(url: str, deadline: float) -> None:
    """Poll the sandbox's ``/healthz`` every :data:`POLL_S` until it answers 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(POLL_S)
    raise SystemExit(f"{url} did not answer 200 in time")


async def open_answered(client: SandboxClient, app: str, deadline: float) -> None:
    """``open_app`` ``app``, tried again every :data:`POLL_S` while the sandbox answers
    ``no_desktop`` (its zone's runner not listening yet)."""
    while True:
        try:
            await client.act([{"type": "open_app", "app": app}], ObserveOptions(screenshot=False, settle=False))
            return
        except ExecutionError as exc:
            if exc.detail.get("reason") != "no_desktop" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(POLL_S)


async def window_mapped(client: SandboxClient, app: str, before: int, deadline: float) -> None:
    """Wait until the list of windows holds more than ``before`` of ``app``'s (the agent's)."""
    while time.monotonic() < deadline:
        windows = (await client.act([], LOOK)).windows or []
        if sum(w.zone == "agent" and w.app == APP_WINDOW[app] for w in windows) > before:
            return
        await asyncio.sleep(POLL_S)
    raise SystemExit(f"the {app}'s window never appeared")


RESET_DONE = re.compile(r"reset done \((?P<total>[\d.]+) s: (?P<phases>[^;)]*)")


def reset_phases(log: str) -> dict[str, float]:
    """The phases of the last reset in the daemon's ``log`` (its line ``reset done (6.499 s:
    stop 0.005, workspace 5.033, ...; new desktop)``), seconds by phase; empty when none."""
    found = list(RESET_DONE.finditer(log))
    if not found:
        return {}
    phases = {}
    for part in found[-1]["phases"].split(","):
        name, _, seconds = part.strip().rpartition(" ")
        phases[name] = float(seconds)
    return phases


def stack_memory(dk: docker.DockerClient, project: str) -> dict[str, int]:
    """The memory of the project's sandbox containers (:data:`SANDBOX_SERVICES`) by service, bytes."""
    out: dict[str, int] = {}
    for container in dk.containers.list(filters={"label": f"com.docker.compose.project={project}"}):
        service = container.labels.get("com.docker.compose.service", "")
        if service in SANDBOX_SERVICES:
            out[service] = memory_bytes(container.stats(stream=False, one_shot=True))
    return out


async def _timed_reset(client: SandboxClient, sandbox: Any) -> tuple[float, float | None, SandboxClient]:
    """Reset in place and connect with the new token: the reset's seconds, its ``workspace``
    phase's by the daemon's log (``None``: not logged) and the new connection."""
    phases: dict[str, float] = {}
    _, _, fresh = await reset_and_reconnect(client, None, connect_timeout_s=60, phases=phases)
    logged = reset_phases(sandbox.logs(tail=40).decode(errors="replace"))
    return phases["reset"], logged.get("workspace"), fresh


async def _after_start(url: str, token: str, desktop: bool, issued: float, settle_s: float,
                       dk: docker.DockerClient, project: str, out: Round) -> None:
    """The round after ``/healthz``: the applications (desktop), resets and memory readings."""
    client = await SandboxClient.connect(url, token, timeout_s=60)
    sandbox = sandbox_container(dk, project)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        if desktop:
            await open_answered(client, "terminal", deadline)
            out.runner_s = time.monotonic() - issued
            await window_mapped(client, "terminal", 0, deadline)
            out.window_s = time.monotonic() - issued - out.runner_s
            await open_answered(client, "editor", deadline)
            await window_mapped(client, "editor", 0, deadline)
            await asyncio.sleep(settle_s)
            out.memory_apps = stack_memory(dk, project)
        seconds, runners, client = await _timed_reset(client, sandbox)
        if desktop:
            out.reset_apps_s, out.runners_apps_s = seconds, runners
        await asyncio.sleep(settle_s)
        out.memory_idle = stack_memory(dk, project)
        out.reset_idle_s, out.runners_idle_s, client = await _timed_reset(client, sandbox)
    finally:
        await client.close()


def one_round(name: str, project: str, token: str, settle_s: float, dk: docker.DockerClient) -> Round:
    """Start stack ``name`` from nothing, measure one :class:`Round`, take it down."""
    profiles = PROFILES[name]
    env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800", COMPOSE_PROFILES=",".join(("demo", *profiles)))
    teardown(project, env, COMPOSE_FILES)
    try:
        issued = time.monotonic()
        compose(project, env, "up", "-d", "egress", "demo", "workspace", "sandbox", *profiles, files=COMPOSE_FILES)
        url = sandbox_url(dk, project)
        host = url.split("//", 1)[1].split("/", 1)[0]
        wait_healthy(f"http://{host}/healthz", issued + START_TIMEOUT_S)
        out = Round(healthy_s=time.monotonic() - issued)
        asyncio.run(_after_start(url, token, bool(profiles), issued, settle_s, dk, project, out))
        return out
    finally:
        teardown(project, env, COMPOSE_FILES)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _cell(value: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def report(sizes: dict[str, int], rounds: dict[str, list[Round]]) -> list[str]:
    """The Markdown tables: image sizes (MB of 10^6 bytes), then each stack's medians over
    its rounds (seconds; memory MiB, each service's median and the median of the sums)."""
    lines = ["| image | MB |", "|---|---|",
             f"| sandbox (browser-only profile) | {sizes['sandbox'] / 1e6:.1f} |",
             f"| desktop (the applications' zone) | {sizes['desktop'] / 1e6:.1f} |",
             f"| desktop profile: sandbox + what the desktop image adds beside it | "
             f"{(sizes['sandbox'] + sizes['desktop_added']) / 1e6:.1f} |", ""]
    lines += ["| cold start | rounds | compose up → healthy, s | compose up → open_app answered, s "
              "| open_app answered → window mapped, s |", "|---|---|---|---|---|"]
    for name, done in rounds.items():
        lines.append(f"| {name} | {len(done)} | {_cell(_median([r.healthy_s for r in done]))} "
                     f"| {_cell(_median([r.runner_s for r in done]))} | {_cell(_median([r.window_s for r in done]))} |")
    lines += ["", "| reset in place | rounds | reset, s | of which the zones' runners (the daemon's workspace "
              "phase), s | slowest reset, s |", "|---|---|---|---|---|"]
    for name, done in rounds.items():
        for state, pairs in (("no app open", [(r.reset_idle_s, r.runners_idle_s) for r in done]),
                             ("terminal + editor open", [(r.reset_apps_s, r.runners_apps_s) for r in done])):
            times = [t for t, _ in pairs if t is not None]
            if times:
                lines.append(f"| {name}, {state} | {len(times)} | {_cell(_median(times))} "
                             f"| {_cell(_median([p for _, p in pairs]))} | {max(times):.2f} |")
    lines += ["", "| memory per ready sandbox, MiB | " + " | ".join(SANDBOX_SERVICES) + " | sum |",
              "|---|" + "---|" * (len(SANDBOX_SERVICES) + 1)]
    for name, done in rounds.items():
        for state, readings in (("idle", [r.memory_idle for r in done]), ("terminal + editor open",
                                                                          [r.memory_apps for r in done])):
            if not any(readings):
                continue
            cells = [_cell(_median([m[s] / 2**20 if s in m else None for m in readings]), "{:.0f}")
                     for s in SANDBOX_SERVICES]
            total = _median([sum(m.values()) / 2**20 for m in readings if m])
            lines.append(f"| {name}, {state} | " + " | ".join(cells) + f" | {_cell(total, '{:.0f}')} |")
    return lines


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    started = time.monotonic()
    token = secrets.token_urlsafe(32)
    dk = docker.from_env()
    if not args.no_build:
        compose(f"deskpodbenchdesktopbuild{os.getpid()}", compose_env(token), "--profile", "demo", "--profile",
                "desktop", "build", files=COMPOSE_FILES)
    rounds: dict[str, list[Round]] = {name: [] for name in PROFILES}
    for number in range(1, args.rounds + 1):
        for name in PROFILES:
            project = f"deskpodbench{name.replace('-', '')}{os.getpid()}"
            rounds[name].append(one_round(name, project, token, args.settle_s, dk))
            r = rounds[name][-1]
            print(f"round {number}/{args.rounds}, {name}: healthy {r.healthy_s:.2f} s, reset {r.reset_idle_s:.2f} s, "
                  f"memory {sum(r.memory_idle.values()) / 2**20:.0f} MiB", file=sys.stderr)
    print(run_line("desktop", started) + "\n")
    print("\n".join(report(image_sizes(dk), rounds)))
