"""The Docker backend's configuration and its services in compose notation (pure).

Nothing here talks to Docker. Three parts:

- :class:`DockerBackendConfig`: the tagged backend configuration (``type: "docker"``),
  read from explicit arguments, then :mod:`deskpod.settings` (``DESKPOD_*``
  variables, then the configuration file; in :meth:`DockerBackendConfig.from_env`),
  then the documented defaults.
- The services in compose notation: :func:`sandbox_service`, :func:`workspace_service`,
  :func:`egress_service` and :func:`desktop_service` return compose.yaml's ``sandbox``,
  ``workspace``, ``egress`` and ``desktop`` services as the backend runs them (same
  hardening, same notation), so a unit test can hold them against compose.yaml itself;
  :func:`workspace_volume_options` is compose.yaml's volume ``workspace`` (the desktop
  profile's shared ``/workspace``).
- The naming and labelling helpers every resource goes through. The translation into
  the docker SDK's arguments is :mod:`deskpod.backend.compose_notation`'s
  (:func:`translate_service`, re-exported here).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from deskpod.backend.compose_notation import parse_bytes, parse_duration_ns, translate_service
from deskpod.backend.hostguard import HOSTGUARD_IMAGE
from deskpod.backend.memory import MIN_DESKTOP_SLOT_BYTES, MIN_SLOT_BYTES, SlotMemory, slot_memory
from deskpod import __version__
from deskpod.errors import BackendError, SettingsError
from deskpod.protocol._base import STRICT
from deskpod.settings import get_settings, load_settings

__all__ = [
    "APPS_RUNNER_PORT",
    "DAEMON_PORT",
    "DESKTOP_ALIAS",
    "DESKTOP_IMAGE",
    "DockerBackendConfig",
    "EGRESS_ALIAS",
    "EGRESS_CONTROL_PORT",
    "EGRESS_IMAGE",
    "EGRESS_PORT",
    "HEALTHCHECK_TEST",
    "LABEL_POOL",
    "LABEL_ROLE",
    "LABEL_SANDBOX",
    "ResourceNames",
    "SANDBOX_ALIAS",
    "SANDBOX_IMAGE",
    "WORKSPACE_ALIAS",
    "WORKSPACE_HEALTHCHECK_TEST",
    "WORKSPACE_RUNNER_PORT",
    "default_seccomp_profile",
    "desktop_service",
    "egress_service",
    "labels",
    "new_sandbox_id",
    "parse_bytes",
    "parse_duration_ns",
    "resource_names",
    "sandbox_service",
    "translate_service",
    "workspace_service",
    "workspace_volume_options",
]

SANDBOX_IMAGE = f"deskpod/sandbox:{__version__}"
"""Default sandbox image (built from the repository's Dockerfile; compose.yaml's tag)."""

EGRESS_IMAGE = f"deskpod/egress:{__version__}"
"""Default egress proxy image (images/egress/; compose.yaml's tag)."""

DESKTOP_IMAGE = f"deskpod/desktop:{__version__}"
"""Default image of the desktop applications' zone (the Dockerfile's ``desktop`` stage;
compose.yaml's tag)."""

EGRESS_ALIAS = "egress"
"""The egress proxy's name on a slot network; the sandbox's proxy settings use it."""

EGRESS_PORT = 3128
"""The egress proxy's port (squid)."""

EGRESS_CONTROL_PORT = 3129
"""The egress proxy's control endpoint's port (``images/egress/egress_control.py``): the
controller gives it a run's allowlist (:class:`deskpod.controller.egress.EgressControl`)."""

DAEMON_PORT = 8765
"""agentd's port inside the sandbox (websocket ``/v1/ws`` and ``GET /healthz``)."""

SANDBOX_ALIAS = "sandbox"
"""The sandbox container's name on a slot network: the egress proxy asks the daemon
there about egress grants (``DESKPOD_EGRESS_DAEMON``), as in compose.yaml."""

WORKSPACE_ALIAS = "workspace"
"""The workspace container's name on a slot network; the sandbox's ``DESKPOD_WORKSPACE_RUNNER`` uses it."""

WORKSPACE_RUNNER_PORT = 8770
"""The workspace runner's port in the workspace container (:data:`deskpod.agentd.runner_wire.RUNNER_PORT`)."""

WORKSPACE_HEALTHCHECK_TEST = ["CMD", "python", "-m", "deskpod.agentd.runner_health"]
"""The workspace container's health check (compose.yaml's ``workspace`` service)."""

DESKTOP_HEALTHCHECK_TEST = ["CMD", "python", "-c",
                            "import socket; socket.create_connection(('127.0.0.1', 8771), 3).close()"]
"""The desktop container's health check (compose.yaml's ``desktop`` service): the applications
runner listens (it closes a connection that is not agentd's unread, so a connection is all it asks)."""

DESKTOP_ALIAS = "desktop"
"""The desktop applications' zone's name on a slot network; the sandbox's ``DESKPOD_APPS_RUNNER`` uses it."""

APPS_RUNNER_PORT = 8771
"""The applications runner's port in the desktop container (:data:`deskpod.agentd.apps_wire.APPS_PORT`)."""

LABEL_SANDBOX = "deskpod.sandbox"
"""Label on every container, network and volume of a sandbox: its id."""

LABEL_ROLE = "deskpod.role"
"""Label naming what a resource is: ``sandbox``, ``workspace``, ``desktop``, ``egress``,
``network``, ``volume`` or ``hostguard``."""

LABEL_POOL = "deskpod.pool"
"""Label naming the pool (or ``""``) a sandbox was created for."""

HEALTHCHECK_TEST = [
    "CMD", "python", "-c",
    "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', 8765, timeout=3); "
    "c.request('GET', '/healthz'); sys.exit(0 if c.getresponse().status == 200 else 1)",
]
"""The sandbox's health check, the same command as the image's ``HEALTHCHECK``."""

_ID_RE = re.compile(r"^[a-z0-9]{4,32}$")
_PREFIX_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,40}$")


