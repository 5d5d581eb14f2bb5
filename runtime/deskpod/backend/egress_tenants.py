"""The backend's client of a shared egress proxy's tenants (the proxy's multi-tenant mode).

One egress proxy serves every sandbox of a Kubernetes namespace (``deploy/kubernetes``,
``DESKPOD_EGRESS_MODE=tenants``). It lets a client through only as a *tenant* the
controller registered at its control endpoint (``images/egress/egress_control.py``), with
the tenant's own allowlist and daemon: :class:`EgressTenants` registers a sandbox when the
backend adopts it (``PUT /v1/tenants/ID``) and removes it when the backend releases it
(``DELETE /v1/tenants/ID``), so a released sandbox's next request is refused. Each run's
narrower list goes to ``/v1/tenants/ID/allowlist`` through
:class:`deskpod.controller.egress.EgressControl` (the handle's ``egress_tenant``).

The control token is the controller's alone (the proxy holds its SHA-256). Durations are
float seconds.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

from deskpod.client.egress_control import TENANTS_PATH, ControlEndpoint

__all__ = ["EgressTenants", "TENANT_TIMEOUT_S"]

TENANT_TIMEOUT_S: Final = 5.0
"""How long one call to the proxy's control endpoint may take, seconds."""


class EgressTenants:
    """Registers and removes sandboxes at a multi-tenant egress proxy.

    Args:
        url: ``http://host:port`` of the proxy's control endpoint.
        token: the control token.
        timeout_s: per call, seconds.

    Raises:
        ValueError: ``url`` is not an ``http://host[:port]`` URL, or the token is empty.
    """

    def __init__(self, url: str, token: str, timeout_s: float = TENANT_TIMEOUT_S) -> None:
        self.endpoint = ControlEndpoint(url, token, timeout_s)

    async def _call(self, method: str, tenant: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        path = TENANTS_PATH + urllib.parse.quote(tenant, safe="")
        return await asyncio.to_thread(self.endpoint.call, method, path, body)

    async def register(self, tenant: str, *, addresses: Sequence[str], browser_addresses: Sequence[str],
                       daemon: str, allowed_domains: Sequence[str]) -> dict[str, Any]:
        """Register (or replace) ``tenant``.

        Args:
            tenant: the tenant's id (the backend uses the sandbox's claim name).
            addresses: the sandbox's client addresses (its pod IPs).
            browser_addresses: those the proxy admits without a credential (its browser).
            daemon: the sandbox daemon's ``IP:PORT``, where the proxy checks egress grants.
            allowed_domains: the run's allowlist (inside the proxy's own).

        Returns:
            The record the proxy holds.

        Raises:
            EgressControlError: the proxy refused (``detail["refused"]``: domains outside its
                allowlist) or could not be reached.
        """
        body = {"addresses": list(addresses), "browser_addresses": list(browser_addresses), "daemon": daemon,
                "allowed_domains": list(allowed_domains)}
        status, answer = await self._call("PUT", tenant, body)
        if status != 200:
            raise self.endpoint.refusal(f"tenant {tenant}", status, answer)
        return answer

    async def remove(self, tenant: str) -> bool:
        """Remove ``tenant``: its next request through the proxy is refused.

        Returns:
            Whether the proxy held it.

        Raises:
            EgressControlError: the proxy refused or could not be reached.
        """
        status, answer = await self._call("DELETE", tenant, None)
        if status != 200:
            raise self.endpoint.refusal(f"removing tenant {tenant}", status, answer)
        return answer.get("removed") is True

    async def get(self, tenant: str) -> dict[str, Any] | None:
        """The proxy's record of ``tenant``, ``None`` when it holds none.

        Raises:
            EgressControlError: the proxy refused or could not be reached.
        """
        status, answer = await self._call("GET", tenant, None)
        if status == 404:
            return None
        if status != 200:
            raise self.endpoint.refusal(f"reading tenant {tenant}", status, answer)
        return answer
