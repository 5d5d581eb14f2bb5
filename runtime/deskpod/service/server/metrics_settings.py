"""How ``deskpod serve`` serves its ``/metrics`` (:class:`MetricsSettings`): behind a bearer token, on a loopback listener, or not at all.

Two protections, each the operator's choice, both allowed at once:

- ``token_sha256`` (``DESKPOD_SERVE_METRICS_TOKEN``): ``GET /metrics`` on the service's own
  address answers only a request bearing that token (HTTP 401 otherwise). It is a token of
  its own, not an agent's nor an approver's: a scraper that holds it can read counts and
  nothing else, and neither the agents' token nor the approvers' reads the metrics.
- ``listen`` (``DESKPOD_SERVE_METRICS_LISTEN``): a second listener serves ``/metrics`` without
  a token, on a loopback address only (``127.0.0.0/8``, ``::1``, ``localhost``): whoever can
  reach it is on the host already.

Neither: the service serves no ``/metrics`` (HTTP 404).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from deskpod.errors import InvalidRequestError

__all__ = ["MetricsSettings", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine's loopback: ``localhost``, or an IP address of ``127.0.0.0/8`` or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class MetricsSettings:
    """Where and for whom ``/metrics`` is served (see the module).

    Args:
        token_sha256: SHA-256 (hex) of the token a request to ``/metrics`` on the service's
            address must bear (``None``: the service's address serves no ``/metrics``).
        listen: ``(host, port)`` of a listener serving ``/metrics`` without a token (``None``: none).

    Raises:
        InvalidRequestError: ``listen``'s host is not a loopback address, or ``token_sha256`` is
            not 64 lower-case hex digits.
    """

    token_sha256: str | None = None
    listen: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.listen is not None and not is_loopback(self.listen[0]):
            raise InvalidRequestError(f"DESKPOD_SERVE_METRICS_LISTEN: {self.listen[0]!r} is not a loopback address: "
                                      "metrics served without a token listen on 127.0.0.1, ::1 or localhost only")
        if self.token_sha256 is not None and (len(self.token_sha256) != 64
                                              or self.token_sha256.strip("0123456789abcdef")):
            raise InvalidRequestError("the metrics token's SHA-256 is not 64 lower-case hex digits")

    @property
    def enabled(self) -> bool:
        """Whether either listener serves ``/metrics``."""
        return self.token_sha256 is not None or self.listen is not None