def default_seccomp_profile() -> Path:
    """The sandbox's seccomp profile shipped with the package (``deskpod/seccomp/sandbox.json``,
    package data: found in an editable or a regular install alike; the repository's
    ``seccomp/sandbox.json`` links to it).

    Returns:
        The profile's path on this machine.
    """
    return Path(__file__).resolve().parents[1] / "seccomp" / "sandbox.json"


class DockerBackendConfig(BaseModel):
    """How the Docker backend builds sandboxes.

    Every field has a documented default; :meth:`from_env` fills unset fields
    from ``DESKPOD_*`` variables first.

    Attributes:
        type: the backend's tag, always ``"docker"``.
        sandbox_image: the sandbox image (``DESKPOD_SANDBOX_IMAGE``).
        egress_image: the egress proxy image (``DESKPOD_EGRESS_IMAGE``).
        egress_allowlist: domains the slot's egress proxy lets through, separated by
            spaces or commas (``DESKPOD_EGRESS_ALLOWLIST``, default ``demo.test``).
        outside_network: the existing Docker network every slot's egress proxy also
            joins to reach allowlisted sites (``DESKPOD_OUTSIDE_NETWORK``, default
            ``bridge``, Docker's default network). The backend never creates or
            removes it.
        screen_size: Xvfb screen size ``WIDTHxHEIGHT`` (``DESKPOD_SCREEN_SIZE``).
        device_scale_factor: Chromium's device scale factor, 0.5..4
            (``DESKPOD_DEVICE_SCALE_FACTOR``, default 1).
        start_url: Chromium's first page; ``None``: the daemon's default
            (``DESKPOD_START_URL``).
        seccomp_profile: path of the sandbox's seccomp profile, sent to the engine
            as JSON content (``DESKPOD_SECCOMP_PROFILE``, default
            :func:`default_seccomp_profile`).
        name_prefix: prefix of every container and network name
            (``DESKPOD_NAME_PREFIX``, default ``deskpod``).
        pids_limit: the sandbox's process limit (compose.yaml: 512).
        mem_limit: the sandbox's memory limit, compose notation (``"3g"``).
        cpus: the sandbox's CPU limit in CPUs (compose.yaml: 2).
        shm_size: the sandbox's ``/dev/shm`` size, compose notation (``"1gb"``; with
            the tmpfs mounts it must stay below ``mem_limit``, see compose.yaml).
        host_firewall: install the host guard's rule for each slot's bridge before
            its sandbox starts, and remove it at teardown; a failure refuses the
            slot (``DESKPOD_HOST_FIREWALL``, ``on`` or ``off``, default on). Off
            only where the engine has no host firewall (Docker Desktop); the
            audit then fails ``host_unreachable``.
        hostguard_image: the host guard image (``DESKPOD_HOSTGUARD_IMAGE``).
        host_iptables: the iptables the guard edits: ``auto`` (where Docker's
            chains are), ``nft`` or ``legacy`` (``DESKPOD_HOST_IPTABLES``).
        trusted_cas: extra CA certificates (PEM text) the sandbox's Chromium and its
            ``network`` commands trust (``DESKPOD_TRUSTED_CAS``; see
            :mod:`deskpod.agentd.browser.trusted_ca`).
        subnet_pool: an address range (CIDR) each slot's network takes a free
            ``/subnet_size`` subnet of (``DESKPOD_SUBNET_POOL``); ``None``: Docker's
            default address pools.
        subnet_size: the prefix length of a slot's subnet, 16..29 (``DESKPOD_SUBNET_SIZE``,
            default 28: 14 addresses, of which a slot uses 4).
        slot_memory: the memory budget of one slot, compose notation (``DESKPOD_SLOT_MEMORY``;
            ``"auto"`` there is resolved by ``deskpod pool up``): the sandbox's,
            workspace's and proxy's limits and tmpfs sizes are split from it by
            :func:`deskpod.backend.memory.slot_memory` (``mem_limit`` and ``shm_size``
            are then ignored); ``None``: compose.yaml's limits.
        standby_browser: the sandbox keeps a standby desktop for fast in-place resets
            (``DESKPOD_STANDBY_BROWSER``, default off; :mod:`deskpod.agentd.standby`).
        display_refresh_hz: the sandbox display's refresh rate, Chromium's frame clock
            (``DESKPOD_DISPLAY_REFRESH_HZ``, 30..480, default 240; :mod:`deskpod.agentd.display.refresh`).
        desktop: each slot also runs the desktop applications' zone (compose.yaml's profile
            ``desktop``: :func:`desktop_service`, ``open_app``), sharing a per-slot memory-only
            ``/workspace`` volume with the workspace container (``DESKPOD_DESKTOP``, default off).
        desktop_image: that zone's image (``DESKPOD_DESKTOP_IMAGE``).
    """

    model_config = STRICT

    type: Literal["docker"] = "docker"
    sandbox_image: str = SANDBOX_IMAGE
    egress_image: str = EGRESS_IMAGE
    egress_allowlist: str = "demo.test"
    outside_network: str = "bridge"
    screen_size: str = Field(default="1280x800", pattern=r"^\d{2,5}x\d{2,5}$")
    device_scale_factor: float = Field(default=1.0, ge=0.5, le=4.0)
    start_url: str | None = None
    seccomp_profile: str = Field(default_factory=lambda: str(default_seccomp_profile()))
    name_prefix: str = Field(default="deskpod", pattern=_PREFIX_RE.pattern)
    pids_limit: int = Field(default=512, gt=0)
    mem_limit: str = "3g"
    cpus: float = Field(default=2.0, gt=0)
    shm_size: str = "1gb"
    host_firewall: bool = True
    hostguard_image: str = HOSTGUARD_IMAGE
    host_iptables: Literal["auto", "nft", "legacy"] = "auto"
    trusted_cas: str | None = None
    subnet_pool: str | None = None
    subnet_size: int = Field(default=28, ge=16, le=29)
    slot_memory: str | None = None
    standby_browser: bool = False
    display_refresh_hz: int = Field(default=240, ge=30, le=480)
    desktop: bool = False
    desktop_image: str = DESKTOP_IMAGE

    @field_validator("subnet_pool")
    @classmethod
    def _check_subnet_pool(cls, value: str | None) -> str | None:
        if value is None:
            return None
        network = ipaddress.ip_network(value, strict=True)
        if network.version != 4:
            raise ValueError("subnet_pool must be an IPv4 range")
        return str(network)

    @model_validator(mode="after")
    def _check_slot_memory(self) -> DockerBackendConfig:
        minimum = MIN_DESKTOP_SLOT_BYTES if self.desktop else MIN_SLOT_BYTES
        if self.slot_memory is not None and parse_bytes(self.slot_memory) < minimum:
            raise ValueError(f"slot_memory must be at least {minimum // 1_048_576} MiB"
                             f"{' with the desktop' if self.desktop else ''}")
        return self

    def slot_limits(self) -> SlotMemory | None:
        """The slot's container limits split from :attr:`slot_memory`, or ``None`` (compose.yaml's)."""
        if self.slot_memory is None:
            return None
        return slot_memory(parse_bytes(self.slot_memory), desktop=self.desktop)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **explicit: Any) -> DockerBackendConfig:
        """Build a configuration: explicit arguments, then the settings, then defaults.

        Args:
            environ: the environment to read, never with a configuration file;
                ``None``: the process's settings (:func:`deskpod.settings.get_settings`:
                the environment, then the configuration file).
            **explicit: field values that win over the environment; ``None`` values
                are ignored.

        Returns:
            The configuration.

        Raises:
            BackendError: a value is invalid (``detail["reason"] == "config"``).
        """
        try:
            settings = get_settings() if environ is None else load_settings(environ, config_file=None)
        except SettingsError as exc:
            raise BackendError(f"invalid backend configuration: {exc.message}",
                               detail={**exc.detail, "reason": "config"}) from exc
        fields = ("sandbox_image", "egress_image", "egress_allowlist", "outside_network", "screen_size",
                  "device_scale_factor", "start_url",
                  "seccomp_profile", "name_prefix", "host_firewall", "hostguard_image", "host_iptables",
                  "trusted_cas", "subnet_pool", "subnet_size", "slot_memory", "standby_browser",
                  "display_refresh_hz", "desktop", "desktop_image")
        values: dict[str, Any] = {f: getattr(settings, f) for f in fields if getattr(settings, f) is not None}
        if "seccomp_profile" in values:
            values["seccomp_profile"] = str(values["seccomp_profile"])
        if values.get("slot_memory") == "auto":
            del values["slot_memory"]  # resolved by `deskpod pool up`, which knows the pool's size
        values.update({k: v for k, v in explicit.items() if v is not None})
        try:
            return cls(**values)
        except ValueError as exc:
            raise BackendError(f"invalid backend configuration: {exc}", detail={"reason": "config"}) from exc


