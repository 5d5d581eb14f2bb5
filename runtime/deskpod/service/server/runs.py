"""Opening a session of ``deskpod serve``, running it, and resetting its sandbox after it.

:func:`open_session` answers ``open``: it builds the task and the policy (a session's own
policy only tightens the operator's), connects to the sandbox and claims it by the
``sandbox_id`` of its daemon's hello (one session at a time per sandbox, whatever URL
reaches it), then runs :func:`~deskpod.controller.gui.run_task` with the remote agent
and the session's approval channel, streams every audit record as ``event`` and, at the
end, sends ``finished``. The run's allowlist also goes to the sandbox's egress proxy
(:meth:`ControllerService.egress_control_for`); only a sandbox the operator vouches for
gets the host-held secrets and may ask a person for a credential
(:meth:`ControllerService.credentials_refusal`). :func:`reset_session` answers ``reset``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from deskpod.backend.pool_leases import PoolLease
from deskpod.client import Sandbox, SandboxClient
from deskpod.controller.credentials import SecretStore
from deskpod.controller.policy.policy_file import Policy, tightened
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.controller.recording import LiveSource
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec, permission_grants
from deskpod.errors import BusyError, InvalidRequestError, UnauthorizedError
from deskpod.service.messages import (
    OpenMessage,
    ResetMessage,
    SandboxRef,
    ServiceEvent,
    ServiceFinished,
    ServiceOpened,
    ServiceResetDone,
    ServiceRunSummary,
    ServiceTakeoverState,
)
from deskpod.service.server.approvals import SessionChannel
from deskpod.service.server.owned import OwnedSandbox
from deskpod.service.server.pooled import PooledSandbox
from deskpod.service.server.service_state import ControllerService, Recognised, busy
from deskpod.service.server.session import Peer, RemoteAgent, Session, SessionSandbox, session_of
from deskpod.service.session_view import SessionView

__all__ = ["SESSION_CONNECT_TIMEOUT_S", "open_session", "reset_session"]

log = logging.getLogger(__name__)

SESSION_CONNECT_TIMEOUT_S = 15.0
"""Seconds an ``open`` waits for its sandbox to accept the connection before it fails."""


def _task_and_policy(service: ControllerService, message: OpenMessage) -> tuple[TaskSpec, Policy]:
    """The run's task and policy from ``open`` (the allowlist in the task or in the policy).

    Raises:
        InvalidRequestError: the allowlist is given in both.
        UnauthorizedError: the session would approve itself, or its task allows a browser
            permission or clipboard reads, and the policy does not let sessions do so.
    """
    spec = message.task
    domains = spec.allowed_domains
    if message.policy is not None and message.policy.allowed_domains:
        if domains:
            raise InvalidRequestError("give allowed_domains in the task or in the policy, not both")
        domains = message.policy.allowed_domains
    policy = service.policy if message.policy is None else tightened(service.policy, message.policy)
    widened = sorted(set(permission_grants(spec.permissions).granted) - set(policy.session_permissions))
    if widened:
        raise UnauthorizedError(f"the operator's policy does not let a session's task allow the browser permission "
                                f"{', '.join(widened)} (session_permissions)", detail={"rule": "session_permissions"})
    if spec.allow_clipboard_read and not policy.session_clipboard_read:
        raise UnauthorizedError("the operator's policy does not let a session's task allow clipboard reads "
                                "(session_clipboard_read)", detail={"rule": "session_clipboard_read"})
    task = TaskSpec(name=spec.name, start_url=spec.start_url, model_size=spec.model_size,
                    allowed_domains=domains, limits=spec.limits, success=spec.success, permissions=spec.permissions,
                    allow_clipboard_read=spec.allow_clipboard_read)
    if message.approver == "self" and not policy.allow_self_approval:
        raise UnauthorizedError("the operator's policy does not allow a session to approve its own actions "
                                "(allow_self_approval): confirmations come from an approver connection",
                                detail={"rule": "self_approval"})
    return task, policy


async def _takeover_state(service: ControllerService, opener: Peer, session: Session, active: bool,
                          by: str | None) -> None:
    """Tell the session's connection and every approver that a person took over or handed back."""
    message = ServiceTakeoverState(session=session.id, active=active, by=by)
    try:
        await opener.send(message)
    except Exception as exc:  # noqa: BLE001 - the opener went away: its sessions are being cancelled
        log.info("takeover state of %s not sent to its opener: %s", session.id, exc)
    await service.to_approvers(message)


