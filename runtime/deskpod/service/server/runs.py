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

from deskpod.client import Sandbox, SandboxClient
from deskpod.controller.credentials import SecretStore
from deskpod.controller.policy.policy_file import Policy, tightened
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.errors import BusyError, InvalidRequestError, UnauthorizedError
from deskpod.service.messages import (
    OpenMessage,
    ResetMessage,
    ServiceEvent,
    ServiceFinished,
    ServiceOpened,
    ServiceResetDone,
    ServiceRunSummary,
    ServiceTakeoverState,
)
from deskpod.service.server.approvals import SessionChannel
from deskpod.service.server.service_state import ControllerService
from deskpod.service.server.session import Peer, RemoteAgent, Session, session_of
from deskpod.service.session_view import SessionView

__all__ = ["SESSION_CONNECT_TIMEOUT_S", "open_session", "reset_session"]

log = logging.getLogger(__name__)

SESSION_CONNECT_TIMEOUT_S = 15.0
"""Seconds an ``open`` waits for its sandbox to accept the connection before it fails."""


def _task_and_policy(service: ControllerService, message: OpenMessage) -> tuple[TaskSpec, Policy]:
    """The run's task and policy from ``open`` (the allowlist in the task or in the policy).

    Raises:
        InvalidRequestError: the allowlist is given in both.
        UnauthorizedError: the session would approve itself, and the policy does not allow it.
    """
    spec = message.task
    domains = spec.allowed_domains
    if message.policy is not None and message.policy.allowed_domains:
        if domains:
            raise InvalidRequestError("give allowed_domains in the task or in the policy, not both")
        domains = message.policy.allowed_domains
    task = TaskSpec(name=spec.name, start_url=spec.start_url, model_size=spec.model_size,
                    allowed_domains=domains, limits=spec.limits, success=spec.success)
    policy = service.policy if message.policy is None else tightened(service.policy, message.policy)
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
    egress = service.egress_control_for(message.sandbox)
    # The opener names the sandbox; only one the operator listed gets the host's secrets
    # or a person's credential (its daemon reports the page and the field they go to).
    refusal = service.credentials_refusal(message.sandbox)
    client = await SandboxClient.connect(message.sandbox.url, message.sandbox.token,
                                         timeout_s=SESSION_CONNECT_TIMEOUT_S)
    sandbox_id = client.hello.sandbox_id
    if sandbox_id in service.in_use:
        await client.close()
        raise BusyError(f"another session is running on that sandbox ({sandbox_id})",
                        detail={"sandbox_id": sandbox_id})
    service.in_use.add(sandbox_id)
    session_id = f"session-{uuid.uuid4().hex[:12]}"
    session = Session(session_id, RemoteAgent(opener.send, session_id), RunControl(), message.sandbox, sandbox_id,
                      self_approval, SessionView(session_id, task.name, client.hello.screen,
                                                "self" if self_approval else "approver"))
    opener.sessions[session.id] = session

    def on_takeover(active: bool, by: str | None) -> None:
        asyncio.get_running_loop().create_task(_takeover_state(service, opener, session, active, by))

    session.control.takeover.listener = on_takeover
    try:
        await opener.send(ServiceOpened(id=message.id, session=session.id))
    except BaseException:
        service.in_use.discard(sandbox_id)
        await client.close()
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
                                    snapshots=message.snapshots, credentials_refusal=refusal)
        finally:
            service.in_use.discard(sandbox_id)
            await client.close()
        await opener.send(ServiceFinished(session=session.id, result=ServiceRunSummary(
            run_id=result.run_id, status=result.status, reason=result.reason, steps=result.steps,
            url=result.url, audit_log=str(result.audit_log), audit_head=result.audit_head,
            scene=str(result.scene) if result.scene else None)))
        return result

    session.runner = asyncio.get_running_loop().create_task(play())
    service.to_watchers(session.view.message())


async def reset_session(service: ControllerService, opener: Peer, message: ResetMessage) -> None:
    """Answer ``reset``: reset the session's sandbox in place after its run, and send
    ``reset_done`` with the sandbox's new token (only to the opener).

    Raises:
        InvalidRequestError: no such session on ``opener``, or its run is still going.
        BusyError: another session runs on the sandbox, or its URL now reaches another sandbox.
        SandboxError: the reset failed.
    """
    session = session_of(opener, message.session)
    if session.runner is not None and not session.runner.done():
        raise InvalidRequestError("the session's run is still going: finish or cancel it first")
    # A reset is a use of the sandbox too: not while another session runs on it.
    if session.sandbox_id in service.in_use:
        raise BusyError(f"another session is running on that sandbox ({session.sandbox_id})",
                        detail={"sandbox_id": session.sandbox_id})
    service.in_use.add(session.sandbox_id)
    try:
        sandbox = await Sandbox.open(session.sandbox.url, session.sandbox.token)
        try:
            if sandbox.client.hello.sandbox_id != session.sandbox_id:
                raise BusyError("the session's URL now reaches another sandbox: not resetting it",
                                detail={"sandbox_id": sandbox.client.hello.sandbox_id})
            observation = await sandbox.reset(message.start_url)
        finally:
            await sandbox.close()
    finally:
        service.in_use.discard(session.sandbox_id)
    session.sandbox = session.sandbox.model_copy(update={"token": sandbox.token})
    await opener.send(ServiceResetDone(id=message.id, session=session.id, token=sandbox.token, url=observation.url))
