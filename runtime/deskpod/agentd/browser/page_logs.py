"""The active tab's console messages and network requests, from its DevTools events, kept
bounded for :attr:`~deskpod.protocol.Observation.console` and :attr:`~deskpod.protocol.Observation.network`.

The browser's event routing (:mod:`deskpod.agentd.browser.targets`) feeds them the active
tab's events, as it feeds :mod:`.activity`: :class:`ConsoleMessages` the events of
:data:`CONSOLE_EVENTS`, :class:`NetworkRequests` the ``Network.*`` ones. Both hold the page's
entries only (:mod:`deskpod.protocol.page_logs`): :meth:`~ConsoleMessages.navigated` (the main
frame committed a new document, ``Page.frameNavigated``) starts the page's log again, and
``clear`` (the active tab's session was replaced) empties it.

Whatever a page does (a loop of ``console.log``, thousands of fetches, megabyte URLs), they
hold a fixed amount: at most :data:`~deskpod.protocol.limits.MAX_CONSOLE_MESSAGES` and
:data:`~deskpod.protocol.limits.MAX_NETWORK_REQUESTS` entries, the newest (the older ones are
counted), each string cut before it is kept; ``take`` gives the newest entries that fit a
reply's byte budget. Everything here is page data: untrusted.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Any, Final, get_args

from deskpod.agentd.browser.request_filter import clean_url
from deskpod.protocol.limits import (
    MAX_CONSOLE_MESSAGES,
    MAX_CONSOLE_TEXT_CHARS,
    MAX_NETWORK_ERROR_CHARS,
    MAX_NETWORK_REQUESTS,
    MAX_URL_CHARS,
)
from deskpod.protocol.page_logs import (
    ConsoleLevel,
    ConsoleLog,
    ConsoleMessage,
    ConsoleSource,
    NetworkLog,
    NetworkRequest,
    RequestState,
    ResourceType,
)

__all__ = ["CONSOLE_EVENTS", "ConsoleMessages", "NetworkRequests"]

CONSOLE_EVENTS: Final = frozenset({"Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded"})
"""The DevTools events a console message comes from: a ``console.*`` call, an uncaught
exception, the browser's own message about the page."""

_API_LEVELS: Final[dict[str, ConsoleLevel]] = {"error": "error", "assert": "error", "warning": "warning",
                                                "debug": "debug"}
"""``Runtime.consoleAPICalled``'s ``type`` → level (any other call is ``info``)."""

_LOG_LEVELS: Final[dict[str, ConsoleLevel]] = {"error": "error", "warning": "warning", "info": "info",
                                                "verbose": "debug"}
"""``Log.entryAdded``'s ``level`` → level."""

_RESOURCES: Final[dict[str, ResourceType]] = {name: name for name in get_args(ResourceType)}
"""The resource types of the protocol, by DevTools' name (the same)."""

