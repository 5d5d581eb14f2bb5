"""The agent's zone: the workspace container that belongs to a sandbox, its configuration,
the zone probe run there as the agent's uid, the reaping of hidden processes, and each
container's tmpfs against its memory limit."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from typing import Any

from deskpod.audit.config_rules import config_checks, memory_volumes_as_tmpfs
from deskpod.audit.engine import _docker_errors, mounted_volumes
from deskpod.audit.host import audit_host_unreachable
from deskpod.audit.gate_probe import FLOOD_WAIT_S, GATE_PROBE_SOURCE
from deskpod.audit.inside_rules import X_TCP_PORT
from deskpod.audit.report import Check, _check, _hex, _runtime_transient
from deskpod.audit.probes import GRANT_PROBE_SOURCE, ZONE_PROBE_SOURCE
from deskpod.audit.reap_probe import REAP_PROBE_SOURCE, RUNNER_CALL_SOURCE

__all__ = [
    "AGENT_UID",
    "GATE_FLOOD_CONNECTIONS",
    "MIN_PROCESS_MEMORY_BYTES",
    "MIN_PROCESS_MEMORY_FRACTION",
    "X_GATE_MAX_CONNECTIONS",
    "ZONE_CHECK_IDS",
    "display_gate_checks",
    "find_workspace",
    "grant_check",
    "probe_display_gate",
    "reaped_check",
    "tmpfs_within_memory",
    "workspace_checks",
    "zone_probe_checks",
]

AGENT_UID = "1001"
"""The uid agent commands run as, in the workspace container."""

MIN_PROCESS_MEMORY_BYTES = 512 * 2**20
"""Memory a container's processes must keep when every tmpfs mount and /dev/shm is full (512 MiB)."""

MIN_PROCESS_MEMORY_FRACTION = 0.4
"""The share of its limit a smaller container (a dense pool's slot) must keep for its processes instead."""

ZONE_CHECK_IDS = frozenset({
    "workspace_container", "workspace_hardening", "workspace_own_namespaces", "workspace_mounts_declared",
    "workspace_networks", "workspace_processes_unprivileged", "agent_cannot_open_daemon_memory",
    "agent_processes_reaped", "tmpfs_within_memory", "workspace_host_unreachable",
    "workspace_proxy_needs_grant", "workspace_display_needs_grant", "workspace_display_connections_capped",
})
"""Every check of the agent's zone (all fail when the sandbox has no workspace container)."""

X_GATE_MAX_CONNECTIONS = 32
"""The most connections the display's port (the daemon's X gate) may hold at once: its
``MAX_GATE_CONNECTIONS`` (``deskpod.agentd.display.xgate``, which the audit does not import:
it loads python-xlib)."""

GATE_FLOOD_CONNECTIONS = X_GATE_MAX_CONNECTIONS + 16
"""How many idle connections the gate probe opens at once from the agent's zone."""

_WORKSPACE_MOUNTS = frozenset({"/workspace", "/tmp", "/home/agent"})
_DESKPOD_PROCESS = re.compile(r"deskpod\.agentd(\s|$)|Xvfb|openbox|chromium")


def _size_option(options: str) -> int | None:
    for opt in options.split(","):
        key, _, value = opt.partition("=")
        if key.strip() == "size":
            m = re.fullmatch(r"(\d+)([kmg]?)", value.strip().lower())
            if m:
                return int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2)]
    return None


def tmpfs_within_memory(containers: dict[str, dict[str, Any]]) -> Check:
    """Do every container's declared tmpfs sizes plus its /dev/shm leave at least
    :data:`MIN_PROCESS_MEMORY_BYTES` of its memory limit to its processes, or, in a
    container whose limit was sized for a dense pool (:mod:`deskpod.backend.memory`), at
    least :data:`MIN_PROCESS_MEMORY_FRACTION` of it?

    tmpfs pages are charged to the container's memory cgroup: if they could fill
    the limit, filling them would OOM-kill the container.

    Args:
        containers: inspect data by container name.
    """
    problems, parts = [], []
    for name, attrs in containers.items():
        host = attrs.get("HostConfig") or {}
        memory = int(host.get("Memory") or 0)
        sizes = {path: _size_option(str(opts)) for path, opts in (host.get("Tmpfs") or {}).items()}
        unsized = [p for p, v in sizes.items() if v is None]
        total = sum(v for v in sizes.values() if v) + int(host.get("ShmSize") or 0)
        parts.append(f"{name}: {total / 2**20:.0f} MiB of {memory / 2**20:.0f} MiB")
        if not memory:
            problems.append(f"{name}: no memory limit")
        elif unsized:
            problems.append(f"{name}: tmpfs without size {unsized}")
        elif total > memory - min(MIN_PROCESS_MEMORY_BYTES, memory * MIN_PROCESS_MEMORY_FRACTION):
            problems.append(f"{name}: tmpfs + shm {total / 2**20:.0f} MiB leave less than "
                            f"{MIN_PROCESS_MEMORY_BYTES / 2**20:.0f} MiB (or {MIN_PROCESS_MEMORY_FRACTION:.0%}) "
                            f"of {memory / 2**20:.0f} MiB")
    return _check("tmpfs_within_memory", "filling every tmpfs and /dev/shm leaves room below the memory limit",
                  bool(containers) and not problems, "; ".join(problems or parts))


