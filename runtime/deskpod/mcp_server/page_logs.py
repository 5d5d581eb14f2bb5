"""What ``browser_console_messages`` and ``browser_network_requests`` answer: the page's
console and requests as playwright-mcp shows them, as untrusted content.

The observation of the tool's look carries the logs (:mod:`deskpod.protocol.page_logs`), the
requests' URLs already redacted by the controller (:mod:`deskpod.controller.page_logs`). One
line each, as playwright-mcp prints them: ``[LEVEL] text @ url:line`` for a console message,
``[METHOD] url => [status]`` for a request (``[FAILED] error`` when it failed, ``[pending]``
while it has no answer). The lines are the page's words: they go inside one
:func:`~deskpod.mcp_server.content.untrusted` block; the tool's own words (how many, how many
were not kept) stay outside it.

Pure functions: no I/O, no MCP SDK types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deskpod.mcp_server.content import untrusted
from deskpod.protocol import ConsoleLog, ConsoleMessage, NetworkLog, NetworkRequest, Observation

__all__ = ["LogView", "STATIC_RESOURCE_TYPES", "console_line", "request_line"]

STATIC_RESOURCE_TYPES = frozenset({"Image", "Font", "Stylesheet", "Script", "Media", "Manifest", "TextTrack"})
"""What playwright-mcp calls static resources: ``browser_network_requests`` leaves out the ones
that loaded (``done``, status below 400) unless ``includeStatic``; a failed one is always shown."""


def console_line(message: ConsoleMessage) -> str:
    """One console message as playwright-mcp prints it: ``[LEVEL] text @ url:line``."""
    where = f" @ {message.url}:{message.line or 0}" if message.url else ""
    return f"[{message.level.upper()}] {message.text}{where}"


def request_line(request: NetworkRequest) -> str:
    """One request as playwright-mcp prints it: ``[METHOD] url => [status]``."""
    if request.state == "failed":
        outcome = f"[FAILED] {request.error or ''}".rstrip()
    elif request.status is not None:
        outcome = f"[{request.status}]"
    else:
        outcome = "[pending]"
    return f"[{request.method}] {request.url} => {outcome}"


def _static(request: NetworkRequest) -> bool:
    """A static resource that loaded (see :data:`STATIC_RESOURCE_TYPES`)."""
    return (request.resource_type in STATIC_RESOURCE_TYPES and request.state == "done"
            and (request.status is None or request.status < 400))


@dataclass(frozen=True)
class LogView:
    """What a log tool asks its look for and shows of it: the ``console`` (``only_errors``:
    its ``error`` messages only) or the ``network`` log (``include_static``: the static
    resources that loaded too)."""

    log: Literal["console", "network"]
    only_errors: bool = False
    include_static: bool = False

    def render(self, observation: Observation) -> str:
        """The tool's text for ``observation``: a line of its own words, then the entries shown
        as one untrusted block (none: the line alone)."""
        if self.log == "console":
            return self._console(observation.console, self._unread(observation))
        return self._network(observation.network, self._unread(observation))

    def _unread(self, observation: Observation) -> str:
        reasons = [u.reason for u in observation.unread if u.part == self.log]
        return f"The {self.log} log could not be read ({reasons[0]})." if reasons else \
            f"The sandbox did not report the {self.log} log."

    def _console(self, log: ConsoleLog | None, unread: str) -> str:
        if log is None:
            return unread
        what = "console errors" if self.only_errors else "console messages"
        shown = [console_line(m) for m in log.messages if m.level == "error" or not self.only_errors]
        if not shown:
            return f"No {what} on this page{_not_kept(log.dropped, 'messages')}."
        lines = "\n".join(shown)
        return f"{len(shown)} {what} of this page, oldest first{_not_kept(log.dropped, 'messages')}.\n" \
               f"{untrusted('console', lines)}"

    def _network(self, log: NetworkLog | None, unread: str) -> str:
        if log is None:
            return unread
        shown = [request_line(r) for r in log.requests if self.include_static or not _static(r)]
        left_out = len(log.requests) - len(shown)
        static = f" ({left_out} static resources that loaded left out: includeStatic shows them)" if left_out else ""
        lead = (f"{len(shown)} network requests since the page loaded{static}{_not_kept(log.dropped, 'requests')}; "
                "URLs redacted as the audit log redacts them.")
        lines = "\n".join(shown)
        return f"{lead}\n{untrusted('network', lines)}" if shown else lead


def _not_kept(dropped: int, what: str) -> str:
    """The words for ``dropped`` older entries the log did not keep (``""``: none)."""
    return f" ({dropped} older {what} not kept: the newest are shown)" if dropped else ""
