"""One call that starts a sandbox for this process: :meth:`DockerSandbox.create`.

Like E2B's ``Sandbox.create()`` (https://e2b.dev/docs):
the Docker backend (:class:`~deskpod.backend.docker_backend.DockerBackend`) creates a slot
(its own internal network, egress proxy, workspace and sandbox containers, the host
firewall rule), waits until the daemon answers ``/healthz``, and connects with the fresh
control token; the handle is a :class:`~deskpod.client.Sandbox` with every verb, whose
:meth:`~DockerSandbox.close` (or the end of ``async with``) also removes the slot.

The daemon is reached at the container's address on the slot's network, which the Docker
host routes to on Linux (not on Docker Desktop, whose containers live in a VM: there use
the compose stack's controller service, :func:`deskpod.attach`).
"""

from __future__ import annotations

import asyncio
import logging

from deskpod.backend.base import READY_TIMEOUT_S, Backend, SandboxHandle
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.docker_backend import DockerBackend
from deskpod.client import Sandbox, SandboxClient
from deskpod.client.wire import CONNECT_TIMEOUT_S

__all__ = ["DockerSandbox"]

log = logging.getLogger(__name__)


class DockerSandbox(Sandbox):
    """A :class:`~deskpod.client.Sandbox` this process created; closing it removes it.

    Make one with :meth:`create`. Everything of :class:`~deskpod.client.Sandbox` works
    (its :meth:`~deskpod.client.Sandbox.reset` resets it in place with a new token).

    Args:
        client: the open connection to its daemon.
        token: the control token it was opened with.
        backend: the backend that created it (and removes it).
        handle: the backend's handle on it.

    Example::

        async with await DockerSandbox.create() as sb:
            await sb.navigate("http://demo.test/")
            png = await sb.screenshot()
        # the sandbox, its proxy and its network are gone here
    """

    def __init__(self, client: SandboxClient, token: str, *, backend: Backend, handle: SandboxHandle) -> None:
        super().__init__(client, token)
        self.backend = backend
        """The backend that created the sandbox."""
        self.handle = handle
        """The backend's handle (``handle.id`` names every resource of the slot)."""

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id (the label ``deskpod.sandbox`` on its containers and network)."""
        return self.handle.id

    @classmethod
    async def create(cls, config: DockerBackendConfig | None = None, *, ready_timeout_s: float = READY_TIMEOUT_S,
                     connect_timeout_s: float = CONNECT_TIMEOUT_S) -> DockerSandbox:
        """Start a sandbox on the local Docker engine and connect to it.

        Args:
            config: images, allowlist, screen size...; ``None``:
                :meth:`~deskpod.backend.config.DockerBackendConfig.from_env` (the ``DESKPOD_*``
                variables, e.g. ``DESKPOD_EGRESS_ALLOWLIST``, ``DESKPOD_SCREEN_SIZE``).
            ready_timeout_s: how long the sandbox may take to answer its health check, seconds.
            connect_timeout_s: how long the connection may take once it does, seconds.

        Returns:
            The handle, connected; ``close()`` (or leaving ``async with``) removes the sandbox.

        Raises:
            BackendError: the docker SDK is missing, the engine is unreachable, an image is
                missing (build them with ``scripts/compose.sh build``) or the sandbox stopped
                while starting; nothing is left behind.
            HostFirewallError: the host firewall rule could not be installed.
            SandboxNotReadyError: not ready within ``ready_timeout_s`` (it is removed).
            SandboxError: no connection within ``connect_timeout_s`` (it is removed).
        """
        backend = DockerBackend(config)
        handle = await backend.create()
        try:
            await backend.wait_ready(handle, ready_timeout_s)
            client = await SandboxClient.connect(handle.url, handle.token, timeout_s=connect_timeout_s)
        except BaseException:
            await asyncio.shield(backend.destroy(handle.id))
            raise
        log.info("sandbox %s created for this process at %s", handle.id, handle.url)
        return cls(client, handle.token, backend=backend, handle=handle)

    async def close(self) -> None:
        """Close the connection and remove the sandbox (its containers, network and firewall rule).

        Raises:
            BackendError: something could not be removed (``detail["failures"]`` lists it).
        """
        try:
            await super().close()
        finally:
            await asyncio.shield(self.backend.destroy(self.handle.id))
