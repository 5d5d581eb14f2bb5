"""``deskpod audit``: check a running sandbox container against deskpod's hardening claims.

Two sources of evidence, each judged by pure functions so the rules are testable
without Docker:

- **configuration** (:func:`config_checks`): the container's inspect data from the
  Docker API: capabilities, seccomp profile, read-only root, limits, privileged
  mode, host namespaces, devices, mounts, networks, published ports (the
  applicable CIS Docker Benchmark §5 checks, and stricter ones).
- **inside** (:func:`inside_checks`): facts gathered by a stdlib-only probe
  (:mod:`deskpod.audit_probe`) run in the container with ``exec_run`` and a fixed
  argv, as the container's user: every process's uid, capabilities,
  NoNewPrivs and seccomp mode; setuid/setgid files; the writable paths; blocked
  syscalls; direct TCP/UDP/ICMP egress to the project's other containers; DNS;
  the egress proxy's refusals; listening sockets; Chromium's renderer sandbox.
- **the agent's zone** (:func:`workspace_checks`, :func:`zone_probe_checks`,
  :func:`reaped_check`, :func:`tmpfs_within_memory`): the workspace container
  that belongs to the sandbox (same compose project, or same ``deskpod.sandbox``
  label): its configuration, a probe run there as uid 1001 that tries
  ``/proc/<pid>/mem`` and ``environ`` of every process it sees, a hidden process
  started through the workspace runner and looked for with ``docker top`` after
  the request, and each container's tmpfs + shm sizes against its memory limit.
- **the host** (:func:`audit_host_unreachable`, check ``host_unreachable``): a
  listener the audit opens on the Docker host, probed from inside the container
  (:data:`~deskpod.audit_probe.HOST_PROBE_SOURCE`) at every gateway address of its
  networks over TCP, UDP and ICMP echo; works on any container with ``python3``.

The probe only ever contacts the project's own containers and loopback.

Typical use::

    report = audit_sandbox("deskpod_sandbox_1")
    print(render_table(report))
    sys.exit(0 if report.ok else 1)
"""

from __future__ import annotations

import errno as _errno
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from deskpod.audit_probe import HOST_PROBE_SOURCE, PROBE_SOURCE, REAP_PROBE_SOURCE, ZONE_PROBE_SOURCE
from deskpod.errors import AuditError

__all__ = [
    "AGENT_UID",
    "AuditReport",
    "Check",
    "DAEMON_PORT",
    "DAEMON_PROCESSES",
    "HOST_ADDRESS_LIMIT",
    "HostListener",
    "MIN_PROCESS_MEMORY_BYTES",
    "PROBE_TIMEOUT_S",
    "SENSITIVE_HOST_PATHS",
    "Status",
    "X_TCP_PORT",
    "ZONE_CHECK_IDS",
    "audit_host_unreachable",
    "audit_sandbox",
    "config_checks",
    "display_checks",
    "dumpable_checks",
    "find_sandbox",
    "find_workspace",
    "host_gateways",
    "host_unreachable_check",
    "inside_checks",
    "local_ipv4_addresses",
    "reaped_check",
    "render_table",
    "tmpfs_within_memory",
    "workspace_checks",
    "zone_probe_checks",
]

log = logging.getLogger(__name__)

Status = Literal["pass", "fail", "warn"]

PROBE_TIMEOUT_S = 2.0
"""Per-connection timeout of the inside network probes, seconds."""

DAEMON_PORT = 8765
"""The daemon's port (agentd); with :data:`X_TCP_PORT`, the only ports the sandbox may
listen on, loopback included."""

X_TCP_PORT = 6099
"""The X server's TCP port (display ``:99``), the display grant's way in from the
workspace container; open only to clients with the cookie (``display_requires_cookie``)."""

DAEMON_PROCESSES = ("init", "agentd", "Xvfb", "openbox")
"""deskpod's own processes that must be non-dumpable (``daemon_processes_non_dumpable``):
the container's init (pid 1, tini: a reset never kills it), the daemon (``python -m
deskpod.agentd``) and the processes named ``Xvfb`` and ``openbox``."""

SENSITIVE_HOST_PATHS = (
    "/", "/boot", "/dev", "/etc", "/home", "/lib", "/proc", "/root", "/run", "/sys", "/usr",
    "/var/lib/docker", "/var/run", "/var/run/docker.sock", "/run/docker.sock",
)
"""Host paths that must never be mounted into a sandbox (CIS 5.5 and 5.31)."""

_ALLOWED_WRITABLE_EXTRA = {"/dev/shm", "/dev/mqueue"}
_DENIED_ERRNOS = {1, 38}  # EPERM, ENOSYS: refused by seccomp or the kernel
_LISTEN_OK_LOOPBACK = ("127.", "::1")
_DOCKER_DNS = "127.0.0.11"
"""Docker's embedded DNS server: dockerd listens there (TCP and UDP, a random port) in
every container on a user-defined network; no process of the sandbox owns it."""
_SYSCALL_TITLES = {
    "mount": "mount(2) is refused",
    "unshare_mount_ns": "unshare(CLONE_NEWNS) is refused",
    "unshare_user_and_mount_ns": "unshare(CLONE_NEWUSER|CLONE_NEWNS) is refused",
    "mount_via_user_ns": "no mount namespace or mount from inside a new user namespace either",
    "keyctl": "keyctl(2) is refused (kernel keyrings)",
    "bpf": "bpf(2) is refused",
    "io_uring_setup": "io_uring_setup(2) is refused",
    "ptrace_other_process": "ptrace(PTRACE_ATTACH) of another process is refused",
}
_PROXY_TITLES = {
    "non_allowlisted_http": "the egress proxy refuses a domain off the allowlist (HTTP)",
    "non_allowlisted_connect": "the egress proxy refuses a domain off the allowlist (CONNECT)",
    "ip_literal_http": "the egress proxy refuses an IP literal (HTTP)",
    "ip_literal_connect": "the egress proxy refuses an IP literal (CONNECT)",
    "odd_port_http": "the egress proxy refuses a port other than 80/443 (HTTP :8080)",
    "odd_port_connect": "the egress proxy refuses a port other than 443 (CONNECT :22)",
}


