"""``deskpod serve``'s Prometheus metrics: what each audit record, request and reset counts, the
gauges read at each scrape, and who may read ``/metrics``.

The exposition is parsed with the Prometheus client's own parser, as a scraper reads it. The
session test drives a real service on loopback whose session leases a pool's sandbox (the
pool's state file real, its daemon the well-behaved stand-in of :mod:`hostile_daemon`), as in
``test_serve_pooled``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from lease_backend import one_sandbox_pool
from prometheus_client.parser import text_string_to_metric_families
from running_service import free_port, running_service
from websockets.asyncio.client import ClientConnection, connect

import deskpod.backend.pool_leases
import deskpod.client
from deskpod.backend import PoolStateFile
from deskpod.request_observer import observe_request, observing
from deskpod.backend.pool_leases import PoolLease, PoolLeases
from deskpod.errors import ActionTimeoutError, BackendError, InvalidRequestError
from deskpod.service.messages import ServiceConfirmationRequired, ServicePauseRequired
from deskpod.service.server.app import create_app
from deskpod.service.server.metrics import METRICS, ServiceMetrics, series_names
from deskpod.service.server.metrics_settings import MetricsSettings, is_loopback
from deskpod.service.server.pooled import PooledSandbox
from deskpod.service.server.service_state import ControllerService
from deskpod.service.server.session import Pending
from deskpod.timing import timed_outcome
from deskpod.tokens import token_sha256

pytestmark = pytest.mark.timeout(60)

TOKEN = "a" * 43
APPROVER = "b" * 43
SCRAPER = "m" * 43
SLOT_TOKEN = "slot-token-0123456789abcdef-0123456789"
TASK = {"name": "pooled", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "success": {"page_text_contains": "never", "timeout_s": 0.1}}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, by ``(name, sorted labels)``, parsed as Prometheus parses it."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series is not exported yet)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def service() -> ControllerService:
    return ControllerService(token_sha256(TOKEN), approver_token_sha256=token_sha256(APPROVER))


def test_each_audit_record_moves_its_metric() -> None:
    metrics = ServiceMetrics(svc := service())
    feed = [
        {"event": "run_started"},
        {"event": "step", "outcome": "ok", "actions": [{"type": "click"}, {"type": "type"}],
         "risks": [{"index": 0, "risk": "L1"}, {"index": 1, "risk": "L2"}]},
        {"event": "step", "outcome": "denied", "actions": [], "risks": []},
        {"event": "confirmation_requested", "id": "c1"},
        {"event": "confirmation_answer", "id": "c1", "outcome": "approved"},
        {"event": "confirmation_answer", "id": "never-asked", "outcome": "timeout"},
        {"event": "pause", "kind": "injection"},
        {"event": "loop", "step": 3, "repeats": 3},
        {"event": "pause", "kind": "loop"},
        {"event": "run_finished", "status": "succeeded", "duration_s": 12.5},
    ]
    for record in feed:
        for listener in svc.record_listeners:
            listener("session-1", {"run_id": "run-1", **record})
    found = samples(metrics.exposition().decode())
    assert value(found, "deskpod_actions_total", type="click", risk="L1") == 1
    assert value(found, "deskpod_actions_total", type="type", risk="L2") == 1
    assert value(found, "deskpod_steps_total", outcome="ok") == 1
    assert value(found, "deskpod_steps_total", outcome="denied") == 1
    assert value(found, "deskpod_confirmations_total", outcome="approved") == 1
    assert value(found, "deskpod_confirmations_total", outcome="timeout") == 1
    assert value(found, "deskpod_confirmation_answer_seconds_count", outcome="approved") == 1
    assert value(found, "deskpod_confirmation_answer_seconds_count", outcome="timeout") == 0, \
        "an answer to nothing asked has no answer time"
    assert value(found, "deskpod_pauses_total", kind="injection") == 1
    assert value(found, "deskpod_pauses_total", kind="loop") == 1
    assert value(found, "deskpod_loops_total") == 1
    assert value(found, "deskpod_runs_total", status="succeeded") == 1
    assert value(found, "deskpod_run_duration_seconds_sum", status="succeeded") == 12.5


def test_a_record_without_the_fields_expected_counts_and_raises_nothing() -> None:
    metrics = ServiceMetrics(svc := service())
    for record in ({"event": "step"}, {"event": "step", "actions": ["x", {"type": "wait"}], "risks": [None]},
                   {"event": "run_finished", "duration_s": "long"}, {"event": "confirmation_answer"}, {}):
        svc.record_listeners[0]("s", record)
    found = samples(metrics.exposition().decode())
    assert value(found, "deskpod_actions_total", type="wait", risk="unknown") == 1


def test_the_gauges_read_the_live_state_at_each_scrape() -> None:
    async def main() -> tuple[Samples, Samples]:
        svc = service()
        metrics = ServiceMetrics(svc)
        loop = asyncio.get_running_loop()
        svc.pending["c1"] = Pending(None, None, ServiceConfirmationRequired.model_construct(),  # type: ignore[arg-type]
                                    loop.create_future())
        svc.pending["p1"] = Pending(None, None, ServicePauseRequired.model_construct(),  # type: ignore[arg-type]
                                    loop.create_future())
        during = samples(metrics.exposition().decode())
        svc.pending.clear()
        return during, samples(metrics.exposition().decode())

    during, after = asyncio.run(main())
    assert value(during, "deskpod_questions_waiting", kind="confirmation") == 1
    assert value(during, "deskpod_questions_waiting", kind="pause") == 1
    assert value(during, "deskpod_questions_waiting", kind="credential") == 0
    assert value(after, "deskpod_questions_waiting", kind="confirmation") == 0
    assert ("deskpod_sessions_open", ()) in after


def test_two_services_in_one_process_count_apart() -> None:
    first, second = service(), service()
    one, two = ServiceMetrics(first), ServiceMetrics(second)
    first.requested("act", "ok", 0.2)
    assert value(samples(one.exposition().decode()), "deskpod_daemon_request_seconds_count", type="act",
                 outcome="ok") == 1
    assert value(samples(two.exposition().decode()), "deskpod_daemon_request_seconds_count", type="act",
                 outcome="ok") == 0


def test_a_pool_release_that_fails_counts_as_a_failed_reset_and_raises_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def lost(*args: Any) -> None:
        raise BackendError("the lease expired", detail={"reason": "lease_lost"})

    metrics = ServiceMetrics(svc := service())
    pooled = PooledSandbox("lab", PoolLeases("lab-pool"))
    monkeypatch.setattr(pooled.leases, "release", lost)
    asyncio.run(pooled.give_back(PoolLease("ws://x", "t", "s1", "lease-1"), svc.resetting("pool")))
    found = samples(metrics.exposition().decode())
    assert value(found, "deskpod_reset_seconds_count", kind="pool", outcome=BackendError.code) == 1
    assert value(found, "deskpod_reset_seconds_count", kind="pool", outcome="ok") == 0


def test_timed_outcome_names_how_the_block_ended() -> None:
    told: list[str] = []
    with timed_outcome(lambda outcome, _: told.append(outcome)):
        pass
    for exc in (ActionTimeoutError("slow"), KeyError("x")):
        with pytest.raises(type(exc)), timed_outcome(lambda outcome, _: told.append(outcome)):
            raise exc
    assert told == ["ok", "timeout", "internal"]


def test_a_request_is_observed_only_inside_observing() -> None:
    seen: list[tuple[str, str]] = []
    observe_request("act", "ok", 0.1)
    with observing(lambda kind, outcome, _: seen.append((kind, outcome))):
        observe_request("reset", "ok", 0.1)
    observe_request("act", "ok", 0.1)
    assert seen == [("reset", "ok")]


def test_every_metric_listed_is_exported_and_nothing_else() -> None:
    """Every series but the pools' (this service has none) once each thing happened once."""
    metrics = ServiceMetrics(svc := service())
    svc.record_listeners[0]("s", {"event": "run_finished", "status": "failed", "duration_s": 1.0})
    for listener in svc.reset_listeners:
        listener("session", "ok", 0.5)
    svc.requested("act", "ok", 0.1)
    for record in ({"event": "step", "outcome": "ok", "actions": [{"type": "click"}], "risks": []},
                   {"event": "confirmation_requested", "id": "c"},
                   {"event": "confirmation_answer", "id": "c", "outcome": "denied"},
                   {"event": "pause", "kind": "requested"}):
        svc.record_listeners[0]("s", record)
    exported = {name for name, _ in samples(metrics.exposition().decode())}
    listed = {name for spec in METRICS for name in series_names(spec)}
    assert exported == listed - {"deskpod_pool_slots"}, "METRICS (the docs' table) is not what /metrics exports"


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "deskpod.json"


