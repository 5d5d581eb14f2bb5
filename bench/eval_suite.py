"""Eval suite wall time: the shipped regression suite at several ``--parallel`` values.

``python -m bench eval [--parallel 1,2,4] [--suite FILE]`` (from the repository root,
package installed). It builds the images, starts the demo site as ``demo.test`` on a
network of its own, and runs ``deskpod eval SUITE --parallel N`` as a subprocess for
each N, as a user does: the command fills its own pool of N sandboxes, runs every
task, destroys the pool. Reported per N: the command's wall time (process start to
exit, pool filling and teardown included), the runner's own time (fill + runs) and,
of it, the pool's fill, the pass count, the median and p95 of the runs' own durations, and the host's 1-minute
load average before the run.

Prints Markdown for BENCHMARKS.md; the demo site, the network and anything left of a
pool are removed at the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

from bench.common import ROOT, compose, compose_env, exit_on_sigterm, image, pct
from deskpod.backend.config import LABEL_POOL

PREFIX = f"deskpodbencheval{os.getpid()}"
NETWORK = f"{PREFIX}_outside"
SUITE = ROOT / "runtime" / "deskpod" / "tasks" / "regression" / "suite.yaml"
IMAGES = {name: image(name) for name in ("sandbox", "egress", "demo", "hostguard")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parallel", default="1,2,4", help="comma-separated --parallel values (default 1,2,4)")
    parser.add_argument("--suite", default=str(SUITE), help="the suite file (default: the shipped regression suite)")


def _cleanup(dk: Any) -> None:
    for container in dk.containers.list(all=True, filters={"label": LABEL_POOL}):
        if container.name.startswith(PREFIX):
            container.remove(force=True, v=True)
    for net in dk.networks.list():
        if net.name.startswith(PREFIX) and net.name != NETWORK:
            net.remove()


def _one(suite: str, parallel: int, work: Path) -> dict[str, Any]:
    env = dict(os.environ, DESKPOD_OUTSIDE_NETWORK=NETWORK, DESKPOD_EGRESS_ALLOWLIST="demo.test",
               DESKPOD_NAME_PREFIX=PREFIX, DESKPOD_STATE_DIR=str(work / "state"),
               DESKPOD_AUDIT_KEY=str(work / "key" / "signing.key"))
    report = work / f"report-{parallel}"
    load = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "deskpod"), "eval", suite, "--parallel", str(parallel),
                           "--report", str(report), "--audit-dir", str(work / "audit")],
                          env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    print(done.stdout, file=sys.stderr)
    document = json.loads((report / "report.json").read_text())
    durations = [r["wall_time_s"] for r in document["runs"]]
    return {"parallel": parallel, "wall_s": wall, "runner_s": document["wall_time_s"], "fill_s": document["fill_time_s"], "exit": done.returncode,
            "passed": document["passed"], "runs": len(document["runs"]), "p50": statistics.median(durations),
            "p95": pct(durations, 0.95), "load": load}


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    values = [int(v) for v in args.parallel.split(",") if v.strip()]
    env = compose_env("x" * 32)
    compose(PREFIX, env, "build", "hostguard", "egress", "demo", "sandbox")
    dk = docker.from_env()
    demo = None
    rows = []
    try:
        dk.networks.create(NETWORK, driver="bridge", labels={"deskpod.bench": "eval"})
        demo = dk.containers.run(IMAGES["demo"], name=f"{PREFIX}_demo", detach=True, network=NETWORK,
                                 networking_config={NETWORK: dk.api.create_endpoint_config(aliases=["demo.test"])},
                                 read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges:true"])
        with tempfile.TemporaryDirectory(prefix="deskpod-bench-eval-") as tmp:
            for parallel in values:
                print(f"deskpod eval --parallel {parallel} ...", file=sys.stderr)
                rows.append(_one(args.suite, parallel, Path(tmp)))
    finally:
        _cleanup(dk)
        if demo is not None:
            demo.remove(force=True, v=True)
        for net in dk.networks.list(names=[NETWORK]):
            net.remove()
    print(f"Eval suite wall time, {dt.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
          f"suite {Path(args.suite).name}:\n")
    print("| --parallel | wall time (s) | runner (s) | pool fill (s) | passed | run p50 (s) | run p95 (s) "
          "| load before | exit |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['parallel']} | {r['wall_s']:.1f} | {r['runner_s']:.1f} | {r['fill_s']:.1f} | {r['passed']}/{r['runs']} | "
              f"{r['p50']:.1f} | {r['p95']:.1f} | {r['load']:.2f} | {r['exit']} |")
