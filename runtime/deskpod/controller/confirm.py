"""Confirmations bound to one exact subject, pauses shown to a human, and the channels that reach one.

One :class:`ConfirmationRequest` serves both run kinds; its ``subject`` is what
would happen:

- an :class:`ActionSubject` (GUI runs): a confirmation says what will happen, to
  which target, with which data and whether it can be undone, and it is tied to
  that exact action on that exact screen. The controller computes a
  :func:`binding_digest` of the action, the URL and the screenshot's SHA-256; the
  human's answer carries the digest it approves. Right before executing, the
  controller observes again and recomputes the digest: if the URL or a single pixel
  changed, the approval is void and a new confirmation is asked.
- a :class:`CommandSubject` (code runs): one exact ``exec`` command in the
  workspace, never a class of commands; its digest is :func:`command_digest`.

No answer within the timeout is a denial. The human is reached through an
:class:`ApprovalChannel`: :class:`TerminalChannel` (an interactive prompt),
:class:`DenyChannel` (the default: refuses everything, resumes nothing) or the
``deskpod serve`` websocket API (:mod:`deskpod.service.server`). Page content
never answers a confirmation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, TextIO

from deskpod.controller.policy.levels import RiskLevel

__all__ = [
    "ActionSubject",
    "ApprovalChannel",
    "CommandSubject",
    "ConfirmationAnswer",
    "ConfirmationRequest",
    "DenyChannel",
    "PauseAnswer",
    "PauseNotice",
    "TerminalChannel",
    "binding_digest",
    "command_digest",
]


def binding_digest(action: dict[str, Any], url: str | None, screenshot_sha256: str | None) -> str:
    """SHA-256 (hex) binding an approval to one action, URL and screen.

    Args:
        action: the action as JSON (its protocol ``model_dump(mode="json")``, unredacted).
        url: the active tab's URL when the confirmation was asked.
        screenshot_sha256: SHA-256 of the screenshot shown to the human.
    """
    canonical = json.dumps({"action": action, "url": url, "screenshot": screenshot_sha256},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def command_digest(subject: CommandSubject) -> str:
    """SHA-256 (hex) binding an approval to one command in one folder of one task.

    Args:
        subject: the command asked about.

    Returns:
        The digest an approving :class:`ConfirmationAnswer` must repeat.
    """
    canonical = json.dumps({"task": subject.task, "tool": subject.tool, "command": subject.command,
                            "cwd": subject.cwd}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ActionSubject:
    """A GUI action waiting for approval, on the screen the human judges.

    ``action``: the action as JSON, typed text redacted when sensitive. ``data``: the
    data it sends or enters (redacted when sensitive), or ``None``. ``url``: the page
    (credentials redacted). ``screenshot_format`` + base64 ``screenshot_data``: the
    screen the human judges, and its ``screenshot_sha256``.
    """

    action: dict[str, Any]
    data: str | None
    url: str | None
    screenshot_format: str
    screenshot_data: str = field(repr=False)
    screenshot_sha256: str


@dataclass(frozen=True)
class CommandSubject:
    """A code agent's command waiting for approval.

    ``task``: the task's name. ``tool``: the tool (``"exec"``). ``command``: the
    command as it will run (argv shell-quoted, or the shell string). ``cwd``: its
    folder in the workspace. ``rule``: the risk rule that set the level.
    """

    task: str
    tool: str
    command: str
    cwd: str
    rule: str


@dataclass(frozen=True)
class ConfirmationRequest:
    """One action or command waiting for a human's approval.

    ``id``: unique per request. ``summary``: one sentence: what will happen to which
    target. ``subject``: the action on its screen, or the command.
    ``level``/``reasons``: the risk and the rules that set it. ``reversible``:
    whether it can be undone. ``digest``: what an approval must carry
    (:func:`binding_digest` or :func:`command_digest`). ``timeout_s``: seconds
    before no answer means deny. ``attempt``: 1 for the first ask, more after a
    void approval.
    """

    id: str
    run_id: str
    step: int
    summary: str
    subject: ActionSubject | CommandSubject
    level: RiskLevel
    reasons: tuple[str, ...]
    reversible: bool
    digest: str
    timeout_s: float
    attempt: int = 1

    def describe(self) -> str:
        """Several lines for a human.

        Returns:
            For an action: the action, target, data, consequence and page; for a
            command: the command, its folder, its level and rule.
        """
        subject = self.subject
        if isinstance(subject, CommandSubject):
            reason = self.reasons[0] if self.reasons else ""
            return (
                f"task {subject.task!r}: the agent wants to run in the sandbox workspace ({subject.cwd}):\n"
                f"    {subject.command}\n"
                f"risk {self.level} ({subject.rule}): {reason}"
            )
        lines = [
            f"run {self.run_id}, step {self.step}: the agent wants to {self.summary}",
            f"risk {self.level}: " + "; ".join(self.reasons),
            "this may NOT be undone" if not self.reversible else "this can be undone",
            f"page: {subject.url}",
        ]
        if subject.data is not None:
            lines.insert(1, f"data: {subject.data}")
        if self.attempt > 1:
            lines.insert(0, "the screen changed since the last question: please judge it again")
        return "\n".join(lines)

    def to_json(self, *, with_screenshot: bool = True) -> dict[str, Any]:
        """The request as JSON for a remote channel.

        Args:
            with_screenshot: keep an action's ``screenshot_data``.

        Returns:
            One flat object: the request's fields and its subject's (``reasons`` as a list).
        """
        data = asdict(self)
        data.update(data.pop("subject"))
        data["reasons"] = list(self.reasons)
        if not with_screenshot:
            data.pop("screenshot_data", None)
        return data


@dataclass(frozen=True)
class ConfirmationAnswer:
    """A human's answer: ``approved`` applies only to the request whose ``digest`` it
    repeats. ``by``: who answered (channel and user). ``reason``: free text."""

    approved: bool
    digest: str
    by: str = ""
    reason: str = ""


@dataclass(frozen=True)
class PauseNotice:
    """The run is paused and shows the human why.

    ``kind``: ``"injection"`` (the page seems to instruct the agent; ``evidence``
    quotes it), ``"loop"`` (the same step keeps repeating), ``"requested"`` (someone
    paused the run). ``url``: the page. ``screenshot_sha256``: the screen then.
    ``timeout_s``: seconds before no answer means cancel.
    """

    id: str
    run_id: str
    kind: Literal["injection", "loop", "requested"]
    message: str
    evidence: tuple[str, ...]
    url: str | None
    screenshot_sha256: str | None
    timeout_s: float

    def describe(self) -> str:
        """Several lines for a human: why the run paused and the evidence."""
        quoted = "\n".join(f"    > {e}" for e in self.evidence)
        return f"run {self.run_id} paused ({self.kind}): {self.message}\npage: {self.url}\n{quoted}".rstrip()

    def to_json(self) -> dict[str, Any]:
        """The notice as JSON for a remote channel."""
        data = asdict(self)
        data["evidence"] = list(self.evidence)
        return data


PauseAnswer = Literal["resume", "cancel", "takeover"]
"""``resume``: go on (the paused content still authorizes nothing); ``cancel``: end
the run; ``takeover``: a human drives the sandbox until they resume."""


class ApprovalChannel(Protocol):
    """Where confirmations and pauses go, for GUI and code runs alike. Both methods may
    take as long as they like; the controller applies the timeouts and treats ``None``
    as no answer. Code runs never pause, so they only call :meth:`confirm`."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        """Ask about ``request``; an approval repeats its ``digest``."""
        ...

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        """Show ``notice``; the answer says whether the run goes on."""
        ...


class DenyChannel:
    """No human: every confirmation is denied and every pause cancels the run."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        """Deny ``request``."""
        return ConfirmationAnswer(False, request.digest, "deny-channel", "no human channel configured")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        """Cancel the run."""
        return "cancel"


class TerminalChannel:
    """Ask a human at a terminal; without a terminal, behave as :class:`DenyChannel`.

    A terminal shows no screenshot: the prompt points at the web console, where a run played
    as a session of ``deskpod serve`` (``deskpod run --service``) shows the same question as a
    card with the screen it was judged on and the action's point marked. (It wrote the
    screenshot to a temporary file before, which in the compose demo lay inside the
    controller's container, out of the person's reach.) Only ``y`` / ``yes`` approves; a pause accepts ``r`` (resume),
    ``t`` (takeover) and anything else cancels.

    Args:
        stdin: where answers are read. stdout: where questions are written.
    """

    def __init__(self, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stderr) -> None:
        self._in = stdin
        self._out = stdout

    async def _ask(self, text: str) -> str | None:
        if not self._in.isatty():
            return None
        self._out.write(text)
        self._out.flush()
        return (await asyncio.to_thread(self._in.readline)).strip().lower()

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        """Show ``request`` (an action's screenshot on the console only); approve only on ``y``/``yes``.

        Args:
            request: what to ask about.

        Returns:
            The answer; a denial when there is no terminal.
        """
        subject = request.subject
        if isinstance(subject, CommandSubject):
            question = f"{request.describe()}\nAllow this command? [y/N] "
        else:
            question = (f"{request.describe()}\nscreen: not shown at a terminal; to judge it on the screen, play the "
                        "task with `deskpod run --service` and answer on the web console (/console/ of deskpod serve)"
                        "\nAllow this action? [y/N] ")
        answer = await self._ask(question)
        if answer is None:
            return ConfirmationAnswer(False, request.digest, "terminal", "no terminal to ask")
        return ConfirmationAnswer(answer in {"y", "yes"}, request.digest, "terminal")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        """Show ``notice``; ``r`` resumes, ``t`` hands over, anything else cancels."""
        answer = await self._ask(f"{notice.describe()}\n[r]esume, [t]ake over, or cancel? [c] ")
        if answer in {"r", "resume"}:
            return "resume"
        if answer in {"t", "takeover"}:
            return "takeover"
        return "cancel"
