"""Traces of runs and steps (:mod:`deskpod.tracing`): one trace per run with its steps, policy
decisions, confirmation waits, verifications and daemon requests, the daemon's phases placed
inside their request from its reply, no secret, typed text, page text, element name or URL in
any attribute, and nothing at all unless the operator configured an endpoint.

The runs go through the real websocket client to :class:`HostileDaemon` (a daemon on a
loopback websocket whose replies the test writes), with the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from deskpod import ControllerClient
from deskpod.controller.code_agent import run_code_task
from deskpod.controller.code_task import ToolCall, load_code_task
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.credentials import HostSecret, SecretStore, TypeSecret
from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.task import TaskSpec
from deskpod.errors import ScreenChangedError
from deskpod.protocol import ActionTiming, Observation, parse_action
from deskpod.settings import get_settings
from deskpod.tracing import SPANS, clean_attributes, configured_provider, daemon_phases, traced, traced_run
from deskpod.tracing.spans import (
    CAPTURE,
    CONFIRMATION_WAIT,
    DAEMON_REQUEST,
    EXECUTE,
    POLICY_DECISION,
    RUN,
    SETTLE,
    STEP,
    VERIFICATION,
)
from hostile_daemon import HostileDaemon
from running_service import running_service
from trace_capture import capture, exported_text, otlp_collector, parent_names

SECRET = "s3cret-HOSTHELD-xyzzy"
TYPED = "typed-words-plugh"
PAGE = "page-text-frobozz"
QUERY = "query-token-zork"
TITLE = "title-grue"
ELEMENT = "element-name-wumpus"
URL = f"http://shop.test/login?token={QUERY}"
PASSWORD = {"tag": "input", "role": "textbox", "name": ELEMENT, "input_type": "password", "is_password": True,
            "editable": True}
MS = 1_000_000
SERVICE_TASK = {"name": "served", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                "limits": {"action_timeout_s": 2, "max_wall_time_s": 30},
                "success": {"url_matches": "^http://demo\\.test/done$", "timeout_s": 1}}
CODE_TASK = Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "tasks" / "code_mini_billing.yaml"


class Agent:
    """Proposes ``moves`` in order, then says it is done."""

    def __init__(self, moves: list[list[BaseModel]]) -> None:
        self.moves = moves

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        return Proposal(actions=self.moves.pop(0)) if self.moves else Done("done")

    async def close(self) -> None:
        """Nothing to release."""


class Approver:
    """Approves every confirmation."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        return ConfirmationAnswer(True, request.digest, "test")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        return "cancel"


def sign_in_page() -> Any:
    """A tamper making the hostile daemon a sign-in page (its URL, title, page text and focused
    field carry the markers) that reports its phases, and says "Welcome" once text other than the
    secret was typed."""
    typed: list[str] = []

    def tamper(n: int, request: dict[str, Any], reply: dict[str, Any]) -> Any:
        actions = request.get("actions", []) if request.get("type") == "act" else []
        typed.extend(a["text"] for a in actions if a.get("type") == "type" and a.get("text") != SECRET)
        obs = reply.get("observation")
        if obs is not None:
            obs.update(url=URL, title=TITLE, focused=PASSWORD, settle_s=0.002, observe_s=0.003, capture_s=0.001,
                       tabs=[{"id": "t1", "url": URL, "title": TITLE, "active": True}],
                       timings=[{"index": i, "type": a["type"], "duration_s": 0.001} for i, a in enumerate(actions)])
            if (request.get("observe") or {}).get("page_text"):
                obs["page_text"] = PAGE + (" Welcome" if typed else "")
        return reply

    return tamper


def traced_sign_in(tmp_path: Path) -> tuple[Any, HostileDaemon, Any]:
    """Run a traced sign-in (a click, a host-held secret, typed text; every action confirmed)
    against the hostile daemon; return the result, the daemon and the exporter."""
    provider, exporter = capture()
    spec = TaskSpec.model_validate({"name": "sign-in", "start_url": URL, "allowed_domains": ["shop.test"],
                                    "success": {"page_text_contains": "Welcome", "timeout_s": 0.2}})
    agent = Agent([[parse_action({"type": "click", "x": 20, "y": 20})],
                   [TypeSecret(type="type_secret", name="SHOP_PW")],
                   [parse_action({"type": "type", "text": TYPED})]])
    secrets = SecretStore([HostSecret("SHOP_PW", SecretStr(SECRET), ("shop.test",))])
    with HostileDaemon(sign_in_page()) as daemon:
        result = asyncio.run(run_task(spec, daemon.url, "t" * 32, audit_dir=tmp_path, agent=agent, secrets=secrets,
                                      channel=Approver(), policy=Policy(confirm_levels=["L0", "L1", "L2", "L3"]),
                                      tracer_provider=provider))
    return result, daemon, exporter