@dataclass(frozen=True)
class Check:
    """One hardening property and its verdict.

    Attributes:
        id: stable identifier, e.g. ``"cap_drop_all"``; tests and CI match on it.
        title: the property, as a short sentence.
        status: ``"pass"``, ``"fail"`` (the property does not hold) or ``"warn"``
            (could not be shown, or holds only partly; does not fail the audit).
        detail: the evidence, one line.
        source: ``"config"`` (Docker's view) or ``"inside"`` (the probe's view).
        cis: the CIS Docker Benchmark recommendation it covers, if any (``"5.3"``).
    """

    id: str
    title: str
    status: Status
    detail: str
    source: Literal["config", "inside"] = "config"
    cis: str | None = None


@dataclass
class AuditReport:
    """The result of auditing one container.

    Attributes:
        container: the container's name.
        container_id: its full id.
        image: its image reference.
        checks: every check, in report order.
    """

    container: str
    container_id: str
    image: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings do not fail the audit)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        """The failed checks."""
        return [c for c in self.checks if c.status == "fail"]

    def get(self, check_id: str) -> Check:
        """Return the check named ``check_id``.

        Raises:
            KeyError: no such check in this report.
        """
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (the ``--json`` output)."""
        return {
            "container": self.container,
            "container_id": self.container_id,
            "image": self.image,
            "ok": self.ok,
            "summary": {s: sum(c.status == s for c in self.checks) for s in ("pass", "fail", "warn")},
            "checks": [asdict(c) for c in self.checks],
        }


def _check(id: str, title: str, ok: bool, detail: str, *, source: Literal["config", "inside"] = "config",
           cis: str | None = None, warn: bool = False) -> Check:
    status: Status = "pass" if ok else ("warn" if warn else "fail")
    return Check(id, title, status, detail, source, cis)


# --------------------------------------------------------------------------- configuration


def _seccomp_profile(security_opt: list[str]) -> tuple[str, dict[str, Any] | None]:
    """Return ``(raw, parsed)`` for the seccomp entry of SecurityOpt (``("", None)`` if none)."""
    for opt in security_opt:
        if opt.startswith("seccomp"):
            raw = opt.split("=", 1)[1] if "=" in opt else opt.split(":", 1)[-1]
            try:
                parsed = json.loads(raw)
            except ValueError:
                return raw, None
            return raw, parsed if isinstance(parsed, dict) else None
    return "", None


def config_checks(attrs: dict[str, Any], networks: dict[str, dict[str, Any]]) -> list[Check]:
    """Judge a container's configuration.

    Args:
        attrs: the container's inspect data (``docker inspect``, one object).
        networks: inspect data of each network the container is attached to,
            keyed by network name.

    Returns:
        One :class:`Check` per property, in report order.
    """
    host: dict[str, Any] = attrs.get("HostConfig") or {}
    cfg: dict[str, Any] = attrs.get("Config") or {}
    out: list[Check] = []

    out.append(_check("not_privileged", "not run in privileged mode", host.get("Privileged") is False,
                      f"Privileged={host.get('Privileged')}", cis="5.4"))
    cap_drop = [str(c).upper().removeprefix("CAP_") for c in host.get("CapDrop") or []]
    cap_add = list(host.get("CapAdd") or [])
    out.append(_check("cap_drop_all", "every capability dropped (CapDrop ALL)", "ALL" in cap_drop,
                      f"CapDrop={host.get('CapDrop')}", cis="5.3"))
    out.append(_check("cap_add_none", "no capability added back", not cap_add, f"CapAdd={cap_add or None}",
                      cis="5.3"))

    opts = [str(o) for o in host.get("SecurityOpt") or []]
    nnp = any(o in ("no-new-privileges", "no-new-privileges:true", "no-new-privileges=true") for o in opts)
    out.append(_check("no_new_privileges", "no-new-privileges set", nnp,
                      "security_opt has no-new-privileges" if nnp else "no-new-privileges missing", cis="5.25"))
    raw, profile = _seccomp_profile(opts)
    if raw == "unconfined":
        ok, detail = False, "seccomp=unconfined: no syscall filter"
    elif not raw:
        ok, detail = False, "Docker's default profile, not deskpod's (seccomp/sandbox.json)"
    elif profile is None:
        ok, detail = False, "seccomp option present but not a JSON profile"
    else:
        default = str(profile.get("defaultAction", ""))
        deskpod_rules = sum(str(s.get("comment", "")).startswith("deskpod:") for s in profile.get("syscalls") or [])
        ok = default.startswith(("SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_TRAP"))
        detail = f"custom profile, defaultAction={default}, {deskpod_rules} deskpod rules"
    out.append(_check("seccomp_custom", "deskpod's seccomp profile in force (deny by default, not unconfined)",
                      ok, detail, cis="5.21"))
    apparmor = str(attrs.get("AppArmorProfile") or "")
    out.append(_check("apparmor", "an AppArmor profile applies (where the host has AppArmor)",
                      apparmor not in ("", "unconfined"),
                      f"AppArmorProfile={apparmor or '(none: host without AppArmor?)'}", cis="5.1",
                      warn=apparmor == ""))

    out.append(_check("read_only_root", "root filesystem read-only", host.get("ReadonlyRootfs") is True,
                      f"ReadonlyRootfs={host.get('ReadonlyRootfs')}", cis="5.12"))
    pids = host.get("PidsLimit") or 0
    out.append(_check("pids_limit", "process count limited", pids > 0, f"PidsLimit={pids or 'unlimited'}",
                      cis="5.28"))
    mem = host.get("Memory") or 0
    out.append(_check("memory_limit", "memory limited", mem > 0,
                      f"Memory={mem} bytes ({mem / 2**30:.2f} GiB)" if mem else "Memory=unlimited", cis="5.10"))
    nano = host.get("NanoCpus") or 0
    quota = host.get("CpuQuota") or 0
    cpu_ok = nano > 0 or quota > 0
    cpu_detail = (f"NanoCpus={nano} ({nano / 1e9:g} CPUs)" if nano else
                  f"CpuQuota={quota}/CpuPeriod={host.get('CpuPeriod')}" if quota else "CPU unlimited")
    out.append(_check("cpu_limit", "CPU limited", cpu_ok, cpu_detail, cis="5.11"))
    out.append(_check("oom_kill_enabled", "the OOM killer is not disabled", not host.get("OomKillDisable"),
                      f"OomKillDisable={host.get('OomKillDisable')}"))

    user = str(cfg.get("User") or "")
    out.append(_check("config_user", "configured to run as a non-root user",
                      user not in ("", "0", "root") and not user.startswith(("0:", "root:")),
                      f"User={user or '(image default: root)'}", cis="4.1"))

    modes = {"PidMode": ("5.15", "PID"), "IpcMode": ("5.16", "IPC"), "UTSMode": ("5.20", "UTS"),
             "NetworkMode": ("5.9", "network"), "UsernsMode": ("5.30", "user")}
    for key, (cis, name) in modes.items():
        value = str(host.get(key) or "")
        out.append(_check(f"no_host_{name.lower()}_ns", f"does not share the host's {name} namespace",
                          value != "host" and not value.startswith("container:"),
                          f"{key}={value or '(default)'}", cis=cis))
    cg = str(host.get("CgroupParent") or "")
    out.append(_check("cgroup_parent_default", "default cgroup parent", not cg, f"CgroupParent={cg or '(default)'}",
                      cis="5.24"))

    devices = list(host.get("Devices") or []) + list(host.get("DeviceRequests") or [])
    rules = list(host.get("DeviceCgroupRules") or [])
    out.append(_check("no_devices", "no host device passed in", not devices and not rules,
                      f"Devices={devices or None} DeviceCgroupRules={rules or None}", cis="5.17"))

    mounts: list[dict[str, Any]] = list(attrs.get("Mounts") or [])
    binds = [str(b) for b in host.get("Binds") or []]
    sources = [str(m.get("Source", "")) for m in mounts if m.get("Type") in ("bind", "volume")]
    sources += [b.split(":", 1)[0] for b in binds]
    sock = [s for s in sources if s.endswith("docker.sock") or "/docker.sock" in s]
    out.append(_check("no_docker_socket", "the Docker socket is not mounted", not sock,
                      f"mounted: {sock}" if sock else "no docker.sock among the mounts", cis="5.31"))
    sensitive = [s for s in sources if s.rstrip("/") in {p.rstrip("/") or "/" for p in SENSITIVE_HOST_PATHS}
                 or s == "/" or any(s.startswith(p.rstrip("/") + "/") for p in SENSITIVE_HOST_PATHS if p != "/")]
    non_tmpfs = [f"{m.get('Type')}:{m.get('Source') or m.get('Name')}->{m.get('Destination')}" for m in mounts
                 if m.get("Type") != "tmpfs"]
    out.append(_check("no_host_mounts", "no bind mounts or volumes (only tmpfs)", not non_tmpfs and not binds,
                      f"non-tmpfs mounts: {non_tmpfs + binds}; sensitive: {sensitive}" if non_tmpfs or binds
                      else "only tmpfs mounts", cis="5.5"))
    shared = [m.get("Destination") for m in mounts if str(m.get("Propagation", "")).endswith("shared")]
    out.append(_check("no_shared_propagation", "no mount with shared propagation", not shared,
                      f"shared: {shared}" if shared else "none", cis="5.19"))
    tmpfs: dict[str, str] = dict(host.get("Tmpfs") or {})
    unsized = [p for p, o in tmpfs.items() if "size=" not in o]
    out.append(_check("tmpfs_sized", "every tmpfs mount has a size limit", bool(tmpfs) and not unsized,
                      ", ".join(f"{p} ({o})" for p, o in tmpfs.items()) if tmpfs else "no tmpfs declared"))

    attached = list((attrs.get("NetworkSettings") or {}).get("Networks") or {})
    not_internal = [n for n in attached if not (networks.get(n) or {}).get("Internal")]
    mode = str(host.get("NetworkMode") or "")
    out.append(_check("internal_network_only", "attached only to internal networks (no route out)",
                      bool(attached) and not not_internal and mode not in ("host", "bridge", "default"),
                      f"networks={attached}; not internal: {not_internal or 'none'}", cis="5.29"))

    published = []
    for port, bindings in (host.get("PortBindings") or {}).items():
        for b in bindings or []:
            published.append(f"{b.get('HostIp') or '0.0.0.0'}:{b.get('HostPort')}->{port}")
    for port, bindings in ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).items():
        for b in bindings or []:
            entry = f"{b.get('HostIp') or '0.0.0.0'}:{b.get('HostPort')}->{port}"
            if entry not in published:
                published.append(entry)
    wildcard = [p for p in published if p.startswith(("0.0.0.0:", ":::", "[::]:"))]
    out.append(_check("no_published_ports", "no port published on the host", not published and
                      not host.get("PublishAllPorts"), f"published: {published}" if published else "none",
                      cis="5.13"))
    if wildcard:
        out[-1] = Check(out[-1].id, out[-1].title, "fail", f"published on every host interface: {wildcard}",
                        "config", "5.13")
    health = cfg.get("Healthcheck") or {}
    out.append(_check("healthcheck", "a health check is defined", bool(health.get("Test")) and
                      health.get("Test") != ["NONE"], f"Healthcheck={health.get('Test')}", cis="5.26", warn=True))
    env = [str(e) for e in cfg.get("Env") or []]
    raw_token = [e.split("=", 1)[0] for e in env if e.startswith(("DESKPOD_TOKEN=", "DESKPOD_TOKEN_FILE="))]
    out.append(_check("no_token_in_config", "the container is given only the token's hash", not raw_token,
                      f"raw token variables: {raw_token}" if raw_token else "only DESKPOD_TOKEN_SHA256"))
    return out


# --------------------------------------------------------------------------- inside


def _hex(value: str) -> int:
    try:
        return int(value, 16)
    except ValueError:
        return -1


def _summ(items: list[str], limit: int = 4) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def inside_checks(facts: dict[str, Any], declared_tmpfs: list[str]) -> list[Check]:
    """Judge the facts the probe gathered inside the container.

    Args:
        facts: the probe's JSON output (see :mod:`deskpod.audit_probe`).
        declared_tmpfs: the tmpfs mount points the container was started with.

    Returns:
        One :class:`Check` per property, in report order.
    """
    out: list[Check] = []

    def add(id: str, title: str, ok: bool, detail: str, warn: bool = False) -> None:
        out.append(_check(id, title, ok, detail, source="inside", warn=warn))

    # ``runc:[2:INIT]`` is the container runtime setting up a concurrent ``docker exec``
    # (the image's health check runs every 5 s): it applies the container's seccomp
    # filter and capabilities as it turns into the exec'd program, so it is not judged.
    procs: list[dict[str, Any]] = [p for p in facts.get("processes") or []
                                   if not str(p.get("Name", "")).startswith("runc:[")]
    pid1 = next((p for p in procs if p.get("pid") == 1), None)
    cns = facts.get("own_userns") or (pid1.get("userns") if pid1 else None)
    # A non-dumpable process's namespace links cannot be read (userns None): it is
    # judged with the container's own processes (its capabilities must be zero too).
    own_ns = [p for p in procs if p.get("userns") in (cns, None)]
    root = [f"{p['pid']} {p['Name']}" for p in procs if "0" in str(p.get("Uid", "")).split()]
    add("uid_non_root", "no process runs as uid 0", bool(procs) and not root and facts.get("uid") != 0,
        f"uid 0: {_summ(root)}" if root else f"{len(procs)} processes, probe uid {facts.get('uid')}")
    caps = [f"{p['pid']} {p['Name']} CapEff={p['CapEff']} CapPrm={p['CapPrm']}" for p in own_ns
            if _hex(p.get("CapEff", "")) != 0 or _hex(p.get("CapPrm", "")) != 0 or _hex(p.get("CapAmb", "0")) > 0]
    add("cap_eff_zero", "no capability held in the container's user namespace", bool(own_ns) and not caps,
        _summ(caps) if caps else f"CapEff=CapPrm=0 for all {len(own_ns)} processes")
    bnd = sorted({p.get("CapBnd", "") for p in own_ns if _hex(p.get("CapBnd", "")) != 0})
    add("cap_bounding_empty", "capability bounding set empty (nothing can be regained)", not bnd,
        f"CapBnd={bnd}" if bnd else "CapBnd=0")
    # Chromium's sandboxed children hold capabilities only inside the user namespace
    # they created; that is where Chromium's sandbox is meant to put them.
    foreign = [f"{p['pid']} {p['Name']}" for p in procs if p.get("userns") not in (cns, None)
               and not (p.get("Name") == "chromium" and "--type=" in p.get("cmd", ""))]
    add("userns_only_chromium", "only Chromium's sandboxed children live in another user namespace", not foreign,
        _summ(foreign) if foreign else "ok")
    nnp = [f"{p['pid']} {p['Name']}" for p in procs if p.get("NoNewPrivs") != "1"]
    add("no_new_privs", "NoNewPrivs=1 for every process", bool(procs) and not nnp, _summ(nnp) if nnp else "all 1")
    unfiltered = [f"{p['pid']} {p['Name']} Seccomp={p.get('Seccomp')}" for p in procs if p.get("Seccomp") != "2"]
    add("seccomp_filter_mode", "Seccomp=2 (filter) for every process", bool(procs) and not unfiltered,
        _summ(unfiltered) if unfiltered else "all 2")
    leaked = [f"{p['pid']} {p['Name']}" for p in procs if p.get("raw_token_env")]
    add("no_token_in_process_env", "no process's environment holds DESKPOD_TOKEN", not leaked,
        _summ(leaked) if leaked else "only the hash")

    browsers = [p for p in procs if p.get("Name") == "chromium" and "--type=" not in p.get("cmd", "")]
    renderers = [p for p in procs if "--type=renderer" in p.get("cmd", "")]
    no_sandbox = [p["pid"] for p in procs if "--no-sandbox" in p.get("cmd", "")]
    bad = []
    for r in renderers:
        if browsers and r.get("userns") == browsers[0].get("userns"):
            bad.append(f"{r['pid']}: browser's user namespace")
        if len(str(r.get("NSpid", "")).split()) < 2:
            bad.append(f"{r['pid']}: no own PID namespace")
        # Its own filter: one more than the browser process has (Docker's, if any).
        base = int(browsers[0].get("Seccomp_filters") or 0) if browsers else 0
        if r.get("Seccomp") != "2" or (r.get("Seccomp_filters") and int(r["Seccomp_filters"]) <= base):
            bad.append(f"{r['pid']}: Seccomp={r.get('Seccomp')} filters={r.get('Seccomp_filters')}")
    add("chromium_sandbox", "Chromium renderers run sandboxed (own user+PID namespace, own seccomp filter)",
        bool(renderers) and not bad and not no_sandbox,
        ("no renderer running" if not renderers else
         f"--no-sandbox in {no_sandbox}" if no_sandbox else _summ(bad) if bad else
         f"{len(renderers)} renderers: own user and PID namespaces, own seccomp filter"))

    mounts = {m[0]: (m[1], m[2]) for m in facts.get("mounts") or []}
    root_opts = mounts.get("/", ("", ""))[1].split(",")
    add("root_mounted_ro", "/ is mounted read-only", "ro" in root_opts, f"/ options: {','.join(root_opts[:2])}")
    allowed = set(declared_tmpfs) | _ALLOWED_WRITABLE_EXTRA
    writable: dict[str, str] = facts.get("writable") or {}
    stray = [f"{m} (e.g. {p})" for m, p in writable.items() if m not in allowed]
    not_tmpfs = [m for m in writable if m in allowed and mounts.get(m, ("",))[0] not in ("tmpfs", "mqueue")]
    add("writable_only_tmpfs", "the user can write only to the declared tmpfs mounts",
        not stray and not not_tmpfs,
        (f"writable outside them: {_summ(stray)}" if stray else
         f"not tmpfs: {not_tmpfs}" if not_tmpfs else
         f"writable: {', '.join(sorted(writable))} ({facts.get('files_walked', 0)} files checked)"))
    setid = list(facts.get("setid_files") or [])
    add("no_setid_files", "no setuid/setgid files", not setid, _summ(setid) if setid else
        f"none in {facts.get('files_walked', 0)} files")

    sc: dict[str, int] = facts.get("syscalls") or {}
    if not sc:
        add("blocked_syscalls", "dangerous syscalls refused", False,
            str(facts.get("syscalls_error", "the probe tried no syscall")))
    for name, code in sc.items():
        label = "succeeded" if code == 0 else _errno.errorcode.get(code, f"code {code}")
        add(f"syscall_{name}", _SYSCALL_TITLES.get(name, f"{name} is refused"), code in _DENIED_ERRNOS,
            f"{name} -> {label}" + ("" if code in _DENIED_ERRNOS else " (expected EPERM or ENOSYS)"))
    raw = facts.get("raw_socket")
    add("no_raw_socket", "raw sockets refused (no CAP_NET_RAW)", raw not in (0, None),
        "raw ICMP socket opened" if raw == 0 else f"socket(AF_INET, SOCK_RAW) -> "
        f"{_errno.errorcode.get(int(raw or 0), raw)}")

    for kind, title in (("tcp", "direct TCP to the project's other containers fails"),
                        ("udp", "direct UDP to the project's other containers fails"),
                        ("icmp", "ICMP echo to the project's other containers fails")):
        results = facts.get(kind) or []
        leaks = [f"{r[0]} {r[1]}:{r[2]} {r[3]}" for r in results if not str(r[3]).startswith("blocked")]
        add(f"egress_{kind}_blocked", title, bool(results) and not leaks,
            _summ(leaks) if leaks else (f"{len(results)} targets blocked" if results else
                                        "no target: no other container of the project found"),
            warn=not results)
    dns: dict[str, str] = facts.get("dns") or {}
    resolved = [f"{n} {v}" for n, v in dns.items() if not v.startswith("failed")]
    add("dns_blocked", "names outside the sandbox's network do not resolve", bool(dns) and not resolved,
        _summ(resolved) if resolved else (f"{len(dns)} names unresolved" if dns else "no name to try"),
        warn=not dns)
    v6 = list(facts.get("ipv6_global") or [])
    add("no_ipv6", "no global IPv6 address", not v6, _summ(v6) if v6 else "none")
    ports = f":{DAEMON_PORT} and the X display :{X_TCP_PORT}"
    listening = [f"{a}:{p}" for a, p in facts.get("listening") or []
                 if not str(a).startswith(_LISTEN_OK_LOOPBACK) and p not in (DAEMON_PORT, X_TCP_PORT)]
    add("listen_loopback_only", f"only the daemon and the X display ({ports}) listen beyond loopback",
        not listening, f"also listening: {listening}" if listening else f"only {ports}")
    # Chromium speaks DevTools over the daemon's pipe: no port for it, not even on loopback.
    others = [f"{a}:{p}" for a, p in facts.get("listening") or []
              if p not in (DAEMON_PORT, X_TCP_PORT) and a != _DOCKER_DNS]
    port_flag = [str(p["pid"]) for p in procs if "--remote-debugging-port" in p.get("cmd", "")]
    add("no_devtools_port", f"no DevTools port: nothing but {ports} listens, loopback included",
        not others and not port_flag,
        (f"--remote-debugging-port in {port_flag}" if port_flag else
         f"also listening: {others}" if others else f"only {ports}"))

    proxy: dict[str, str] = facts.get("proxy") or {}
    if not proxy:
        add("proxy_configured", "an egress proxy is configured (HTTP_PROXY)", False, "no proxy in the environment")
    for name, line in proxy.items():
        add(f"proxy_refuses_{name}", _PROXY_TITLES.get(name, f"the egress proxy refuses {name}"),
            " 403 " in f" {line} ", line[:120])
    out.extend(dumpable_checks(facts))
    out.extend(display_checks(facts))
    return out


def dumpable_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge whether deskpod's own processes are non-dumpable.

    The probe (another process of the daemon's uid) stats and tries to open
    ``/proc/<pid>/mem`` of each process of :data:`DAEMON_PROCESSES`: the kernel owns a
    non-dumpable process's ``mem`` to root and refuses to open it (EACCES).

    Args:
        facts: the probe's JSON output; ``daemon_processes`` maps each role to
            ``[{"pid", "mem_owner", "mem_open"}, ...]`` (``mem_open`` 0 when it opened,
            else the errno).

    Returns:
        One check, ``daemon_processes_non_dumpable``.
    """
    found: dict[str, list[dict[str, Any]]] = facts.get("daemon_processes") or {}
    missing = [role for role in DAEMON_PROCESSES if not found.get(role)]
    open_to_uid = []
    for role, records in found.items():
        for r in records:
            if r.get("mem_open") == 0:
                open_to_uid.append(f"{role} {r['pid']} (mem opened)")
            elif r.get("mem_owner") not in (0, None):
                open_to_uid.append(f"{role} {r['pid']} (mem owned by uid {r.get('mem_owner')})")
    shown = ", ".join(f"{role} {r['pid']}" for role in DAEMON_PROCESSES for r in found.get(role) or [])
    return [_check(
        "daemon_processes_non_dumpable",
        "init, agentd, Xvfb and openbox are non-dumpable: another process of their uid cannot open their memory",
        not missing and not open_to_uid,
        (f"dumpable: {_summ(open_to_uid)}" if open_to_uid else
         f"not running: {', '.join(missing)}" if missing else f"/proc/<pid>/mem refused for {shown}"),
        source="inside",
    )]


