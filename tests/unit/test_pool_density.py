"""Filling a pool many at once, slot subnets from an operator range, slot memory sizing (no Docker).

The pool's fill runs against a fake backend whose starts can be made to fail; the
sandbox's own readiness check (a websocket observation) is replaced by a no-op, as
this is about the pool's scheduling, not the sandbox.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from deskpod.backend import DockerBackendConfig, Readiness, SandboxHandle, SandboxPool
from deskpod.backend import pool_reset as pool_module
from deskpod.backend.base import Backend
from deskpod.backend.config import egress_service, parse_bytes, sandbox_service, translate_service, workspace_service
from deskpod.backend.memory import (
    FULL_SLOT_BYTES,
    HOST_RESERVE_BYTES,
    MIN_DESKTOP_SLOT_BYTES,
    MIN_SLOT_BYTES,
    auto_slot_bytes,
    slot_memory,
)
from deskpod.backend.pool import StartEvent
from deskpod.backend.subnets import pick_subnet, used_subnets
from deskpod.errors import BackendError, SandboxNotReadyError

GIB = 2**30
MIB = 2**20


class FakeBackend(Backend):
    """Sandboxes as counters; the starts numbered in ``fail`` die before they are ready."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.started = 0
        self.running = 0
        self.most_at_once = 0
        self.alive: set[str] = set()
        self.destroyed: list[str] = []

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        self.started += 1
        handle = SandboxHandle(id=f"s{self.started:04d}", container=f"c{self.started}", network="n",
                               egress="e", address="127.0.0.1", token=token or "t" * 32, pool=pool)
        self.alive.add(handle.id)
        return handle

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(0.01)
            if int(handle.id[1:]) in self.fail:
                raise BackendError(f"sandbox {handle.id} stopped while starting", detail={"reason": "exited"})
            return Readiness(attempts=1, elapsed_s=0.01, last_status="running, /healthz 200")
        finally:
            self.running -= 1

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        return handle

    async def destroy(self, sandbox_id: str) -> None:
        self.alive.discard(sandbox_id)
        self.destroyed.append(sandbox_id)

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        return handle.id in self.alive

    async def failure(self, handle: SandboxHandle) -> str | None:
        return None if handle.id in self.alive else "missing"

    async def list_ids(self, pool: str | None = None) -> list[str]:
        return sorted(self.alive)


@pytest.fixture(autouse=True)
def no_observation(monkeypatch: pytest.MonkeyPatch) -> None:
    async def observed(handle: SandboxHandle, start_url: str | None = None, timeout_s: float = 0) -> None:
        return None

    monkeypatch.setattr(pool_module, "ready_observation", observed)


def test_fill_starts_at_most_the_bound_at_once_and_replaces_failed_starts() -> None:
    """Thirty missing sandboxes, four starts at a time; starts 3 and 7 die while starting:
    each is destroyed and tried again in a new slot, and the pool fills."""
    backend = FakeBackend(fail={3, 7})
    events: list[StartEvent] = []
    pool = SandboxPool(backend, size=30, start_concurrency=4, on_start=events.append)
    created = asyncio.run(pool.fill())
    assert len(created) == 30 and len(pool.members) == 30
    assert backend.most_at_once == 4
    assert backend.started == 32 and backend.destroyed == ["s0003", "s0007"]
    assert {m.handle.id for m in pool.members} == backend.alive
    assert [(e.kind, e.attempt) for e in pool.start_failures] == [("retry", 1), ("retry", 1)]
    assert sum(e.kind == "ready" for e in events) == 30
    assert sum(e.kind == "starting" for e in events) == 32


def test_fill_raises_only_for_a_slot_that_failed_every_attempt_and_keeps_the_others() -> None:
    backend = FakeBackend(fail={2, 4, 5})  # with 2 attempts: slot 1 fails at starts 2 and then 4 or 5
    pool = SandboxPool(backend, size=3, start_concurrency=1, start_attempts=2)
    with pytest.raises(BackendError) as caught:
        asyncio.run(pool.fill())
    assert caught.value.detail["reason"] == "fill" and caught.value.detail["created"] == 2
    assert len(pool.members) == 2 and {m.handle.id for m in pool.members} == backend.alive
    assert [e.kind for e in pool.start_failures] == ["retry", "failed"]


