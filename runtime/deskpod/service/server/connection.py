"""One websocket connection to ``deskpod serve``: reading its messages and answering them.

:func:`serve_connection` serves an accepted websocket until it closes: an approver's or a
viewer's connection first gets a ``session`` view of every open session and the questions
already waiting for an approver, then an outbox that sends what the service queues for it
in order. :class:`Connection` reads each text frame as one of
:data:`~deskpod.service.messages.ClientMessage` and dispatches it by its type and the
connection's role: an agent opens and drives sessions, an approver answers questions and
takes a sandbox over, a viewer sends nothing. Bad input gets ``error`` and the connection
stays usable; closing it cancels its sessions, and its unanswered questions are denials.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from deskpod.request_observer import observing
from deskpod.controller.confirm import ConfirmationAnswer
from deskpod.controller.credentials import CredentialAnswer
from deskpod.errors import BusyError, DeskpodError, InvalidRequestError, UnauthorizedError
from deskpod.protocol import ErrorBody, find_lone_surrogate, first_error, scrub_surrogates
from deskpod.service.messages import (
    ClientMessage,
    ConfirmMessage,
    ControlMessage,
    CredentialMessage,
    FinishMessage,
    HandbackMessage,
    HumanInputMessage,
    OpenMessage,
    ResetMessage,
    ReviewMessage,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServiceError,
    ServiceMessage,
    ServiceOk,
    ServicePauseRequired,
    SubmitMessage,
    TakeoverMessage,
)
from deskpod.service.server.approvals import answerable
from deskpod.service.server.runs import open_session, reset_session
from deskpod.service.server.service_state import MAX_WATCHER_QUEUE, ControllerService
from deskpod.service.server.session import WATCHER_ROLES, Role, Session, session_of

if TYPE_CHECKING:  # Starlette (the ``serve`` extra) is imported by the app that accepts the connection
    from starlette.websockets import WebSocket

__all__ = ["Connection", "serve_connection"]

log = logging.getLogger(__name__)

_MESSAGE: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


@dataclass(eq=False)
class Connection:
    """One accepted connection: its websocket, role and principal, and the sessions it opened.

    ``outbox`` (approver and viewer connections) holds what the service queued for it;
    ``overflowed`` is set when the service gave up on it (it stopped reading).
    """

    service: ControllerService
    ws: WebSocket
    role: Role = "agent"
    principal: str = "agent"
    """Who is on this connection: the signed-in person's name for the console, else
    ``"agent"`` or ``"approver"`` (the role); human inputs are audited as ``human:<principal>``."""
    outbox: asyncio.Queue[ServiceMessage] | None = None
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)
    sessions: dict[str, Session] = field(default_factory=dict)
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, message: ServiceMessage) -> None:
        """Send one message as a JSON text frame (events, observations and replies are sent
        from several tasks: one at a time)."""
        # ASCII escapes: valid JSON whatever a string holds (ids are scrubbed of lone surrogates).
        text = json.dumps(message.model_dump(mode="json"), separators=(",", ":"))
        async with self.sending:
            await self.ws.send_text(text)

    async def pump(self) -> None:
        """Send the outbox in order until the connection closes; close it when the outbox overflowed."""
        while self.outbox is not None:
            getting = asyncio.ensure_future(self.outbox.get())
            overflow = asyncio.ensure_future(self.overflowed.wait())
            try:
                await asyncio.wait({getting, overflow}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                overflow.cancel()
                if not getting.done():
                    getting.cancel()
            if self.overflowed.is_set():
                break
            try:
                await self.send(getting.result())
            except Exception as exc:  # noqa: BLE001 - a closing console must not fail the question
                log.info("message not sent to a %s connection: %s", self.role, exc)
                return
        try:
            await self.ws.close(code=1013)
        except Exception as exc:  # noqa: BLE001 - it may have closed already
            log.info("closing a %s connection: %s", self.role, exc)

    async def error(self, request_id: str | None, exc: DeskpodError) -> None:
        """Send ``exc`` as the ``error`` answering ``request_id`` (``None``: the message had no readable id)."""
        await self.send(ServiceError(id=request_id, error=ErrorBody(code=exc.code, message=exc.message,
                                                                    detail=exc.detail)))

    async def handle(self, raw: str | bytes) -> None:
        """Read one frame as a client message and dispatch it; any failure is answered with ``error``."""
        request_id = None
        try:
            try:
                data = json.loads(raw)
                request_id = data.get("id") if isinstance(data, dict) and isinstance(data.get("id"), str) else None
                if request_id is not None:
                    request_id = scrub_surrogates(request_id[:128])
                where = find_lone_surrogate(data)
                if where is not None:
                    # It would reach the audit log and the sandbox, neither of which can encode it.
                    raise InvalidRequestError(f"{scrub_surrogates(where)[:200]}: a lone UTF-16 surrogate is not text")
                message = _MESSAGE.validate_python(data)
            except (ValueError, RecursionError) as exc:
                reason = first_error(exc, empty="") if isinstance(exc, ValidationError) else "message: not a JSON object"
                raise InvalidRequestError(reason) from exc
            try:
                await self.dispatch(message)
            except ValidationError as exc:
                raise InvalidRequestError(first_error(exc, empty=exc.title)) from exc
        except DeskpodError as exc:
            await self.error(request_id, exc)
        except Exception as exc:  # noqa: BLE001 - a controller bug must not drop the connection's sessions
            log.exception("request %s failed", request_id)
            await self.error(request_id, DeskpodError(f"internal error: {type(exc).__name__}"))

    async def dispatch(self, message: ClientMessage) -> None:
        """Do what ``message`` asks, as this connection's role allows.

        Raises:
            DeskpodError: the message was refused or failed (the caller answers with ``error``).
        """
        if isinstance(message, ConfirmMessage):
            pending = answerable(self.service, self, message.request_id, ServiceConfirmationRequired, "confirmation")
            by = "serve:approver" if self.role == "approver" else "serve:self"
            pending.future.set_result(ConfirmationAnswer(message.approve, message.digest, by))
        elif isinstance(message, ReviewMessage):
            pending = answerable(self.service, self, message.pause_id, ServicePauseRequired, "pause")
            if message.answer == "takeover":
                if self.role != "approver":
                    raise UnauthorizedError("only an approver connection may take the sandbox over",
                                            detail={"rule": "approver_only"})
                pending.session.control.takeover.request(self.principal)
            pending.future.set_result(message.answer)
        elif isinstance(message, (TakeoverMessage, HumanInputMessage, HandbackMessage, CredentialMessage)):
            await self._human(message)
        elif self.role != "agent":
            raise UnauthorizedError(f"an {self.role} connection does not send {message.type!r} (approvers only "
                                    "answer confirmations and pauses, viewers nothing)", detail={"rule": "approver_only"})
        elif isinstance(message, OpenMessage):
            await open_session(self.service, self, message)
        elif isinstance(message, (SubmitMessage, FinishMessage)):
            session = session_of(self, message.session)
            if not session.agent.waiting or session.agent.inbox.full():
                raise BusyError("the session is not waiting for a proposal: wait for its next observation "
                                "(a step may be running or awaiting a confirmation)")
            session.agent.inbox.put_nowait(message)
        elif isinstance(message, ControlMessage):
            session = session_of(self, message.session)
            control = session.control
            if message.type == "withdraw":
                # Only while a submit is unanswered: queued, or its step running.
                if not session.agent.waiting or session.agent.inbox.full():
                    control.withdraw("its agent withdrew the call")
            elif message.type == "end":
                control.cancel("its agent ended the session", ended=True)
            else:
                {"pause": control.pause, "resume": control.resume, "cancel": control.cancel}[message.type]()
            await self.send(ServiceOk(id=message.id))
        elif isinstance(message, ResetMessage):
            await reset_session(self.service, self, message)

    async def _human(self, message: TakeoverMessage | HumanInputMessage | HandbackMessage | CredentialMessage) -> None:
        """A person's message: take over, an input, hand back, or a credential (approver connections only).

        Raises:
            UnauthorizedError: not an approver connection (the agent's connection never drives
                as a person nor sees a secret), or another person holds the takeover.
            InvalidRequestError: no such session or request, or not in the state it needs.
            DeskpodError: the input was refused or failed (the run goes on).
        """
        if self.role != "approver":
            log.warning("refused %s from a connection that is not an approver's", message.type)
            raise UnauthorizedError(f"only an approver connection may send {message.type!r}: the agent's connection "
                                    "neither drives the sandbox as a person nor gives credentials",
                                    detail={"rule": "approver_only"})
        if isinstance(message, CredentialMessage):
            pending = answerable(self.service, self, message.request_id, ServiceCredentialRequired,
                                 "credential request")
            pending.future.set_result(CredentialAnswer(None if message.cancel else message.secret, self.principal))
            await self.send(ServiceOk(id=message.id))
            return
        session = self.service.find_session(message.session)
        if isinstance(message, TakeoverMessage):
            if session.runner is None or session.runner.done():
                raise InvalidRequestError(f"the run of {session.id} has ended: nothing to take over")
            pause = next((p for p in self.service.pending.values() if p.session is session and not p.future.done()
                          and isinstance(p.message, ServicePauseRequired)), None)
            if pause is not None:  # the pause's answer is the takeover
                session.control.takeover.request(self.principal)
                pause.future.set_result("takeover")
            else:
                session.control.take_over(self.principal)
        elif isinstance(message, HumanInputMessage):
            await session.control.takeover.submit(message.action, self.principal)
        else:
            session.control.takeover.handback(self.principal)
        await self.send(ServiceOk(id=message.id))

    async def close(self) -> None:
        """Hand back what this person took over (when no other connection of theirs is left),
        deny this connection's unanswered questions, cancel its sessions and wait for their runs."""
        if self.role == "approver" and not any(c.role == "approver" and c.principal == self.principal
                                               for c in self.service.connections if c is not self):
            for connection in list(self.service.connections):  # the person went away: hand back
                for session in connection.sessions.values():
                    takeover = session.control.takeover
                    if takeover.active and takeover.by == self.principal:
                        takeover.handback(self.principal)
        for pending in list(self.service.pending.values()):
            if pending.opener is self and not pending.future.done():
                pending.future.set_result(None)
        for session in self.sessions.values():
            session.control.cancel("the service connection closed")
        for session in self.sessions.values():
            if session.runner is not None:
                await asyncio.gather(session.runner, return_exceptions=True)


