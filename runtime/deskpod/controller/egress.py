"""Preventive egress for a run: its allowlist in the browser and at the egress proxy.

A run's hosts are the task's ``allowed_domains`` intersected with the operator policy's
(:func:`run_domains`; both empty: no run limit). At the start of a run the controller

1. sends them to the daemon (:meth:`SandboxAPI.set_egress`): Chromium's requests to any
   other host fail before they are sent, in every tab, frame and worker
   (:mod:`deskpod.agentd.browser.request_filter`); every refused request comes back in the next
   observation and :class:`WatchedSandbox` hands it to the run, which logs it as a
   ``policy`` event with its host;
2. when an :class:`EgressControl` is configured, gives the same list to the egress proxy
   of the sandbox (``images/egress/egress_control.py``): the second line, outside the
   daemon's zone, which may be compromised. The proxy refuses a list that is not inside
   its own (the stack's) allowlist; it keeps the run's list until the run ends, when the
   controller restores the stack's (``allowed_domains: null``).

The proxy's control endpoint (``PUT`` :data:`CONTROL_PATH`, JSON ``{"allowed_domains":
[...] | null}``) takes a bearer token of which the proxy holds only the SHA-256
(``DESKPOD_EGRESS_CONTROL_TOKEN_SHA256``); the token itself (``DESKPOD_EGRESS_CONTROL_TOKEN``)
is the controller's alone, never in the sandbox or workspace containers, so an agent that
reaches the endpoint from inside the sandbox cannot change the list.

Which proxy: the compose stack's (``DESKPOD_EGRESS_CONTROL``, :func:`egress_control_from_settings`)
for its own sandbox; a pool slot's own (:func:`egress_control_of`: the backend made the slot's
control token and holds it, the lease's ``ID.egress`` file beside its token file,
:func:`egress_control_beside`) for the slot's sandbox. Never one proxy for another sandbox.
A proxy shared by many sandboxes (the multi-tenant mode, the Kubernetes backend's) takes a
run's list for one tenant only (``PUT /v1/tenants/ID/allowlist``, :class:`EgressControl`'s
``tenant``): the sandbox's handle names its tenant (``egress_tenant``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskpod.controller.download_watch import DownloadWatch, sends_input
from deskpod.controller.sandbox import SandboxAPI
from deskpod.client.egress_control import TENANTS_PATH, ControlEndpoint
from deskpod.errors import EgressControlError, SettingsError
from deskpod.protocol import (
    Action,
    AnyWorkspaceReply,
    BlockedRequest,
    Hello,
    Observation,
    ObserveOptions,
    PermissionGrants,
    PermissionRequest,
    ScreenExpectation,
    Size,
    WorkspaceRequest,
    intersect_domains,
)

if TYPE_CHECKING:
    from deskpod.backend.base import SandboxHandle

__all__ = [
    "CONTROL_PATH", "CONTROL_TIMEOUT_S", "EGRESS_FILE_SUFFIX", "EgressControl", "TENANTS_PATH", "WatchedSandbox",
    "egress_control_beside", "egress_control_from_settings", "egress_control_of", "run_domains",
]

CONTROL_PATH = "/v1/allowlist"
"""The egress proxy's control endpoint (``PUT`` sets the run's list, ``GET`` reads it)."""

CONTROL_TIMEOUT_S = 5.0
"""How long one call to the proxy's control endpoint may take, seconds."""

EGRESS_FILE_SUFFIX = ".egress"
"""A lease's egress control file: ``ID.egress`` beside its token file ``ID.token``
(:meth:`deskpod.backend.pool_state.PoolStateFile.write_egress_control`)."""

_TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_MAX_FILE_BYTES = 4096


def run_domains(task_domains: Sequence[str], policy_domains: Sequence[str]) -> list[str] | None:
    """The hosts a run may reach: the task's list intersected with the policy's (an empty
    list is no limit); ``None`` when both are empty."""
    return intersect_domains(task_domains, policy_domains)


