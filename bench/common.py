"""Helpers shared by the benchmarks: compose, finding the sandbox, a sandbox image beside a
baseline image, Chromium's CPU and memory in the container, percentiles."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import secrets
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import docker

from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "scripts" / "compose.sh"

_Row = TypeVar("_Row")

READY_WAIT_S = 60.0
"""How long :func:`ready_client` tries the first navigation again, seconds."""


def image(name: str) -> str:
    """The image compose.yaml builds for the service ``name`` (``sandbox``, ``egress``,
    ``demo``, ``hostguard``): ``$DESKPOD_<NAME>_IMAGE``, else its default, tagged with the
    package's version as compose.yaml does."""
    from deskpod import __version__

    return os.environ.get(f"DESKPOD_{name.upper()}_IMAGE", f"deskpod/{name}:{__version__}")


def compose(project: str, env: dict[str, str], *args: str, files: tuple[str, ...] = ()) -> None:
    """Run ``scripts/compose.sh -p PROJECT [-f FILE]... ARGS`` from the repository root.

    From the root so compose.yaml's relative seccomp path resolves with both
    ``docker compose`` and ``docker-compose`` 1.29.
    """
    cmd = [str(COMPOSE), "-p", project]
    for f in files:
        cmd += ["-f", f]
    done = subprocess.run([*cmd, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compose {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def compose_env(token: str, **extra: str) -> dict[str, str]:
    """The environment for compose: the token (controller) and its SHA-256 (sandbox)."""
    return dict(os.environ, DESKPOD_TOKEN=token,
                DESKPOD_TOKEN_SHA256=hashlib.sha256(token.encode()).hexdigest(), **extra)


def teardown(project: str, env: dict[str, str], files: tuple[str, ...] = ()) -> None:
    """``compose down -v``; if compose itself fails, remove the project's containers,
    networks and volumes through the Docker API (by the compose project label)."""
    try:
        compose(project, env, "down", "-v", "-t", "5", files=files)
        return
    except SystemExit as exc:
        print(f"{exc}\nremoving project {project} through the Docker API", file=sys.stderr)
    client = docker.from_env()
    label = {"label": f"com.docker.compose.project={project}"}
    for container in client.containers.list(all=True, filters=label):
        container.remove(force=True, v=True)
    for network in client.networks.list(filters=label):
        network.remove()
    for volume in client.volumes.list(filters=label):
        volume.remove(force=True)


def sandbox_container(client: docker.DockerClient, project: str, timeout_s: float = 60) -> Any:
    """The project's running sandbox container."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                          "com.docker.compose.service=sandbox"]})
        if found:
            return found[0]
        time.sleep(0.05)
    raise SystemExit("sandbox container did not appear")


def sandbox_url(client: docker.DockerClient, project: str) -> str:
    """``ws://IP:8765/v1/ws`` of the project's sandbox on its ``sandbox_net`` (reachable from the host)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        container = sandbox_container(client, project)
        container.reload()
        ip = container.attrs["NetworkSettings"]["Networks"].get(f"{project}_sandbox_net", {}).get("IPAddress")
        if ip:
            return f"ws://{ip}:8765/v1/ws"
        time.sleep(0.05)
    raise SystemExit("sandbox container has no address on sandbox_net")


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks tear the compose project down."""
    def _raise(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _raise)


def beside_baseline(project: str, baseline_image: str,
                    measure: Callable[[str, str], Awaitable[_Row]], passes: int = 1) -> dict[str, _Row]:
    """Measure this tree's sandbox image, then ``baseline_image``, one after the other in the
    same compose project (compose.yaml's services egress, demo and sandbox, every hardening
    flag, a 1280x800 screen), each torn down after; ``passes`` times in turn, so a change in
    the machine's load shows as a difference between passes of one image.

    Args:
        project: the compose project's name.
        baseline_image: the sandbox image to compare with (e.g. one built from main).
        measure: ``measure(sandbox_url, token)``, run once per image and pass (the running
            sandbox container is :func:`sandbox_container` of ``project``).
        passes: turns of the two images.

    Returns:
        Its results by ``"this tree (IMAGE)"`` and ``"baseline (IMAGE)"``, in that order
        (with ``", pass N"`` after each when ``passes`` is over 1).
    """
    exit_on_sigterm()
    token = secrets.token_urlsafe(32)
    dk = docker.from_env()
    rows: dict[str, _Row] = {}
    for number in range(1, passes + 1):
        for system, sandbox in (("this tree", image("sandbox")), ("baseline", baseline_image)):
            env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800", DESKPOD_SANDBOX_IMAGE=sandbox)
            teardown(project, env, ("compose.yaml",))
            try:
                compose(project, env, "up", "-d", "--no-build", "egress", "demo", "sandbox", files=("compose.yaml",))
                label = f"{system} ({sandbox})" + (f", pass {number}" if passes > 1 else "")
                rows[label] = asyncio.run(measure(sandbox_url(dk, project), token))
            finally:
                teardown(project, env, ("compose.yaml",))
    return rows


def run_line(name: str, started: float) -> str:
    """The line a report starts with: the command (``python -m bench NAME`` and its
    arguments), the date, the cores, the load average at the end and how long the run took
    since ``started`` (``time.monotonic()``)."""
    return (f"`python -m bench {name} {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} "
            f"cores; load average at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - started:.0f} s.")


async def ready_client(url: str, token: str, page: str, timeout_s: float = 300.0) -> SandboxClient:
    """A client of the sandbox daemon at ``url`` once its browser has loaded ``page``.

    The daemon may answer before Chromium does, so the navigation is tried again every
    0.5 s for :data:`READY_WAIT_S`; ``timeout_s`` bounds the connection (the container may
    still be starting).

    Raises:
        DeskpodError: the page did not load in time (the last error).
    """
    client = await SandboxClient.connect(url, token, timeout_s=timeout_s)
    deadline = time.monotonic() + READY_WAIT_S
    while True:
        try:
            await client.navigate(page)
            return client
        except DeskpodError:
            if time.monotonic() > deadline:
                await client.close()
                raise
            await asyncio.sleep(0.5)


PROBE = r"""
import json, os
cpu = rss = gpu = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
        if not cmd.split(b" ")[0].endswith(b"chromium"):  # children rewrite theirs as one string
            continue
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        kib = int(next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")).split()[1])
    except (OSError, StopIteration):
        continue
    cpu += sum(map(int, stat[11:15]))  # utime, stime, and those of its children it reaped
    rss += kib
    if b"--type=gpu-process" in cmd:
        gpu = kib
print(json.dumps({"cpu_s": cpu / os.sysconf("SC_CLK_TCK"), "rss_mib": rss / 1024, "gpu_mib": gpu / 1024}))
"""
"""Run with the container's Python: Chromium's CPU seconds so far and resident sets now."""


def chromium_sample(container: Any) -> dict[str, float]:
    """Chromium's CPU seconds so far (``cpu_s``: ``utime + stime`` of every ``chromium`` process,
    with ``cutime + cstime``, the time of the children each reaped, so a renderer that exited
    between two samples still counts; proc(5)), the sum of their resident sets and the GPU
    process's (``rss_mib``, ``gpu_mib``, MiB), and the time taken (``at``,
    :func:`time.monotonic` seconds); read by :data:`PROBE` in the container.

    Raises:
        SystemExit: the probe failed in the container.
    """
    code, out = container.exec_run(["python3", "-c", PROBE], user="deskpod")
    if code != 0:
        raise SystemExit(f"the probe failed ({code}): {out.decode(errors='replace')[-500:]}")
    found: dict[str, float] = json.loads(out)
    found["at"] = time.monotonic()
    return found


def memory_bytes(stats: dict[str, Any]) -> int:
    """A container's memory from Docker's stats: its usage less the page cache, as ``docker
    stats`` computes it (cgroup v1 and v2), bytes."""
    mem = stats.get("memory_stats") or {}
    detail = mem.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", detail.get("cache", 0)))
    return int(mem.get("usage", 0)) - int(cache)


def container_mib(container: Any) -> float:
    """The container's memory (its cgroup's usage, Docker's one-shot stats), MiB."""
    return float(container.stats(stream=False, one_shot=True)["memory_stats"]["usage"]) / 2**20


def container_cpu_s(container: Any) -> float:
    """The container's CPU seconds so far: every process it ran, exited ones too (its cgroup's
    usage, Docker's one-shot stats)."""
    return float(container.stats(stream=False, one_shot=True)["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
