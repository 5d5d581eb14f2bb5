"""The active tab's console messages and network requests, as an observation reports them.

Asked for with :attr:`ObserveOptions.console <deskpod.protocol.ObserveOptions.console>` and
:attr:`~deskpod.protocol.ObserveOptions.network`; built by the daemon from the browser's
DevTools events of the active tab (``Runtime.consoleAPICalled``, ``Runtime.exceptionThrown``,
``Log.entryAdded``; ``Network.requestWillBeSent``, ``Network.responseReceived``,
``Network.loadingFinished``, ``Network.loadingFailed``) and read by the controller, which
treats them as untrusted: a page chooses what it logs and which URLs it requests.

Both logs are the page's, as playwright-mcp's ``browser_console_messages`` and
``browser_network_requests`` are: a top-level navigation starts them again, and another tab
becoming the active one starts them empty. Each is bounded whatever the page does: the daemon
keeps the newest :data:`~deskpod.protocol.limits.MAX_CONSOLE_MESSAGES` messages and
:data:`~deskpod.protocol.limits.MAX_NETWORK_REQUESTS` requests, each string cut before it is
kept, and a reply carries the newest that fit in
:data:`~deskpod.protocol.limits.MAX_PAGE_LOG_BYTES`; ``dropped`` counts the others. Frames in
the page's own process are included; out-of-process frames and workers are not.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import (
    MAX_CONSOLE_MESSAGES,
    MAX_CONSOLE_TEXT_CHARS,
    MAX_NETWORK_ERROR_CHARS,
    MAX_NETWORK_REQUESTS,
    MAX_URL_CHARS,
)

__all__ = [
    "CONSOLE_LEVELS",
    "ConsoleLevel",
    "ConsoleLog",
    "ConsoleMessage",
    "ConsoleSource",
    "NetworkLog",
    "NetworkRequest",
    "RESOURCE_TYPES",
    "RequestState",
    "ResourceType",
]

ConsoleLevel = Literal["error", "warning", "info", "debug"]
"""A console message's level (:data:`CONSOLE_LEVELS`)."""
CONSOLE_LEVELS: tuple[str, ...] = get_args(ConsoleLevel)
"""A console message's levels, most severe first: ``console.error`` and ``console.assert``,
uncaught exceptions and the browser's errors (a resource that failed to load) are ``error``;
``console.warn`` is ``warning``; ``console.debug`` (DevTools' ``verbose``) is ``debug``; every
other call (``log``, ``info``, ``table``, ``dir``...) is ``info``."""

ConsoleSource = Literal["console", "exception", "browser"]
"""Where a console message comes from (:class:`ConsoleMessage`)."""

RequestState = Literal["pending", "done", "failed"]
"""Where a request stands (:class:`NetworkRequest`)."""

ResourceType = Literal["Document", "Stylesheet", "Image", "Media", "Font", "Script", "TextTrack", "XHR", "Fetch",
                       "Prefetch", "EventSource", "WebSocket", "Manifest", "SignedExchange", "Ping",
                       "CSPViolationReport", "Preflight", "FedCM", "Other"]
RESOURCE_TYPES: tuple[str, ...] = get_args(ResourceType)
"""What a request loads: DevTools' ``Network.ResourceType`` (a type a newer browser adds is
reported as ``Other``)."""

_Url = Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
_Count = Annotated[int, Field(strict=True, ge=0, le=1 << 53)]


class ConsoleMessage(BaseModel):
    """One message of the page's console.

    ``level``: one of :data:`CONSOLE_LEVELS`. ``source``: ``console`` (the page called
    ``console.*``), ``exception`` (an uncaught exception or unhandled rejection) or ``browser``
    (the browser's own message about the page: a resource that failed to load, a blocked request,
    a deprecation). ``text``: a call's arguments as DevTools describes them, joined by spaces; an
    exception's message and stack; cut to :data:`~deskpod.protocol.limits.MAX_CONSOLE_TEXT_CHARS`.
    ``url`` and ``line``: the script and its line (1-based) it came from, when known. Page
    content: untrusted.
    """

    model_config = STRICT
    level: ConsoleLevel
    source: ConsoleSource
    text: Annotated[str, Field(max_length=MAX_CONSOLE_TEXT_CHARS)]
    url: _Url | None = None
    line: Annotated[int, Field(strict=True, ge=1, le=1 << 31)] | None = None


class ConsoleLog(BaseModel):
    """The active tab's console since its page loaded: ``messages`` oldest first, the newest
    :data:`~deskpod.protocol.limits.MAX_CONSOLE_MESSAGES` at most; ``dropped``: how many older
    messages of the page are not among them (past the daemon's cap, or the reply's
    :data:`~deskpod.protocol.limits.MAX_PAGE_LOG_BYTES`). The daemon starts listening the first
    time a request asks for the console; the browser then hands over the messages its page had
    logged before (at most its last 1000)."""

    model_config = STRICT
    messages: Annotated[list[ConsoleMessage], Field(max_length=MAX_CONSOLE_MESSAGES)] = []
    dropped: _Count = 0


class NetworkRequest(BaseModel):
    """One request of the page, in the order they started.

    ``method``: the HTTP method (a token, e.g. ``GET``). ``url``: what it asked for (page data;
    a redirect is one entry per hop). ``resource_type``: one of :data:`RESOURCE_TYPES`.
    ``state``: ``pending`` (no response yet, or still loading), ``done`` (loaded, or answered
    with a redirect) or ``failed`` (see ``error``). ``status``: the HTTP status of its response
    (``None``: none yet, or none). ``error``: why a ``failed`` request failed, the browser's
    words (``net::ERR_ABORTED``, ``net::ERR_BLOCKED_BY_CLIENT``: the run's allowlist), printable
    ASCII of at most :data:`~deskpod.protocol.limits.MAX_NETWORK_ERROR_CHARS`.
    """

    model_config = STRICT
    method: Annotated[str, Field(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$")]
    url: _Url
    resource_type: ResourceType
    state: RequestState
    status: Annotated[int, Field(strict=True, ge=100, le=999)] | None = None
    error: Annotated[str, Field(min_length=1, max_length=MAX_NETWORK_ERROR_CHARS, pattern=r"^[\x20-\x7e]+$")] \
        | None = None


class NetworkLog(BaseModel):
    """The active tab's requests since its page loaded (its document's own request first):
    ``requests`` in the order they started, the newest
    :data:`~deskpod.protocol.limits.MAX_NETWORK_REQUESTS` at most; ``dropped``: how many older
    requests of the page are not among them (past the daemon's cap, or the reply's
    :data:`~deskpod.protocol.limits.MAX_PAGE_LOG_BYTES`). Requests start being recorded when the
    daemon first reads the tab (an observation); a tab's earlier requests are not known."""

    model_config = STRICT
    requests: Annotated[list[NetworkRequest], Field(max_length=MAX_NETWORK_REQUESTS)] = []
    dropped: _Count = 0
