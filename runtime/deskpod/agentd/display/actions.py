"""Protocol actions as X input: one pointer, key or wait action on the X thread.

:func:`execute` runs a validated action (:mod:`deskpod.protocol`) on an
:class:`~deskpod.agentd.display.xinput.XInput` connection, with the keys of its
``hold_keys`` held around it (:func:`held`); coordinates come in the model space and are
mapped to screen pixels by a :class:`~deskpod.protocol.CoordinateMap`. The executor
(:mod:`deskpod.agentd.executor`) calls it on its one X thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal

from deskpod import keys
from deskpod.agentd.display.xinput import XInput
from deskpod.errors import ExecutionError
from deskpod.protocol import (
    Action,
    Click,
    CoordinateMap,
    CursorPosition,
    DoubleClick,
    Drag,
    HoldKey,
    Keypress,
    MouseDown,
    MouseUp,
    Move,
    Scroll,
    TakeScreenshot,
    TripleClick,
    TypeText,
    Wait,
)

__all__ = ["CANCELLED", "chord_names", "execute", "held"]

CANCELLED: Final = "cancelled"
"""What :func:`execute` returns when the request was cancelled (timeout, disconnect)
during a wait or a held key."""


def chord_names(names: Sequence[str]) -> list[str]:
    """Key names of a chord; an element may itself be chord text such as ``"ctrl+a"``."""
    return [name for item in names for name in keys.parse_chord(item)]


@contextmanager
def held(xin: XInput, names: Sequence[str]) -> Iterator[None]:
    """Hold the keys ``names`` (chords allowed) down while the block runs; release them,
    in reverse order, however it ends.

    Raises:
        UnknownKeyError: a key name maps to no keysym (nothing pressed).
    """
    keysyms = keys.resolve_chord(chord_names(names)) if names else []
    down: list[str] = []
    for keysym in keysyms:
        xin.key_down(keysym)
        down.append(keysym)
    try:
        yield
    finally:
        for keysym in reversed(down):
            xin.key_up(keysym)


def _point(xin: XInput, action: Any, coords: CoordinateMap) -> tuple[int, int]:
    """The action's point in screen pixels; the pointer's position when it names none."""
    if action.x is None:
        return xin.pointer_position()
    return coords.to_screen(action.x, action.y)


def execute(xin: XInput, action: Action, coords: CoordinateMap,
            cancel: threading.Event) -> tuple[int, int] | Literal["cancelled"] | None:
    """Run one pointer, key or wait action as X input (on the thread that owns ``xin``).

    Args:
        xin: the X input connection.
        action: a validated protocol action (an element action already resolved).
        coords: maps its model-space points to screen pixels.
        cancel: set when the request is cancelled; interrupts waits, typing, drags and scrolls.

    Returns:
        The model-space pointer position for ``cursor_position``; :data:`CANCELLED` when
        ``cancel`` was set during a wait or a held key; else ``None``.

    Raises:
        ExecutionError: the action is not one this function runs.
        InputError: the X server refused the input.
    """
    if isinstance(action, (Click, DoubleClick, TripleClick)):
        count = {"click": 1, "double_click": 2, "triple_click": 3}[action.type]
        button = action.button if isinstance(action, Click) else "left"
        x, y = _point(xin, action, coords)
        with held(xin, action.hold_keys):
            xin.click(x, y, button=button, count=count)
    elif isinstance(action, (MouseDown, MouseUp)):
        if action.x is not None:
            xin.move(*coords.to_screen(action.x, action.y))  # type: ignore[arg-type]
        (xin.button_down if isinstance(action, MouseDown) else xin.button_up)(action.button)
    elif isinstance(action, Move):
        with held(xin, action.hold_keys):
            xin.move(*coords.to_screen(action.x, action.y))
    elif isinstance(action, Drag):
        with held(xin, action.hold_keys):
            xin.drag([coords.to_screen(p.x, p.y) for p in action.path], button="left", cancel=cancel)
    elif isinstance(action, Scroll):
        with held(xin, action.hold_keys):
            xin.scroll(*coords.to_screen(action.x, action.y), action.scroll_x, action.scroll_y, cancel=cancel)
    elif isinstance(action, Keypress):
        xin.keypress(chord_names(action.keys))
    elif isinstance(action, HoldKey):
        with held(xin, action.keys):
            if cancel.wait(action.seconds):
                return CANCELLED
    elif isinstance(action, TypeText):
        xin.type_text(action.text, cancel=cancel)
        xin.wait_until_handled(cancel=cancel)
    elif isinstance(action, Wait):
        if cancel.wait(action.seconds):
            return CANCELLED
    elif isinstance(action, CursorPosition):
        return coords.to_model(*xin.pointer_position())
    elif isinstance(action, TakeScreenshot):
        pass  # the observation after the batch carries the screenshot
    else:  # pragma: no cover - protocol and executor out of step
        raise ExecutionError(f"no executor for action {action!r}")
    return None
