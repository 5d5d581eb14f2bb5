"""The Kubernetes backend end to end, against a fake cluster (tests/support/fake_agent_sandbox.py).

The API server is kmock's emulator and the agent-sandbox controller is a fake that
binds each claim to a real sandbox on the local Docker engine (a warm sandbox whose
daemon holds only the bootstrap token, as a warm pod of deskpod's template does). So
the backend's claims, readiness, adoption and release run for real; scheduling, pods
and network policies do not (no cluster can run on these machines).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_agent_sandbox import fake_cluster
from backend_env import Env, backend_env, connect_ok, leftovers

from deskpod.backend import SandboxPool
from deskpod.backend.kubernetes_backend import (
    CLAIM_GROUP,
    CLAIM_PLURAL,
    CLAIM_VERSION,
    KubernetesBackend,
    KubernetesBackendConfig,
)
from deskpod.controller import load_task, run_task
from deskpod.tokens import new_token

pytestmark = pytest.mark.integration

NAMESPACE = "deskpod"


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    yield from backend_env()


def _claims(api: object) -> list[dict]:
    listed = api.list_namespaced_custom_object(CLAIM_GROUP, CLAIM_VERSION, NAMESPACE, CLAIM_PLURAL)  # type: ignore[attr-defined]
    return list(listed["items"])


def test_a_task_runs_through_claims_and_release_claims_a_fresh_pod(env: Env, tmp_path: Path) -> None:  # noqa: F811
    bootstrap = new_token()
    with fake_cluster(env.backend, bootstrap, namespace=NAMESPACE, warm=2) as (url, api, agent_sandbox):
        backend = KubernetesBackend(KubernetesBackendConfig(namespace=NAMESPACE, warm_pool="deskpod",
                                                            bootstrap_token=bootstrap, api_url=url,
                                                            claim_lifetime_s=600))
        task = tmp_path / "task.yaml"
        task.write_text(json.dumps({
            "name": "k8s-demo-search", "start_url": "http://allowed.test/", "allowed_domains": ["allowed.test"],
            "limits": {"max_steps": 10, "max_wall_time_s": 120},
            "steps": [{"actions": [{"type": "click", "x": 640, "y": 400}]},
                      {"actions": [{"type": "type", "text": "penguin"}]},
                      {"actions": [{"type": "keypress", "keys": ["ENTER"]}]}],
            "success": {"url_matches": r"^http://allowed\.test/search\?q=penguin$",
                        "page_text_contains": "penguin", "timeout_s": 15}}))

        async def scenario() -> None:
            pool = SandboxPool(backend, name="k8s", size=1, reset_mode="recreate", start_url="http://allowed.test/")
            try:
                await pool.fill()
                handle = await pool.acquire()
                # Adopted: the claim's pod now takes the run's token, not the bootstrap one.
                assert handle.claim and handle.token != bootstrap
                assert await connect_ok(handle)
                assert not await connect_ok(type(handle)(**{**handle.__dict__, "token": bootstrap}))
                (claim,) = _claims(api)
                assert claim["metadata"]["name"] == handle.claim
                assert claim["spec"]["warmPoolRef"] == {"name": "deskpod"}
                assert "env" not in claim["spec"]
                assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
                shutdown = datetime.datetime.fromisoformat(claim["spec"]["lifecycle"]["shutdownTime"])
                now = datetime.datetime.now(datetime.UTC)
                assert now < shutdown <= now + datetime.timedelta(seconds=601)
                assert claim["status"]["sandbox"]["podIPs"] == [handle.address]

                result = await run_task(load_task(task), handle.url, handle.token, audit_dir=tmp_path / "audit")
                assert result.status == "succeeded", result.reason

                # Release deletes the claim; a new claim binds a fresh sandbox.
                report = await pool.release(handle.id, pool.member(handle.id).lease)
                assert report.performed == "recreate", report
                fresh = report.handle
                assert fresh.claim != handle.claim and fresh.address != handle.address
                assert [c["metadata"]["name"] for c in _claims(api)] == [fresh.claim]
                assert await connect_ok(fresh)
            finally:
                await pool.close()
            assert _claims(api) == []

        asyncio.run(scenario())
        # The released claim's sandbox was destroyed once its claim was deleted.
        deadline = time.monotonic() + 60
        while len(agent_sandbox.destroyed) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(agent_sandbox.destroyed) == 2, agent_sandbox.destroyed
        assert agent_sandbox.invalid == [] and agent_sandbox.errors == []
        made = list(agent_sandbox.made)
    for sandbox_id in made:
        assert leftovers(env.docker, sandbox_id) == []
