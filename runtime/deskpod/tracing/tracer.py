"""A run's tracer: the run span, the spans inside it, and where the tracer provider comes from.

:func:`traced_run` opens a run's root span with the run's tracer and makes that tracer the
current one for everything the run awaits (a :class:`~contextvars.ContextVar`, which asyncio
copies into the tasks a run starts); :func:`traced` opens a child span of whatever span is
current, and does nothing outside a traced run. So the run loops, the policy, the
confirmations and the daemon client open their spans without being handed a tracer, and
one run is one trace.

Traces are off unless the operator configures an OTLP endpoint
(:func:`configured_provider`): without one there is no tracer at all, and a span costs a
context-variable read and the check of its attribute names. A span's attributes are
cleaned by :func:`~deskpod.tracing.spans.clean_attributes`: no free text is exported; an
exception ending a span sets its status to error and its ``deskpod.error`` to the error's
code, never the exception's message.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from deskpod.errors import error_code
from deskpod.settings import get_settings
from deskpod.tracing.spans import RUN, AttributeValue, clean_attributes

try:
    from opentelemetry.trace import Span, StatusCode, Tracer, TracerProvider, set_span_in_context
except ImportError:  # deskpod without its [serve] extra: no tracer is ever made (configured_provider warns)
    pass

__all__ = ["SERVICE_NAME", "SpanNote", "child_span", "configured_provider", "current_tracer",
           "traced", "traced_run"]

log = logging.getLogger(__name__)

SERVICE_NAME = "deskpod"
"""The ``service.name`` of exported traces unless ``OTEL_SERVICE_NAME`` names another."""

_TRACER: ContextVar[Tracer | None] = ContextVar("deskpod_tracer", default=None)
"""The tracer of the traced run the current task works for (``None``: none)."""


class SpanNote:
    """What the code inside a span may add to it: more attributes (a no-op outside a traced run).

    Args:
        span: the span (``None``: not traced).
    """

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def set(self, **attributes: AttributeValue | None) -> None:
        """Add ``attributes`` (names of :data:`~deskpod.tracing.spans.ATTRIBUTES`; ``None``: left out).

        Raises:
            KeyError: a name is not in :data:`~deskpod.tracing.spans.ATTRIBUTES`.
        """
        cleaned = clean_attributes(attributes)
        if self.span is not None:
            self.span.set_attributes(cleaned)

    def failed(self, exc: BaseException) -> None:
        """Mark the span failed with ``exc``'s code (:func:`~deskpod.errors.error_code`), not its message."""
        if self.span is not None:
            self.span.set_status(StatusCode.ERROR)
            self.span.set_attributes(clean_attributes({"error": error_code(exc)}))


def current_tracer() -> Tracer | None:
    """The tracer of the traced run the current task works for (``None``: none)."""
    return _TRACER.get()


@contextmanager
def traced(name: str, **attributes: AttributeValue | None) -> Iterator[SpanNote]:
    """A span ``name`` (of :data:`~deskpod.tracing.spans.SPANS`), child of the current span,
    for the block; nothing outside a traced run. An exception leaving the block marks it failed
    (:meth:`SpanNote.failed`) and goes on.

    Raises:
        KeyError: an attribute name is not in :data:`~deskpod.tracing.spans.ATTRIBUTES`.
    """
    cleaned = clean_attributes(attributes)
    tracer = _TRACER.get()
    if tracer is None:
        yield SpanNote(None)
        return
    with tracer.start_as_current_span(name, attributes=cleaned, record_exception=False,
                                      set_status_on_exception=False) as span:
        note = SpanNote(span)
        try:
            yield note
        except BaseException as exc:
            note.failed(exc)
            raise


def child_span(tracer: Tracer, parent: Span, name: str, start_ns: int, end_ns: int,
               **attributes: AttributeValue | None) -> None:
    """Record span ``name``, child of ``parent``, that ran from ``start_ns`` to ``end_ns``
    (nanoseconds since the epoch, as OpenTelemetry counts them).

    Raises:
        KeyError: an attribute name is not in :data:`~deskpod.tracing.spans.ATTRIBUTES`.
    """
    span = tracer.start_span(name, context=set_span_in_context(parent), start_time=start_ns,
                             attributes=clean_attributes(attributes), record_exception=False,
                             set_status_on_exception=False)
    span.end(end_time=end_ns)


@contextmanager
def traced_run(provider: TracerProvider | None, kind: str, run_id: str) -> Iterator[SpanNote]:
    """The root span of run ``run_id`` (``kind``: ``gui`` or ``code``) traced with ``provider``'s
    tracer, the current tracer for the block (``None``: the run is not traced).

    Args:
        provider: where the run's spans go (an SDK ``TracerProvider``), e.g. :func:`configured_provider`'s.
        kind: the run's kind.
        run_id: its id.
    """
    tracer = provider.get_tracer("deskpod") if provider is not None else None
    token = _TRACER.set(tracer)
    try:
        with traced(RUN, run_kind=kind, run_id=run_id) as note:
            yield note
    finally:
        _TRACER.reset(token)


@functools.cache
def configured_provider() -> TracerProvider | None:
    """The process's tracer provider when the operator configured an OTLP endpoint, built once:
    an SDK ``TracerProvider`` (``service.name`` :data:`SERVICE_NAME` or ``OTEL_SERVICE_NAME``) with a
    ``BatchSpanProcessor`` and the OTLP/HTTP exporter, to ``DESKPOD_TRACES_ENDPOINT``, else to what
    the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` names
    (the exporter reads them, with the other ``OTEL_EXPORTER_OTLP_*`` variables: headers,
    timeout...). The provider flushes its spans when the process exits.

    Returns:
        The provider, or ``None`` (no endpoint, ``OTEL_SDK_DISABLED=true``, or the OpenTelemetry
        SDK is not installed: then a warning is logged).

    Raises:
        SettingsError: the settings do not parse.
    """
    endpoint = get_settings().traces_endpoint
    standard = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (endpoint or standard) or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    try:  # the SDK and the exporter only when traces are on (they are in deskpod's [serve] extra)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("traces are configured, but the OpenTelemetry SDK is not installed: pip install 'deskpod[serve]'")
        return None
    provider = SdkTracerProvider(resource=Resource.create({
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or None)))
    log.info("exporting traces over OTLP/HTTP to %s", endpoint or standard)
    return provider