async def _claim(service: ControllerService, owned: OwnedSandbox | None,
                 message: OpenMessage) -> tuple[SandboxClient, SandboxRef]:
    """Connect to the session's sandbox and hold it for the session (``in_use``, and
    ``claimed`` for an owned one); an owned sandbox is reset first (and its snapshot restored
    when ``open.restore`` names one). Released by the session's end, or here on failure.

    Returns:
        The connection, and the sandbox with its URL and the token in force.

    Raises:
        BusyError: another session holds the sandbox (an owned one's with ``retry_after_s``).
        InvalidRequestError: ``restore`` on a sandbox the service does not own, or without a store.
        SnapshotError: no such snapshot, or it could not be restored.
        UnauthorizedError: the sandbox refused the token.
        SandboxError: the sandbox cannot be reached, or its reset failed.
    """
    if owned is None:
        if message.restore is not None:
            raise InvalidRequestError("restore: only a sandbox the service owns (opened by name) starts from a "
                                      "snapshot", detail={"rule": "restore_owned_only"})
        assert message.sandbox.url is not None and message.sandbox.token is not None
        client = await SandboxClient.connect(message.sandbox.url, message.sandbox.token,
                                             timeout_s=SESSION_CONNECT_TIMEOUT_S)
        if client.hello.sandbox_id in service.in_use:
            await client.close()
            raise BusyError(f"another session is running on that sandbox ({client.hello.sandbox_id})",
                            detail={"sandbox_id": client.hello.sandbox_id})
        service.in_use.add(client.hello.sandbox_id)
        return client, message.sandbox
    return await _claim_owned(service, owned, message.restore, message.sandbox.token)


async def _claim_owned(service: ControllerService, owned: OwnedSandbox, restore: str | None,
                       offered: str | None) -> tuple[SandboxClient, SandboxRef]:
    """:func:`_claim` for a sandbox the service owns: claimed by name, reset (``restore``: then
    that snapshot restored), with the token in force (``offered``: the opener's, tried last)."""
    if restore is not None and service.snapshots is None:
        raise InvalidRequestError("restore: this service keeps no snapshots", detail={"rule": "restore_owned_only"})
    archive = service.snapshots.load(restore) if service.snapshots and restore else None
    service.claim(owned)
    sandbox_id: str | None = None
    client: SandboxClient | None = None
    try:
        client = await owned.connect(SESSION_CONNECT_TIMEOUT_S, offered)
        if client.hello.sandbox_id in service.in_use:
            raise busy(owned.name)
        sandbox_id = client.hello.sandbox_id
        service.in_use.add(sandbox_id)
        with service.resetting("open"):
            token, opened, _ = await owned.fresh(client, archive)
    except BaseException:
        if client is not None:
            await client.close()
        service.release(owned, sandbox_id)
        raise
    return opened, SandboxRef(url=owned.entry.url, token=token)


async def _lease(service: ControllerService, pooled: PooledSandbox,
                 message: OpenMessage) -> tuple[SandboxClient, SandboxRef, PoolLease]:
    """:func:`_claim` for a pool's session: a sandbox leased from the pool for it (held in
    ``in_use`` too), fresh from its last release's reset.

    Raises:
        InvalidRequestError: ``restore`` (a pool's sessions start from its fresh sandboxes).
        BusyError: every sandbox of the pool is leased.
        BackendError: no such pool, or its backend failed.
        SandboxError: the leased sandbox cannot be reached (the lease is released).
    """
    if message.restore is not None:
        raise InvalidRequestError("restore: a pool's sessions start from its fresh sandboxes "
                                  "(give the pool a snapshot with deskpod pool up --snapshot)",
                                  detail={"rule": "restore_owned_only"})
    client, sandbox, leased = await pooled.lease(SESSION_CONNECT_TIMEOUT_S)
    service.in_use.add(client.hello.sandbox_id)
    return client, sandbox, leased