def test_the_grafana_dashboard_queries_only_exported_metrics_and_shows_each() -> None:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    named = {name for expr in exprs for name in re.findall(r"\bdeskpod_\w+", expr)}
    exported = {name for spec in METRICS for name in series_names(spec)}
    assert named <= exported, f"the dashboard queries metrics the service does not export: {named - exported}"
    unshown = {spec.name for spec in METRICS if not set(series_names(spec)) & named}
    assert not unshown, f"no panel shows {unshown}"


@pytest.mark.process
def test_a_service_without_metrics_never_imports_prometheus_client() -> None:
    """The MCP server's embedded service (the ``mcp`` extra, without prometheus-client) still starts."""
    code = ("import sys, deskpod.service.server.app, deskpod.mcp_server.app, deskpod.cli.serve\n"
            "assert 'prometheus_client' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_metrics_served_without_a_token_listen_on_loopback_only() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.0.1", "::1", "[::1]", "localhost", "LOCALHOST"))
    for host in ("0.0.0.0", "::", "10.0.0.1", "metrics.example", ""):
        with pytest.raises(InvalidRequestError, match="loopback"):
            MetricsSettings(listen=(host, 9466))


def test_the_metrics_token_must_be_a_token_of_its_own() -> None:
    for reused in (TOKEN, APPROVER):
        with pytest.raises(InvalidRequestError, match="must differ"):
            create_app(service(), metrics=MetricsSettings(token_sha256=token_sha256(reused)))


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_metrics_need_the_metrics_token_and_the_loopback_listener_needs_none(tmp_path: Path) -> None:
    side = free_port()
    settings = MetricsSettings(token_sha256=token_sha256(SCRAPER), listen=("127.0.0.1", side))

    async def main() -> dict[str, Any]:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER, metrics=settings) as port:
            url = f"http://127.0.0.1:{port}/metrics"
            codes = [(await asyncio.to_thread(_get, url, token))[0] for token in (None, "wrong", TOKEN, APPROVER)]
            return {"refused": codes, "scraped": await asyncio.to_thread(_get, url, SCRAPER),
                    "loopback": await asyncio.to_thread(_get, f"http://127.0.0.1:{side}/metrics"),
                    "elsewhere": await asyncio.to_thread(_get, f"http://127.0.0.1:{side}/healthz")}

    out = asyncio.run(main())
    assert out["refused"] == [401, 401, 401, 401]
    for status, text in (out["scraped"], out["loopback"]):
        assert status == 200 and value(samples(text), "deskpod_sessions_open") == 0
    assert out["elsewhere"][0] == 404


