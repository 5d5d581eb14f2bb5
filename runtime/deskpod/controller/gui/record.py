"""The GUI run's record: what every concern of one run shares, and how it is written down.

A :class:`RunRecord` holds the run's task, policy, channel and control, its counters
(steps, screenshots), the last observation, the downloads every observation reported
(:class:`~deskpod.controller.download_watch.DownloadWatch`), the recent actions for the failure scene,
the hosts visited, the address bar's typed text (:class:`~.omnibox.OmniboxTracker`, fed
by the agent's and the person's keys alike), the state machine, and the hash-chained
audit log (:mod:`deskpod.controller.audit_log`) with its screenshot store. Every concern of
:mod:`deskpod.controller.gui` reads and fills this one object; each audit event goes
through :meth:`RunRecord.emit`, which also tells the run's listener.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from deskpod.controller.audit_log import AuditLog, ScreenshotStore
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.confirm import ApprovalChannel
from deskpod.controller.download_watch import DownloadWatch
from deskpod.controller.gui.omnibox import OmniboxTracker
from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import EventListener, RunControl
from deskpod.controller.state import StateMachine
from deskpod.controller.task import TaskSpec
from deskpod.errors import LimitExceededError, RunCancelledError, ScreenChangedError, StepWithdrawnError
from deskpod.protocol import Observation, ObserveOptions

__all__ = ["RunRecord", "changed_reason"]

_T = TypeVar("_T")

DEADLINE_SLACK_S = 0.05
"""Seconds within which a wait that ends at the run's wall-time deadline counts as ended by it."""


