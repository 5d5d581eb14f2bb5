"""The Docker backend and the warm pool, against real containers from the project's images.

The module builds the images with compose (cached), starts two test sites on a
network of its own (``allowed.test`` on the egress allowlist, ``blocked.test`` not),
and makes every sandbox through :class:`DockerBackend` with that network as the
egress proxies' outside network. Every sandbox is created in this module's pool
(label ``deskpod.pool``), and teardown removes them all by that label, and the
test sites, also when a test fails. Probes only target this module's own
containers.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import subprocess
import time
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from deskpod.audit import audit_sandbox
from deskpod.audit.zone import ZONE_CHECK_IDS
from deskpod.backend import DockerBackend, DockerBackendConfig, DockerSandbox, SandboxHandle, SandboxPool
from deskpod.backend.config import LABEL_POOL, LABEL_SANDBOX
from deskpod.backend.pool import Replacement
from deskpod.client import Sandbox, SandboxClient
from deskpod.controller import load_task, run_task
from deskpod.controller.egress import egress_control_of
from deskpod.errors import PoolExhaustedError, UnauthorizedError
from deskpod_stack import DEMO_IMAGE, EGRESS_IMAGE, HOSTGUARD_IMAGE, SANDBOX_IMAGE, build_images
from running_service import free_port

pytestmark = pytest.mark.integration

DESKPOD = str(Path(sys.executable).parent / "deskpod")
PROJECT = f"deskpodbackend{os.getpid()}"
"""Compose-project label of the test sites, so ``deskpod audit`` probes them as the
sandbox's unreachable peers (it picks its targets by that label)."""
POOL = f"bt{os.getpid()}"
"""The pool label of every sandbox this module makes."""

PROBE = r"""
import json, socket, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
P = json.loads(PARAMS)
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://egress:3128'}))
def fetch(name):
    try:
        return proxy.open(f'http://{name}/', timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return f'error: {e}'
def connect(address):
    try:
        socket.create_connection(tuple(address), timeout=3).close()
        return 'connected'
    except OSError as e:
        return f'error: {e}'
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError as e:
        return f'error: {e}'
# Every attempt that must fail waits out its timeout: all of them run at once.
jobs = [(name, fetch, name) for name in P['names']]
jobs += [(label, connect, address) for label, address in P['direct'].items()]
jobs += [('dns ' + name, resolve, name) for name in P['resolve']]
with ThreadPoolExecutor(max(1, len(jobs))) as pool:
    print(json.dumps(dict(zip([j[0] for j in jobs], pool.map(lambda j: j[1](j[2]), jobs)))))
"""


@dataclass
class Env:
    """What the module's tests share."""

    docker: Any
    backend: DockerBackend
    network: str
    site_ips: dict[str, str]


def probe(env: Env, handle: SandboxHandle, params: dict[str, Any]) -> dict[str, Any]:
    """Run :data:`PROBE` in the sandbox as its user; it prints one JSON object."""
    code = PROBE.replace("PARAMS", repr(json.dumps(params)))
    result = env.docker.containers.get(handle.container).exec_run(["python3", "-c", code], demux=True)
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    return dict(json.loads(out))


def leftovers(client: Any, sandbox_id: str) -> list[str]:
    """Names of containers and networks still labelled with ``sandbox_id``."""
    label = {"label": f"{LABEL_SANDBOX}={sandbox_id}"}
    return [c.name for c in client.containers.list(all=True, filters=label)] + [
        n.name for n in client.networks.list(filters=label)]


