"""Who is told of every request a :class:`~deskpod.client.wire.SandboxClient` sends: the daemon's latency, for metrics.

The one wrapper around each request to a daemon (:func:`deskpod.tracing.traced_request`,
which also makes the request's span) reports it, once its reply came or it failed, to the
observer in force in the calling task's context (:data:`REQUEST_OBSERVER`, a :class:`contextvars.ContextVar`): a
task started inside :func:`observing` inherits it, so ``deskpod serve`` installs its
observer once on each connection it serves and sees the requests of every session that
connection opens, and two services in one process each see only their own. Nothing is
observed outside such a block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["REQUEST_OBSERVER", "RequestObserver", "observe_request", "observing"]

RequestObserver = Callable[[str, str, float], None]
"""Called with ``(request_type, outcome, duration_s)`` for each request sent: ``request_type``
the request's ``type`` tag (``"act"``, ``"reset"``...), ``outcome`` as
:func:`~deskpod.timing.timed_outcome` names it (``"ok"``, or the code it failed with,
:func:`~deskpod.errors.error_code`: ``"bad_reply"``, ``"timeout"``...),
``duration_s`` seconds from the send to the reply (or the failure)."""

REQUEST_OBSERVER: ContextVar[RequestObserver | None] = ContextVar("deskpod_request_observer", default=None)
"""The observer of the current context's requests (``None``: nobody observes)."""


@contextmanager
def observing(observer: RequestObserver) -> Iterator[None]:
    """Install ``observer`` for the requests sent in this context, and in the tasks started in it, until the block ends."""
    token = REQUEST_OBSERVER.set(observer)
    try:
        yield
    finally:
        REQUEST_OBSERVER.reset(token)


def observe_request(request_type: str, outcome: str, duration_s: float) -> None:
    """Tell the observer in force (if any) of one request (see :data:`RequestObserver`)."""
    observer = REQUEST_OBSERVER.get()
    if observer is not None:
        observer(request_type, outcome, duration_s)
