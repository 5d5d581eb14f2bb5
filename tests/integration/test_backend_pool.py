"""The warm pool on the Docker backend, against real containers from the project's images:
acquire, release and reset; leases (a killed holder's expires); replacing a crashed or
OOM-killed sandbox; a dense pool on its own subnets; the ``deskpod pool`` CLI and
``deskpod mcp --pool``.

The environment (images, two test sites on a network of their own, the backend) is
:func:`backend_env.backend_env`'s, as in ``test_backend.py``; every sandbox is created in
its pool (label ``deskpod.pool``), and teardown removes them all by that label, and the
test sites, also when a test fails.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest
from backend_env import POOL, Env, backend_env, connect_ok, leftovers, workspace_name
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from deskpod.backend import DockerBackend, SandboxHandle, SandboxPool
from deskpod.backend.pool import Replacement
from deskpod.client import Sandbox, SandboxClient
from deskpod.client.egress_control import ControlEndpoint
from deskpod.errors import PoolExhaustedError
from running_service import free_port

pytestmark = pytest.mark.integration

DESKPOD = str(Path(sys.executable).parent / "deskpod")


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    yield from backend_env()


def test_pool_acquire_release_and_replace(env: Env) -> None:
    async def run() -> None:
        pool = SandboxPool(env.backend, name=POOL, size=1)
        try:
            assert len(await pool.fill()) == 1
            first = await pool.acquire()
            assert await connect_ok(first)
            with pytest.raises(PoolExhaustedError):
                await pool.acquire()

            # In place: the old token is refused afterwards, the new one works.
            report = await pool.release(first.id, pool.member(first.id).lease)
            assert (report.performed, report.failures) == ("in_place", ()), report
            assert report.handle.id == first.id and report.handle.token != first.token
            assert not await connect_ok(first)
            assert await connect_ok(report.handle)
            assert pool.member(first.id).state == "idle"

            # The lessee resets through the Python client (its token rotates): the pool learns the
            # new token, so its release still resets in place (not a 13 s recreate).
            lessee = await pool.acquire()
            async with await Sandbox.open(lessee.url, lessee.token) as sandbox:
                await sandbox.reset()
                assert sandbox.token != lessee.token
            report = await pool.release(lessee.id, pool.member(lessee.id).lease)
            assert (report.performed, report.failures) == ("in_place", ()), report

            # Recreate: same slot, new container, new token.
            second = await pool.acquire()
            old_container = env.docker.api.inspect_container(second.container)["Id"]
            old_workspace = env.docker.api.inspect_container(workspace_name(second))["Id"]
            report = await pool.release(second.id, pool.member(second.id).lease, mode="recreate")
            assert report.performed == "recreate" and report.handle.network == second.network
            assert env.docker.api.inspect_container(report.handle.container)["Id"] != old_container
            assert env.docker.api.inspect_container(workspace_name(second))["Id"] != old_workspace
            assert not await connect_ok(second) and await connect_ok(report.handle)

            # A failed in-place reset (the pool's token no longer works) falls back to recreate.
            member = pool.member(second.id)
            member.handle = replace(member.handle, token="not-the-token-at-all-000000")
            report = await pool.reset(second.id)
            assert report.performed == "recreate" and report.failures[0].startswith("in_place: Unauthorized")
            assert await connect_ok(report.handle)

            # A broken slot (its network gone) cannot be recreated: it is replaced.
            handle = pool.member(second.id).handle
            env.docker.api.remove_container(handle.container, force=True)
            env.docker.api.remove_container(handle.egress, force=True)
            env.docker.api.remove_container(workspace_name(handle), force=True)
            env.docker.networks.get(handle.network).remove()
            report = await pool.reset(second.id, mode="recreate")
            assert report.performed == "replace" and report.handle.id != second.id, report
            assert await connect_ok(report.handle) and leftovers(env.docker, second.id) == []

            # An idle sandbox that died is replaced when acquired.
            third = report.handle
            env.docker.api.kill(third.container)
            fourth = await pool.acquire()
            assert fourth.id != third.id and await connect_ok(fourth)
            assert leftovers(env.docker, third.id) == []
        finally:
            ids = [m.handle.id for m in pool.members]
            await pool.close()
        for sandbox_id in ids:
            assert leftovers(env.docker, sandbox_id) == []

    asyncio.run(run())


def _oom_kill(env: Env, container: str) -> dict[str, Any]:
    """Make the kernel's OOM killer end ``container``: lower its memory limit to just above
    what it uses, then fill its /dev/shm as the sandbox's uid (tmpfs pages count against
    the limit and cannot be reclaimed). Returns its final ``State``."""
    box = env.docker.containers.get(container)
    usage = int(box.stats(stream=False)["memory_stats"]["usage"])
    limit = usage + 64 * 1_048_576
    box.update(mem_limit=limit, memswap_limit=limit)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        box.reload()
        if box.attrs["State"]["Status"] != "running":
            break
        try:
            box.exec_run(["sh", "-c", "i=0; while dd if=/dev/zero of=/dev/shm/fill$i bs=1M count=64; "
                          "do i=$((i+1)); done"], user="1000")
        except docker.errors.APIError:
            pass
        time.sleep(1)
    box.reload()
    return dict(box.attrs["State"])


def test_the_pool_replaces_a_crashed_and_an_oom_killed_sandbox_and_says_why(env: Env) -> None:
    """A sandbox that was killed or OOM-killed stayed in the pool (restart
    policy ``no``). The pool now notices at status, acquire and release, replaces it and reports
    why from Docker's State (OOMKilled, ExitCode)."""

    async def run() -> None:
        pool = SandboxPool(env.backend, name=POOL, size=2)
        try:
            await pool.fill()
            killed, oomed = (m.handle for m in pool.members)
            env.docker.api.kill(killed.container)
            state = _oom_kill(env, oomed.container)
            assert state["OOMKilled"] is True and state["Status"] == "exited", state

            # pool status (check): both idle members replaced, with their reasons.
            found = {r.old_id: r for r in await pool.check()}
            assert found[killed.id].reason == "exited (code 137)", found
            assert found[oomed.id].reason == "oom_killed", found
            for member in pool.members:
                assert member.handle.id not in (killed.id, oomed.id)
                assert await env.backend.failure(member.handle) is None and await connect_ok(member.handle)
            assert {m.replaced for m in pool.members} == {"exited (code 137)", "oom_killed"}
            assert leftovers(env.docker, killed.id) == [] and leftovers(env.docker, oomed.id) == []

            # acquire: an idle member that died meanwhile is replaced before it is handed out.
            first = pool.members[0].handle
            env.docker.api.kill(first.container)
            leased = await pool.acquire()
            assert leased.id != first.id and await connect_ok(leased)
            assert pool.replacements[-1] == Replacement(first.id, leased.id, "exited (code 137)")

            # release: a leased member that died is replaced, and the report says why.
            env.docker.api.kill(leased.container)
            report = await pool.release(leased.id, pool.member(leased.id).lease)
            assert report.performed == "replace" and report.replaced == "exited (code 137)", report
            assert await connect_ok(report.handle) and pool.member(report.handle.id).state == "idle"
        finally:
            await pool.close()

    asyncio.run(run())


