"""The host guard: the host firewall rule that keeps a sandbox network off the Docker host.

Docker 20.10 gives every bridge network, ``internal: true`` ones included, a gateway
address on the host, and a host whose ``INPUT`` policy is ``ACCEPT`` answers the
sandbox on it (and on every other host address) for any service bound to
``0.0.0.0``. The guard inserts, first in ``INPUT``::

    -i BRIDGE -m conntrack --ctstate NEW,INVALID -m comment --comment deskpod-hostguard:BRIDGE -j DROP

for IPv4 and IPv6, so nothing on the bridge can open a connection to the host,
while traffic across the bridge (sandbox → egress proxy) and the host's own
connections to the sandbox (their replies are ``ESTABLISHED``) are untouched.

The rule is installed by a one-shot container of the ``deskpod/hostguard`` image
(``images/hostguard/hostguard.sh``): host networking, only ``CAP_NET_ADMIN``
(``CAP_NET_RAW`` and the host's ``/run/xtables.lock`` too where Docker uses
iptables-legacy), read-only root. compose.yaml runs it as the ``hostguard``
service; :class:`~deskpod.backend.docker_backend.DockerBackend` runs it through
the docker SDK with :func:`run_guard` for each slot. Bridge names are fixed
(``com.docker.network.bridge.name``) so the rule can name them:
:func:`project_bridge_name` for a compose project, :func:`sandbox_bridge_name` for
a backend slot.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from deskpod import __version__
from deskpod.errors import HostFirewallError

__all__ = [
    "BRIDGE_NAME_OPTION",
    "GUARD_TIMEOUT_S",
    "GuardAction",
    "HOSTGUARD_IMAGE",
    "IptablesMode",
    "MAX_BRIDGE_NAME_CHARS",
    "RULE_TAG",
    "guard_container_kwargs",
    "project_bridge_name",
    "run_guard",
    "sandbox_bridge_name",
]

log = logging.getLogger(__name__)

HOSTGUARD_IMAGE = f"deskpod/hostguard:{__version__}"
"""Default host guard image (images/hostguard/; compose.yaml's tag)."""

RULE_TAG = "deskpod-hostguard"
"""Prefix of the rule's ``-m comment``: ``deskpod-hostguard:BRIDGE``."""

BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
"""The bridge driver option that fixes a network's Linux bridge name."""

MAX_BRIDGE_NAME_CHARS = 15
"""Longest Linux interface name (IFNAMSIZ - 1)."""

GUARD_TIMEOUT_S = 60.0
"""How long one guard run may take, seconds (it takes well under one)."""

IptablesMode = Literal["auto", "nft", "legacy"]
"""Which iptables the guard uses: ``auto`` (where Docker's chains are), ``nft`` or ``legacy``."""

GuardAction = Literal["install", "remove", "check"]
"""What the guard does with each bridge's rule."""

_BRIDGE_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,14}$")
_XTABLES_LOCK = "/run/xtables.lock"


def _normalise_project(project: str) -> str:
    """Compose's normalisation of a project name: lower case, ``[a-z0-9_-]`` only."""
    return re.sub(r"[^a-z0-9_-]", "", project.lower())


def project_bridge_name(project: str) -> str:
    """The bridge name of a compose project's ``sandbox_net``: ``dp-`` and 12 hex digits.

    ``scripts/compose.sh`` computes the same name (SHA-256 of the normalised
    project name), so two stacks on one host never share a bridge or a rule.

    Args:
        project: the compose project name.

    Returns:
        A 15-character interface name.
    """
    return "dp-" + hashlib.sha256(_normalise_project(project).encode()).hexdigest()[:12]


def sandbox_bridge_name(sandbox_id: str) -> str:
    """The bridge name of a backend slot's network: ``dps-`` and the sandbox id.

    Args:
        sandbox_id: the sandbox id (lowercase letters and digits); an id longer than
            11 characters is replaced by 11 hex digits of its SHA-256.

    Returns:
        An interface name of at most 15 characters.
    """
    tail = sandbox_id if len(sandbox_id) <= 11 else hashlib.sha256(sandbox_id.encode()).hexdigest()[:11]
    return f"dps-{tail}"


