"""One MCP session is one run: a GUI run through a controller service, or a code run.

**GUI runs go through a controller service** (:mod:`deskpod.service.server`), as a
session of it: each tool call becomes one ``submit`` of the session's run, so the
run's policy (risk levels, confirmations, the allowlists, injection pauses, loop
detection, limits) and its audit log apply exactly as for ``deskpod run``. The
service is either the operator's running ``deskpod serve`` (``--controller URL``) or
one this process embeds on a loopback port. Either way the confirmations go to the
service's *approver connections* (a console, an approver's client with the approver
token), never to the MCP client: the MCP client is the agent, and whoever proposes
actions does not approve them. Why a service and not ``run_task`` in this process:
the approvers, the console and the ``/healthz`` count already reach a service, and a
remote ``deskpod serve`` holds the operator's policy and the audit key, not the
process an assistant starts.

**Code runs** (a task with a workspace seed) run :func:`deskpod.controller.code_agent.run_code_task`
in this process, the MCP session as its agent; the service has no code runs. Their
exec confirmations have no approver here: a command the exec policy asks to confirm is
refused (``policy_denied``), which the tool result says.

A pause (suspected prompt injection, a loop, an approver's pause) holds the step
until an approver answers: the tool call then fails with the pause's reason after
:data:`PAUSE_REPORT_S`, and the next call waits for the same step again. While a step
waits for a person's confirmation, the call reports progress (MCP ``notifications/progress``)
every :data:`PROGRESS_INTERVAL_S`; a call the MCP client cancels (``notifications/cancelled``,
or its own timeout) withdraws its step: the card is withdrawn and the action not run, and
the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from deskpod.controller.code_agent import ToolFeedback, run_code_task
from deskpod.controller.code_task import CodeTaskSpec, ToolCall
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import RunControl
from deskpod.errors import DeskpodError, InvalidRequestError, PolicyDeniedError, RunCancelledError, RunEnded
from deskpod.mcp_server.content import with_untrusted
from deskpod.protocol import Observation
from deskpod.service.client import ControllerClient
from deskpod.service.messages import (
    ServiceConfirmationRequired,
    ServiceEvent,
    ServiceFinished,
    ServiceObservation,
    ServicePauseRequired,
    ServiceQuestionWithdrawn,
    ServiceRunSummary,
    SessionTask,
)

__all__ = ["CodeRun", "GuiRun", "PAUSE_REPORT_S", "PROGRESS_INTERVAL_S", "Progress", "SandboxLease", "StepReply"]

log = logging.getLogger(__name__)

PAUSE_REPORT_S = 5.0
"""Seconds a tool call waits on a paused run before it fails with the pause's reason."""

PROGRESS_INTERVAL_S = 5.0
"""Seconds between the progress notifications of a call waiting for a person's confirmation."""


@dataclass
class SandboxLease:
    """The sandbox a session drives: its daemon's URL and token, and how it is given back.

    ``pool``: the pool it was leased from (released, i.e. reset, when the session ends),
    ``lease_id`` the pool's lease it holds (the release names it);
    ``reset_on_end``: reset it in place when the session ends (a given sandbox), the new
    token written to ``token_file``. ``egress_control``: a pool slot's proxy control
    (``{"url", "token"}``).
    """

    url: str
    token: str
    sandbox_id: str = ""
    pool: str | None = None
    lease_id: str = ""
    reset_on_end: bool = False
    token_file: Path | None = None
    egress_control: dict[str, str] | None = None


@dataclass(frozen=True)
class StepReply:
    """A step's answer: ``status`` ok/error/denied, the observation after it and the error."""

    status: Literal["ready", "ok", "error", "denied"]
    observation: Observation
    error: dict[str, str]


def _ended_text(status: str, reason: str) -> str:
    """What a call of an ended run answers: the status, then the run's reason (which can
    quote the page) as untrusted content."""
    return with_untrusted(f"the run has ended ({status}). Nothing more can be done in this session: end it, "
                          "and start a new session for a new run. Why it ended:", "run_reason", reason)


Progress = Callable[[float, str], Awaitable[None]]
"""Reports a waiting call's progress: the seconds it has waited (increasing), and what for
(the MCP ``notifications/progress`` of the call, when its request carried a ``progressToken``)."""


@dataclass(frozen=True)
class _Asked:
    """A confirmation of the session waiting for a person: its level, id and deadline (the
    event loop's clock, seconds)."""

    level: str
    id: str
    deadline: float

    def text(self, now: float) -> str:
        """What a waiting call reports: never the request's summary, which names the page's
        controls (untrusted text, kept out of a notification the agent reads as the server's)."""
        return (f"waiting for a person to approve this call's action ({self.level}); "
                f"{max(0, round(self.deadline - now))} s left before no answer is a denial")


