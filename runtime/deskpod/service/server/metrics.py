"""The Prometheus metrics of ``deskpod serve``: :class:`ServiceMetrics`, one registry per service.

:data:`METRICS` lists every metric the service exports (the docs' table is generated from
it). Counters and histograms move as things happen, fed by the service's hooks: every
audit record of every session (:attr:`ControllerService.record_listeners`: runs by status,
steps, actions by type and risk level, confirmations and their answer times, pauses,
loops), every request its sessions send a daemon (:attr:`ControllerService.request_listeners`)
and every reset it makes (:attr:`ControllerService.reset_listeners`). Gauges are read from
the service's live state at each scrape (:class:`LiveCollector`: sessions open, questions
waiting, pool slots by state), so they never drift. Each :class:`ServiceMetrics` owns its
:class:`~prometheus_client.CollectorRegistry`, never the process-wide default one: two
services in one process count apart.

Every label value is the controller's own word (a run status, a risk level, an action's
``type`` tag of :mod:`deskpod.protocol`, an error code of :mod:`deskpod.errors`), never the
sandbox's or the agent's free text, so the series stay few.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deskpod.errors import DeskpodError
from deskpod.service.messages import ServiceConfirmationRequired, ServiceCredentialRequired, ServicePauseRequired
from deskpod.service.server.service_state import ControllerService

__all__ = ["ANSWER_BUCKETS_S", "LiveCollector", "METRICS", "MetricSpec", "QuestionKind", "REQUEST_BUCKETS_S",
           "RESET_BUCKETS_S", "RUN_BUCKETS_S", "ServiceMetrics", "series_names"]

log = logging.getLogger(__name__)

REQUEST_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Upper bounds of the daemon request latency histogram's buckets, seconds."""

ANSWER_BUCKETS_S: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Upper bounds of the confirmation answer time histogram's buckets, seconds."""

RUN_BUCKETS_S: tuple[float, ...] = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Upper bounds of the run duration histogram's buckets, seconds."""

RESET_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Upper bounds of the reset duration histogram's buckets, seconds."""

QuestionKind = Literal["confirmation", "pause", "credential"]
"""What a question waiting for a person asks: an action's confirmation, a paused run's review, a credential."""

_QUESTION_KINDS: dict[type, QuestionKind] = {ServiceConfirmationRequired: "confirmation",
                                             ServicePauseRequired: "pause", ServiceCredentialRequired: "credential"}

MAX_LABEL_CHARS = 64
"""Longest label value the service exports, characters (a longer one is cut)."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric the service exports.

    Attributes:
        name: its name as exported (a counter's ends in ``_total``).
        kind: ``counter``, ``gauge`` or ``histogram``.
        labels: its label names.
        help: what it counts, in base units.
        buckets: a histogram's bucket upper bounds, seconds (``()`` otherwise).
    """

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("deskpod_sessions_open", "gauge", (),
               "Sessions open on the service's live connections."),
    MetricSpec("deskpod_questions_waiting", "gauge", ("kind",),
               "Questions waiting for a person's answer, by kind (confirmation, pause, credential)."),
    MetricSpec("deskpod_pool_slots", "gauge", ("pool", "state"),
               "Sandboxes of each warm pool the service leases from, by state (idle, leased), from the pool's "
               "state file at the scrape."),
    MetricSpec("deskpod_runs_total", "counter", ("status",),
               "Runs ended, by status (succeeded, failed, cancelled, ended)."),
    MetricSpec("deskpod_run_duration_seconds", "histogram", ("status",),
               "How long each run took from its start to its end, seconds, by status.", RUN_BUCKETS_S),
    MetricSpec("deskpod_steps_total", "counter", ("outcome",),
               "Steps (an agent's proposals) ended, by outcome (ok, denied, error, cancelled)."),
    MetricSpec("deskpod_actions_total", "counter", ("type", "risk"),
               "Actions the runs executed, by action type and risk level (L0 to L3)."),
    MetricSpec("deskpod_confirmations_total", "counter", ("outcome",),
               "Confirmations asked of a person that ended, by outcome (approved, denied, timeout, wrong_digest, "
               "withdrawn)."),
    MetricSpec("deskpod_confirmation_answer_seconds", "histogram", ("outcome",),
               "Time from a confirmation's request to its answer (or its end), seconds, by outcome.",
               ANSWER_BUCKETS_S),
    MetricSpec("deskpod_pauses_total", "counter", ("kind",),
               "Runs paused for a person's review, by kind (injection, loop, requested)."),
    MetricSpec("deskpod_loops_total", "counter", (),
               "Loops detected: the same actions on the same screen and URL max_repeats times in a row."),
    MetricSpec("deskpod_daemon_request_seconds", "histogram", ("type", "outcome"),
               "Latency of each request the sessions sent a sandbox daemon, seconds, by request type and outcome "
               "(ok, or the error code).", REQUEST_BUCKETS_S),
    MetricSpec("deskpod_reset_seconds", "histogram", ("kind", "outcome"),
               "Duration of each sandbox reset the service made, seconds, by kind (open, session, pool) and outcome "
               "(ok, or the error code); its _count counts resets.", RESET_BUCKETS_S),
)
"""Every metric ``deskpod serve`` exports at ``/metrics``."""

_SPECS = {spec.name: spec for spec in METRICS}


def series_names(spec: MetricSpec) -> tuple[str, ...]:
    """The names of the series ``spec`` exports (a histogram's ``_bucket``, ``_sum``, ``_count``;
    a counter's ``_total`` and ``_created``), as a PromQL expression names them."""
    if spec.kind == "histogram":
        return tuple(f"{spec.name}{suffix}" for suffix in ("_bucket", "_sum", "_count", "_created"))
    if spec.kind == "counter":
        return spec.name, spec.name.removesuffix("_total") + "_created"
    return (spec.name,)