async def connect_ok(handle: SandboxHandle) -> bool:
    """True when the sandbox accepts the handle's token; False when it refuses it."""
    try:
        client = await SandboxClient.connect(handle.url, handle.token, timeout_s=10)
    except UnauthorizedError:
        return False
    await client.close()
    return True


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    client = docker.from_env()
    client.ping()
    build_images()
    network = f"{PROJECT}_outside"
    test_labels = {"com.docker.compose.project": PROJECT, "deskpod.test": "backend"}
    sites = []
    try:
        client.networks.create(network, driver="bridge", labels=test_labels)
        site_ips = {}
        for name in ("allowed", "blocked"):
            endpoint = client.api.create_endpoint_config(aliases=[f"{name}.test"])
            site = client.containers.create(
                DEMO_IMAGE, name=f"{PROJECT}_{name}", network=network,
                networking_config={network: endpoint}, read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                labels={**test_labels, "com.docker.compose.service": name},
            )
            sites.append(site)
            site.start()
            site.reload()
            site_ips[name] = site.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        # The images this checkout built (DESKPOD_SANDBOX_IMAGE, DESKPOD_EGRESS_IMAGE), not :latest.
        config = DockerBackendConfig.from_env(
            {}, outside_network=network, egress_allowlist="allowed.test", name_prefix=f"deskpodbt{os.getpid()}",
            sandbox_image=SANDBOX_IMAGE, egress_image=EGRESS_IMAGE, hostguard_image=HOSTGUARD_IMAGE)
        yield Env(client, DockerBackend(config, client=client), network, site_ips)
    finally:
        for container in client.containers.list(all=True, filters={"label": f"{LABEL_POOL}={POOL}"}):
            container.remove(force=True, v=True)
        for net in client.networks.list(filters={"label": f"{LABEL_POOL}={POOL}"}):
            net.remove()
        for site in sites:
            site.remove(force=True, v=True)
        for net in client.networks.list(filters={"label": f"com.docker.compose.project={PROJECT}"}):
            net.remove()


@pytest.fixture(scope="module")
def pair(env: Env) -> list[SandboxHandle]:
    """Two sandboxes made by the backend, both ready (torn down with ``env``)."""

    async def make() -> list[SandboxHandle]:
        handles = list(await asyncio.gather(env.backend.create(pool=POOL), env.backend.create(pool=POOL)))
        readiness = await asyncio.gather(*(env.backend.wait_ready(h) for h in handles))
        for r in readiness:
            assert r.attempts >= 1 and r.last_status.endswith("/healthz 200"), r
        return handles

    return asyncio.run(make())


def test_a_backend_sandbox_passes_deskpod_audit(env: Env, pair: list[SandboxHandle]) -> None:
    report = audit_sandbox(pair[0].container, project=PROJECT, client=env.docker)
    assert report.ok, [(c.id, c.detail) for c in report.failed]
    passed = {c.id for c in report.checks if c.status == "pass"}
    assert {
        "cap_drop_all", "cap_add_none", "no_new_privileges", "seccomp_custom", "read_only_root", "pids_limit",
        "memory_limit", "cpu_limit", "config_user", "no_host_mounts", "tmpfs_sized", "internal_network_only",
        "no_published_ports", "healthcheck", "no_token_in_config", "uid_non_root", "cap_eff_zero",
        "no_new_privs", "seccomp_filter_mode", "writable_only_tmpfs", "no_setid_files",
        "syscall_io_uring_setup", "syscall_ptrace_other_process", "egress_tcp_blocked", "dns_blocked",
        "proxy_refuses_non_allowlisted_http", "proxy_refuses_ip_literal_http", "chromium_sandbox",
        *ZONE_CHECK_IDS,
    } <= passed, sorted({c.id for c in report.checks} - passed)


def workspace_name(handle: SandboxHandle) -> str:
    """The slot's workspace container (named like its sandbox container)."""
    return handle.container.removesuffix("-sandbox") + "-workspace"


def test_the_sandbox_is_labelled_and_hardened_like_compose(env: Env, pair: list[SandboxHandle]) -> None:
    attrs = env.docker.api.inspect_container(pair[0].container)
    host = attrs["HostConfig"]
    assert attrs["Config"]["Labels"][LABEL_SANDBOX] == pair[0].id
    assert attrs["Config"]["Labels"][LABEL_POOL] == POOL
    assert host["ShmSize"] == 2**30 and host["Memory"] == 3 * 2**30 and host["NanoCpus"] == 2_000_000_000
    assert host["PidsLimit"] == 512 and host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert set(host["Tmpfs"]) == {"/tmp", "/home/deskpod"}
    # The slot's agent zone: a workspace container with the same hardening, uid 1001.
    workspace = env.docker.api.inspect_container(workspace_name(pair[0]))
    whost = workspace["HostConfig"]
    assert workspace["Config"]["Labels"][LABEL_SANDBOX] == pair[0].id
    assert workspace["Config"]["User"] == "1001:1001" and whost["IpcMode"] == "private"
    assert whost["ReadonlyRootfs"] is True and whost["CapDrop"] == ["ALL"] and whost["PidsLimit"] == 512
    assert set(whost["Tmpfs"]) == {"/workspace", "/tmp", "/home/agent"}
    assert list(workspace["NetworkSettings"]["Networks"]) == [pair[0].network]
    assert attrs["Config"]["User"] == "1000:1000"
    assert [e for e in attrs["Config"]["Env"] if e.startswith("DESKPOD_TOKEN")] == [
        f"DESKPOD_TOKEN_SHA256={hashlib.sha256(pair[0].token.encode()).hexdigest()}"]