def workspace_checks(workspace: dict[str, Any], sandbox: dict[str, Any],
                     networks: dict[str, dict[str, Any]]) -> list[Check]:
    """Judge the workspace container's configuration against the sandbox's.

    Args:
        workspace: the workspace container's inspect data.
        sandbox: the sandbox container's inspect data.
        networks: inspect data of the workspace container's networks, by name.
    """
    out = []
    failed = [c.id for c in config_checks(workspace, networks) if c.status == "fail"]
    out.append(_check("workspace_hardening", "the workspace container has the sandbox's hardening", not failed,
                      f"failed: {failed}" if failed else "every configuration check passes"))
    whost, shost = workspace.get("HostConfig") or {}, sandbox.get("HostConfig") or {}
    shared = []
    for key in ("PidMode", "IpcMode", "NetworkMode", "UTSMode"):
        for mine in (whost, shost):
            value = str(mine.get(key) or "")
            if value == "host" or value.startswith("container:"):
                shared.append(f"{key}={value}")
    wuser = str((workspace.get("Config") or {}).get("User") or "")
    suser = str((sandbox.get("Config") or {}).get("User") or "")
    own_uid = wuser.split(":")[0] == AGENT_UID and suser.split(":")[0] != AGENT_UID
    out.append(_check("workspace_own_namespaces", "agent commands run under another uid in their own PID and "
                      "IPC namespaces", not shared and own_uid and str(whost.get("IpcMode")) in ("private", "shareable"),
                      f"User={wuser} (sandbox {suser or 'image default'}), PidMode={whost.get('PidMode') or '(own)'}, "
                      f"IpcMode={whost.get('IpcMode')}; shared: {shared or 'none'}"))
    wmounts = list(workspace.get("Mounts") or [])
    smounts = list(sandbox.get("Mounts") or [])
    undeclared = [str(m.get("Destination")) for m in wmounts
                  if m.get("Type") != "tmpfs" or m.get("Destination") not in _WORKSPACE_MOUNTS]
    sources = {str(m.get("Source") or m.get("Name")) for m in smounts if m.get("Type") != "tmpfs"}
    common = [str(m.get("Destination")) for m in wmounts  # a memory-only volume is a mount to share too
              if (m.get("Type") != "tmpfs" or m.get("Name")) and str(m.get("Source") or m.get("Name")) in sources]
    out.append(_check("workspace_mounts_declared", "the workspace container shares no mount with the sandbox",
                      not undeclared and not common,
                      f"undeclared: {undeclared or 'none'}; shared with the sandbox: {common or 'none'}"))
    wnets = set((workspace.get("NetworkSettings") or {}).get("Networks") or {})
    snets = set((sandbox.get("NetworkSettings") or {}).get("Networks") or {})
    extra = sorted(wnets - snets)
    not_internal = sorted(n for n in wnets if not (networks.get(n) or {}).get("Internal"))
    out.append(_check("workspace_networks", "the workspace container is only on the sandbox's internal networks",
                      bool(wnets) and not extra and not not_internal,
                      f"networks={sorted(wnets)}; not the sandbox's: {extra or 'none'}; "
                      f"not internal: {not_internal or 'none'}"))
    return out


