"""The interface every sandbox backend implements, and the values it hands out.

A backend creates, recreates and destroys sandboxes and waits until one is
ready; it does not speak the sandbox's protocol (that is :mod:`deskpod.client`)
and it does not decide when to reset (that is :mod:`deskpod.backend.pool`).
Methods are async; a backend whose SDK blocks (docker-py) runs it in a thread.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from deskpod.backend.config import DAEMON_PORT, EGRESS_CONTROL_PORT

__all__ = ["Backend", "READY_TIMEOUT_S", "Readiness", "SandboxHandle"]

READY_TIMEOUT_S = 120.0
"""Default time a sandbox may take to become ready after its container starts, seconds."""


@dataclass(frozen=True)
class SandboxHandle:
    """One sandbox as a backend knows it.

    Attributes:
        id: the sandbox id (label ``deskpod.sandbox`` on all its resources).
        container: the sandbox container's name.
        network: its slot network's name (``internal: true``).
        egress: the slot's egress proxy container's name.
        address: the sandbox's IPv4 address on the slot network (reachable from
            the Docker host).
        token: the control token; the sandbox holds only its SHA-256. Never
            logged or shown in ``repr``.
        pool: the pool it belongs to, ``""`` for none.
        egress_address: the slot's egress proxy's IPv4 address on the slot network
            (reachable from the Docker host), ``""`` if unknown.
        egress_token: the slot's egress control token; the proxy holds only its
            SHA-256, the sandbox and workspace containers nothing. Never logged or
            shown in ``repr``; ``""``: the proxy's control endpoint is off.
        egress_lessee: the token a pool lease hands its holder for the slot's proxy: it may
            only read and set the run's allowlist, and every reset replaces it
            (:mod:`deskpod.backend.egress_lessee`); ``""``: none in force. Never shown in ``repr``.
        claim: the ``SandboxClaim`` that holds the sandbox (Kubernetes backend),
            ``""`` for other backends.
        egress_tenant: the sandbox's tenant id on a shared (multi-tenant) egress proxy
            (Kubernetes backend), ``""``: the proxy is the sandbox's own.
    """

    id: str
    container: str
    network: str
    egress: str
    address: str
    token: str = field(repr=False)
    pool: str = ""
    egress_address: str = ""
    egress_token: str = field(default="", repr=False)
    claim: str = ""
    egress_tenant: str = ""
    egress_lessee: str = field(default="", repr=False)

    @property
    def egress_control_url(self) -> str:
        """The slot's egress control endpoint, ``http://EGRESS_ADDRESS:3129`` (``""``: none)."""
        return f"http://{self.egress_address}:{EGRESS_CONTROL_PORT}" if self.egress_address else ""

    @property
    def url(self) -> str:
        """The daemon's websocket URL, ``ws://ADDRESS:8765/v1/ws``."""
        return f"ws://{self.address}:{DAEMON_PORT}/v1/ws"

    @property
    def health_url(self) -> str:
        """The daemon's health endpoint, ``http://ADDRESS:8765/healthz``."""
        return f"http://{self.address}:{DAEMON_PORT}/healthz"


@dataclass(frozen=True)
class Readiness:
    """The outcome of a successful readiness wait.

    Attributes:
        attempts: health probes made, the successful one included.
        elapsed_s: time from the start of the wait to readiness, seconds.
        last_status: the last observed status, e.g. ``"running, /healthz 200"``.
    """

    attempts: int
    elapsed_s: float
    last_status: str


class Backend(abc.ABC):
    """Creates, recreates and destroys sandboxes; one implementation per platform."""

    @abc.abstractmethod
    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        """Create and start a sandbox with its own network slot and egress proxy.

        Args:
            token: the control token; ``None`` makes a fresh one.
            pool: the pool name recorded on its resources.

        Returns:
            The handle; the sandbox is started, not necessarily ready
            (see :meth:`wait_ready`).

        Raises:
            BackendError: the platform refused; whatever was created is removed.
        """

    @abc.abstractmethod
    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        """Replace the sandbox container with a fresh one in the same slot.

        Args:
            handle: the sandbox to recreate.
            token: the new control token; ``None`` makes a fresh one.

        Returns:
            The new handle (same id, network and egress; new address and token).

        Raises:
            BackendError: the platform refused.
        """

    @abc.abstractmethod
    async def destroy(self, sandbox_id: str) -> None:
        """Remove every container and network labelled with ``sandbox_id``.

        Raises:
            BackendError: the platform refused (what could be removed is removed).
        """

    @abc.abstractmethod
    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = READY_TIMEOUT_S) -> Readiness:
        """Wait until the sandbox's daemon answers its health check.

        Args:
            handle: the sandbox.
            timeout_s: how long to wait, seconds.

        Returns:
            The attempts made, the time taken and the last status.

        Raises:
            SandboxNotReadyError: not ready within ``timeout_s``; ``detail`` has
                ``attempts`` and ``last_status``.
            BackendError: the container stopped (``detail["reason"] == "exited"``,
                with its last log lines) or the platform failed.
        """

    @abc.abstractmethod
    async def is_healthy(self, handle: SandboxHandle) -> bool:
        """One quick probe: True when the container runs and ``/healthz`` answers 200."""

    async def failure(self, handle: SandboxHandle) -> str | None:
        """Why the sandbox is not usable, or ``None`` when it is healthy.

        Returns:
            A short reason: ``"oom_killed"`` (the kernel's OOM killer ended the
            container), ``"exited (code N)"``, ``"missing"``, or ``"unhealthy"`` (a
            backend that cannot tell more says only this).

        Raises:
            BackendError: the platform failed.
        """
        return None if await self.is_healthy(handle) else "unhealthy"

    async def renew(self, handle: SandboxHandle, expires_at: float) -> None:
        """Keep the sandbox alive until at least ``expires_at`` (epoch seconds), the end of its
        lease (:mod:`deskpod.backend.lease`): a backend whose sandboxes outlive their holder only
        while renewed (a Kubernetes claim's shutdown time) moves that time here. The default does
        nothing: a Docker sandbox lives until the pool removes it.

        Raises:
            BackendError: the platform refused (e.g. the claim is gone).
        """
        return None

    @abc.abstractmethod
    async def list_ids(self, pool: str | None = None) -> list[str]:
        """The ids of the sandboxes this backend's resources carry, optionally of one pool.

        Raises:
            BackendError: the platform failed.
        """