def test_a_traced_run_is_one_trace_of_its_steps_decisions_waits_and_daemon_requests(tmp_path: Path) -> None:
    result, _, exporter = traced_sign_in(tmp_path)
    assert result.status == "succeeded", result.reason
    spans = exporter.get_finished_spans()
    assert len({span.context.trace_id for span in spans}) == 1
    assert {span.name for span in spans} == set(SPANS)
    parents = parent_names(spans)
    assert parents[RUN] == {""}
    assert parents[STEP] == parents[VERIFICATION] == {RUN}
    assert parents[POLICY_DECISION] == parents[CONFIRMATION_WAIT] == {STEP}
    assert parents[DAEMON_REQUEST] <= {RUN, STEP, POLICY_DECISION, VERIFICATION} and STEP in parents[DAEMON_REQUEST]
    assert parents[EXECUTE] == parents[SETTLE] == parents[CAPTURE] == {DAEMON_REQUEST}
    [run] = [span for span in spans if span.name == RUN]
    assert run.attributes == {"deskpod.run_kind": "gui", "deskpod.run_id": result.run_id,
                              "deskpod.status": "succeeded", "deskpod.steps": 3}
    steps = [span.attributes for span in spans if span.name == STEP]
    assert [(s["deskpod.step"], s["deskpod.outcome"]) for s in steps] == [(1, "ok"), (2, "ok"), (3, "ok")]
    click = next(span.attributes for span in spans if span.name == POLICY_DECISION)
    assert (click["deskpod.action"], click["deskpod.decision"]) == ("click", "confirm")
    waits = [span.attributes for span in spans if span.name == CONFIRMATION_WAIT]
    assert waits and all(w["deskpod.outcome"] == "approved" for w in waits)
    requests = {span.attributes["deskpod.request"] for span in spans if span.name == DAEMON_REQUEST}
    assert {"navigate", "act"} <= requests


def test_no_secret_typed_text_page_text_url_or_element_name_is_in_the_trace(tmp_path: Path) -> None:
    """The daemon received the secret and the typed text, and showed the page's text, title, URL
    and field; none of them is in any span's name, attribute, event or status."""
    _, daemon, exporter = traced_sign_in(tmp_path)
    sent = str(daemon.requests)
    assert SECRET in sent and TYPED in sent
    text = exported_text(exporter.get_finished_spans())
    assert "deskpod.step=3" in text
    for marker in (SECRET, TYPED, PAGE, QUERY, TITLE, ELEMENT, "shop.test", "Welcome"):
        assert marker not in text, marker


def test_the_daemons_phases_sit_inside_their_request_span(tmp_path: Path) -> None:
    _, _, exporter = traced_sign_in(tmp_path)
    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    phases = [span for span in spans if span.name in (EXECUTE, SETTLE, CAPTURE)]
    assert phases
    for phase in phases:
        assert phase.parent is not None
        request = by_id[phase.parent.span_id]
        assert request.start_time <= phase.start_time <= phase.end_time <= request.end_time
        assert phase.attributes["deskpod.reported_s"] in (0.001, 0.002)


def observation(**fields: Any) -> Observation:
    return Observation.model_validate({"settled": True, "settle_s": 0.02, "observe_s": 0.03, "capture_s": 0.005,
                                       "timings": [{"index": 0, "type": "click", "duration_s": 0.01}]} | fields)


def test_the_phases_are_placed_by_duration_in_the_middle_of_the_request() -> None:
    """100 ms of request, 40 ms of daemon work: 30 ms there, then execute, settle, capture."""
    phases = daemon_phases(observation(), 1000 * MS, 1100 * MS)
    assert [(p.name, p.start_ns, p.end_ns, p.clamped) for p in phases] == [
        (EXECUTE, 1030 * MS, 1040 * MS, False), (SETTLE, 1040 * MS, 1060 * MS, False),
        (CAPTURE, 1060 * MS, 1065 * MS, False)]
    assert phases[1].attributes == {"settled": True, "settle_signal": None}