def test_a_start_that_times_out_is_retried() -> None:
    class Slow(FakeBackend):
        async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
            if handle.id == "s0001":
                raise SandboxNotReadyError("not ready after 1 attempts", detail={})
            return await super().wait_ready(handle, timeout_s)

    backend = Slow()
    pool = SandboxPool(backend, size=2)
    asyncio.run(pool.fill())
    assert len(pool.members) == 2 and "s0001" in backend.destroyed


def test_the_pool_refuses_a_zero_bound() -> None:
    with pytest.raises(BackendError):
        SandboxPool(FakeBackend(), size=2, start_concurrency=0)


# ---------------------------------------------------------------------- subnets

def test_pick_subnet_takes_the_first_free_small_subnet_of_the_range() -> None:
    used = [ipaddress.IPv4Network("10.220.0.0/28"), ipaddress.IPv4Network("10.220.0.32/27"),
            ipaddress.IPv4Network("172.17.0.0/16")]
    assert pick_subnet("10.220.0.0/16", 28, used) == "10.220.0.16/28"
    assert pick_subnet("10.220.0.0/16", 28, used, skip=["10.220.0.16/28"]) == "10.220.0.64/28"
    # A network Docker made elsewhere that covers the whole range leaves nothing.
    with pytest.raises(BackendError) as caught:
        pick_subnet("10.220.0.0/24", 28, [ipaddress.IPv4Network("10.0.0.0/8")])
    assert caught.value.detail["reason"] == "subnets_exhausted"
    with pytest.raises(BackendError):
        pick_subnet("10.220.0.0/24", 20, [])


