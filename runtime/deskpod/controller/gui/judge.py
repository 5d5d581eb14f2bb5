"""Judging one action of a GUI run: its risk level from the action and the page under it.

An element action (by snapshot ref) is first replaced by what it runs as, resolved now
(:mod:`.element_actions`), and judged as the pixels it lands on. The control under an
action's point is read fresh unless the previous action's observation already describes
it. The level comes from the classifier (:mod:`deskpod.controller.policy.risk`) over that
control, the focused element and the open dialog; a ``navigate`` and the address bar's
typed URL are judged like a link to their URL (:func:`~deskpod.controller.policy.risk.link_risk`:
``L2`` for a host the run has not visited or a download) and refused when an allowlist
refuses it, before anything is sent (:meth:`~.allowlist.Allowlist.before_loading`); an unreadable page or an open
dialog raises the level (a ``navigate`` answers no dialog: with one open in its tab the
daemon refuses it); then the proposal's own rules (the policy's ``confirm_actions``, the
vendor's safety checks, the agent's own label) may raise it further, never lower it.
"""

from __future__ import annotations

from deskpod.controller.gui.element_actions import expand_element_action
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui.step_record import StepRecord
from deskpod.controller.gui_agent import Proposal
from deskpod.controller.keysplit import first_segment
from deskpod.controller.policy.levels import level_rank, max_level
from deskpod.controller.policy.risk import ActionClassifier, ActionContext, ActionRisk, action_point, link_risk
from deskpod.controller.sandbox import SandboxAPI
from deskpod.protocol import (
    Action,
    Click,
    ClickElement,
    CursorPosition,
    DialogAccept,
    DialogDismiss,
    DoubleClick,
    DragElement,
    FillForm,
    HoverElement,
    MouseDown,
    MouseUp,
    Navigate,
    Observation,
    ObserveOptions,
    Point,
    SelectOption,
    TripleClick,
    TypeElement,
    WindowClose,
    WindowFocus,
    WindowMove,
    WindowResize,
)

__all__ = ["ELEMENT_ACTIONS", "ElementAction", "Judge", "may_download"]

ElementAction = ClickElement | TypeElement | SelectOption | HoverElement | DragElement | FillForm
"""An action that names an element by its snapshot ref (:data:`~deskpod.protocol.ELEMENT_ACTION_TYPES`)."""

ELEMENT_ACTIONS = (ClickElement, TypeElement, SelectOption, HoverElement, DragElement, FillForm)
"""The classes of :data:`ElementAction`: judged as the pixels they land on."""

_POINTLESS_POINTER = (Click, DoubleClick, TripleClick, MouseUp, MouseDown)
"""Pointer actions that may act where the pointer is (no coordinates)."""

_DIALOG_ANSWERS = (DialogAccept, DialogDismiss)
"""Actions the classifier rates from the dialog they answer (any other action answering one is raised)."""

_WINDOW_ACTIONS = (WindowFocus, WindowClose, WindowMove, WindowResize)
"""Actions on a window by its id: judged by the window (:mod:`~deskpod.controller.policy.window_risk`),
never by the page."""

_NO_DIALOG_ANSWER = (*_DIALOG_ANSWERS, Navigate, *_WINDOW_ACTIONS)
"""Actions never raised for answering an open dialog: the answers themselves, ``navigate``
(it answers none: the daemon refuses it while its tab has a dialog open) and window actions
(they go to the window manager, not to the page)."""


def _ref(action: Action) -> str:
    """The ref ``action`` names itself (``""``: none; a ``fill_form`` names its fields')."""
    return action.ref if isinstance(action, (ClickElement, TypeElement, SelectOption, HoverElement, DragElement)) \
        else ""


def may_download(risk: ActionRisk) -> bool:
    """Whether an action judged ``risk`` and let through may start a download: downloads
    are ``L2``, so only an action at that level or above may (the daemon refuses others)."""
    return level_rank(risk.level) >= level_rank("L2")


