"""What the Docker backend and pool test modules share (``test_backend``, ``test_backend_pool``).

:func:`backend_env` builds the images with compose (cached), starts two test sites on a
network of its own (``allowed.test`` on the egress allowlist, ``blocked.test`` not), and
gives a :class:`DockerBackend` with that network as the egress proxies' outside network.
Every sandbox is created in the pool :data:`POOL` (label ``deskpod.pool``), and teardown
removes them all (containers, networks, volumes) by that label, and the test sites, also
when a test fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker

from deskpod.backend import DockerBackend, DockerBackendConfig, SandboxHandle
from deskpod.backend.config import LABEL_POOL, LABEL_SANDBOX
from deskpod.client import SandboxClient
from deskpod.errors import UnauthorizedError
from deskpod_stack import DEMO_IMAGE, EGRESS_IMAGE, HOSTGUARD_IMAGE, SANDBOX_IMAGE, build_images

__all__ = ["Env", "POOL", "PROJECT", "backend_env", "connect_ok", "leftovers", "workspace_name"]

PROJECT = f"deskpodbackend{os.getpid()}"
"""Compose-project label of the test sites, so ``deskpod audit`` probes them as the
sandbox's unreachable peers (it picks its targets by that label)."""
POOL = f"bt{os.getpid()}"
"""The pool label of every sandbox these modules make."""


@dataclass
class Env:
    """What the modules' tests share."""

    docker: Any
    backend: DockerBackend
    network: str
    site_ips: dict[str, str]


def leftovers(client: Any, sandbox_id: str) -> list[str]:
    """Names of containers, networks and volumes still labelled with ``sandbox_id``."""
    label = {"label": f"{LABEL_SANDBOX}={sandbox_id}"}
    return [c.name for c in client.containers.list(all=True, filters=label)] + [
        n.name for n in client.networks.list(filters=label)] + [v.name for v in client.volumes.list(filters=label)]


async def connect_ok(handle: SandboxHandle) -> bool:
    """True when the sandbox accepts the handle's token; False when it refuses it."""
    try:
        client = await SandboxClient.connect(handle.url, handle.token, timeout_s=10)
    except UnauthorizedError:
        return False
    await client.close()
    return True


def workspace_name(handle: SandboxHandle) -> str:
    """The slot's workspace container (named like its sandbox container)."""
    return handle.container.removesuffix("-sandbox") + "-workspace"


def backend_env() -> Iterator[Env]:
    """Build the images, start the two test sites on a network of their own and yield the
    :class:`Env`; afterwards remove every container and network of :data:`POOL` and the sites
    (also when a test failed). Each test module makes it its ``env`` fixture (module scope)."""
    client = docker.from_env()
    client.ping()
    build_images()
    network = f"{PROJECT}_outside"
    test_labels = {"com.docker.compose.project": PROJECT, "deskpod.test": "backend"}
    sites = []
    try:
        client.networks.create(network, driver="bridge", labels=test_labels)
        site_ips = {}
        for name in ("allowed", "blocked"):
            endpoint = client.api.create_endpoint_config(aliases=[f"{name}.test"])
            site = client.containers.create(
                DEMO_IMAGE, name=f"{PROJECT}_{name}", network=network,
                networking_config={network: endpoint}, read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                labels={**test_labels, "com.docker.compose.service": name},
            )
            sites.append(site)
            site.start()
            site.reload()
            site_ips[name] = site.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        # The images this checkout built (DESKPOD_SANDBOX_IMAGE, DESKPOD_EGRESS_IMAGE), not :latest.
        config = DockerBackendConfig.from_env(
            {}, outside_network=network, egress_allowlist="allowed.test", name_prefix=f"deskpodbt{os.getpid()}",
            sandbox_image=SANDBOX_IMAGE, egress_image=EGRESS_IMAGE, hostguard_image=HOSTGUARD_IMAGE)
        yield Env(client, DockerBackend(config, client=client), network, site_ips)
    finally:
        for container in client.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
            container.remove(force=True, v=True)
        for net in client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            net.remove()
        for volume in client.volumes.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            volume.remove(force=True)
        for site in sites:
            site.remove(force=True, v=True)
        for net in client.networks.list(filters={"label": f"com.docker.compose.project={PROJECT}"}):
            net.remove()
