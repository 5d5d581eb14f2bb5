"""The Kubernetes backend's claims, read and written: what agent-sandbox gets, what is believed."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import jsonschema
import kmock
import pytest
from agent_sandbox_crds import crd_schemas
from kubernetes.client import ApiException

from deskpod.backend import SandboxHandle, SandboxPool
from deskpod.backend.kubernetes_backend import (
    CLAIM_GROUP,
    CLAIM_PLURAL,
    CLAIM_VERSION,
    KubernetesBackend,
    KubernetesBackendConfig,
    claim_body,
    claim_endpoint,
    shutdown_time,
)
from deskpod.backend.lease import LEASE_S
from deskpod.backend.pool import PoolMember
from deskpod.errors import BackendError

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
CONFIG = KubernetesBackendConfig(bootstrap_token="b" * 32, claim_lifetime_s=900)


def _claim(status: dict[str, Any]) -> dict[str, Any]:
    return {**claim_body(CONFIG, "deskpod-x-0", "x", "p", NOW), "status": status}


def test_the_claim_matches_agent_sandboxs_schema_and_carries_the_dead_man_switch() -> None:
    body = claim_body(CONFIG, "deskpod-abc-0", "abc", "eval", NOW)
    jsonschema.validate(body, crd_schemas()[(CLAIM_GROUP, CLAIM_VERSION, "SandboxClaim")])
    assert body["spec"]["lifecycle"] == {"shutdownPolicy": "Delete", "shutdownTime": "2026-12-01T12:15:00Z"}
    assert body["metadata"]["labels"] == {"deskpod.sandbox": "abc", "deskpod.pool": "eval"}
    assert "env" not in body["spec"] and "b" * 32 not in repr(body)


def test_a_claim_is_ready_only_with_the_condition_a_sandbox_and_an_ip() -> None:
    ready = [{"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "x"}]
    bound = {"name": "pod-1", "podIPs": ["10.1.2.3"]}
    assert claim_endpoint(_claim({"conditions": ready, "sandbox": bound})) == ("pod-1", "10.1.2.3")
    assert claim_endpoint(_claim({"conditions": ready})) is None
    assert claim_endpoint(_claim({"sandbox": bound})) is None
    assert claim_endpoint(_claim({"conditions": [{**ready[0], "status": "False"}], "sandbox": bound})) is None
    assert claim_endpoint(_claim({})) is None


@pytest.mark.parametrize("ip", ["10.0.0.1/../x", "evil.example:80@", "10.0.0.1:8765/v1"])
def test_a_pod_ip_that_is_not_an_address_is_refused(ip: str) -> None:
    ready = [{"type": "Ready", "status": "True"}]
    with pytest.raises(BackendError, match="not an address"):
        claim_endpoint(_claim({"conditions": ready, "sandbox": {"name": "p", "podIPs": [ip]}}))


def test_no_bootstrap_token_is_a_configuration_error() -> None:
    with pytest.raises(BackendError, match="bootstrap token"):
        KubernetesBackend(KubernetesBackendConfig())


class _RefusingApi:
    """A Kubernetes API that refuses every call as RBAC would."""

    def __getattr__(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=403, reason="Forbidden")

        return refuse


def test_an_api_refusal_is_a_typed_backend_error_and_nothing_is_left() -> None:
    backend = KubernetesBackend(CONFIG, api=_RefusingApi())
    with pytest.raises(BackendError) as caught:
        asyncio.run(backend.create(pool="p"))
    assert caught.value.detail == {"reason": "platform", "status": 403}
    with pytest.raises(BackendError, match="403"):
        asyncio.run(backend.list_ids())


def test_an_api_server_that_cannot_be_reached_is_a_typed_backend_error() -> None:
    """urllib3 raises its own errors (MaxRetryError), not OSError, when nothing answers."""
    backend = KubernetesBackend(KubernetesBackendConfig(bootstrap_token="b" * 32, api_url="http://127.0.0.1:1"))
    with pytest.raises(BackendError, match="listing claims") as caught:
        asyncio.run(backend.list_ids(pool="p"))
    assert caught.value.detail["reason"] == "platform"


def test_the_shutdown_time_is_rounded_up_never_before_the_lease_ends() -> None:
    assert shutdown_time(NOW.timestamp()) == "2026-12-01T12:00:00Z"
    assert shutdown_time(NOW.timestamp() + 0.2) == "2026-12-01T12:00:01Z"


def test_a_lease_renewal_moves_the_claims_shutdown_time_on_the_api_server() -> None:
    """Against kmock's Kubernetes emulator: the holder's renewal, and the pool's renewal of its
    idle sandboxes while it lives, patch ``spec.lifecycle.shutdownTime`` (nothing else)."""
    async def run() -> None:
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            backend = KubernetesBackend(KubernetesBackendConfig(bootstrap_token="b" * 32,
                                                                api_url=str(server.url).rstrip("/")))
            api = backend.api
            created = datetime.datetime.now(datetime.UTC)
            handles = []
            for sandbox_id in ("leased", "idle"):
                name = f"deskpod-{sandbox_id}-0"
                await asyncio.to_thread(api.create_namespaced_custom_object, CLAIM_GROUP, CLAIM_VERSION, "deskpod",
                                        CLAIM_PLURAL, claim_body(backend.config, name, sandbox_id, "p", created))
                handles.append(SandboxHandle(id=sandbox_id, container="pod", network="", egress="",
                                             address="10.0.0.1", token="t" * 32, pool="p", claim=name))

            async def shutdown(name: str) -> str:
                claim = await asyncio.to_thread(api.get_namespaced_custom_object, CLAIM_GROUP, CLAIM_VERSION,
                                                "deskpod", CLAIM_PLURAL, name)
                assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
                assert claim["spec"]["warmPoolRef"] == {"name": "deskpod"}
                return str(claim["spec"]["lifecycle"]["shutdownTime"])

            assert await shutdown("deskpod-leased-0") == shutdown_time(created.timestamp() + LEASE_S)
            leased = PoolMember(handles[0], "leased", lease="l1", lease_expires=time.time() + 1)
            pool = SandboxPool(backend, name="p", size=2, members=[leased, PoolMember(handles[1])], lease_s=0.3)
            expires = await pool.renew("leased", "l1", lease_s=600)
            assert await shutdown("deskpod-leased-0") == shutdown_time(expires)
            pool._held.add("l1")  # as if this pool object had handed the lease out
            async with pool.renewing():
                await asyncio.sleep(0.5)
            assert await shutdown("deskpod-idle-0") != shutdown_time(created.timestamp() + LEASE_S)
            assert shutdown_time(time.time()) <= await shutdown("deskpod-idle-0") <= shutdown_time(time.time() + 0.3)
            assert await shutdown("deskpod-leased-0") <= shutdown_time(time.time() + 0.3)

    asyncio.run(run())

