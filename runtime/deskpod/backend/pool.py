"""A warm pool of ready sandboxes: acquire one, use it, release it back reset.

::

    pool = SandboxPool(DockerBackend(), size=2, start_url="http://demo.test/")
    await pool.fill()                      # two sandboxes, created and ready
    handle = await pool.acquire()          # a ready sandbox: handle.url, handle.token
    ...                                    # drive it with deskpod.client
    report = await pool.release(handle.id) # reset in place (new token), back to idle
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from deskpod.backend.base import READY_TIMEOUT_S, Backend, SandboxHandle
from deskpod.client import SandboxClient, reset_and_reconnect
from deskpod.errors import BackendError, DeskpodError, PoolExhaustedError
from deskpod.timing import timed_phase

__all__ = [
    "CLIENT_CONNECT_TIMEOUT_S",
    "MemberState",
    "PoolMember",
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

ResetMode = Literal["in_place", "recreate", "restore"]
MemberState = Literal["idle", "leased"]

CLIENT_CONNECT_TIMEOUT_S = 30.0
"""How long the pool retries connecting to a sandbox it believes ready, seconds."""

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


@dataclass
class PoolMember:
    """One sandbox of a pool.

    Attributes:
        handle: the sandbox (its ``token`` is the current one).
        state: ``"idle"`` (ready, waiting in the pool) or ``"leased"`` (handed out).
        resets: how many times it was reset, replaced or recreated.
        replaced: why the sandbox in this place was last replaced after a failure
            (``"oom_killed"``, ``"exited (code 137)"``...), ``None`` if never.
    """

    handle: SandboxHandle
    state: MemberState = "idle"
    resets: int = 0
    replaced: str | None = None


@dataclass(frozen=True)
class Replacement:
    """A sandbox the pool found broken and replaced.

    Attributes:
        old_id: the broken sandbox. new_id: the one in its place.
        reason: what was wrong (:meth:`deskpod.backend.base.Backend.failure`).
    """

    old_id: str
    new_id: str
    reason: str


@dataclass(frozen=True)
class ResetReport:
    """What a reset did.

    Attributes:
        sandbox_id: the sandbox's id before the reset (a replacement has a new id:
            ``handle.id``).
        requested: the mode asked for.
        performed: what brought the sandbox back: the requested mode, or the
            fallback ``"recreate"`` or ``"replace"``.
        duration_s: from the start of the reset to ready (an observation received
            with the new token), seconds.
        handle: the sandbox after the reset, with its new token.
        failures: one line per step that failed before ``performed`` succeeded.
        replaced: why the sandbox was replaced without a reset (its container had
            crashed: ``"oom_killed"``, ``"exited (code N)"``...), else ``None``.
        phases: where the successful step's time went, seconds: ``connect``,
            ``reset`` (the daemon's reset request), ``reconnect`` (with the new
            token) and ``restore`` for in-place and restore resets; ``recreate``
            (remove + create + start), ``wait_ready`` and ``observe`` for
            recreate; ``replace`` for a replacement.
    """

    sandbox_id: str
    requested: ResetMode
    performed: Literal["in_place", "recreate", "restore", "replace"]
    duration_s: float
    handle: SandboxHandle
    failures: tuple[str, ...] = field(default=())
    phases: dict[str, float] = field(default_factory=dict)
    replaced: str | None = None


async def ready_observation(handle: SandboxHandle, start_url: str | None = None,
                            timeout_s: float = CLIENT_CONNECT_TIMEOUT_S) -> None:
    """Connect with the handle's token, take one observation and close; load
    ``start_url`` first when the browser is elsewhere (a new container opens the
    backend configuration's start page, which may differ from the pool's).

    Raises:
        DeskpodError: the sandbox refused the token, did not answer in ``timeout_s``
            seconds, or could not load ``start_url``.
    """
    client = await SandboxClient.connect(handle.url, handle.token, timeout_s=timeout_s)
    try:
        observation = await client.act([])
        if start_url is not None and observation.url != start_url:
            await client.navigate(start_url)
    finally:
        await client.close()


class SandboxPool:
    """A fixed number of sandboxes kept ready.

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

    Raises:
        BackendError: ``size`` < 1, ``start_concurrency`` or ``start_attempts`` < 1, or
            ``restore`` without a snapshot.
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
    ) -> None:
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
        self._lock = asyncio.Lock()

    def member(self, sandbox_id: str) -> PoolMember:
        """The member with id ``sandbox_id``.

        Raises:
            BackendError: no such sandbox in this pool (``reason`` ``"not_found"``).
        """
        for m in self.members:
            if m.handle.id == sandbox_id:
                return m
        raise BackendError(f"no sandbox {sandbox_id!r} in pool {self.name!r}", detail={"reason": "not_found"})

    # ------------------------------------------------------------------ making sandboxes ready

    async def _new_ready(self) -> SandboxHandle:
        """Create a sandbox and wait until it is ready; destroy it if it never is."""
        handle = await self.backend.create(pool=self.name)
        try:
            readiness = await self.backend.wait_ready(handle, self.ready_timeout_s)
            await ready_observation(handle, self.start_url)
        except BaseException:
            await self.backend.destroy(handle.id)
            raise
        log.info("sandbox %s ready after %d probes (%.2f s)", handle.id, readiness.attempts, readiness.elapsed_s)
        return handle

    async def _in_place(self, handle: SandboxHandle, phases: dict[str, float]) -> SandboxHandle:
        with timed_phase(phases, "connect"):
            client = await SandboxClient.connect(handle.url, handle.token, timeout_s=CLIENT_CONNECT_TIMEOUT_S)
        try:
            token, _, check = await reset_and_reconnect(
                client, self.start_url, connect_timeout_s=CLIENT_CONNECT_TIMEOUT_S, phases=phases
            )
        finally:
            await client.close()  # already closed once the reset succeeded
        await check.close()
        return replace(handle, token=token)

    async def _restore(self, handle: SandboxHandle, phases: dict[str, float]) -> SandboxHandle:
        assert self.snapshot is not None
        fresh = await self._in_place(handle, phases)
        with timed_phase(phases, "restore"):
            client = await SandboxClient.connect(fresh.url, fresh.token, timeout_s=CLIENT_CONNECT_TIMEOUT_S)
            try:
                await client.restore(self.snapshot, self.start_url)
            finally:
                await client.close()
        return fresh

    async def _recreate(self, handle: SandboxHandle, phases: dict[str, float]) -> SandboxHandle:
        with timed_phase(phases, "recreate"):
            fresh = await self.backend.recreate(handle)
        with timed_phase(phases, "wait_ready"):
            await self.backend.wait_ready(fresh, self.ready_timeout_s)
        with timed_phase(phases, "observe"):
            await ready_observation(fresh, self.start_url)
        return fresh

    async def _replace(self, member: PoolMember, reason: str | None = None) -> SandboxHandle:
        """Destroy the member's whole slot and put a new ready sandbox in its place.

        Args:
            member: the member.
            reason: why (the sandbox's failure), recorded on the member and in
                :attr:`replacements`; ``None``: a reset's last fallback.

        Raises:
            BackendError: no replacement could be made; the member has left the pool.
        """
        old = member.handle.id
        if reason is not None:
            log.warning("sandbox %s of pool %s is broken (%s); replacing it", old, self.name, reason)
        try:
            await self.backend.destroy(old)
            member.handle = await self._new_ready()
        except BaseException:
            self.members.remove(member)
            raise
        member.resets += 1
        if reason is not None:
            member.replaced = reason
            self.replacements.append(Replacement(old, member.handle.id, reason))
        log.info("replaced sandbox %s with %s%s", old, member.handle.id, f" ({reason})" if reason else "")
        return member.handle

    async def _reset(self, member: PoolMember, mode: ResetMode) -> ResetReport:
        started = time.monotonic()
        old = member.handle
        broken = await self.backend.failure(old)
        if broken is not None:
            handle = await self._replace(member, broken)
            done = time.monotonic()
            return ResetReport(old.id, mode, "replace", done - started, handle, (f"{old.id}: {broken}",),
                               {"replace": done - started}, replaced=broken)
        failures: list[str] = []
        steps: list[tuple[Literal["in_place", "recreate", "restore"],
                          Callable[[SandboxHandle, dict[str, float]], Awaitable[SandboxHandle]]]] = []
        if mode == "in_place":
            steps.append(("in_place", self._in_place))
        elif mode == "restore":
            steps.append(("restore", self._restore))
        steps.append(("recreate", self._recreate))
        for step, run in steps:
            phases: dict[str, float] = {}
            try:
                member.handle = await run(old, phases)
            except (DeskpodError, TimeoutError, OSError) as exc:
                failures.append(f"{step}: {type(exc).__name__}: {exc}"[:500])
                log.warning("reset of sandbox %s by %s failed: %s", old.id, step, exc)
                continue
            member.resets += 1
            return ResetReport(old.id, mode, step, time.monotonic() - started, member.handle, tuple(failures),
                               phases)
        replacing = time.monotonic()
        handle = await self._replace(member)
        done = time.monotonic()
        return ResetReport(old.id, mode, "replace", done - started, handle, tuple(failures),
                           {"replace": done - replacing})

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

    async def acquire(self) -> SandboxHandle:
        """Lease an idle, healthy sandbox (an unhealthy one is replaced first).

        Returns:
            The leased sandbox's handle, with its current token. When the idle sandbox
            was found broken and replaced, its member's ``replaced`` says why (and
            :attr:`replacements` has the entry).

        Raises:
            PoolExhaustedError: every sandbox is leased.
            BackendError: an unhealthy sandbox could not be replaced.
        """
        async with self._lock:
            for member in self.members:
                if member.state != "idle":
                    continue
                reason = await self.backend.failure(member.handle)
                if reason is not None:
                    await self._replace(member, reason)
                member.state = "leased"
                return member.handle
        raise PoolExhaustedError(f"all {len(self.members)} sandboxes of pool {self.name!r} are leased",
                                 detail={"size": self.size, "leased": len(self.members)})

    async def release(self, sandbox_id: str, *, mode: ResetMode | None = None) -> ResetReport:
        """Reset a leased sandbox (rotating its token) and put it back as idle.

        Args:
            sandbox_id: the leased sandbox.
            mode: how to reset; ``None``: the pool's ``reset_mode``.

        Returns:
            What the reset did. A replacement has a new id (``report.handle.id``).

        Raises:
            BackendError: the sandbox is not leased or not in this pool, or it could
                not be brought back at all (it has then left the pool).
        """
        member = self.member(sandbox_id)
        if member.state != "leased":
            raise BackendError(f"sandbox {sandbox_id} is not leased", detail={"reason": "state"})
        report = await self.reset(sandbox_id, mode=mode)
        member.state = "idle"
        return report

    async def reset(self, sandbox_id: str, *, mode: ResetMode | None = None) -> ResetReport:
        """Reset a sandbox of the pool (leased or idle), rotating its token; its lease is kept.

        Args:
            sandbox_id: the sandbox.
            mode: how to reset; ``None``: the pool's ``reset_mode``.

        Returns:
            What the reset did.

        Raises:
            BackendError: not in this pool, ``restore`` without a snapshot, or the
                sandbox could not be brought back at all (it has then left the pool).
        """
        mode = mode or self.reset_mode
        if mode == "restore" and self.snapshot is None:
            raise BackendError("reset mode 'restore' needs a snapshot", detail={"reason": "config"})
        return await self._reset(self.member(sandbox_id), mode)

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
