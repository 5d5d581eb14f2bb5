"""Capturing a run's trace: in memory (the OpenTelemetry SDK's in-memory exporter) or as an
OTLP/HTTP collector receives it (:func:`otlp_collector`), and the checks the trace tests share
(one trace, who is whose parent, no secret in any attribute or event)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Collector", "capture", "exported_text", "otlp_collector", "parent_names"]


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


@dataclass
class Collector:
    """What an OTLP/HTTP receiver got: ``url`` (its ``/v1/traces``), each request's path and
    content type, and the spans with the ``service.name`` of their resource."""

    url: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)
    spans: list[tuple[str, Span]] = field(default_factory=list)

    def take(self, path: str, content_type: str, body: bytes) -> None:
        """Keep one export request (protobuf)."""
        self.requests.append((path, content_type))
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            self.spans += [(service, span) for scope in resource_spans.scope_spans for span in scope.spans]


@contextmanager
def otlp_collector() -> Iterator[Collector]:
    """An OTLP/HTTP (protobuf) trace receiver on 127.0.0.1 for the block."""
    collector = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            collector.take(self.path, self.headers.get("Content-Type", ""), body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    collector.url = f"http://127.0.0.1:{server.server_port}/v1/traces"
    try:
        yield collector
    finally:
        server.shutdown()
        server.server_close()
