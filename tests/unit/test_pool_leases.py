"""Leases of a warm pool: renewed while their holder lives, taken back (reset) once it stops (no Docker).

The pool runs against a fake backend (sandboxes as records; a recreate rotates the
token), with ``reset_mode="recreate"`` so no daemon is dialled; the sandbox's readiness
observation is a no-op. Lease lengths are fractions of a second.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from deskpod.backend import PoolRecord, PoolStateFile, Readiness, SandboxHandle, SandboxPool
from deskpod.backend import pool_reset
from deskpod.backend.base import Backend
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.lease import LEASE_S, RENEWALS_PER_LEASE, keep_renewing
from deskpod.client.rotations import token_rotated
from deskpod.errors import BackendError, PoolExhaustedError
from deskpod.settings import load_settings


class LeaseBackend(Backend):
    """Sandboxes as records; each recreate gives a new token; renewals are recorded."""

    def __init__(self) -> None:
        self.made = 0
        self.recreated = 0
        self.renewed: list[tuple[str, float]] = []

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        self.made += 1
        return SandboxHandle(id=f"s{self.made}", container="c", network="n", egress="e",
                             address=f"10.0.0.{self.made}", token=token or f"token-{self.made}-0" * 4, pool=pool)

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        self.recreated += 1
        return replace(handle, token=token or f"token-{handle.id}-{self.recreated}" * 4)

    async def destroy(self, sandbox_id: str) -> None:
        return None

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
        return Readiness(attempts=1, elapsed_s=0.0, last_status="running, /healthz 200")

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        return True

    async def renew(self, handle: SandboxHandle, expires_at: float) -> None:
        self.renewed.append((handle.id, expires_at))

    async def list_ids(self, pool: str | None = None) -> list[str]:
        return []


@pytest.fixture(autouse=True)
def no_observation(monkeypatch: pytest.MonkeyPatch) -> None:
    async def observed(handle: SandboxHandle, start_url: str | None = None, timeout_s: float = 0) -> None:
        return None

    monkeypatch.setattr(pool_reset, "ready_observation", observed)


def _pool(lease_s: float) -> tuple[SandboxPool, LeaseBackend]:
    backend = LeaseBackend()
    return SandboxPool(backend, name="p", size=1, reset_mode="recreate", lease_s=lease_s), backend


def test_the_default_lease_is_a_minute_renewed_every_third() -> None:
    assert LEASE_S == 60.0 and RENEWALS_PER_LEASE == 3
    assert load_settings({}, config_file=None).pool_lease_s == LEASE_S
    assert load_settings({"DESKPOD_POOL_LEASE_S": "3"}, config_file=None).pool_lease_s == 3.0


def test_a_lease_nobody_renews_expires_and_acquire_takes_the_slot_back_reset() -> None:
    async def run() -> None:
        pool, backend = _pool(0.2)
        await pool.fill()
        first = await pool.acquire()
        lease = pool.member(first.id).lease
        with pytest.raises(PoolExhaustedError):
            await pool.acquire()  # the lease is still running
        await asyncio.sleep(0.25)
        second = await pool.acquire()
        assert second.id == first.id and second.token != first.token and backend.recreated == 1
        assert pool.member(first.id).lease != lease
        with pytest.raises(BackendError) as lost:
            await pool.renew(first.id, lease)  # the dead holder's lease is gone for good
        assert lost.value.detail["reason"] == "lease_lost"

    asyncio.run(run())


def test_a_lease_renewed_by_its_living_holder_is_kept_past_its_length() -> None:
    async def run() -> None:
        pool, backend = _pool(0.3)
        await pool.fill()
        async with pool.renewing():
            handle = await pool.acquire()
            await asyncio.sleep(0.8)
            with pytest.raises(PoolExhaustedError):
                await pool.acquire()
        assert pool.member(handle.id).state == "leased" and backend.recreated == 0
        assert len([r for r in backend.renewed if r[0] == handle.id]) >= 3

    asyncio.run(run())


def test_expire_releases_every_expired_lease_reset() -> None:
    async def run() -> None:
        pool, backend = _pool(0.1)
        await pool.fill()
        handle = await pool.acquire()
        assert await pool.expire() == []
        await asyncio.sleep(0.15)
        (report,) = await pool.expire()
        assert report.sandbox_id == handle.id and report.performed == "recreate"
        member = pool.member(handle.id)
        assert (member.state, member.lease, member.lease_expires) == ("idle", "", 0.0)

    asyncio.run(run())


def test_a_lessees_reset_in_this_process_hands_the_pool_the_new_token() -> None:
    async def run() -> None:
        pool, _ = _pool(60)
        await pool.fill()
        handle = await pool.acquire()
        token_rotated(handle.url, handle.token, "rotated-once-" * 3)  # what Sandbox.reset() reports
        token_rotated(handle.url, "rotated-once-" * 3, "rotated-twice-" * 3)
        assert pool.member(handle.id).handle.token == "rotated-twice-" * 3
        pool.rotated(handle.id, "told-by-another-process-" * 2)
        assert pool.member(handle.id).handle.token == "told-by-another-process-" * 2
        await pool.release(handle.id)
        fresh = pool.member(handle.id).handle.token
        token_rotated(handle.url, "told-by-another-process-" * 2, "late-" * 8)  # no longer watched
        assert pool.member(handle.id).handle.token == fresh

    asyncio.run(run())


def test_a_holder_in_another_process_renews_through_the_state_file(tmp_path: Path) -> None:
    async def run() -> None:
        state = PoolStateFile("p", tmp_path)
        pool, _ = _pool(0.2)
        await pool.fill()
        record = PoolRecord(name="p", size=1, backend=DockerBackendConfig())
        handle = await pool.acquire()
        lease = pool.member(handle.id).lease
        record.update_from(pool)
        state.save(record)
        before = time.time()
        async with keep_renewing(lambda: asyncio.to_thread(state.renew, handle.id, lease, 0.2), 0.2):
            await asyncio.sleep(0.5)
        stored = state.load()
        assert stored is not None and stored.members[0].lease_expires > before + 0.2
        with pytest.raises(BackendError) as lost:
            state.renew(handle.id, "not-the-lease", 0.2)
        assert lost.value.detail["reason"] == "lease_lost"

    asyncio.run(run())


def test_a_leased_member_stored_before_leases_expired_counts_as_expired(tmp_path: Path) -> None:
    record = PoolRecord.model_validate({
        "name": "p", "size": 1, "backend": {},
        "members": [{"id": "s1", "container": "c", "network": "n", "egress": "e", "address": "10.0.0.1",
                     "token": "t" * 32, "pool": "p", "state": "leased"}]})
    (member,) = record.to_members()
    assert member.lease_expires == 0.0
    pool = SandboxPool(LeaseBackend(), name="p", size=1, reset_mode="recreate", members=[member])
    (report,) = asyncio.run(pool.expire())
    assert report.sandbox_id == "s1" and pool.member("s1").state == "idle"


def test_a_lease_must_last_more_than_nothing() -> None:
    with pytest.raises(BackendError, match="more than 0 s"):
        SandboxPool(LeaseBackend(), lease_s=0)
