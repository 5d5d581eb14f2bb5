"""deskpod's Kubernetes manifests (deploy/kubernetes): valid, restricted, hardened, closed.

Every rendered overlay is checked as an API server and agent-sandbox would check it:

- core kinds with ``kubernetes-validate`` in strict mode (unknown fields are errors)
  against the oldest and newest Kubernetes versions it knows here;
- agent-sandbox kinds against the project's CRD schemas (``../shared/k8s``), made
  strict the same way (an object's unknown field is an error unless the schema
  preserves unknown fields);
- every pod spec against the Pod Security Standards' "restricted" profile
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/), which the
  namespace enforces;
- the sandbox pod against compose.yaml's hardening, and the network policies by
  evaluating who may reach whom.

What no test here can show: that a cluster admits and runs these objects (no cluster
runs on these machines; docs/guides/kubernetes.md says what was tried).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agent_sandbox_crds import crd_schemas
from kustomize import render

from deskpod.backend import SandboxHandle
from deskpod.backend.kubernetes_backend import KubernetesBackend, KubernetesBackendConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
K8S_VERSIONS = ("1.30.0", "1.37.0")
SANDBOX_GROUPS = {"agents.x-k8s.io", "extensions.agents.x-k8s.io"}

# Pod Security Standards, "restricted" (Kubernetes v1.30+): the allowed values.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}


def _docs(overlay: Path) -> list[dict[str, Any]]:
    return render(overlay)


def _group(doc: dict[str, Any]) -> str:
    return str(doc["apiVersion"]).rpartition("/")[0]


def _pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            specs.append((name, doc["spec"]["template"]["spec"]))
        elif doc["kind"] in {"SandboxTemplate", "Sandbox"}:
            specs.append((name, doc["spec"]["podTemplate"]["spec"]))
        elif doc["kind"] == "Pod":
            specs.append((name, doc["spec"]))
    return specs


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"], *spec.get("ephemeralContainers", [])]


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in a pod spec the "restricted" Pod Security Standard forbids (empty: none)."""
    found = []
    pod_sc = spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(field)
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    for sysctl in pod_sc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    pod_profile = pod_sc.get("seccompProfile", {}).get("type")
    for container in _containers(spec):
        name = container["name"]
        sc = container.get("securityContext", {})
        if sc.get("privileged"):
            found.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation not false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            found.append(f"{name}: capabilities not dropping ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities {caps['add']}")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        profile = sc.get("seccompProfile", {}).get("type", pod_profile)
        if profile not in {"RuntimeDefault", "Localhost"}:
            found.append(f"{name}: seccomp {profile}")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        if sc.get("windowsOptions", {}).get("hostProcess"):
            found.append(f"{name}: hostProcess")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                found.append(f"{name}: hostPort {port['hostPort']}")
    return found


@pytest.fixture(scope="module", params=OVERLAYS, ids=[p.name for p in OVERLAYS])
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return _docs(request.param)


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"{kind} {name}: {len(hits)} found"
    return hits[0]


def _sandbox_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return _one(docs, "SandboxTemplate")["spec"]["podTemplate"]["spec"]


def test_there_are_overlays_and_each_renders() -> None:
    assert {p.name for p in OVERLAYS} >= {"kind", "gvisor"}
    for overlay in OVERLAYS:
        assert _docs(overlay)


def test_core_objects_are_valid_in_strict_mode(docs: list[dict[str, Any]]) -> None:
    core = [d for d in docs if _group(d) not in SANDBOX_GROUPS]
    assert {d["kind"] for d in core} >= {
        "Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "Deployment", "Service",
        "ServiceAccount", "Role", "RoleBinding",
    }
    for version in K8S_VERSIONS:
        for doc in core:
            kubernetes_validate.validate(doc, version, strict=True)