@dataclass
class RunRecord:
    """The state one GUI run's concerns share (see the module).

    Args:
        task: the validated task.
        policy: the operator's rules.
        channel: where confirmations, pauses and credential requests go.
        control: lets another task pause, resume, cancel or take the run over.
        audit_dir: folder for ``<run_id>.jsonl``, ``screenshots/`` and ``scenes/``.
        on_event: called with every audit record (``None``: nobody listens).
        signer: seals the audit log's final record.
        self_approval: the channel answers from the agent's own side (every confirmation
            record says so).
        snapshots: every full observation carries the element snapshot.
    """

    task: TaskSpec
    policy: Policy
    channel: ApprovalChannel
    control: RunControl
    audit_dir: Path
    on_event: EventListener | None
    signer: AuditSigner
    self_approval: bool = False
    snapshots: bool = False
    run_id: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex[:12]}")
    steps: int = 0
    screenshots: int = 0
    last_obs: Observation | None = None
    recent_actions: list[dict[str, Any]] = field(default_factory=list)
    visited_hosts: set[str] = field(default_factory=set)
    deadline: float = math.inf
    """When the run's ``max_wall_time_s`` ends (:func:`time.monotonic` seconds; set when its loop starts)."""

    def __post_init__(self) -> None:
        self.limits: Limits = self.task.limits.capped(self.policy.limits)
        self.audit = AuditLog(self.audit_dir / f"{self.run_id}.jsonl", self.run_id, self.signer)
        self.store = ScreenshotStore(self.audit_dir / "screenshots", self.policy.screenshots,
                                     self.policy.screenshot_max_age_days)
        self.omnibox = OmniboxTracker()
        self.downloads = DownloadWatch()
        """The run's downloads, from every observation of its sandbox."""
        self.sm = StateMachine(lambda old, new, why: self.emit("state", src=old.value, dst=new.value, reason=why))

    def emit(self, event: str, **fields: Any) -> None:
        """Write one audit event and tell the listener (``{"run_id", "event", **fields}``).

        Args:
            event: the event's name.
            **fields: its fields, in the order they are written.
        """
        self.audit.write(event, **fields)
        if self.on_event is not None:
            self.on_event({"run_id": self.run_id, "event": event, **fields})

    def count_screenshot(self, obs: Observation) -> Observation:
        """Count and store ``obs``'s screenshot, if it has one.

        Returns:
            ``obs``.

        Raises:
            LimitExceededError: the run took more than ``max_screenshots``.
        """
        if obs.screenshot is not None:
            self.screenshots += 1
            self.store.put(obs.screenshot)
            if self.screenshots > self.limits.max_screenshots:
                raise LimitExceededError(f"limit reached: max_screenshots={self.limits.max_screenshots}",
                                         detail={"limit": "max_screenshots"})
        return obs

    @property
    def scans(self) -> bool:
        """Whether observations carry the page's other text sources (for the injection scan)."""
        return self.policy.pause_on_injection

    def full_look(self, console: bool = False, network: bool = False) -> ObserveOptions:
        """The options of an observation the agent plans on: screenshot, page text, the text
        sources when scanned, the element snapshot when the run gives one, the desktop's windows;
        the page's console messages and network requests when its proposal asks for them."""
        return ObserveOptions(page_text=True, text_sources=self.scans, snapshot=self.snapshots, console=console,
                              network=network, windows=True)

    def time_left(self) -> float:
        """Seconds until the run's wall-time deadline (``inf`` before its loop starts; never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def question_timeout(self, timeout_s: float) -> float:
        """How long a question to a person may wait: ``timeout_s``, or less when the run's wall
        time ends first (what the question's card counts down)."""
        return min(timeout_s, self.time_left())

    def _wall_time_reason(self) -> str:
        return f"the run's time limit ended (max_wall_time_s={self.limits.max_wall_time_s:g})"

    async def answer(self, pending: Awaitable[_T], timeout_s: float, *, withdrawable: bool = False) -> _T | None:
        """Wait for a person's answer, at most ``timeout_s`` seconds and never past the run's
        wall-time deadline; a cancel of the run (and, when ``withdrawable``, a withdrawal of its
        step) ends the wait. However the wait ends without an answer, ``pending`` is cancelled
        with the reason as the :class:`asyncio.CancelledError`'s message (the approval channel
        withdraws its question with it), and this returns after ``pending`` has ended.

        Returns:
            The answer, or ``None`` when it did not come within ``timeout_s``.

        Raises:
            RunCancelledError: the run was cancelled meanwhile.
            StepWithdrawnError: the step was withdrawn meanwhile (``withdrawable`` only).
            LimitExceededError: the run's wall time ended first (``max_wall_time_s``).
        """
        limit = self.question_timeout(timeout_s)
        waiter = asyncio.ensure_future(pending)
        watched = [asyncio.ensure_future(self.control.wait_cancelled())]
        if withdrawable:
            watched.append(asyncio.ensure_future(self.control.wait_withdrawn()))
        why = "the run ended"
        try:
            done, _ = await asyncio.wait({waiter, *watched}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                return waiter.result()
            if self.control.cancel_reason is not None:
                why = f"the run was cancelled: {self.control.cancel_reason}"
                raise RunCancelledError(self.control.cancel_reason, detail={"cause": "requested"})
            if withdrawable and self.control.withdrawn:
                why = self.control.withdraw_reason or "the agent withdrew its proposal"
                raise StepWithdrawnError(why, detail={"cause": "withdrawn"})
            if self.time_left() <= DEADLINE_SLACK_S:
                why = self._wall_time_reason()
                raise LimitExceededError(f"limit reached: max_wall_time_s={self.limits.max_wall_time_s:g}",
                                         detail={"limit": "max_wall_time_s"})
            why = f"no answer within {limit:g} s"
            return None
        except asyncio.CancelledError:  # the run's task: its wall time (asyncio.wait_for), or the process
            if self.time_left() <= DEADLINE_SLACK_S:
                why = self._wall_time_reason()
            raise
        finally:
            for future in watched:
                future.cancel()
            if not waiter.done():
                waiter.cancel(why)
                await asyncio.gather(waiter, return_exceptions=True)


def changed_reason(exc: ScreenChangedError) -> str:
    """The sandbox's reason for a ``screen_changed`` refusal, if it is one of the known ones
    (the detail is untrusted: anything else is ``"unspecified"``)."""
    reason = exc.detail.get("reason")
    return reason if reason in ("region", "element", "url", "unknown_screenshot") else "unspecified"
