"""Capturing a run's trace in memory: the OpenTelemetry SDK's in-memory exporter, and the checks
the trace tests share (one trace, who is whose parent, no secret in any attribute or event)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["capture", "exported_text", "parent_names"]


def capture() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that keeps every span it ends in the returned exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def parent_names(spans: Sequence[ReadableSpan]) -> dict[str, set[str]]:
    """Each span name → the names of the spans that are parents of spans of that name (``""``: a root)."""
    by_id = {span.context.span_id: span for span in spans}
    parents: dict[str, set[str]] = {}
    for span in spans:
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        parents.setdefault(span.name, set()).add(parent.name if parent is not None else "")
    return parents


def exported_text(spans: Iterable[ReadableSpan]) -> str:
    """Everything of ``spans`` an exporter sends as text: names, attribute keys and values,
    events and their attributes, status descriptions, links, the resource's attributes."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, str(span.status.description)]
        parts += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        parts += [f"{k}={v}" for k, v in span.resource.attributes.items()]
        for event in span.events:
            parts += [event.name, *(f"{k}={v}" for k, v in (event.attributes or {}).items())]
        for link in span.links:
            parts += [f"{k}={v}" for k, v in (link.attributes or {}).items()]
    return "\n".join(parts)
