"""A backend on Kubernetes: sandboxes are agent-sandbox claims on a warm pool.

The cluster runs deskpod's manifests (``deploy/kubernetes``): a ``SandboxWarmPool``
keeps ready pods of the ``deskpod-sandbox`` ``SandboxTemplate``, whose daemons accept
only the *bootstrap token* (a Secret mounted read-only in the sandbox container),
so a warm pod is of no use to anyone but the controller.

- :meth:`KubernetesBackend.create` creates a ``SandboxClaim``
  (``extensions.agents.x-k8s.io/v1beta1``) on the warm pool, labelled with the
  sandbox id and pool, with a server-side shutdown time
  (``spec.lifecycle.shutdownTime``, policy ``Delete``) as a dead-man switch: a claim
  whose controller died is deleted by agent-sandbox at that time. The time is
  :attr:`KubernetesBackendConfig.claim_lifetime_s` after creation, then moved with the
  sandbox's lease (:meth:`KubernetesBackend.renew`, a merge patch of that one field):
  the pool renews it while its holder lives (:meth:`deskpod.backend.pool.SandboxPool.renewing`),
  so a crashed controller's claims go within a lease (60 s), and a long run keeps its own. It waits until the
  claim's ``Ready`` condition is ``True`` and its ``status.sandbox.podIPs`` names the
  pod, then **adopts** the pod over the daemon channel: connects with the bootstrap
  token and resets it in place under the run's own token
  (:func:`deskpod.client.reset_and_reconnect`). Per-task data and tokens never go
  into the claim (the template refuses injected environment variables), so a warm
  pod serves the claim without a cold start.
- :meth:`KubernetesBackend.recreate` deletes the claim and claims a fresh pod; this
  is the default way to release a sandbox (a pool with ``reset_mode="recreate"``);
  ``in_place`` resets work as on Docker.
- :meth:`KubernetesBackend.destroy` deletes the sandbox's claims.

The controller reaches a pod at its pod IP (the network policies admit only the
controller to port 8765); clients never reach pods directly. The Kubernetes API is
called with the official ``kubernetes`` client (blocking, run in a thread).

**Egress.** One egress proxy serves every pod (its multi-tenant mode,
``DESKPOD_EGRESS_MODE=tenants``), so each sandbox is a *tenant* of it
(:class:`~deskpod.backend.egress_tenants.EgressTenants`): once adopted, the backend
registers the pod (tenant id: its claim's name) with its pod IPs (the identity: the
CNI and the network policies make a pod's source address hard to forge), its daemon's
address (where the proxy checks the pod's egress grants) and the run's allowlist
(:attr:`KubernetesBackendConfig.egress_allowlist`); the handle names the tenant
(``egress_tenant``), so each task's narrower list goes to that tenant alone
(:func:`deskpod.controller.egress.egress_control_of`). Release and destroy remove the
tenant before they delete the claim: its next request is refused. A sandbox whose
tenant the proxy no longer holds (a restarted proxy) is a failure (:meth:`KubernetesBackend.failure`),
so the pool replaces it by a fresh, registered one. Without
:attr:`KubernetesBackendConfig.egress_control_url` nothing is registered, and the
shared proxy refuses the pods everything.

Source: agent-sandbox's CRDs, v0.5.6 (https://github.com/kubernetes-sigs/agent-sandbox).
Durations are float seconds.
"""

from __future__ import annotations

import asyncio
import datetime
import http.client
import logging
import math
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from deskpod.backend.base import READY_TIMEOUT_S, Backend, Readiness, SandboxHandle
from deskpod.backend.config import DAEMON_PORT, EGRESS_CONTROL_PORT, LABEL_POOL, LABEL_SANDBOX, new_sandbox_id
from deskpod.backend.egress_tenants import EgressTenants
from deskpod.backend.lease import LEASE_S
from deskpod.client import SandboxClient, reset_and_reconnect
from deskpod.errors import BackendError, DeskpodError, SandboxNotReadyError

__all__ = [
    "CLAIM_GROUP",
    "CLAIM_PLURAL",
    "CLAIM_VERSION",
    "KubernetesBackend",
    "KubernetesBackendConfig",
    "claim_body",
    "claim_endpoint",
    "claim_pod_ips",
    "shutdown_time",
]

log = logging.getLogger(__name__)