def test_agent_sandbox_objects_match_the_crd_schemas(docs: list[dict[str, Any]]) -> None:
    schemas = crd_schemas()
    ours = [d for d in docs if _group(d) in SANDBOX_GROUPS]
    assert {d["kind"] for d in ours} == {"SandboxTemplate", "SandboxWarmPool"}
    for doc in ours:
        group, _, version = doc["apiVersion"].rpartition("/")
        jsonschema.validate(doc, schemas[(group, version, doc["kind"])])
    # The template's pod is also a valid Pod of every version (the CRD embeds PodSpec).
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sandbox"}, "spec": _sandbox_pod(docs)}
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


def test_the_strict_crd_check_refuses_an_unknown_field() -> None:
    """The check above can fail: a misspelt field in a warm pool is refused."""
    schemas = crd_schemas()
    pool = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
            "metadata": {"name": "p"}, "spec": {"replica": 2, "sandboxTemplateRef": {"name": "t"}}}
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        jsonschema.validate(pool, schemas[("extensions.agents.x-k8s.io", "v1beta1", "SandboxWarmPool")])


def test_every_pod_meets_the_restricted_pod_security_standard(docs: list[dict[str, Any]]) -> None:
    specs = _pod_specs(docs)
    assert {name for name, _ in specs} == {
        "Deployment/deskpod-egress", "Deployment/deskpod-controller", "SandboxTemplate/deskpod-sandbox",
    }
    for name, spec in specs:
        assert restricted_violations(spec) == [], name


def test_the_restricted_check_finds_what_compose_style_shortcuts_would_break() -> None:
    """The checker can fail: root, a host path, an unsafe sysctl, a kept capability."""
    spec = {
        "securityContext": {"sysctls": [{"name": "kernel.shmmax", "value": "1"}]},
        "volumes": [{"name": "x", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}}],
    }
    found = " ".join(restricted_violations(spec))
    for expected in ("kernel.shmmax", "hostPath", "runAsUser 0", "SYS_ADMIN", "allowPrivilegeEscalation",
                     "seccomp None", "dropping ALL", "runAsNonRoot"):
        assert expected in found