def test_the_cli_runs_a_pool_without_printing_tokens(env: Env, tmp_path: Path) -> None:
    cli_env = dict(os.environ, DESKPOD_STATE_DIR=str(tmp_path / "state"), DESKPOD_OUTSIDE_NETWORK=env.network,
                   DESKPOD_EGRESS_ALLOWLIST="allowed.test", DESKPOD_NAME_PREFIX=f"deskpodbt{os.getpid()}")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([DESKPOD, *args], env=cli_env, capture_output=True, text=True, timeout=300)

    up = cli("pool", "up", "--pool", POOL, "--size", "1", "--json")
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(up.stdout)
        assert len(status["sandboxes"]) == 1 and status["sandboxes"][0]["state"] == "idle"
        acquired = cli("pool", "acquire", "--pool", POOL, "--json")
        assert acquired.returncode == 0, acquired.stderr
        lease = json.loads(acquired.stdout)
        token_file = Path(lease["token_file"])
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text()
        assert token not in acquired.stdout + up.stdout
        # The lease names the slot's own egress proxy control, beside the token file, private.
        egress_file = Path(lease["egress_control_file"])
        assert egress_file == token_file.with_suffix(".egress") and egress_file.stat().st_mode & 0o777 == 0o600
        assert json.loads(egress_file.read_text())["token"] not in acquired.stdout
        handle = SandboxHandle(id=lease["id"], container="", network="", egress="",
                               address=lease["url"].split("//")[1].split(":")[0], token=token)
        assert asyncio.run(connect_ok(handle))
        assert cli("pool", "acquire", "--pool", POOL).returncode == 1  # exhausted
        held = json.loads(egress_file.read_text())  # what lessee 1 keeps of the slot's proxy
        assert _egress(held, "PUT", {"allowed_domains": ["allowed.test"]})[0] == 200
        released = cli("pool", "release", lease["id"], "--lease", lease["lease"], "--pool", POOL, "--json")
        assert released.returncode == 0, released.stdout + released.stderr
        assert json.loads(released.stdout)["performed"] == "in_place"
        assert not token_file.exists() and not egress_file.exists() and not asyncio.run(connect_ok(handle))
        assert token not in (tmp_path / "state" / "pools" / f"{POOL}.json").read_text()
        _lessee_one_keeps_no_hold_on_the_slots_proxy(cli, held)
        assert cli("reset", "nosuchid", "--pool", POOL).returncode == 1
        assert cli("pool", "status", "--pool", "nosuchpool").returncode == 2
        # `deskpod mcp --pool`: a session leases the slot and gives it back once it ends.
        shot = asyncio.run(_mcp_screenshot(cli_env, tmp_path))
        assert not shot.is_error and shot.content[0].type == "image", shot
        deadline = time.monotonic() + 120
        while (states := [s["state"] for s in json.loads(cli("pool", "status", "--pool", POOL, "--json").stdout)
                          ["sandboxes"]]) != ["idle"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert states == ["idle"], "the MCP session's sandbox did not go back to the pool"
        _a_killed_holders_lease_expires(cli, cli_env)
    finally:
        down = cli("pool", "down", "--pool", POOL, "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["destroyed"] == [lease["id"]]
    assert not (tmp_path / "state" / "pools" / f"{POOL}.json").exists()
    assert leftovers(env.docker, lease["id"]) == []


def _egress(control: dict[str, str], method: str, body: dict[str, Any] | None = None,
            path: str = "/v1/allowlist") -> tuple[int, dict[str, Any]]:
    """One call to a slot's egress control endpoint with a lease's egress control document."""
    return ControlEndpoint(control["url"], control["token"], 10.0).call(method, path, body)


def _lessee_one_keeps_no_hold_on_the_slots_proxy(cli: Any, held: dict[str, str]) -> None:
    """Lessee 1 kept its lease's egress control token and set its run's list; once lessee 2 holds
    the slot, that token reads and sets nothing (401), lessee 2 starts under no list of lessee
    1's, and lessee 2's token cannot name the slot's next token (main handed every lessee the
    slot's control token, which no reset changed: lessee 1 read and lifted lessee 2's list)."""
    acquired = cli("pool", "acquire", "--pool", POOL, "--json")
    assert acquired.returncode == 0, acquired.stdout + acquired.stderr
    second = json.loads(acquired.stdout)
    try:
        mine = json.loads(Path(second["egress_control_file"]).read_text())
        assert mine["url"] == held["url"] and mine["token"] != held["token"]
        status, answer = _egress(mine, "GET")
        assert status == 200 and answer["allowed_domains"] is None, answer
        assert _egress(mine, "PUT", {"allowed_domains": []})[0] == 200  # lessee 2's run: no host
        for method, body in (("GET", None), ("PUT", {"allowed_domains": None}),
                             ("PUT", {"allowed_domains": ["allowed.test"]})):
            assert _egress(held, method, body)[0] == 401, (method, body)
        assert _egress(held, "PUT", {"token_sha256": "0" * 64}, "/v1/lessee")[0] == 401
        assert _egress(mine, "PUT", {"token_sha256": "0" * 64}, "/v1/lessee")[0] == 403
        assert _egress(mine, "GET")[1]["allowed_domains"] == []
    finally:
        assert cli("pool", "release", second["id"], "--lease", second["lease"], "--pool", POOL).returncode == 0


HOLD_LEASE_S = 3.0
"""The lease of the holder :func:`_a_killed_holders_lease_expires` kills, seconds."""


def _a_killed_holders_lease_expires(cli: Any, cli_env: dict[str, str]) -> None:
    """``deskpod pool acquire --hold`` keeps its lease past the lease's length while it lives;
    killed (SIGKILL), its slot is back in the pool within the lease, reset (a new token)."""
    holder = subprocess.Popen([DESKPOD, "pool", "acquire", "--pool", POOL, "--hold", "--json"],
                              env=dict(cli_env, DESKPOD_POOL_LEASE_S=str(HOLD_LEASE_S)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        text = ""
        while not text.endswith("}\n"):
            line = holder.stdout.readline()
            assert line, holder.stderr.read() if holder.stderr else ""
            text += line
        held = json.loads(text)
        token = Path(held["token_file"]).read_text()
        time.sleep(2 * HOLD_LEASE_S)  # two leases: renewed, so still held
        assert cli("pool", "acquire", "--pool", POOL).returncode == 1, "a live holder's lease was taken"
    finally:
        holder.kill()  # SIGKILL: no release, no more renewals
        holder.wait()
    killed = time.monotonic()
    time.sleep(HOLD_LEASE_S)
    acquired = cli("pool", "acquire", "--pool", POOL, "--json")
    assert acquired.returncode == 0, acquired.stdout + acquired.stderr
    lease = json.loads(acquired.stdout)
    assert lease["id"] == held["id"] and lease["lease"] != held["lease"]
    assert Path(lease["token_file"]).read_text() != token  # reset before reuse: the old token is dead
    address = lease["url"].split("//")[1].split(":")[0]
    assert not asyncio.run(connect_ok(SandboxHandle(id=held["id"], container="", network="", egress="",
                                                    address=address, token=token)))
    assert time.monotonic() - killed < HOLD_LEASE_S + 30
    assert cli("pool", "release", held["id"], "--lease", held["lease"], "--pool", POOL).returncode == 1  # lost
    assert cli("pool", "release", lease["id"], "--lease", lease["lease"], "--pool", POOL).returncode == 0


async def _mcp_screenshot(cli_env: dict[str, str], tmp_path: Path) -> Any:
    """One ``deskpod mcp --pool POOL`` session over stdio (the MCP SDK's client): a screenshot."""
    params = StdioServerParameters(command=DESKPOD, env=dict(cli_env, DESKPOD_AUDIT_KEY=str(tmp_path / "signing.key")),
                                   args=["mcp", "--pool", POOL, "--start-url", "http://allowed.test/",
                                         "--allow-domain", "allowed.test", "--approver-port", str(free_port()),
                                         "--audit-dir", str(tmp_path / "audit")])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        return await mcp.call_tool("screenshot", {})


class _KillFirstStart(DockerBackend):
    """The Docker backend, except that the first sandbox it starts is killed before it is ready."""

    killed: list[str]

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        handle = await super().create(token=token, pool=pool)
        if not self.killed:
            self.killed.append(handle.id)
            self.client.api.kill(handle.container)
        return handle


ALLOCATE = "b = bytearray(); [b.extend(b'x' * 1048576) for _ in range(LIMIT_MIB * 2)]; print('survived')"


def test_a_dense_pool_fills_past_a_failed_start_on_its_own_subnets_and_an_oom_stays_in_its_slot(
        env: Env) -> None:
    """A pool of two sized for thirty on this host (750 MiB a slot), its networks from an
    operator range: the first sandbox is killed while it starts; the pool destroys it,
    starts another in a new slot and fills. Every slot network's subnet is a /28 of the
    range. Then a process in one sandbox allocates twice its limit: the kernel kills it
    inside that sandbox's cgroup, and the other sandbox keeps answering."""
    subnet_range = ipaddress.IPv4Network(f"10.231.{os.getpid() % 256}.0/24")
    config = env.backend.config.model_copy(update={"subnet_pool": str(subnet_range), "subnet_size": 28,
                                                   "slot_memory": "750m"})
    backend = _KillFirstStart(config, client=env.docker)
    backend.killed = []
    plan = config.slot_limits()
    assert plan is not None

    async def run() -> None:
        pool = SandboxPool(backend, name=POOL, size=2, start_concurrency=2)
        try:
            await pool.fill()
            assert len(pool.members) == 2 and backend.killed
            assert [e.kind for e in pool.start_failures] == ["retry"], pool.start_failures
            assert leftovers(env.docker, backend.killed[0]) == []
            assert backend.killed[0] not in {m.handle.id for m in pool.members}
            for member in pool.members:
                net = env.docker.networks.get(member.handle.network)
                subnet = ipaddress.IPv4Network(net.attrs["IPAM"]["Config"][0]["Subnet"])
                assert subnet.prefixlen == 28 and subnet.subnet_of(subnet_range), subnet
                assert ipaddress.IPv4Address(member.handle.address) in subnet
                box = env.docker.api.inspect_container(member.handle.container)["HostConfig"]
                assert box["Memory"] == box["MemorySwap"] == plan.sandbox_bytes

            hog, neighbour = (m.handle for m in pool.members)
            code = ALLOCATE.replace("LIMIT_MIB", str(plan.sandbox_bytes // 1_048_576))
            result = env.docker.containers.get(hog.container).exec_run(["python3", "-c", code], user="1000")
            assert result.exit_code == 137 and b"survived" not in result.output, result
            client = await SandboxClient.connect(neighbour.url, neighbour.token, timeout_s=30)
            try:
                observation = await client.act([])
                assert observation.screenshot is not None
            finally:
                await client.close()
            assert await backend.failure(neighbour) is None
        finally:
            await pool.close()

    asyncio.run(run())
