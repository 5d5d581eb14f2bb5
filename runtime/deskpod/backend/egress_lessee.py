"""A pool slot's egress proxy gets a new lessee token at every reset.

The slot's proxy (its own, in the Docker backend) has a control token the backend keeps
(:attr:`~deskpod.backend.base.SandboxHandle.egress_token`) and, beside it, a *lessee token*
(:attr:`~deskpod.backend.base.SandboxHandle.egress_lessee`) that may only read and set the
run's allowlist (``/v1/allowlist``). A lease hands out the lessee token, never the control
token (:func:`lessee_control`). Each time the pool makes a sandbox ready, and after every reset
of it, :func:`new_lessee` empties the proxy's run list and replaces the lessee token
(``PUT /v1/lessee`` with the control token): a holder whose lease ended can neither read nor
set its successor's list, and the successor never starts under the last holder's list.

A tenant of a shared proxy (the Kubernetes backend) has no lessee token: the handle is
returned unchanged. Durations are float seconds.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Final

from deskpod.backend.base import SandboxHandle
from deskpod.client.egress_control import ControlEndpoint
from deskpod.tokens import new_token, token_sha256

__all__ = ["LESSEE_PATH", "LESSEE_TIMEOUT_S", "lessee_control", "new_lessee"]

LESSEE_PATH: Final = "/v1/lessee"
"""The proxy's path where the control token puts a lessee token in force."""

LESSEE_TIMEOUT_S: Final = 5.0
"""How long the call to the proxy may take, seconds."""


async def new_lessee(handle: SandboxHandle, timeout_s: float = LESSEE_TIMEOUT_S) -> SandboxHandle:
    """Empty the slot proxy's run list and put a new lessee token in force.

    Args:
        handle: the sandbox; its ``egress_token`` is the slot proxy's control token.
        timeout_s: the call's timeout, seconds.

    Returns:
        The handle with the new ``egress_lessee``; unchanged when the slot's proxy has no
        control endpoint or is a shared proxy's tenant.

    Raises:
        EgressControlError: the proxy could not be reached or refused (the reset failed:
            the pool tries the next way, and replaces the slot last).
    """
    if not handle.egress_token or not handle.egress_control_url or handle.egress_tenant:
        return handle
    token = new_token()
    endpoint = ControlEndpoint(handle.egress_control_url, handle.egress_token, timeout_s)
    status, answer = await asyncio.to_thread(endpoint.call, "PUT", LESSEE_PATH, {"token_sha256": token_sha256(token)})
    if status != 200:
        raise endpoint.refusal(f"a new lessee token for sandbox {handle.id}", status, answer)
    return replace(handle, egress_lessee=token)


def lessee_control(handle: SandboxHandle) -> dict[str, str] | None:
    """What a lease hands its holder of the slot's egress proxy: ``{"url", "token"[, "tenant"]}``,
    the token being the lessee token (a shared proxy's tenant: the control token, as before);
    ``None`` when the handle names no control endpoint or no token a holder may have."""
    token = handle.egress_token if handle.egress_tenant else handle.egress_lessee
    if not token or not handle.egress_control_url:
        return None
    document = {"url": handle.egress_control_url, "token": token}
    if handle.egress_tenant:
        document["tenant"] = handle.egress_tenant
    return document
