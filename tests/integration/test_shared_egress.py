"""One egress proxy in its multi-tenant mode serves two real sandboxes, each with its own
allowlist, through the Kubernetes backend against the fake cluster.

The proxy is the project's egress image with ``DESKPOD_EGRESS_MODE=tenants`` on the
local Docker engine; the fake agent-sandbox (tests/support/fake_agent_sandbox.py) makes
two warm sandboxes with the Docker backend, and each, once ready, is attached to the
shared proxy under the name ``egress`` in place of its slot's own (so its ``HTTP_PROXY``
is the shared one). Two Kubernetes backends claim them with different run lists (A:
``allowed.test``, B: ``blocked.test``; the proxy's own list holds both), so the backend
registers each as a tenant at adoption and removes it at release. Everything is tried the
way a tenant's processes would: Chromium and other processes of the sandbox container
(its browser address), agent commands through the daemon (the workspace container's
address) with their own grant, with the other tenant's live grant, with a spoofed
``X-Forwarded-For``, and from an address nobody registered. Probes target only the test
module's own sites (``allowed.test``, ``blocked.test``).
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import time
from typing import Any

import pytest
from fake_agent_sandbox import fake_cluster
from test_backend import POOL, Env, env, workspace_name  # noqa: F401 (env is the module's fixture)

from deskpod.backend import SandboxHandle
from deskpod.backend.config import LABEL_POOL, egress_service, translate_service
from deskpod.backend.egress_tenants import EgressTenants
from deskpod.backend.kubernetes_backend import KubernetesBackend, KubernetesBackendConfig
from deskpod.client import SandboxClient
from deskpod.controller.egress import egress_control_of
from deskpod.errors import EgressControlError
from deskpod.protocol import ObserveOptions, Result
from deskpod.tokens import new_token

pytestmark = pytest.mark.integration

PROBE = r"""
import base64, json, os, socket, sys, time, urllib.parse
def own_grant():
    proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
    return base64.b64encode(("%s:%s" % (proxy.username, proxy.password)).encode()).decode()
def get(host, auth, headers):
    try:
        s = socket.create_connection(("egress", 3128), timeout=10)
        head = "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (host, host)
        if auth:
            head += "Proxy-Authorization: Basic %s\r\n" % (own_grant() if auth == "own" else auth)
        head += "".join(h + "\r\n" for h in headers)
        s.sendall((head + "\r\n").encode())
        line = s.recv(64).decode(errors="replace").split("\r\n")[0]
        s.close()
        return int(line.split()[1])
    except (OSError, IndexError, ValueError) as e:
        return "error: " + str(e)
spec = json.loads(sys.argv[1])
if spec.get("hold"):  # keep this command's grant live, published, until told to stop
    open("/workspace/grant.txt", "w").write(own_grant())
    deadline = time.monotonic() + 40
    while not os.path.exists("/workspace/stop") and time.monotonic() < deadline:
        time.sleep(0.1)