class EgressControl:
    """The controller's client of one egress proxy's control endpoint.

    Args:
        url: ``http://host:port`` of the endpoint (compose: ``http://egress:3129``).
        token: the control token (its SHA-256 is the proxy's ``DESKPOD_EGRESS_CONTROL_TOKEN_SHA256``).
        timeout_s: per call, seconds.
        tenant: the sandbox's tenant id on a multi-tenant proxy (its list is set at
            ``/v1/tenants/TENANT/allowlist``); ``None``: a proxy of one sandbox.

    Raises:
        ValueError: ``url`` is not an ``http://host[:port]`` URL, the token is empty, or
            ``tenant`` is not a tenant id.
    """

    def __init__(self, url: str, token: str, timeout_s: float = CONTROL_TIMEOUT_S, *,
                 tenant: str | None = None) -> None:
        if tenant is not None and not _TENANT_ID.fullmatch(tenant):
            raise ValueError(f"not a tenant id: {tenant[:70]!r}")
        self.endpoint = ControlEndpoint(url, token, timeout_s)
        self.host, self.port = self.endpoint.host, self.endpoint.port
        self.tenant = tenant
        self.path = CONTROL_PATH if tenant is None else f"{TENANTS_PATH}{tenant}/allowlist"

    async def set(self, domains: Sequence[str] | None) -> list[str] | None:
        """Give the proxy the run's allowlist (``None``: back to the stack's own).

        Returns:
            The run's list the proxy holds now.

        Raises:
            EgressControlError: the proxy refused it (``detail["refused"]``: domains outside
                the stack's allowlist) or could not be reached.
        """
        body = {"allowed_domains": None if domains is None else list(domains)}
        status, answer = await asyncio.to_thread(self.endpoint.call, "PUT", self.path, body)
        if status != 200:
            raise self.endpoint.refusal("the allowlist", status, answer)
        held = answer.get("allowed_domains")
        if held != body["allowed_domains"]:
            raise EgressControlError("the egress proxy answered with another allowlist",
                                     detail={"status": 200, "refused": []})
        return None if held is None else [str(d) for d in held]


def egress_control_from_settings() -> EgressControl | None:
    """The proxy control client ``DESKPOD_EGRESS_CONTROL`` and ``DESKPOD_EGRESS_CONTROL_TOKEN``
    name (:mod:`deskpod.settings`), or ``None`` unless both are set (a stack without a control
    token has the endpoint off too: ``scripts/up.sh`` makes the token and its hash together).

    Raises:
        SettingsError: the URL is not ``http://host:port``.
    """
    from deskpod.settings import get_settings, variable_name

    settings = get_settings()
    token = settings.egress_control_token.get_secret_value() if settings.egress_control_token else ""
    if settings.egress_control is None or not token:
        return None
    try:
        return EgressControl(settings.egress_control, token)
    except ValueError as exc:
        names = [variable_name("egress_control")]
        raise SettingsError(f"{names[0]}: {exc}", detail={"variables": names, "config_file": None}) from exc


def egress_control_of(handle: SandboxHandle) -> EgressControl | None:
    """The control client of a sandbox's egress proxy, from its handle: a pool slot's own (with
    the lease's lessee token when the slot has one, else its control token), or the shared one
    for the handle's tenant (``egress_tenant``); ``None`` when the handle has no control token
    (a slot made before slots had one, a backend without a proxy control).

    Raises:
        ValueError: the handle's egress address does not make a URL.
    """
    token = handle.egress_lessee if handle.egress_lessee and not handle.egress_tenant else handle.egress_token
    if not token or not handle.egress_control_url:
        return None
    return EgressControl(handle.egress_control_url, token, tenant=handle.egress_tenant or None)


def egress_control_beside(token_file: Path) -> EgressControl | None:
    """The egress control a lease wrote beside its token file (``ID.egress`` next to
    ``ID.token``: ``{"url": ..., "token": ..., "tenant"?: ...}``), or ``None`` when there is
    no such file.

    Raises:
        SettingsError: the file exists but cannot be read or is not such a document.
    """
    path = token_file.with_suffix(EGRESS_FILE_SUFFIX)
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(f"cannot read the egress control file {path}: {exc}",
                            detail={"variables": [], "config_file": str(path)}) from exc
    try:
        if len(raw) > _MAX_FILE_BYTES:
            raise ValueError("too large")
        document = json.loads(raw)
        if not isinstance(document, dict) or not isinstance(document.get("url"), str) \
                or not isinstance(document.get("token"), str) \
                or not isinstance(document.get("tenant", ""), str):
            raise ValueError('not {"url": ..., "token": ..., "tenant"?: ...}')
        return EgressControl(document["url"], document["token"], tenant=document.get("tenant") or None)
    except ValueError as exc:
        raise SettingsError(f"the egress control file {path} is malformed: {exc}",
                            detail={"variables": [], "config_file": str(path)}) from exc


