"""compose.yaml as an operator uses it, and the images it builds.

- plain ``up`` starts the sandbox, the proxy and the controller service, not the demo;
- ``serve`` is healthy, published on the host's loopback only, and a client on the
  host drives a sandbox through it by the sandbox's compose name (no container IP,
  so it works the same on Docker Desktop); the agent's side cannot reach it;
- README's Python example runs as written from the host, through the published port, and
  prints ``succeeded``;
- the egress proxy is healthy and its denials are in ``docker compose logs egress``;
- each image carries its OCI labels and version tag, and the Python packages
  installed in the sandbox and controller images are exactly their lock files;
- a regular (non-editable) install finds the seccomp profile without
  ``DESKPOD_SECCOMP_PROFILE``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from deskpod import ControllerClient, __version__
from deskpod.service.messages import ServiceFinished, ServiceObservation
from deskpod.settings import get_settings
from deskpod_stack import CONTROLLER_IMAGE, DEMO_IMAGE, EGRESS_IMAGE, HOSTGUARD_IMAGE, ROOT, SANDBOX_IMAGE, Stack

pytestmark = pytest.mark.integration

HEALTHY_TIMEOUT_S = 120.0


def wait_for_health(stack: Stack, service: str, timeout_s: float = HEALTHY_TIMEOUT_S) -> None:
    """Wait until Docker reports ``service``'s container healthy."""
    deadline = time.monotonic() + timeout_s
    status = ""
    while time.monotonic() < deadline:
        c = stack.container(service)
        c.reload()
        status = c.attrs["State"].get("Health", {}).get("Status", "none")
        if status == "healthy":
            return
        time.sleep(1)
    logs = stack.container(service).logs(tail=40).decode(errors="replace")
    raise AssertionError(f"{service} is {status} after {timeout_s:.0f} s; logs:\n{logs}")


@pytest.fixture(scope="module")
def plain_up(stack: Stack) -> dict[str, Any]:
    """``up -d`` without naming services, on the running stack, as ``docker compose up`` does."""
    before = stack.container("sandbox").id
    stack.run_compose("up", "-d")
    wait_for_health(stack, "serve")
    running = {c.labels["com.docker.compose.service"] for c in stack.docker.containers.list(
        filters={"label": f"com.docker.compose.project={stack.project}"})}
    return {"sandbox_before": before, "running": running}


def test_plain_up_starts_sandbox_proxy_and_serve_and_not_the_demo_controller(stack: Stack, plain_up: dict) -> None:
    assert {"egress", "sandbox", "workspace", "serve"} <= plain_up["running"]
    assert "controller" not in plain_up["running"]
    assert stack.container("sandbox").id == plain_up["sandbox_before"], "up must not recreate the running sandbox"


def test_serve_is_published_on_the_hosts_loopback_only(stack: Stack, plain_up: dict) -> None:
    serve = stack.container("serve")
    serve.reload()
    bindings = serve.attrs["NetworkSettings"]["Ports"]["8766/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": stack.env["DESKPOD_SERVE_PORT"]}]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{stack.env['DESKPOD_SERVE_PORT']}/healthz", timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read())["ok"] is True


def test_a_client_on_the_host_drives_the_sandbox_through_the_published_port(stack: Stack, plain_up: dict) -> None:
    """The documented way in from the Docker host: the loopback port, and the sandbox named
    as the controller service reaches it (``ws://sandbox:8765/v1/ws``)."""

    async def body() -> Any:
        url = f"ws://127.0.0.1:{stack.env['DESKPOD_SERVE_PORT']}/v1/controller"
        async with await ControllerClient.connect(url, stack.env["DESKPOD_SERVE_TOKEN"]) as client:
            task = {"name": "from-the-host", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                    "success": {"timeout_s": 10, "url_matches": "search\\?q=penguin",
                                "page_text_contains": "penguin"}}
            session = (await client.open("ws://sandbox:8765/v1/ws", stack.token, task)).session
            ready = await client.ready(session)
            step = await client.submit(session, [
                {"type": "click", "x": 640, "y": 400}, {"type": "type", "text": "penguin"},
                {"type": "keypress", "keys": ["ENTER"]}, {"type": "wait_for", "url_matches": "penguin", "timeout_s": 15}])
            summary = step.result if isinstance(step, ServiceFinished) else await client.finish(session, "searched")
            return ready, summary

    try:
        ready, summary = asyncio.run(asyncio.wait_for(body(), 150))
    finally:
        stack.sync_token()  # the session's reset rotated it
    assert isinstance(ready, ServiceObservation) and ready.observation.url == "http://demo.test/"
    assert summary.status == "succeeded", summary
    assert summary.url == "http://demo.test/search?q=penguin"