print(json.dumps({key: get(*args) for key, args in spec["get"].items()}))
"""


def probe_container(docker: Any, container: str, gets: dict[str, list[Any]]) -> dict[str, Any]:
    """Run :data:`PROBE` in ``container`` as its user (``gets``: key -> [host, auth, headers])."""
    result = docker.containers.get(container).exec_run(
        ["python3", "-c", PROBE, json.dumps({"get": gets})], demux=True)
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    return dict(json.loads(out))


async def agent_probe(client: SandboxClient, gets: dict[str, list[Any]], **fields: Any) -> dict[str, Any]:
    """Run :data:`PROBE` as an agent command through the daemon (``fields``: ``network``, ...)."""
    reply = await client.send_raw(json.dumps({"id": client.next_id(), "type": "exec",
                                              "argv": ["python3", "/workspace/probe.py", json.dumps({"get": gets,
                                                       "hold": fields.pop("hold", False)})], **fields}))
    assert isinstance(reply, Result) and reply.workspace is not None, reply
    assert reply.workspace.exit_code == 0, reply.workspace
    return dict(json.loads(reply.workspace.stdout))


async def prepare(client: SandboxClient) -> None:
    for request in ({"type": "seed_workspace"}, {"type": "write_file", "path": "probe.py", "content": PROBE}):
        reply = await client.send_raw(json.dumps({"id": client.next_id(), **request}))
        assert isinstance(reply, Result), reply


def address_of(docker: Any, container: str, network: str) -> str:
    attrs = docker.api.inspect_container(container)
    return str(attrs["NetworkSettings"]["Networks"][network]["IPAddress"])


def proxy_status(address: str, host: str) -> int:
    """The HTTP status squid at ``address:3128`` answers for ``GET http://HOST/``.

    Raises ConnectionRefusedError while squid is not listening yet."""
    conn = http.client.HTTPConnection(address, 3128, timeout=10)
    try:
        conn.request("GET", f"http://{host}/", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_one_shared_proxy_keeps_each_sandboxs_own_allowlist(env: Env) -> None:  # noqa: F811
    started = time.monotonic()
    control_token = new_token()
    service = egress_service(env.backend.config, hashlib.sha256(control_token.encode()).hexdigest())
    service["environment"] = {**service["environment"], "DESKPOD_EGRESS_ALLOWLIST": "allowed.test blocked.test",
                              "DESKPOD_EGRESS_MODE": "tenants"}
    shared = env.docker.containers.create(name=f"{POOL}-shared-egress", labels={LABEL_POOL: POOL},
                                          network=env.network, **translate_service(service, lambda path: ""))

    def attach(handle: SandboxHandle) -> None:
        """The slot's own proxy leaves its network; the shared one answers there as ``egress``."""
        env.docker.networks.get(handle.network).disconnect(handle.egress)
        env.docker.networks.get(handle.network).connect(shared, aliases=["egress"])

    def detach(handle: SandboxHandle) -> None:
        try:
            env.docker.networks.get(handle.network).disconnect(shared)
        except Exception:  # noqa: BLE001 (already gone: nothing to undo)
            pass

    try:
        shared.start()
        address = address_of(env.docker, shared.name, env.network)
        control_url = f"http://{address}:3129"
        tenants = EgressTenants(control_url, control_token)
        deadline = time.monotonic() + 30
        while True:  # the control endpoint is up, and squid answers on its port (it starts later)
            try:
                assert asyncio.run(tenants.get("nobody")) is None
                # Not a tenant (the test's own host): refused everything.
                assert proxy_status(address, "allowed.test") == 403
                break
            except (EgressControlError, ConnectionRefusedError):
                assert time.monotonic() < deadline, shared.logs(tail=40).decode(errors="replace")
                time.sleep(0.3)

        bootstrap = new_token()
        with fake_cluster(env.backend, bootstrap, warm=2, on_made=attach, on_destroy=detach,
                          replenish=False) as (url, _api, fake):
            def backend(allowlist: str) -> KubernetesBackend:
                return KubernetesBackend(KubernetesBackendConfig(
                    bootstrap_token=bootstrap, api_url=url, claim_lifetime_s=600, name_prefix=f"dp{allowlist[:1]}",
                    egress_control_url=control_url, egress_control_token=control_token,
                    egress_allowlist=(allowlist,)))

            backend_a, backend_b = backend("allowed.test"), backend("blocked.test")
            asyncio.run(scenario(env.docker, tenants, backend_a, backend_b, fake.handles))
            assert fake.errors == [] and fake.invalid == []
    finally:
        shared.remove(force=True, v=True)
    print(f"shared egress test: {time.monotonic() - started:.1f} s")


