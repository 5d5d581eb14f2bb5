"""The controller service (``deskpod serve``) on a free loopback port, for tests.

``running_service`` starts a :class:`deskpod.service.server.service_state.ControllerService` that
accepts ``token`` for agents and ``approver_token`` for approvers (the service keeps
only their SHA-256), applies the operator's ``policy`` and writes its audit logs under
``audit_dir``, serves it with :func:`deskpod.service.server.app.serve` and yields the port
once the service listens; leaving the block stops it. Given ``console_users``, it serves
the web console too, for those users, at ``http://127.0.0.1:<port>`` (and ``localhost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from deskpod.client.snapshot_store import SnapshotStore
from deskpod.service.console.auth import ConsoleSettings, ConsoleUser, default_origins
from deskpod.controller.credentials import SecretStore
from deskpod.controller.policy.policy_file import Policy
from deskpod.service.server.app import serve
from deskpod.service.server.metrics_settings import MetricsSettings
from deskpod.service.server.service_state import ControllerService

__all__ = ["free_port", "running_service"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def running_service(token: str, audit_dir: Path, *, approver_token: str | None = None,
                          policy: Policy | None = None, start_timeout_s: float = 10.0,
                          secrets: SecretStore | None = None, sandboxes: frozenset[str] = frozenset(),
                          console_users: tuple[ConsoleUser, ...] | None = None,
                          snapshots: SnapshotStore | None = None,
                          pool_state_dir: Path | None = None,
                          metrics: MetricsSettings | None = None) -> AsyncIterator[int]:
    """Serve a controller service on 127.0.0.1 for the duration of the block.

    Args:
        token: the bearer token agents' connections must present.
        audit_dir: where the service writes its audit logs.
        approver_token: the approver connections' token (``None``: no approvers).
        policy: the operator's policy (default :class:`Policy`).
        start_timeout_s: how long to wait for the service to listen.
        secrets: the host-held secrets ``type_secret`` may type (default none).
        sandboxes: the entries of ``DESKPOD_SERVE_SANDBOXES``: the sandbox URLs the service vouches
            for, and the named ones it owns (default none: no session types a secret or asks for a
            credential, none is opened by name).
        console_users: serve the web console for these users (``None``: no console).
        snapshots: the store ``open.restore`` names snapshots in (``None``: none).
        pool_state_dir: the pools' state folder, for ``NAME=pool:POOL`` entries (``None``: the default).
        metrics: count and serve the service's metrics so (``None``: no metrics).

    Yields:
        The port it listens on (``ws://127.0.0.1:<port>/v1/controller``).

    Raises:
        TimeoutError: the service did not listen within ``start_timeout_s``.
    """
    approver = hashlib.sha256(approver_token.encode()).hexdigest() if approver_token is not None else None
    service = ControllerService(hashlib.sha256(token.encode()).hexdigest(), audit_dir=str(audit_dir),
                                policy=policy or Policy(), approver_token_sha256=approver,
                                secrets=secrets or SecretStore(), sandboxes=sandboxes, snapshots=snapshots,
                                pool_state_dir=pool_state_dir)
    port = free_port()
    ready = asyncio.Event()
    console = None if console_users is None else ConsoleSettings(console_users, default_origins("127.0.0.1", port))
    server = asyncio.create_task(serve(service, "127.0.0.1", port, ready, console=console, metrics=metrics))
    try:
        await asyncio.wait_for(ready.wait(), start_timeout_s)
        yield port
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
