"""Keyed input in a GUI run: ``type``, ``keypress`` and ``hold_key`` judged piece by piece as they land.

A keyboard action is cut where its keys may move the focus or press something
(:mod:`deskpod.controller.keysplit`): a chord into one chord per key, typed text before
each Tab, newline or space that can move the focus or press. The first piece was judged
with the action (:meth:`~.judge.Judge.assess`); every later piece is judged against the
element focused when it lands, read from the daemon's reply to the piece before. A piece
at a confirmation level waits for the person first (:mod:`.confirming`). The step's risk
entry of the action keeps each piece's level; the action's typed text is redacted when a
piece was judged secret or a secret field has the focus after a piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deskpod.controller.audit_log import redact_action
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.confirming import Confirmer
from deskpod.controller.gui.judge import Judge, may_download
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui.step_record import StepRecord
from deskpod.controller.keysplit import chord_segments, key_equivalent, next_text_segment
from deskpod.controller.policy.levels import level_rank
from deskpod.controller.policy.risk import ActionRisk, is_sensitive_field
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.errors import BadReplyError, DeskpodError, RunCancelledError, StepWithdrawnError
from deskpod.protocol import Action, ActionTiming, HoldKey, Keypress, Observation, ObserveOptions, TypeText

__all__ = ["KeyAction", "KeyedInput", "KeysOutcome"]

KeyAction = TypeText | Keypress | HoldKey
"""An action run piece by piece."""


@dataclass
class KeysOutcome:
    """How a keyboard action ran piece by piece.

    ``observation``: the last observation; ``error``: the daemon's error that stopped it
    (``None``: every piece ran); ``sensitive``: its typed text is secret; ``segments``: one
    ``(piece, record)`` per piece judged; ``timings``: the daemon's timings of the pieces
    that ran; ``shown``: the action as recorded (once it ran or stopped).
    """

    observation: Observation
    error: DeskpodError | None = None
    sensitive: bool = False
    segments: list[tuple[Action, dict[str, Any]]] = field(default_factory=list)
    timings: list[ActionTiming] = field(default_factory=list)
    shown: dict[str, Any] = field(default_factory=dict)


class KeyedInput:
    """Runs one run's keyboard actions piece by piece (see the module).

    Args:
        run: the run's record.
        allowlist: checks the observation after every piece.
        judge: judges each piece after the first.
        confirmer: asks the person about a piece at a confirmation level.
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist, judge: Judge, confirmer: Confirmer) -> None:
        self.run = run
        self.allowlist = allowlist
        self.judge = judge
        self.confirmer = confirmer

    async def run_action(self, client: SandboxAPI, step: StepRecord, action: KeyAction, risk: ActionRisk,
                         entry: dict[str, Any], options: ObserveOptions, note: str) -> KeysOutcome:
        """Run ``action`` (at ``step.index``, judged ``risk``) piece by piece from ``step.current``.

        Args:
            client: the sandbox.
            step: the step (its proposal's ``sensitive`` applies).
            action: the keyboard action.
            risk: the action's risk (its first piece's, with the proposal's rules).
            entry: the action's entry of the step's risks: its ``approval`` (``"approved"``:
                the first piece waits for the person at the action's level), updated with
                the pieces' risks.
            options: what to observe after the last piece.
            note: the reason written with the move to ``executing``.

        Returns:
            The outcome, its ``shown`` set; ``error`` when the daemon failed a piece.

        Raises:
            RunCancelledError: a piece's confirmation was denied or not answered (the step's
                ``step`` record, ``outcome`` ``cancelled``, is written first).
            BadReplyError: the sandbox broke the wire contract.
        """
        approval = entry["approval"]
        if approval != "approved":
            self.run.sm.to(RunState.EXECUTING, note)
        keyed = KeysOutcome(step.current)
        sensitive = step.proposal.sensitive or risk.sensitive
        try:
            await self._pieces(client, step, action, risk, approval, options, keyed, note)
        except StepWithdrawnError:  # the step ends refused: the pieces that ran are its actions
            step.done.append(self._record(entry, action, True, keyed))
            raise
        except RunCancelledError:
            # Typed text is redacted whatever the focus: its destination is not known.
            keyed.shown = self._record(entry, action, True, keyed)
            self.run.recent_actions.append(keyed.shown)
            self.run.emit("step", **step.interrupted(keyed.shown, len(keyed.segments) - 1))
            raise
        keyed.shown = self._record(entry, action, sensitive or keyed.sensitive, keyed)
        return keyed

    async def _pieces(self, client: SandboxAPI, step: StepRecord, action: KeyAction, risk: ActionRisk,
                      approval: str, options: ObserveOptions, out: KeysOutcome, note: str) -> None:
        """Run ``action``'s pieces into ``out``, each judged against the element focused when it
        lands; a piece at a confirmation level (or the first, when the whole action needs an
        approval) waits for the person first. Every observation's URLs are checked.

        Raises:
            RunCancelledError: a piece's confirmation was denied or not answered.
            BadReplyError: the sandbox broke the wire contract.
        """
        run = self.run
        left = action.text if isinstance(action, TypeText) else ""
        pending: list[Action] = [action] if isinstance(action, TypeText) and not left else []
        if isinstance(action, (Keypress, HoldKey)):
            pending = list(chord_segments(action))
        while pending or left:
            segment: Action
            if left:
                piece = next_text_segment(left, out.observation.focused)
                left = left[len(piece):]
                segment = TypeText(type="type", text=piece)
                last = not left
            else:
                segment = pending.pop(0)
                last = not pending
            if not out.segments and last:
                segment = action  # not split: the action as proposed, judged as it was
            # The first piece was judged with the action (Judge.assess, on first_segment).
            seg_risk = self.judge.page_risk(key_equivalent(segment), out.observation) if out.segments else risk
            first_approved = not out.segments and approval == "approved"
            out.sensitive = out.sensitive or seg_risk.sensitive
            info = {"risk": seg_risk.level, "reasons": list(seg_risk.reasons), "target": seg_risk.target}
            look = options if last else ObserveOptions(screenshot=False)
            try:
                if first_approved or seg_risk.level in run.policy.confirm_levels:
                    if not first_approved:
                        run.sm.to(RunState.VALIDATING, f"key segment {len(out.segments) + 1} of a {action.type} action")
                        run.sm.to(RunState.AWAITING_CONFIRMATION,
                                  f"{seg_risk.level}: {seg_risk.reasons[0] if seg_risk.reasons else ''}")
                    shown = redact_action(segment, step.proposal.sensitive or out.sensitive)
                    out.observation = await self.confirmer.confirm(client, segment, step.proposal, shown, seg_risk,
                                                                   look, note)
                    info["approval"] = "approved"
                else:
                    out.observation = await client.act([segment], look, timeout_s=run.limits.action_timeout_s,
                                                       allow_downloads=may_download(seg_risk))
                    info["approval"] = "not_required"
            except RunCancelledError:
                out.segments.append((segment, {**info, "approval": "refused"}))
                raise
            except BadReplyError:
                raise
            except DeskpodError as exc:
                out.error = exc
                return
            out.segments.append((segment, info))
            out.timings += out.observation.timings
            if isinstance(action, TypeText) and is_sensitive_field(out.observation.focused):
                out.sensitive = True
            if not last:
                self.allowlist.observed(out.observation, f"step {run.steps}")

    @staticmethod
    def _record(entry: dict[str, Any], action: KeyAction, sensitive: bool, keyed: KeysOutcome) -> dict[str, Any]:
        """Put a keyboard action's per-piece risks into its ``entry`` of the step's risks (the
        highest level on the entry); return the action as recorded (typed text redacted when
        ``sensitive``)."""
        if len(keyed.segments) > 1 or (keyed.segments and keyed.segments[0][0] is not action):
            entry["segments"] = [{"action": redact_action(seg, sensitive), **info} for seg, info in keyed.segments]
            top = max([entry["risk"], *(info["risk"] for _, info in keyed.segments)], key=level_rank)
            if top != entry["risk"]:
                highest = [info for _, info in keyed.segments if info["risk"] == top]
                entry.update(risk=top, reasons=[r for info in highest for r in info["reasons"]],
                             target=highest[0]["target"])
            if any(info["approval"] == "approved" for _, info in keyed.segments):
                entry["approval"] = "approved"
        return redact_action(action, sensitive)