def _question_of(notice: Any) -> str | None:
    """The question a notice settles: a ``question_withdrawn``'s, or a ``confirmation_answer`` record's."""
    if isinstance(notice, ServiceQuestionWithdrawn):
        return notice.id
    if isinstance(notice, ServiceEvent) and notice.record.get("event") == "confirmation_answer":
        return str(notice.record.get("id"))
    return None


@dataclass
class GuiRun:
    """A GUI run as a session of a controller service (see the module docstring).

    Args:
        controller_url: the service's websocket URL (``ws://127.0.0.1:PORT/v1/controller``).
        controller_token: its agent token.
        sandbox: the sandbox to drive.
        task: the session's task.
        policy: a policy that can only tighten the service's.
        elicit: the session answers its own confirmations by asking the MCP client's human
            (MCP elicitation, through the ``ask`` of the step waiting on it): opened with
            ``approver="self"``, which the service allows only under an operator's policy with
            ``allow_self_approval``; every confirmation record then says ``self_approval``.
    """

    controller_url: str
    controller_token: str
    sandbox: SandboxLease
    task: SessionTask
    policy: Policy | None = None
    elicit: bool = False
    session: str = ""
    ended: ServiceRunSummary | None = None
    observation: Observation | None = None
    _client: Any = None
    _reader: asyncio.Task[None] | None = None
    _inflight: asyncio.Task[Any] | None = None
    _paused: ServicePauseRequired | None = None
    _asked: _Asked | None = None
    _withdrawn: bool = False
    _withdrawing: asyncio.Task[None] | None = None
    _ready: asyncio.Future[ServiceObservation | ServiceFinished] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _ask: Callable[[dict[str, Any]], Awaitable[bool]] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def start(self) -> None:
        """Open the session; its first observation is awaited by the first step (a pause
        at the start page is reported there).

        Raises:
            DeskpodError: the service or the sandbox refused or cannot be reached.
        """
        self._client = await ControllerClient.connect(self.controller_url, self.controller_token)
        self._ready = asyncio.get_running_loop().create_future()
        opened = await self._client.open(self.sandbox.url, self.sandbox.token, self.task, policy=self.policy,
                                         egress_control=self.sandbox.egress_control,
                                         approver="self" if self.elicit else "approver", snapshots=True)
        self.session = opened.session
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        """Route the service's notices of this session: the first observation, pauses,
        confirmations asked and withdrawn, the end of the run."""
        assert self._client is not None and self._ready is not None
        async for notice in self._client.events():
            if getattr(notice, "session", None) != self.session:
                continue
            if isinstance(notice, ServiceObservation) and notice.id is None and not self._ready.done():
                self._ready.set_result(notice)
            elif isinstance(notice, ServiceFinished):
                self.ended = notice.result
                if not self._ready.done():
                    self._ready.set_result(notice)
            elif isinstance(notice, ServicePauseRequired):
                self._paused = notice
            elif isinstance(notice, ServiceConfirmationRequired):
                self._asked = _Asked(notice.request.level, notice.request.id,
                                     asyncio.get_running_loop().time() + notice.request.timeout_s)
                if self.elicit:
                    asyncio.get_running_loop().create_task(self._answer(notice.request.model_dump(mode="json")))
            elif self._asked is not None and self._asked.id == _question_of(notice):
                self._asked = None
            self._changed.set()

    async def _answer(self, request: dict[str, Any]) -> None:
        """Ask the MCP client's human about a confirmation (denied when no call can ask)."""
        approved = False
        if self._ask is not None:
            try:
                approved = await self._ask(request)
            except Exception as exc:  # noqa: BLE001 - a client that cannot elicit has denied
                log.info("elicitation failed: %s", exc)
        await self._client.confirm(str(request.get("id", "")), approved, str(request.get("digest", "")))

    async def step(self, actions: Sequence[BaseModel | dict[str, Any]], *, intent: str = "",
                   ask: Callable[[dict[str, Any]], Awaitable[bool]] | None = None,
                   progress: Progress | None = None, console: bool = False, network: bool = False) -> StepReply:
        """Submit one proposal and wait for its outcome (a confirmation waits for the approver,
        reported through ``progress`` meanwhile); with ``console`` or ``network``, its observation
        also carries the page's console messages or network requests.

        A call cancelled while it waits (the MCP client's ``notifications/cancelled``, or its
        timeout) withdraws its step (:meth:`ControllerClient.withdraw`): a confirmation it waits
        on is withdrawn and the action does not run; the next call waits only for that step to
        end (at once), however it ends, and then submits its own.

        Raises:
            DeskpodError: this call's proposal was refused (``invalid_request``, ``busy``, the
                connection); it is this call's error only: the next call submits its own.
            RunEnded: the run ended (a denied confirmation, a limit, a cancel).
            PolicyDeniedError: the run is paused (``rule: paused``): the message says why and
                that an approver must resume it; the step stays pending and the next call
                waits for it (then fails with ``rule: resumed``: observe again).
        """
        self._ask = ask
        await self._ready_observation()
        if self._inflight is not None and self._withdrawn:
            await self._end_earlier(progress)
        if self._inflight is None:
            self._inflight = asyncio.get_running_loop().create_task(
                self._client.submit(self.session, list(actions), intent=intent, console=console, network=network))
            fresh = True
        else:
            fresh = False
        try:
            result = await self._settle(progress)
        except asyncio.CancelledError:
            self._withdraw()
            raise
        reply = self._outcome(result)
        if not fresh:
            raise PolicyDeniedError(
                "the run was paused during an earlier call; it has been resumed and that call's step has now "
                f"finished with status {reply.status}: look at the screen again (screenshot) before acting",
                detail={"rule": "resumed"})
        return reply

    async def _settle(self, progress: Progress | None = None) -> ServiceObservation | ServiceFinished:
        """The answer of the step in flight, or its error raised; a step that has ended, however
        it ended, is no longer in flight. Only a pause (:meth:`_wait`'s :class:`PolicyDeniedError`)
        or this call's cancel leaves it in flight, still running: the next call waits for it."""
        step = self._inflight
        assert step is not None
        try:
            answer: ServiceObservation | ServiceFinished = await self._wait(step, progress)
            return answer
        finally:
            if step.done():
                self._inflight, self._withdrawn = None, False

    async def _end_earlier(self, progress: Progress | None = None) -> None:
        """Wait for the step an earlier call left in flight (withdrawn, or held by a pause). Its
        answer was that call's: only the end of the run (:class:`RunEnded`) or a pause still holding
        it (:class:`PolicyDeniedError`) is raised; its own error is logged, not this call's."""
        step = self._inflight
        assert step is not None
        try:
            answer = await self._settle(progress)
        except DeskpodError as exc:
            if not step.done():
                raise
            log.info("an earlier call's step failed: %s", exc.message)
            return
        self._outcome(answer)

    def _withdraw(self) -> None:
        """Withdraw the step in flight (its call was cancelled), once; sent from a task of its own,
        outside the cancelled call. A step that had just ended is only discarded (the next call
        does not report it)."""
        if self._withdrawn or self._inflight is None:
            return
        self._withdrawn = True
        if self._inflight.done():
            return

        async def send() -> None:
            try:
                await self._client.withdraw(self.session)
            except DeskpodError as exc:
                log.info("withdrawing the cancelled call's step failed: %s", exc.message)

        self._withdrawing = asyncio.get_running_loop().create_task(send())

    async def _ready_observation(self) -> None:
        """Wait for the session's first observation (a pause at the start page is reported).

        Raises:
            RunEnded, PolicyDeniedError: as for :meth:`step`.
        """
        if self.ended is not None:
            raise RunEnded(self.ended, _ended_text(self.ended.status, self.ended.reason))
        assert self._ready is not None
        if self.observation is None:
            self._outcome(await self._wait(self._ready))

    def _outcome(self, result: ServiceObservation | ServiceFinished) -> StepReply:
        if isinstance(result, ServiceFinished):
            self.ended = result.result
            raise RunEnded(result.result, _ended_text(result.result.status, result.result.reason))
        self.observation = result.observation
        return StepReply(result.status, result.observation, dict(result.error))

    async def _wait(self, future: asyncio.Future[Any], progress: Progress | None = None) -> Any:
        """``future``'s result; while the run is paused, a :class:`PolicyDeniedError` after
        :data:`PAUSE_REPORT_S` instead (``future`` keeps running). While a confirmation of this
        session waits for a person, ``progress`` is told at once and every
        :data:`PROGRESS_INTERVAL_S` (the seconds this call has waited, and what it waits for)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        paused_since: float | None = None
        while True:
            self._changed.clear()
            now = loop.time()
            if self._paused is not None and paused_since is None:
                paused_since = now
            waits = [PAUSE_REPORT_S - (now - paused_since)] if paused_since is not None else []
            if self._asked is not None and progress is not None:
                try:
                    await progress(round(now - started, 3), self._asked.text(now))
                except Exception as exc:  # noqa: BLE001 - a notification that cannot go out does not fail the call
                    log.info("progress not sent: %s", exc)
                waits.append(PROGRESS_INTERVAL_S)
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                done, _ = await asyncio.wait({future, waiter}, timeout=max(0.0, min(waits)) if waits else None,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if future in done:
                self._paused = None
                self._asked = None
                return future.result()
            if self._paused is None:
                paused_since = None
            elif paused_since is not None and loop.time() - paused_since >= PAUSE_REPORT_S:
                notice = self._paused.notice
                raise PolicyDeniedError(
                    f"the run is paused ({notice.kind}: {notice.message}). An approver must resume "
                    "or cancel it (the console, or an approver connection of the controller service); nothing you "
                    "call acts meanwhile. Call a tool again later: it answers once the run is resumed.",
                    detail={"rule": "paused"})

    async def finish(self, claim: str) -> ServiceRunSummary:
        """Claim the task is done; the controller verifies it from the page and ends the run.

        Raises:
            RunEnded: the run had already ended.
        """
        if self.ended is not None:
            raise RunEnded(self.ended, _ended_text(self.ended.status, self.ended.reason))
        await self._ready_observation()
        if self._inflight is not None:
            await self._end_earlier()
        summary: ServiceRunSummary = await self._client.finish(self.session, claim)
        self.ended = summary
        return summary

    async def close(self, reset: bool = False) -> str | None:
        """End the run (status ``ended`` if still going: the session ended without a verdict asked),
        reset the sandbox when ``reset`` (through the
        service), close the connection. Returns the sandbox's new token after a reset (``None``:
        not reset)."""
        token = None
        if self._client is None:
            return None
        try:
            if self.ended is None and self.session:
                with contextlib.suppress(DeskpodError):
                    await self._client.end(self.session)
                if self._inflight is not None:
                    await asyncio.gather(self._inflight, return_exceptions=True)
                for _ in range(100):
                    if self.ended is not None:
                        break
                    await asyncio.sleep(0.05)
            if reset and self.session:
                done = await self._client.reset(self.session, self.task.start_url)
                token = done.token
        finally:
            await self._client.close()
            if self._reader is not None:
                await asyncio.gather(self._reader, return_exceptions=True)
        return token


class _McpCodeAgent:
    """The code run's agent: tool calls arrive from the MCP session, feedback goes back."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[ToolCall | None] = asyncio.Queue(maxsize=1)
        self.feedback: asyncio.Queue[ToolFeedback] = asyncio.Queue(maxsize=1)
        self.first = True

    async def propose(self, view: None, last: ToolFeedback | None) -> ToolCall | None:
        if last is not None:
            await self.feedback.put(last)
        return await self.calls.get()

    async def close(self) -> None:
        """Nothing to release."""


