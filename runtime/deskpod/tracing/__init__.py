"""OpenTelemetry traces of runs and steps, exported over OTLP when the operator configures it.

One run is one trace: a run span (:func:`traced_run`), and inside it the steps, policy
decisions, confirmation waits, verifications (:func:`traced`) and daemon requests
(:func:`traced_request`), whose children are the daemon's own phases from its reply's
timings. Off by default (:func:`configured_provider`). Span names and attributes form a
closed vocabulary that has no room for page text, typed text, URLs or secrets.

Layout: :mod:`.spans` (the names and attributes), :mod:`.tracer` (the run's tracer, the
spans, the provider from the settings), :mod:`.daemon` (a daemon request's span and phases).
"""

from deskpod.tracing.daemon import DaemonPhase, RequestNote, daemon_phases, traced_request
from deskpod.tracing.spans import ATTRIBUTES, SPANS, AttributeSpec, attribute_key, clean_attributes
from deskpod.tracing.tracer import SpanNote, configured_provider, traced, traced_run

__all__ = [
    "ATTRIBUTES",
    "AttributeSpec",
    "DaemonPhase",
    "RequestNote",
    "SPANS",
    "SpanNote",
    "attribute_key",
    "clean_attributes",
    "configured_provider",
    "daemon_phases",
    "traced",
    "traced_request",
    "traced_run",
]