def new_sandbox_id() -> str:
    """A fresh sandbox id: 10 lowercase hex digits (also part of resource names)."""
    return secrets.token_hex(5)


@dataclass(frozen=True)
class ResourceNames:
    """The Docker names of one sandbox's resources.

    Attributes:
        network: the slot's ``internal: true`` network.
        egress: the slot's egress proxy container.
        sandbox: the sandbox container.
        workspace: the workspace container (the agent's zone).
        desktop: the desktop applications' zone's container (the desktop profile).
        volume: the ``/workspace`` volume the workspace and desktop containers share
            (the desktop profile).
    """

    network: str
    egress: str
    sandbox: str
    workspace: str
    desktop: str
    volume: str


def resource_names(prefix: str, sandbox_id: str) -> ResourceNames:
    """Name one sandbox's resources ``PREFIX-ID-net``, ``PREFIX-ID-egress``, ``PREFIX-ID-sandbox``, ...

    Args:
        prefix: :attr:`DockerBackendConfig.name_prefix`.
        sandbox_id: from :func:`new_sandbox_id` (4–32 lowercase letters or digits).

    Returns:
        The names.

    Raises:
        BackendError: the prefix or id would make an invalid or ambiguous name.
    """
    if not _PREFIX_RE.match(prefix) or not _ID_RE.match(sandbox_id):
        raise BackendError(f"invalid name prefix {prefix!r} or sandbox id {sandbox_id!r}",
                           detail={"reason": "config"})
    base = f"{prefix}-{sandbox_id}"
    return ResourceNames(network=f"{base}-net", egress=f"{base}-egress", sandbox=f"{base}-sandbox",
                         workspace=f"{base}-workspace", desktop=f"{base}-desktop", volume=f"{base}-workspace")