def test_the_namespace_enforces_restricted(docs: list[dict[str, Any]]) -> None:
    labels = _one(docs, "Namespace", "deskpod")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in {"Namespace", "RuntimeClass"}} == {
        "deskpod"
    }


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def _bytes(size: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    for unit, factor in units.items():
        if size.endswith(unit):
            return int(size[: -len(unit)]) * factor
    return int(size)


@pytest.mark.parametrize(("container", "service"), [("sandbox", "sandbox"), ("workspace", "workspace")])
def test_the_sandbox_pod_has_the_compose_hardening(docs: list[dict[str, Any]], container: str, service: str) -> None:
    pod = _sandbox_pod(docs)
    compose = _compose()[service]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "deskpod/sandbox.json"}
    spec = next(c for c in pod["containers"] if c["name"] == container)
    sc = spec["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and compose["read_only"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    uid = sc.get("runAsUser", pod["securityContext"]["runAsUser"])
    assert uid != 0
    if "user" in compose:
        assert f"{uid}:{sc['runAsGroup']}" == compose["user"]
    assert spec["image"].split(":")[0] == compose["image"].split(":-")[1].split(":")[0]
    # Every path compose mounts as tmpfs, plus /dev/shm, is a memory-backed emptyDir
    # with a size limit, and together they stay below the container's memory limit.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in spec["volumeMounts"]}
    writable = {entry.split(":")[0] for entry in compose["tmpfs"]} | {"/dev/shm"}
    assert writable <= set(mounts)
    for path in writable:
        assert mounts[path]["emptyDir"]["medium"] == "Memory", path
    total = sum(_bytes(mounts[path]["emptyDir"]["sizeLimit"]) for path in writable)
    limit = _bytes(spec["resources"]["limits"]["memory"])
    assert limit == _bytes(compose["mem_limit"])
    assert total < limit
    assert spec["resources"]["limits"]["cpu"] and spec["resources"]["requests"]["memory"]
    for mount in spec["volumeMounts"]:
        if "secret" in volumes[mount["name"]]:
            assert mount["readOnly"] is True


def test_the_seccomp_profile_reaches_the_node_in_the_kind_config() -> None:
    assert (ROOT / "runtime/deskpod/seccomp/sandbox.json").is_file()
    config = yaml.safe_load((DEPLOY / "overlays/kind/kind-config.yaml").read_text())
    mounts = config["nodes"][0]["extraMounts"]
    assert {"hostPath": "./runtime/deskpod/seccomp/sandbox.json",
            "containerPath": "/var/lib/kubelet/seccomp/deskpod/sandbox.json", "readOnly": True} in mounts


def test_per_task_data_never_goes_into_a_claim_environment(docs: list[dict[str, Any]]) -> None:
    template = _one(docs, "SandboxTemplate")
    assert template["spec"]["envVarsInjectionPolicy"] == "Disallowed"
    sandbox = next(c for c in _sandbox_pod(docs)["containers"] if c["name"] == "sandbox")
    names = {e["name"] for e in sandbox["env"]}
    assert "DESKPOD_TOKEN_FILE" in names and not names & {"DESKPOD_TOKEN", "DESKPOD_TOKEN_SHA256"}


def test_gvisor_overlay_selects_its_runtime_class() -> None:
    docs = _docs(DEPLOY / "overlays/gvisor")
    assert _sandbox_pod(docs)["runtimeClassName"] == "gvisor"
    assert _one(docs, "RuntimeClass", "gvisor")["handler"] == "runsc"
    assert "runtimeClassName" not in _sandbox_pod(_docs(DEPLOY / "overlays/kind"))


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _reachable(docs: list[dict[str, Any]], src: str, dst: str, port: int) -> bool:
    """Whether NetworkPolicy lets a pod of component ``src`` open TCP ``port`` on one of
    component ``dst`` (``"internet"``: an address outside the cluster's ranges)."""
    policies = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"]
    src_labels = {"app.kubernetes.io/component": src}
    dst_labels = {"app.kubernetes.io/component": dst}

    def peer_ok(peers: list[dict[str, Any]] | None, labels: dict[str, str] | None) -> bool:
        if peers is None:
            return True
        for peer in peers:
            if "ipBlock" in peer:
                if labels is None:
                    return True
            elif labels is not None and "namespaceSelector" not in peer and _labels_match(peer["podSelector"], labels):
                return True
        return False

    def port_ok(ports: list[dict[str, Any]] | None) -> bool:
        return ports is None or any(p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in ports)

    def allowed(direction: str, subject: dict[str, str], peer: dict[str, str] | None) -> bool:
        selecting = [p for p in policies if direction.capitalize() in p["policyTypes"]
                     and _labels_match(p["podSelector"], subject)]
        assert selecting, f"no {direction} policy selects {subject}"
        key = "from" if direction == "ingress" else "to"
        return any(peer_ok(rule.get(key), peer) and port_ok(rule.get("ports"))
                   for p in selecting for rule in p.get(direction, []))

    out = allowed("egress", src_labels, None if dst == "internet" else dst_labels)
    return out and (dst == "internet" or allowed("ingress", dst_labels, src_labels))


@pytest.mark.parametrize(("src", "dst", "port", "expected"), [
    ("controller", "sandbox", 8765, True),
    ("sandbox", "egress", 3128, True),
    ("controller", "egress", 3129, True),
    ("egress", "internet", 443, True),
    ("sandbox", "sandbox", 8765, False),
    ("sandbox", "sandbox", 8770, False),
    ("sandbox", "controller", 8766, False),
    ("sandbox", "egress", 3129, False),
    ("sandbox", "internet", 443, False),
    ("sandbox", "internet", 53, False),
    ("egress", "sandbox", 8765, False),
    ("controller", "sandbox", 8770, False),
])
def test_network_policies_allow_only_the_paths_of_the_design(
    docs: list[dict[str, Any]], src: str, dst: str, port: int, expected: bool
) -> None:
    assert _reachable(docs, src, dst, port) is expected


def test_the_egress_proxy_may_not_reach_the_cluster_or_the_metadata_address(docs: list[dict[str, Any]]) -> None:
    policy = _one(docs, "NetworkPolicy", "egress-proxy")["spec"]
    blocks = [peer["ipBlock"] for rule in policy["egress"] for peer in rule.get("to", []) if "ipBlock" in peer]
    assert blocks and all({"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(b["except"])
                          for b in blocks)


def test_the_controller_may_only_manage_claims(docs: list[dict[str, Any]]) -> None:
    rules = _one(docs, "Role", "deskpod-controller")["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert all("*" not in entry for entry in granted)
    writes = {(g, r) for g, r, v in granted if v in {"create", "update", "patch", "delete", "deletecollection"}}
    assert writes == {("extensions.agents.x-k8s.io", "sandboxclaims")}
    assert not {r for _, r, _ in granted} & {"secrets", "pods/exec", "pods", "roles", "rolebindings"}
    assert not [d for d in docs if d["kind"] in {"ClusterRole", "ClusterRoleBinding"}]


def test_quota_bounds_the_pool(docs: list[dict[str, Any]]) -> None:
    hard = _one(docs, "ResourceQuota")["spec"]["hard"]
    for key in ("pods", "limits.memory", "count/sandboxes.agents.x-k8s.io",
                "count/sandboxclaims.extensions.agents.x-k8s.io"):
        assert key in hard
    pool = _one(docs, "SandboxWarmPool")["spec"]["replicas"]
    assert pool <= int(hard["count/sandboxes.agents.x-k8s.io"])
    pod = _sandbox_pod(docs)
    per_sandbox = sum(_bytes(c["resources"]["limits"]["memory"]) for c in pod["containers"])
    assert per_sandbox * int(hard["count/sandboxes.agents.x-k8s.io"]) <= _bytes(hard["limits.memory"])
    assert _one(docs, "LimitRange")["spec"]["limits"][0]["max"]["memory"]


class _RecordingApi:
    """A Kubernetes API that records which ``CustomObjectsApi`` methods the backend calls."""

    def __init__(self) -> None:
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.called.add(name)
            return {"items": [{"metadata": {"name": "deskpod-x-0", "labels": {"deskpod.sandbox": "x"}}}],
                    "metadata": {"name": "deskpod-x-0"}}

        return record


RBAC_VERB = {"create_namespaced_custom_object": "create", "get_namespaced_custom_object": "get",
             "list_namespaced_custom_object": "list", "patch_namespaced_custom_object": "patch",
             "delete_namespaced_custom_object": "delete"}


def test_the_backend_calls_on_claims_exactly_what_the_controllers_role_grants(docs: list[dict[str, Any]]) -> None:
    """Every verb the backend uses on ``sandboxclaims`` (renewal's ``patch`` included) is in the
    Role of ``deploy/kubernetes``, and the Role grants nothing on claims beyond them and ``watch``."""
    recording = _RecordingApi()
    backend = KubernetesBackend(KubernetesBackendConfig(bootstrap_token="b" * 32), api=recording)
    handle = SandboxHandle(id="x", container="pod", network="", egress="", address="10.0.0.1", token="t" * 32,
                           claim="deskpod-x-0")

    async def run() -> None:
        await backend._claim("x", "p")
        await backend.is_healthy(handle)
        await backend.renew(handle, time.time() + 60)
        await backend.list_ids()
        await backend.destroy("x")

    asyncio.run(run())
    used = {RBAC_VERB[name] for name in recording.called}
    assert used == {"create", "get", "list", "patch", "delete"}
    rules = _one(docs, "Role", "deskpod-controller")["rules"]
    granted = {v for rule in rules if "sandboxclaims" in rule["resources"] for v in rule["verbs"]}
    assert granted == used | {"watch"}