def display_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge the X display's access control.

    Args:
        facts: the probe's JSON output; ``display`` holds ``tcp_no_cookie`` (the X
            server's answer to a connection setup without a cookie on
            ``127.0.0.1:``:data:`X_TCP_PORT`: ``"refused: <reason>"``, ``"accepted"``,
            ``"unreachable: ..."``) and ``abstract_sockets`` (X sockets in the abstract
            Unix namespace, from ``/proc/net/unix``).

    Returns:
        One check, ``display_requires_cookie``.
    """
    display: dict[str, Any] = facts.get("display") or {}
    answer = str(display.get("tcp_no_cookie", "not probed"))
    abstract = list(display.get("abstract_sockets") or [])
    ok = answer.startswith("refused") and not abstract
    return [_check(
        "display_requires_cookie",
        f"the X display refuses a client without its cookie (TCP :{X_TCP_PORT}); no abstract X socket",
        ok,
        (f"abstract socket(s): {_summ(abstract)}" if abstract else
         f"without a cookie: {answer[:120]}" if not answer.startswith("refused") else
         f"without a cookie: {answer[:120]}; no abstract socket"),
        source="inside",
    )]


# --------------------------------------------------------------------------- Docker


# --------------------------------------------------------------------------- the agent's zone

AGENT_UID = "1001"
"""The uid agent commands run as, in the workspace container."""

MIN_PROCESS_MEMORY_BYTES = 512 * 2**20
"""Memory a container's processes must keep when every tmpfs mount and /dev/shm is full (512 MiB)."""

