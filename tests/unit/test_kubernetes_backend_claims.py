"""The Kubernetes backend's claims, read and written: what agent-sandbox gets, what is believed."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import jsonschema
import pytest
from agent_sandbox_crds import crd_schemas
from kubernetes.client import ApiException

from deskpod.backend.kubernetes_backend import (
    CLAIM_GROUP,
    CLAIM_VERSION,
    KubernetesBackend,
    KubernetesBackendConfig,
    claim_body,
    claim_endpoint,
)
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