CLAIM_GROUP: Final = "extensions.agents.x-k8s.io"
CLAIM_VERSION: Final = "v1beta1"
CLAIM_PLURAL: Final = "sandboxclaims"
_POLL_S: Final = 0.2
_ADOPT_CONNECT_TIMEOUT_S: Final = 30.0
_T = TypeVar("_T")


@dataclass(frozen=True)
class KubernetesBackendConfig:
    """Where the backend claims sandboxes, and with what.

    Attributes:
        namespace: the namespace of deskpod's manifests.
        warm_pool: the ``SandboxWarmPool`` claims name.
        bootstrap_token: the token warm pods accept until adopted (the Secret
            ``deskpod-bootstrap``); never logged.
        api_url: the API server's URL; ``None``: the pod's in-cluster configuration,
            else the user's kubeconfig.
        claim_lifetime_s: how long a new claim may live before agent-sandbox deletes it
            (the dead-man switch), seconds, unless the pool renews it first (at acquire, and
            every third of a lease under :meth:`~deskpod.backend.pool.SandboxPool.renewing`).
        name_prefix: the claims' name prefix.
        egress_control_url: the shared egress proxy's control endpoint,
            ``http://HOST:3129`` (the manifests: ``http://deskpod-egress:3129``); ``None``:
            no tenant is registered (the proxy then refuses the pods everything).
        egress_control_token: its token (the Secret ``deskpod-egress-control``, key
            ``token``); never logged.
        egress_allowlist: the run's allowlist each adopted sandbox is registered with
            (inside the proxy's ``DESKPOD_EGRESS_ALLOWLIST``; a domain allows its subdomains).
    """

    namespace: str = "deskpod"
    warm_pool: str = "deskpod"
    bootstrap_token: str = field(default="", repr=False)
    api_url: str | None = None
    claim_lifetime_s: float = LEASE_S
    name_prefix: str = "deskpod"
    egress_control_url: str | None = None
    egress_control_token: str = field(default="", repr=False)
    egress_allowlist: tuple[str, ...] = ("demo.test",)


def claim_body(config: KubernetesBackendConfig, name: str, sandbox_id: str, pool: str,
               now: datetime.datetime) -> dict[str, Any]:
    """The ``SandboxClaim`` the backend creates for one sandbox.

    Args:
        config: the backend configuration.
        name: the claim's name.
        sandbox_id: deskpod's sandbox id (label ``deskpod.sandbox``).
        pool: the deskpod pool name (label ``deskpod.pool``), ``""`` for none.
        now: the current time (UTC), from which the shutdown time is computed.

    Returns:
        The object as a JSON-ready dict: labels, ``warmPoolRef`` and ``lifecycle``;
        no environment (per-task data goes over the daemon channel).
    """
    return {
        "apiVersion": f"{CLAIM_GROUP}/{CLAIM_VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": config.namespace,
                     "labels": {LABEL_SANDBOX: sandbox_id, LABEL_POOL: pool}},
        "spec": {
            "warmPoolRef": {"name": config.warm_pool},
            "lifecycle": {"shutdownPolicy": "Delete",
                          "shutdownTime": shutdown_time(now.timestamp() + config.claim_lifetime_s)},
        },
    }