def test_an_allowlisted_site_answers_through_egress_and_a_blocked_one_does_not(
        env: Env, pair: list[SandboxHandle]) -> None:
    out = probe(env, pair[0], {"names": ["allowed.test", "blocked.test"],
                               "direct": {"direct allowed": [env.site_ips["allowed"], 80]},
                               "resolve": ["allowed.test"]})
    assert out["allowed.test"] == 200, out
    assert out["blocked.test"] == 403, out
    assert str(out["direct allowed"]).startswith("error"), out
    assert str(out["dns allowed.test"]).startswith("error"), out


SLOT_FETCH = (
    "import urllib.request as u, urllib.error as e\n"
    "for n in ('allowed.test', 'blocked.test'):\n"
    "    try:\n        print(n, u.urlopen('http://%s/' % n, timeout=10).status)\n"
    "    except e.HTTPError as x:\n        print(n, x.code)\n"
)


def test_a_slots_proxy_admits_workspace_commands_only_with_their_grant(
        env: Env, pair: list[SandboxHandle]) -> None:
    """The slot's own egress proxy enforces `network: true` like compose's: an agent command
    that sets the proxy inline is refused; a network-enabled one reaches its allowlist only."""

    async def body() -> tuple[str, str]:
        client = await SandboxClient.connect(pair[0].url, pair[0].token, timeout_s=30)
        try:
            outputs = []
            for fields in (
                {"argv": ["env", "http_proxy=http://egress:3128", "python3", "-c", SLOT_FETCH]},
                {"argv": ["python3", "-c", SLOT_FETCH], "network": True, "allowed_domains": ["allowed.test"]},
            ):
                reply = await client.send_raw(json.dumps({"id": client.next_id(), "type": "exec", **fields}))
                workspace = getattr(reply, "workspace", None)
                assert workspace is not None and workspace.exit_code == 0, reply
                outputs.append(workspace.stdout)
            return outputs[0], outputs[1]
        finally:
            await client.close()

    inline, networked = asyncio.run(body())
    assert inline == "allowed.test 407\nblocked.test 403\n", inline  # 407: no credentials
    assert networked == "allowed.test 200\nblocked.test 403\n", networked


def test_two_sandboxes_are_on_separate_networks_and_cannot_reach_each_other(
        env: Env, pair: list[SandboxHandle]) -> None:
    a, b = pair
    assert a.network != b.network and a.egress != b.egress
    for h in pair:
        nets = env.docker.api.inspect_container(h.container)["NetworkSettings"]["Networks"]
        assert list(nets) == [h.network]
        assert env.docker.networks.get(h.network).attrs["Internal"] is True
    out = probe(env, a, {"names": [b.address], "resolve": [b.container, b.egress],
                         "direct": {"daemon": [b.address, 8765], "egress": [b.address, 3128]}})
    assert str(out["daemon"]).startswith("error") and str(out["egress"]).startswith("error"), out
    assert out[b.address] == 403, out  # an IP literal through the proxy
    assert str(out[f"dns {b.container}"]).startswith("error") and str(out[f"dns {b.egress}"]).startswith("error"), out


def test_one_call_starts_a_connected_sandbox_and_leaving_removes_it(env: Env) -> None:
    """``DockerSandbox.create()`` (driving.md's first example): a slot of its own, ready and
    connected; the verbs work (an allowlisted page through the slot's proxy, keyword
    observation options); leaving ``async with`` removes every resource of the slot (the
    backend's destroy), and destroying again is a no-op."""

    async def run() -> tuple[str, int, Any]:
        async with await DockerSandbox.create(env.backend.config, ready_timeout_s=120) as sb:
            assert len(leftovers(env.docker, sb.sandbox_id)) == 4  # network, egress, workspace, sandbox
            await sb.navigate("http://allowed.test/")
            page = await sb.observe(page_text=True, screenshot=False)
            png = await sb.screenshot()
        await env.backend.destroy(sb.sandbox_id)  # idempotent
        return sb.sandbox_id, len(png), page

    sandbox_id, png_bytes, page = asyncio.run(run())
    assert page.url == "http://allowed.test/" and page.page_text and page.screenshot is None
    assert png_bytes > 0
    assert leftovers(env.docker, sandbox_id) == []
    assert sandbox_id not in asyncio.run(env.backend.list_ids())


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