def test_a_daemon_claiming_more_time_than_the_request_took_is_cut_at_its_end() -> None:
    """A hostile daemon's day of settling in a 100 ms request: settle and capture end with the request."""
    phases = daemon_phases(observation(settle_s=86_400.0, observe_s=86_400.0), 1000 * MS, 1100 * MS)
    assert [(p.name, p.start_ns, p.end_ns, p.clamped) for p in phases] == [
        (EXECUTE, 1000 * MS, 1010 * MS, False), (SETTLE, 1010 * MS, 1100 * MS, True),
        (CAPTURE, 1100 * MS, 1100 * MS, True)]
    assert all(1000 * MS <= p.start_ns <= p.end_ns <= 1100 * MS for p in daemon_phases(
        observation(timings=[{"index": 0, "type": "x", "duration_s": 8e4}]), 1000 * MS, 1100 * MS))


def test_a_daemon_from_before_capture_s_still_gives_its_other_phases() -> None:
    """An older daemon sends no ``capture_s``: accepted, and no capture phase; one without settling, none."""
    obs = Observation.model_validate({"settled": True, "settle_s": 0.02, "observe_s": 0.03})
    assert obs.capture_s is None and "capture_s" not in obs.model_dump(mode="json")
    assert [p.name for p in daemon_phases(obs, 0, 100 * MS)] == [SETTLE]
    assert daemon_phases(Observation(), 0, 100 * MS) == []


@pytest.mark.parametrize("seconds", [-0.001, 86_400.5, float("inf"), float("nan")])
def test_the_protocol_bounds_the_capture_time(seconds: float) -> None:
    with pytest.raises(ValidationError):
        Observation(capture_s=seconds)


def test_free_text_never_becomes_an_attribute() -> None:
    """Words of a vocabulary pass; a sentence, a URL or a password-like text in a word
    attribute is ``other``; a name outside the table is a mistake."""
    assert clean_attributes({"action": "click", "risk": "L2", "step": 3, "clamped": True, "outcome": None}) == {
        "deskpod.action": "click", "deskpod.risk": "L2", "deskpod.step": 3, "deskpod.clamped": True}
    assert clean_attributes({"rule": "a sentence here", "action": "http://x.test/?q=1", "error": "hunter2!",
                             "run_id": "run-nothex"}) == {
        "deskpod.rule": "other", "deskpod.action": "other", "deskpod.error": "other", "deskpod.run_id": "other"}
    assert clean_attributes({"step": float("nan"), "settled": "yes"}) == {}
    with pytest.raises(KeyError):
        clean_attributes({"url": "http://x.test/"})


def test_a_failing_block_marks_its_span_with_the_code_not_the_message() -> None:
    provider, exporter = capture()
    with pytest.raises(ScreenChangedError), traced_run(provider, "gui", "run-0123456789ab"):
        with traced(STEP, step=1):
            raise ScreenChangedError(f"the screen changed under {ELEMENT}")
    step, run = exporter.get_finished_spans()
    assert step.attributes["deskpod.error"] == run.attributes["deskpod.error"] == "screen_changed"
    assert step.status.status_code.name == "ERROR" and ELEMENT not in exported_text([step, run])


def test_outside_a_traced_run_nothing_is_recorded() -> None:
    provider, exporter = capture()
    with traced(STEP, step=1) as note:
        note.set(outcome="ok")
    assert note.span is None
    with traced_run(None, "gui", "run-0123456789ab") as note:
        with traced(STEP, step=1) as inner:
            assert inner.span is None
    assert exporter.get_finished_spans() == () and provider is not None


