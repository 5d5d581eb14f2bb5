"""Compose notation → the docker SDK's ``containers.create`` keyword arguments (pure).

:func:`translate_service` turns a compose service mapping (what
:mod:`deskpod.backend.config` builds) into keyword arguments: sizes in bytes
(:func:`parse_bytes`), CPUs in nano-CPUs, durations in nanoseconds
(:func:`parse_duration_ns`), the seccomp profile's path replaced by its JSON content, as
compose sends it. Networks and volumes are not translated: the backend attaches them itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from deskpod.errors import BackendError

__all__ = ["parse_bytes", "parse_duration_ns", "translate_service"]

_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}
_DURATION_UNITS_NS = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


def parse_bytes(value: str | int) -> int:
    """Parse a compose size (``"1gb"``, ``"512m"``, ``"8k"``, ``1024``) into bytes.

    Raises:
        BackendError: not a size.
    """
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SIZE_UNITS:
        raise BackendError(f"not a size: {value!r}", detail={"reason": "config"})
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def parse_duration_ns(value: str | int | float) -> int:
    """Parse a compose duration (``"5s"``, ``"1m30s"``, ``"500ms"``; a bare number is
    seconds) into nanoseconds, the unit the Docker API takes for health checks.

    Raises:
        BackendError: not a duration.
    """
    if isinstance(value, (int, float)):
        return int(value * 1_000_000_000)
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", value.strip())
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        raise BackendError(f"not a duration: {value!r}", detail={"reason": "config"})
    return int(sum(float(n) * _DURATION_UNITS_NS[u] for n, u in parts))


def _security_opt(opts: list[str], read_profile: Callable[[str], str]) -> list[str]:
    out = []
    for opt in opts:
        key, sep, value = opt.partition(":")
        if key == "seccomp" and sep and value != "unconfined":
            out.append(f"seccomp={read_profile(value)}")
        else:
            out.append(opt)
    return out


def translate_service(service: Mapping[str, Any], read_profile: Callable[[str], str]) -> dict[str, Any]:
    """Translate a compose service into docker SDK ``containers.create`` keyword arguments.

    Supported keys: ``image``, ``environment`` (mapping), ``read_only``, ``tmpfs``
    (list of ``PATH:OPTIONS``), ``shm_size``, ``cap_drop``, ``cap_add``,
    ``security_opt`` (``seccomp:PATH`` becomes ``seccomp=JSON``, as compose sends
    it), ``pids_limit``, ``mem_limit``, ``memswap_limit``, ``cpus``, ``user``, ``healthcheck``,
    ``restart``, ``entrypoint``, ``command``, ``working_dir``, ``ipc``, ``sysctls``. Networks are not translated: the backend attaches them itself.

    Args:
        service: a compose service mapping.
        read_profile: returns a seccomp profile's JSON text given its path.

    Returns:
        Keyword arguments for ``client.containers.create``.

    Raises:
        BackendError: a key is not supported or a value is malformed
            (``detail["reason"] == "config"``).
    """
    known = {"image", "environment", "read_only", "tmpfs", "shm_size", "cap_drop", "cap_add", "security_opt",
             "pids_limit", "mem_limit", "memswap_limit", "cpus", "user", "healthcheck", "restart", "entrypoint",
             "command", "working_dir", "ipc", "sysctls"}
    unknown = sorted(set(service) - known)
    if unknown:
        raise BackendError(f"compose keys not supported by the backend: {unknown}", detail={"reason": "config"})
    out: dict[str, Any] = {"image": service["image"]}
    if "environment" in service:
        out["environment"] = {str(k): str(v) for k, v in dict(service["environment"]).items()}
    if "read_only" in service:
        out["read_only"] = bool(service["read_only"])
    if "tmpfs" in service:
        tmpfs: dict[str, str] = {}
        for entry in service["tmpfs"]:
            path, _, opts = str(entry).partition(":")
            tmpfs[path] = opts
        out["tmpfs"] = tmpfs
    if "shm_size" in service:
        out["shm_size"] = parse_bytes(service["shm_size"])
    for key in ("cap_drop", "cap_add"):
        if key in service:
            out[key] = [str(c) for c in service[key]]
    if "security_opt" in service:
        out["security_opt"] = _security_opt([str(o) for o in service["security_opt"]], read_profile)
    if "pids_limit" in service:
        out["pids_limit"] = int(service["pids_limit"])
    for key in ("mem_limit", "memswap_limit"):
        if key in service:
            out[key] = parse_bytes(service[key])
    if "cpus" in service:
        out["nano_cpus"] = int(float(service["cpus"]) * 1_000_000_000)
    if "user" in service:
        out["user"] = str(service["user"])
    if "healthcheck" in service:
        hc = dict(service["healthcheck"])
        out["healthcheck"] = {
            "test": list(hc["test"]),
            **{k: parse_duration_ns(hc[k]) for k in ("interval", "timeout", "start_period") if k in hc},
            **({"retries": int(hc["retries"])} if "retries" in hc else {}),
        }
    if "restart" in service:
        out["restart_policy"] = {"Name": str(service["restart"])}
    for key in ("entrypoint", "command"):
        if key in service:
            out[key] = [str(a) for a in service[key]]
    if "working_dir" in service:
        out["working_dir"] = str(service["working_dir"])
    if "ipc" in service:
        out["ipc_mode"] = str(service["ipc"])
    if "sysctls" in service:
        out["sysctls"] = {str(k): str(v) for k, v in dict(service["sysctls"]).items()}
    return out
