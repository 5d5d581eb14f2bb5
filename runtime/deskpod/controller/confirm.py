"""Confirmations bound to one action on one screen, and pauses shown to a human.

Seed 002 §8.1 and §8.4: a confirmation says what will happen, to which target,
with which data and whether it can be undone, and it is tied to that exact
action on that exact screen. The controller computes a :func:`binding_digest` of
the action, the URL and the screenshot's SHA-256; the human's answer carries the
digest it approves. Right before executing, the controller observes again and
recomputes the digest: if the URL or a single pixel changed, the approval is void
and a new confirmation is asked. No answer within the timeout is a denial.

The human is reached through a :class:`HumanChannel`: :class:`TerminalChannel`
(an interactive prompt), :class:`DenyChannel` (the default without a terminal:
refuses everything, resumes nothing) or the ``deskpod serve`` websocket API
(:mod:`deskpod.controller.serve`). Page content never answers a confirmation.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from deskpod.controller.levels import RiskLevel
from deskpod.untrusted import IMAGE_EXTENSIONS

__all__ = [
    "ConfirmationRequest",
    "ConfirmationAnswer",
    "PauseNotice",
    "PauseAnswer",
    "HumanChannel",
    "DenyChannel",
    "TerminalChannel",
    "binding_digest",
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


@dataclass(frozen=True)
class ConfirmationRequest:
    """One action waiting for a human's approval (seed 002 §8.1's minimum information).

    ``id``: unique per request. ``summary``: one sentence: what will happen to
    which target. ``action``: the action as JSON, typed text redacted when
    sensitive. ``data``: the data it sends or enters (redacted when sensitive), or
    ``None``. ``level``/``reasons``: the risk and the rules that set it.
    ``reversible``: whether it can be undone. ``url``: the page (credentials
    redacted). ``screenshot``: the screen the human judges (``format`` + base64
    ``data``) and its ``screenshot_sha256``. ``digest``: what an approval must carry
    (:func:`binding_digest`). ``timeout_s``: seconds before no answer means deny.
    ``attempt``: 1 for the first ask, more after a void approval.
    """

    id: str
    run_id: str
    step: int
    summary: str
    action: dict[str, Any]
    data: str | None
    level: RiskLevel
    reasons: tuple[str, ...]
    reversible: bool
    url: str | None
    screenshot_format: str
    screenshot_data: str = field(repr=False)
    screenshot_sha256: str
    digest: str
    timeout_s: float
    attempt: int = 1

    def describe(self) -> str:
        """Several lines for a human: the action, target, data, consequence and page."""
        lines = [
            f"run {self.run_id}, step {self.step}: the agent wants to {self.summary}",
            f"risk {self.level}: " + "; ".join(self.reasons),
            "this may NOT be undone" if not self.reversible else "this can be undone",
            f"page: {self.url}",
        ]
        if self.data is not None:
            lines.insert(1, f"data: {self.data}")
        if self.attempt > 1:
            lines.insert(0, "the screen changed since the last question: please judge it again")
        return "\n".join(lines)

    def to_json(self, *, with_screenshot: bool = True) -> dict[str, Any]:
        """The request as JSON for a remote channel (``reasons`` as a list)."""
        data = asdict(self)
        data["reasons"] = list(self.reasons)
        if not with_screenshot:
            data.pop("screenshot_data")
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


class HumanChannel(Protocol):
    """Where confirmations and pauses go. Both methods may take as long as they like;
    the controller applies the timeouts and treats ``None`` as no answer."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        ...

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
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

    The screenshot the human judges is written to a private temporary file whose
    path is shown. Only ``y`` / ``yes`` approves; a pause accepts ``r`` (resume),
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
        """Show ``request`` and its screenshot's path; approve only on ``y``/``yes``."""
        shot = Path(tempfile.mkstemp(prefix=f"deskpod-confirm-{request.id}-", suffix=f".{IMAGE_EXTENSIONS.get(request.screenshot_format, 'img')}")[1])
        shot.write_bytes(base64.b64decode(request.screenshot_data))
        answer = await self._ask(f"{request.describe()}\nscreen: {shot}\nAllow this action? [y/N] ")
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