@pytest.fixture
def fresh_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No trace endpoint in the environment; the settings and the provider read again."""
    for name in ("DESKPOD_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    configured_provider.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()
    configured_provider.cache_clear()


def test_traces_are_off_unless_an_endpoint_is_configured(fresh_settings: pytest.MonkeyPatch) -> None:
    assert configured_provider() is None
    fresh_settings.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    fresh_settings.setenv("OTEL_SDK_DISABLED", "true")
    configured_provider.cache_clear()
    assert configured_provider() is None


def test_the_configured_endpoint_receives_the_runs_spans_over_otlp_http(fresh_settings: pytest.MonkeyPatch) -> None:
    """``DESKPOD_TRACES_ENDPOINT`` set: the run's spans reach it as OTLP/HTTP protobuf, named for
    the service ``OTEL_SERVICE_NAME`` gives."""
    with otlp_collector() as collector:
        fresh_settings.setenv("DESKPOD_TRACES_ENDPOINT", collector.url)
        fresh_settings.setenv("OTEL_SERVICE_NAME", "deskpod-test-controller")
        provider = configured_provider()
        assert provider is not None and configured_provider() is provider
        with traced_run(provider, "gui", "run-0123456789ab"), traced(STEP, step=1):
            pass
        assert provider.force_flush(5000)  # type: ignore[attr-defined]
        provider.shutdown()  # type: ignore[attr-defined]
    assert collector.requests == [("/v1/traces", "application/x-protobuf")]
    assert [(service, span.name) for service, span in collector.spans] == [
        ("deskpod-test-controller", STEP), ("deskpod-test-controller", RUN)]
    run = collector.spans[1][1]
    assert {a.key: a.value.string_value for a in run.attributes}["deskpod.run_id"] == "run-0123456789ab"


def test_deskpod_serves_sessions_traced_to_the_configured_endpoint(fresh_settings: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A session of ``deskpod serve`` (its run is :func:`run_task`'s) is one trace at the
    operator's endpoint, service ``deskpod`` by default, its steps and daemon requests inside."""
    async def session(daemon: HostileDaemon) -> None:
        async with running_service("s" * 43, tmp_path / "audit") as port, \
                await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", "s" * 43) as client:
            opened = (await client.open(daemon.url, "t" * 43, SERVICE_TASK)).session
            await client.ready(opened)
            await client.submit(opened, [{"type": "click", "x": 10, "y": 10}])
            await client.cancel(opened)

    with otlp_collector() as collector, HostileDaemon() as daemon:
        fresh_settings.setenv("DESKPOD_TRACES_ENDPOINT", collector.url)
        asyncio.run(session(daemon))
        provider = configured_provider()
        assert provider is not None and provider.force_flush(5000)  # type: ignore[attr-defined]
        provider.shutdown()  # type: ignore[attr-defined]
    names = [span.name for _, span in collector.spans]
    assert {RUN, STEP, POLICY_DECISION, DAEMON_REQUEST, VERIFICATION} <= set(names), names
    assert {service for service, _ in collector.spans} == {"deskpod"}
    assert len({span.trace_id for _, span in collector.spans}) == 1


def test_action_timings_are_bounded_by_the_protocol() -> None:
    """Each reported action time is bounded too (a day at most), so a phase's length is finite."""
    with pytest.raises(ValidationError):
        ActionTiming(index=0, type="click", duration_s=1e12)


def test_a_code_run_is_one_trace_of_its_workspace_requests(tmp_path: Path) -> None:
    """A code run has its run span too, its workspace requests inside it."""
    provider, exporter = capture()
    task = load_code_task(CODE_TASK)
    task = task.model_copy(update={"steps": [ToolCall.model_validate({"tool": "list_dir", "path": "."})]})
    with HostileDaemon() as daemon:
        result = asyncio.run(run_code_task(task, daemon.url, "t" * 32, audit_dir=tmp_path, tracer_provider=provider))
    spans = exporter.get_finished_spans()
    [run] = [span for span in spans if span.name == RUN]
    assert run.attributes["deskpod.run_kind"] == "code" and run.attributes["deskpod.run_id"] == result.run_id
    assert run.attributes["deskpod.status"] == result.status
    requests = [span for span in spans if span.name == DAEMON_REQUEST]
    assert {"seed_workspace", "list_dir"} <= {span.attributes["deskpod.request"] for span in requests}
    assert all(span.parent is not None and span.parent.span_id == run.context.span_id for span in requests)
    assert len({span.context.trace_id for span in spans}) == 1


@pytest.mark.process
def test_deskpod_without_opentelemetry_runs_untraced() -> None:
    """The base install has no OpenTelemetry: the client and the run loops still import, spans are
    no-ops, and a configured endpoint only logs that the SDK is missing."""
    code = ("import sys\n"
            "sys.modules['opentelemetry'] = None\n"
            "import deskpod.client, deskpod.controller.gui\n"
            "from deskpod.tracing import configured_provider, traced, traced_run\n"
            "with traced_run(None, 'gui', 'run-0123456789ab'), traced('deskpod.step', step=1) as note:\n"
            "    note.set(outcome='ok')\n"
            "assert note.span is None and configured_provider() is None\n")
    env = {**os.environ, "DESKPOD_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "the OpenTelemetry SDK is not installed" in proc.stderr
