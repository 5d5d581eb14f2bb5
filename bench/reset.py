"""Reset-to-ready, in place vs container recreate vs snapshot restore, side by side.

``python -m bench reset [--rounds 50]`` (from the repository root, package installed
with ``pip install -e '.[agentd,test]'``). It builds the images, starts the demo
site on a network of its own (``demo.test``), makes one sandbox through
:class:`deskpod.backend.DockerBackend` (all of compose.yaml's hardening, its own
slot network and egress proxy) in a one-sandbox :class:`~deskpod.backend.SandboxPool`,
takes one snapshot of its browser at ``http://demo.test/`` with a cookie and
Local Storage set, then runs ``--rounds`` rounds. Each round dirties the sandbox
(untimed: a page of the demo site, typed text, a file in the workspace) before
each arm, in turn:

- **in place**: ``SandboxPool.reset(mode="in_place")``: connect with the current
  token, ``reset`` (the daemon stops the session, wipes every writable path,
  restarts the window manager and Chromium at the start URL, switches to a new
  token's hash and answers with the first observation), then connect with the new
  token.
- **recreate**: ``SandboxPool.reset(mode="recreate")``: remove the sandbox
  container, start a fresh one in the same slot with a new token, poll
  ``/healthz`` every 0.1 s until 200, connect and take one observation.
- **reset + snapshot restore**: ``SandboxPool.reset(mode="restore")``: the in-place
  reset, then ``restore`` of the snapshot (the browser profile replaced, Chromium
  started at the start URL, one observation).
- **snapshot restore only**: ``SandboxClient.restore`` on an open connection, no
  reset (workspace and /tmp untouched, token not rotated): the browser part alone.

Ready = a client holding the sandbox's token in force has received an observation
of the start page. Each timed reset is checked afterwards (untimed): the new token
is accepted and the browser is at the start URL. A reset that needed a fallback is
reported as such, not counted as its mode. Prints Markdown for BENCHMARKS.md; the
sandbox, the demo site and their networks are removed at the end, also on failure
or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import docker

from bench.common import compose, compose_env, exit_on_sigterm, image, pct
from deskpod.backend import DockerBackend, DockerBackendConfig, ResetMode, SandboxHandle, SandboxPool
from deskpod.backend.config import LABEL_POOL
from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError
from deskpod.protocol import ObserveOptions, WriteFileRequest

START_URL = "http://demo.test/"
"""Where every reset takes the browser."""
DIRTY_URL = "http://demo.test/fixtures/form"
"""The page each round visits before a reset."""
POOL = f"bench{os.getpid()}"
NETWORK = f"deskpodbench{os.getpid()}_outside"
STORAGE_URL = "http://demo.test/fixtures/storage"
"""The demo site's storage fixture: ``?set=VALUE`` stores VALUE in a cookie, Local
Storage, Session Storage and IndexedDB; without it the page shows what it finds."""
MARKER = "benchsnapshot"


@dataclass
class Arm:
    """One reset variant and its samples (seconds)."""

    label: str
    samples: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)


async def dirty(handle: SandboxHandle) -> None:
    """Leave traces a reset must remove: another page, typed text, a workspace file."""
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
    try:
        await client.navigate(DIRTY_URL)
        await client.act([{"type": "click", "x": 400, "y": 200}, {"type": "type", "text": "dirty"}])
        await client.request(WriteFileRequest(type="write_file", id=client.next_id(), path="dirty.txt",
                                              content="left by the benchmark\n"))
    finally:
        await client.close()


async def check(handle: SandboxHandle) -> str:
    """The browser's URL as seen with the handle's token (raises when the token is refused)."""
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
    try:
        return (await client.act([])).url or ""
    finally:
        await client.close()


async def storage_state(handle: SandboxHandle, query: str = "") -> dict[str, Any]:
    """Open the demo site's storage fixture (``?set=VALUE`` stores VALUE) and return its STATE line."""
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
    try:
        await client.navigate(f"{STORAGE_URL}{query}")
        obs = await client.act([{"type": "wait_for", "text_present": "STATE"}], ObserveOptions(page_text=True))
    finally:
        await client.close()
    for line in (obs.page_text or "").splitlines():
        if line.startswith("STATE "):
            return dict(json.loads(line[len("STATE "):]))
    raise SystemExit(f"the storage fixture shows no state: {(obs.page_text or '')[:200]!r}")


