"""One step of a GUI run as it is validated and executed: the typed record its concerns fill in.

A :class:`StepRecord` is opened for each proposal the agent makes. Judging an action
(:mod:`.judge`) resolves element actions in place and keeps the observation of the
control under the next point; keyed input (:mod:`.keyed`) and secrets (:mod:`.secrets`)
add what ran and each action's risk entry; the step (:mod:`.step`) writes the ``step``
audit event from it however the step ends: :meth:`StepRecord.finished`,
:meth:`~StepRecord.denied`, :meth:`~StepRecord.failed` or :meth:`~StepRecord.interrupted`
give that event's fields, in the order the audit log has always had them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deskpod.controller.audit_log import utc_now
from deskpod.controller.credentials import ProposedAction
from deskpod.controller.gui_agent import Proposal
from deskpod.controller.policy.policy_file import redact_url
from deskpod.errors import DeskpodError
from deskpod.protocol import Download, Observation

__all__ = ["StepRecord", "dialog_fields", "download_fields"]


def download_fields(downloads: list[Download]) -> list[dict[str, Any]]:
    """``downloads`` as the audit log writes them: each one's fields, its URL redacted
    (:func:`~deskpod.controller.policy.policy_file.redact_url`)."""
    return [{**d.model_dump(mode="json"), "url": redact_url(d.url)} for d in downloads]


def dialog_fields(observation: Observation) -> dict[str, Any]:
    """The audit fields for the dialogs ``observation`` shows: ``dialog`` (the page's JavaScript
    dialog: its type and message, cut to 500 characters), ``native_dialog`` (a desktop
    application's, as the observation has it) and ``file_chooser``; each only when open. Their
    words are the page's or the application's own."""
    out: dict[str, Any] = {}
    if observation.dialog is not None:
        out["dialog"] = {"type": observation.dialog.type, "message": observation.dialog.message[:500]}
    if observation.native_dialog is not None:
        out["native_dialog"] = observation.native_dialog.model_dump(mode="json")
    if observation.file_chooser is not None:
        out["file_chooser"] = observation.file_chooser.model_dump(mode="json")
    return out


@dataclass

class StepRecord:
    """One step (see the module).

    Args:
        proposal: the agent's proposal.
        before: the observation it was planned on.
        opening: the ``step`` event's first fields: ``step`` (its number), ``started_at``,
            ``intent`` (the agent's, cut to 500 characters).
        actions: the actions to run, element actions replaced as they are resolved.
        current: the latest observation (the focus and the control under the next point).
        index: the action being validated or run.
        done: each action that ran, as recorded (typed text redacted when sensitive).
        risks: each action's risk entry (``index``, ``risk``, ``reasons``, ``target``, ``approval``...).
        timings: the daemon's timings of what ran (``index``, ``type``, ``duration_s``).
        asked: the model-space point ``current`` describes the control at (``None``: none).
        via_of: for actions an element action became (by object id), the ref they came from.
    """

    proposal: Proposal
    before: Observation
    opening: dict[str, Any]
    actions: list[ProposedAction]
    current: Observation
    index: int = 0
    done: list[dict[str, Any]] = field(default_factory=list)
    risks: list[dict[str, Any]] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    asked: tuple[int, int] | None = None
    via_of: dict[int, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def open(cls, number: int, proposal: Proposal, before: Observation) -> StepRecord:
        """The record of step ``number`` of ``proposal``, planned on ``before``."""
        opening = {"step": number, "started_at": utc_now(), "intent": proposal.intent[:500]}
        return cls(proposal, before, opening, list(proposal.actions), before)

    @property
    def last(self) -> bool:
        """Whether the action at :attr:`index` is the proposal's last."""
        return self.index == len(self.actions) - 1

    def denied(self, rule: str, reason: str) -> dict[str, Any]:
        """The ``step`` event's fields for a step refused at :attr:`index` (nothing of that action ran)."""
        return {**self.opening, "actions": self.done, "risks": self.risks, "finished_at": utc_now(),
                "decision": "denied", "rule": rule, "reason": reason, "refused_index": self.index,
                "outcome": "denied"}

    def failed(self, exc: DeskpodError) -> dict[str, Any]:
        """The ``step`` event's fields for a step whose action at :attr:`index` the sandbox failed."""
        return {**self.opening, "actions": self.done, "risks": self.risks, "finished_at": utc_now(),
                "decision": "allowed", "outcome": "error", "failed_index": self.index,
                "error": {"code": exc.code, "message": exc.message}}

    def interrupted(self, shown: dict[str, Any], segments_done: int) -> dict[str, Any]:
        """The ``step`` event's fields for a keyboard action (``shown``) stopped at a piece's
        confirmation after ``segments_done`` pieces ran."""
        return {**self.opening, "actions": [*self.done, shown], "risks": self.risks, "finished_at": utc_now(),
                "decision": "denied", "rule": "confirmation", "outcome": "cancelled", "refused_index": self.index,
                "segments_done": segments_done}

    def finished(self) -> dict[str, Any]:
        """The ``step`` event's fields for a step whose every action ran, ending on :attr:`current`."""
        current = self.current
        shot = current.screenshot
        return {**self.opening, "actions": self.done, "risks": self.risks, "finished_at": utc_now(),
                "decision": "allowed", "outcome": "ok", "timings": self.timings, "url": redact_url(current.url),
                "title": current.title,
                "screen": None if shot is None else {"width": shot.screen_width, "height": shot.screen_height},
                "screenshot_sha256": None if shot is None else shot.sha256, "settled": current.settled,
                "events": current.events,
                "downloads": download_fields(current.downloads),
                # The desktop's windows when the observation listed them (the programs' own titles).
                **({"windows": [w.model_dump(mode="json") for w in current.windows]}
                   if current.windows is not None else {}),
                # The dialogs open on that screen: the page's, an application's, a file chooser.
                **dialog_fields(current),
                # The daemon's boxes over the run's secrets on that screen (-1: all of it).
                **({"screenshot_masked": shot.masked} if shot is not None and shot.masked else {})}
