"""Leases of a pool's sandboxes: how long one lasts, how its holder keeps it, when it is lost.

A lease is held by a process (its *holder*) and lasts ``lease_s`` seconds from its
last renewal; the holder renews it every third of that (:func:`keep_renewing`) for as
long as it lives. A holder that dies (``kill -9``, a crashed host) stops renewing, so
its lease expires at most ``lease_s`` seconds later, and the pool takes the sandbox
back: :meth:`deskpod.backend.pool.SandboxPool.acquire` reclaims it when no idle one is
left and ``deskpod pool status`` (:meth:`~deskpod.backend.pool.SandboxPool.expire`)
releases it; either way it is reset (its token rotates) before anyone else gets it.

Expiry times are wall-clock seconds since the epoch (``time.time()``), since holders
in other processes renew them through the pool's state file
(:mod:`deskpod.backend.pool_state`). Each lease has an id of its own (:func:`new_lease_id`),
and a holder names it to renew or release its sandbox (:func:`require_lease`), so a holder
whose lease was reclaimed (and perhaps handed to another) can neither renew nor release
its successor's, nor reset it (:meth:`~deskpod.backend.pool.SandboxPool.reset` of a leased
sandbox names its lease too): it is refused (:class:`~deskpod.errors.BackendError`, ``reason``
``"lease_lost"``) and nothing changes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

from deskpod.errors import BackendError, DeskpodError

__all__ = ["LEASE_S", "Leasable", "RENEWALS_PER_LEASE", "keep_renewing", "lease_expired", "new_lease_id",
           "renew_lease", "require_lease"]

log = logging.getLogger(__name__)

LEASE_S = 60.0
"""How long a lease lasts after its last renewal by default, seconds (``DESKPOD_POOL_LEASE_S``)."""

RENEWALS_PER_LEASE = 3
"""A holder renews its lease this many times per lease (every ``lease_s / 3`` seconds)."""


class Leasable(Protocol):
    """What a lease is kept on: a pool member, in memory or as stored."""

    lease: str
    lease_expires: float

    @property
    def state(self) -> str:
        """``"idle"`` or ``"leased"``."""


def new_lease_id() -> str:
    """A fresh lease id: 16 lower-case hex digits (not a secret: it names a lease, it grants nothing)."""
    return secrets.token_hex(8)


def lease_expired(member: Leasable, now: float) -> bool:
    """True when ``member`` is leased and its lease ended before ``now`` (epoch seconds)."""
    return member.state == "leased" and member.lease_expires <= now


def require_lease(member: Leasable, sandbox_id: str, lease: str) -> None:
    """Check that ``member`` is leased under ``lease``, the lease its holder names to renew,
    release or reset it.

    Args:
        member: the member the lease is on.
        sandbox_id: its sandbox id (for the message).
        lease: the lease id the holder got at acquire (``""``: none named).

    Raises:
        BackendError: the sandbox is not leased under ``lease`` (any more): it was released,
            or its lease expired and the pool took it back, perhaps leasing it to another
            holder under a new id; or it is leased and no lease was named (``reason``
            ``"lease_lost"`` either way).
    """
    if member.state == "leased" and not lease:
        raise BackendError(f"sandbox {sandbox_id} is leased: only its holder may change it, naming its lease "
                           "(`pool status` shows the current one)", detail={"reason": "lease_lost"})
    if member.state != "leased" or member.lease != lease:
        raise BackendError(f"sandbox {sandbox_id} is no longer leased under lease {lease[:16]!r}: it was released "
                           "or its lease expired and the pool took it back", detail={"reason": "lease_lost"})


def renew_lease(member: Leasable, sandbox_id: str, lease: str, lease_s: float, now: float) -> float:
    """Extend the lease ``lease`` of ``member`` to ``now + lease_s``.

    A lease that expired but was not reclaimed yet is renewed: its holder is alive after all.

    Args:
        member: the member the lease is on.
        sandbox_id: its sandbox id (for the message).
        lease: the lease id the holder got at acquire.
        lease_s: the lease's length, seconds (> 0).
        now: the current time, epoch seconds.

    Returns:
        The new expiry, epoch seconds.

    Raises:
        BackendError: the sandbox is not leased under ``lease`` any more (released, or
            reclaimed after the lease expired; ``reason`` ``"lease_lost"``), or ``lease_s``
            is not positive (``reason`` ``"config"``).
    """
    if lease_s <= 0:
        raise BackendError(f"a lease lasts more than 0 s, got {lease_s:g}", detail={"reason": "config"})
    require_lease(member, sandbox_id, lease)
    member.lease_expires = now + lease_s
    return member.lease_expires


@asynccontextmanager
async def keep_renewing(renew: Callable[[], Awaitable[object]], lease_s: float,
                        what: str = "lease") -> AsyncIterator[None]:
    """Call ``renew()`` every ``lease_s / 3`` seconds in the background while the block runs.

    A renewal that fails (a :class:`~deskpod.errors.DeskpodError`, ``OSError`` or
    ``TimeoutError``) is logged (WARNING)
    and tried again at the next turn, except a lost lease (``reason`` ``"lease_lost"``),
    which ends the renewals: there is nothing left to keep.

    Args:
        renew: one renewal (e.g. :meth:`deskpod.backend.pool.SandboxPool.renew` bound to a lease).
        lease_s: the lease's length, seconds.
        what: what is renewed, for the log.
    """
    async def loop() -> None:
        while True:
            await asyncio.sleep(lease_s / RENEWALS_PER_LEASE)
            try:
                await renew()
            except (DeskpodError, OSError, TimeoutError) as exc:
                log.warning("renewing %s failed: %s", what, exc)
                if isinstance(exc, DeskpodError) and exc.detail.get("reason") == "lease_lost":
                    return

    task = asyncio.create_task(loop(), name=f"renew {what}")
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