SLOT_ATTACK = r"""
import json, urllib.request, urllib.error
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://egress:3128'}))
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = {}
for name in ('allowed.test', 'blocked.test'):
    try:
        out[name] = proxy.open(f'http://{name}/', timeout=10).status
    except urllib.error.HTTPError as e:
        out[name] = e.code
    except OSError as e:
        out[name] = f'error: {e}'
body = json.dumps({'allowed_domains': None}).encode()
for label, headers in (('no token', {}), ('guessed token', {'Authorization': 'Bearer ' + 'a' * 43})):
    req = urllib.request.Request('http://egress:3129/v1/allowlist', data=body, method='PUT',
                                 headers={'Content-Type': 'application/json', **headers})
    try:
        out['put ' + label] = direct.open(req, timeout=10).status
    except urllib.error.HTTPError as e:
        out['put ' + label] = e.code
    except OSError as e:
        out['put ' + label] = f'error: {e}'
print(json.dumps(out))
"""


def test_a_slots_proxy_holds_the_runs_list_during_a_run_and_its_own_after(env: Env, tmp_path: Path) -> None:
    """The slot's stack allows allowed.test and blocked.test; the run only allowed.test. During
    the run a request straight from the slot's sandbox container (bypassing Chromium) to
    blocked.test is refused by the slot's own proxy, whose control endpoint refuses the
    sandbox's attempts to change the list; after the run blocked.test answers again."""
    backend = DockerBackend(env.backend.config.model_copy(update={"egress_allowlist": "allowed.test,blocked.test"}),
                            client=env.docker)

    def attack(handle: SandboxHandle) -> dict[str, Any]:
        result = env.docker.containers.get(handle.container).exec_run(["python3", "-c", SLOT_ATTACK], demux=True)
        out, err = result.output
        assert result.exit_code == 0, (err or b"").decode()[-2000:]
        return dict(json.loads(out))

    async def make() -> SandboxHandle:
        handle = await backend.create(pool=POOL)
        await backend.wait_ready(handle)
        return handle

    handle = asyncio.run(make())
    try:
        for name in (handle.container, workspace_name(handle)):
            env_lines = " ".join(env.docker.api.inspect_container(name)["Config"]["Env"])
            assert handle.egress_token not in env_lines, name
        egress_env = env.docker.api.inspect_container(handle.egress)["Config"]["Env"]
        assert f"DESKPOD_EGRESS_CONTROL_TOKEN_SHA256={hashlib.sha256(handle.egress_token.encode()).hexdigest()}" \
            in egress_env and handle.egress_token not in " ".join(egress_env)
        before = attack(handle)
        assert before["allowed.test"] == 200 and before["blocked.test"] == 200, before
        task = tmp_path / "task.yaml"
        task.write_text(json.dumps({
            "name": "slot-egress", "start_url": "http://allowed.test/", "allowed_domains": ["allowed.test"],
            "limits": {"max_steps": 3, "max_wall_time_s": 90},
            "steps": [{"actions": [{"type": "wait", "seconds": 0.5}]}],
            "success": {"timeout_s": 1, "page_text_contains": "never shown"}}))
        during: list[dict[str, Any]] = []

        def on_event(record: dict[str, Any]) -> None:
            if record["event"] == "egress" and record.get("proxy") == "set":
                during.append(attack(handle))  # the run waits: the list is in force now

        result = asyncio.run(run_task(load_task(task), handle.url, handle.token, audit_dir=tmp_path / "audit",
                                      egress_control=egress_control_of(handle), on_event=on_event))
        assert result.reason is None or not result.reason.startswith("egress_control"), result.reason
        assert len(during) == 1, result.reason
        assert during[0]["allowed.test"] == 200 and during[0]["blocked.test"] == 403, during
        assert during[0]["put no token"] == 401 and during[0]["put guessed token"] == 401, during
        after = attack(handle)
        assert after["allowed.test"] == 200 and after["blocked.test"] == 200, after
    finally:
        asyncio.run(backend.destroy(handle.id))


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
        released = cli("pool", "release", lease["id"], "--lease", lease["lease"], "--pool", POOL, "--json")
        assert released.returncode == 0, released.stdout + released.stderr
        assert json.loads(released.stdout)["performed"] == "in_place"
        assert not token_file.exists() and not egress_file.exists() and not asyncio.run(connect_ok(handle))
        assert token not in (tmp_path / "state" / "pools" / f"{POOL}.json").read_text()
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
