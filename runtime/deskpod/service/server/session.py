"""One session of ``deskpod serve``: its remote agent, its record, and the questions it waits on.

A session is one run on one sandbox whose agent is a remote client: :class:`RemoteAgent`
turns the run's observations into ``observation`` messages and the client's ``submit``
and ``finish`` into proposals. :class:`Session` holds what the service knows of it;
:class:`Pending` is one of its questions (a confirmation, a pause, a credential) until
someone answers. :class:`Peer` is what all of them need of a connection, so that this
module sits below the connection that serves them (:mod:`.connection`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.run_api import RunControl, RunResult
from deskpod.errors import InvalidRequestError
from deskpod.protocol import Observation
from deskpod.service.messages import (
    FinishMessage,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServiceMessage,
    ServiceObservation,
    ServicePauseRequired,
    SubmitMessage,
)
from deskpod.service.server.owned import OwnedSandbox
from deskpod.service.session_view import SessionView

__all__ = ["Peer", "Pending", "Question", "RemoteAgent", "Role", "Session", "SessionSandbox", "WATCHER_ROLES",
           "session_of"]

Role = Literal["agent", "approver", "viewer"]
"""What a connection may do, from the token it presented: an agent opens and drives
sessions, an approver answers their questions, a viewer (a console user without the
approver role) receives what an approver receives and may answer nothing."""

WATCHER_ROLES: frozenset[str] = frozenset({"approver", "viewer"})
"""The roles whose connections receive every session's questions and ``session`` views."""

Question = ServiceConfirmationRequired | ServicePauseRequired | ServiceCredentialRequired
"""A message that asks a person something and waits for the answer."""


class RemoteAgent:
    """The session's agent: proposals arrive as ``submit``/``finish`` messages.

    Args:
        send: sends a message on the opener's connection.
        session: the session's id.
    """

    def __init__(self, send: Callable[[ServiceMessage], Awaitable[None]], session: str) -> None:
        self._send = send
        self._session = session
        self.inbox: asyncio.Queue[SubmitMessage | FinishMessage] = asyncio.Queue(maxsize=1)
        """The client's next proposal (one at most, put there while :attr:`waiting`)."""
        self.waiting = False
        """Whether the run waits for a proposal (else a ``submit`` is refused as busy)."""
        self._answering: str | None = None

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        """Send the observation (answering the last ``submit`` by its ``id``) and wait for
        the next ``submit`` or ``finish``.

        Args:
            observation: what the run observed.
            last: the last proposal's outcome (``None``: the first observation).

        Returns:
            The client's proposal, or ``Done`` with its claim.
        """
        status = "ready" if last is None else last.status
        # Waiting from before the send: a client may answer the observation before the
        # send has returned, and must not be refused as busy then.
        self.waiting = True
        try:
            await self._send(ServiceObservation(id=self._answering, session=self._session, status=status,
                                                error=last.error if last else {}, observation=observation))
            message = await self.inbox.get()
        finally:
            self.waiting = False
        self._answering = message.id
        if isinstance(message, FinishMessage):
            return Done(message.claim)
        return Proposal(actions=message.actions, sensitive=message.sensitive, risk=message.risk,
                        intent=message.intent, console=message.console, network=message.network)

    async def close(self) -> None:
        """Nothing to release."""


@dataclass
class SessionSandbox:
    """The sandbox a session drives: its daemon's websocket ``url`` and the control ``token`` in force."""

    url: str
    token: str


@dataclass
class Session:
    """A session as the service holds it: ``sandbox`` (its URL and current token) and the
    ``sandbox_id`` its daemon gave, whether it approves itself, the console's ``view`` of
    it, and its run's task (``None`` until it starts)."""

    id: str
    agent: RemoteAgent
    control: RunControl
    sandbox: SessionSandbox
    sandbox_id: str
    self_approval: bool
    view: SessionView
    runner: asyncio.Task[RunResult] | None = None
    owned: OwnedSandbox | None = None
    """The sandbox the service owns that the session runs on (``None``: the opener's ``{url, token}``, or a pool's)."""
    pool: str | None = None
    """The name of the pool entry whose sandbox the session leased (``None``: not a pool's)."""

    @property
    def approver(self) -> Literal["approver", "self"]:
        """Who answers the session's questions, as its messages say."""
        return "self" if self.self_approval else "approver"


class Peer(Protocol):
    """What a session, its questions and the service's state use of a connection
    (:class:`~deskpod.service.server.connection.Connection` is one)."""

    role: Role
    principal: str
    sessions: dict[str, Session]
    outbox: asyncio.Queue[ServiceMessage] | None
    overflowed: asyncio.Event

    async def send(self, message: ServiceMessage) -> None:
        """Send one message on the connection."""

    async def close(self) -> None:
        """Cancel the connection's sessions and wait for their runs."""


@dataclass(eq=False)
class Pending:
    """A question of a session waiting for its answer (a confirmation, a pause or a credential
    request): ``message`` is what approvers are sent, ``future`` gets the answer. ``deadline``:
    when its time runs out (the event loop's clock, seconds), after which no answer is taken."""

    session: Session
    opener: Peer
    message: Question
    future: asyncio.Future[Any]
    deadline: float = math.inf

    def may_answer(self, connection: Peer) -> bool:
        """Approver connections always; the opener only when its session approves itself, and
        never a credential request (whoever answers it knows the secret)."""
        if isinstance(self.message, ServiceCredentialRequired):
            return connection.role == "approver"
        return connection.role == "approver" or (self.session.self_approval and connection is self.opener)


def session_of(connection: Peer, session: str) -> Session:
    """The session ``session`` opened on ``connection``.

    Raises:
        InvalidRequestError: the connection opened no such session.
    """
    found = connection.sessions.get(session)
    if found is None:
        raise InvalidRequestError(f"no session {session!r} on this connection")
    return found
