"""Questions of a session over the wire, and who may answer them.

A run asks through its approval channel (:class:`~deskpod.controller.confirm.ApprovalChannel`,
and :class:`~deskpod.controller.credentials.CredentialChannel`); :class:`SessionChannel` is
that channel for a session of ``deskpod serve``: each question is registered as
:class:`~deskpod.service.server.session.Pending` under its id, sent to the session's
opener and, unless the session approves itself, to every approver and viewer connection,
and the run waits for the answer. :func:`answerable` is the check every answer passes:
the question is pending, of the kind answered, and the answering connection may answer it.
A credential request always goes to the approvers: whoever answers it knows the secret.
A question that ends unanswered (its time ran out, its run ended, its step was withdrawn) is
withdrawn: ``question_withdrawn`` says why to everyone it was sent to, and a late answer is
refused saying why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.credentials import CredentialAnswer, CredentialRequest
from deskpod.errors import InvalidRequestError, UnauthorizedError
from deskpod.service.messages import (
    ConfirmationRequestBody,
    CredentialRequestBody,
    PauseNoticeBody,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServicePauseRequired,
    ServiceQuestionWithdrawn,
)
from deskpod.service.server.service_state import ControllerService
from deskpod.service.server.session import Peer, Pending, Question, Session

__all__ = ["SessionChannel", "answerable"]

log = logging.getLogger(__name__)


class SessionChannel:
    """The approval channel of one session: questions go to its opener and, unless the
    session approves itself, to every approver and viewer connection.

    Args:
        service: the service whose ``pending`` questions and approvers it uses.
        opener: the connection that opened the session.
        session: the session whose run asks.
    """

    def __init__(self, service: ControllerService, opener: Peer, session: Session) -> None:
        self._service = service
        self._opener = opener
        self._session = session

    async def _ask(self, key: str, message: Question, timeout_s: float) -> Any:
        """Register ``message`` as pending under ``key``, send it and wait for its answer.

        However the wait ends without an answer (cancelled by the run with the reason as the
        cancellation's message, or ``None``: the opener's connection closed), the question is
        withdrawn: :meth:`_withdraw`.
        """
        loop = asyncio.get_running_loop()
        pending = Pending(self._session, self._opener, message, loop.create_future(), loop.time() + timeout_s)
        self._service.pending[key] = pending
        answer = None
        try:
            await self._opener.send(message)
            if self._to_approvers(message):
                await self._service.to_approvers(message)
            answer = await pending.future
        except asyncio.CancelledError as exc:
            reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "the run ended"
            self._withdraw(key, message, reason)
            raise
        finally:
            self._service.pending.pop(key, None)
        if answer is None:
            self._withdraw(key, message, "the session's connection closed")
        return answer

    def _to_approvers(self, message: Question) -> bool:
        """Whether ``message`` goes to the approver and viewer connections (not a self-approved
        session's confirmations and pauses)."""
        return not self._session.self_approval or isinstance(message, ServiceCredentialRequired)

    def _withdraw(self, key: str, message: Question, reason: str) -> None:
        """Withdraw question ``key``: remember why (a late answer is told), and tell its opener and
        the connections it went to (``question_withdrawn``)."""
        self._service.remember_withdrawn(key, reason)
        notice = ServiceQuestionWithdrawn(session=self._session.id, id=key, reason=reason)
        if self._to_approvers(message):
            self._service.to_watchers(notice)
        asyncio.get_running_loop().create_task(self._tell_opener(notice))

    async def _tell_opener(self, notice: ServiceQuestionWithdrawn) -> None:
        try:
            await self._opener.send(notice)
        except Exception as exc:  # noqa: BLE001 - the opener went away: nobody there to tell
            log.info("withdrawal of %s not sent to its opener: %s", notice.id, exc)

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        """Ask whether ``request`` may run (``None``: no answer; the opener's connection closed)."""
        answer: ConfirmationAnswer | None = await self._ask(request.id, ServiceConfirmationRequired(
            session=self._session.id, request=ConfirmationRequestBody.model_validate(request.to_json()),
            approver=self._session.approver), request.timeout_s)
        return answer

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        """Show ``notice`` and wait for ``resume``, ``cancel`` or ``takeover`` (``None``: no answer)."""
        answer: PauseAnswer | None = await self._ask(notice.id, ServicePauseRequired(
            session=self._session.id, notice=PauseNoticeBody.model_validate(notice.to_json()),
            approver=self._session.approver), notice.timeout_s)
        return answer

    async def credential(self, request: CredentialRequest) -> CredentialAnswer | None:
        """Ask a person for the credential of ``request`` (``None``: no answer)."""
        answer: CredentialAnswer | None = await self._ask(request.request_id, ServiceCredentialRequired(
            session=self._session.id, request=CredentialRequestBody.model_validate(request.to_json())),
            request.timeout_s)
        return answer


def answerable(service: ControllerService, connection: Peer, key: str, kind: type[Question], what: str) -> Pending:
    """The pending question ``key`` of type ``kind`` that ``connection`` may answer.

    Args:
        service: the service whose questions are looked up.
        connection: the connection answering.
        key: the question's id (a request id or a pause id).
        kind: the message type the question was asked with.
        what: how an error names the question (``"confirmation"``, ``"pause"``, ...).

    Returns:
        The question, still unanswered.

    Raises:
        InvalidRequestError: none is pending, or it was withdrawn or its time ran out (rule
            ``withdrawn``, ``detail["reason"]`` says why).
        UnauthorizedError: ``connection`` may not answer it (it stays pending).
    """
    pending = service.pending.get(key)
    late = pending is not None and asyncio.get_running_loop().time() > pending.deadline
    if key in service.withdrawn or late:
        reason = service.withdrawn.get(key) or "its time ran out"
        raise InvalidRequestError(f"{what} {key!r} was withdrawn ({reason}): the answer came too late, and "
                                  "nothing was done", detail={"rule": "withdrawn", "reason": reason})
    if pending is None or pending.future.done() or not isinstance(pending.message, kind):
        raise InvalidRequestError(f"no pending {what} {key!r}")
    if not pending.may_answer(connection):
        log.warning("refused an answer to %s of %s from a %s connection", key, pending.session.id, connection.role)
        raise UnauthorizedError(f"only an approver connection may answer {what} {key!r}: neither the connection "
                                "that submits actions nor a viewer approves them", detail={"rule": "approver_only"})
    return pending