ZONE_CHECK_IDS = frozenset({
    "workspace_container", "workspace_hardening", "workspace_own_namespaces", "workspace_mounts_declared",
    "workspace_networks", "workspace_processes_unprivileged", "agent_cannot_open_daemon_memory",
    "agent_processes_reaped", "tmpfs_within_memory", "workspace_host_unreachable",
})
"""Every check of the agent's zone (all fail when the sandbox has no workspace container)."""

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
    :data:`MIN_PROCESS_MEMORY_BYTES` of its memory limit to its processes?

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
        elif total > memory - MIN_PROCESS_MEMORY_BYTES:
            problems.append(f"{name}: tmpfs + shm {total / 2**20:.0f} MiB leave less than "
                            f"{MIN_PROCESS_MEMORY_BYTES / 2**20:.0f} MiB of {memory / 2**20:.0f} MiB")
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
    common = [str(m.get("Destination")) for m in wmounts
              if m.get("Type") != "tmpfs" and str(m.get("Source") or m.get("Name")) in sources]
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
    """Judge the zone probe's facts (:data:`~deskpod.audit_probe.ZONE_PROBE_SOURCE`, run in the
    workspace container as uid 1001).

    ``agent_cannot_open_daemon_memory`` fails when a deskpod process (agentd, Xvfb,
    openbox, Chromium) is visible at all, or when the probe opened the memory or
    environment of a process that is not of its own zone (another uid, or the
    runner, PID 1). ``workspace_processes_unprivileged``: every process has
    CapEff 0 and none runs as root.
    """
    procs: list[dict[str, Any]] = list(facts.get("processes") or [])
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
    from deskpod.agentd.runner import call
    from deskpod.agentd.runner_wire import RUNNER_PORT, RunnerOutput, RunnerWorkspaceRequest
    from deskpod.errors import DeskpodError
    from deskpod.protocol import ExecOutput, ExecRequest

    out = [_check("workspace_container", "agent commands run in a workspace container of their own", True,
                  f"{workspace.name}")]
    with _docker_errors(f"inspecting {workspace.name}"):
        workspace.reload()
        wattrs: dict[str, Any] = workspace.attrs
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
        reply = call(str(address), RUNNER_PORT, RunnerWorkspaceRequest(request=ExecRequest(
            type="exec", id="audit", argv=["python3", "-c", REAP_PROBE_SOURCE, mark], timeout_s=30)), 60.0)
        started = isinstance(reply, RunnerOutput) and isinstance(reply.output, ExecOutput) and \
            "hidden" in reply.output.stdout
        with _docker_errors(f"listing {workspace.name}'s processes"):
            top = workspace.top(ps_args="-eo pid,args")
        leftover = [" ".join(p)[:120] for p in top.get("Processes") or [] if mark in " ".join(p)]
    except (OSError, ValueError, DeskpodError) as exc:
        leftover = [f"(the runner at {address}:{RUNNER_PORT} could not run the probe: {exc})"]
    out.append(reaped_check(started, leftover))
    host = audit_host_unreachable(workspace, client)
    out.append(replace(host, id="workspace_host_unreachable",
                       title=f"{host.title} (from the workspace container, where agent commands run)"))
    return out


