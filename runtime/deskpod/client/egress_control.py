"""The egress proxy's control endpoint on the wire: one JSON call with the control token.

The proxy (``images/egress/egress_control.py``) answers ``PUT``/``GET``/``DELETE`` on its
control paths with a JSON object; a refusal carries ``error`` and, for an allowlist the
proxy will not take, ``refused`` (the domains outside its own list). The token is sent
as ``Authorization: Bearer``; the proxy holds only its SHA-256. Both the controller's
per-run allowlist (:class:`deskpod.controller.egress.EgressControl`) and the backend's
tenant registry (:class:`deskpod.backend.egress_tenants.EgressTenants`) speak through
:class:`ControlEndpoint`. Durations are float seconds.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any, Final

from deskpod.errors import EgressControlError

__all__ = ["ControlEndpoint", "MAX_ANSWER_BYTES", "TENANTS_PATH"]

TENANTS_PATH: Final = "/v1/tenants/"
"""A multi-tenant proxy's tenants (``/v1/tenants/ID``, ``/v1/tenants/ID/allowlist``)."""

MAX_ANSWER_BYTES: Final = 65_536
"""The most of an answer read; a longer one is cut (and then does not parse: ``{}``)."""


class ControlEndpoint:
    """The control endpoint at ``url`` (``http://host[:port]``), called with ``token``.

    Args:
        url: ``http://host:port`` of the endpoint (compose: ``http://egress:3129``).
        token: the control token.
        timeout_s: per call, seconds.

    Raises:
        ValueError: ``url`` is not an ``http://host[:port]`` URL, or the token is empty.
    """

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"not an http://host:port URL: {url!r}")
        if not token:
            raise ValueError("the egress control token is empty")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout_s = timeout_s
        self._token = token

    def call(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        """Send one request (blocking) and return its HTTP status and JSON object (``{}``
        when the answer is not one).

        Raises:
            EgressControlError: the endpoint cannot be reached (``detail["status"]`` ``None``).
        """
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            raw = resp.read(MAX_ANSWER_BYTES)
        except (OSError, http.client.HTTPException) as exc:
            raise EgressControlError(f"the egress proxy's control endpoint cannot be reached: {exc}",
                                     detail={"status": None, "refused": []}) from exc
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {}
        return resp.status, answer if isinstance(answer, dict) else {}

    @staticmethod
    def refusal(what: str, status: int, answer: dict[str, Any]) -> EgressControlError:
        """The error for a refused call: ``what`` was refused, with the proxy's reason and
        (``detail["refused"]``) the domains it named, at most 20."""
        listed = answer.get("refused")
        refused: list[Any] = listed if isinstance(listed, list) else []
        message = str(answer.get("error", ""))[:300] or f"HTTP {status}"
        return EgressControlError(f"the egress proxy refused {what}: {message}",
                                  detail={"status": status, "refused": [str(r)[:253] for r in refused[:20]]})
