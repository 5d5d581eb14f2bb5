"""Where a session's sandbox comes from, and how it goes back when the session ends.

- :class:`GivenSandbox`: one sandbox URL and token (one session at a time: the
  controller refuses a second session on the same sandbox, ``busy``). With
  ``reset_on_end`` the sandbox is reset in place when the session ends and the new
  token is written to the token file (mode 0600), so the next session (and nobody
  else) can drive it.
- :class:`PoolSandbox`: a sandbox leased from a warm pool of the Docker backend
  (``deskpod pool up``) for each session, released (reset in place, new token) when
  the session ends, as ``deskpod pool acquire`` / ``release`` do, under the pool's
  state lock.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
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
                           members=record.to_members())
        return state, record, pool

    async def lease(self) -> SandboxLease:
        """Lease an idle sandbox of the pool (its slot's egress control with it).

        Raises:
            BackendError: no such pool, none idle, or Docker is not reachable.
        """
        from deskpod.backend import PoolStateFile

        with PoolStateFile(self.name, self.state_dir).lock():
            state, record, pool = self._open()
            try:
                handle = await pool.acquire()
            finally:
                record.update_from(pool)
                state.save(record)
        egress = None
        path = state.write_egress_control(handle)
        if path is not None:
            egress = json.loads(path.read_text(encoding="utf-8"))
        return SandboxLease(handle.url, handle.token, sandbox_id=handle.id, pool=self.name, egress_control=egress)

    async def release(self, lease: SandboxLease, new_token: str | None) -> None:
        """Release the lease: the pool resets the sandbox (a new token) and makes it idle again."""
        from deskpod.backend import PoolStateFile

        with PoolStateFile(self.name, self.state_dir).lock():
            state, record, pool = self._open()
            try:
                await pool.release(lease.sandbox_id)
            finally:
                record.update_from(pool)
                state.save(record)
                state.remove_token(lease.sandbox_id)
