"""What a GUI run shows the outside: its result, its controls, its event stream, its success check.

:func:`deskpod.controller.gui.run_task` returns a :class:`RunResult`, obeys a
:class:`RunControl` (pause, resume, cancel from the ``deskpod serve`` API or a
signal handler), calls an :data:`EventListener` with every audit record, and
decides success with :func:`check_success` from the page and :func:`check_files` from the
workspace, never from the agent's word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.takeover import Takeover
from deskpod.controller.task import SuccessCheck
from deskpod.errors import DeskpodError
from deskpod.protocol import FileContent, Observation, ReadFileRequest
from deskpod.protocol.limits import DEFAULT_READ_BYTES
from deskpod.protocol.patterns import pattern_search

__all__ = ["EventListener", "RunControl", "RunResult", "SHOWN_TITLE_CHARS", "check_files", "check_success"]


@dataclass(frozen=True)
class RunResult:
    """How a run ended.

    ``status``: ``"succeeded"`` only when the success check held in the
    environment; ``"cancelled"`` when a human denied, did not answer or cancelled;
    ``"ended"`` when its agent ended its session without asking for a verdict (nothing was
    verified, nothing failed); ``"failed"`` otherwise. ``reason``: a readable sentence. ``steps``: proposals
    executed. ``screenshots``: screenshots taken. ``duration_s``: wall time,
    seconds. ``url``: the last URL observed (redacted). ``audit_log``: the JSONL
    file; ``audit_head``: SHA-256 of its last line (see
    :func:`deskpod.controller.audit_log.verify_log`). ``scene``: the failure scene's
    folder (``None`` on success).
    """

    run_id: str
    status: Literal["succeeded", "failed", "cancelled", "ended"]
    reason: str
    steps: int
    duration_s: float
    url: str | None
    audit_log: Path
    audit_head: str = ""
    scene: Path | None = None
    screenshots: int = 0


class RunControl:
    """Pause, resume, cancel or hand over a run, or withdraw its step in progress, from
    outside (the ``deskpod serve`` API, a signal handler). The runner looks at it between
    actions and while it waits for a person."""

    def __init__(self) -> None:
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._cancelled = asyncio.Event()
        self._pause_requested = asyncio.Event()
        self._withdrawn = asyncio.Event()
        self.cancel_reason: str | None = None
        self.ended = False
        self.pause_reason = ""
        self.withdraw_reason: str | None = None
        self.takeover = Takeover()

    def take_over(self, principal: str) -> None:
        """Hand the sandbox to the person ``principal`` before the next action (or at once,
        while the agent plans), until they hand it back (:mod:`.takeover`).

        Raises:
            InvalidRequestError: someone already holds it.
        """
        self.takeover.request(principal)
        self.pause(f"taken over by {principal}")

    def pause(self, reason: str = "paused by request") -> None:
        """Stop before the next action (or at once, while the agent plans) until
        :meth:`resume` (or :meth:`cancel`)."""
        self.pause_reason = reason
        self._resumed.clear()
        self._pause_requested.set()

    def resume(self) -> None:
        """Let a paused run go on."""
        self._pause_requested.clear()
        self._resumed.set()

    def cancel(self, reason: str = "cancelled by request", *, ended: bool = False) -> None:
        """End the run before its next action.

        Args:
            reason: why, a readable sentence.
            ended: its agent ended its session without asking for a verdict (an MCP client
                closed it): the run ends ``"ended"``, neither failed nor cancelled.
        """
        self.ended = ended
        self.cancel_reason = reason
        self._cancelled.set()
        self._resumed.set()

    def withdraw(self, reason: str = "the agent withdrew its proposal") -> None:
        """Withdraw the step in progress; the run goes on. A confirmation or credential request
        the step waits on is withdrawn, and nothing more of the step runs (an action already
        sent to the sandbox finishes, within its ``action_timeout_s``): the step ends refused
        (rule ``withdrawn``). Between steps it does nothing: the run clears it
        (:meth:`clear_withdrawal`) each time it asks the agent for a proposal."""
        self.withdraw_reason = reason
        self._withdrawn.set()

    def clear_withdrawal(self) -> None:
        """Forget a withdrawal (the run asks the agent for its next proposal)."""
        self.withdraw_reason = None
        self._withdrawn.clear()

    @property
    def withdrawn(self) -> bool:
        """Whether the step in progress was withdrawn."""
        return self._withdrawn.is_set()

    async def wait_withdrawn(self) -> None:
        """Return once the step in progress is withdrawn."""
        await self._withdrawn.wait()

    @property
    def paused(self) -> bool:
        """Whether a pause was requested and not yet resumed."""
        return not self._resumed.is_set()

    async def wait_cancelled(self) -> None:
        """Return once the run is cancelled."""
        await self._cancelled.wait()

    async def wait_pause_requested(self) -> None:
        """Return once a pause is requested (at once if one is pending)."""
        await self._pause_requested.wait()


def check_success(check: SuccessCheck, observation: Observation) -> tuple[bool, str]:
    """Decide whether ``observation`` satisfies ``check``.

    Returns:
        ``(ok, why)``: ``why`` names the first condition that failed, or the evidence. A
        failure also names the page's title when it has one (at most
        :data:`SHOWN_TITLE_CHARS` of it; page content): an error page, such as the egress
        proxy's for a site it could not reach, then says what the agent was shown.
    """
    url = observation.url or ""
    shown = f"; the page's title is {observation.title[:SHOWN_TITLE_CHARS]!r}" if observation.title else ""
    if check.url_matches is not None and not pattern_search(check.url_matches, url):
        return False, f"URL {redact_url(url)!r} does not match {check.url_matches!r}{shown}"
    if check.page_text_contains is not None and check.page_text_contains not in (observation.page_text or ""):
        return False, f"page text does not contain {check.page_text_contains!r}{shown}"
    return True, f"URL {redact_url(url)!r} matches and the page shows the expected text"


async def check_files(check: SuccessCheck, client: Any) -> tuple[bool, str]:
    """Decide whether the workspace files ``check.files`` names hold what it asks, read
    through ``client``'s workspace (``read_file``: the sandbox's files, whatever the agent said).

    Args:
        client: the run's sandbox (:class:`~deskpod.controller.sandbox.SandboxAPI`).

    Returns:
        ``(ok, why)`` as :func:`check_success` (``(True, "")`` with no file to check).
    """
    for wanted in check.files:
        try:
            reply = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path=wanted.path,
                                                         max_bytes=DEFAULT_READ_BYTES))
        except DeskpodError as exc:
            return False, f"workspace file {wanted.path!r} cannot be read ({exc.code}: {exc.message[:200]})"
        content = reply.workspace
        if not isinstance(content, FileContent) or content.truncated:
            return False, f"workspace file {wanted.path!r} is not a text file of at most {DEFAULT_READ_BYTES} bytes"
        if wanted.contains is not None and wanted.contains not in content.content:
            return False, f"workspace file {wanted.path!r} does not contain {wanted.contains!r}"
        if wanted.equals is not None and content.content.removesuffix("\n") != wanted.equals.removesuffix("\n"):
            return False, f"workspace file {wanted.path!r} is not {wanted.equals[:200]!r}"
    return True, f"the workspace files {', '.join(repr(f.path) for f in check.files)} hold what was asked" \
        if check.files else ""


SHOWN_TITLE_CHARS = 120
"""Most characters of the page's title a failed success check quotes."""


EventListener = Callable[[dict[str, Any]], None]
"""Called with each audit record as it is written (``deskpod serve`` streams them)."""