def labels(
    sandbox_id: str, role: Literal["sandbox", "workspace", "desktop", "egress", "network", "volume", "hostguard"],
    pool: str = "",
) -> dict[str, str]:
    """The labels put on a sandbox's resource; :meth:`DockerBackend.destroy` finds them by
    :data:`LABEL_SANDBOX`."""
    return {LABEL_SANDBOX: sandbox_id, LABEL_ROLE: role, LABEL_POOL: pool}


def sandbox_service(config: DockerBackendConfig, token_hash: str) -> dict[str, Any]:
    """compose.yaml's ``sandbox`` service as the backend runs it, in compose notation.

    Args:
        config: the backend configuration.
        token_hash: the SHA-256 (hex) of the sandbox's control token; the only
            token material the sandbox gets.

    Returns:
        A compose service mapping (``image``, ``environment``, ``read_only``,
        ``tmpfs``, ``shm_size``, ``cap_drop``, ``security_opt``, ``pids_limit``,
        ``mem_limit``, ``cpus``, ``user``, ``healthcheck``, ``restart``).
    """
    proxy = f"http://{EGRESS_ALIAS}:{EGRESS_PORT}"
    env = {
        "DESKPOD_TOKEN_SHA256": token_hash,
        "DESKPOD_SCREEN_SIZE": config.screen_size,
        "DESKPOD_DEVICE_SCALE_FACTOR": f"{config.device_scale_factor:g}",
        "DESKPOD_DISPLAY_REFRESH_HZ": str(config.display_refresh_hz),
        "DESKPOD_TRUSTED_CAS": config.trusted_cas or "",
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "localhost,127.0.0.1",
        "no_proxy": "localhost,127.0.0.1",
        "DESKPOD_WORKSPACE_RUNNER": f"{WORKSPACE_ALIAS}:{WORKSPACE_RUNNER_PORT}",
    }
    if config.desktop:
        env["DESKPOD_APPS_RUNNER"] = f"{DESKTOP_ALIAS}:{APPS_RUNNER_PORT}"
    env["DESKPOD_STANDBY_BROWSER"] = "on" if config.standby_browser else "off"
    if config.start_url:
        env["DESKPOD_START_URL"] = config.start_url
    plan = config.slot_limits()
    service: dict[str, Any] = {
        "image": config.sandbox_image,
        "environment": env,
        "read_only": True,
        "tmpfs": [
            "/tmp:mode=1777,size=512m",
            "/home/deskpod:uid=1000,gid=1000,mode=0700,size=128m",
        ],
        "shm_size": config.shm_size,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true", f"seccomp:{config.seccomp_profile}"],
        "pids_limit": config.pids_limit,
        "mem_limit": config.mem_limit,
        "cpus": config.cpus,
        "user": "1000:1000",
        "healthcheck": {"test": HEALTHCHECK_TEST, "interval": "5s", "timeout": "5s", "retries": 3,
                        "start_period": "60s"},
        "restart": "no",
    }
    if plan is not None:
        service.update(
            tmpfs=[f"/tmp:mode=1777,size={_mib(plan.sandbox_tmp_bytes)}",
                   f"/home/deskpod:uid=1000,gid=1000,mode=0700,size={_mib(plan.sandbox_home_bytes)}"],
            shm_size=_mib(plan.sandbox_shm_bytes), mem_limit=_mib(plan.sandbox_bytes),
            memswap_limit=_mib(plan.sandbox_bytes))
    return service


