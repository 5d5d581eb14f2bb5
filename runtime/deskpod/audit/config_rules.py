"""The configuration rules: judge a container's inspect data from the Docker API
(:func:`config_checks`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from deskpod.audit.report import Check, _check

__all__ = [
    "SENSITIVE_HOST_PATHS",
    "config_checks",
    "memory_volumes_as_tmpfs",
]

SENSITIVE_HOST_PATHS = (
    "/", "/boot", "/dev", "/etc", "/home", "/lib", "/proc", "/root", "/run", "/sys", "/usr",
    "/var/lib/docker", "/var/run", "/var/run/docker.sock", "/run/docker.sock",
)
"""Host paths that must never be mounted into a sandbox (CIS 5.5 and 5.31)."""


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


def memory_volumes_as_tmpfs(attrs: dict[str, Any], volumes: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of a container's inspect data in which each volume mount that lives in memory
    only is the tmpfs it is: the local driver's ``type=tmpfs`` with ``device=tmpfs``
    (https://docs.docker.com/engine/storage/volumes/, "Create a tmpfs volume"; what
    compose.yaml's volume ``workspace`` is). Such a mount becomes ``Type: tmpfs`` and its
    options join ``HostConfig.Tmpfs``, so the rules judge its size and memory as any tmpfs;
    every other volume is left as it is (and fails ``no_host_mounts``).

    Args:
        attrs: the container's inspect data.
        volumes: the inspect data of the volumes it mounts, by volume name.
    """
    out = copy.deepcopy(attrs)
    host = out.setdefault("HostConfig", {})
    tmpfs = host.get("Tmpfs") or {}
    for mount in out.get("Mounts") or []:
        name = str(mount.get("Name"))
        volume = volumes.get(name) or {}
        options = volume.get("Options") or {}
        if (mount.get("Type") == "volume" and volume.get("Driver") == "local" and options.get("type") == "tmpfs"
                and options.get("device") == "tmpfs"):
            mount["Type"] = "tmpfs"
            tmpfs[str(mount.get("Destination"))] = str(options.get("o") or "")
            # compose also lists a named volume among the binds (``name:/path:rw``)
            host["Binds"] = [b for b in host.get("Binds") or [] if str(b).split(":", 1)[0] != name]
    host["Tmpfs"] = tmpfs
    return out


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