async def take_snapshot(handle: SandboxHandle) -> bytes:
    """Store a marker in the browser (cookie, Local Storage, IndexedDB) and snapshot it."""
    await storage_state(handle, f"?set={MARKER}")
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
    try:
        return await client.snapshot()
    finally:
        await client.close()


async def restore_only(handle: SandboxHandle, archive: bytes) -> float:
    """Time ``restore`` alone on an open connection, seconds."""
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
    try:
        started = time.perf_counter()
        await client.restore(archive, START_URL)
        return time.perf_counter() - started
    finally:
        await client.close()


async def verify(pool: SandboxPool, sandbox_id: str) -> str:
    """After the rounds (untimed): an in-place reset forgets the marker, a restore brings it back."""
    report = await pool.reset(sandbox_id, mode="in_place")
    after_reset = await storage_state(report.handle)
    report = await pool.reset(report.handle.id, mode="restore")
    after_restore = await storage_state(report.handle)
    if MARKER in json.dumps(after_reset) or after_restore.get("cookie") != MARKER or after_restore.get(
            "local") != MARKER:
        raise SystemExit(f"snapshot check failed: after reset {after_reset}, after restore {after_restore}")
    return (f"after an in-place reset the storage fixture finds nothing ({after_reset}); after a restore it finds "
            f"the marker again in cookie, localStorage and IndexedDB ({after_restore})")


ARMS: tuple[tuple[str, ResetMode | None], ...] = (
    ("in place", "in_place"),
    ("container recreate", "recreate"),
    ("reset + snapshot restore", "restore"),
    ("snapshot restore only (no reset)", None),
)
"""Each arm's label and the pool's reset mode (``None``: ``restore`` alone, no reset)."""


async def measure(backend: DockerBackend, rounds: int) -> tuple[list[Arm], int, str]:
    pool = SandboxPool(backend, name=POOL, size=1, start_url=START_URL)
    arms = [(Arm(label), mode) for label, mode in ARMS]
    try:
        await pool.fill()
        sandbox_id = pool.members[0].handle.id
        snapshot = pool.snapshot = await take_snapshot(pool.member(sandbox_id).handle)
        for i in range(rounds):
            for arm, mode in arms:
                handle = pool.member(sandbox_id).handle
                await dirty(handle)
                ok = True
                if mode is None:
                    try:
                        arm.samples.append(await restore_only(handle, snapshot))
                        arm.phases.append({"restore": arm.samples[-1]})
                    except DeskpodError as exc:
                        arm.fallbacks.append(f"failed: {type(exc).__name__}: {exc}")
                        ok = False
                else:
                    report = await pool.reset(sandbox_id, mode=mode)
                    sandbox_id = report.handle.id
                    if report.performed != mode:
                        arm.fallbacks.append(f"{report.performed}: {'; '.join(report.failures)}")
                    else:
                        arm.samples.append(report.duration_s)
                        arm.phases.append(report.phases)
                url = await check(pool.member(sandbox_id).handle)
                if ok and not url.startswith(START_URL):
                    raise SystemExit(f"{arm.label}: the browser is at {url!r} after the reset, not {START_URL}")
            print(f"round {i + 1}/{rounds}: " + ", ".join(
                f"{a.label} {a.samples[-1]:.2f} s" for a, _ in arms if a.samples), file=sys.stderr)
        verified = await verify(pool, sandbox_id)
        return [a for a, _ in arms], len(snapshot), verified
    finally:
        await pool.close()