async def serve_connection(service: ControllerService, ws: WebSocket, role: Role = "agent",
                           principal: str | None = None) -> None:
    """Serve one accepted connection until it closes; an approver's or a viewer's first
    receives a ``session`` view of every open session and the questions already waiting
    for an approver.

    Args:
        service: the service the connection belongs to.
        ws: the accepted websocket.
        role: what the connection may do.
        principal: who is on it (the console's signed-in person); default the role's
            name, ``"agent"`` or ``"approver"``.
    """
    connection = Connection(service, ws, role, principal or role)
    pump: asyncio.Task[None] | None = None
    if role in WATCHER_ROLES:
        connection.outbox = asyncio.Queue(MAX_WATCHER_QUEUE)
        waiting = [p.message for p in service.pending.values() if not p.future.done() and (
            not p.session.self_approval or isinstance(p.message, ServiceCredentialRequired))]
        views = [s.view.message() for c in service.connections for s in c.sessions.values()]
        for queued in [*views, *waiting][-MAX_WATCHER_QUEUE:]:
            connection.outbox.put_nowait(queued)
        pump = asyncio.get_running_loop().create_task(connection.pump())
    service.connections.add(connection)
    try:
        # The requests of every session the connection opens (their tasks start in this context).
        with observing(service.requested):
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text") if message.get("text") is not None else message.get("bytes")
                await connection.handle(raw if raw is not None else b"")
    except Exception as exc:  # noqa: BLE001 - a broken connection must still cancel its sessions
        log.info("connection closed: %s", exc)
    finally:
        service.connections.discard(connection)
        if pump is not None:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
        await connection.close()
