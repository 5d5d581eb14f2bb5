"""The GUI run's pauses and take-overs: when it stops for a person, and what the person does meanwhile.

A run pauses when another task asks it to (:class:`~deskpod.controller.run_api.RunControl`),
when the page seems to instruct the agent (:mod:`deskpod.controller.policy.injection`), and when
the agent repeats itself on the same screen (:mod:`deskpod.controller.policy.loops`); the person
answers through the approval channel: resume, cancel, or take over. A take-over
(:mod:`deskpod.controller.takeover`) runs the person's inputs on the run's own sandbox
connection, each written as a ``human_input`` record, bounded by the policy's blocked
actions and the allowlists (the address bar's target is judged before its Enter), and
releases any button the person left held when they hand the sandbox back.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Literal

from deskpod.controller.audit_log import redact_action, utc_now
from deskpod.controller.confirm import PauseNotice
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.credentials import ProposedAction
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.page_logs import scan_sources
from deskpod.controller.policy.injection import scan_text
from deskpod.controller.policy.loops import LoopDetector
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.policy.risk import is_sensitive_field
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.errors import BadReplyError, DeskpodError, LimitExceededError, PolicyDeniedError, RunCancelledError
from deskpod.protocol import Action, MouseDown, MouseUp, Navigate, Observation, ObserveOptions

__all__ = ["Human"]

log = logging.getLogger(__name__)

_PauseKind = Literal["injection", "loop", "requested"]

_Button = Literal["left", "right", "middle"]
"""A mouse button a person may hold down (:class:`~deskpod.protocol.MouseDown`)."""


class Human:
    """Where one run meets a person: pauses, take-overs, and the checks that call for a pause.

    Args:
        run: the run's record.
        allowlist: checks every observation a person's input leads to.
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist) -> None:
        self.run = run
        self.allowlist = allowlist
        self.loops = LoopDetector(threshold=run.limits.max_repeats)
        self.seen_quotes: set[str] = set()

    async def checkpoint(self, client: SandboxAPI) -> bool:
        """Honour a cancel, take-over or pause requested through the run's control.

        Returns:
            True when a human took the sandbox over meanwhile (the screen the agent saw is stale).

        Raises:
            RunCancelledError: the run was cancelled, or paused and not resumed.
        """
        control = self.run.control
        if control.cancel_reason is not None:
            raise RunCancelledError(control.cancel_reason, detail={"cause": "requested"})
        if control.takeover.requested_by is not None:
            await self.take_over(client, control.takeover.requested_by)
            return True
        if control.paused:
            return await self.pause(client, "requested", control.pause_reason, ())
        return False

    async def pause(self, client: SandboxAPI, kind: _PauseKind, message: str, evidence: tuple[str, ...]) -> bool:
        """Pause the run and wait for a human.

        Returns:
            When resumed: True if a human took the sandbox over meanwhile.

        Raises:
            RunCancelledError: cancelled, or not answered in time.
        """
        run = self.run
        before = run.sm.state
        run.sm.to(RunState.PAUSED, message)
        obs = run.last_obs
        took_over = False
        notice = PauseNotice(f"pause-{uuid.uuid4().hex[:8]}", run.run_id, kind, message, evidence,
                             redact_url(obs.url) if obs else None,
                             obs.screenshot.sha256 if obs and obs.screenshot else None,
                             run.question_timeout(run.policy.pause_timeout_s))
        run.emit("pause", id=notice.id, kind=kind, message=message, evidence=list(evidence), url=notice.url,
                 screenshot_sha256=notice.screenshot_sha256)
        answer = await run.answer(run.channel.review(notice), notice.timeout_s)
        if kind == "requested" and answer is None and not run.control.paused:
            answer = "resume"
        run.emit("pause_answer", id=notice.id, answer=answer or "none")
        if answer == "takeover":
            await self.take_over(client, run.control.takeover.requested_by or "human")
            took_over = True
            answer = "resume"
        if answer != "resume":
            raise RunCancelledError(f"paused ({message}) and not resumed", detail={"cause": kind})
        run.control.resume()
        run.sm.to(before, "resumed by a human")
        return took_over

    async def take_over(self, client: SandboxAPI, principal: str) -> None:
        """Hand the sandbox to the person ``principal`` (:mod:`deskpod.controller.takeover`): run
        their inputs on this run's sandbox connection, in order, until they hand it back; then
        release any button they left held. The caller re-observes before the agent plans again.

        Raises:
            RunCancelledError: the run was cancelled meanwhile.
            PolicyDeniedError: a tab left the allowlists after an input (the run stops).
            BadReplyError: the sandbox broke the wire contract.
        """
        run = self.run
        desk = run.control.takeover
        actor = f"human:{principal}"
        before = run.sm.state
        if before is not RunState.PAUSED:
            run.sm.to(RunState.PAUSED, f"taken over by {actor}")
        desk.begin(principal)
        run.emit("takeover", active=True, actor=actor)
        held: set[_Button] = set()
        try:
            while True:
                item = await run.answer(desk.next(), run.limits.max_wall_time_s)
                if item is None:
                    break
                try:
                    await self._human_input(client, item.action, actor, held)
                except (BadReplyError, RunCancelledError) as exc:
                    item.done.set_exception(exc)
                    raise
                except DeskpodError as exc:
                    item.done.set_exception(exc)
                    if run.control.cancel_reason is not None or (isinstance(exc, PolicyDeniedError)
                                                                 and exc.detail.get("where") == "after"):
                        raise
                else:
                    item.done.set_result(None)
        finally:
            for button in sorted(held):
                try:
                    await client.act([MouseUp(type="mouse_up", button=button)],
                                     ObserveOptions(screenshot=False, settle=False),
                                     timeout_s=run.limits.action_timeout_s)
                except DeskpodError as exc:
                    log.warning("%s: a button the person held was not released: %s", run.run_id, exc.message)
            desk.end()
            run.emit("takeover", active=False, actor=actor, released=sorted(held))
        run.control.resume()
        if before is not RunState.PAUSED:
            run.sm.to(before, f"handed back by {actor}")

    async def _human_input(self, client: SandboxAPI, action: Action, actor: str, held: set[_Button]) -> None:
        """Run one input of the person in control and write it to the audit log (``human_input``,
        ``actor``); typed text is redacted when the focus before or after it is a secret field.

        Raises:
            PolicyDeniedError: the policy blocks the action type, or a ``navigate`` or the
                address bar would load a URL an allowlist refuses (nothing sent; ``detail["where"]`` ``"before"``), or a
                tab is off the allowlists after it (``"after"``: the run stops).
            DeskpodError: the sandbox refused or failed it.
        """
        run = self.run
        focused = run.last_obs.focused if run.last_obs is not None else None
        elsewhere = run.last_obs is not None and run.last_obs.focus_window is not None
        record: dict[str, Any] = {"actor": actor, "started_at": utc_now()}
        try:
            if action.type in run.policy.blocked_actions:
                raise PolicyDeniedError(f"the policy blocks {action.type!r} actions", detail={"rule": "blocked_action"})
            if isinstance(action, Navigate):
                self.allowlist.before_loading(action.url, "navigate")
            typed = run.omnibox.step(action, focused, elsewhere)
            if typed is not None:
                self.allowlist.before_loading(typed, "omnibox")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "before"
            run.emit("human_input", **record, action=redact_action(action, True), outcome="denied",
                     error={"code": exc.code, "message": exc.message})
            raise
        try:
            obs = await client.act([action], ObserveOptions(screenshot=False, settle=False),
                                   timeout_s=run.limits.action_timeout_s)
        except DeskpodError as exc:
            run.emit("human_input", **record, action=redact_action(action, True), outcome="error",
                     error={"code": exc.code, "message": exc.message})
            raise
        if isinstance(action, MouseDown):
            held.add(action.button)
        elif isinstance(action, MouseUp):
            held.discard(action.button)
        sensitive = is_sensitive_field(focused) or is_sensitive_field(obs.focused)
        shown = redact_action(action, sensitive)
        run.recent_actions.append({**shown, "actor": actor})
        run.emit("human_input", **record, action=shown, outcome="ok", finished_at=utc_now(), url=redact_url(obs.url))
        run.last_obs = run.last_obs.model_copy(update={"focused": obs.focused}) if run.last_obs else obs
        try:
            self.allowlist.observed(obs, "takeover")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "after"
            raise

    async def screen_content(self, obs: Observation, client: SandboxAPI) -> None:
        """Pause on suspected prompt injection in what the page shows (when the policy says so):
        its text, title, dialog and other text sources, and the console messages and request
        URLs an observation carries.

        Raises:
            RunCancelledError: paused and not resumed.
        """
        if not self.run.policy.pause_on_injection:
            return
        sources = {"page_text": obs.page_text, "title": obs.title,
                   "dialog": obs.dialog.message if obs.dialog else None}
        sources.update((extra.source, extra.text) for extra in obs.text_sources or ())
        sources.update(scan_sources(obs))
        scan = scan_text(sources, self.seen_quotes)
        if scan.findings:
            self.run.emit("injection_scan", pause=scan.pause, evidence=list(scan.evidence()))
        if scan.pause:
            await self.pause(client, "injection", "the page seems to instruct the agent; it cannot authorize "
                             "anything, and nothing it asks for has been done", scan.evidence())

    async def loop_check(self, client: SandboxAPI, actions: list[ProposedAction], obs: Observation) -> None:
        """Pause when the agent ran the same actions on the same screen and URL too often.

        Raises:
            LimitExceededError: the loop's pause was not resumed (``max_repeats``).
        """
        shot = obs.screenshot
        if not self.loops.step(list(actions), obs.url, shot.perceptual_hash if shot else None):
            return
        self.run.emit("loop", step=self.run.steps, repeats=self.loops.repeats)
        message = f"loop detected: the same actions on the same screen and URL {self.loops.repeats} times in a row"
        try:
            await self.pause(client, "loop", message, ())
        except RunCancelledError:
            raise LimitExceededError(message, detail={"limit": "max_repeats"}) from None
        self.loops = LoopDetector(threshold=self.run.limits.max_repeats)