async def scenario(docker: Any, tenants: EgressTenants, backend_a: KubernetesBackend, backend_b: KubernetesBackend,
                   slots: dict[str, SandboxHandle]) -> None:
    a = await backend_a.create()
    b = await backend_b.create()
    # Registered at adoption: the pod's address, its daemon, the run's list.
    record = await tenants.get(a.egress_tenant)
    assert a.egress_tenant == a.claim and record is not None, record
    assert record["addresses"] == [a.address] == record["browser_addresses"]
    assert record["daemon"] == f"{a.address}:8765" and record["allowed_domains"] == ["allowed.test"]
    slot_a = next(h for h in slots.values() if h.address == a.address)
    slot_b = next(h for h in slots.values() if h.address == b.address)

    # The browser's address (the sandbox container: Chromium, and anything else there).
    spoof = [f"X-Forwarded-For: {b.address}", f"Forwarded: for={b.address}"]
    gets: dict[str, list[Any]] = {"allowed": ["allowed.test", None, []], "blocked": ["blocked.test", None, []],
                                  "blocked_spoofed": ["blocked.test", None, spoof]}
    assert probe_container(docker, a.container, gets) == {"allowed": 200, "blocked": 403, "blocked_spoofed": 403}
    assert probe_container(docker, b.container, gets) == {"allowed": 403, "blocked": 200, "blocked_spoofed": 200}

    client_a = await SandboxClient.connect(a.url, a.token, timeout_s=30)
    client_b = await SandboxClient.connect(b.url, b.token, timeout_s=30)
    try:
        # A's Chromium: its own host loads through the shared proxy, B's is refused.
        page = ObserveOptions(screenshot=False, page_text=True)
        assert (await client_a.navigate("http://allowed.test/", page)).title == "deskpod demo search"
        refused = await client_a.navigate("http://blocked.test/", page)
        assert refused.title != "deskpod demo search" and "deskpod demo search" not in (refused.page_text or "")

        # Each task's list replaces the tenant's, inside it only.
        control_a = egress_control_of(a)
        assert control_a is not None
        assert await control_a.set([]) == []
        assert probe_container(docker, a.container, gets)["allowed"] == 403
        with pytest.raises(EgressControlError) as outside:
            await control_a.set(["blocked.test"])
        assert outside.value.detail["status"] == 422
        assert await control_a.set(None) is None
        assert probe_container(docker, a.container, gets)["allowed"] == 200

        # The workspace container's address is not the pod's (here, unlike in a pod): not a
        # tenant, so even a live grant gets nothing.
        await prepare(client_a)
        await prepare(client_b)
        own = {"allowed": ["allowed.test", "own", []]}
        assert await agent_probe(client_a, own, network=True, allowed_domains=["allowed.test"]) == {"allowed": 403}

        # Registered as a tenant's non-browser address (a Docker slot's workspace): each command
        # needs a live grant of its own tenant's daemon.
        for handle, slot, domain in ((a, slot_a, "allowed.test"), (b, slot_b, "blocked.test")):
            workspace = address_of(docker, workspace_name(slot), slot.network)
            await tenants.register(handle.egress_tenant, addresses=[handle.address, workspace],
                                   browser_addresses=[handle.address], daemon=f"{handle.address}:8765",
                                   allowed_domains=[domain])
        granted = await agent_probe(client_a, {"allowed": ["allowed.test", "own", []],
                                               "blocked": ["blocked.test", "own", []]},
                                    network=True, allowed_domains=["allowed.test", "blocked.test"])
        assert granted == {"allowed": 200, "blocked": 403}, granted
        assert await agent_probe(client_a, {"bare": ["allowed.test", None, []]}) == {"bare": 407}

        # B's command holds a live grant; A's command borrows it (read from B's workspace).
        holder = asyncio.create_task(agent_probe(client_b, {"blocked": ["blocked.test", "own", []]},
                                                 network=True, allowed_domains=["blocked.test"], hold=True))
        ws_b = docker.containers.get(workspace_name(slot_b))
        deadline = time.monotonic() + 30
        while (found := ws_b.exec_run(["cat", "/workspace/grant.txt"])).exit_code != 0:
            assert time.monotonic() < deadline and not holder.done(), found
            await asyncio.sleep(0.2)
        borrowed = found.output.decode().strip()
        ws_b_address = address_of(docker, ws_b.name, slot_b.network)
        stolen = await agent_probe(client_a, {
            "blocked": ["blocked.test", borrowed, []],
            "allowed": ["allowed.test", borrowed, []],
            "blocked_spoofed": ["blocked.test", borrowed, [f"X-Forwarded-For: {ws_b_address}"]],
        }, network=True, allowed_domains=["allowed.test"])
        assert stolen == {"blocked": 403, "allowed": 403, "blocked_spoofed": 403}, stolen
        assert ws_b.exec_run(["touch", "/workspace/stop"]).exit_code == 0
        assert await holder == {"blocked": 200}, "B's own grant works for B"
    finally:
        await client_a.close()
        await client_b.close()

    # Removing a tenant ends its access at once.
    assert probe_container(docker, b.container, gets)["blocked"] == 200
    assert await tenants.remove(b.egress_tenant)
    assert probe_container(docker, b.container, gets) == {"allowed": 403, "blocked": 403, "blocked_spoofed": 403}
    # A sandbox the proxy no longer knows (a restarted proxy) is broken: a pool replaces it.
    assert await backend_b.failure(b) == "egress tenant missing"
    assert await backend_a.failure(a) is None

    # Release: the backend removes the tenant before it deletes the claim.
    await backend_a.destroy(a.id)
    await backend_b.destroy(b.id)
    assert await tenants.get(a.egress_tenant) is None and await tenants.get(b.egress_tenant) is None
