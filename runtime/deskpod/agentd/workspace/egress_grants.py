"""Egress grants: the per-command proxy credential of a ``network: true`` command.

The egress proxy admits the sandbox container (Chromium) and nothing else on
``sandbox_net`` unless the request carries a credential that agentd holds as a live
**grant** (SECURITY.md, "Trust zones"). agentd issues one grant per network-enabled
``exec`` (:meth:`EgressGrants.grant`): a fresh random credential, the hosts it is
good for (the request's ``allowed_domains``, the task's list; ``None``: the proxy's
own allowlist alone) and a lifetime of the command's timeout plus slack. The
workspace runner puts it in that command's proxy variables only
(:func:`proxy_url_with`, user :data:`PROXY_USER`), and agentd revokes it as soon as
the runner has answered, which it does only after killing every process of the
agent's zone. A credential an agent saved to a file is therefore dead by the next
request, and one it guesses was never issued.

The proxy's helper (``images/egress/grant_check.py``) asks agentd about each
request at :data:`EGRESS_CHECK_PATH` with the credential's SHA-256 and the host
(:class:`EgressCheck`); agentd answers :class:`EgressCheckAnswer`. agentd keeps only
the SHA-256 of each live credential, never a list anyone can read; the endpoint
needs no token because its one answer (this hash is live for this host) is worth
nothing without the credential itself.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field

from deskpod.errors import BusyError
from deskpod.protocol._base import STRICT as _STRICT

__all__ = [
    "CREDENTIAL_PATTERN",
    "EGRESS_CHECK_PATH",
    "EgressCheck",
    "EgressCheckAnswer",
    "EgressGrants",
    "MAX_CHECK_BODY_BYTES",
    "MAX_LIVE_GRANTS",
    "PROXY_USER",
    "host_allowed",
    "proxy_url_with",
]

EGRESS_CHECK_PATH = "/v1/egress/check"
"""agentd's endpoint the egress proxy's helper asks (``POST``, JSON :class:`EgressCheck`)."""

PROXY_USER = "deskpod"
"""The user name in a grant's proxy URL (the proxy looks only at the password, the credential)."""

CREDENTIAL_PATTERN = r"^[A-Za-z0-9_-]{32,128}$"
"""What a credential looks like (``secrets.token_urlsafe(32)``: 43 URL-safe characters)."""

MAX_CHECK_BODY_BYTES = 4096
"""Largest check body agentd reads, bytes."""

MAX_LIVE_GRANTS = 16
"""Grants alive at once at most (workspace requests run one at a time: one is the norm)."""



class EgressCheck(BaseModel):
    """One request the egress proxy asks about: the SHA-256 (hex) of the credential it
    carried, and the host it asked for (lowercase, no trailing dot)."""

    model_config = _STRICT
    credential_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    host: Annotated[str, Field(min_length=1, max_length=253)]


class EgressCheckAnswer(BaseModel):
    """``allowed``: the credential is a live grant that covers the host."""

    model_config = _STRICT
    allowed: bool


def host_allowed(host: str, domains: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one (``.example.com`` and
    ``example.com`` both allow ``a.example.com``), case-insensitively, as the browser's
    URL check (:func:`deskpod.controller.policy.policy_file.check_url`)."""
    host = host.rstrip(".").lower()
    for domain in domains:
        domain = domain.lower().lstrip(".").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def proxy_url_with(proxy: str, credential: str) -> str:
    """``proxy`` (``http://egress:3128``) with the grant's credential as its user info.

    Raises:
        ValueError: ``proxy`` is not an ``http://host:port`` URL.
    """
    parts = urllib.parse.urlsplit(proxy)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http proxy URL: {proxy!r}")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{PROXY_USER}:{credential}@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(("http", netloc, "", "", ""))


@dataclass(frozen=True)
class _Grant:
    domains: tuple[str, ...] | None
    expires_at: float


class EgressGrants:
    """The live grants of one daemon; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, _Grant] = {}

    def __len__(self) -> int:
        with self._lock:
            self._expire(time.monotonic())
            return len(self._live)

    def _expire(self, now: float) -> None:
        for digest in [d for d, g in self._live.items() if g.expires_at <= now]:
            del self._live[digest]

    def issue(self, domains: Sequence[str] | None, lifetime_s: float) -> str:
        """Make a grant and return its credential (the caller must :meth:`revoke` it).

        Args:
            domains: the hosts it is good for (and their subdomains); ``None``: any host
                the proxy's own allowlist admits.
            lifetime_s: it expires after this many seconds even if never revoked.

        Raises:
            BusyError: :data:`MAX_LIVE_GRANTS` grants are already alive.
        """
        credential = secrets.token_urlsafe(32)
        digest = hashlib.sha256(credential.encode("utf-8")).hexdigest()
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if len(self._live) >= MAX_LIVE_GRANTS:
                raise BusyError(f"{MAX_LIVE_GRANTS} egress grants are alive already; retry when a command ended")
            self._live[digest] = _Grant(None if domains is None else tuple(domains), now + lifetime_s)
        return credential

    def revoke(self, credential: str) -> None:
        """End the grant of ``credential`` (nothing if it has ended already)."""
        digest = hashlib.sha256(credential.encode("utf-8")).hexdigest()
        with self._lock:
            self._live.pop(digest, None)

    def revoke_all(self) -> None:
        """End every grant (a reset)."""
        with self._lock:
            self._live.clear()

    def allows(self, check: EgressCheck) -> bool:
        """Whether ``check``'s credential is a live grant that covers its host."""
        with self._lock:
            self._expire(time.monotonic())
            grant = self._live.get(check.credential_sha256)
        if grant is None:
            return False
        return grant.domains is None or host_allowed(check.host, grant.domains)

    @contextmanager
    def grant(self, domains: Sequence[str] | None, lifetime_s: float) -> Iterator[str]:
        """A credential that is live inside the ``with`` block and revoked when it ends,
        however it ends (see :meth:`issue`)."""
        credential = self.issue(domains, lifetime_s)
        try:
            yield credential
        finally:
            self.revoke(credential)