_TOKEN_CHARS: Final = frozenset("!#$%&'*+.^_`|~-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""The characters of an HTTP token (RFC 9110), which a method is."""


def _field(value: Any, key: str) -> Any:
    """``value[key]`` when ``value`` is a DevTools object (a dict), else ``None``."""
    return value.get(key) if isinstance(value, dict) else None


def _cut(value: Any, limit: int = MAX_CONSOLE_TEXT_CHARS) -> str:
    """``value`` when it is a string, at most ``limit`` characters (cut before it is copied); else ``""``."""
    return value[:limit] if isinstance(value, str) else ""


def _primitive(value: Any, limit: int) -> str:
    """A JavaScript primitive's value as the console shows it, at most ``limit`` characters."""
    if isinstance(value, str):
        return value[:limit]
    return json.dumps(value)[:limit] if isinstance(value, (int, float, bool)) or value is None else ""


def _arg_text(arg: Any, limit: int) -> str:
    """One argument of a ``console.*`` call (a DevTools ``RemoteObject``) as the console shows
    it: a primitive's value, else its description, at most ``limit`` characters."""
    if not isinstance(arg, dict):
        return ""
    if "value" in arg:
        return _primitive(arg["value"], limit)
    for key in ("unserializableValue", "description", "type"):
        if isinstance(arg.get(key), str):
            return _cut(arg[key], limit)
    return ""


def _joined(args: Any) -> str:
    """A call's arguments joined by spaces, at most :data:`MAX_CONSOLE_TEXT_CHARS` characters
    (no argument is read past what still fits)."""
    pieces: list[str] = []
    left = MAX_CONSOLE_TEXT_CHARS
    for arg in args if isinstance(args, list) else ():
        if left <= 0:
            break
        piece = _arg_text(arg, left)
        pieces.append(piece)
        left -= len(piece) + 1
    return " ".join(pieces)[:MAX_CONSOLE_TEXT_CHARS]


def _where(url: Any, line: Any) -> tuple[str | None, int | None]:
    """A script's URL (cleaned, cut) and 1-based line from DevTools' URL and 0-based line."""
    shown = clean_url(url) if isinstance(url, str) and url else None
    number = line + 1 if isinstance(line, int) and not isinstance(line, bool) and 0 <= line < 1 << 31 else None
    return shown, number


def _first_frame(params: dict[str, Any]) -> dict[str, Any]:
    """The top call frame of an event's ``stackTrace`` (empty when it has none)."""
    frames = _field(params.get("stackTrace"), "callFrames")
    return frames[0] if isinstance(frames, list) and frames and isinstance(frames[0], dict) else {}


@dataclass(frozen=True)
class _Message:
    """A console message as kept: every string already cut to the protocol's caps."""

    level: ConsoleLevel
    source: ConsoleSource
    text: str
    url: str | None
    line: int | None


def _message(method: str, params: dict[str, Any]) -> _Message | None:
    """The console message of one of :data:`CONSOLE_EVENTS` (``None``: not one to keep)."""
    if method == "Runtime.consoleAPICalled":
        frame = _first_frame(params)
        url, line = _where(frame.get("url"), frame.get("lineNumber"))
        return _Message(_API_LEVELS.get(str(params.get("type")), "info"), "console", _joined(params.get("args")),
                        url, line)
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails")
        if not isinstance(details, dict):
            return None
        described = _cut(_field(details.get("exception"), "description"))
        url, line = _where(details.get("url"), details.get("lineNumber"))
        return _Message("error", "exception", f"{_cut(details.get('text'))} {described}".strip()[:MAX_CONSOLE_TEXT_CHARS],
                        url, line)
    entry = params.get("entry")
    if not isinstance(entry, dict) or entry.get("source") == "worker":  # a worker's, as playwright leaves them out
        return None
    url, line = _where(entry.get("url"), entry.get("lineNumber"))
    return _Message(_LOG_LEVELS.get(str(entry.get("level")), "info"), "browser", _cut(entry.get("text")), url, line)


_LOG_ENVELOPE_BYTES: Final = 64
"""Bytes a log takes as JSON besides its entries (its keys, brackets and ``dropped``), rounded up."""


def _newest_fitting(entries: list[Any], max_bytes: int) -> list[Any]:
    """The newest of ``entries`` (models, oldest first) that fit, as a log's JSON, in
    ``max_bytes``; oldest first."""
    kept: list[Any] = []
    used = _LOG_ENVELOPE_BYTES
    for entry in reversed(entries):
        used += len(entry.model_dump_json().encode()) + 1
        if used > max_bytes:
            break
        kept.append(entry)
    return kept[::-1]


class ConsoleMessages:
    """The active tab's console messages since its page loaded, the newest
    :data:`~deskpod.protocol.limits.MAX_CONSOLE_MESSAGES` (see the module docstring)."""

    def __init__(self) -> None:
        self._kept: collections.deque[_Message] = collections.deque(maxlen=MAX_CONSOLE_MESSAGES)
        self._seen = 0

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Record one of :data:`CONSOLE_EVENTS` of the active tab (anything malformed is skipped)."""
        message = _message(method, params)
        if message is not None:
            self._kept.append(message)
            self._seen += 1

    def navigated(self) -> None:
        """The main frame committed a new document: a new page's log begins."""
        self.clear()

    def clear(self) -> None:
        """Forget every message (a new page, or the tab's session was replaced)."""
        self._kept.clear()
        self._seen = 0

    def take(self, max_bytes: int) -> ConsoleLog:
        """The log as a reply carries it: the newest messages whose JSON fits in ``max_bytes``
        (the log itself is kept)."""
        messages = [ConsoleMessage(level=m.level, source=m.source, text=m.text, url=m.url, line=m.line)
                    for m in self._kept]
        kept = _newest_fitting(messages, max_bytes)
        return ConsoleLog(messages=kept, dropped=self._seen - len(kept))


class _Request:
    """One request as kept (mutable: its response and end come later); strings already cut."""

    __slots__ = ("error", "loader", "method", "request_id", "resource_type", "state", "status", "url")

    def __init__(self, request_id: str, loader: str, method: str, url: str, resource_type: ResourceType) -> None:
        self.request_id = request_id
        self.loader = loader
        self.method = method
        self.url = url
        self.resource_type = resource_type
        self.state: RequestState = "pending"
        self.status: int | None = None
        self.error: str | None = None


def _status(response: Any) -> int | None:
    """A DevTools ``Response``'s HTTP status, when it is one (100..999)."""
    status = response.get("status") if isinstance(response, dict) else None
    if isinstance(status, float) and status.is_integer():
        status = int(status)
    return status if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 999 else None


def _method(value: Any) -> str:
    """An HTTP method as reported: a token of at most 32 characters, else ``OTHER``."""
    method = value if isinstance(value, str) else ""
    return method if 0 < len(method) <= 32 and set(method) <= _TOKEN_CHARS else "OTHER"


def _error(value: Any) -> str:
    """A failed request's error text: printable ASCII, at most :data:`MAX_NETWORK_ERROR_CHARS`."""
    printable = "".join(c for c in _cut(value, 4 * MAX_NETWORK_ERROR_CHARS) if " " <= c <= "~")
    return printable[:MAX_NETWORK_ERROR_CHARS] or "failed"


class NetworkRequests:
    """The active tab's requests since its page loaded, the newest
    :data:`~deskpod.protocol.limits.MAX_NETWORK_REQUESTS` (see the module docstring); a redirect
    ends one entry (``done`` with the redirect's status) and starts the next."""

    def __init__(self) -> None:
        self._kept: collections.deque[_Request] = collections.deque()
        self._live: dict[str, _Request] = {}  # request id -> its latest hop, while it is kept
        self._dropped = 0

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Record one ``Network.*`` event of the active tab (anything malformed is skipped)."""
        request_id = params.get("requestId")
        if not isinstance(request_id, str):
            return
        if method == "Network.requestWillBeSent":
            self._started(request_id, params)
            return
        entry = self._live.get(request_id)
        if entry is None:
            return
        if method == "Network.responseReceived":
            entry.status = _status(params.get("response"))
        elif method == "Network.loadingFinished":
            entry.state = "done"
            del self._live[request_id]
        elif method == "Network.loadingFailed":
            entry.state, entry.error = "failed", _error(params.get("errorText"))
            del self._live[request_id]

    def _started(self, request_id: str, params: dict[str, Any]) -> None:
        request = params.get("request")
        if not isinstance(request, dict):
            return
        earlier = self._live.get(request_id)
        if earlier is not None and "redirectResponse" in params:
            earlier.state, earlier.status = "done", _status(params.get("redirectResponse"))
        url = _cut(request.get("url"), MAX_URL_CHARS) + _cut(request.get("urlFragment"), MAX_URL_CHARS)
        kind = params.get("type")
        entry = _Request(request_id, _cut(params.get("loaderId"), 128), _method(request.get("method")), clean_url(url),
                         _RESOURCES.get(kind, "Other") if isinstance(kind, str) else "Other")
        if len(self._kept) >= MAX_NETWORK_REQUESTS:
            gone = self._kept.popleft()
            self._dropped += 1
            if self._live.get(gone.request_id) is gone:
                del self._live[gone.request_id]
        self._kept.append(entry)
        self._live[request_id] = entry

    def navigated(self, loader: Any) -> None:
        """The main frame committed the document ``loader`` (its ``loaderId``) loads: a new
        page's log begins with that document's own requests (its request and redirects)."""
        self._kept = collections.deque(r for r in self._kept if r.loader == loader)
        self._live = {r.request_id: r for r in self._kept if r.state == "pending"}
        self._dropped = 0

    def clear(self) -> None:
        """Forget every request (the tab's session was replaced)."""
        self._kept.clear()
        self._live.clear()
        self._dropped = 0

    def take(self, max_bytes: int) -> NetworkLog:
        """The log as a reply carries it: the newest requests whose JSON fits in ``max_bytes``
        (the log itself is kept)."""
        requests = [NetworkRequest(method=r.method, url=r.url, resource_type=r.resource_type, state=r.state,
                                   status=r.status, error=r.error) for r in self._kept]
        kept = _newest_fitting(requests, max_bytes)
        return NetworkLog(requests=kept, dropped=self._dropped + len(requests) - len(kept))
