"""The tokens of ``deskpod serve`` from the settings: the SHA-256 of the agents' token, of the approver's and of the metrics'.

The service holds only these hashes (:class:`~deskpod.service.server.service_state.ControllerService`)
and compares a presented bearer token with them in constant time (:mod:`deskpod.tokens`).
"""

from __future__ import annotations

from pydantic import SecretStr

from deskpod.errors import InvalidRequestError
from deskpod.settings import get_settings
from deskpod.tokens import token_sha256

__all__ = ["approver_token_sha256_from_env", "metrics_token_sha256_from_env", "token_sha256_from_env"]


def token_sha256_from_env() -> str:
    """The service token's SHA-256 (hex) from the settings: ``DESKPOD_SERVE_TOKEN_SHA256``,
    else the SHA-256 of ``DESKPOD_SERVE_TOKEN`` (:func:`deskpod.settings.get_settings`).

    Raises:
        InvalidRequestError: neither is set.
        SettingsError: the hash is not 64 hex digits (or another setting does not parse).
    """
    settings = get_settings()
    digest = _digest(settings.serve_token_sha256, settings.serve_token)
    if digest is not None:
        return digest
    raise InvalidRequestError("set DESKPOD_SERVE_TOKEN (or DESKPOD_SERVE_TOKEN_SHA256) to serve")


def approver_token_sha256_from_env() -> str | None:
    """The approver token's SHA-256 (hex) from the settings: ``DESKPOD_SERVE_APPROVER_TOKEN_SHA256``,
    else the SHA-256 of ``DESKPOD_SERVE_APPROVER_TOKEN``; ``None`` when neither is set (then
    no approver can connect, and confirmations no session answers itself time out as denials).

    Raises:
        SettingsError: the hash is not 64 hex digits (or another setting does not parse).
    """
    settings = get_settings()
    return _digest(settings.serve_approver_token_sha256, settings.serve_approver_token)


def metrics_token_sha256_from_env() -> str | None:
    """The metrics token's SHA-256 (hex) from the settings: ``DESKPOD_SERVE_METRICS_TOKEN_SHA256``,
    else the SHA-256 of ``DESKPOD_SERVE_METRICS_TOKEN``; ``None`` when neither is set (then the
    service's address serves no ``/metrics``).

    Raises:
        SettingsError: the hash is not 64 hex digits (or another setting does not parse).
    """
    settings = get_settings()
    return _digest(settings.serve_metrics_token_sha256, settings.serve_metrics_token)


def _digest(sha256: str | None, token: SecretStr | None) -> str | None:
    """``sha256`` when set, else the SHA-256 of ``token`` (``None``: neither is set)."""
    if sha256 is not None:
        return sha256
    return token_sha256(token.get_secret_value()) if token is not None else None
