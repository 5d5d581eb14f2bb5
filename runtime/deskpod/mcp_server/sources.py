"""Where a session's sandbox comes from, and how it goes back when the session ends.

- :class:`GivenSandbox`: one sandbox URL and token (one session at a time: the
  controller refuses a second session on the same sandbox, ``busy``). With
  ``reset_on_end`` the sandbox is reset in place when the session ends and the new
  token is written to the token file (mode 0600), so the next session (and nobody
  else) can drive it.
- :class:`PoolSandbox`: a sandbox leased from a warm pool of the Docker backend
  (``deskpod pool up``) for each session, released (reset in place, new token) when
  the session ends, as ``deskpod pool acquire`` / ``release`` do, under the pool's
  state lock. This process holds the lease: it renews it in the background every third
  of ``DESKPOD_POOL_LEASE_S`` until the release, so when the process dies the pool takes
  the sandbox back within a lease (:mod:`deskpod.backend.lease`).
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deskpod.mcp_server.runs import SandboxLease

__all__ = ["GivenSandbox", "PoolSandbox"]


@dataclass
class GivenSandbox:
    """One given sandbox; ``token_file`` (if any) holds its token and gets the new one after a reset."""

    url: str
    token: str
    token_file: Path | None = None
    reset_on_end: bool = False
    egress_control: dict[str, str] | None = None

    async def lease(self) -> SandboxLease:
        """The sandbox, with the token in force."""
        return SandboxLease(self.url, self.token, reset_on_end=self.reset_on_end, token_file=self.token_file,
                            egress_control=self.egress_control)

    async def release(self, lease: SandboxLease, new_token: str | None) -> None:
        """Keep the new token after a reset (and write it to the token file)."""
        if new_token is None:
            return
        self.token = new_token
        if self.token_file is not None:
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: the token is a secret
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(new_token + "\n")


@dataclass
class PoolSandbox:
    """Lease each session's sandbox from the pool ``name`` (state in ``state_dir``)."""

    name: str
    state_dir: Path | None = None
    _renewals: dict[str, AsyncExitStack] = field(default_factory=dict, repr=False)

    def _open(self) -> tuple[Any, Any, Any]:
        from deskpod.backend import DockerBackend, PoolStateFile, SandboxPool
        from deskpod.errors import BackendError
        from deskpod.client.snapshot_store import SnapshotStore

        state = PoolStateFile(self.name, self.state_dir)
        record = state.load()
        if record is None:
            raise BackendError(f"no pool {self.name!r} (start one with `deskpod pool up`)",
                               detail={"reason": "config"})
        snapshot = SnapshotStore(state.directory / "snapshots").load(record.snapshot) if record.snapshot else None
        pool = SandboxPool(DockerBackend(record.backend), name=record.name, size=record.size,
                           reset_mode=record.reset_mode, start_url=record.start_url, snapshot=snapshot,
                           members=record.to_members(), lease_s=self._lease_s())
        return state, record, pool

    @staticmethod
    def _lease_s() -> float:
        from deskpod.settings import get_settings

        return get_settings().pool_lease_s

    async def lease(self) -> SandboxLease:
        """Lease an idle sandbox of the pool (its slot's egress control with it).

        Raises:
            BackendError: no such pool, none idle, or Docker is not reachable.
        """
        from deskpod.backend import PoolStateFile

        from deskpod.backend.lease import keep_renewing

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
        return SandboxLease(handle.url, handle.token, sandbox_id=handle.id, pool=self.name, lease_id=lease,
                            egress_control=egress)

    async def release(self, lease: SandboxLease, new_token: str | None) -> None:
        """Release the lease: the pool resets the sandbox (a new token) and makes it idle again.
        ``new_token``: the token a reset during the session put in force (the pool resets with it).

        Raises:
            BackendError: the lease was lost (it expired and the pool took the sandbox back:
                ``reason`` ``"lease_lost"``; the sandbox and its next holder are left alone),
                or the pool or Docker failed.
        """
        from deskpod.backend import PoolStateFile

        renewals = self._renewals.pop(lease.sandbox_id, None)
        if renewals is not None:
            await renewals.aclose()
        with PoolStateFile(self.name, self.state_dir).lock():
            state, record, pool = self._open()
            try:
                if new_token is not None:
                    pool.rotated(lease.sandbox_id, lease.lease_id, new_token)
                await state.release(pool, lease.sandbox_id, lease.lease_id)
            finally:
                record.update_from(pool)
                state.save(record)