def test_used_subnets_reads_the_engines_network_list() -> None:
    networks: list[dict[str, Any]] = [
        {"Name": "bridge", "IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]}},
        {"Name": "v6", "IPAM": {"Config": [{"Subnet": "fd00::/64"}]}},
        {"Name": "host", "IPAM": {"Config": []}},
        {"Name": "none", "IPAM": {"Config": None}},
        {"Name": "odd", "IPAM": {"Config": [{"Subnet": "not a subnet"}]}},
    ]
    assert used_subnets(networks) == [ipaddress.IPv4Network("172.17.0.0/16")]


def test_the_backend_config_checks_the_subnet_range() -> None:
    config = DockerBackendConfig.from_env({"DESKPOD_SUBNET_POOL": "10.220.0.0/16", "DESKPOD_SUBNET_SIZE": "28"})
    assert (config.subnet_pool, config.subnet_size) == ("10.220.0.0/16", 28)
    for bad in ({"DESKPOD_SUBNET_POOL": "10.220.0.1/16"}, {"DESKPOD_SUBNET_POOL": "fd00::/64"},
                {"DESKPOD_SUBNET_SIZE": "30"}):
        with pytest.raises(BackendError):
            DockerBackendConfig.from_env(bad)


# ---------------------------------------------------------------------- memory

def test_thirty_sized_slots_fit_this_host_and_two_keep_composes_limits() -> None:
    host = 24 * GIB
    share = auto_slot_bytes(host, 30)
    assert share is not None and 30 * slot_memory(share).total_bytes <= host - HOST_RESERVE_BYTES
    assert auto_slot_bytes(host, 2) is None  # 11 GiB each: compose.yaml's 5.5 GiB fit
    with pytest.raises(BackendError, match="at most"):
        auto_slot_bytes(host, 40)


def test_desktop_slots_count_the_desktop_zone_in_what_fits_the_host() -> None:
    """With the desktop profile each slot's fourth container is counted: the shares still fit the
    host, compose.yaml's limits count as 7.5 GiB a slot, and the smallest slot is larger."""
    host = 24 * GIB
    share = auto_slot_bytes(host, 20, desktop=True)
    assert share is not None and 20 * slot_memory(share, desktop=True).total_bytes <= host - HOST_RESERVE_BYTES
    assert auto_slot_bytes(host, 3) is None and auto_slot_bytes(host, 3, desktop=True) is not None
    for budget in (MIN_DESKTOP_SLOT_BYTES, 2 * GIB, FULL_SLOT_BYTES):
        plan = slot_memory(budget, desktop=True)
        assert plan.total_bytes <= budget and plan.sandbox_bytes >= slot_memory(MIN_SLOT_BYTES).sandbox_bytes
        desktop_fs = plan.workspace_dir_bytes + plan.desktop_tmp_bytes + plan.desktop_home_bytes + plan.desktop_shm_bytes
        assert desktop_fs <= plan.desktop_bytes / 2, plan
    with pytest.raises(BackendError):
        slot_memory(MIN_DESKTOP_SLOT_BYTES - MIB, desktop=True)


def test_each_containers_tmpfs_and_shm_stay_well_below_its_limit() -> None:
    for budget in (MIN_SLOT_BYTES, 750 * MIB, 2 * GIB, FULL_SLOT_BYTES):
        plan = slot_memory(budget)
        assert plan.total_bytes <= budget
        sandbox_fs = plan.sandbox_shm_bytes + plan.sandbox_tmp_bytes + plan.sandbox_home_bytes
        assert plan.sandbox_bytes - sandbox_fs >= 0.4 * plan.sandbox_bytes, plan  # room for Chromium, all full
        workspace_fs = (plan.workspace_dir_bytes + plan.workspace_tmp_bytes + plan.workspace_home_bytes
                        + plan.workspace_shm_bytes)
        assert workspace_fs <= plan.workspace_bytes / 2, plan
    with pytest.raises(BackendError):
        slot_memory(MIN_SLOT_BYTES - MIB)


def _tmpfs_bytes(kwargs: dict[str, Any]) -> int:
    return sum(parse_bytes(opts.rsplit("size=", 1)[1]) for opts in kwargs["tmpfs"].values())


def test_a_sized_slot_sets_every_containers_limits_and_swap_to_the_plan() -> None:
    config = DockerBackendConfig.from_env({}, slot_memory="750m")
    plan = config.slot_limits()
    assert plan is not None

    def read(path: str) -> str:
        return "{}"

    sandbox = translate_service(sandbox_service(config, "ab" * 32), read)
    workspace = translate_service(workspace_service(config), read)
    egress = translate_service(egress_service(config, ""), read)
    assert sandbox["mem_limit"] == sandbox["memswap_limit"] == plan.sandbox_bytes
    assert workspace["mem_limit"] == workspace["memswap_limit"] == plan.workspace_bytes
    assert egress["mem_limit"] == egress["memswap_limit"] == plan.egress_bytes
    assert sandbox["mem_limit"] + workspace["mem_limit"] + egress["mem_limit"] <= 750 * MIB
    assert sandbox["shm_size"] + _tmpfs_bytes(sandbox) < sandbox["mem_limit"]
    assert workspace["shm_size"] + _tmpfs_bytes(workspace) < workspace["mem_limit"]
    # Unsized: compose.yaml's limits, no memswap key (the engine's default).
    full = translate_service(sandbox_service(DockerBackendConfig.from_env({}), "ab" * 32), read)
    assert full["mem_limit"] == 3 * GIB and "memswap_limit" not in full
    # "auto" in the environment is left to `deskpod pool up`, which knows the size.
    assert DockerBackendConfig.from_env({"DESKPOD_SLOT_MEMORY": "auto"}).slot_memory is None
    with pytest.raises(BackendError):
        DockerBackendConfig.from_env({}, slot_memory="100m")


def test_the_audit_accepts_a_sized_slot_and_still_refuses_tmpfs_that_fill_the_limit() -> None:
    from deskpod.audit.zone import tmpfs_within_memory

    config = DockerBackendConfig.from_env({}, slot_memory="750m")
    sandbox = translate_service(sandbox_service(config, "ab" * 32), lambda _: "{}")
    workspace = translate_service(workspace_service(config), lambda _: "{}")

    def attrs(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"HostConfig": {"Memory": kwargs["mem_limit"], "ShmSize": kwargs["shm_size"], "Tmpfs": kwargs["tmpfs"]}}

    assert tmpfs_within_memory({"sandbox": attrs(sandbox), "workspace": attrs(workspace)}).status == "pass"
    full = dict(sandbox, tmpfs={"/tmp": f"size={sandbox['mem_limit'] * 3 // 4}"})
    assert tmpfs_within_memory({"sandbox": attrs(full)}).status == "fail"
