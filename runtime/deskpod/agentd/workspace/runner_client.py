"""agentd's side of the runner wire: forwards workspace requests to the workspace runner.

The runner lives in the agent's zone (the workspace container), so everything it
answers is untrusted: a reply is read only up to :data:`MAX_RUNNER_REPLY_BYTES`,
validated by :mod:`~deskpod.agentd.runner_wire`'s models, and an error envelope
becomes an exception through :func:`deskpod.errors.error_from_wire`'s fixed table.
A runner that cannot be reached, or answers nonsense, gives
:class:`~deskpod.errors.WorkspaceUnavailableError`; the daemon stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from pydantic import BaseModel, ValidationError

from deskpod.agentd.workspace.egress_grants import EgressGrants
from deskpod.agentd.runner_wire import (
    FRAME_HEADER,
    MAX_RUNNER_REPLY_BYTES,
    RUNNER_PORT,
    RunnerError,
    RunnerOutput,
    RunnerPingRequest,
    RunnerPong,
    RunnerResetDone,
    RunnerResetRequest,
    RunnerWorkspaceRequest,
    X11Grant,
    encode_frame,
    frame_length,
    parse_runner_reply,
)
from deskpod.errors import DisplayUnavailableError, ExecutionError, WorkspaceUnavailableError, error_from_wire
from deskpod.protocol import CleanRoomRequest, ExecRequest, RunTestsRequest, WorkspaceOutput, WorkspaceRequest

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "REPLY_SLACK_S",
    "RESET_TIMEOUT_S",
    "RunnerClient",
    "X11GrantProvider",
    "call_runner",
    "parse_address",
    "unexpected_reply",
]

CONNECT_TIMEOUT_S = 5.0
"""How long connecting to the runner may take, seconds."""

REPLY_SLACK_S = 30.0
"""Seconds added to a command's own ``timeout_s`` before agentd stops waiting for its reply."""

DEFAULT_REQUEST_TIMEOUT_S = 600.0
"""How long agentd waits for the reply to a request without a timeout of its own
(seed, files, patch, diff: several git commands of up to 60 s each), seconds."""

RESET_TIMEOUT_S = 30.0
"""How long agentd waits for the runner's reset, seconds."""

X11GrantProvider = Callable[[float], AbstractAsyncContextManager[X11Grant]]
"""Makes a display grant for one command that asked for ``display``, live inside its
``async with`` (its argument: the command's longest run, seconds;
:meth:`deskpod.agentd.display.xgate.XGate.grant`)."""


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``host``, meaning :data:`RUNNER_PORT`) as a pair.

    Raises:
        ValueError: the port is not an integer.
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, RUNNER_PORT
    return host.strip("[]"), int(port)


class RunnerClient:
    """Talks to one workspace runner; one connection per request.

    Args:
        address: ``host:port`` of the runner (``DESKPOD_WORKSPACE_RUNNER``).
        grants: makes the X11 grant for commands that ask for ``display``, live until the
            runner has answered (after killing every agent process) or the wait was given
            up; ``None``: this sandbox grants no display (``display_unavailable``).
        egress: the daemon's egress grants: an ``exec`` with ``network`` gets one for
            as long as its request runs (revoked once the runner answered, failed or
            was given up on); ``None``: such a command gets no proxy.
    """

    def __init__(
        self, address: str, grants: X11GrantProvider | None = None, egress: EgressGrants | None = None
    ) -> None:
        self.host, self.port = parse_address(address)
        self.grants = grants
        self.egress = egress

    async def workspace(self, request: WorkspaceRequest, cancel: threading.Event) -> WorkspaceOutput:
        """Forward one workspace request and return its output.

        Args:
            request: a validated workspace request.
            cancel: set when the client goes away; the connection is closed, which
                makes the runner kill the running command.

        Raises:
            DisplayUnavailableError: ``display`` was asked and no grant provider is set, or
                the X server made no grant.
            WorkspaceUnavailableError: the runner is unreachable or its reply is bad.
            ExecutionError: cancelled (``cancel`` was set).
            DeskpodError: the error the runner answered, through the fixed code table.
        """
        display = isinstance(request, (ExecRequest, RunTestsRequest, CleanRoomRequest)) and request.display
        if display and self.grants is None:
            raise DisplayUnavailableError(
                "this sandbox grants no display to workspace commands", detail={"reason": "no_provider"}
            )
        timeout_s = DEFAULT_REQUEST_TIMEOUT_S
        if isinstance(request, (ExecRequest, RunTestsRequest, CleanRoomRequest)):
            timeout_s = request.timeout_s + REPLY_SLACK_S
        # Grants are live from here until the runner has answered (after killing every
        # agent process) or the wait was given up: never for a later request.
        async with contextlib.AsyncExitStack() as grants:
            x11 = await grants.enter_async_context(self.grants(timeout_s)) if display and self.grants else None
            credential = None
            if isinstance(request, ExecRequest) and request.network and self.egress is not None:
                credential = grants.enter_context(self.egress.grant(request.allowed_domains,
                                                                    timeout_s + CONNECT_TIMEOUT_S))
            message = RunnerWorkspaceRequest(request=request, x11=x11, egress_credential=credential)
            reply = await self._call(message, timeout_s, cancel)
        if isinstance(reply, RunnerOutput):
            return reply.output
        raise unexpected_reply(reply)

    async def reset(self) -> RunnerResetDone:
        """Ask the runner to kill every agent process and wipe the agent's folders and IPC.

        Raises:
            WorkspaceUnavailableError: unreachable or a bad reply.
            DeskpodError: the runner's error.
        """
        reply = await self._call(RunnerResetRequest(), RESET_TIMEOUT_S, None)
        if isinstance(reply, RunnerResetDone):
            return reply
        raise unexpected_reply(reply)

    async def ping(self, timeout_s: float = CONNECT_TIMEOUT_S) -> RunnerPong:
        """Check that the runner answers.

        Raises:
            WorkspaceUnavailableError: it does not.
        """
        reply = await self._call(RunnerPingRequest(), timeout_s, None)
        if isinstance(reply, RunnerPong):
            return reply
        raise unexpected_reply(reply)

    async def _call(
        self, message: BaseModel, timeout_s: float, cancel: threading.Event | None
    ) -> RunnerOutput | RunnerResetDone | RunnerPong:
        reply = await call_runner(self.host, self.port, message, timeout_s, cancel, parse_runner_reply,
                                  "the workspace runner")
        assert isinstance(reply, (RunnerOutput, RunnerResetDone, RunnerPong))
        return reply