def _label(value: Any) -> str:
    return str(value)[:MAX_LABEL_CHARS]


class LiveCollector(Collector):
    """The gauges of :data:`METRICS`, read from ``service``'s live state at each scrape.

    Args:
        service: the service whose sessions, questions and pools are counted.
    """

    def __init__(self, service: ControllerService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        """Yield the gauge families: sessions open, questions waiting (every kind, 0 when none),
        pool slots by state (a pool whose state file cannot be read is left out, and logged)."""
        service = self._service
        yield GaugeMetricFamily("deskpod_sessions_open", _SPECS["deskpod_sessions_open"].help,
                                value=service.health().sessions)
        waiting = dict.fromkeys(get_args(QuestionKind), 0)
        for pending in service.pending.values():
            if not pending.future.done():
                waiting[_QUESTION_KINDS[type(pending.message)]] += 1
        questions = GaugeMetricFamily("deskpod_questions_waiting", _SPECS["deskpod_questions_waiting"].help,
                                      labels=["kind"])
        for kind, count in waiting.items():
            questions.add_metric([kind], count)
        yield questions
        slots = GaugeMetricFamily("deskpod_pool_slots", _SPECS["deskpod_pool_slots"].help, labels=["pool", "state"])
        for pooled in service.pools.values():
            try:
                counts = pooled.slots()
            except (DeskpodError, OSError) as exc:
                log.warning("pool %s: its state cannot be read for /metrics: %s", pooled.leases.name, exc)
                continue
            for state, count in counts.items():
                slots.add_metric([pooled.leases.name, state], count)
        yield slots


class ServiceMetrics:
    """The metrics of one service (see the module), fed by its hooks from the moment it is made.

    Args:
        service: the service to count; this adds its listeners to the service's hooks.
    """

    def __init__(self, service: ControllerService) -> None:
        self.registry = CollectorRegistry()
        """This service's registry (never the process-wide default one)."""
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for spec in METRICS:
            if spec.kind == "counter":
                self._counters[spec.name] = Counter(spec.name, spec.help, spec.labels, registry=self.registry)
            elif spec.kind == "histogram":
                self._histograms[spec.name] = Histogram(spec.name, spec.help, spec.labels, registry=self.registry,
                                                        buckets=spec.buckets)
        self.registry.register(LiveCollector(service))
        self._asked: dict[tuple[str, str], float] = {}
        """When each confirmation still unanswered was asked, by ``(session, request id)`` (:func:`time.monotonic`)."""
        service.record_listeners.append(self.on_record)
        service.request_listeners.append(self.on_request)
        service.reset_listeners.append(self.on_reset)

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (version 0.0.4), UTF-8."""
        return generate_latest(self.registry)

    def on_request(self, request_type: str, outcome: str, duration_s: float) -> None:
        """Count one request to a daemon (a :data:`~deskpod.request_observer.RequestObserver`)."""
        self._histograms["deskpod_daemon_request_seconds"].labels(_label(request_type), _label(outcome)).observe(
            duration_s)

    def on_reset(self, kind: str, outcome: str, duration_s: float) -> None:
        """Count one reset the service made (``kind``: a :data:`~.service_state.ResetKind`)."""
        self._histograms["deskpod_reset_seconds"].labels(_label(kind), _label(outcome)).observe(duration_s)

    def on_record(self, session: str, record: dict[str, Any]) -> None:
        """Count what one audit record of ``session``'s run says (``{"run_id", "event", **fields}``,
        as :meth:`~deskpod.controller.gui.record.RunRecord.emit` gives it); a record of another
        event, or without the fields expected, counts nothing."""
        event = record.get("event")
        if event == "step":
            self._step(record)
        elif event == "confirmation_requested":
            self._asked[(session, str(record.get("id")))] = time.monotonic()
        elif event == "confirmation_answer":
            asked = self._asked.pop((session, str(record.get("id"))), None)
            outcome = _label(record.get("outcome"))
            self._counters["deskpod_confirmations_total"].labels(outcome).inc()
            if asked is not None:
                self._histograms["deskpod_confirmation_answer_seconds"].labels(outcome).observe(
                    time.monotonic() - asked)
        elif event == "pause":
            self._counters["deskpod_pauses_total"].labels(_label(record.get("kind"))).inc()
        elif event == "loop":
            self._counters["deskpod_loops_total"].inc()
        elif event == "run_finished":
            status = _label(record.get("status"))
            self._counters["deskpod_runs_total"].labels(status).inc()
            duration_s = record.get("duration_s")
            if isinstance(duration_s, (int, float)):
                self._histograms["deskpod_run_duration_seconds"].labels(status).observe(duration_s)
            for key in [k for k in self._asked if k[0] == session]:
                del self._asked[key]

    def _step(self, record: dict[str, Any]) -> None:
        """A ``step`` record: its outcome, and each action that ran with the risk level it was judged at."""
        self._counters["deskpod_steps_total"].labels(_label(record.get("outcome"))).inc()
        risks = {entry.get("index"): entry.get("risk") for entry in record.get("risks") or ()
                 if isinstance(entry, dict)}
        for index, action in enumerate(record.get("actions") or ()):
            if isinstance(action, dict):
                self._counters["deskpod_actions_total"].labels(_label(action.get("type")),
                                                               _label(risks.get(index, "unknown"))).inc()
