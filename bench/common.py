"""Helpers shared by the benchmarks: compose, finding the sandbox, percentiles."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "scripts" / "compose.sh"


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