async def open_session(service: ControllerService, opener: Peer, message: OpenMessage) -> None:
    """Answer ``open``: claim the sandbox, send ``opened`` and start the session's run.

    Args:
        service: the service the session belongs to.
        opener: the connection that sent ``open``; the run's observations, questions,
            events and ``finished`` go to it.
        message: the ``open`` message.

    Raises:
        InvalidRequestError: the task or policy does not fit (see :func:`_task_and_policy`).
        UnauthorizedError: self-approval that the policy does not allow, or the sandbox refused its token.
        BusyError: another session runs on that sandbox.
        SandboxError: the sandbox cannot be reached.
    """
    task, policy = _task_and_policy(service, message)
    self_approval = message.approver == "self"
    owned = service.owned_sandbox(message.sandbox)
    pooled = service.pools.get(message.sandbox.name or "")
    leased: PoolLease | None = None
    if pooled is not None:
        client, sandbox, leased = await _lease(service, pooled, message)
    else:
        client, sandbox = await _claim(service, owned, message)
    sandbox_id = client.hello.sandbox_id

    async def let_go() -> None:
        """Give the sandbox up: the next session may have it (a pool's goes back to the pool)."""
        service.release(owned, sandbox_id)
        await client.close()
        if pooled is not None and leased is not None:
            await pooled.give_back(leased, service.resetting("pool"))

    try:
        # A pool's sandboxes are the operator's: vouched for, behind their slots' own proxies.
        recognised = Recognised(stack=False, vouched=True) if pooled else await service.recognise(sandbox)
        egress = service.egress_control_for(sandbox, recognised)
    except BaseException:
        await let_go()
        raise
    # The opener names the sandbox; only one the operator listed gets the host's secrets
    # or a person's credential (its daemon reports the page and the field they go to).
    refusal = service.credentials_refusal(recognised)
    session_id = f"session-{uuid.uuid4().hex[:12]}"
    reached = SessionSandbox(sandbox.url or "", sandbox.token or "")
    session = Session(session_id, RemoteAgent(opener.send, session_id), RunControl(), reached, sandbox_id,
                      self_approval, SessionView(session_id, task.name, client.hello.screen,
                                                "self" if self_approval else "approver"), owned=owned,
                      pool=pooled.name if pooled else None)
    opener.sessions[session.id] = session

    def on_takeover(active: bool, by: str | None) -> None:
        asyncio.get_running_loop().create_task(_takeover_state(service, opener, session, active, by))

    session.control.takeover.listener = on_takeover
    try:
        await opener.send(ServiceOpened(id=message.id, session=session.id))
    except BaseException:
        await let_go()
        raise

    async def stream(record: dict[str, Any]) -> None:
        try:
            await opener.send(ServiceEvent(session=session.id, record=record))
        except Exception as exc:  # noqa: BLE001 - the connection went away: its sessions are being cancelled
            log.info("event of %s not sent: %s", session.id, exc)

    def on_event(record: dict[str, Any]) -> None:
        asyncio.get_running_loop().create_task(stream(record))
        for listener in service.record_listeners:
            listener(session.id, record)
        if session.view.apply(record):
            service.to_watchers(session.view.message())

    async def play() -> RunResult:
        try:
            result = await run_task(task, client, audit_dir=service.audit_dir, agent=session.agent,
                                    channel=SessionChannel(service, opener, session), policy=policy,
                                    control=session.control, on_event=on_event,
                                    signer=service.signer, self_approval=self_approval,
                                    egress_control=egress,
                                    secrets=service.secrets if refusal is None else SecretStore(),
                                    snapshots=message.snapshots, credentials_refusal=refusal,
                                    live=LiveSource(reached.url, reached.token) if reached.url else None)
        finally:
            await let_go()
        await opener.send(ServiceFinished(session=session.id, result=ServiceRunSummary(
            run_id=result.run_id, status=result.status, reason=result.reason, steps=result.steps,
            url=result.url, audit_log=str(result.audit_log), audit_head=result.audit_head,
            scene=str(result.scene) if result.scene else None)))
        return result

    session.runner = asyncio.get_running_loop().create_task(play())
    service.to_watchers(session.view.message())


async def reset_session(service: ControllerService, opener: Peer, message: ResetMessage) -> None:
    """Answer ``reset``: reset the session's sandbox in place after its run, and send
    ``reset_done`` with the sandbox's new token (only to the opener; ``""`` for a sandbox the
    service owns, whose new token goes to its token file).

    Raises:
        InvalidRequestError: no such session on ``opener``, or its run is still going.
        BusyError: another session runs on the sandbox, or its URL now reaches another sandbox.
        SandboxError: the reset failed.
    """
    session = session_of(opener, message.session)
    if session.runner is not None and not session.runner.done():
        raise InvalidRequestError("the session's run is still going: finish or cancel it first")
    if session.pool is not None:
        raise InvalidRequestError(f"the session's sandbox went back to the pool {session.pool!r} when its run "
                                  "ended, and the pool reset it: open a new session for a fresh one",
                                  detail={"rule": "pool_session"})
    owned = session.owned
    # A reset is a use of the sandbox too: not while another session runs on it.
    if owned is not None:
        service.claim(owned)
    if session.sandbox_id in service.in_use:
        service.release(owned, None)
        raise BusyError(f"another session is running on that sandbox ({session.sandbox_id})",
                        detail={"sandbox_id": session.sandbox_id})
    service.in_use.add(session.sandbox_id)
    try:
        if owned is not None:  # the token in force is the service's, whoever reset it since
            sandbox = Sandbox(await owned.connect(SESSION_CONNECT_TIMEOUT_S))
        else:
            sandbox = await Sandbox.open(session.sandbox.url, session.sandbox.token)
        try:
            if sandbox.client.hello.sandbox_id != session.sandbox_id:
                raise BusyError("the session's URL now reaches another sandbox: not resetting it",
                                detail={"sandbox_id": sandbox.client.hello.sandbox_id})
            with service.resetting("session"):
                observation = await sandbox.reset(message.start_url)
        finally:
            await sandbox.close()
        if owned is not None:
            owned.store(sandbox.token)
    finally:
        service.release(owned, session.sandbox_id)
    session.sandbox.token = sandbox.token
    # The token of a sandbox the service owns stays with the service.
    token = "" if owned is not None else sandbox.token
    await opener.send(ServiceResetDone(id=message.id, session=session.id, token=token, url=observation.url))