def guard_container_kwargs(image: str, action: GuardAction, bridges: Sequence[str], *,
                           iptables: IptablesMode = "auto") -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for one guard run.

    Host networking, ``cap_drop: ALL`` plus ``NET_ADMIN`` (and, for
    ``iptables="legacy"``, ``NET_RAW`` and a bind mount of the host's
    ``/run/xtables.lock``, which dockerd holds while it edits legacy tables),
    no-new-privileges, read-only root, small pids and memory limits.

    Args:
        image: the host guard image.
        action: ``install``, ``remove`` or ``check``.
        bridges: the bridge names (each at most 15 characters).
        iptables: the guard's ``DESKPOD_HOST_IPTABLES``.

    Returns:
        The keyword arguments (without ``name`` and ``labels``).

    Raises:
        HostFirewallError: a bridge name is not a valid interface name.
    """
    bad = [b for b in bridges if not _BRIDGE_RE.match(b)]
    if bad or not bridges:
        raise HostFirewallError(f"invalid bridge names for the host guard: {bad or 'none given'}",
                                detail={"reason": "config"})
    caps = ["NET_ADMIN", "NET_RAW"] if iptables == "legacy" else ["NET_ADMIN"]
    kwargs: dict[str, Any] = {
        "image": image,
        "command": [action, *bridges],
        "environment": {"DESKPOD_HOST_FIREWALL": "on", "DESKPOD_HOST_IPTABLES": iptables},
        "network_mode": "host",
        "cap_drop": ["ALL"],
        "cap_add": caps,
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
        "pids_limit": 32,
        "mem_limit": 64 * 2**20,
    }
    if iptables == "legacy":
        import docker.types

        kwargs["mounts"] = [docker.types.Mount(_XTABLES_LOCK, _XTABLES_LOCK, type="bind")]
    return kwargs


def run_guard(client: Any, image: str, action: GuardAction, bridges: Sequence[str], *, name: str,
              labels: Mapping[str, str], iptables: IptablesMode = "auto",
              timeout_s: float = GUARD_TIMEOUT_S) -> str:
    """Run the host guard once through the docker SDK and remove its container.

    Args:
        client: a ``docker.DockerClient``.
        image: the host guard image.
        action: ``install``, ``remove`` or ``check``.
        bridges: the bridge names.
        name: the guard container's name.
        labels: its labels (the sandbox's, so a leftover is removed with it).
        iptables: the guard's ``DESKPOD_HOST_IPTABLES``.
        timeout_s: how long to wait for it, seconds.

    Returns:
        The guard's output (one line per bridge and address family).

    Raises:
        HostFirewallError: the image is missing, the engine refused, the guard
            did not finish in ``timeout_s`` or exited non-zero (``detail["output"]``
            holds its last lines; ``detail["exit_code"]`` its status).
    """
    import docker.errors

    kwargs = guard_container_kwargs(image, action, bridges, iptables=iptables)
    container = None
    try:
        container = client.containers.create(name=name, labels=dict(labels), **kwargs)
        container.start()
        result = container.wait(timeout=timeout_s)
        output = bytes(container.logs(stdout=True, stderr=True)).decode(errors="replace").strip()
    except docker.errors.ImageNotFound as exc:
        raise HostFirewallError(
            f"host guard image {image} not found: build it (docker build -t {image} images/hostguard) "
            "or opt out with DESKPOD_HOST_FIREWALL=off", detail={"reason": "host_firewall", "image": image},
        ) from exc
    except (docker.errors.DockerException, OSError) as exc:
        raise HostFirewallError(f"host guard {action} {' '.join(bridges)}: {exc}",
                                detail={"reason": "host_firewall"}) from exc
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except (docker.errors.DockerException, OSError) as exc:
                log.warning("removing host guard container %s: %s", name, exc)
    code = int((result or {}).get("StatusCode", -1))
    if code != 0:
        raise HostFirewallError(
            f"host guard {action} {' '.join(bridges)} failed (exit {code}): {output[-1000:]}",
            detail={"reason": "host_firewall", "exit_code": code, "output": output[-2000:]},
        )
    log.info("host guard %s %s: %s", action, " ".join(bridges), output.replace("\n", "; "))
    return output
