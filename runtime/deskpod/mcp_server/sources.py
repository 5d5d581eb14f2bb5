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

import os
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.backend.pool_leases import PoolLeases
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
    """Lease each session's sandbox from the pool ``name`` (state in ``state_dir``), through
    :class:`~deskpod.backend.pool_leases.PoolLeases`."""

    name: str
    state_dir: Path | None = None
    _leases: PoolLeases | None = field(default=None, repr=False)

    @property
    def leases(self) -> PoolLeases:
        """The pool's leases this process holds."""
        if self._leases is None:
            self._leases = PoolLeases(self.name, self.state_dir)
        return self._leases

    async def lease(self) -> SandboxLease:
        """Lease an idle sandbox of the pool (its slot's egress control with it).

        Raises:
            BackendError: no such pool, none idle, or Docker is not reachable.
        """
        leased = await self.leases.acquire()
        return SandboxLease(leased.url, leased.token, sandbox_id=leased.sandbox_id, pool=self.name,
                            lease_id=leased.lease_id, egress_control=leased.egress_control)

    async def release(self, lease: SandboxLease, new_token: str | None) -> None:
        """Release the lease: the pool resets the sandbox (a new token) and makes it idle again.
        ``new_token``: the token a reset during the session put in force (the pool resets with it).

        Raises:
            BackendError: the lease was lost (``reason`` ``"lease_lost"``), or the pool or Docker failed.
        """
        await self.leases.release(lease.sandbox_id, lease.lease_id, new_token)