def test_a_service_without_metrics_serves_no_metrics(tmp_path: Path) -> None:
    async def main() -> int:
        async with running_service(TOKEN, tmp_path / "audit") as port:
            return (await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics", SCRAPER))[0]

    assert asyncio.run(main()) == 404


@pytest.fixture()
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PoolStateFile:
    """A one-sandbox pool ``lab-pool`` in ``tmp_path/state`` on the records backend."""
    return one_sandbox_pool(monkeypatch, tmp_path / "state", "lab-pool", SLOT_TOKEN,
                            (deskpod.backend.pool_leases, "_docker"))


async def _next(ws: ClientConnection, *kinds: str) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if message["type"] in kinds:
            return dict(message)


def test_a_pool_session_moves_sessions_slots_requests_runs_and_resets(
        pool: PoolStateFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with HostileDaemon() as daemon:
        real_connect = deskpod.client.SandboxClient.connect

        async def to_daemon(url: str, token: str, **kwargs: Any) -> Any:
            return await real_connect(daemon.url, token, **kwargs)

        monkeypatch.setattr(deskpod.client.SandboxClient, "connect", staticmethod(to_daemon))

        async def main() -> dict[str, Samples]:
            async with running_service(TOKEN, tmp_path / "audit", sandboxes=frozenset({"lab=pool:lab-pool"}),
                                       pool_state_dir=tmp_path / "state",
                                       metrics=MetricsSettings(token_sha256=token_sha256(SCRAPER))) as port:
                url = f"http://127.0.0.1:{port}/metrics"
                scrape = {"before": samples((await asyncio.to_thread(_get, url, SCRAPER))[1])}
                async with connect(f"ws://127.0.0.1:{port}/v1/controller", proxy=None,
                                   additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                    await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"name": "lab"}, "task": TASK}))
                    session = (await _next(ws, "opened"))["session"]
                    await _next(ws, "observation")
                    scrape["during"] = samples((await asyncio.to_thread(_get, url, SCRAPER))[1])
                    await ws.send(json.dumps({"type": "finish", "id": "f", "session": session}))
                    await _next(ws, "finished")
                    for _ in range(100):
                        scrape["after"] = samples((await asyncio.to_thread(_get, url, SCRAPER))[1])
                        if value(scrape["after"], "deskpod_reset_seconds_count", kind="pool", outcome="ok"):
                            break
                        await asyncio.sleep(0.05)
                return scrape

        scrape = asyncio.run(main())
    before, during, after = scrape["before"], scrape["during"], scrape["after"]
    assert value(before, "deskpod_pool_slots", pool="lab-pool", state="idle") == 1
    assert value(during, "deskpod_pool_slots", pool="lab-pool", state="leased") == 1
    assert value(after, "deskpod_pool_slots", pool="lab-pool", state="idle") == 1
    assert (value(before, "deskpod_sessions_open"), value(during, "deskpod_sessions_open")) == (0, 1)
    assert value(after, "deskpod_reset_seconds_count", kind="pool", outcome="ok") == 1
    requests = {when: sum(v for (name, _), v in found.items() if name == "deskpod_daemon_request_seconds_count")
                for when, found in scrape.items()}
    assert requests["before"] == 0 and requests["during"] >= 1
    assert sum(v for (name, labels), v in after.items() if name == "deskpod_runs_total") == 1