async def call_runner(host: str, port: int, message: BaseModel, timeout_s: float, cancel: threading.Event | None,
                      parse: Callable[[bytes], BaseModel], who: str,
                      connect_timeout_s: float = CONNECT_TIMEOUT_S) -> BaseModel:
    """Send ``message`` to a runner of an untrusted zone at ``host:port`` and return its
    reply as ``parse`` validates it; one connection per request.

    Args:
        timeout_s: the longest wait for the reply, seconds.
        cancel: when set, the wait ends (``None``: never cancelled).
        parse: validates the reply frame's payload (raises ``ValidationError``).
        who: the runner, as error messages name it (``"the workspace runner"``).
        connect_timeout_s: the longest wait for the connection (its name resolved), seconds.

    Raises:
        WorkspaceUnavailableError: unreachable, no reply in time, a closed connection,
            a reply over :data:`MAX_RUNNER_REPLY_BYTES` or a malformed one (``detail["reason"]``).
        ExecutionError: cancelled.
        DeskpodError: the error the runner answered, through the fixed code table.
    """
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout_s)
    except (TimeoutError, OSError) as exc:
        raise WorkspaceUnavailableError(f"{who} at {host}:{port} cannot be reached",
                                        detail={"reason": "unreachable"}) from exc
    try:
        writer.write(encode_frame(message))
        await writer.drain()
        read = asyncio.create_task(_read_reply(reader, who))
        deadline = time.monotonic() + timeout_s
        try:
            while not read.done():
                if cancel is not None and cancel.is_set():
                    raise ExecutionError("request cancelled: the client went away")
                if time.monotonic() > deadline:
                    raise WorkspaceUnavailableError(f"{who} did not answer within {timeout_s:.0f} s",
                                                    detail={"reason": "timeout"})
                await asyncio.wait({read}, timeout=0.1)
        finally:
            read.cancel()
        payload = read.result()
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise WorkspaceUnavailableError(f"{who} closed the connection without a reply",
                                        detail={"reason": "unreachable"}) from exc
    finally:
        writer.close()
    try:
        reply = parse(payload)
    except ValidationError as exc:
        raise WorkspaceUnavailableError(f"{who}'s reply is malformed", detail={"reason": "bad_reply"}) from exc
    if isinstance(reply, RunnerError):
        raise error_from_wire(reply.error.model_dump())
    return reply


async def _read_reply(reader: asyncio.StreamReader, who: str) -> bytes:
    header = await reader.readexactly(FRAME_HEADER.size)
    try:
        length = frame_length(header, MAX_RUNNER_REPLY_BYTES)
    except ValueError as exc:
        raise WorkspaceUnavailableError(
            f"{who}'s reply exceeds {MAX_RUNNER_REPLY_BYTES} bytes", detail={"reason": "too_large"}
        ) from exc
    return await reader.readexactly(length)


def unexpected_reply(reply: BaseModel, who: str = "the workspace runner") -> WorkspaceUnavailableError:
    """The error for a valid reply of ``who`` (a runner) to another request than the one sent
    (``detail["reason"]`` ``"bad_reply"``)."""
    return WorkspaceUnavailableError(
        f"{who} answered {getattr(reply, 'type', '?')!r} to another request",
        detail={"reason": "bad_reply"},
    )