IMAGES = {name: image(name) for name in ("sandbox", "egress", "demo", "hostguard")}
"""The images compose builds (the variables compose.yaml reads), so two checkouts can bench side by side."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=50, help="resets per arm (default 50)")
    parser.add_argument("--standby", action="store_true",
                        help="the sandbox keeps a standby desktop (DESKPOD_STANDBY_BROWSER=on) for in-place resets")


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    env = compose_env("x" * 32)
    compose(f"deskpodbench{os.getpid()}", env, "build", "hostguard", "egress", "demo", "sandbox")
    dk = docker.from_env()
    labels = {"deskpod.bench": "reset", LABEL_POOL: POOL}
    started = time.monotonic()
    try:
        dk.networks.create(NETWORK, driver="bridge", labels=labels)
        dk.containers.run(
            IMAGES["demo"], name=f"deskpodbench{os.getpid()}_demo", detach=True, network=NETWORK,
            networking_config={NETWORK: dk.api.create_endpoint_config(aliases=["demo.test"])},
            read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges:true"], labels=labels,
        )
        config = DockerBackendConfig.from_env({}, sandbox_image=IMAGES["sandbox"], egress_image=IMAGES["egress"],
                                              hostguard_image=IMAGES["hostguard"], outside_network=NETWORK,
                                              egress_allowlist="demo.test",
                                              start_url=START_URL, name_prefix="deskpodbench",
                                              standby_browser=args.standby)
        arms, snapshot_bytes, verified = asyncio.run(measure(DockerBackend(config, client=dk), args.rounds))
    finally:
        # The pool removes its sandboxes; whatever an interruption left is found by label.
        for container in dk.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
            container.remove(force=True, v=True)
        for net in dk.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            net.remove()
    report(dk, arms, snapshot_bytes, verified, time.monotonic() - started, args.standby)


def report(dk: Any, arms: list[Arm], snapshot_bytes: int, verified: str, total_s: float,
           standby: bool = False) -> None:
    info = dk.version()
    print(f"standby desktop {'on' if standby else 'off'}; "
          f"{dt.date.today()}, {os.cpu_count()} cores, Linux {platform.release()}, Docker {info.get('Version')}; "
          f"load average {os.getloadavg()[0]:.2f} at the end; {total_s:.0f} s in all; "
          f"snapshot {snapshot_bytes / 1024:.0f} KiB; images: deskpod/sandbox "
          f"{dk.images.get(IMAGES['sandbox']).short_id.split(':')[1]}, deskpod/egress "
          f"{dk.images.get(IMAGES['egress']).short_id.split(':')[1]}\n")
    base = statistics.median(arms[0].samples) if arms[0].samples else float("nan")
    print("| reset → ready | n | p50 s | p95 s | mean s | min s | max s | p50 / in-place p50 | fallbacks or failures |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        s = arm.samples
        if not s:
            print(f"| {arm.label} | 0 | – | – | – | – | – | – | {len(arm.fallbacks)} |")
            continue
        print(f"| {arm.label} | {len(s)} | {statistics.median(s):.2f} | {pct(s, 0.95):.2f} | "
              f"{statistics.mean(s):.2f} | {min(s):.2f} | {max(s):.2f} | {statistics.median(s) / base:.1f}x | "
              f"{len(arm.fallbacks)} |")
    print("\nWhere the time goes (medians, s):\n")
    print("| reset → ready | phases |")
    print("|---|---|")
    for arm in arms:
        names = list(dict.fromkeys(k for p in arm.phases for k in p))
        cells = ", ".join(f"{k} {statistics.median(p.get(k, 0.0) for p in arm.phases):.3f}" for k in names)
        print(f"| {arm.label} | {cells} |")
    for arm in arms:
        for f in arm.fallbacks[:3]:
            print(f"\n{arm.label}, fallback or failure: {f[:300]}")
    print(f"\nCheck: {verified}.")
