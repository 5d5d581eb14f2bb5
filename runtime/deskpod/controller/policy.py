"""Deterministic URL policy of the controller: the domain allowlist, applied to the real URL.

Seed 002 §9.4: the allowlist is checked against where the browser actually is —
after redirects, in every tab and popup — never against what an agent or a page
says. The egress proxy enforces the sandbox-wide allowlist on the network; this
policy is the task's own, usually narrower, and stops the run when it is left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["UrlDecision", "check_url", "redact_url", "REFUSED_SCHEMES", "SECRET_PARAM"]

REFUSED_SCHEMES = frozenset({"data", "file", "javascript", "chrome", "chrome-extension", "view-source", "ftp"})
"""URL schemes a task's browser must never be at."""

SECRET_PARAM = re.compile(r"(token|secret|passw|pwd|api[_-]?key|auth|session|sig)", re.IGNORECASE)
"""Query parameter names that suggest a credential travels in the URL."""

_NEUTRAL = frozenset({"about:blank", "chrome://newtab/", "chrome://new-tab-page/"})


@dataclass(frozen=True)
class UrlDecision:
    """``allowed``: the URL may be visited. ``rule``: which rule decided. ``flags``: warnings
    that do not refuse the URL (e.g. ``"credentials_in_url"``)."""

    allowed: bool
    rule: str
    flags: tuple[str, ...] = ()


def _host_allowed(host: str, allowed_domains: tuple[str, ...]) -> bool:
    host = host.rstrip(".").lower()
    for domain in allowed_domains:
        domain = domain.lower().lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def check_url(url: str, allowed_domains: tuple[str, ...] | list[str]) -> UrlDecision:
    """Decide whether the browser may be at ``url``.

    Args:
        url: the URL as the browser reports it (CDP), not as anyone claims it.
        allowed_domains: domains whose hosts (and subdomains) are allowed; empty
            means no domain restriction beyond the refused schemes.

    Returns:
        The :class:`UrlDecision`. ``about:blank`` and the new-tab page are always
        allowed; refused schemes never are; http(s) hosts must match the list.
        User info in the URL or secret-looking query parameters add the flags
        ``"credentials_in_url"`` / ``"secret_in_query"``.
    """
    if url in _NEUTRAL:
        return UrlDecision(True, "neutral_page")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in REFUSED_SCHEMES or scheme not in ("http", "https"):
        return UrlDecision(False, f"scheme_refused:{scheme or 'none'}")
    flags = []
    if parts.username or parts.password:
        flags.append("credentials_in_url")
    if any(SECRET_PARAM.search(name) for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        flags.append("secret_in_query")
    host = parts.hostname or ""
    if allowed_domains and not _host_allowed(host, tuple(allowed_domains)):
        return UrlDecision(False, "domain_not_allowed", tuple(flags))
    return UrlDecision(True, "domain_allowed" if allowed_domains else "no_domain_list", tuple(flags))


def redact_url(url: str | None) -> str | None:
    """Return ``url`` fit for the audit log: user info and the values of secret-looking
    query parameters replaced by ``[redacted]`` (seed 002 §13.2)."""
    if not url:
        return url
    parts = urlsplit(url)
    if not (parts.username or parts.password or parts.query):
        return url
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    if parts.username or parts.password:
        netloc = "[redacted]@" + netloc
    query = urlencode(
        [(k, "[redacted]" if SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
