"""The Docker host is unreachable from a sandbox.

On 55dbe26 a listener bound to ``0.0.0.0`` on the Docker host answered a compose or
pool sandbox over TCP, UDP and ICMP on every gateway address: Docker 20.10 gives
``internal: true`` networks a gateway on the host, whose INPUT policy is ACCEPT.
Here the host guard's rule is in place before the sandbox starts. Each test opens
a listener on this host (``deskpod.audit.host.HostListener``: TCP and UDP on every
address, ephemeral ports) and probes it from inside the sandbox, as the sandbox's
user, at every gateway address of its networks, over TCP, UDP and ICMP echo
(``audit_host_unreachable``). The opt-out stack and the opted-out slot show the
same probe reaching the host when the rule is missing, as it did on 55dbe26.
Probes only ever target addresses of this host.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from deskpod.audit import audit_host_unreachable
from deskpod.backend import DockerBackend, DockerBackendConfig, SandboxHandle
from deskpod.backend.config import LABEL_POOL
from deskpod.backend.hostguard import RULE_TAG, project_bridge_name, run_guard, sandbox_bridge_name
from deskpod.errors import HostFirewallError
from deskpod_stack import (
    EGRESS_IMAGE,
    HOSTGUARD_IMAGE,
    ROOT,
    SANDBOX_IMAGE,
    Stack,
    build_images,
    compose_command,
    start_stack,
    wait_healthy,
)

pytestmark = pytest.mark.integration

POOL = f"hf{os.getpid()}"
"""The pool label of every sandbox this module makes."""

REACH_EGRESS = r"""
import json, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://egress:3128"}))
try:
    status = opener.open("http://deskpod-hostguard.invalid/", timeout=10).status
except urllib.error.HTTPError as e:
    status = e.code
except OSError as e:
    status = f"error: {e}"