class WatchedSandbox:
    """A :class:`SandboxAPI` that hands every refused request of every observation to
    ``on_blocked``, every page's permission request to ``on_permission`` and every
    observation's downloads to ``downloads`` (whichever verb returned it), then passes the
    observation on; ``downloads`` is also told of every request that sent input or
    navigated, and whether it carried the download permission.

    Args:
        inner: the sandbox.
        on_blocked: called with each :class:`~deskpod.protocol.BlockedRequest`.
        on_permission: called with each :class:`~deskpod.protocol.PermissionRequest` (``None``: not watched).
        downloads: the run's downloads (``None``: not watched).
    """

    def __init__(self, inner: SandboxAPI, on_blocked: Callable[[BlockedRequest], None],
                 on_permission: Callable[[PermissionRequest], None] | None = None,
                 downloads: DownloadWatch | None = None) -> None:
        self.inner = inner
        self.on_blocked = on_blocked
        self.on_permission = on_permission
        self.downloads = downloads
        self.hello: Hello = inner.hello

    def _seen(self, obs: Observation) -> Observation:
        for blocked in obs.blocked:
            self.on_blocked(blocked)
        if self.on_permission is not None:
            for asked in obs.permission_requests:
                self.on_permission(asked)
        return obs

    def _passed_on(self, obs: Observation) -> Observation:
        """``obs`` as the run sees it (:meth:`_seen`, which a subclass may extend), its downloads
        handed to ``downloads``."""
        seen = self._seen(obs)
        if self.downloads is not None:
            self.downloads.seen(seen)
        return seen

    def next_id(self) -> str:
        """A fresh request id."""
        return self.inner.next_id()

    async def act(self, actions: Sequence[dict[str, Any] | Action], observe: ObserveOptions | None = None,
                  timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *,
                  allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Run ``actions`` and observe (see :meth:`SandboxAPI.act`)."""
        try:
            obs = await self.inner.act(actions, observe, timeout_s, expect=expect, allow_downloads=allow_downloads,
                                       mask=mask)
        finally:
            if self.downloads is not None and sends_input(actions):
                self.downloads.answered(allow_downloads)
        return self._passed_on(obs)

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0, *,
                       allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Load ``url`` and observe."""
        try:
            obs = await self.inner.navigate(url, observe, timeout_s, allow_downloads=allow_downloads, mask=mask)
        finally:
            if self.downloads is not None:
                self.downloads.answered(allow_downloads)
        return self._passed_on(obs)

    async def configure(self, model_size: Size | None) -> Size:
        """Declare the model space."""
        return await self.inner.configure(model_size)

    async def set_egress(self, allowed_domains: Sequence[str] | None) -> list[str] | None:
        """Set the browser's allowlist."""
        return await self.inner.set_egress(allowed_domains)

    async def set_permissions(self, grants: PermissionGrants) -> PermissionGrants:
        """Set the browser's permission grants."""
        return await self.inner.set_permissions(grants)

    async def reset(self, start_url: str | None = None, *, token_sha256: str,
                    observe: ObserveOptions | None = None) -> Observation:
        """Reset the sandbox (the downloads watched so far are forgotten)."""
        obs = await self.inner.reset(start_url, token_sha256=token_sha256, observe=observe)
        if self.downloads is not None:
            self.downloads.forget()
        return self._passed_on(obs)

    async def request(self, request: WorkspaceRequest) -> AnyWorkspaceReply:
        """Run one workspace request."""
        return await self.inner.request(request)

    async def close(self) -> None:
        """Release the connection."""
        await self.inner.close()