@contextmanager
def _docker_errors(what: str) -> Iterator[None]:
    """Translate docker SDK and transport errors into :class:`AuditError`, once."""
    import docker.errors

    try:
        yield
    except docker.errors.NotFound as exc:
        raise AuditError(f"{what}: not found ({exc.explanation or exc})", detail={"reason": "not_found"}) from exc
    except (docker.errors.DockerException, OSError) as exc:
        raise AuditError(f"{what}: {exc}", detail={"reason": "docker"}) from exc


def _client(client: Any | None) -> Any:
    if client is not None:
        return client
    try:
        import docker
    except ImportError as exc:
        raise AuditError("the docker SDK is not installed: pip install 'deskpod[audit]'",
                         detail={"reason": "no_sdk"}) from exc
    with _docker_errors("connecting to the Docker engine"):
        return docker.from_env()


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
    }


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
    report.checks.extend(_zone_audit(client, attrs))
    return report


def render_table(report: AuditReport) -> str:
    """Render a report as a plain-text table (the default ``deskpod audit`` output).

    Args:
        report: the audit's result.

    Returns:
        Text: a header line, one line per check (status, id, property, evidence)
        and a summary line.
    """
    lines = [f"deskpod audit: {report.container} ({report.container_id[:12]}, image {report.image})", ""]
    width = max((len(c.id) for c in report.checks), default=10)
    for c in report.checks:
        cis = f" [CIS {c.cis}]" if c.cis else ""
        lines.append(f"{c.status.upper():4}  {c.id:<{width}}  {c.title}{cis}")
        lines.append(f"{'':4}  {'':<{width}}  -> {c.detail}")
    counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "warn")}
    verdict = "PASSED" if report.ok else "FAILED: " + ", ".join(c.id for c in report.failed)
    lines += ["", f"{counts['pass']} passed, {counts['fail']} failed, {counts['warn']} warnings: {verdict}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- host_unreachable


class HostListener:
    """TCP and UDP listeners on every address of the host running the audit.

    Bound to ``::`` (dual stack) where the host has IPv6, else ``0.0.0.0``, on
    ephemeral ports, like any service an operator runs on the Docker host. Threads
    record every TCP connection and UDP datagram that arrives (and answer the
    datagrams), so the audit learns from the host's side what reached it.

    Attributes:
        tcp_port: the TCP listener's port.
        udp_port: the UDP listener's port.
        nonce: the bytes the probe sends (hex text).
        arrivals: ``"tcp from ADDRESS: DATA"`` / ``"udp from ADDRESS: DATA"`` lines.
    """

    def __init__(self) -> None:
        import secrets

        self.nonce = "deskpod-audit-" + secrets.token_hex(8)
        self.arrivals: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        dual = socket.has_dualstack_ipv6()
        self._tcp = socket.create_server(("::" if dual else "0.0.0.0", 0),
                                         family=socket.AF_INET6 if dual else socket.AF_INET, dualstack_ipv6=dual)
        self._udp = socket.socket(socket.AF_INET6 if dual else socket.AF_INET, socket.SOCK_DGRAM)
        if dual:
            self._udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self._udp.bind(("::" if dual else "0.0.0.0", 0))
        self.tcp_port = int(self._tcp.getsockname()[1])
        self.udp_port = int(self._udp.getsockname()[1])
        self._tcp.settimeout(0.2)
        self._udp.settimeout(0.2)
        self._threads = [threading.Thread(target=self._serve_tcp, daemon=True),
                         threading.Thread(target=self._serve_udp, daemon=True)]

    def __enter__(self) -> HostListener:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._tcp.close()
        self._udp.close()

    def _record(self, line: str) -> None:
        with self._lock:
            self.arrivals.append(line[:200])

    def _serve_tcp(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._tcp.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
            self._record(f"tcp from {peer[0]}: {data.decode(errors='replace')}")

    def _serve_udp(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._udp.recvfrom(512)
            except (TimeoutError, OSError):
                continue
            self._record(f"udp from {peer[0]}: {data.decode(errors='replace')}")
            try:
                self._udp.sendto(data, peer)
            except OSError:
                pass

    def snapshot(self) -> list[str]:
        """The arrivals so far (a copy)."""
        with self._lock:
            return list(self.arrivals)


def host_gateways(attrs: dict[str, Any], networks: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Every gateway address of every network a container is on: addresses of the Docker host.

    Args:
        attrs: the container's inspect data.
        networks: inspect data of each of its networks, keyed by name.

    Returns:
        ``[[ip, label], ...]``, IPv4 and IPv6, without duplicates; the label names
        the network and its bridge.
    """
    out: dict[str, str] = {}
    for name, endpoint in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).items():
        net = networks.get(name) or {}
        bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name") or ""
        label = f"{name} gateway" + (f" ({bridge})" if bridge else "")
        found = [endpoint.get("Gateway"), endpoint.get("IPv6Gateway")]
        found += [c.get("Gateway") for c in ((net.get("IPAM") or {}).get("Config") or [])]
        for ip in found:
            ip = str(ip or "").split("/", 1)[0]
            if ip and ip not in out:
                out[ip] = label
    return [[ip, label] for ip, label in out.items()]


HOST_ADDRESS_LIMIT = 16
"""At most this many of the host's own IPv4 addresses are probed besides the gateways."""


def local_ipv4_addresses(fib_trie: str) -> list[str]:
    """The host's own IPv4 addresses (loopback excluded), read from ``/proc/net/fib_trie``.

    Args:
        fib_trie: the text of ``/proc/net/fib_trie``.

    Returns:
        Each address marked ``/32 host LOCAL``, once, in order, at most
        :data:`HOST_ADDRESS_LIMIT`.
    """
    found: list[str] = []
    last = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:].strip()
        elif text.startswith("/32 host LOCAL") and last and not last.startswith("127.") and last not in found:
            found.append(last)
    return found[:HOST_ADDRESS_LIMIT]


def host_unreachable_check(targets: list[list[str]], facts: dict[str, Any] | None, arrivals: list[str],
                           control_ok: list[str]) -> Check:
    """Judge the ``host_unreachable`` probe.

    Args:
        targets: the gateway addresses tried (:func:`host_gateways`).
        facts: the probe's output (``{"tcp", "udp", "icmp"}``), or ``None`` if it did not run.
        arrivals: what the host listener saw during the probe (:class:`HostListener`).
        control_ok: the gateway addresses at which the audit itself reached its
            listener (proof that it listens on the Docker host).

    Returns:
        The check: ``fail`` if anything answered or arrived, or the probe did not
        run; ``warn`` if there was no gateway to try or the listener is not on the
        Docker host (nothing shown); else ``pass``.
    """
    title = "the Docker host is unreachable: nothing answers on any gateway address (TCP, UDP, ICMP)"
    if facts is None:
        return Check("host_unreachable", title, "fail", "the probe did not run", "inside")
    leaks = [f"{kind} {r[1]}:{r[2]} {r[3]}" for kind in ("tcp", "udp", "icmp") for r in facts.get(kind) or []
             if not str(r[3]).startswith("blocked")]
    leaks += [f"host saw {a}" for a in arrivals]
    if leaks:
        return Check("host_unreachable", title, "fail",
                     _summ(leaks) + " (host firewall off or missing? see DESKPOD_HOST_FIREWALL)", "inside")
    if not targets:
        return Check("host_unreachable", title, "warn", "no gateway address to try", "inside")
    if not control_ok:
        return Check("host_unreachable", title, "warn",
                     "the audit could not reach its own listener at the gateway addresses: it does not run on "
                     "the Docker host, so nothing was shown", "inside")
    tried = sum(len(facts.get(k) or []) for k in ("tcp", "udp", "icmp"))
    gws = [t[0] for t in targets if t[1] != "host address"]
    others = len(targets) - len(gws)
    return Check("host_unreachable", title, "pass",
                 f"gateways {', '.join(gws)}" + (f" and {others} other host addresses" if others else "")
                 + f", {tried} TCP/UDP/ICMP probes: nothing answered, nothing arrived", "inside")


def audit_host_unreachable(container: Any, client: Any | None = None) -> Check:
    """Show, on a running container of the stack, that it cannot reach the Docker host.

    Opens a :class:`HostListener` on this host, runs
    :data:`~deskpod.audit_probe.HOST_PROBE_SOURCE` in the container (as its user,
    fixed argv) against every gateway address of its networks, then connects to
    the listener from this host at those addresses as a control. Any container with
    ``python3`` can be audited this way (the sandbox, a workspace container).

    Args:
        container: a ``docker.models.containers.Container``.
        client: a ``docker.DockerClient``; ``None`` connects with ``docker.from_env()``.

    Returns:
        The ``host_unreachable`` :class:`Check`.

    Raises:
        AuditError: Docker failed while inspecting or running the probe, or the
            host listener could not be opened.
    """
    client = _client(client)
    with _docker_errors(f"inspecting {container.name}"):
        container.reload()
        attrs: dict[str, Any] = container.attrs
        networks = {name: client.networks.get(net.get("NetworkID") or name).attrs
                    for name, net in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).items()}
    targets = host_gateways(attrs, networks)
    gateways = [ip for ip, _label in targets]
    # The host's other addresses too: a rule that covers only the gateway is not enough.
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as f:
            local = local_ipv4_addresses(f.read())
    except OSError:
        local = []
    targets += [[ip, "host address"] for ip in local if ip not in gateways]
    try:
        listener = HostListener()
    except OSError as exc:
        raise AuditError(f"cannot open the host listener: {exc}", detail={"reason": "listener"}) from exc
    with listener:
        params = {"targets": targets, "tcp_port": listener.tcp_port, "udp_port": listener.udp_port,
                  "nonce": listener.nonce, "timeout_s": PROBE_TIMEOUT_S}
        with _docker_errors(f"running the host probe in {container.name}"):
            result = container.exec_run(["python3", "-c", HOST_PROBE_SOURCE, json.dumps(params)], demux=True)
        time.sleep(0.3)  # a datagram in flight still counts
        arrivals = listener.snapshot()
        control_ok = []
        for ip in gateways:
            try:
                with socket.create_connection((ip, listener.tcp_port), timeout=1.0) as s:
                    s.sendall(b"control")
                control_ok.append(ip)
            except OSError:
                continue
    stdout = result.output[0] if isinstance(result.output, tuple) else result.output
    try:
        facts = json.loads((stdout or b"").decode())
        if not isinstance(facts, dict):
            raise ValueError("not an object")
    except ValueError:
        facts = None
    return host_unreachable_check(targets, facts, arrivals, control_ok)
