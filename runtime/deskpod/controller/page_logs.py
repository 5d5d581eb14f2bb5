"""What the controller does with a page's console messages and network requests before
anyone reads them (:mod:`deskpod.protocol.page_logs`).

Both are page data, untrusted like the page's text. A request's URL is redacted exactly as
the audit log redacts URLs (:func:`~deskpod.controller.policy.policy_file.redact_url`: user
info and the values of secret-looking query parameters), so a request the page sent with a
token or a password in its query, typed there by a person or the controller, does not hand
it to the agent (:func:`redact_requests`, applied to every observation the run receives).
The console's text and the requests' URLs are sources of the prompt-injection scan, as the
page's text is (:func:`scan_sources`).
"""

from __future__ import annotations

from urllib.parse import unquote

from deskpod.controller.policy.policy_file import redact_url
from deskpod.protocol import Observation
from deskpod.protocol.limits import MAX_URL_CHARS

__all__ = ["redact_requests", "scan_sources"]

def _redacted(url: str) -> str:
    """``url`` as the audit log shows it, cut to :data:`~deskpod.protocol.limits.MAX_URL_CHARS`
    (a redaction can make it longer); :data:`~deskpod.controller.policy.policy_file.UNREADABLE_URL`
    when it cannot be parsed."""
    return (redact_url(url) or "")[:MAX_URL_CHARS]


def redact_requests(observation: Observation) -> Observation:
    """``observation`` with the URL of each of its network requests redacted (see the module).

    Returns:
        ``observation`` itself when it has no network log.
    """
    log = observation.network
    if log is None:
        return observation
    requests = [request.model_copy(update={"url": _redacted(request.url)}) for request in log.requests]
    return observation.model_copy(update={"network": log.model_copy(update={"requests": requests})})


def scan_sources(observation: Observation) -> dict[str, str | None]:
    """The observation's page logs as sources of the injection scan
    (:func:`~deskpod.controller.policy.injection.scan_text`): ``console``, its messages' texts,
    and ``network``, its requests' URLs percent-decoded, one a line (``None``: not asked)."""
    console, network = observation.console, observation.network
    return {"console": "\n".join(m.text for m in console.messages) if console is not None else None,
            "network": "\n".join(unquote(r.url) for r in network.requests) if network is not None else None}
