"""The egress proxy's multi-tenant mode without Docker: the control endpoint's tenant
registry (served for real on loopback, files in a temporary folder), the helpers' answers
(``images/egress/grant_check.py --tenant*``) against two daemon stand-ins, and the
controller's and the Kubernetes backend's clients of it. Attacks are tried as a tenant
would: another tenant's live credential, an address nobody registered, a removed tenant."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deskpod.backend.base import SandboxHandle
from deskpod.backend.egress_tenants import EgressTenants
from deskpod.backend.kubernetes_backend import KubernetesBackend, KubernetesBackendConfig
from deskpod.controller.egress import EgressControl, egress_control_beside, egress_control_of
from deskpod.errors import BackendError, EgressControlError
from egress_stand_ins import DaemonStandIn, control_endpoint, daemon_stand_in, load_egress_module, proxy_authorization

ROOT = Path(__file__).resolve().parents[2]


control = load_egress_module("egress_control", "tenants_egress_control")
grant_check = load_egress_module("grant_check", "tenants_grant_check")
TOKEN = "control-token-" + "x" * 30


def registration(*addresses: str, browser: list[str] | None = None, daemon: str = "10.1.0.9:8765",
                 domains: list[str] | None = None) -> dict[str, Any]:
    return {"addresses": list(addresses), "browser_addresses": list(addresses[:1]) if browser is None else browser,
            "daemon": daemon, "allowed_domains": ["allowed.test"] if domains is None else domains}


# ---- the registry's checks


def test_a_registration_is_checked_and_normalized() -> None:
    record, refused = control.check_registration(
        registration("10.1.0.5", "::ffff:10.1.0.6", domains=["Allowed.Test", "blocked.test"]), ["allowed.test"])
    assert record == {"addresses": ["10.1.0.5", "10.1.0.6"], "browser_addresses": ["10.1.0.5"],
                      "daemon": "10.1.0.9:8765", "allowed_domains": ["allowed.test", "blocked.test"],
                      "task_domains": None}
    assert refused == ["blocked.test"]


@pytest.mark.parametrize("body", [
    {**registration("10.1.0.5"), "extra": 1},
    registration(),  # no address
    registration("10.1.0.5", "10.1.0.6", "10.1.0.7", "10.1.0.8", "10.1.0.9"),
    registration("sandbox"),  # a name, not an address
    registration("127.0.0.1"),  # the proxy's own loopback
    registration("0.0.0.0"),
    registration("10.1.0.5", browser=["10.1.0.6"]),  # a browser address the tenant does not have
    registration("10.1.0.5", daemon="sandbox:8765"),
    registration("10.1.0.5", daemon="10.1.0.9"),
    registration("10.1.0.5", domains=None) | {"allowed_domains": None},
    registration("10.1.0.5", domains=["not a domain"]),
])
def test_a_malformed_registration_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        control.check_registration(body, ["allowed.test"])


def test_an_address_moves_to_the_newest_tenant(tmp_path: Path) -> None:
    """A pod's IP is reused by a later pod: the new registration takes it, and a tenant left
    with no address is gone."""
    store = control.TenantStore(str(tmp_path / "tenants.json"))
    old, _ = control.check_registration(registration("10.1.0.5", "10.1.0.6"), ["allowed.test"])
    other, _ = control.check_registration(registration("10.1.0.7"), ["allowed.test"])
    assert store.register("old", old) == [] and store.register("other", other) == []
    new, _ = control.check_registration(registration("10.1.0.5"), ["allowed.test"])
    assert store.register("new", new) == []
    tenants = store.read()
    assert tenants["old"]["addresses"] == ["10.1.0.6"] and tenants["old"]["browser_addresses"] == []
    newer, _ = control.check_registration(registration("10.1.0.6", "10.1.0.7"), ["allowed.test"])
    assert sorted(store.register("newer", newer)) == ["old", "other"]
    assert sorted(store.read()) == ["new", "newer"]


def test_a_task_list_must_be_inside_the_tenants(tmp_path: Path) -> None:
    store = control.TenantStore(str(tmp_path / "tenants.json"))
    record, _ = control.check_registration(registration("10.1.0.5", domains=["allowed.test", "demo.test"]),
                                           ["allowed.test", "demo.test"])
    store.register("a", record)
    assert store.set_task("a", ["www.demo.test"])[1] == []
    assert store.read()["a"]["task_domains"] == ["www.demo.test"]
    assert store.set_task("a", ["blocked.test"])[1] == ["blocked.test"]
    assert store.read()["a"]["task_domains"] == ["www.demo.test"], "a refused list changes nothing"
    assert store.set_task("a", None)[0]["task_domains"] is None  # type: ignore[index]
    assert store.set_task("nobody", ["demo.test"]) == (None, [])
    assert store.remove("a") and not store.remove("a")


# ---- the helpers, against two daemons


@pytest.fixture()
def daemons() -> Iterator[tuple[DaemonStandIn, DaemonStandIn]]:
    """Two stand-ins for agentd's check endpoint (tenant A's and tenant B's), each answering
    from its own registry and recording what it was asked."""
    with daemon_stand_in() as a, daemon_stand_in() as b:
        yield a, b


def write_tenants(path: Path, a: DaemonStandIn, b: DaemonStandIn) -> None:
    """Tenant A: browser 10.1.0.5, workspace 10.1.0.6, allowed.test; tenant B: browser
    10.2.0.5, workspace 10.2.0.6, demo.test (written as the control endpoint writes them;
    the daemons' loopback addresses stand in for the pods')."""
    path.write_text(json.dumps({"tenants": {
        "a": {"addresses": ["10.1.0.5", "10.1.0.6"], "browser_addresses": ["10.1.0.5"], "daemon": a.address,
              "allowed_domains": ["allowed.test"], "task_domains": None},
        "b": {"addresses": ["10.2.0.5", "10.2.0.6"], "browser_addresses": ["10.2.0.5"], "daemon": b.address,
              "allowed_domains": ["demo.test"], "task_domains": None}}}))


def test_each_tenant_reaches_only_its_own_list(tmp_path: Path, daemons: tuple[DaemonStandIn, DaemonStandIn]) -> None:
    path = tmp_path / "tenants.json"
    write_tenants(path, *daemons)
    checker = grant_check.TenantChecker(grant_check.TenantTable(str(path)))
    assert checker.answer_list("10.1.0.5 allowed.test\n") == "OK"
    assert checker.answer_list("10.1.0.6 www.allowed.test -\n") == "OK"
    assert checker.answer_list("10.1.0.5 demo.test\n").startswith("ERR"), "B's host, from A"
    assert checker.answer_list("10.2.0.5 demo.test\n") == "OK"
    assert checker.answer_list("10.2.0.5 allowed.test\n").startswith("ERR"), "A's host, from B"
    assert checker.answer_list("10.3.0.1 allowed.test\n").startswith("ERR"), "nobody's address"
    assert checker.answer_browser("10.1.0.5\n") == "OK" and checker.answer_browser("10.2.0.5\n") == "OK"
    assert checker.answer_browser("10.1.0.6\n") == "ERR", "a workspace address is not the browser"
    assert checker.answer_browser("10.3.0.1\n") == "ERR"
    assert checker.answer_browser("::ffff:10.1.0.5\n") == "OK", "one address, one spelling"


def test_a_grant_is_asked_of_the_clients_own_tenants_daemon(tmp_path: Path,
                                                            daemons: tuple[DaemonStandIn, DaemonStandIn]) -> None:
    """A's command with A's grant passes for A's hosts; with B's live grant (borrowed), or
    from an address nobody registered, it is refused and B's daemon is never asked."""
    a, b = daemons
    path = tmp_path / "tenants.json"
    write_tenants(path, a, b)
    checker = grant_check.TenantChecker(grant_check.TenantTable(str(path)))
    with a.grants.grant(["allowed.test"], 60.0) as mine, b.grants.grant(["demo.test"], 60.0) as theirs:
        assert checker.answer(f"10.1.0.6 allowed.test {proxy_authorization(mine)}\n") == "OK"
        assert checker.answer(f"10.2.0.6 demo.test {proxy_authorization(theirs)}\n") == "OK"
        b.asked.clear()
        assert checker.answer(f"10.1.0.6 allowed.test {proxy_authorization(theirs)}\n").startswith("ERR"), "B's grant at A"
        assert checker.answer(f"10.1.0.6 demo.test {proxy_authorization(theirs)}\n").startswith("ERR"), "B's host and grant"
        assert checker.answer(f"10.3.0.1 demo.test {proxy_authorization(theirs)}\n").startswith("ERR"), "nobody's address"
        assert checker.answer("10.1.0.6 allowed.test -\n").startswith("ERR"), "no credential"
        assert b.asked == [], "B's daemon was asked about another client's request"
    assert checker.answer(f"10.1.0.6 allowed.test {proxy_authorization(mine)}\n").startswith("ERR"), "revoked"


