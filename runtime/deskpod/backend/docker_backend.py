"""The Docker backend: sandboxes as hardened containers, through the docker SDK.

Each sandbox gets its own **slot**: an ``internal: true`` network (no route out, no
external DNS), its own egress proxy container (squid, ``deskpod/egress``) attached
to that network under the alias ``egress`` (what the sandbox's ``HTTP_PROXY``
names) and to :attr:`~deskpod.backend.config.DockerBackendConfig.outside_network`,
the workspace container (the agent's zone: uid 1001, the workspace runner as PID 1,
on the slot network under the alias ``workspace``, see
:func:`~deskpod.backend.config.workspace_service`) and the sandbox container with
compose.yaml's hardening (see :func:`~deskpod.backend.config.sandbox_service`). One proxy per slot, not one
shared by all: no container sits on two sandboxes' networks, and each slot can
have its own allowlist. Each slot's proxy also has its own control token
(:attr:`~deskpod.backend.base.SandboxHandle.egress_token`, kept by the backend like the
sandbox's; the proxy gets its SHA-256), so the controller can give that proxy, at its
address on the slot network, a run's allowlist. With the desktop profile
(:attr:`~deskpod.backend.config.DockerBackendConfig.desktop`) a slot also has the desktop
applications' zone (:func:`~deskpod.backend.config.desktop_service`, alias ``desktop``, started
before the sandbox) and a memory-only volume (:func:`~deskpod.backend.config.workspace_volume_options`)
that it and the workspace container mount at ``/workspace``; a recreated slot gets a fresh one.
Everything carries the label ``deskpod.sandbox=<id>``; :meth:`DockerBackend.destroy` removes
containers, networks and volumes by that label.

The slot's network has a fixed bridge name
(:func:`~deskpod.backend.hostguard.sandbox_bridge_name`), and the host guard
(:mod:`deskpod.backend.hostguard`) installs the host firewall rule for it before
the sandbox starts (again before a recreated sandbox starts, in case the host's
firewall was reloaded) and removes it once the slot's containers and network are
gone. A guard that fails refuses the slot (:class:`~deskpod.errors.HostFirewallError`)
unless the operator turned it off (``host_firewall``, ``DESKPOD_HOST_FIREWALL=off``).

The docker SDK is imported lazily, and its exceptions are translated once, here,
into :class:`~deskpod.errors.BackendError`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from deskpod.backend.base import READY_TIMEOUT_S, Backend, Readiness, SandboxHandle
from deskpod.backend.config import (
    DESKTOP_ALIAS,
    EGRESS_ALIAS,
    LABEL_POOL,
    SANDBOX_ALIAS,
    WORKSPACE_ALIAS,
    LABEL_SANDBOX,
    DockerBackendConfig,
    desktop_service,
    egress_service,
    labels,
    new_sandbox_id,
    resource_names,
    sandbox_service,
    translate_service,
    workspace_service,
    workspace_volume_options,
)
from deskpod.backend.hostguard import BRIDGE_NAME_OPTION, GuardAction, run_guard, sandbox_bridge_name
from deskpod.backend.subnets import pick_subnet, used_subnets
from deskpod.errors import BackendError, HostFirewallError, SandboxNotReadyError
from deskpod.tokens import new_token, token_sha256

__all__ = ["DockerBackend", "HEALTH_PROBE_TIMEOUT_S", "READY_POLL_S", "STOP_TIMEOUT_S"]

log = logging.getLogger(__name__)

READY_POLL_S = 0.1
"""Pause between two readiness probes, seconds."""

HEALTH_PROBE_TIMEOUT_S = 2.0
"""Timeout of one ``GET /healthz`` probe from the host, seconds."""

STOP_TIMEOUT_S = 0
"""Grace period before a removed container is killed, seconds: sandboxes keep no
state worth a clean shutdown (all of it is tmpfs)."""

_SUBNET_ATTEMPTS = 8
"""How many free subnets a slot network tries when other creators keep taking them first."""

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _sdk_errors() -> Any:
    """The docker SDK's ``docker.errors`` module, imported on first use.

    Raises:
        BackendError: the SDK is not installed (``reason`` ``"no_sdk"``).
    """
    try:
        import docker.errors
    except ImportError as exc:
        raise BackendError("the docker SDK is not installed: pip install 'deskpod[backend]'",
                           detail={"reason": "no_sdk"}) from exc
    return docker.errors


@contextmanager
def _docker_errors(what: str) -> Iterator[None]:
    """Translate docker SDK and transport errors into :class:`BackendError`, once."""
    errors = _sdk_errors()
    try:
        yield
    except errors.ImageNotFound as exc:
        raise BackendError(f"{what}: image not found ({exc.explanation or exc}); build it with "
                           "scripts/compose.sh build", detail={"reason": "no_image"}) from exc
    except errors.NotFound as exc:
        raise BackendError(f"{what}: not found ({exc.explanation or exc})", detail={"reason": "not_found"}) from exc
    except (errors.DockerException, OSError) as exc:
        raise BackendError(f"{what}: {exc}", detail={"reason": "docker"}) from exc


class DockerBackend(Backend):
    """Sandboxes as containers on the local Docker engine.

    Args:
        config: how sandboxes are built; ``None``: :meth:`DockerBackendConfig.from_env`.
        client: a ``docker.DockerClient``; ``None`` connects with ``docker.from_env()``
            on first use.

    Raises:
        BackendError: ``config`` is ``None`` and a ``DESKPOD_*`` variable is invalid
            (``reason`` ``"config"``); on first use, the docker SDK is missing
            (``"no_sdk"``) or the engine is unreachable (``"docker"``).
    """

    def __init__(self, config: DockerBackendConfig | None = None, *, client: Any | None = None) -> None:
        self.config = config or DockerBackendConfig.from_env()
        self._client = client
        self._profile: str | None = None
        self._subnet_lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The ``docker.DockerClient`` in use (connected on first access)."""
        if self._client is None:
            with _docker_errors("connecting to the Docker engine"):
                import docker

                self._client = docker.from_env()
        return self._client

    def _read_profile(self, path: str) -> str:
        """The seccomp profile's JSON text, read once, checked to be a JSON object."""
        if self._profile is None:
            try:
                text = Path(path).read_text(encoding="utf-8")
                if not isinstance(json.loads(text), dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as exc:
                raise BackendError(f"cannot use seccomp profile {path}: {exc} (set DESKPOD_SECCOMP_PROFILE)",
                                   detail={"reason": "config"}) from exc
            self._profile = text
        return self._profile

    # ------------------------------------------------------------------ blocking parts

    def _guard(self, sandbox_id: str, action: GuardAction, bridges: list[str], pool: str) -> None:
        """Run the host guard for a slot's bridges (nothing when the operator opted out).

        Raises:
            HostFirewallError: the guard failed.
        """
        if not self.config.host_firewall:
            if action == "install":
                log.warning("host firewall off (DESKPOD_HOST_FIREWALL=off): sandbox %s can reach this host",
                            sandbox_id)
            return
        name = f"{self.config.name_prefix}-{sandbox_id}-hostguard-{action}"
        run_guard(self.client, self.config.hostguard_image, action, bridges, name=name,
                  labels=labels(sandbox_id, "hostguard", pool), iptables=self.config.host_iptables)

    def _create_network(self, name: str, bridge: str, network_labels: dict[str, str]) -> None:
        """Create the slot's ``internal`` bridge network, with a subnet of
        ``subnet_pool`` when the operator gave one (see :mod:`deskpod.backend.subnets`).

        Raises:
            BackendError: the engine refused, or every subnet of the range is taken
                (``reason`` ``"subnets_exhausted"``).
        """
        options = {"driver": "bridge", "internal": True, "options": {BRIDGE_NAME_OPTION: bridge},
                   "labels": network_labels, "check_duplicate": True}
        if self.config.subnet_pool is None:
            with _docker_errors(f"creating network {name}"):
                self.client.networks.create(name, **options)
            return
        import docker.types

        refused: list[str] = []
        for _ in range(_SUBNET_ATTEMPTS):
            with self._subnet_lock, _docker_errors(f"creating network {name}"):
                subnet = pick_subnet(self.config.subnet_pool, self.config.subnet_size,
                                     used_subnets(self.client.api.networks()), refused)
                ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
                try:
                    self.client.networks.create(name, ipam=ipam, **options)
                    return
                except _sdk_errors().APIError as exc:
                    if "overlap" not in str(exc).lower():
                        raise
                    refused.append(subnet)  # another creator took it meanwhile
        raise BackendError(f"network {name}: no free subnet of {self.config.subnet_pool} after "
                           f"{_SUBNET_ATTEMPTS} attempts", detail={"reason": "subnets_exhausted"})

    def _start_sandbox(self, sandbox_id: str, token: str, pool: str) -> tuple[str, str]:
        """Create and start the workspace container (with the desktop profile: the slot's
        ``/workspace`` volume first, and the desktop container after it), then the sandbox
        container, in the slot; return (sandbox name, sandbox address)."""
        names = resource_names(self.config.name_prefix, sandbox_id)
        mounts: dict[str, Any] = {}
        if self.config.desktop:
            with _docker_errors(f"creating volume {names.volume}"):
                self.client.volumes.create(name=names.volume, driver="local",
                                           driver_opts=workspace_volume_options(self.config),
                                           labels=labels(sandbox_id, "volume", pool))
            mounts = {"volumes": {names.volume: {"bind": "/workspace", "mode": "rw"}}}
        with _docker_errors(f"starting workspace {names.workspace}"):
            endpoint = self.client.api.create_endpoint_config(aliases=[WORKSPACE_ALIAS])
            workspace = self.client.containers.create(
                name=names.workspace, labels=labels(sandbox_id, "workspace", pool), network=names.network,
                networking_config={names.network: endpoint},
                **translate_service(workspace_service(self.config), self._read_profile), **mounts,
            )
            workspace.start()
        if self.config.desktop:
            with _docker_errors(f"starting desktop {names.desktop}"):
                endpoint = self.client.api.create_endpoint_config(aliases=[DESKTOP_ALIAS])
                desktop = self.client.containers.create(
                    name=names.desktop, labels=labels(sandbox_id, "desktop", pool), network=names.network,
                    networking_config={names.network: endpoint},
                    **translate_service(desktop_service(self.config), self._read_profile), **mounts,
                )
                desktop.start()
        kwargs = translate_service(sandbox_service(self.config, token_sha256(token)), self._read_profile)
        with _docker_errors(f"starting sandbox {names.sandbox}"):
            endpoint = self.client.api.create_endpoint_config(aliases=[SANDBOX_ALIAS])
            container = self.client.containers.create(
                name=names.sandbox, labels=labels(sandbox_id, "sandbox", pool), network=names.network,
                networking_config={names.network: endpoint}, **kwargs,
            )
            container.start()
            container.reload()
            address = container.attrs["NetworkSettings"]["Networks"][names.network]["IPAddress"]
        if not address:
            raise BackendError(f"sandbox {names.sandbox} has no address on {names.network}",
                               detail={"reason": "state"})
        return names.sandbox, address

    def _create(self, token: str | None, pool: str) -> SandboxHandle:
        sandbox_id = new_sandbox_id()
        names = resource_names(self.config.name_prefix, sandbox_id)
        token = token or new_token()
        egress_token = new_token()
        started = time.monotonic()
        try:
            bridge = sandbox_bridge_name(sandbox_id)
            self._create_network(names.network, bridge, labels(sandbox_id, "network", pool))
            self._guard(sandbox_id, "install", [bridge], pool)
            with _docker_errors(f"starting egress proxy {names.egress}"):
                endpoint = self.client.api.create_endpoint_config(aliases=[EGRESS_ALIAS])
                egress = self.client.containers.create(
                    name=names.egress, labels=labels(sandbox_id, "egress", pool), network=names.network,
                    networking_config={names.network: endpoint},
                    **translate_service(egress_service(self.config, token_sha256(egress_token)), self._read_profile),
                )
                self.client.networks.get(self.config.outside_network).connect(egress)
                egress.start()
                egress.reload()
                egress_address = egress.attrs["NetworkSettings"]["Networks"][names.network]["IPAddress"]
            if not egress_address:
                raise BackendError(f"egress proxy {names.egress} has no address on {names.network}",
                                   detail={"reason": "state"})
            container, address = self._start_sandbox(sandbox_id, token, pool)
        except BaseException:
            try:
                self._destroy(sandbox_id)
            except BackendError as cleanup:
                log.warning("cleaning up the failed sandbox %s: %s", sandbox_id, cleanup.message)
            raise
        log.info("created sandbox %s (%s at %s) in %.2f s", sandbox_id, container, address,
                 time.monotonic() - started)
        return SandboxHandle(id=sandbox_id, container=container, network=names.network, egress=names.egress,
                             address=address, token=token, pool=pool, egress_address=egress_address,
                             egress_token=egress_token)

    def _remove_container(self, name: str) -> None:
        errors = _sdk_errors()
        with _docker_errors(f"removing {name}"):
            try:
                self.client.api.remove_container(name, force=True, v=True)
            except errors.NotFound:
                return

    def _remove_volume(self, name: str) -> None:
        errors = _sdk_errors()
        with _docker_errors(f"removing volume {name}"):
            try:
                self.client.api.remove_volume(name, force=True)
            except errors.NotFound:
                return

    def _recreate(self, handle: SandboxHandle, token: str | None) -> SandboxHandle:
        token = token or new_token()
        names = resource_names(self.config.name_prefix, handle.id)
        for name in (handle.container, names.workspace, names.desktop):
            self._remove_container(name)
        # A fresh /workspace: nothing of the previous tenant's files survives a recreate.
        self._remove_volume(names.volume)
        self._guard(handle.id, "install", [sandbox_bridge_name(handle.id)], handle.pool)
        container, address = self._start_sandbox(handle.id, token, handle.pool)
        log.info("recreated sandbox %s (%s at %s)", handle.id, container, address)
        return replace(handle, container=container, address=address, token=token)

    def _destroy(self, sandbox_id: str) -> None:
        errors = _sdk_errors()
        label = {"label": f"{LABEL_SANDBOX}={sandbox_id}"}
        failures: list[str] = []
        with _docker_errors(f"listing sandbox {sandbox_id}'s resources"):
            containers = self.client.containers.list(all=True, filters=label)
        for container in containers:
            try:
                container.remove(force=True, v=True)
            except errors.NotFound:
                continue
            except (errors.DockerException, OSError) as exc:
                failures.append(f"container {container.name}: {exc}")
        with _docker_errors(f"listing sandbox {sandbox_id}'s networks"):
            networks = self.client.networks.list(filters=label)
        bridges = {sandbox_bridge_name(sandbox_id)}
        for network in networks:
            named = (network.attrs.get("Options") or {}).get(BRIDGE_NAME_OPTION)
            if named:
                bridges.add(str(named))
            try:
                network.remove()
            except errors.NotFound:
                continue
            except (errors.DockerException, OSError) as exc:
                failures.append(f"network {network.name}: {exc}")
        with _docker_errors(f"listing sandbox {sandbox_id}'s volumes"):
            volumes = self.client.volumes.list(filters=label)
        for volume in volumes:
            try:
                volume.remove(force=True)
            except errors.NotFound:
                continue
            except (errors.DockerException, OSError) as exc:
                failures.append(f"volume {volume.name}: {exc}")
        # Only once nothing of the slot is left on the bridge: then no sandbox can use the gap.
        if not failures:
            try:
                self._guard(sandbox_id, "remove", sorted(bridges), "")
            except HostFirewallError as exc:
                failures.append(f"host firewall rule: {exc.message}")
        if failures:
            raise BackendError(f"sandbox {sandbox_id} not fully removed: {'; '.join(failures)}"[:2000],
                               detail={"reason": "docker", "failures": failures})
        log.info("destroyed sandbox %s", sandbox_id)

    def _status(self, handle: SandboxHandle) -> tuple[str, str]:
        """(container status, Docker health status) of the sandbox, e.g. ``("running", "starting")``."""
        try:
            attrs = self.client.api.inspect_container(handle.container)
        except _sdk_errors().NotFound:
            return "missing", ""
        state = attrs.get("State") or {}
        return str(state.get("Status", "")), str((state.get("Health") or {}).get("Status", ""))

    def _probe(self, handle: SandboxHandle) -> str:
        """One ``GET /healthz`` from the host: ``"200"`` or what went wrong."""
        try:
            with _NO_PROXY.open(handle.health_url, timeout=HEALTH_PROBE_TIMEOUT_S) as resp:
                return str(resp.status)
        except urllib.error.HTTPError as exc:
            return str(exc.code)
        except (OSError, ValueError) as exc:
            return type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"[:120]

    def _wait_ready(self, handle: SandboxHandle, timeout_s: float) -> Readiness:
        started = time.monotonic()
        attempts = 0
        last = "not probed"
        while True:
            attempts += 1
            probe = self._probe(handle)
            if probe == "200":
                last = f"running, /healthz {probe}"
                return Readiness(attempts=attempts, elapsed_s=time.monotonic() - started, last_status=last)
            with _docker_errors(f"inspecting {handle.container}"):
                status, health = self._status(handle)
            last = f"{status}{f' ({health})' if health else ''}, /healthz {probe}"
            if status in ("exited", "dead", "missing", "removing"):
                logs = self._logs(handle.container)
                raise BackendError(f"sandbox {handle.id} stopped while starting ({last}); last log lines:\n{logs}",
                                   detail={"reason": "exited", "attempts": attempts, "last_status": last})
            if time.monotonic() - started >= timeout_s:
                raise SandboxNotReadyError(
                    f"sandbox {handle.id} not ready after {attempts} attempts in {timeout_s:.0f} s; last: {last}",
                    detail={"attempts": attempts, "last_status": last, "timeout_s": timeout_s},
                )
            time.sleep(READY_POLL_S)

    def _logs(self, name: str) -> str:
        errors = _sdk_errors()
        try:
            return bytes(self.client.api.logs(name, tail=20)).decode(errors="replace")
        except (errors.DockerException, OSError) as exc:
            return f"(no logs: {exc})"

    def _is_healthy(self, handle: SandboxHandle) -> bool:
        return self._failure(handle) is None

    def _failure(self, handle: SandboxHandle) -> str | None:
        """Why the sandbox is not usable (from Docker's ``State``: ``OOMKilled``,
        ``Status``, ``ExitCode``, of the sandbox then of its workspace container and, with
        the desktop profile, its desktop container; then the egress proxy and
        ``/healthz``), or ``None``."""
        errors = _sdk_errors()
        names = resource_names(self.config.name_prefix, handle.id)
        zones = [(handle.container, ""), (names.workspace, "workspace ")]
        if self.config.desktop:
            zones.append((names.desktop, "desktop "))
        with _docker_errors(f"inspecting {handle.container}"):
            for name, what in zones:
                try:
                    state = self.client.api.inspect_container(name).get("State") or {}
                except errors.NotFound:
                    return f"{what}missing"
                if state.get("OOMKilled"):
                    return f"{what}oom_killed"
                status = str(state.get("Status", ""))
                if status in ("exited", "dead"):
                    return f"{what}exited (code {state.get('ExitCode')})"
                if status != "running":
                    return f"{what}{status or 'unknown state'}"
            try:
                egress = self.client.api.inspect_container(handle.egress).get("State") or {}
            except errors.NotFound:
                egress = {}
        if not egress.get("Running"):
            return "egress proxy stopped"
        probe = self._probe(handle)
        return None if probe == "200" else f"unhealthy (/healthz {probe})"

    def _list_ids(self, pool: str | None) -> list[str]:
        wanted = [LABEL_SANDBOX] if pool is None else [LABEL_SANDBOX, f"{LABEL_POOL}={pool}"]
        with _docker_errors("listing sandboxes"):
            found = self.client.containers.list(all=True, filters={"label": wanted})
            nets = self.client.networks.list(filters={"label": wanted})
            volumes = self.client.volumes.list(filters={"label": wanted})
        ids = {str(c.labels.get(LABEL_SANDBOX)) for c in found}
        ids |= {str((n.attrs.get("Labels") or {}).get(LABEL_SANDBOX)) for n in nets}
        ids |= {str((v.attrs.get("Labels") or {}).get(LABEL_SANDBOX)) for v in volumes}
        return sorted(i for i in ids if i and i != "None")

    # ------------------------------------------------------------------ the async interface

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        """Create and start a sandbox in a new slot (network + egress proxy + sandbox).

        Args:
            token: the control token; ``None`` makes a fresh one. The container gets
                only its SHA-256 (``DESKPOD_TOKEN_SHA256``).
            pool: the pool name put on its resources' ``deskpod.pool`` label.

        Returns:
            The handle; the sandbox is started, not necessarily ready (:meth:`wait_ready`).

        Raises:
            HostFirewallError: the host guard could not install the slot's firewall
                rule (and ``host_firewall`` is on); whatever was created is removed.
            BackendError: an image, the outside network or the seccomp profile is
                missing, or the engine refused; whatever was created is removed.
        """
        return await asyncio.to_thread(self._create, token, pool)

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        """Remove the sandbox and workspace containers (and the desktop container and the
        ``/workspace`` volume) and start fresh ones in the same slot.

        Args:
            handle: the sandbox.
            token: the new control token; ``None`` makes a fresh one.

        Returns:
            The new handle: same id, network and egress proxy; new address and token.

        Raises:
            HostFirewallError: the host guard could not reinstall the slot's rule.
            BackendError: the engine refused.
        """
        return await asyncio.to_thread(self._recreate, handle, token)

    async def destroy(self, sandbox_id: str) -> None:
        """Remove every container, network and volume labelled ``deskpod.sandbox=<sandbox_id>``,
        then the host firewall rule of the slot's bridge.

        Raises:
            BackendError: something could not be removed (the rest is removed;
                ``detail["failures"]`` lists what remains).
        """
        await asyncio.to_thread(self._destroy, sandbox_id)

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = READY_TIMEOUT_S) -> Readiness:
        """Poll ``GET /healthz`` from the host every :data:`READY_POLL_S` seconds until 200.

        Args:
            handle: the sandbox.
            timeout_s: how long to wait, seconds.

        Returns:
            Attempts, time taken (seconds) and the last status.

        Raises:
            SandboxNotReadyError: not ready within ``timeout_s``.
            BackendError: the container stopped (``reason`` ``"exited"``; the message
                carries its last 20 log lines) or the engine failed.
        """
        return await asyncio.to_thread(self._wait_ready, handle, timeout_s)

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        """True when the sandbox and its egress proxy run and ``/healthz`` answers 200.

        Raises:
            BackendError: the engine failed.
        """
        return await asyncio.to_thread(self._is_healthy, handle)

    async def failure(self, handle: SandboxHandle) -> str | None:
        """Why the sandbox is not usable: ``"oom_killed"`` (Docker's ``State.OOMKilled``),
        ``"exited (code N)"``, ``"missing"``, ``"egress proxy stopped"``,
        ``"unhealthy (/healthz ...)"``; ``None`` when it is healthy.

        Raises:
            BackendError: the engine failed.
        """
        return await asyncio.to_thread(self._failure, handle)

    async def list_ids(self, pool: str | None = None) -> list[str]:
        """Ids found on containers, networks and volumes labelled ``deskpod.sandbox``, optionally of one pool.

        Raises:
            BackendError: the engine failed.
        """
        return await asyncio.to_thread(self._list_ids, pool)
