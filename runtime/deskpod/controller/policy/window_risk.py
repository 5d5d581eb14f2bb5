"""Risk levels of window actions (:mod:`deskpod.protocol.windows`), and how a person is told the window.

Focusing, moving and resizing a window are ``L1``: reversible, as a click on it or a drag of
its title bar is. Closing one is ``L2``: its program may lose unsaved work (a document closed
without saving), and a prompt it shows then is judged on its own. The window is named from the latest list the controller was given
(:attr:`deskpod.protocol.Observation.windows`): its application and title, the program's own
words, shown quoted and cut, never obeyed.
"""

from __future__ import annotations

from collections.abc import Sequence

from deskpod.controller.policy.levels import RiskLevel
from deskpod.protocol import Window, WindowAction, WindowClose, WindowFocus, WindowMove

__all__ = ["describe_listed_window", "window_action_risk"]


def describe_listed_window(window_id: str, windows: Sequence[Window] | None) -> str:
    """The window ``window_id`` for a person: ``"'Chromium' window 'Title'"``, with ``of the
    agent's program`` for an agent's window; ``"window 0x1a00007"`` when the list does not hold it
    (or none was given)."""
    listed = next((w for w in windows or () if w.id == window_id), None)
    if listed is None:
        return f"window {window_id}"
    owner = " of the agent's program" if listed.zone == "agent" else ""
    app = f"{listed.app.strip()[:60]!r} " if listed.app else ""
    title = f" {listed.title.strip()[:80]!r}" if listed.title else ""
    return f"{app}window{owner}{title}"


def window_action_risk(action: WindowAction, windows: Sequence[Window] | None
                       ) -> tuple[RiskLevel, tuple[str, ...], str]:
    """The level of a window action, its reasons and its target (:func:`describe_listed_window`).

    Args:
        action: the window action.
        windows: the latest list of windows the controller has (``None``: none).
    """
    target = describe_listed_window(action.window_id, windows)
    if isinstance(action, WindowClose):
        return "L2", ("closes a window: its program may lose unsaved work",), target
    if isinstance(action, WindowFocus):
        return "L1", ("raises a window and gives it the keyboard focus: keys go to it next",), target
    if isinstance(action, WindowMove):
        return "L1", (f"moves a window to ({action.x}, {action.y})",), target
    return "L1", (f"resizes a window to {action.width}x{action.height}",), target