def shutdown_time(expires_at: float) -> str:
    """A claim's ``spec.lifecycle.shutdownTime`` for an expiry of ``expires_at`` (epoch
    seconds): RFC 3339 in UTC, rounded up to the second (never before the lease ends)."""
    moment = datetime.datetime.fromtimestamp(math.ceil(expires_at), datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def claim_endpoint(claim: dict[str, Any]) -> tuple[str, str] | None:
    """The bound sandbox's name and pod IP once the claim is ready, else ``None``.

    A claim is ready when its ``Ready`` condition is ``True`` and its status names a
    sandbox with at least one pod IP. The claim comes from the API server, which the
    controller trusts; the IP is still checked to be an address, not a URL part.
    """
    status = claim.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    sandbox = status.get("sandbox") or {}
    ips = [ip for ip in sandbox.get("podIPs") or [] if isinstance(ip, str)]
    if not ready or not ips or not sandbox.get("name"):
        return None
    ip = ips[0]
    if not all(ch in "0123456789abcdef.:" for ch in ip.lower()):
        raise BackendError(f"claim {claim['metadata']['name']} reports a pod IP that is not an address: {ip!r}",
                           detail={"reason": "state"})
    return str(sandbox["name"]), ip


def claim_pod_ips(claim: dict[str, Any]) -> list[str]:
    """Every pod IP a ready claim's status names (a dual-stack pod has two), each checked
    to be an address (see :func:`claim_endpoint`)."""
    sandbox = (claim.get("status") or {}).get("sandbox") or {}
    ips = [ip for ip in sandbox.get("podIPs") or [] if isinstance(ip, str)]
    for ip in ips:
        if not ip or not all(ch in "0123456789abcdef.:" for ch in ip.lower()):
            raise BackendError(f"claim {claim['metadata']['name']} reports a pod IP that is not an address: {ip!r}",
                               detail={"reason": "state"})
    return ips


class KubernetesBackend(Backend):
    """Sandboxes as agent-sandbox claims (see the module docstring).

    Args:
        config: where and how to claim.
        api: a ``kubernetes.client.CustomObjectsApi``; ``None``: one made from
            ``config.api_url`` or the environment's configuration.

    Raises:
        BackendError: no bootstrap token, or ``egress_control_url`` is not
            ``http://HOST[:3129]`` with a token (``detail["reason"] == "config"``).
    """

    def __init__(self, config: KubernetesBackendConfig, *, api: Any | None = None) -> None:
        if not config.bootstrap_token:
            raise BackendError("the Kubernetes backend needs the warm pods' bootstrap token",
                               detail={"reason": "config"})
        self.config = config
        self._api = api
        self._generation: dict[str, int] = {}
        self._tenants: EgressTenants | None = None
        self._egress_host = ""
        if config.egress_control_url is not None:
            parts = urllib.parse.urlsplit(config.egress_control_url)
            try:
                port = parts.port
                self._tenants = EgressTenants(config.egress_control_url, config.egress_control_token)
            except ValueError as exc:
                raise BackendError(f"egress_control_url: {exc}", detail={"reason": "config"}) from exc
            if port not in (None, EGRESS_CONTROL_PORT):
                raise BackendError(f"egress_control_url: the control endpoint's port is {EGRESS_CONTROL_PORT}",
                                   detail={"reason": "config"})
            self._egress_host = parts.hostname or ""

    @property
    def api(self) -> Any:
        """The ``CustomObjectsApi`` (made on first use)."""
        if self._api is None:
            from kubernetes import client, config

            if self.config.api_url:
                configuration = client.Configuration()
                configuration.host = self.config.api_url
                self._api = client.CustomObjectsApi(client.ApiClient(configuration))
            else:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
                self._api = client.CustomObjectsApi()
        return self._api

    async def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        from kubernetes.client import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except ApiException as exc:
            raise BackendError(f"Kubernetes API: {what}: {exc.status} {exc.reason}",
                               detail={"reason": "platform", "status": exc.status}) from exc
        except (OSError, HTTPError) as exc:  # urllib3's: an API server that cannot be reached (MaxRetryError)
            raise BackendError(f"Kubernetes API: {what}: {exc}", detail={"reason": "platform"}) from exc

    def _claim_name(self, sandbox_id: str) -> str:
        return f"{self.config.name_prefix}-{sandbox_id}-{self._generation.get(sandbox_id, 0)}"

    async def _claim(self, sandbox_id: str, pool: str) -> str:
        self._generation[sandbox_id] = self._generation.get(sandbox_id, -1) + 1
        name = self._claim_name(sandbox_id)
        body = claim_body(self.config, name, sandbox_id, pool, datetime.datetime.now(datetime.UTC))
        await self._call(f"creating claim {name}", self.api.create_namespaced_custom_object,
                         CLAIM_GROUP, CLAIM_VERSION, self.config.namespace, CLAIM_PLURAL, body)
        return name

    async def _get_claim(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client import ApiException

        try:
            return dict(await asyncio.to_thread(self.api.get_namespaced_custom_object, CLAIM_GROUP, CLAIM_VERSION,
                                                self.config.namespace, CLAIM_PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BackendError(f"Kubernetes API: reading claim {name}: {exc.status} {exc.reason}",
                               detail={"reason": "platform", "status": exc.status}) from exc

    async def _bound(self, name: str, timeout_s: float) -> tuple[str, str, list[str]]:
        deadline = time.monotonic() + timeout_s
        while True:
            claim = await self._get_claim(name)
            if claim is None:
                raise BackendError(f"claim {name} disappeared before it was ready", detail={"reason": "exited"})
            endpoint = claim_endpoint(claim)
            if endpoint is not None:
                return endpoint[0], endpoint[1], claim_pod_ips(claim)
            if time.monotonic() >= deadline:
                raise SandboxNotReadyError(f"claim {name} not ready within {timeout_s:g} s",
                                           detail={"attempts": 0, "last_status": "claim pending"})
            await asyncio.sleep(_POLL_S)

    async def _adopt(self, handle: SandboxHandle) -> SandboxHandle:
        """Reset the claimed pod under a fresh run token: the bootstrap token stops working."""
        try:
            client = await SandboxClient.connect(handle.url, self.config.bootstrap_token,
                                                 timeout_s=_ADOPT_CONNECT_TIMEOUT_S)
            token, _, fresh = await reset_and_reconnect(client, None, connect_timeout_s=_ADOPT_CONNECT_TIMEOUT_S)
            await fresh.close()
        except DeskpodError as exc:
            raise BackendError(f"adopting sandbox {handle.container} at {handle.address}: {exc.message}",
                               detail={"reason": "state"}) from exc
        return SandboxHandle(id=handle.id, container=handle.container, network="", egress="",
                             address=handle.address, token=token, pool=handle.pool, claim=handle.claim)

    async def _register(self, handle: SandboxHandle, pod_ips: list[str]) -> SandboxHandle:
        """Make the adopted pod a tenant of the shared egress proxy (see the module docstring)."""
        if self._tenants is None:
            return handle
        # A pod's containers share its addresses: the browser's and the workspace's are one.
        await self._tenants.register(handle.claim, addresses=pod_ips, browser_addresses=pod_ips,
                                     daemon=f"{handle.address}:{DAEMON_PORT}",
                                     allowed_domains=self.config.egress_allowlist)
        return SandboxHandle(id=handle.id, container=handle.container, network="", egress="",
                             address=handle.address, token=handle.token, pool=handle.pool, claim=handle.claim,
                             egress_address=self._egress_host, egress_token=self.config.egress_control_token,
                             egress_tenant=handle.claim)

    async def _unregister(self, claim: str) -> None:
        if self._tenants is not None:
            await self._tenants.remove(claim)

    async def _claim_and_adopt(self, sandbox_id: str, pool: str) -> SandboxHandle:
        name = await self._claim(sandbox_id, pool)
        try:
            pod, address, pod_ips = await self._bound(name, READY_TIMEOUT_S)
            bound = SandboxHandle(id=sandbox_id, container=pod, network="", egress="", address=address,
                                  token=self.config.bootstrap_token, pool=pool, claim=name)
            handle = await self._register(await self._adopt(bound), pod_ips)
        except BaseException:
            await self._release_claim(name)
            raise
        log.info("claimed sandbox %s: pod %s at %s (claim %s)", sandbox_id, pod, address, name)
        return handle

    async def _release_claim(self, name: str) -> None:
        """Remove the claim's tenant from the egress proxy (its access ends), then delete it."""
        try:
            await self._unregister(name)
        finally:
            await self._delete_claim(name)

    async def _delete_claim(self, name: str) -> None:
        from kubernetes.client import ApiException

        try:
            await asyncio.to_thread(self.api.delete_namespaced_custom_object, CLAIM_GROUP, CLAIM_VERSION,
                                    self.config.namespace, CLAIM_PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise BackendError(f"Kubernetes API: deleting claim {name}: {exc.status} {exc.reason}",
                                   detail={"reason": "platform", "status": exc.status}) from exc

    async def _claims(self, selector: str) -> list[dict[str, Any]]:
        listed = await self._call("listing claims", self.api.list_namespaced_custom_object, CLAIM_GROUP,
                                  CLAIM_VERSION, self.config.namespace, CLAIM_PLURAL, label_selector=selector)
        return [dict(item) for item in listed.get("items", [])]

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        """Claim a warm pod and adopt it (see the module docstring); ready when it returns.

        ``token`` is ignored: the adoption makes a fresh one, which the returned handle
        holds. Raises :class:`BackendError` when the API refuses, adoption fails or the
        egress proxy refuses the tenant (:class:`~deskpod.errors.EgressControlError`); the
        claim is then deleted. :class:`SandboxNotReadyError` when the claim is not bound
        within :data:`READY_TIMEOUT_S`.
        """
        return await self._claim_and_adopt(new_sandbox_id(), pool)

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        """Remove the sandbox's egress tenant, delete its claim and claim a fresh pod under the
        same sandbox id."""
        await self._release_claim(handle.claim)
        return await self._claim_and_adopt(handle.id, handle.pool)

    async def destroy(self, sandbox_id: str) -> None:
        """Delete every claim labelled with ``sandbox_id``, each one's egress tenant first."""
        for claim in await self._claims(f"{LABEL_SANDBOX}={sandbox_id}"):
            if (claim.get("metadata", {}).get("labels") or {}).get(LABEL_SANDBOX) == sandbox_id:
                await self._release_claim(claim["metadata"]["name"])
        self._generation.pop(sandbox_id, None)

    async def _healthz(self, handle: SandboxHandle) -> int | None:
        def probe() -> int | None:
            connection = http.client.HTTPConnection(handle.address, DAEMON_PORT, timeout=3)
            try:
                connection.request("GET", "/healthz")
                return connection.getresponse().status
            except OSError:
                return None
            finally:
                connection.close()

        return await asyncio.to_thread(probe)

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = READY_TIMEOUT_S) -> Readiness:
        """Wait until the claim is still bound and the daemon's ``/healthz`` answers 200."""
        started = time.monotonic()
        attempts = 0
        status = "not probed"
        while True:
            attempts += 1
            claim = await self._get_claim(handle.claim)
            if claim is None:
                raise BackendError(f"claim {handle.claim} is gone", detail={"reason": "exited"})
            code = await self._healthz(handle)
            status = f"claim bound, /healthz {code}" if code is not None else "claim bound, daemon not answering"
            if code == 200:
                return Readiness(attempts=attempts, elapsed_s=time.monotonic() - started, last_status=status)
            if time.monotonic() - started >= timeout_s:
                raise SandboxNotReadyError(f"sandbox {handle.id} not ready within {timeout_s:g} s",
                                           detail={"attempts": attempts, "last_status": status})
            await asyncio.sleep(_POLL_S)

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        """True when the claim is bound and the daemon's ``/healthz`` answers 200."""
        claim = await self._get_claim(handle.claim)
        return claim is not None and claim_endpoint(claim) is not None and await self._healthz(handle) == 200

    async def failure(self, handle: SandboxHandle) -> str | None:
        """``"unhealthy"`` (see :meth:`is_healthy`), ``"egress tenant missing"`` when the shared
        egress proxy no longer holds the sandbox's tenant (a restarted proxy refuses it
        everything, so the pool replaces it by a fresh claim, registered anew), else ``None``.

        Raises:
            BackendError: the Kubernetes API or the proxy's control endpoint failed.
        """
        if not await self.is_healthy(handle):
            return "unhealthy"
        if self._tenants is not None and handle.egress_tenant and await self._tenants.get(handle.egress_tenant) is None:
            return "egress tenant missing"
        return None

    async def renew(self, handle: SandboxHandle, expires_at: float) -> None:
        """Move the claim's shutdown time to ``expires_at`` (epoch seconds, rounded up to the
        second): a merge patch of ``spec.lifecycle.shutdownTime``, the RBAC verb ``patch`` on
        ``sandboxclaims``.

        Raises:
            BackendError: the API refused (``status`` 404: the claim is gone, e.g. agent-sandbox
                deleted it at its shutdown time).
        """
        body = {"spec": {"lifecycle": {"shutdownTime": shutdown_time(expires_at)}}}
        await self._call(f"renewing claim {handle.claim}", self.api.patch_namespaced_custom_object, CLAIM_GROUP,
                         CLAIM_VERSION, self.config.namespace, CLAIM_PLURAL, handle.claim, body)

    async def list_ids(self, pool: str | None = None) -> list[str]:
        """The sandbox ids of this namespace's deskpod claims, optionally of one pool."""
        selector = LABEL_SANDBOX if pool is None else f"{LABEL_SANDBOX},{LABEL_POOL}={pool}"
        ids = []
        for claim in await self._claims(selector):
            labels = claim.get("metadata", {}).get("labels") or {}
            if LABEL_SANDBOX in labels and (pool is None or labels.get(LABEL_POOL) == pool):
                ids.append(labels[LABEL_SANDBOX])
        return sorted(set(ids))