class Judge:
    """Judges one run's actions (see the module).

    Args:
        run: the run's record (its policy, visited hosts and address-bar tracker).
        allowlist: refuses an address-bar URL off the allowlists.
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist) -> None:
        self.run = run
        self.allowlist = allowlist
        self.classifier = ActionClassifier(run.policy.l3_words, run.policy.l2_words, run.task.allow_clipboard_read)

    async def by_ref(self, client: SandboxAPI, step: StepRecord, action: ElementAction) -> Action:
        """Replace the element action ``action`` at ``step.index`` by what it runs as (resolved
        now, :func:`~.element_actions.expand_element_action`); each replacement remembers the
        ref it came from in ``step.via_of`` (by object id) for the audit record.
        ``step.current`` becomes the observation of the control at its point, ``step.asked``
        that point (model space; ``None`` when the action has none).

        Returns:
            The action now at ``step.index``.

        Raises:
            StaleRefError: the ref is not valid now.
            DeskpodError: the sandbox failed.
        """
        index, via_of = step.index, step.via_of
        now: Action = action
        resolved: Observation | None = None
        while isinstance(now, ELEMENT_ACTIONS) and resolved is None:
            origin = via_of.get(id(now)) or {"type": now.type, "ref": _ref(now)}
            expanded, resolved = await expand_element_action(client, now, self.run.limits.action_timeout_s)
            step.actions[index:index + 1] = expanded
            for item in expanded:
                via_of[id(item)] = {**origin, "ref": _ref(item) or origin["ref"]}
            now = expanded[0]
        assert resolved is not None and resolved.element_ref_point is not None
        point = resolved.element_ref_point
        self.run.emit("element_ref", step=self.run.steps, index=index, **via_of[id(now)], action=now.type,
                      point=[point.x, point.y])
        step.current = resolved
        step.asked = (point.x, point.y) if action_point(now) == (point.x, point.y) else None
        return now

    async def context(self, client: SandboxAPI, action: Action, current: Observation,
                      asked: tuple[int, int] | None) -> Observation:
        """An observation describing the control under ``action``'s point: ``current`` when it
        was taken with ``element_at`` at that point (``asked``), else a fresh one; for a window
        action, one listing the windows (``current`` when it does).

        Raises:
            DeskpodError: the sandbox failed.
        """
        timeout_s = self.run.limits.action_timeout_s
        point = action_point(action)
        if point is None and isinstance(action, _POINTLESS_POINTER):
            where = await client.act([CursorPosition(type="cursor_position")], ObserveOptions(screenshot=False,
                                     settle=False), timeout_s=timeout_s)
            point = (where.cursor.x, where.cursor.y) if where.cursor else None
        if isinstance(action, _WINDOW_ACTIONS) and current.windows is None:  # to name its window
            return await client.act([], ObserveOptions(screenshot=False, windows=True), timeout_s=timeout_s)
        if point is None or point == asked:
            return current
        return await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=point[0], y=point[1])),
                                timeout_s=timeout_s)

    def page_risk(self, action: Action, current: Observation) -> ActionRisk:
        """The level of ``action`` from the page as ``current`` shows it (no proposal rules).
        Call it once per action or piece that is about to run: the address bar's typed
        text is followed across calls (:class:`~deskpod.controller.gui.omnibox.OmniboxTracker`).

        Raises:
            PolicyDeniedError: an allowlist refuses the URL a ``navigate`` or the address bar
                would load (:meth:`~.allowlist.Allowlist.before_loading`).
        """
        tab_id = action.tab_id if isinstance(action, _DIALOG_ANSWERS) else None
        dialog = next((d for d in current.dialogs if d.tab_id == tab_id), None) if tab_id else current.dialog
        context = ActionContext(url=current.url, element=current.element_at, focused=current.focused,
                                visited_hosts=frozenset(self.run.visited_hosts), dialog=dialog,
                                window=current.window_at, focus_window=current.focus_window,
                                page_keys=current.page_keys, windows=current.windows, native_at=current.native_at,
                                native_focused=current.native_focused, native_dialog=current.native_dialog,
                                native_unread=any(u.part == "native" for u in current.unread),
                                file_chooser=current.file_chooser)
        risk = self.classifier.classify(action, context)
        if isinstance(action, Navigate):
            self.allowlist.before_loading(action.url, "navigate")
        typed = self.run.omnibox.step(action, current.focused, current.focus_window is not None)
        if typed is not None:
            self.allowlist.before_loading(typed, "omnibox")
            risk = link_risk(risk, typed, context, "the address bar")
        if current.url is None and risk.level != "L0" and not isinstance(action, _WINDOW_ACTIONS):
            risk = risk.raised("L2", "the page could not be inspected, so the target is unknown")
        if current.dialog is not None and risk.level != "L0" and not isinstance(action, _NO_DIALOG_ANSWER):
            risk = risk.raised("L2", f"answers a {current.dialog.type} dialog: {current.dialog.message[:80]!r}")
            if any(w.lower() in current.dialog.message.lower() for w in self.run.policy.l3_words):
                risk = risk.raised("L3", "the dialog asks about an irreversible action")
        return risk

    def confirmed_type(self, risk: ActionRisk, action: Action) -> ActionRisk:
        """``risk`` raised to ``L2`` when the policy's ``confirm_actions`` names ``action``'s type."""
        if action.type in self.run.policy.confirm_actions:
            return risk.raised("L2", f"the policy asks for a confirmation of every {action.type!r}")
        return risk

    def assess(self, action: Action, proposal: Proposal, current: Observation) -> ActionRisk:
        """The level of ``action`` of ``proposal`` with the page as ``current`` shows it.

        A keyboard action is judged by what lands on the element focused now; the rest of
        it is judged as it lands (:mod:`.keyed`). The proposal's rules apply to the whole action.

        Raises:
            PolicyDeniedError: an allowlist refuses the URL the address bar would load.
        """
        risk = self.confirmed_type(self.page_risk(first_segment(action, current.focused), current), action)
        if proposal.safety_checks:
            risk = risk.raised("L2", "the model vendor flagged it: " + "; ".join(proposal.safety_checks)[:300])
        if proposal.risk is not None and risk.level != max_level(risk.level, proposal.risk):
            risk = risk.raised(proposal.risk, "the agent itself rated it higher")
        return risk
