"""Running the audit: find the sandbox container, choose the probe's targets, and gather
every check into one :class:`~deskpod.audit.report.AuditReport` (:func:`audit_sandbox`)."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from deskpod.audit.config_rules import config_checks
from deskpod.audit.engine import _client, _docker_errors
from deskpod.audit.host import PROBE_TIMEOUT_S, audit_host_unreachable
from deskpod.audit.inside_rules import X_AUTHORITIES, X_TCP_PORT, inside_checks, untrusted_checks
from deskpod.audit.reset_rules import reset_checks, reset_wipe_folders
from deskpod.audit.report import AuditReport, Check
from deskpod.audit.zone import _zone_audit
from deskpod.audit.probes import PROBE_SOURCE
from deskpod.audit.untrusted_probe import UNTRUSTED_PROBE_SOURCE
from deskpod.errors import AuditError

log = logging.getLogger(__name__)

__all__ = [
    "audit_sandbox",
    "find_sandbox",
    "probe_untrusted",
]

def find_sandbox(client: Any | None = None, *, project: str | None = None) -> Any:
    """Find the running sandbox container of a compose project by its labels.

    Args:
        client: a ``docker.DockerClient``; ``None`` connects with ``docker.from_env()``.
        project: the compose project name; ``None`` accepts any project
            (``$COMPOSE_PROJECT_NAME`` when set).

    Returns:
        The ``docker.models.containers.Container`` of the ``sandbox`` service.

    Raises:
        AuditError: Docker is unreachable, no running sandbox was found, or several
            were and none was named.
    """
    client = _client(client)
    project = project or os.environ.get("COMPOSE_PROJECT_NAME") or None
    labels = ["com.docker.compose.service=sandbox"]
    if project:
        labels.append(f"com.docker.compose.project={project}")
    with _docker_errors("listing containers"):
        found = client.containers.list(filters={"label": labels, "status": "running"})
    if not found:
        raise AuditError("no running sandbox container found (compose service 'sandbox'"
                         + (f", project {project!r})" if project else ")"), detail={"reason": "not_found"})
    if len(found) > 1:
        names = sorted(c.name for c in found)
        raise AuditError(f"several sandboxes are running ({', '.join(names)}): name one, or pass --project",
                         detail={"reason": "ambiguous", "candidates": names})
    return found[0]


def _probe_params(client: Any, attrs: dict[str, Any], project: str | None) -> dict[str, Any]:
    """Choose the probe's targets from the project's own containers (never public addresses)."""
    own_nets: dict[str, Any] = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    own_net_ids = {v.get("NetworkID") for v in own_nets.values()}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    project = project or labels.get("com.docker.compose.project")
    peers: list[Any] = []
    if project:
        peers = client.containers.list(filters={"label": f"com.docker.compose.project={project}"})
    tcp: list[list[Any]] = []
    udp: list[list[Any]] = []
    icmp: list[list[Any]] = []
    far_names: set[str] = set()
    near_names: set[str] = set()
    ip_literal = None
    allowed_domain = None
    for peer in peers:
        if peer.id == attrs.get("Id"):
            continue
        pattrs = peer.attrs
        service = (pattrs.get("Config") or {}).get("Labels", {}).get("com.docker.compose.service", peer.name)
        ports = {80, 3128}
        for spec in (pattrs.get("Config") or {}).get("ExposedPorts") or {}:
            port, _, proto = str(spec).partition("/")
            if proto == "tcp" and port.isdigit():
                ports.add(int(port))
        if service == "egress" and allowed_domain is None:
            for e in (pattrs.get("Config") or {}).get("Env") or []:
                if str(e).startswith("DESKPOD_EGRESS_ALLOWLIST="):
                    domains = str(e).split("=", 1)[1].replace(",", " ").split()
                    allowed_domain = domains[0].lstrip(".") if domains else None
        for net in ((pattrs.get("NetworkSettings") or {}).get("Networks") or {}).values():
            aliases = [a for a in net.get("Aliases") or [] if a and not a.startswith(peer.id[:12])]
            if net.get("NetworkID") in own_net_ids:
                near_names.update(aliases + [service])
                continue
            far_names.update(aliases)
            ip = net.get("IPAddress")
            if not ip:
                continue
            ip_literal = ip_literal or ip
            label = f"{service}@{net.get('NetworkID', '')[:12]}"
            tcp.extend([ip, p, label] for p in sorted(ports))
            udp.append([ip, 53, label])
            icmp.append([ip, 0, label])
    proxy = None
    for e in (attrs.get("Config") or {}).get("Env") or []:
        key, _, value = str(e).partition("=")
        if key in ("HTTP_PROXY", "http_proxy") and value.startswith("http://"):
            hostport = value[len("http://"):].split("/", 1)[0]
            host, _, port = hostport.rpartition(":")
            proxy = [host or hostport, int(port) if port.isdigit() else 3128]
            break
    return {
        "tcp": tcp[:48], "udp": udp[:16], "icmp": icmp[:16],
        "dns_names": sorted(far_names - near_names)[:16],
        "proxy": proxy, "allowed_domain": allowed_domain, "ip_literal": ip_literal,
        "timeout_s": PROBE_TIMEOUT_S, "x_tcp_port": X_TCP_PORT,
        "x_authorities": [list(entry) for entry in X_AUTHORITIES],
    }


def probe_untrusted(container: Any, authorities: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """Run the untrusted-client probe (:mod:`deskpod.audit.untrusted_probe`) in ``container`` (a
    docker ``Container``), as its user.

    Args:
        container: the sandbox container.
        authorities: ``(authority file, display number)`` of each X server to try;
            ``None``: :data:`~deskpod.audit.inside_rules.X_AUTHORITIES`.

    Returns:
        The probe's facts; ``{}`` when its output is not a JSON object.

    Raises:
        AuditError: Docker could not run it.
    """
    params = json.dumps([list(a) for a in (X_AUTHORITIES if authorities is None else authorities)])
    with _docker_errors(f"running the untrusted-client probe in {container.name}"):
        result = container.exec_run(["python3", "-c", UNTRUSTED_PROBE_SOURCE, params], demux=True)
    try:
        facts = json.loads(((result.output[0] if isinstance(result.output, tuple) else result.output)
                            or b"").decode())
    except ValueError:
        return {}
    return facts if isinstance(facts, dict) else {}


def audit_sandbox(sandbox: str | None = None, *, project: str | None = None, client: Any | None = None) -> AuditReport:
    """Audit a running sandbox container.

    Args:
        sandbox: container name or id; ``None`` finds the compose project's
            sandbox service by label (:func:`find_sandbox`).
        project: the compose project whose other containers are the targets of the
            egress probes; ``None``: the sandbox's own compose label.
        client: a ``docker.DockerClient``; ``None`` connects with ``docker.from_env()``.

    Returns:
        The :class:`AuditReport`; ``report.ok`` is False when any check failed.

    Raises:
        AuditError: Docker is unreachable, the container does not exist or is not
            running, or the probe could not be run at all.
    """
    client = _client(client)
    if sandbox is None:
        container = find_sandbox(client, project=project)
    else:
        with _docker_errors(f"container {sandbox!r}"):
            container = client.containers.get(sandbox)
    with _docker_errors(f"inspecting {container.name}"):
        container.reload()
        attrs: dict[str, Any] = container.attrs
        if not (attrs.get("State") or {}).get("Running"):
            raise AuditError(f"container {container.name} is not running", detail={"reason": "not_running"})
        networks = {}
        for name, net in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).items():
            networks[name] = client.networks.get(net.get("NetworkID") or name).attrs
        params = _probe_params(client, attrs, project)
    report = AuditReport(container.name, container.id, str((attrs.get("Config") or {}).get("Image", "")))
    report.checks.extend(config_checks(attrs, networks))
    report.checks.append(audit_host_unreachable(container, client))
    log.info("probing %s: %d TCP targets, proxy %s", container.name, len(params["tcp"]), params["proxy"])
    with _docker_errors(f"running the probe in {container.name}"):
        result = container.exec_run(["python3", "-c", PROBE_SOURCE, json.dumps(params)], demux=True)
    stdout, stderr = result.output if isinstance(result.output, tuple) else (result.output, b"")
    try:
        facts = json.loads((stdout or b"").decode())
        if not isinstance(facts, dict):
            raise ValueError("not an object")
    except ValueError:
        tail = (stderr or stdout or b"").decode(errors="replace")[-300:]
        report.checks.append(Check("probe", "the inside probe ran", "fail",
                                   f"exit {result.exit_code}: {tail.strip()}", "inside"))
        return report
    declared = list(((attrs.get("HostConfig") or {}).get("Tmpfs") or {}).keys())
    report.checks.extend(inside_checks(facts, declared))
    report.checks.extend(untrusted_checks(probe_untrusted(container)))
    report.checks.extend(reset_checks(facts, reset_wipe_folders((attrs.get("Config") or {}).get("Env") or [])))
    report.checks.extend(_zone_audit(client, attrs))
    return report
