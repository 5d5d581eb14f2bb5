"""Density: how many ready sandboxes this host holds, and how they behave all at once.

``python -m bench density --size N [--drive-s 15]`` (from the repository root, package
installed with ``pip install -e '.[agentd,test,backend]'``). It builds the images, starts
the demo site on a network of its own (``demo.test``) and fills a
:class:`~deskpod.backend.SandboxPool` of ``N`` through :class:`~deskpod.backend.DockerBackend`
exactly as ``deskpod pool up --size N`` does: slot networks from ``10.232.0.0/16`` in
/28s (``subnet_pool``), slot memory sized to fit the host
(:func:`deskpod.backend.memory.auto_slot_bytes`), at most
:data:`~deskpod.backend.pool.START_CONCURRENCY` starts at a time with retries. Then:

- **time to fill**: ``fill()`` from nothing to ``N`` ready (each ready = an observation
  received with its token), with the failed starts it retried;
- **memory per ready sandbox**: the slot's three containers (sandbox, workspace, egress
  proxy), Docker's usage less the page cache (what ``docker stats`` shows), summed per slot,
  idle at the start page;
- **acquire → first observation**: ``acquire()``, connect with the leased token, one
  observation (PNG screenshot, settled) — one sandbox after another, p50/p95;
- **actions per second, all N driven at once**: every sandbox connected, each sending
  ``move`` actions one batch at a time for ``--drive-s`` seconds, in two rounds: without a
  screenshot, and with the default observation (PNG, settled).

Prints Markdown for BENCHMARKS.md; the pool, the demo site and the network are removed at
the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import time
from typing import Any

import docker

from bench.common import compose, compose_env, exit_on_sigterm, image, memory_bytes, pct
from deskpod.backend import DockerBackend, DockerBackendConfig, SandboxHandle, SandboxPool
from deskpod.backend.config import LABEL_POOL
from deskpod.backend.memory import auto_slot_bytes
from deskpod.backend.pool import StartEvent
from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions

START_URL = "http://demo.test/"
POOL = f"benchdensity{os.getpid()}"
NETWORK = f"deskpodbenchdensity{os.getpid()}_outside"
SUBNET_POOL = "10.232.0.0/16"
IMAGES = {name: image(name) for name in ("sandbox", "egress", "demo", "hostguard")}
NO_SCREENSHOT = ObserveOptions(screenshot=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=10, help="sandboxes in the pool (default 10)")
    parser.add_argument("--drive-s", type=float, default=15.0,
                        help="seconds each driving round lasts (default 15)")


def slot_memory_mib(dk: Any) -> list[float]:
    """Memory of each slot of the pool (its containers summed), MiB."""
    per_slot: dict[str, int] = {}
    for container in dk.containers.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
        slot = container.labels.get("deskpod.sandbox", "")
        per_slot[slot] = per_slot.get(slot, 0) + memory_bytes(container.stats(stream=False, one_shot=True))
    return [v / 2**20 for v in per_slot.values()]


async def first_observation(pool: SandboxPool) -> tuple[float, SandboxHandle]:
    started = time.perf_counter()
    handle = await pool.acquire()
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=60)
    try:
        obs = await client.act([])
        if obs.screenshot is None:
            raise SystemExit(f"sandbox {handle.id}: no screenshot in its first observation")
    finally:
        await client.close()
    return time.perf_counter() - started, handle


async def drive(handles: list[SandboxHandle], seconds: float, observe: ObserveOptions | None) -> tuple[int, float]:
    """Every sandbox moves its pointer one batch at a time for ``seconds``; (actions, elapsed s)."""
    clients = await asyncio.gather(*(SandboxClient.connect(h.url, h.token, timeout_s=60) for h in handles))
    counts = [0] * len(clients)

    async def one(i: int, client: SandboxClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            await client.act([{"type": "move", "x": 100 + (counts[i] * 37) % 1000, "y": 100 + i % 500}], observe,
                             timeout_s=120)
            counts[i] += 1

    try:
        started = time.monotonic()
        deadline = started + seconds
        await asyncio.gather(*(one(i, c, deadline) for i, c in enumerate(clients)))
        return sum(counts), time.monotonic() - started
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def measure(backend: DockerBackend, dk: Any, size: int, drive_s: float) -> dict[str, Any]:
    events: list[StartEvent] = []

    def on_start(event: StartEvent) -> None:
        events.append(event)
        if event.kind != "starting":
            ready = sum(e.kind == "ready" for e in events)
            print(f"[{ready}/{size} ready] slot {event.slot + 1} attempt {event.attempt}: {event.kind}"
                  f"{' ' + event.error[:200] if event.error else ''}", file=sys.stderr)

    pool = SandboxPool(backend, name=POOL, size=size, start_url=START_URL, on_start=on_start)
    try:
        started = time.monotonic()
        await pool.fill()
        fill_s = time.monotonic() - started
        memory = slot_memory_mib(dk)
        firsts: list[float] = []
        handles: list[SandboxHandle] = []
        for _ in range(size):
            elapsed, handle = await first_observation(pool)
            firsts.append(elapsed)
            handles.append(handle)
        print(f"filled in {fill_s:.1f} s; acquire → first observation p50 {statistics.median(firsts):.3f} s",
              file=sys.stderr)
        bare = await drive(handles, drive_s, NO_SCREENSHOT)
        shot = await drive(handles, drive_s, None)
        return {"fill_s": fill_s, "retries": sum(e.kind == "retry" for e in events),
                "failed": sum(e.kind == "failed" for e in events), "memory_mib": memory, "firsts": firsts,
                "bare": bare, "shot": shot, "slot_memory": backend.config.slot_memory}
    finally:
        await pool.close()


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    env = compose_env("x" * 32)
    compose(f"deskpodbenchdensity{os.getpid()}", env, "build", "hostguard", "egress", "demo", "sandbox")
    dk = docker.from_env()
    labels = {"deskpod.bench": "density", LABEL_POOL: POOL}
    host_bytes = int(dk.info()["MemTotal"])
    share = auto_slot_bytes(host_bytes, args.size)
    started = time.monotonic()
    try:
        dk.networks.create(NETWORK, driver="bridge", labels=labels)
        dk.containers.run(
            IMAGES["demo"], name=f"deskpodbenchdensity{os.getpid()}_demo", detach=True, network=NETWORK,
            networking_config={NETWORK: dk.api.create_endpoint_config(aliases=["demo.test"])},
            read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges:true"], labels=labels,
        )
        config = DockerBackendConfig.from_env(
            {}, sandbox_image=IMAGES["sandbox"], egress_image=IMAGES["egress"], hostguard_image=IMAGES["hostguard"],
            outside_network=NETWORK, egress_allowlist="demo.test", start_url=START_URL,
            name_prefix="deskpodbenchdensity", subnet_pool=SUBNET_POOL, subnet_size=28,
            slot_memory=f"{share // 2**20}m" if share else None)
        result = asyncio.run(measure(DockerBackend(config, client=dk), dk, args.size, args.drive_s))
    finally:
        for container in dk.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
            container.remove(force=True, v=True)
        for net in dk.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            net.remove()
    report(dk, args, result, host_bytes, time.monotonic() - started)


def report(dk: Any, args: argparse.Namespace, r: dict[str, Any], host_bytes: int, total_s: float) -> None:
    info = dk.version()
    print(f"{dt.date.today()}, {os.cpu_count()} cores, {host_bytes / 2**30:.0f} GiB, Linux {platform.release()}, "
          f"Docker {info.get('Version')}; load average {os.getloadavg()[0]:.2f} at the end; {total_s:.0f} s in all; "
          f"slot memory {r['slot_memory'] or 'compose.yaml limits'}; subnets /28 of {SUBNET_POOL}\n")
    mem, firsts = r["memory_mib"], r["firsts"]
    (bare_n, bare_s), (shot_n, shot_s) = r["bare"], r["shot"]
    print("| size | fill s | retried starts | memory per ready slot MiB (mean, max) | acquire → first observation "
          "p50 / p95 s | actions/s, all at once, no screenshot | actions/s, all at once, PNG observation |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.size} | {r['fill_s']:.1f} | {r['retries']} (failed {r['failed']}) | "
          f"{statistics.mean(mem):.0f}, {max(mem):.0f} | {statistics.median(firsts):.3f} / {pct(firsts, 0.95):.3f} | "
          f"{bare_n / bare_s:.1f} ({bare_n} in {bare_s:.0f} s) | {shot_n / shot_s:.1f} ({shot_n} in {shot_s:.0f} s) |")
