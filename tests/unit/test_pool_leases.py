"""Leases of a warm pool: renewed while their holder lives, taken back (reset) once it stops (no Docker).

The pool runs against a fake backend (``tests/support/lease_backend``: sandboxes as
records; a recreate rotates the token), with ``reset_mode="recreate"`` so no daemon is
dialled; the sandbox's readiness observation is a no-op. Lease lengths are fractions of a second.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from lease_backend import LeaseBackend

from deskpod.backend import PoolRecord, PoolStateFile, SandboxHandle, SandboxPool
from deskpod.backend import pool_reset
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.lease import LEASE_S, RENEWALS_PER_LEASE, keep_renewing
from deskpod.client.rotations import token_rotated
from deskpod.errors import BackendError, PoolExhaustedError
from deskpod.settings import load_settings


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
        lease = pool.member(handle.id).lease
        pool.rotated(handle.id, lease, "told-by-another-process-" * 2)
        assert pool.member(handle.id).handle.token == "told-by-another-process-" * 2
        await pool.release(handle.id, lease)
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


def test_a_holder_whose_lease_was_taken_back_cannot_release_or_touch_its_successors() -> None:
    """A's lease expires and B acquires the slot (reclaimed, reset): A's late release, renewal
    and token report are refused (``lease_lost``) and B's sandbox is untouched; B's release works."""
    async def run() -> None:
        pool, backend = _pool(0.1)
        await pool.fill()
        a = await pool.acquire()
        a_lease = pool.member(a.id).lease
        await asyncio.sleep(0.15)
        b = await pool.acquire()  # A's lease expired: the slot is reclaimed, reset, and leased to B
        b_lease = pool.member(b.id).lease
        assert b.id == a.id and b_lease != a_lease and backend.recreated == 1
        pool.lease_s = 60.0
        await pool.renew(b.id, b_lease)
        for late in (lambda: pool.release(a.id, a_lease), lambda: pool.release(a.id, a_lease, mode="recreate"),
                     lambda: pool.renew(a.id, a_lease)):
            with pytest.raises(BackendError) as lost:
                await late()
            assert lost.value.detail["reason"] == "lease_lost"
        with pytest.raises(BackendError) as lost:
            pool.rotated(a.id, a_lease, "a-stale-holders-token-" * 2)
        assert lost.value.detail["reason"] == "lease_lost"
        member = pool.member(b.id)
        assert (member.state, member.lease, member.handle.token) == ("leased", b_lease, b.token)
        assert backend.recreated == 1, "A's release reset B's sandbox"
        report = await pool.release(b.id, b_lease)
        assert report.performed == "recreate" and backend.recreated == 2
        assert (member.state, member.lease) == ("idle", "")
        with pytest.raises(BackendError) as twice:
            await pool.release(b.id, b_lease)  # released already: nothing left to release
        assert twice.value.detail["reason"] == "lease_lost" and backend.recreated == 2

    asyncio.run(run())


def test_a_lost_lease_released_through_the_state_file_leaves_the_successors_token_file(tmp_path: Path) -> None:
    async def run() -> None:
        state = PoolStateFile("p", tmp_path)
        pool, backend = _pool(60)
        await pool.fill()
        b = await pool.acquire()
        path = state.write_token(b.id, b.token)
        with pytest.raises(BackendError) as lost:
            await state.release(pool, b.id, "an-expired-lease")
        assert lost.value.detail["reason"] == "lease_lost"
        assert path.read_text() == b.token and pool.member(b.id).state == "leased" and backend.recreated == 0
        await state.release(pool, b.id, pool.member(b.id).lease)
        assert not path.exists() and pool.member(b.id).state == "idle"

    asyncio.run(run())


def test_a_leased_sandbox_is_reset_only_under_its_lease() -> None:
    """A's lease expires and B acquires the slot: A's reset, naming its old lease or none, is
    refused (``lease_lost``) and B's sandbox, lease and token are untouched; B's reset works and
    keeps B's lease. An idle sandbox is reset without a lease; a lease named for it was lost."""
    async def run() -> None:
        pool, backend = _pool(0.1)
        await pool.fill()
        a = await pool.acquire()
        a_lease = pool.member(a.id).lease
        await asyncio.sleep(0.15)
        b = await pool.acquire()  # reclaimed (the pool's own reset, needing no lease) and leased to B
        b_lease = pool.member(b.id).lease
        assert b.id == a.id and backend.recreated == 1
        pool.lease_s = 60.0
        await pool.renew(b.id, b_lease)
        for stale in (lambda: pool.reset(a.id), lambda: pool.reset(a.id, lease=a_lease),
                      lambda: pool.reset(a.id, lease=a_lease, mode="recreate")):
            with pytest.raises(BackendError) as lost:
                await stale()
            assert lost.value.detail["reason"] == "lease_lost"
        member = pool.member(b.id)
        assert (member.state, member.lease, member.handle.token) == ("leased", b_lease, b.token)
        assert backend.recreated == 1, "A's reset reset B's sandbox"
        report = await pool.reset(b.id, lease=b_lease)
        assert report.performed == "recreate" and backend.recreated == 2
        assert (member.state, member.lease) == ("leased", b_lease) and member.handle.token != b.token
        await pool.release(b.id, b_lease)
        assert backend.recreated == 3
        with pytest.raises(BackendError) as released:
            await pool.reset(b.id, lease=b_lease)
        assert released.value.detail["reason"] == "lease_lost" and backend.recreated == 3
        assert (await pool.reset(b.id)).performed == "recreate" and pool.member(b.id).state == "idle"

    asyncio.run(run())
