"""The run's egress allowlist enforced inside the browser, before a request leaves.

The controller sends the run's allowed hosts (:class:`~deskpod.protocol.EgressRequest`);
while a list is in force the DevTools client (:class:`deskpod.agentd.browser.cdp.Browser`) has
the ``Fetch`` domain enabled **on the browser target** with one pattern for every URL at
the request stage. On the browser target, ``Fetch`` pauses the requests of every tab,
popup, frame (out-of-process ones included) and worker, so no per-target attach is
needed (seen with Debian's Chromium: images, iframes, ``fetch``, ``sendBeacon`` pings,
a dedicated worker's ``fetch`` and each hop of a server redirect were all paused there).

For each paused request :meth:`RequestFilter.answer` decides, without I/O:

- an ``http``/``https`` URL whose host is one of the allowed domains or a subdomain of
  one: ``Fetch.continueRequest``;
- any other host: for a document (a tab's or a frame's navigation, redirect hops
  included) ``Fetch.fulfillRequest`` with a 403 deskpod page naming the host and the rule
  (:func:`blocked_page`); for anything else ``Fetch.failRequest`` with
  ``BlockedByClient``. The request is recorded (:meth:`RequestFilter.take_blocked`) for the
  next observation;
- other schemes DevTools pauses (none that reach the network) continue.

The DevTools wire calls the list's hosts only by name; a page cannot change them. The
daemon's zone may be compromised, so the egress proxy holds the same list as a second
line (``images/egress/egress_control.py``).
"""

from __future__ import annotations

import base64
import html
import urllib.parse
from collections.abc import Sequence
from typing import Any

from deskpod.agentd.workspace.egress_grants import host_allowed
from deskpod.protocol import BLOCK_RULE, MAX_BLOCKED_PER_OBSERVATION, MAX_URL_CHARS, BlockedRequest

__all__ = ["FETCH_PATTERNS", "RequestFilter", "blocked_page", "clean_url"]

FETCH_PATTERNS: list[dict[str, str]] = [{"urlPattern": "*", "requestStage": "Request"}]
"""``Fetch.enable``'s patterns: every URL, paused before it is sent."""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Blocked by deskpod: {host}</title>
<style>body {{ font-family: "DejaVu Sans", sans-serif; margin: 60px 8%; color: #222; }}
h1 {{ font-size: 30px; color: #a01818; }} code {{ background: #eee; padding: 2px 6px; }}</style></head>
<body><h1>deskpod blocked this page</h1>
<p id="deskpod-blocked">The request to <code>{host}</code> was not sent: this task may only reach
{allowed} (rule <code>{rule}</code>).</p>
<p>The block was reported to the controller and is in the run's audit log.</p></body></html>
"""


def blocked_page(host: str, domains: Sequence[str]) -> str:
    """The HTML a refused navigation shows: the host, the task's domains and the rule."""
    allowed = ", ".join(f"<code>{html.escape(d)}</code>" for d in domains[:20]) or "no host"
    return _PAGE.format(host=html.escape(host or "(no host)"), allowed=allowed, rule=BLOCK_RULE)


def clean_url(url: str) -> str:
    """A URL the browser or a page reported, fit for an observation: every raw control
    character (U+0000-U+001F, U+007F) percent-encoded, at most
    :data:`~deskpod.protocol.MAX_URL_CHARS` characters."""
    cut = url[:MAX_URL_CHARS]
    return "".join(c if " " <= c != "\x7f" else urllib.parse.quote(c) for c in cut)[:MAX_URL_CHARS]


class RequestFilter:
    """The browser's allowlist and the requests it refused (one per daemon; event-loop only)."""

    def __init__(self) -> None:
        self.domains: tuple[str, ...] | None = None
        """The allowed domains in force; ``None``: no interception."""
        self._blocked: dict[tuple[str, str], BlockedRequest] = {}

    def set(self, domains: Sequence[str] | None) -> None:
        """Put ``domains`` in force (``None``: none), and forget what was refused so far."""
        self.domains = None if domains is None else tuple(d.lstrip(".").rstrip(".").lower() for d in domains)
        self._blocked = {}

    def take_blocked(self) -> list[BlockedRequest]:
        """Return and forget the requests refused since the last call."""
        blocked, self._blocked = list(self._blocked.values()), {}
        return blocked

    def answer(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The DevTools command (method, params) that answers one ``Fetch.requestPaused``.

        Args:
            params: the event's params (``requestId``, ``request.url``, ``resourceType``).
        """
        request_id = str(params.get("requestId", ""))
        url = str((params.get("request") or {}).get("url", ""))
        parts = urllib.parse.urlsplit(url)
        domains = self.domains
        if domains is None or parts.scheme.lower() not in ("http", "https"):
            return "Fetch.continueRequest", {"requestId": request_id}
        try:
            host = (parts.hostname or "").rstrip(".").lower()
        except ValueError:
            host = ""
        if host and host_allowed(host, domains):
            return "Fetch.continueRequest", {"requestId": request_id}
        kind = str(params.get("resourceType", "Other"))
        document = kind == "Document"
        self._record(url, host, kind, document)
        if document:
            body = blocked_page(host, domains).encode("utf-8")
            return "Fetch.fulfillRequest", {
                "requestId": request_id, "responseCode": 403,
                "responseHeaders": [{"name": "Content-Type", "value": "text/html; charset=utf-8"},
                                    {"name": "Cache-Control", "value": "no-store"}],
                "body": base64.b64encode(body).decode("ascii"),
            }
        return "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}

    def _record(self, url: str, host: str, kind: str, document: bool) -> None:
        kind = "".join(c for c in kind if c.isascii() and c.isalpha())[:32]
        key = (host, kind)
        seen = self._blocked.get(key)
        if seen is not None:
            self._blocked[key] = seen.model_copy(update={"count": min(seen.count + 1, 1_000_000)})
        elif len(self._blocked) < MAX_BLOCKED_PER_OBSERVATION:
            self._blocked[key] = BlockedRequest(url=clean_url(url), host=clean_url(host)[:253].replace(" ", ""),
                                                resource_type=kind, document=document)
