"""Sessions of ``deskpod serve`` on a warm pool: each one gets a fresh sandbox leased for it.

A ``NAME=pool:POOL`` entry of ``DESKPOD_SERVE_SANDBOXES`` (:mod:`deskpod.settings.sandboxes`)
names a warm pool of this host (``deskpod pool up --name POOL``). A session opened by
``NAME`` leases one of its sandboxes (:class:`~deskpod.backend.pool_leases.PoolLeases`:
the service renews the lease while the session runs, so a service that dies gives it back
within a lease), connects with the lease's token, and drives the slot behind the slot's
own egress proxy; when the run ends the lease is released and the pool resets the sandbox
(a new token) for its next holder. A fresh slot is a clean state: the pool reset it at its
last release. The opener never sees the slot's token. A pool whose every sandbox is leased
answers ``busy`` with a retry hint.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import get_args

from deskpod.backend.pool_leases import PoolLease, PoolLeases
from deskpod.backend.pool_reset import MemberState
from deskpod.backend.pool_state import PoolStateFile
from deskpod.client import SandboxClient
from deskpod.errors import BackendError, BusyError, DeskpodError
from deskpod.service.messages import EgressControlRef, SandboxRef

__all__ = ["POOL_RETRY_AFTER_S", "PooledSandbox"]

log = logging.getLogger(__name__)

POOL_RETRY_AFTER_S = 10.0
"""The retry hint of the ``busy`` an ``open`` on a pool gets while every sandbox of it is leased, seconds."""


@dataclass
class PooledSandbox:
    """The sessions of one ``NAME=pool:POOL`` entry (see the module).

    Args:
        name: what sessions open it by.
        leases: the pool's leases this service holds.
    """

    name: str
    leases: PoolLeases

    async def lease(self, connect_timeout_s: float) -> tuple[SandboxClient, SandboxRef, PoolLease]:
        """Lease a sandbox of the pool and connect to it.

        Returns:
            The connection, the sandbox (its URL, token and slot's egress control) and the
            lease (:meth:`give_back` takes it).

        Raises:
            BusyError: every sandbox of the pool is leased (``detail``: ``sandbox``, ``retry_after_s``).
            BackendError: no such pool, or its backend failed.
            SandboxError: the sandbox cannot be reached (the lease is then released).
        """
        try:
            leased = await self.leases.acquire()
        except BackendError as exc:
            if exc.code == "busy":
                raise BusyError(f"every sandbox of {self.name!r} is in use: retry in {POOL_RETRY_AFTER_S:g} s",
                                detail={"sandbox": self.name, "retry_after_s": POOL_RETRY_AFTER_S}) from exc
            raise
        try:
            client = await SandboxClient.connect(leased.url, leased.token, timeout_s=connect_timeout_s)
        except BaseException:
            await self.give_back(leased)
            raise
        egress = EgressControlRef.model_validate(leased.egress_control) if leased.egress_control else None
        return client, SandboxRef(url=leased.url, token=leased.token, egress_control=egress), leased

    def slots(self) -> dict[str, int]:
        """How many sandboxes of the pool are in each state (``idle``, ``leased``), from its state
        file as it is now (every state named, 0 when none; a pool with no state file: all 0).

        Raises:
            BackendError: the state file does not parse.
            OSError: it cannot be read.
        """
        counts = dict.fromkeys(get_args(MemberState), 0)
        record = PoolStateFile(self.leases.name, self.leases.state_dir).load()
        for member in record.members if record is not None else ():
            counts[member.state] += 1
        return counts

    async def give_back(self, leased: PoolLease, timed: AbstractContextManager[None] | None = None) -> None:
        """Release ``leased`` (the pool resets the sandbox) inside ``timed`` (``None``: none; the
        service's :meth:`~.service_state.ControllerService.resetting`, which sees a failure too); a failure is
        logged: the pool takes an unreleased sandbox back when its lease expires."""
        try:
            with timed or nullcontext():
                await self.leases.release(leased.sandbox_id, leased.lease_id)
        except DeskpodError as exc:
            log.warning("pool %s: releasing sandbox %s failed: %s", self.leases.name, leased.sandbox_id, exc.message)