def test_a_changed_or_broken_file_applies_at_once(tmp_path: Path, daemons: tuple[DaemonStandIn, DaemonStandIn]) -> None:
    path = tmp_path / "tenants.json"
    checker = grant_check.TenantChecker(grant_check.TenantTable(str(path)))
    assert checker.answer_list("10.1.0.5 allowed.test\n").startswith("ERR"), "no file: no tenant"
    store = control.TenantStore(str(path))
    write_tenants(path, *daemons)
    assert checker.answer_list("10.1.0.5 allowed.test\n") == "OK"
    store.set_task("a", [])
    assert checker.answer_list("10.1.0.5 allowed.test\n").startswith("ERR"), "an empty task list: no host"
    store.set_task("a", None)
    assert checker.answer_list("10.1.0.5 allowed.test\n") == "OK"
    store.remove("a")
    assert checker.answer_list("10.1.0.5 allowed.test\n").startswith("ERR"), "removed: refused at once"
    assert checker.answer_browser("10.1.0.5\n") == "ERR"
    path.write_text("{not json")
    assert checker.answer_list("10.2.0.5 demo.test\n").startswith("ERR"), "a broken file refuses everyone"


# ---- the control endpoint, served, and its clients


@pytest.fixture()
def endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real control endpoint in the multi-tenant mode on loopback (stack: allowed.test,
    demo.test); yields its URL."""
    with control_endpoint(control, tmp_path, monkeypatch, TOKEN, tenants=True) as url:
        yield url


def call(url: str, method: str, path: str, body: Any = None, token: str = TOKEN) -> tuple[int, Any]:
    import http.client

    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"null")


def test_the_endpoint_needs_the_token_and_refuses_the_single_run_list(endpoint: str) -> None:
    assert call(endpoint, "PUT", "/v1/tenants/a", registration("10.1.0.5"), token="wrong")[0] == 401
    assert call(endpoint, "GET", "/v1/tenants/a", token="")[0] == 401
    assert call(endpoint, "PUT", "/v1/allowlist", {"allowed_domains": ["demo.test"]})[0] == 409
    assert call(endpoint, "GET", "/v1/tenants/../x")[0] == 404
    assert call(endpoint, "GET", "/v1/tenants/a")[0] == 404
    assert call(endpoint, "PUT", "/v1/tenants/a", {"addresses": "10.1.0.5"})[0] == 400


def test_tenants_through_the_controllers_and_the_backends_clients(endpoint: str) -> None:
    async def scenario() -> None:
        tenants = EgressTenants(endpoint, TOKEN)
        with pytest.raises(EgressControlError) as refused:
            await tenants.register("a", addresses=["10.1.0.5"], browser_addresses=["10.1.0.5"],
                                   daemon="10.1.0.5:8765", allowed_domains=["blocked.test"])
        assert refused.value.detail["status"] == 422 and refused.value.detail["refused"] == ["blocked.test"]
        record = await tenants.register("a", addresses=["10.1.0.5"], browser_addresses=["10.1.0.5"],
                                        daemon="10.1.0.5:8765", allowed_domains=["allowed.test"])
        assert record["allowed_domains"] == ["allowed.test"]
        await tenants.register("b", addresses=["10.2.0.5"], browser_addresses=["10.2.0.5"],
                               daemon="10.2.0.5:8765", allowed_domains=["demo.test"])
        run_a = EgressControl(endpoint, TOKEN, tenant="a")
        assert await run_a.set(["allowed.test"]) == ["allowed.test"]
        with pytest.raises(EgressControlError) as outside:
            await run_a.set(["demo.test"])  # on B's list, not on A's
        assert outside.value.detail["status"] == 422
        assert await run_a.set(None) is None
        with pytest.raises(EgressControlError):
            await EgressControl(endpoint, TOKEN, tenant="nobody").set(["demo.test"])
        assert (await tenants.get("b") or {})["allowed_domains"] == ["demo.test"]
        assert await tenants.remove("a") and not await tenants.remove("a")
        assert await tenants.get("a") is None

    asyncio.run(scenario())


def test_a_handle_with_a_tenant_sets_that_tenants_list(tmp_path: Path) -> None:
    handle = SandboxHandle(id="s", container="pod", network="", egress="", address="10.1.0.5", token="t",
                           egress_address="deskpod-egress", egress_token=TOKEN, egress_tenant="deskpod-s-0")
    control_of = egress_control_of(handle)
    assert control_of is not None and control_of.path == "/v1/tenants/deskpod-s-0/allowlist"
    assert control_of.host == "deskpod-egress" and control_of.port == 3129
    assert egress_control_of(SandboxHandle(**{**handle.__dict__, "egress_tenant": ""})).path == "/v1/allowlist"  # type: ignore[union-attr]
    (tmp_path / "x.egress").write_text(json.dumps({"url": "http://deskpod-egress:3129", "token": TOKEN,
                                                   "tenant": "deskpod-s-0"}))
    beside = egress_control_beside(tmp_path / "x.token")
    assert beside is not None and beside.path == "/v1/tenants/deskpod-s-0/allowlist"
    with pytest.raises(ValueError):
        EgressControl("http://deskpod-egress:3129", TOKEN, tenant="../allowlist")


@pytest.mark.parametrize("url", ["https://deskpod-egress:3129", "http://deskpod-egress:3130", "deskpod-egress"])
def test_the_backend_refuses_a_bad_control_url(url: str) -> None:
    with pytest.raises(BackendError):
        KubernetesBackend(KubernetesBackendConfig(bootstrap_token="b", egress_control_url=url,
                                                  egress_control_token=TOKEN))
    with pytest.raises(BackendError):
        KubernetesBackend(KubernetesBackendConfig(bootstrap_token="b", egress_control_url="http://deskpod-egress:3129"))


def test_the_kubernetes_egress_deployment_runs_in_the_tenants_mode() -> None:
    """The manifests' one proxy is multi-tenant, its control token a Secret: the proxy gets its
    hash, the controller the token (never the sandbox pods)."""
    import yaml

    base = ROOT / "deploy" / "kubernetes" / "base"
    docs = {(d["kind"], d["metadata"]["name"]): d for name in ("egress.yaml", "controller.yaml", "sandbox-template.yaml")
            for d in yaml.safe_load_all((base / name).read_text()) if d}

    def env_of(kind: str, name: str) -> dict[str, Any]:
        spec = docs[(kind, name)]["spec"]
        pod = spec["podTemplate"]["spec"] if kind == "SandboxTemplate" else spec["template"]["spec"]
        return {e["name"]: e.get("value", e.get("valueFrom")) for c in pod["containers"] for e in c.get("env", [])}

    egress = env_of("Deployment", "deskpod-egress")
    assert egress["DESKPOD_EGRESS_MODE"] == "tenants"
    assert egress["DESKPOD_EGRESS_CONTROL_TOKEN_SHA256"] == {
        "secretKeyRef": {"name": "deskpod-egress-control", "key": "token_sha256"}}
    controller = env_of("Deployment", "deskpod-controller")
    assert controller["DESKPOD_EGRESS_CONTROL_TOKEN"] == {"secretKeyRef": {"name": "deskpod-egress-control", "key": "token"}}
    assert not any("EGRESS_CONTROL" in name for name in env_of("SandboxTemplate", "deskpod-sandbox"))


def test_a_session_opened_with_a_tenant_sets_that_tenants_list() -> None:
    from types import SimpleNamespace

    from deskpod.service.server.service_state import ControllerService, Recognised
    from deskpod.service.messages import SandboxRef

    ref = SandboxRef.model_validate({"url": "ws://10.1.0.5:8765/v1/ws", "token": "t" * 32, "egress_control": {
        "url": "http://deskpod-egress:3129", "token": TOKEN, "tenant": "deskpod-s-0"}})
    service = SimpleNamespace(egress_sandbox_url=None, egress_control=None)
    chosen = ControllerService.egress_control_for(service, ref, Recognised(stack=False, vouched=False))  # type: ignore[arg-type]
    assert chosen is not None and chosen.path == "/v1/tenants/deskpod-s-0/allowlist"
    with pytest.raises(ValueError):
        SandboxRef.model_validate({"url": "ws://10.1.0.5:8765/v1/ws", "token": "t" * 32, "egress_control": {
            "url": "http://deskpod-egress:3129", "token": TOKEN, "tenant": "../x"}})