@dataclass
class CodeRun:
    """A code run in this process, the MCP session as its agent (see the module docstring).

    Args:
        task: the code task (its seed is sent to the workspace when the run starts).
        sandbox: the sandbox.
        policy: the operator's policy (exec policy, timeouts).
        audit_dir: where the run's audit log goes.
    """

    task: CodeTaskSpec
    sandbox: SandboxLease
    policy: Policy
    audit_dir: Path
    result: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    control: RunControl = field(default_factory=RunControl)
    _agent: _McpCodeAgent = field(default_factory=_McpCodeAgent)
    _runner: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        """Start the run (seeding the workspace happens before the first tool call is asked for)."""
        self._runner = asyncio.get_running_loop().create_task(run_code_task(
            self.task, self.sandbox.url, self.sandbox.token, agent=self._agent, audit_dir=self.audit_dir,
            policy=self.policy, control=self.control))

    async def call(self, tool: str, args: dict[str, Any]) -> ToolFeedback:
        """Run one tool call of the run and return its feedback.

        Raises:
            RunEnded: the run has ended (limits, the agent finished).
        """
        assert self._runner is not None
        if self._runner.done():
            raise RunEnded(None, self._end_text())
        await self._agent.calls.put(ToolCall(tool=tool, **args))
        got = asyncio.ensure_future(self._agent.feedback.get())
        done, _ = await asyncio.wait({got, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        if got in done:
            return got.result()
        got.cancel()
        raise RunEnded(None, self._end_text())

    def _end_text(self) -> str:
        assert self._runner is not None
        if self._runner.cancelled() or self._runner.exception() is not None:
            return "the run has ended (it failed to run): start a new session"
        result = self._runner.result()
        return _ended_text(result.status, result.reason)

    async def finish(self, claim: str) -> Any:
        """Claim completion: the clean-room verdict decides; returns the feedback or the run's result."""
        try:
            feedback = await self.call("claim_done", {"message": claim[:2000]} if claim else {})
        except RunEnded:
            assert self._runner is not None
            return self._runner.result()
        return feedback

    async def close(self) -> None:
        """Stop the run (the agent stops proposing) and wait for its log to be sealed: a run
        still going ends ``ended`` (the session ended without a claim; a claim the verdict
        refused keeps its ``failed``)."""
        if self._runner is None:
            return
        if not self._runner.done():
            self.control.cancel("its agent ended the session without claiming completion", ended=True)
            with contextlib.suppress(asyncio.QueueFull):
                self._agent.calls.put_nowait(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), 60)
            except (TimeoutError, DeskpodError, RunCancelledError, InvalidRequestError):
                self._runner.cancel()
        await asyncio.gather(self._runner, return_exceptions=True)
