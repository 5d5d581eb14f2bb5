"""The Docker backend, against real containers from the project's images: a slot's
hardening and isolation, its own egress proxy, ``DockerSandbox``, a slot with the desktop profile.

The environment (images, two test sites on a network of their own, the backend) is
:func:`backend_env.backend_env`'s; every sandbox is created in its pool (label
``deskpod.pool``), and teardown removes them all by that label, and the test sites, also
when a test fails. Probes only target this module's own containers. The warm pool's tests
are in ``test_backend_pool.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_env import POOL, PROJECT, Env, backend_env, leftovers, workspace_name

from deskpod.audit import audit_sandbox
from deskpod.audit.zone import ZONE_CHECK_IDS
from deskpod.backend import DockerBackend, DockerSandbox, SandboxHandle
from deskpod.backend.config import LABEL_POOL, LABEL_SANDBOX
from deskpod.client import SandboxClient
from deskpod.controller import load_task, run_task
from deskpod.controller.egress import egress_control_of
from deskpod.errors import ExecutionError
from deskpod.protocol import ObserveOptions, WriteFileRequest
from deskpod_stack import DESKTOP_IMAGE

pytestmark = pytest.mark.integration

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


def probe(env: Env, handle: SandboxHandle, params: dict[str, Any]) -> dict[str, Any]:
    """Run :data:`PROBE` in the sandbox as its user; it prints one JSON object."""
    code = PROBE.replace("PARAMS", repr(json.dumps(params)))
    result = env.docker.containers.get(handle.container).exec_run(["python3", "-c", code], demux=True)
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    return dict(json.loads(out))


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    yield from backend_env()


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


def test_a_desktop_slot_passes_audit_opens_a_terminal_shares_its_workspace_and_leaves_nothing(env: Env) -> None:
    """``desktop`` on: the slot's desktop container runs beside the workspace container, the slot
    passes ``deskpod audit`` (the workspace's /workspace is the slot's memory-only volume),
    ``open_app`` terminal opens a window of the agent's zone, a file the agent writes with
    ``write_file`` is in the desktop container's /workspace, and destroy removes the volume too.
    (The terminal's uid and reach are ``test_desktop_zone``'s.)"""
    config = env.backend.config.model_copy(update={"desktop": True, "desktop_image": DESKTOP_IMAGE})
    backend = DockerBackend(config, client=env.docker)

    async def make() -> SandboxHandle:
        handle = await backend.create(pool=POOL)
        await backend.wait_ready(handle)
        return handle

    async def drive(handle: SandboxHandle) -> list[Any]:
        client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
        try:
            await client.request(WriteFileRequest(type="write_file", id=client.next_id(), path="shared.txt",
                                                  content="from the agent"))
            deadline = time.monotonic() + 60
            while True:
                try:
                    await client.act([{"type": "open_app", "app": "terminal"}], ObserveOptions(screenshot=False))
                    break
                except ExecutionError as exc:  # the applications runner may still be starting
                    if exc.detail.get("reason") != "no_desktop" or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
            while time.monotonic() < deadline:
                obs = await client.act([], ObserveOptions(screenshot=False, settle=False, windows=True))
                found = [w for w in obs.windows or [] if w.zone == "agent" and w.app == "XTerm"]
                if found:
                    return found
                await asyncio.sleep(0.3)
            raise AssertionError("the terminal's window never appeared")
        finally:
            await client.close()

    handle = asyncio.run(make())
    try:
        desktop = env.docker.containers.get(handle.container.removesuffix("-sandbox") + "-desktop")
        report = audit_sandbox(handle.container, project=PROJECT, client=env.docker)
        assert report.ok, [(c.id, c.detail) for c in report.failed]
        assert ZONE_CHECK_IDS <= {c.id for c in report.checks if c.status == "pass"}
        assert asyncio.run(drive(handle))
        seen = desktop.exec_run(["cat", "/workspace/shared.txt"])
        assert (seen.exit_code, seen.output) == (0, b"from the agent"), seen
        volume, = env.docker.volumes.list(filters={"label": f"{LABEL_SANDBOX}={handle.id}"})
        assert volume.attrs["Options"]["type"] == "tmpfs"
    finally:
        asyncio.run(backend.destroy(handle.id))
    assert leftovers(env.docker, handle.id) == []
