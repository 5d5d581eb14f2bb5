"""The span of one request to a sandbox's daemon, and the daemon's own phases inside it.

The daemon reports how long it spent on a request in the observation it replies with:
its actions' timings (executing), ``settle_s`` (waiting for the page to settle) and
``capture_s`` (capturing and encoding the screenshot). :func:`traced_request` turns them into
child spans of the request's span, so one trace covers both sides. The daemon is untrusted
and its clock is not the controller's: the protocol bounds each duration
(:class:`~deskpod.protocol.Observation`), and :func:`daemon_phases` places the phases by
duration alone, one after the other inside the request's own interval, never outside it; a
phase the interval cannot hold is cut at its end (``deskpod.clamped``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from deskpod.protocol import Observation
from deskpod.request_observer import observe_request
from deskpod.timing import timed_outcome
from deskpod.tracing.spans import CAPTURE, DAEMON_REQUEST, EXECUTE, SETTLE, AttributeValue, clean_attributes
from deskpod.tracing.tracer import SpanNote, child_span, current_tracer

__all__ = ["DaemonPhase", "RequestNote", "daemon_phases", "traced_request"]

_NS = 1_000_000_000


@dataclass(frozen=True)
class DaemonPhase:
    """One phase of the daemon's work on a request, placed in the request's interval.

    ``name``: :data:`~deskpod.tracing.spans.EXECUTE`, ``SETTLE`` or ``CAPTURE``; ``start_ns``,
    ``end_ns``: where it is placed (nanoseconds since the epoch); ``reported_s``: the seconds the
    daemon reported; ``clamped``: the interval could not hold them; ``attributes``: more of the span's.
    """

    name: str
    start_ns: int
    end_ns: int
    reported_s: float
    clamped: bool
    attributes: dict[str, AttributeValue | None] = field(default_factory=dict)


def daemon_phases(observation: Observation, start_ns: int, end_ns: int) -> list[DaemonPhase]:
    """The daemon's phases of a request sent at ``start_ns`` and answered at ``end_ns``.

    The phases it reported (executing: its actions' timings, if it ran any; settling, if it
    was asked to; capturing, if its reply says) are placed one after the other, starting when
    the time the request took beyond the daemon's work (``observe_s`` and the actions) is half
    spent: the way there and back, split evenly. Each starts and ends inside the interval.

    Args:
        observation: the reply's observation (bounded by the protocol: 0 to 86,400 s each).
        start_ns: when the request was sent (nanoseconds since the epoch).
        end_ns: when its reply was read.

    Returns:
        The phases, in order; empty when the daemon reported none.
    """
    reported: list[tuple[str, float, dict[str, AttributeValue | None]]] = []
    if observation.timings:
        reported.append((EXECUTE, sum(t.duration_s for t in observation.timings), {}))
    if observation.settled is not None:
        reported.append((SETTLE, observation.settle_s,
                         {"settled": observation.settled, "settle_signal": observation.settle_signal}))
    if observation.capture_s is not None:
        reported.append((CAPTURE, observation.capture_s, {}))
    work_s = sum(seconds for name, seconds, _ in reported if name == EXECUTE) + max(
        observation.observe_s, sum(seconds for name, seconds, _ in reported if name != EXECUTE))
    end_ns = max(start_ns, end_ns)
    cursor = start_ns + max(0, end_ns - start_ns - round(work_s * _NS)) // 2
    phases = []
    for name, seconds, attributes in reported:
        wanted_end = cursor + round(seconds * _NS)
        phases.append(DaemonPhase(name, cursor, min(wanted_end, end_ns), seconds, wanted_end > end_ns, attributes))
        cursor = min(wanted_end, end_ns)
    return phases


class RequestNote:
    """What the client tells the request's span once the reply is read: its observation."""

    def __init__(self) -> None:
        self.observation: Observation | None = None

    def replied(self, observation: Observation | None) -> None:
        """The reply's observation (``None``: the reply has none), whose timings become the daemon's phases."""
        self.observation = observation


@contextmanager
def traced_request(request_type: str, actions: int = 0) -> Iterator[RequestNote]:
    """A :data:`~deskpod.tracing.spans.DAEMON_REQUEST` span for the block that sends one request
    and reads its reply, child of the current span, with the daemon's phases
    (:func:`daemon_phases`) as its children; nothing outside a traced run. An exception leaving
    the block marks the span failed with the error's code and goes on. Traced or not, the
    request observer in force (:mod:`deskpod.request_observer`) is told the request's type,
    outcome and duration.

    Args:
        request_type: the request's ``type`` (``act``, ``navigate``, ``exec``...).
        actions: how many actions it carries.
    """
    with timed_outcome(lambda outcome, duration_s: observe_request(request_type, outcome, duration_s)):
        with _request_span(request_type, actions) as note:
            yield note


@contextmanager
def _request_span(request_type: str, actions: int) -> Iterator[RequestNote]:
    """:func:`traced_request`'s span, if the run is traced."""
    note = RequestNote()
    tracer = current_tracer()
    if tracer is None:
        yield note
        return
    start_ns = time.time_ns()
    span = tracer.start_span(DAEMON_REQUEST, attributes=clean_attributes({"request": request_type, "actions": actions}),
                             start_time=start_ns, record_exception=False, set_status_on_exception=False)
    try:
        yield note
    except BaseException as exc:
        SpanNote(span).failed(exc)
        raise
    finally:
        end_ns = time.time_ns()
        if note.observation is not None:
            for phase in daemon_phases(note.observation, start_ns, end_ns):
                child_span(tracer, span, phase.name, phase.start_ns, phase.end_ns, reported_s=phase.reported_s,
                           clamped=phase.clamped, **phase.attributes)
        span.end(end_time=end_ns)
