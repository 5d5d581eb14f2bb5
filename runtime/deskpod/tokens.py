"""Bearer tokens: making them, hashing them, checking an ``Authorization`` header.

The daemon (agentd) and the controller service (``deskpod serve``) both hold only a
token's SHA-256 and accept a client that presents ``Authorization: Bearer <token>``.
The scheme is matched case-insensitively (RFC 9110, section 11.1: "It uses a
case-insensitive token to identify the authentication scheme"); the digests are
compared in constant time. No I/O; the token never appears in a returned reason.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["bearer_refusal", "new_token", "token_sha256"]


def new_token() -> str:
    """A fresh control token (32 random bytes, URL-safe base64: 43 characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def token_sha256(token: str) -> str:
    """The SHA-256 of ``token`` in hex: what a server is given instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def bearer_refusal(header: str | None, expected_sha256: str) -> str | None:
    """Check an ``Authorization`` header against the SHA-256 of the token in force.

    Args:
        header: the header's value; ``None`` when the request has none.
        expected_sha256: the hex SHA-256 of the token the client must present.

    Returns:
        ``None`` when the header carries the right bearer token; otherwise why not:
        ``"missing token"`` (no header, another scheme, or no token after it) or
        ``"wrong token"``.
    """
    scheme, _, presented = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return "missing token"
    if not hmac.compare_digest(token_sha256(presented.strip()), expected_sha256):
        return "wrong token"
    return None
