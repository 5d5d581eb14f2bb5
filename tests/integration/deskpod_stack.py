"""Helpers for integration tests: a real deskpod stack started with compose, as users start it.

The images are built from the project's own Dockerfiles, and the containers run
with compose.yaml's hardening flags. Nothing here skips: without Docker these
tests fail, loudly.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import secrets
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


import docker

from deskpod import __version__
from deskpod.backend.hostguard import project_bridge_name
from deskpod.client import SandboxClient
from deskpod.protocol import ErrorReply, ObserveOptions, Result

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
READY_TIMEOUT_S = 120.0
SANDBOX_IMAGE = os.environ.get("DESKPOD_SANDBOX_IMAGE", f"deskpod/sandbox:{__version__}")
"""The sandbox image compose builds (the same variable compose.yaml reads, and its default tag)."""
EGRESS_IMAGE = os.environ.get("DESKPOD_EGRESS_IMAGE", f"deskpod/egress:{__version__}")
"""The egress proxy's image compose builds."""
DEMO_IMAGE = os.environ.get("DESKPOD_DEMO_IMAGE", f"deskpod/demo:{__version__}")
"""The demo site's image compose builds."""
HOSTGUARD_IMAGE = os.environ.get("DESKPOD_HOSTGUARD_IMAGE", f"deskpod/hostguard:{__version__}")
"""The host guard's image compose builds."""
DESKTOP_IMAGE = os.environ.get("DESKPOD_DESKTOP_IMAGE", f"deskpod/desktop:{__version__}")
"""The desktop applications' zone's image compose builds (the ``desktop`` profile)."""
SERVE_TOKEN_FILE = "/var/lib/deskpod/sandbox/stack.token"
"""Where compose.yaml's controller service keeps the token in force of the sandbox it owns."""
CONTROLLER_IMAGE = os.environ.get("DESKPOD_CONTROLLER_IMAGE", f"deskpod/controller:{__version__}")
"""The controller image (serve and the demo controller) compose builds."""


def compose_command() -> list[str]:
    """``scripts/compose.sh``, as users run compose: ``docker compose`` (v2) when present, else
    Debian's ``docker-compose`` 1.29, with the bridge name, base image and label values it sets."""
    return [str(ROOT / "scripts" / "compose.sh")]


@dataclass
class Stack:
    """A running compose project: the sandbox, its egress proxy and test sites."""

    project: str
    token: str
    env: dict[str, str]
    compose: list[str]
    docker: Any

    @property
    def device_scale_factor(self) -> float:
        """The device scale factor the sandbox's browser runs at (``DESKPOD_DEVICE_SCALE_FACTOR``)."""
        return float(self.env.get("DESKPOD_DEVICE_SCALE_FACTOR", "1.0"))

    @property
    def bridge(self) -> str:
        """sandbox_net's bridge name (``DESKPOD_SANDBOX_BRIDGE``, one per project)."""
        return self.env["DESKPOD_SANDBOX_BRIDGE"]

    def compose_argv(self, *args: str) -> list[str]:
        """The compose command line for this project and both compose files, then ``args``."""
        return [*self.compose, "-p", self.project, "-f", str(ROOT / "compose.yaml"), "-f",
                str(HERE / "compose.test.yaml"), *args]

    @property
    def compose_env(self) -> dict[str, str]:
        """Compose's environment: the token in force (reset tests rotate it, and the controller
        service reads it here)."""
        return dict(self.env, DESKPOD_TOKEN=self.token)

    def run_compose(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.compose_argv(*args), cwd=ROOT, env=self.compose_env, capture_output=True,
                              text=True, check=check, timeout=timeout)

    def sync_token(self) -> None:
        """Take the token in force from the stack's controller service, when it runs: its
        sessions reset the sandbox and rotate the token, which it keeps in its token file
        (compose.yaml's ``sandbox_token`` volume), as the operator's own tools read it."""
        running = self.docker.containers.list(filters={"label": [f"com.docker.compose.project={self.project}",
                                                                 "com.docker.compose.service=serve"]})
        if running:
            result = running[0].exec_run(["cat", SERVE_TOKEN_FILE])
            if result.exit_code == 0 and result.output.strip():
                self.token = result.output.decode().strip()

    def container(self, service: str) -> Any:
        found = self.docker.containers.list(
            all=True,
            filters={"label": [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]},
        )
        assert found, f"no container for service {service}"
        return found[0]

    def ip(self, service: str, network: str) -> str:
        c = self.container(service)
        c.reload()
        return c.attrs["NetworkSettings"]["Networks"][f"{self.project}_{network}"]["IPAddress"]

    @property
    def egress_control_url(self) -> str:
        """The egress proxy's control endpoint, as the host reaches it (its sandbox_net address)."""
        return f"http://{self.ip('egress', 'sandbox_net')}:3129"

    @property
    def ws_url(self) -> str:
        # The host reaches the sandbox's address on its internal network directly;
        # no port is published.
        return f"ws://{self.ip('sandbox', 'sandbox_net')}:8765/v1/ws"

    def exec_python(self, service: str, code: str, user: str | None = None) -> Any:
        """Run ``code`` with the sandbox venv's Python in ``service``; it prints one JSON value."""
        c = self.container(service)
        result = c.exec_run(["python3", "-c", code], user=user or "", demux=True)
        out, err = result.output
        assert result.exit_code == 0, (err or b"").decode()[-2000:]
        return json.loads(out)


def with_client(stack: Stack, body: Callable[[SandboxClient], Awaitable[Any]]) -> Any:
    """Connect to ``stack``'s sandbox, run ``body(client)`` and close."""

    async def main() -> Any:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


