"""Leasing sandboxes of a warm pool from a process that does not own the pool.

``deskpod pool up`` keeps the pool's state in a state file (:class:`~deskpod.backend.PoolStateFile`);
``deskpod mcp --pool`` and ``deskpod serve`` (a ``NAME=pool:POOL`` entry of
``DESKPOD_SERVE_SANDBOXES``) lease one of its sandboxes for each session, as ``deskpod pool
acquire`` / ``release`` do, under the state file's lock. :class:`PoolLeases` holds the
leases it took: it renews each in the background every third of ``DESKPOD_POOL_LEASE_S``
until its release, so when the process dies the pool takes the sandbox back within a lease
(:mod:`deskpod.backend.lease`), and a release resets the sandbox (a new token) and makes it idle.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deskpod.backend.base import Backend
from deskpod.backend.lease import keep_renewing
from deskpod.backend.pool import SandboxPool
from deskpod.backend.pool_state import PoolStateFile
from deskpod.errors import BackendError

__all__ = ["PoolLease", "PoolLeases"]


@dataclass(frozen=True)
class PoolLease:
    """A sandbox leased from a pool: its daemon's ``url`` and ``token``, its ``sandbox_id``, the
    pool's ``lease_id`` (its release names it) and its slot's egress proxy control
    (``{"url", "token"[, "tenant"]}``, ``None``: the slot has none)."""

    url: str
    token: str
    sandbox_id: str
    lease_id: str
    egress_control: dict[str, str] | None = None


def _docker(config: Any) -> Backend:
    from deskpod.backend.docker_backend import DockerBackend

    return DockerBackend(config)


@dataclass
class PoolLeases:
    """Leases of the pool ``name`` (state in ``state_dir``; ``None``: the default folder).

    ``backend``: makes the pool's backend from its recorded configuration (``None``: the
    Docker backend). ``lease_s``: a lease's length in seconds (``None``: ``DESKPOD_POOL_LEASE_S``).
    """

    name: str
    state_dir: Path | None = None
    backend: Callable[[Any], Backend] | None = None
    lease_s: float | None = None
    _renewals: dict[str, AsyncExitStack] = field(default_factory=dict, repr=False)

    def _open(self) -> tuple[PoolStateFile, Any, SandboxPool]:
        from deskpod.client.snapshot_store import SnapshotStore

        state = PoolStateFile(self.name, self.state_dir)
        record = state.load()
        if record is None:
            raise BackendError(f"no pool {self.name!r} (start one with `deskpod pool up`)",
                               detail={"reason": "config"})
        snapshot = SnapshotStore(state.directory / "snapshots").load(record.snapshot) if record.snapshot else None
        pool = SandboxPool((self.backend or _docker)(record.backend), name=record.name, size=record.size,
                           reset_mode=record.reset_mode, start_url=record.start_url, snapshot=snapshot,
                           members=record.to_members(), lease_s=self._lease_s())
        return state, record, pool

    def _lease_s(self) -> float:
        if self.lease_s is not None:
            return self.lease_s
        from deskpod.settings import get_settings

        return get_settings().pool_lease_s

    async def acquire(self) -> PoolLease:
        """Lease an idle sandbox of the pool and keep renewing the lease until :meth:`release`.

        Raises:
            PoolExhaustedError: every sandbox is leased.
            BackendError: no such pool, or the backend failed.
        """
        with PoolStateFile(self.name, self.state_dir).lock():
            state, record, pool = self._open()
            try:
                handle = await pool.acquire()
                lease = pool.member(handle.id).lease
            finally:
                record.update_from(pool)
                state.save(record)
        renewals = AsyncExitStack()
        lease_s = pool.lease_s
        await renewals.enter_async_context(keep_renewing(
            lambda: asyncio.to_thread(state.renew, handle.id, lease, lease_s), lease_s,
            f"the lease of sandbox {handle.id}"))
        self._renewals[handle.id] = renewals
        egress = None
        path = state.write_egress_control(handle)
        if path is not None:
            egress = json.loads(path.read_text(encoding="utf-8"))
        return PoolLease(handle.url, handle.token, handle.id, lease, egress)

    async def release(self, sandbox_id: str, lease_id: str, new_token: str | None = None) -> None:
        """Stop renewing and release the lease: the pool resets the sandbox (a new token) and
        makes it idle again. ``new_token``: the token a reset during the lease put in force
        (the pool resets with it).

        Raises:
            BackendError: the lease was lost (it expired and the pool took the sandbox back:
                ``reason`` ``"lease_lost"``; the sandbox and its next holder are left alone),
                or the pool or the backend failed.
        """
        renewals = self._renewals.pop(sandbox_id, None)
        if renewals is not None:
            await renewals.aclose()
        with PoolStateFile(self.name, self.state_dir).lock():
            state, record, pool = self._open()
            try:
                if new_token is not None:
                    pool.rotated(sandbox_id, lease_id, new_token)
                await state.release(pool, sandbox_id, lease_id)
            finally:
                record.update_from(pool)
                state.save(record)