def workspace_service(config: DockerBackendConfig) -> dict[str, Any]:
    """compose.yaml's ``workspace`` service (the agent's zone) as the backend runs it.

    Same image and hardening as the sandbox, uid 1001, the workspace runner as PID 1
    (no tini), its own IPC namespace with capped SysV IPC, and tmpfs + shm sized
    below the memory limit (the arithmetic is in compose.yaml and SECURITY.md).
    ``/workspace`` is a tmpfs of its own, or with :attr:`DockerBackendConfig.desktop`
    the slot's volume (:func:`workspace_volume_options`), which the backend mounts.

    Args:
        config: the backend configuration (image, seccomp profile, CPU limit, desktop).

    Returns:
        A compose service mapping (without ``volumes``: the backend names each slot's).
    """
    proxy = f"http://{EGRESS_ALIAS}:{EGRESS_PORT}"
    plan = config.slot_limits()
    service: dict[str, Any] = {
        "image": config.sandbox_image,
        "user": "1001:1001",
        "entrypoint": ["python", "-m", "deskpod.agentd.runner"],
        "command": [],
        "working_dir": "/workspace",
        "environment": {"HOME": "/home/agent", "DESKPOD_TRUSTED_CAS": config.trusted_cas or "",
                        "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "DESKPOD_RUNNER_CLIENT": SANDBOX_ALIAS},
        "read_only": True,
        "tmpfs": [
            "/workspace:uid=1001,gid=1001,mode=0700,size=512m",
            "/tmp:mode=1777,size=256m",
            "/home/agent:uid=1001,gid=1001,mode=0700,size=128m",
        ],
        "shm_size": "64m",
        "ipc": "private",
        "sysctls": {"kernel.shmmax": 67108864, "kernel.shmall": 16384, "kernel.shm_rmid_forced": 1,
                    "kernel.msgmni": 64},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true", f"seccomp:{config.seccomp_profile}"],
        "pids_limit": 512,
        "mem_limit": "2g",
        "cpus": config.cpus,
        "healthcheck": {"test": WORKSPACE_HEALTHCHECK_TEST, "interval": "5s", "timeout": "5s",
                        "start_period": "20s", "retries": 3},
        "restart": "no",
    }
    if plan is not None:
        service.update(
            tmpfs=[f"/workspace:uid=1001,gid=1001,mode=0700,size={_mib(plan.workspace_dir_bytes)}",
                   f"/tmp:mode=1777,size={_mib(plan.workspace_tmp_bytes)}",
                   f"/home/agent:uid=1001,gid=1001,mode=0700,size={_mib(plan.workspace_home_bytes)}"],
            shm_size=_mib(plan.workspace_shm_bytes), mem_limit=_mib(plan.workspace_bytes),
            memswap_limit=_mib(plan.workspace_bytes))
    if config.desktop:
        service["tmpfs"] = service["tmpfs"][1:]  # /workspace is the slot's volume
    return service


def workspace_volume_options(config: DockerBackendConfig) -> dict[str, str]:
    """compose.yaml's volume ``workspace`` (the desktop profile's shared ``/workspace``) as
    the local driver's options: memory only, the agent's (uid 1001, group 1001, which the
    desktop applications' uid is in), ``nosuid,nodev,noexec`` like a tmpfs mount.

    Args:
        config: the backend configuration (its slot plan sizes the volume).

    Returns:
        The ``driver_opts`` of a ``local`` volume (``type``, ``device``, ``o``).
    """
    plan = config.slot_limits()
    size = "512m" if plan is None else _mib(plan.workspace_dir_bytes)
    return {"type": "tmpfs", "device": "tmpfs", "o": f"size={size},uid=1001,gid=1001,mode=0770,nosuid,nodev,noexec"}


def desktop_service(config: DockerBackendConfig) -> dict[str, Any]:
    """compose.yaml's ``desktop`` service (the desktop applications' zone) as the backend runs it.

    uid 1001, the workspace's, the applications runner as PID 1 (the image's entrypoint),
    answering only the sandbox's address (``DESKPOD_APPS_CLIENT``), no proxy variables and no secret, its own IPC namespace, the sandbox's seccomp profile;
    ``/workspace`` is the slot's volume, which the backend mounts.

    Args:
        config: the backend configuration (desktop image, seccomp profile, CPU limit, slot plan).

    Returns:
        A compose service mapping (without ``volumes``).
    """
    plan = config.slot_limits()
    service: dict[str, Any] = {
        "image": config.desktop_image,
        "user": "1001:1001",
        "working_dir": "/workspace",
        "environment": {"HOME": "/home/apps", "DESKPOD_APPS_CLIENT": SANDBOX_ALIAS},
        "read_only": True,
        "tmpfs": ["/tmp:mode=1777,size=256m", "/home/apps:uid=1001,gid=1001,mode=0700,size=128m"],
        "shm_size": "64m",
        "ipc": "private",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true", f"seccomp:{config.seccomp_profile}"],
        "pids_limit": 512,
        "mem_limit": "2g",
        "cpus": config.cpus,
        "healthcheck": {"test": DESKTOP_HEALTHCHECK_TEST, "interval": "5s", "timeout": "5s", "start_period": "10s",
                        "retries": 3},
        "restart": "no",
    }
    if plan is not None:
        service.update(
            tmpfs=[f"/tmp:mode=1777,size={_mib(plan.desktop_tmp_bytes)}",
                   f"/home/apps:uid=1001,gid=1001,mode=0700,size={_mib(plan.desktop_home_bytes)}"],
            shm_size=_mib(plan.desktop_shm_bytes), mem_limit=_mib(plan.desktop_bytes),
            memswap_limit=_mib(plan.desktop_bytes))
    return service


def egress_service(config: DockerBackendConfig, control_token_hash: str) -> dict[str, Any]:
    """compose.yaml's ``egress`` service as the backend runs it, in compose notation.

    Args:
        config: the backend configuration (image and allowlist).
        control_token_hash: the SHA-256 (hex) of the slot's egress control token (the
            backend holds the token, as it holds the sandbox's); ``""`` turns the
            proxy's control endpoint off.

    Returns:
        A compose service mapping.
    """
    plan = config.slot_limits()
    service: dict[str, Any] = {
        "image": config.egress_image,
        "environment": {"DESKPOD_EGRESS_ALLOWLIST": config.egress_allowlist,
                        "DESKPOD_EGRESS_DAEMON": f"{SANDBOX_ALIAS}:{DAEMON_PORT}",
                        "DESKPOD_EGRESS_CONTROL_TOKEN_SHA256": control_token_hash},
        "read_only": True,
        "tmpfs": [
            "/run/squid:uid=13,gid=13,mode=0755,size=8m",
            "/var/spool/squid:uid=13,gid=13,mode=0755,size=8m",
        ],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "pids_limit": 256,
        "mem_limit": "512m",
        "restart": "no",
    }
    if plan is not None:
        service.update(mem_limit=_mib(plan.egress_bytes), memswap_limit=_mib(plan.egress_bytes))
    return service


def _mib(size_bytes: int) -> str:
    """``size_bytes`` in compose notation, whole MiB (``"128m"``)."""
    return f"{size_bytes // 1_048_576}m"