def zone_probe_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge the zone probe's facts (:data:`~deskpod.audit.probes.ZONE_PROBE_SOURCE`, run in the
    workspace container as uid 1001).

    ``agent_cannot_open_daemon_memory`` fails when a deskpod process (agentd, Xvfb,
    openbox, Chromium) is visible at all, or when the probe opened the memory or
    environment of a process that is not of its own zone (another uid, or the
    runner, PID 1). ``workspace_processes_unprivileged``: every process has
    CapEff 0 and none runs as root. The runtime's ``runc:[..]`` processes of a concurrent
    ``docker exec`` (the runner's health check) are not judged.
    """
    procs: list[dict[str, Any]] = [p for p in facts.get("processes") or [] if not _runtime_transient(p.get("name"))]
    deskpod = [f"{p.get('pid')}:{str(p.get('cmd'))[:60]}" for p in procs
               if _DESKPOD_PROCESS.search(str(p.get("cmd") or "")) and "deskpod.agentd.runner" not in str(p.get("cmd"))]
    foreign = [p for p in procs if p.get("pid") == 1 or str(p.get("uid")) != AGENT_UID]
    opened = [f"{p.get('pid')}:{'+'.join(p.get('opened') or [])}" for p in foreign if p.get("opened")]
    runner_seen = any(p.get("pid") == 1 for p in procs)
    out = [_check("agent_cannot_open_daemon_memory",
                  "agent code sees no deskpod process and opens no memory or environ outside its zone",
                  str(facts.get("uid")) == AGENT_UID and runner_seen and not deskpod and not opened,
                  f"as uid {facts.get('uid')}: {len(procs)} processes seen; deskpod processes: {deskpod or 'none'}; "
                  f"opened outside the zone: {opened or 'none'}", source="inside")]
    privileged = [f"{p.get('pid')}:CapEff={p.get('cap_eff')}" for p in procs
                  if p.get("cap_eff") not in (None, "") and _hex(str(p.get("cap_eff"))) != 0]
    root = [str(p.get("pid")) for p in procs if str(p.get("uid")) == "0"]
    out.append(_check("workspace_processes_unprivileged", "every process of the workspace container has CapEff 0",
                      bool(procs) and not privileged and not root,
                      f"{len(procs)} processes; with capabilities: {privileged or 'none'}; root: {root or 'none'}",
                      source="inside"))
    return out


def reaped_check(started: bool, leftover: list[str]) -> Check:
    """Judge ``agent_processes_reaped``: hidden processes started by one command (``started``)
    and still listed by ``docker top`` once it answered (``leftover``)."""
    return _check("agent_processes_reaped", "a hidden process (setsid, double fork, non-dumpable) and a pid "
                  "hopper are gone once their command has answered", started and not leftover,
                  ("the hidden processes did not start" if not started else
                   f"left running: {leftover[:5]}" if leftover else "none left (docker top)"), source="inside")


def grant_check(domain: str | None, facts: dict[str, Any]) -> Check:
    """Judge ``workspace_proxy_needs_grant``: an allowlisted ``domain`` through the egress
    proxy from the workspace container, as the agent, without a credential (``facts["none"]``:
    must be 407 or 403) and with a guessed one (``facts["guessed"]``: must be 403)."""
    none, guessed = facts.get("none"), facts.get("guessed")
    return _check("workspace_proxy_needs_grant", "the egress proxy refuses agent commands without a live "
                  "egress grant (network: true)", domain is not None and none in (403, 407) and guessed == 403,
                  f"{domain or '(no allowlisted domain to try)'}: no credential {none}, guessed credential {guessed}",
                  source="inside")


def display_gate_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge the gate probe's facts (:data:`~deskpod.audit.gate_probe.GATE_PROBE_SOURCE`, run in
    the workspace container as uid 1001 against the sandbox's display port, no grant live).

    ``workspace_display_needs_grant``: a setup without a cookie and one with a guessed cookie
    are both answered with a refusal (unreachable or accepted fails: the agent's zone reaches
    the display only through the gate, with a live grant's cookie).
    ``workspace_display_connections_capped``: of :data:`GATE_FLOOD_CONNECTIONS` idle
    connections, the port closed all but at most :data:`X_GATE_MAX_CONNECTIONS` at once, and
    it still answered a setup afterwards.

    Args:
        facts: the probe's JSON output; ``{}`` when it did not run.
    """
    answers = {k: str(facts.get(k, "not probed")) for k in ("no_cookie", "guessed_cookie", "after")}
    refused = all(answers[k].startswith("refused") for k in ("no_cookie", "guessed_cookie"))
    flood = facts.get("flood") or {}
    opened, closed = int(flood.get("opened") or 0), int(flood.get("closed") or 0)
    held = opened - closed
    capped = opened == GATE_FLOOD_CONNECTIONS and held <= X_GATE_MAX_CONNECTIONS and \
        answers["after"].startswith("refused")
    return [_check("workspace_display_needs_grant", "the display refuses agent commands without a live display "
                   f"grant's cookie (TCP :{X_TCP_PORT} from the workspace container)", refused,
                   f"no cookie: {answers['no_cookie'][:80]}; guessed cookie: {answers['guessed_cookie'][:80]}",
                   source="inside"),
            _check("workspace_display_connections_capped", "the display's port holds at most "
                   f"{X_GATE_MAX_CONNECTIONS} connections from the agent's zone and still answers",
                   capped, f"{opened} of {GATE_FLOOD_CONNECTIONS} idle connections opened, {held} held after "
                   f"{FLOOD_WAIT_S:g} s; then: {answers['after'][:80]}", source="inside")]


def probe_display_gate(workspace: Any, host: str) -> dict[str, Any]:
    """Run the gate probe in ``workspace`` (a docker ``Container``) as :data:`AGENT_UID` against
    ``host``:data:`~deskpod.audit.inside_rules.X_TCP_PORT`; ``{}`` when its output is not JSON.

    Raises:
        AuditError: Docker could not run it.
    """
    with _docker_errors(f"running the gate probe in {workspace.name}"):
        result = workspace.exec_run(["python3", "-c", GATE_PROBE_SOURCE, host, str(X_TCP_PORT),
                                     str(GATE_FLOOD_CONNECTIONS), str(FLOOD_WAIT_S)], user=AGENT_UID, demux=True)
    try:
        facts = json.loads(((result.output[0] if isinstance(result.output, tuple) else result.output)
                            or b"").decode())
    except ValueError:
        return {}
    return facts if isinstance(facts, dict) else {}


def _egress_domain(client: Any, sandbox_attrs: dict[str, Any]) -> str | None:
    """The first domain of the sandbox's egress proxy's allowlist (its compose project's
    ``egress`` service, or the slot's container of role ``egress``), or ``None``."""
    labels = (sandbox_attrs.get("Config") or {}).get("Labels") or {}
    if labels.get("com.docker.compose.project"):
        wanted = [f"com.docker.compose.project={labels['com.docker.compose.project']}",
                  "com.docker.compose.service=egress"]
    elif labels.get("deskpod.sandbox"):
        wanted = [f"deskpod.sandbox={labels['deskpod.sandbox']}", "deskpod.role=egress"]
    else:
        return None
    for container in client.containers.list(filters={"label": wanted, "status": "running"}):
        for entry in (container.attrs.get("Config") or {}).get("Env") or []:
            if str(entry).startswith("DESKPOD_EGRESS_ALLOWLIST="):
                domains = str(entry).split("=", 1)[1].replace(",", " ").split()
                return domains[0].lstrip(".") if domains else None
    return None


def find_workspace(client: Any, sandbox_attrs: dict[str, Any]) -> Any | None:
    """The workspace container that belongs to a sandbox: the ``workspace`` service of its
    compose project, or the container labelled with the same ``deskpod.sandbox`` id and
    role ``workspace`` (a pool slot); ``None`` when there is none."""
    labels = (sandbox_attrs.get("Config") or {}).get("Labels") or {}
    if labels.get("com.docker.compose.project"):
        wanted = [f"com.docker.compose.project={labels['com.docker.compose.project']}",
                  "com.docker.compose.service=workspace"]
    elif labels.get("deskpod.sandbox"):
        wanted = [f"deskpod.sandbox={labels['deskpod.sandbox']}", "deskpod.role=workspace"]
    else:
        return None
    found = client.containers.list(filters={"label": wanted, "status": "running"})
    return found[0] if len(found) == 1 else None


def _zone_audit(client: Any, sandbox_attrs: dict[str, Any]) -> list[Check]:
    """Every check of the agent's zone, against the live workspace container."""
    with _docker_errors("finding the workspace container"):
        workspace = find_workspace(client, sandbox_attrs)
    if workspace is None:
        detail = "no running workspace container belongs to this sandbox: agent commands share its zone"
        return [Check(i, "the agent's zone exists", "fail", detail, "config") for i in sorted(ZONE_CHECK_IDS)]
    from deskpod.agentd.runner_wire import RUNNER_PORT, RunnerOutput, parse_runner_reply
    from deskpod.protocol import ExecOutput

    out = [_check("workspace_container", "agent commands run in a workspace container of their own", True,
                  f"{workspace.name}")]
    with _docker_errors(f"inspecting {workspace.name}"):
        workspace.reload()
        wattrs: dict[str, Any] = memory_volumes_as_tmpfs(workspace.attrs, mounted_volumes(client, workspace.attrs))
        networks = {name: client.networks.get(net.get("NetworkID") or name).attrs
                    for name, net in ((wattrs.get("NetworkSettings") or {}).get("Networks") or {}).items()}
    out += workspace_checks(wattrs, sandbox_attrs, networks)
    sname = str(sandbox_attrs.get("Name", "sandbox")).lstrip("/")
    out.append(tmpfs_within_memory({sname: sandbox_attrs, workspace.name: wattrs}))
    with _docker_errors(f"running the zone probe in {workspace.name}"):
        result = workspace.exec_run(["python3", "-c", ZONE_PROBE_SOURCE], user=AGENT_UID, demux=True)
    stdout, stderr = result.output if isinstance(result.output, tuple) else (result.output, b"")
    try:
        out += zone_probe_checks(json.loads((stdout or b"").decode()))
    except ValueError:
        tail = (stderr or stdout or b"").decode(errors="replace")[-300:]
        out += [Check(i, "the zone probe ran", "fail", f"exit {result.exit_code}: {tail.strip()}", "inside")
                for i in ("agent_cannot_open_daemon_memory", "workspace_processes_unprivileged")]
    mark = f"deskpod-audit-{os.urandom(4).hex()}"
    addresses = [str(n.get("IPAddress")) for n in ((wattrs.get("NetworkSettings") or {}).get("Networks") or {}).values()
                 if n.get("IPAddress")]
    address = addresses[0] if addresses else ""
    started = False
    try:
        # From agentd's own container: the runner answers no other address (DESKPOD_RUNNER_CLIENT).
        with _docker_errors("asking the workspace runner from the sandbox container"):
            asked = client.containers.get(sandbox_attrs["Id"]).exec_run(
                ["python", "-c", RUNNER_CALL_SOURCE, str(address), str(RUNNER_PORT), REAP_PROBE_SOURCE, mark],
                demux=True)
        said, complaint = asked.output if isinstance(asked.output, tuple) else (asked.output, b"")
        if asked.exit_code != 0:
            raise ValueError((complaint or said or b"").decode(errors="replace").strip()[-300:])
        reply = parse_runner_reply((said or b"").strip())
        started = isinstance(reply, RunnerOutput) and isinstance(reply.output, ExecOutput) and \
            "hidden" in reply.output.stdout
        with _docker_errors(f"listing {workspace.name}'s processes"):
            top = workspace.top(ps_args="-eo pid,args")
        leftover = [" ".join(p)[:120] for p in top.get("Processes") or [] if mark in " ".join(p)]
    except (OSError, ValueError) as exc:
        leftover = [f"(the runner at {address}:{RUNNER_PORT} could not run the probe: {exc})"]
    out.append(reaped_check(started, leftover))
    with _docker_errors("finding the egress proxy"):
        domain = _egress_domain(client, sandbox_attrs)
    proxy = next((str(e).split("=", 1)[1] for e in (wattrs.get("Config") or {}).get("Env") or []
                  if str(e).startswith("HTTP_PROXY=")), "http://egress:3128")
    facts: dict[str, Any] = {}
    if domain is not None:
        with _docker_errors(f"running the grant probe in {workspace.name}"):
            result = workspace.exec_run(["python3", "-c", GRANT_PROBE_SOURCE, proxy, domain], user=AGENT_UID,
                                        demux=True)
        try:
            facts = json.loads(((result.output[0] if isinstance(result.output, tuple) else result.output)
                                or b"").decode())
        except ValueError:
            facts = {}
    out.append(grant_check(domain, facts))
    grant_host = next((str(e).split("=", 1)[1] for e in (sandbox_attrs.get("Config") or {}).get("Env") or []
                       if str(e).startswith("DESKPOD_DISPLAY_GRANT_HOST=")), "sandbox")
    out += display_gate_checks(probe_display_gate(workspace, grant_host))
    host = audit_host_unreachable(workspace, client)
    out.append(replace(host, id="workspace_host_unreachable",
                       title=f"{host.title} (from the workspace container, where agent commands run)"))
    return out
