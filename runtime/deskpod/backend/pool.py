"""A warm pool of ready sandboxes: acquire one, use it, release it back reset.

::

    pool = SandboxPool(DockerBackend(), size=2, start_url="http://demo.test/")
    await pool.fill()                      # two sandboxes, created and ready
    handle = await pool.acquire()          # a ready sandbox: handle.url, handle.token
    lease = pool.member(handle.id).lease   # the lease's id: what renews and releases it
    ...                                    # drive it with deskpod.client
    report = await pool.release(handle.id, lease)  # reset in place (new token), back to idle
    await pool.close()                     # destroy everything the pool made

**Ready** means: a client holding the sandbox's current token has connected and
received an observation of the fresh state. Every reset rotates the control
token, so whoever held the sandbox before cannot drive it afterwards.

Reset modes, and what happens when one fails (each step is tried only if the
previous failed; :class:`ResetReport` says what was done and why):

1. ``in_place``: :meth:`deskpod.client.SandboxClient.reset`: the daemon stops the
   session, wipes every writable path, starts the browser at ``start_url`` and
   switches to the new token's hash. ``restore``: the same, then the pool's
   snapshot archive is restored into the browser (a known logged-in state).
   ``recreate`` starts at step 2.
2. ``recreate``: the sandbox container is removed and a fresh one started in the
   same slot (network and egress proxy kept), then waited for.
3. ``replace``: the whole slot is destroyed and a new one created.

If even the replacement fails the sandbox leaves the pool and the error is raised.
A fallback brings back a clean sandbox, not the snapshot: a ``restore`` that fell
back says so in its report (``performed`` is not ``"restore"``).
A sandbox whose container crashed, exited or was OOM-killed (Docker's
``State.OOMKilled``, ``State.Status``, ``State.ExitCode``; see
:meth:`deskpod.backend.base.Backend.failure`) is noticed and replaced: an idle one
at :meth:`SandboxPool.acquire`, :meth:`SandboxPool.heal` and :meth:`SandboxPool.check`
(``deskpod pool status``), a leased one at :meth:`SandboxPool.release` or
:meth:`SandboxPool.reset` (straight to a replacement: there is nothing to reset in
place). The reason is logged (WARNING), kept on the member (``replaced``), in the
reset's report and in :attr:`SandboxPool.replacements`.

**Leases** (:mod:`deskpod.backend.lease`): :meth:`SandboxPool.acquire` leases a sandbox
for ``lease_s`` seconds (default :data:`~deskpod.backend.lease.LEASE_S`, 60); its holder
renews it (:meth:`SandboxPool.renew`, naming the lease's id) every third of that while it lives: in this process
``async with pool.renewing():`` does so for every lease the pool handed out (and keeps
the idle sandboxes' claims alive on Kubernetes, whose claims are deleted at their
shutdown time unless renewed: :meth:`deskpod.backend.base.Backend.renew`). A lease not
renewed in time expires: :meth:`acquire` reclaims it when no idle sandbox is left and
:meth:`SandboxPool.expire` releases every expired one, each reset before reuse. A holder
releases by naming its lease too (:meth:`SandboxPool.release`), and so does anyone resetting a
leased sandbox (:meth:`SandboxPool.reset`, ``lease=``), so one whose lease was taken back
cannot reset the sandbox under its next holder (``reason`` ``"lease_lost"``); an idle
sandbox is reset without one.
A lessee that resets its sandbox through a client of this process
(:meth:`deskpod.client.Sandbox.reset`) rotates the token; the pool learns the new one
(:mod:`deskpod.client.rotations`), or from :meth:`SandboxPool.rotated` when the reset
happened elsewhere, so its release still resets in place.

Filling many at once (:meth:`SandboxPool.fill`): at most ``start_concurrency``
sandboxes start at a time (on two cores, thirty Chromiums started together all miss
their timeouts), each start has its own ready timeout, and a start that fails (the
container died, it never became ready) is destroyed and tried again in a new slot, up
to ``start_attempts`` times, while the others go on; each ready sandbox joins the pool
at once. Only a slot that failed every attempt makes :meth:`fill` raise, and the
sandboxes made stay in the pool. ``on_start`` sees every attempt (:class:`StartEvent`),
which is how ``deskpod pool up`` shows its progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Literal

from deskpod.backend.base import READY_TIMEOUT_S, Backend, SandboxHandle
from deskpod.backend.lease import LEASE_S, keep_renewing, lease_expired, new_lease_id, renew_lease, require_lease
from deskpod.backend.pool_reset import (
    CLIENT_CONNECT_TIMEOUT_S,
    MemberState,
    PoolMember,
    PoolResets,
    Replacement,
    ResetMode,
    ResetReport,
    ready_observation,
)
from deskpod.client.rotations import unwatch_rotation, watch_rotation
from deskpod.errors import BackendError, DeskpodError, PoolExhaustedError

__all__ = [
    "CLIENT_CONNECT_TIMEOUT_S",
    "MemberState",
    "PoolMember",
    "PoolResets",
    "Replacement",
    "ResetMode",
    "ResetReport",
    "START_ATTEMPTS",
    "START_CONCURRENCY",
    "SandboxPool",
    "StartEvent",
    "ready_observation",
]

log = logging.getLogger(__name__)

START_CONCURRENCY = 4
"""How many sandboxes :meth:`SandboxPool.fill` starts at a time by default (a Chromium
start takes about one core for a second or two)."""

START_ATTEMPTS = 3
"""How many times :meth:`SandboxPool.fill` tries to make each missing sandbox ready."""


@dataclass(frozen=True)
class StartEvent:
    """One step of :meth:`SandboxPool.fill` for one missing sandbox.

    Attributes:
        kind: ``"starting"`` (an attempt begins), ``"ready"`` (the sandbox joined the
            pool), ``"retry"`` (the attempt failed; another follows) or ``"failed"``
            (the last attempt failed).
        slot: which missing sandbox, 0-based, of this fill.
        attempt: the attempt's number, from 1.
        sandbox_id: the ready sandbox's id (``"ready"``), else ``""``.
        error: why the attempt failed (``"retry"``, ``"failed"``), else ``""``.
    """

    kind: Literal["starting", "ready", "retry", "failed"]
    slot: int
    attempt: int
    sandbox_id: str = ""
    error: str = ""


class SandboxPool(PoolResets):
    """A fixed number of sandboxes kept ready (resets: :class:`~deskpod.backend.pool_reset.PoolResets`).

    Args:
        backend: makes and removes the sandboxes.
        name: the pool's name, on its resources' ``deskpod.pool`` label.
        size: how many sandboxes the pool holds (idle plus leased).
        reset_mode: how :meth:`release` resets by default.
        start_url: the page a reset opens (``None``: the sandbox's start page).
        snapshot: the archive ``restore`` resets bring back
            (:meth:`deskpod.client.SandboxClient.snapshot`); required for that mode.
        ready_timeout_s: how long a new or recreated sandbox may take to be ready, seconds
            (each start on its own).
        members: sandboxes the pool already holds (e.g. loaded from a state file).
        start_concurrency: at most this many sandboxes start at a time in :meth:`fill`.
        start_attempts: how many times :meth:`fill` tries each missing sandbox.
        on_start: called with every :class:`StartEvent` of :meth:`fill` (e.g. a progress display).
        lease_s: how long a lease lasts after its last renewal, seconds (see the module docstring).

    Raises:
        BackendError: ``size`` < 1, ``start_concurrency`` or ``start_attempts`` < 1,
            ``lease_s`` not positive, or ``restore`` without a snapshot.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        name: str = "default",
        size: int = 2,
        reset_mode: ResetMode = "in_place",
        start_url: str | None = None,
        snapshot: bytes | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        members: list[PoolMember] | None = None,
        start_concurrency: int = START_CONCURRENCY,
        start_attempts: int = START_ATTEMPTS,
        on_start: Callable[[StartEvent], None] | None = None,
        lease_s: float = LEASE_S,
    ) -> None:
        if not lease_s > 0:
            raise BackendError(f"a lease lasts more than 0 s, got {lease_s}", detail={"reason": "config"})
        if start_concurrency < 1 or start_attempts < 1:
            raise BackendError(f"start_concurrency and start_attempts must be at least 1, got "
                               f"{start_concurrency} and {start_attempts}", detail={"reason": "config"})
        if size < 1:
            raise BackendError(f"a pool needs at least one sandbox, got size {size}", detail={"reason": "config"})
        if reset_mode == "restore" and snapshot is None:
            raise BackendError("reset mode 'restore' needs a snapshot", detail={"reason": "config"})
        self.backend = backend
        self.name = name
        self.size = size
        self.reset_mode: ResetMode = reset_mode
        self.start_url = start_url
        self.snapshot = snapshot
        self.ready_timeout_s = ready_timeout_s
        self.members: list[PoolMember] = list(members or [])
        self.replacements: list[Replacement] = []
        """Every sandbox this pool object found broken and replaced, oldest first."""
        self.start_concurrency = start_concurrency
        self.start_attempts = start_attempts
        self.on_start = on_start
        self.start_failures: list[StartEvent] = []
        """Every start attempt of :meth:`fill` that failed (``"retry"`` or ``"failed"``), oldest first."""
        self.lease_s = lease_s
        self._held: set[str] = set()
        self._lock = asyncio.Lock()
        for member in self.members:
            self._watch(member)

    def member(self, sandbox_id: str) -> PoolMember:
        """The member with id ``sandbox_id``.

        Raises:
            BackendError: no such sandbox in this pool (``reason`` ``"not_found"``).
        """
        for m in self.members:
            if m.handle.id == sandbox_id:
                return m
        raise BackendError(f"no sandbox {sandbox_id!r} in pool {self.name!r}", detail={"reason": "not_found"})

    # ------------------------------------------------------------------ the pool's verbs

    def _emit(self, event: StartEvent) -> None:
        if event.kind in ("retry", "failed"):
            self.start_failures.append(event)
        if self.on_start is not None:
            self.on_start(event)

    async def _start_slot(self, slot: int, gate: asyncio.Semaphore) -> SandboxHandle:
        """Make one missing sandbox ready, retrying a failed start in a new slot (the
        failed one is destroyed by :meth:`_new_ready`); it joins the pool when ready."""
        last: BaseException | None = None
        for attempt in range(1, self.start_attempts + 1):
            async with gate:
                self._emit(StartEvent("starting", slot, attempt))
                try:
                    handle = await self._new_ready()
                except (DeskpodError, TimeoutError, OSError) as exc:
                    last = exc
                    final = attempt == self.start_attempts
                    log.warning("starting a sandbox for pool %s failed (attempt %d of %d): %s",
                                self.name, attempt, self.start_attempts, exc)
                    self._emit(StartEvent("failed" if final else "retry", slot, attempt,
                                          error=f"{type(exc).__name__}: {exc}"[:500]))
                    continue
            self.members.append(PoolMember(handle))
            self._emit(StartEvent("ready", slot, attempt, sandbox_id=handle.id))
            return handle
        assert last is not None
        raise last

    async def fill(self) -> list[SandboxHandle]:
        """Replace unhealthy idle sandboxes, then create sandboxes until the pool holds ``size``.

        At most ``start_concurrency`` start at a time; each missing sandbox gets up to
        ``start_attempts`` attempts, each in a new slot (a failed one is destroyed), and
        joins the pool as soon as it is ready. Failed attempts are in
        :attr:`start_failures`.

        Returns:
            The handles of the sandboxes created.

        Raises:
            BackendError: a sandbox could not be made ready in ``start_attempts``
                attempts (``reason`` ``"fill"``; the others stay in the pool).
        """
        await self.heal()
        missing = self.size - len(self.members)
        gate = asyncio.Semaphore(self.start_concurrency)
        results = await asyncio.gather(*(self._start_slot(i, gate) for i in range(missing)),
                                       return_exceptions=True)
        created = [r for r in results if isinstance(r, SandboxHandle)]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise BackendError(f"{len(errors)} of {missing} sandboxes could not be made ready in "
                               f"{self.start_attempts} attempts: {errors[0]}",
                               detail={"reason": "fill", "created": len(created)}) from errors[0]
        return created

    async def heal(self) -> list[str]:
        """Replace every idle sandbox that is not healthy (container crashed, exited or
        OOM-killed, egress proxy stopped, ``/healthz`` not 200).

        Returns:
            The ids of the sandboxes replaced.

        Raises:
            BackendError: a replacement could not be made (that sandbox left the pool).
        """
        return [r.old_id for r in await self.check() if r.new_id]

    async def check(self) -> list[Replacement]:
        """Look at every sandbox: replace the idle ones that are broken, report the
        leased ones that are (they are replaced at their release).

        Returns:
            One :class:`Replacement` per broken sandbox: ``new_id`` is the replacement's
            id, ``""`` for a leased one left in place.

        Raises:
            BackendError: a replacement could not be made (that sandbox left the pool).
        """
        found = []
        for member in list(self.members):
            reason = await self.backend.failure(member.handle)
            if reason is None:
                continue
            old = member.handle.id
            if member.state == "leased":
                log.warning("leased sandbox %s of pool %s is broken (%s); it is replaced at its release",
                            old, self.name, reason)
                found.append(Replacement(old, "", reason))
                continue
            await self._replace(member, reason)
            found.append(Replacement(old, member.handle.id, reason))
        return found

    async def acquire(self, *, lease_s: float | None = None) -> SandboxHandle:
        """Lease an idle, healthy sandbox (an unhealthy one is replaced first); when none is
        idle, reclaim one whose lease expired (reset first, as a release does).

        Args:
            lease_s: how long the lease lasts unless renewed, seconds; ``None``: the pool's
                ``lease_s``. The lease's id is then :attr:`PoolMember.lease` of the sandbox.

        Returns:
            The leased sandbox's handle, with its current token. When the idle sandbox
            was found broken and replaced, its member's ``replaced`` says why (and
            :attr:`replacements` has the entry).

        Raises:
            PoolExhaustedError: every sandbox is leased, none expired.
            BackendError: an unhealthy sandbox could not be replaced, an expired one not reset,
                or the backend could not extend its lifetime.
        """
        async with self._lock:
            for member in self.members:
                if member.state != "idle":
                    continue
                reason = await self.backend.failure(member.handle)
                if reason is not None:
                    await self._replace(member, reason)
                return await self._lease(member, lease_s)
            for member in self.members:
                if lease_expired(member, time.time()):
                    log.warning("the lease of sandbox %s of pool %s expired (its holder stopped renewing it); "
                                "reclaiming it", member.handle.id, self.name)
                    await self._release(member)
                    return await self._lease(member, lease_s)
        raise PoolExhaustedError(f"all {len(self.members)} sandboxes of pool {self.name!r} are leased",
                                 detail={"size": self.size, "leased": len(self.members)})

    async def _lease(self, member: PoolMember, lease_s: float | None) -> SandboxHandle:
        member.state = "leased"
        member.lease = new_lease_id()
        member.lease_expires = time.time() + (lease_s or self.lease_s)
        self._held.add(member.lease)
        self._watch(member)
        await self.backend.renew(member.handle, member.lease_expires)
        return member.handle

    def _watch(self, member: PoolMember) -> None:
        """Learn the token a lessee's reset in this process puts in force (see the module docstring)."""
        if member.state != "leased":
            return
        sandbox_id = member.handle.id

        def learn(token: str) -> None:
            if member in self.members and member.handle.id == sandbox_id:
                member.handle = replace(member.handle, token=token)

        watch_rotation(member.handle.url, member.handle.token, learn)

    def rotated(self, sandbox_id: str, lease: str, token: str) -> None:
        """Take the token a reset made outside this process (or without this pool's watch) put in
        force on a sandbox leased under ``lease``, so the pool can still reset it in place at release.

        Raises:
            BackendError: no such sandbox in this pool (``reason`` ``"not_found"``) or it is
                not leased under ``lease`` (``reason`` ``"lease_lost"``; nothing changed).
        """
        member = self.member(sandbox_id)
        require_lease(member, sandbox_id, lease)
        unwatch_rotation(member.handle.url, member.handle.token)
        member.handle = replace(member.handle, token=token)
        self._watch(member)

    async def renew(self, sandbox_id: str, lease: str, *, lease_s: float | None = None) -> float:
        """Extend a lease to ``lease_s`` seconds from now (its holder calls this every third of it).

        Args:
            sandbox_id: the leased sandbox.
            lease: the lease's id (:attr:`PoolMember.lease` after :meth:`acquire`).
            lease_s: the lease's length, seconds; ``None``: the pool's ``lease_s``.

        Returns:
            The new expiry, epoch seconds.

        Raises:
            BackendError: no such sandbox (``reason`` ``"not_found"``), the lease was lost
                (released, or reclaimed after it expired: ``reason`` ``"lease_lost"``), or the
                backend could not extend the sandbox's own lifetime (a Kubernetes claim).
        """
        member = self.member(sandbox_id)
        expires = renew_lease(member, sandbox_id, lease, lease_s or self.lease_s, time.time())
        await self.backend.renew(member.handle, expires)
        return expires

    async def expire(self) -> list[ResetReport]:
        """Release (reset and make idle) every sandbox whose lease expired.

        Returns:
            One report per sandbox released.

        Raises:
            BackendError: a sandbox could not be brought back at all (it has left the pool).
        """
        now = time.time()
        reports = []
        for member in [m for m in self.members if lease_expired(m, now)]:
            log.warning("the lease of sandbox %s of pool %s expired (its holder stopped renewing it); releasing it",
                        member.handle.id, self.name)
            reports.append(await self._release(member))
        return reports

    async def _renew_all(self) -> None:
        """One turn of :meth:`renewing`."""
        for member in list(self.members):
            if member.state == "idle":
                await self.backend.renew(member.handle, time.time() + self.lease_s)
            elif member.lease in self._held:
                await self.renew(member.handle.id, member.lease)

    @asynccontextmanager
    async def renewing(self) -> AsyncIterator[SandboxPool]:
        """Hold, while the block runs, every lease this pool object hands out: renew each every
        third of ``lease_s`` and keep the idle sandboxes' backend lifetime (a Kubernetes claim's
        shutdown time) as far ahead. When this process dies the renewals stop, so its leases
        expire and its claims are deleted within ``lease_s``.

        Yields:
            The pool.
        """
        async with keep_renewing(self._renew_all, self.lease_s, f"the leases of pool {self.name}"):
            yield self

    async def release(self, sandbox_id: str, lease: str, *, mode: ResetMode | None = None) -> ResetReport:
        """End the lease ``lease``: reset its sandbox (rotating its token) and put it back as idle.

        Args:
            sandbox_id: the leased sandbox.
            lease: the lease's id (:attr:`PoolMember.lease` after :meth:`acquire`): a holder
                releases only the lease it holds, never a later holder's.
            mode: how to reset; ``None``: the pool's ``reset_mode``.

        Returns:
            What the reset did. A replacement has a new id (``report.handle.id``).

        Raises:
            BackendError: not in this pool (``reason`` ``"not_found"``); the sandbox is not
                leased under ``lease`` (released already, or its lease expired and the pool
                took it back: ``reason`` ``"lease_lost"``, and nothing changed); or it could
                not be brought back at all (it has then left the pool).
        """
        member = self.member(sandbox_id)
        require_lease(member, sandbox_id, lease)
        return await self._release(member, mode)

    async def _release(self, member: PoolMember, mode: ResetMode | None = None) -> ResetReport:
        """Reset a leased member and make it idle, whoever holds its lease: the pool's own taking
        back of an expired lease (:meth:`acquire`, :meth:`expire`)."""
        report = await self._reset_member(member, mode)
        unwatch_rotation(member.handle.url, member.handle.token)
        self._held.discard(member.lease)
        member.state, member.lease, member.lease_expires = "idle", "", 0.0
        return report

    async def reset(self, sandbox_id: str, *, lease: str | None = None, mode: ResetMode | None = None) -> ResetReport:
        """Reset a sandbox of the pool, rotating its token; a leased one stays leased.

        A leased sandbox is reset only by naming its lease, as :meth:`release` ends one: a
        holder whose lease expired and was taken back (perhaps leased to another holder)
        cannot reset, and so rotate the token of, its successor's sandbox.

        Args:
            sandbox_id: the sandbox.
            lease: the lease's id (:attr:`PoolMember.lease` after :meth:`acquire`); needed
                when the sandbox is leased, ``None`` for an idle one (a lease named for an
                idle sandbox was lost: refused).
            mode: how to reset; ``None``: the pool's ``reset_mode``.

        Returns:
            What the reset did.

        Raises:
            BackendError: not in this pool (``reason`` ``"not_found"``); leased and ``lease``
                is not its lease, or a lease was named and it is not leased under it
                (``reason`` ``"lease_lost"``, and nothing changed); ``restore`` without a
                snapshot; or the sandbox could not be brought back at all (it has then left
                the pool).
        """
        member = self.member(sandbox_id)
        if member.state == "leased" or lease is not None:
            require_lease(member, sandbox_id, lease or "")
        return await self._reset_member(member, mode)

    async def _reset_member(self, member: PoolMember, mode: ResetMode | None) -> ResetReport:
        """Reset ``member`` whoever holds its lease (the checks are the callers'), rotating its token."""
        mode = mode or self.reset_mode
        if mode == "restore" and self.snapshot is None:
            raise BackendError("reset mode 'restore' needs a snapshot", detail={"reason": "config"})
        unwatch_rotation(member.handle.url, member.handle.token)
        try:
            return await self._reset(member, mode)
        finally:
            self._watch(member)

    async def close(self) -> None:
        """Destroy every sandbox of the pool, including any its label finds that it lost track of.

        Raises:
            BackendError: something could not be removed.
        """
        ids = {m.handle.id for m in self.members} | set(await self.backend.list_ids(pool=self.name))
        self.members.clear()
        results = await asyncio.gather(*(self.backend.destroy(i) for i in sorted(ids)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise BackendError(f"{len(errors)} sandboxes of pool {self.name!r} not fully removed: {errors[0]}",
                               detail={"reason": "docker"}) from errors[0]
