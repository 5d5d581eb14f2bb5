"""One ``act`` request's batch: its actions, what they run with and what they produced.

:func:`validate_batch` checks every point and key name before anything runs, so a bad
batch has no effect; :class:`Batch` is handed whole from
:meth:`~deskpod.agentd.executor.Executor.run` to each step; :class:`BatchOutcome` is what
the observation reports besides the batch's effects.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deskpod import keys
from deskpod.agentd.display.actions import chord_names
from deskpod.agentd.screen_check import ControlCheck
from deskpod.errors import DeskpodError, ExecutionError
from deskpod.protocol import (
    Action,
    ActionTiming,
    CoordinateMap,
    DialogAccept,
    DialogDismiss,
    HoldKey,
    Keypress,
    Navigate,
    OpenApp,
    Point,
    RecoverTab,
    ScreenExpectation,
    Screenshot,
    WindowMove,
    action_points,
)

__all__ = ["Batch", "BatchOutcome", "DialogAnswer", "Load", "Open", "PageProbe", "Recover", "validate_batch"]

PageProbe = Callable[[bool], Awaitable[tuple[str | None, str | None]]]
"""``probe(with_text)`` → ``(url, page_text)`` of the active tab (text only when asked)."""

DialogAnswer = Callable[[DialogAccept | DialogDismiss], Awaitable[None]]
"""Answers a JavaScript dialog through the browser (``dialog_accept``, ``dialog_dismiss``)."""

Load = Callable[[Navigate], Awaitable[None]]
"""Loads a ``navigate`` action's URL in the active tab through the browser (raises
:class:`~deskpod.errors.NavigationError` when it does not load)."""

Recover = Callable[[RecoverTab], Awaitable[object]]
"""Recovers a tab whose page does not answer, for ``recover_tab``
(:func:`deskpod.agentd.browser.recovery.recover_tab`)."""

Open = Callable[[OpenApp], Awaitable[object]]
"""Starts a desktop application, for ``open_app`` (:meth:`deskpod.agentd.apps_client.AppsClient.open`)."""


@dataclass
class BatchOutcome:
    """What a batch produced besides its effects: timings, the pointer position
    (model space, after ``cursor_position``), a zoomed image (after ``zoom``) and the
    clipboard's text (after ``clipboard_read``)."""

    timings: list[ActionTiming] = field(default_factory=list)
    cursor: Point | None = None
    zoom: Screenshot | None = None
    clipboard: str | None = None



@dataclass
class Batch:
    """One ``act`` request's actions and everything they run with, handed whole from
    :meth:`Executor.run` to each step.

    Args:
        actions: validated protocol actions (see :func:`validate_batch`).
        coords: maps their model-space points to screen pixels.
        cancel: set by the caller when the client goes away; stops the batch between
            actions and interrupts waits, typing, drags and scrolls.
        probe: reads the active tab's URL and text, for ``wait_for``.
        expect: checked right before each bound pointer action's input (``None``: no check).
        control: checks the control and URL once the pointer is on a press action's point
            (with ``expect``).
        answer: answers dialogs, for ``dialog_accept`` and ``dialog_dismiss`` (``None``:
            those actions fail with ``execution_failed``).
        load: loads a URL, for ``navigate`` (``None``: it fails with ``execution_failed``).
        recover: recovers a tab, for ``recover_tab`` (``None``: it fails with ``execution_failed``).
        open_app: starts a desktop application, for ``open_app`` (``None``: it fails with
            ``execution_failed``).
    """

    actions: Sequence[Action]
    coords: CoordinateMap
    cancel: threading.Event
    probe: PageProbe
    expect: ScreenExpectation | None = None
    control: ControlCheck | None = None
    answer: DialogAnswer | None = None
    load: Load | None = None
    recover: Recover | None = None
    open_app: Open | None = None
    outcome: BatchOutcome = field(default_factory=BatchOutcome)
    """What the batch has produced so far."""
    pressed: bool = False
    """Whether a press action has run in the request so far (the control is checked
    before the first one only)."""

    def handler(self, action: Action) -> Callable[[Any], Awaitable[object]] | None:
        """What carries out ``action`` instead of input: the dialog answer, the load, the tab
        recovery or the application start this batch was given; ``None`` for any other action.

        Raises:
            ExecutionError: ``action`` needs one this batch was not given.
        """
        delegated: tuple[tuple[type | tuple[type, ...], Callable[[Any], Awaitable[object]] | None, str], ...] = (
            ((DialogAccept, DialogDismiss), self.answer, "answer dialogs: no browser"),
            (RecoverTab, self.recover, "recover tabs: no browser"),
            (Navigate, self.load, "navigate: no browser"),
            (OpenApp, self.open_app, "open applications"))
        for kinds, handler, missing in delegated:
            if isinstance(action, kinds):
                if handler is None:
                    raise ExecutionError(f"this executor cannot {missing}")
                return handler
        return None



def validate_batch(actions: Sequence[Action], coords: CoordinateMap) -> None:
    """Check every point and key name of a batch before anything runs.

    Raises:
        OutOfBoundsError: a point (or a ``window_move``'s corner) lies outside the model space
            (``detail["action_index"]`` says which action).
        UnknownKeyError: a key name maps to no keysym.
    """
    for index, action in enumerate(actions):
        try:
            for point in action_points(action):
                coords.check(point.x, point.y)
            if isinstance(action, WindowMove):  # where the window goes: on the screen
                coords.check(action.x, action.y)
            if isinstance(action, (Keypress, HoldKey)):
                keys.resolve_chord(chord_names(action.keys))
            held = getattr(action, "hold_keys", None)
            if held:
                keys.resolve_chord(chord_names(held))
        except DeskpodError as exc:
            exc.detail.update({"action_index": index, "action": action.type})
            raise