print(json.dumps(status))
"""
"""Ask the egress proxy for a name off its allowlist: its 403 proves the sandbox reaches it."""


def host_rules(bridge: str) -> list[str]:
    """The host's INPUT rules (IPv4 and IPv6) tagged for ``bridge``, read with the host's iptables."""
    found = []
    for tool in ("iptables", "ip6tables"):
        listing = subprocess.run([tool, "-w", "10", "-S", "INPUT"], capture_output=True, text=True, check=True)
        found += [f"{tool} {line}" for line in listing.stdout.splitlines() if f"{RULE_TAG}:{bridge}\"" in line
                  or line.endswith(f"{RULE_TAG}:{bridge} -j DROP")]
    return found


def egress_status(container: Any) -> Any:
    result = container.exec_run(["python3", "-c", REACH_EGRESS], demux=True)
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    return int(out) if out.strip().isdigit() else out.decode()


# --------------------------------------------------------------------------- compose


def test_the_compose_sandbox_reaches_nothing_on_the_host(stack: Stack) -> None:
    check = audit_host_unreachable(stack.container("sandbox"), stack.docker)
    assert check.status == "pass", check.detail
    gateway = stack.docker.networks.get(f"{stack.project}_sandbox_net").attrs["IPAM"]["Config"][0]["Gateway"]
    assert gateway in check.detail, check.detail


def test_the_compose_sandbox_still_reaches_egress_and_the_host_the_daemon(stack: Stack) -> None:
    wait_healthy(stack, timeout_s=10)  # GET /healthz from the host to the daemon's port
    assert egress_status(stack.container("sandbox")) == 403


def test_the_compose_bridge_has_its_name_and_one_rule_even_after_a_second_install(stack: Stack) -> None:
    net = stack.docker.networks.get(f"{stack.project}_sandbox_net").attrs
    assert net["Options"]["com.docker.network.bridge.name"] == stack.bridge == project_bridge_name(stack.project)
    assert len(host_rules(stack.bridge)) == 2, host_rules(stack.bridge)
    stack.run_compose("run", "--rm", "hostguard")
    stack.run_compose("run", "--rm", "hostguard", "install", stack.bridge)
    assert len(host_rules(stack.bridge)) == 2, host_rules(stack.bridge)
    assert stack.container("hostguard").attrs["State"]["ExitCode"] == 0


def test_compose_does_not_start_the_sandbox_when_the_guard_fails() -> None:
    client = docker.from_env()
    project = f"deskpodhgfail{os.getpid()}"
    env = dict(os.environ, DESKPOD_TOKEN="x" * 32, DESKPOD_TOKEN_SHA256="ab" * 32,
               DESKPOD_SANDBOX_BRIDGE=project_bridge_name(project), DESKPOD_HOST_IPTABLES="unknown")
    cmd = [*compose_command(), "-p", project, "-f", str(ROOT / "compose.yaml")]
    try:
        up = subprocess.run([*cmd, "up", "-d", "sandbox"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
        assert up.returncode != 0, up.stdout + up.stderr
        running = client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                            "com.docker.compose.service=sandbox"]})
        assert running == [], up.stdout + up.stderr
        guard = client.containers.list(all=True, filters={"label": [f"com.docker.compose.project={project}",
                                                                    "com.docker.compose.service=hostguard"]})
        assert guard and b"DESKPOD_HOST_IPTABLES must be" in guard[0].logs()
    finally:
        subprocess.run([*cmd, "down", "-v", "--remove-orphans", "-t", "1"], cwd=ROOT, env=env, capture_output=True,
                       timeout=300)


def test_compose_down_takes_the_projects_rule_off_the_host_and_leaves_nothing() -> None:
    """``scripts/compose.sh down`` (what the docs and ``scripts/up.sh`` tell users to run)
    removes the rule its ``up`` installed; before, every project left its rule behind."""
    client = docker.from_env()
    project = f"deskpodhgdown{os.getpid()}"
    bridge = project_bridge_name(project)
    env = dict(os.environ, DESKPOD_TOKEN="x" * 32, DESKPOD_TOKEN_SHA256="ab" * 32)
    env.pop("DESKPOD_SANDBOX_BRIDGE", None)  # compose.sh names the bridge after the project
    cmd = [*compose_command(), "-p", project, "-f", str(ROOT / "compose.yaml")]
    labels = {"label": f"com.docker.compose.project={project}"}
    try:
        up = subprocess.run([*cmd, "up", "hostguard"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        assert len(host_rules(bridge)) == 2, host_rules(bridge)
        down = subprocess.run([*cmd, "down", "-v", "-t", "1"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert host_rules(bridge) == []
        assert client.containers.list(all=True, filters=labels) == []
        assert client.networks.list(filters=labels) == [] and client.volumes.list(filters=labels) == []
    finally:
        run_guard(client, HOSTGUARD_IMAGE, "remove", [bridge], name=f"{project}-cleanup", labels={})
        subprocess.run([*cmd, "down", "-v", "-t", "1"], cwd=ROOT, env=env, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def open_stack() -> Iterator[Stack]:
    """A stack whose operator opted out of the host firewall (DESKPOD_HOST_FIREWALL=off)."""
    yield from start_stack("hfoff", "1280x800", DESKPOD_HOST_FIREWALL="off")


def test_the_opt_out_installs_no_rule_and_the_audit_fails_host_unreachable(open_stack: Stack) -> None:
    assert host_rules(open_stack.bridge) == []
    assert b"DESKPOD_HOST_FIREWALL=off" in open_stack.container("hostguard").logs()
    check = audit_host_unreachable(open_stack.container("sandbox"), open_stack.docker)
    assert check.status == "fail", check.detail
    # What 55dbe26 allowed: the host's listener answered on the gateway.
    assert "connected" in check.detail or "host saw" in check.detail, check.detail


# --------------------------------------------------------------------------- pool slots


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    c = docker.from_env()
    c.ping()
    build_images()
    try:
        yield c
    finally:
        for container in c.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
            container.remove(force=True, v=True)
        for net in c.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            net.remove()


def backend(client: Any, **overrides: Any) -> DockerBackend:
    values: dict[str, Any] = dict(name_prefix=f"deskpodhf{os.getpid()}", sandbox_image=SANDBOX_IMAGE,
                                  egress_image=EGRESS_IMAGE, hostguard_image=HOSTGUARD_IMAGE)
    config = DockerBackendConfig.from_env({}, **{**values, **overrides})
    return DockerBackend(config, client=client)


def test_a_pool_slot_cannot_reach_the_host_and_its_rule_goes_with_it(client: Any) -> None:
    be = backend(client)

    async def up() -> SandboxHandle:
        handle = await be.create(pool=POOL)
        await be.wait_ready(handle)  # the host reaches the daemon
        return handle

    handle = asyncio.run(up())
    bridge = sandbox_bridge_name(handle.id)
    try:
        net = client.networks.get(handle.network).attrs
        assert net["Options"]["com.docker.network.bridge.name"] == bridge
        assert len(host_rules(bridge)) == 2, host_rules(bridge)
        sandbox = client.containers.get(handle.container)
        check = audit_host_unreachable(sandbox, client)
        assert check.status == "pass", check.detail
        assert egress_status(sandbox) == 403
        run_guard(client, HOSTGUARD_IMAGE, "install", [bridge], name=f"hf{os.getpid()}-again", labels={})
        assert len(host_rules(bridge)) == 2, host_rules(bridge)
        # Two guards racing between their check and their insert leave a copy: the next install keeps one.
        subprocess.run(["iptables", "-w", "10", "-I", "INPUT", "-i", bridge, "-m", "conntrack", "--ctstate",
                        "NEW,INVALID", "-m", "comment", "--comment", f"{RULE_TAG}:{bridge}", "-j", "DROP"], check=True)
        assert len(host_rules(bridge)) == 3
        run_guard(client, HOSTGUARD_IMAGE, "install", [bridge], name=f"hf{os.getpid()}-dedupe", labels={})
        assert len(host_rules(bridge)) == 2, host_rules(bridge)
    finally:
        asyncio.run(be.destroy(handle.id))
    assert host_rules(bridge) == []
    assert client.networks.list(names=[handle.network]) == []


def test_a_slot_whose_guard_fails_is_refused_and_nothing_is_left(client: Any) -> None:
    be = backend(client, hostguard_image=f"deskpod/hostguard:missing{os.getpid()}")
    with pytest.raises(HostFirewallError) as failed:
        asyncio.run(be.create(pool=POOL))
    assert failed.value.detail["reason"] == "host_firewall"
    assert asyncio.run(be.list_ids(POOL)) == []


def test_an_opted_out_slot_starts_and_fails_host_unreachable(client: Any) -> None:
    be = backend(client, host_firewall=False)
    handle = asyncio.run(be.create(pool=POOL))
    try:
        assert host_rules(sandbox_bridge_name(handle.id)) == []
        check = audit_host_unreachable(client.containers.get(handle.container), client)
        assert check.status == "fail", check.detail
    finally:
        asyncio.run(be.destroy(handle.id))
