"""A pool's members, and how one is brought back to a clean state: reset, recreate, replace.

:class:`PoolResets` is the part of :class:`deskpod.backend.pool.SandboxPool` that makes
sandboxes ready and resets them (the reset modes and their fallbacks are in
:mod:`deskpod.backend.pool`'s docstring); the pool adds its verbs (fill, acquire, leases,
release) on top. The values both hand out live here too: :class:`PoolMember`,
:class:`Replacement`, :class:`ResetReport`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from deskpod.backend.base import Backend, SandboxHandle
from deskpod.backend.egress_lessee import new_lessee
from deskpod.client import SandboxClient, reset_and_reconnect
from deskpod.errors import DeskpodError
from deskpod.timing import timed_phase

__all__ = [
    "CLIENT_CONNECT_TIMEOUT_S",
    "MemberState",
    "PoolMember",
    "PoolResets",
    "Replacement",
    "ResetMode",
    "ResetReport",
    "ready_observation",
]

log = logging.getLogger(__name__)

ResetMode = Literal["in_place", "recreate", "restore"]
MemberState = Literal["idle", "leased"]

CLIENT_CONNECT_TIMEOUT_S = 30.0
"""How long the pool retries connecting to a sandbox it believes ready, seconds."""


@dataclass
class PoolMember:
    """One sandbox of a pool.

    Attributes:
        handle: the sandbox (its ``token`` is the current one).
        state: ``"idle"`` (ready, waiting in the pool) or ``"leased"`` (handed out).
        resets: how many times it was reset, replaced or recreated.
        replaced: why the sandbox in this place was last replaced after a failure
            (``"oom_killed"``, ``"exited (code 137)"``...), ``None`` if never.
        lease: the id of the lease in force (:func:`deskpod.backend.lease.new_lease_id`),
            ``""`` when idle.
        lease_expires: when that lease ends unless renewed, epoch seconds (``time.time()``);
            ``0.0`` when idle.
    """

    handle: SandboxHandle
    state: MemberState = "idle"
    resets: int = 0
    replaced: str | None = None
    lease: str = ""
    lease_expires: float = 0.0


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


class PoolResets:
    """Makes a pool's sandboxes ready and resets them (the base of
    :class:`~deskpod.backend.pool.SandboxPool`, which sets every attribute below).

    Attributes:
        backend: makes and removes the sandboxes.
        name: the pool's name.
        start_url: the page a reset opens (``None``: the sandbox's start page).
        snapshot: the archive ``restore`` resets bring back.
        ready_timeout_s: how long a new or recreated sandbox may take to be ready, seconds.
        members: the pool's sandboxes.
        replacements: every sandbox found broken and replaced, oldest first.
    """

    backend: Backend
    name: str
    start_url: str | None
    snapshot: bytes | None
    ready_timeout_s: float
    members: list[PoolMember]
    replacements: list[Replacement]

    async def _new_ready(self) -> SandboxHandle:
        """Create a sandbox and wait until it is ready; destroy it if it never is."""
        handle = await self.backend.create(pool=self.name)
        try:
            readiness = await self.backend.wait_ready(handle, self.ready_timeout_s)
            await ready_observation(handle, self.start_url)
            handle = await new_lessee(handle)
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
                fresh = await run(old, phases)
                # The slot's proxy too: the last holder's list and lessee token end here.
                with timed_phase(phases, "egress"):
                    member.handle = await new_lessee(fresh)
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