def test_the_readme_example_runs_on_the_host_against_the_stack(stack: Stack, plain_up: dict, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """README's Python example, unchanged, run from a folder holding the stack's ``.env`` as
    ``scripts/up.sh`` writes it (its published port, its tokens) and nothing of the stack in the
    environment: ``attach()`` finds the service from the file alone."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.S | re.M)
    assert len(blocks) == 1, "README holds one Python example"
    (tmp_path / ".env").write_text("".join(f"{name}={stack.env[name]}\n" for name in (
        "DESKPOD_TOKEN", "DESKPOD_SERVE_TOKEN", "DESKPOD_SERVE_PORT")), encoding="utf-8")
    for name in ("DESKPOD_TOKEN", "DESKPOD_SERVE_TOKEN", "DESKPOD_SERVE_PORT", "DESKPOD_STACK_ENV"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    try:
        exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme_example"})  # it calls asyncio.run itself
    finally:
        get_settings.cache_clear()
        stack.sync_token()  # the session's reset rotated it
    assert capsys.readouterr().out.strip() == "succeeded"


def test_the_agents_side_cannot_reach_the_controller_service(stack: Stack, plain_up: dict) -> None:
    """From the sandbox and from the workspace container (where agent commands run),
    serve's port is closed on sandbox_net: it listens only on its `outside` address."""
    probe = r"""
import json, socket
from concurrent.futures import ThreadPoolExecutor
def attempt(host):
    try:
        socket.create_connection((host, 8766), timeout=5).close()
        return 'connected'
    except OSError as e:
        return f'error: {e}'
hosts = ('serve', 'deskpod-serve')
with ThreadPoolExecutor(len(hosts)) as pool:
    print(json.dumps(dict(zip(hosts, pool.map(attempt, hosts)))))
"""
    # Each attempt waits out its timeout: all four run at once.
    places = (("sandbox", None), ("workspace", "1001"))
    with ThreadPoolExecutor(len(places)) as pool:
        results = list(pool.map(lambda place: stack.exec_python(place[0], probe, user=place[1]), places))
    for (service, _), result in zip(places, results, strict=True):
        assert all(v.startswith("error") for v in result.values()), (service, result)


def test_the_egress_proxy_is_healthy_and_logs_denials_to_compose_logs(stack: Stack) -> None:
    wait_for_health(stack, "egress")
    code = r"""
import json, urllib.request, urllib.error
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://egress:3128'}))
try:
    status = proxy.open('http://blocked.test/denied-path-for-the-log', timeout=10).status
except urllib.error.HTTPError as e:
    status = e.code
print(json.dumps(status))
"""
    assert stack.exec_python("sandbox", code) == 403
    deadline = time.monotonic() + 30
    logs = ""
    while time.monotonic() < deadline:
        logs = stack.run_compose("logs", "--no-color", "egress").stdout
        if "denied-path-for-the-log" in logs:
            break
        time.sleep(1)
    line = next((x for x in logs.splitlines() if "denied-path-for-the-log" in x), "")
    assert "TCP_DENIED/403" in line and "http://blocked.test/" in line, logs[-3000:]
    assert "healthcheck.invalid" not in logs, "the health check's own requests stay out of the log"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"TZ": "UTC", "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.mark.parametrize("image", [SANDBOX_IMAGE, EGRESS_IMAGE, DEMO_IMAGE, HOSTGUARD_IMAGE, CONTROLLER_IMAGE])
def test_every_image_carries_its_oci_labels(stack: Stack, image: str) -> None:
    labels = stack.docker.images.get(image).labels
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.title"].startswith("deskpod ")
    # The commit checked out when compose built it (scripts/compose.sh), and that commit's time.
    revision = labels["org.opencontainers.image.revision"]
    assert re.fullmatch(r"[0-9a-f]{40}", revision) and git("cat-file", "-t", revision) == "commit", revision
    assert labels["org.opencontainers.image.created"] == git(
        "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", revision)
    assert labels["org.opencontainers.image.source"]
    assert labels["org.opencontainers.image.base.name"].startswith("debian:bookworm-slim")


def lock_pins(name: str) -> dict[str, str]:
    """``{normalized name: version}`` of requirements/``name``."""
    text = (ROOT / "requirements" / name).read_text()
    return {re.sub(r"[-_.]+", "-", m[1]).lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


INSTALLED = r"""
import importlib.metadata, json, re
print(json.dumps({re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version
                  for d in importlib.metadata.distributions()}))
"""


@pytest.mark.parametrize("image, lock", [(SANDBOX_IMAGE, "sandbox.txt"), (CONTROLLER_IMAGE, "controller.txt")])
def test_the_images_python_packages_are_exactly_the_lock(stack: Stack, image: str, lock: str) -> None:
    """Built from the lock with --require-hashes --no-deps: nothing more, nothing less, no
    other version (pip itself comes with the venv, deskpod is the package)."""
    out = stack.docker.containers.run(image, ["python", "-c", INSTALLED], entrypoint=[], remove=True, user="1000")
    installed = json.loads(out)
    assert installed.pop("deskpod") == __version__
    installed.pop("pip")
    assert installed == lock_pins(lock)


def test_a_regular_install_finds_the_seccomp_profile_without_configuration(stack: Stack) -> None:
    """The controller image installs the package non-editable (site-packages): the pool
    backend's default profile is there, not in a checkout."""
    code = ("import json; from deskpod.backend.config import DockerBackendConfig; p = DockerBackendConfig().seccomp_profile;"
            " print(json.dumps([p, json.load(open(p))['defaultAction']]))")
    out = stack.docker.containers.run(CONTROLLER_IMAGE, ["python", "-c", code], entrypoint=[], remove=True,
                                      user="1000", environment={})
    path, action = json.loads(out)
    assert path.startswith("/opt/deskpod/venv/lib/") and path.endswith("/site-packages/deskpod/seccomp/sandbox.json")
    assert action == "SCMP_ACT_ERRNO"