async def send(client: SandboxClient, **fields: Any) -> Result | ErrorReply:
    """Send one raw request (``fields`` plus a fresh ``id``) and return the daemon's reply."""
    reply = await client.send_raw(json.dumps({"id": client.next_id(), **fields}))
    assert isinstance(reply, (Result, ErrorReply)), reply
    return reply


async def ok(client: SandboxClient, **fields: Any) -> Any:
    """Send one raw workspace request that must succeed; return its ``workspace`` output."""
    reply = await send(client, **fields)
    assert isinstance(reply, Result), (fields, reply)
    return reply.workspace


def page_state(page_text: str | None) -> dict:
    """The ``STATE {json}`` line a fixture page shows, decoded."""
    for line in (page_text or "").splitlines():
        if line.startswith("STATE "):
            return json.loads(line[len("STATE "):])
    raise AssertionError(f"fixture state not on the page: {(page_text or '')[:500]!r}")


async def storage_state(client: SandboxClient, timeout_s: float = 15.0) -> dict:
    """The storage fixture's ``STATE`` once its IndexedDB request has answered."""
    deadline = time.monotonic() + timeout_s
    while True:
        obs = await client.act([], ObserveOptions(screenshot=False, page_text=True))
        try:
            return page_state(obs.page_text)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def wait_healthy(stack: Stack, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until the sandbox's ``/healthz`` answers 200; fail with its logs after ``timeout_s``."""
    url = f"http://{stack.ip('sandbox', 'sandbox_net')}:8765/healthz"
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last = ""
    while time.monotonic() < deadline:
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)
    logs = stack.container("sandbox").logs(tail=60).decode(errors="replace")
    raise AssertionError(f"sandbox not healthy after {timeout_s:.0f} s ({last}); logs:\n{logs}")


def free_loopback_port() -> int:
    """A TCP port free on the host's loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def build_images() -> None:
    """Build every image compose.yaml and the test sites name (the ``demo`` and ``desktop`` profiles too), once per
    test session: the sources do not change while the tests run, and a build whose every step
    is cached still sends each image its context and walks its steps.

    Raises:
        subprocess.CalledProcessError: a build failed (the next call tries again).
    """
    env = dict(os.environ, DESKPOD_TOKEN="x" * 32, DESKPOD_TOKEN_SHA256="ab" * 32)
    subprocess.run([*compose_command(), "-f", str(ROOT / "compose.yaml"), "-f", str(HERE / "compose.test.yaml"),
                    "--profile", "demo", "--profile", "desktop", "build"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=1800)


def start_stack(name: str, screen: str, **extra_env: str) -> Iterator[Stack]:
    """Build the images (:func:`build_images`), start egress, demo, sandbox (``screen``, e.g. ``1280x800``) and two
    test sites as compose project ``deskpod<name><pid>`` (``extra_env`` added to compose's
    environment); yield it, then take it down (``scripts/compose.sh down`` removes its host
    firewall rule too)."""
    client = docker.from_env()
    client.ping()
    token = secrets.token_urlsafe(32)
    serve_token = secrets.token_urlsafe(32)
    egress_token = secrets.token_urlsafe(32)
    project = f"deskpod{name}{os.getpid()}"
    env = dict(
        os.environ,
        DESKPOD_TOKEN=token,
        DESKPOD_TOKEN_SHA256=hashlib.sha256(token.encode()).hexdigest(),
        # The controller service (started only by the tests that use it), on a free loopback port.
        DESKPOD_SERVE_TOKEN=serve_token,
        DESKPOD_SERVE_TOKEN_SHA256=hashlib.sha256(serve_token.encode()).hexdigest(),
        DESKPOD_SERVE_PORT=str(free_loopback_port()),
        DESKPOD_EGRESS_ALLOWLIST="demo.test allowed.test",
        # The egress proxy's control endpoint: the tests' controller holds the token.
        DESKPOD_EGRESS_CONTROL_TOKEN=egress_token,
        DESKPOD_EGRESS_CONTROL_TOKEN_SHA256=hashlib.sha256(egress_token.encode()).hexdigest(),
        DESKPOD_SCREEN_SIZE=screen,
        DESKPOD_SANDBOX_BRIDGE=project_bridge_name(project),
    )
    env.update(extra_env)
    s = Stack(project, env["DESKPOD_TOKEN"], env, compose_command(), client)
    build_images()
    try:
        s.run_compose("up", "-d", "egress", "demo", "workspace", "sandbox", "allowed", "blocked")
        wait_healthy(s)
        yield s
    finally:
        _take_down(s)


_TAKING_DOWN: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
"""Stacks whose ``down`` runs in the background: (project, process, its stderr)."""


def _take_down(stack: Stack) -> None:
    """Start ``down`` of ``stack`` (containers, networks, volumes and its host firewall rule) and
    return at once: the next test runs while the containers stop. :func:`wait_for_takedowns`
    waits for every one."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(stack.compose_argv("down", "-v", "--remove-orphans", "-t", "5"), cwd=ROOT,
                            env=stack.compose_env, stdout=subprocess.DEVNULL, stderr=err)
    _TAKING_DOWN.append((stack.project, proc, err))


def wait_for_takedowns(timeout_s: float = 300) -> list[str]:
    """Wait for every ``down`` :func:`start_stack` started (each at most ``timeout_s`` seconds);
    return one line per one that failed (``project: exit code: end of its stderr``)."""
    failed = []
    while _TAKING_DOWN:
        project, proc, err = _TAKING_DOWN.pop()
        with err:
            if proc.wait(timeout=timeout_s):
                err.seek(0)
                failed.append(f"{project}: exit {proc.returncode}: {err.read().decode(errors='replace')[-500:]}")
    return failed
