"""Windows as state: the desktop's top-level windows in the observation, and the actions on them.

The daemon lists the windows the window manager manages (EWMH's
``_NET_CLIENT_LIST_STACKING``, https://specifications.freedesktop.org/wm-spec/latest/) when
:attr:`~deskpod.protocol.ObserveOptions.windows` asks for them
(:attr:`~deskpod.protocol.Observation.windows`): the browser's window and its popups, and the
windows of the agent's own programs (a command run with ``display: true``). Four actions act on
one of them by its :attr:`Window.id` from the latest list, through the window manager
(EWMH client messages), never by signalling a process: :class:`WindowFocus`,
:class:`WindowClose`, :class:`WindowMove` and :class:`WindowResize`. An id the latest list
did not hold, or whose window is gone: error ``no_window``
(:class:`~deskpod.errors.NoWindowError`).

A window's title and application are the program's own words: untrusted text, cut to
:data:`MAX_WINDOW_LABEL_CHARS` characters of printable text, masked and scrubbed like every
other text of an observation.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT

__all__ = [
    "MAX_WINDOWS",
    "MAX_WINDOW_LABEL_CHARS",
    "WINDOW_ACTION_TYPES",
    "WINDOW_ZONES",
    "Window",
    "WindowAction",
    "WindowClose",
    "WindowFocus",
    "WindowId",
    "WindowMove",
    "WindowResize",
]

MAX_WINDOWS: Final = 32
"""Most windows :attr:`~deskpod.protocol.Observation.windows` lists (the frontmost kept)."""

MAX_WINDOW_LABEL_CHARS: Final = 200
"""Longest application name or title of a window reported (longer: cut)."""

WINDOW_ZONES: Final = ("sandbox", "agent")
"""Whose program a window is: ``"sandbox"``, the sandbox's own (the browser, its popups and
dialogs); ``"agent"``, a program of the agent's zone (an X client come in through a display
grant)."""

WindowId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
"""A window's id as the daemon names it (on X11: the client window's resource id in hex,
``"0x1a00007"``); opaque to the controller and the agent."""

_Label = Annotated[str, Field(max_length=MAX_WINDOW_LABEL_CHARS)]
_Coordinate = Annotated[int, Field(strict=True, ge=-(1 << 20), le=1 << 20)]
_Extent = Annotated[int, Field(strict=True, ge=1, le=16384)]


class Window(BaseModel):
    """One top-level window of the desktop, as the window manager lists it.

    ``id``: names it in a window action. ``app``: its application (the class part of its
    ``WM_CLASS``, e.g. ``"Chromium"``); ``title``: its ``_NET_WM_NAME`` (else ``WM_NAME``);
    either ``None`` when unset (the program's own words: untrusted). ``box``: [x0, y0, x1, y1]
    of its content in the model space, the window manager's frame excluded (it may reach
    past the screen's edges). ``focused``: it is the window manager's active window
    (``_NET_ACTIVE_WINDOW``): keys go to it. ``modal``: a dialog that holds its parent
    window (``_NET_WM_STATE_MODAL``, or a transient window, ``WM_TRANSIENT_FOR``, of the
    dialog type). ``zone``: whose program it is (:data:`WINDOW_ZONES`).
    """

    model_config = STRICT
    id: WindowId
    app: _Label | None = None
    title: _Label | None = None
    box: Annotated[list[_Coordinate], Field(min_length=4, max_length=4)]
    focused: bool = False
    modal: bool = False
    zone: Literal["sandbox", "agent"] = "sandbox"


class WindowFocus(BaseModel):
    """Raise the window ``window_id`` and give it the keyboard focus (EWMH
    ``_NET_ACTIVE_WINDOW``, as a taskbar asks). The window manager may refuse (a modal
    dialog keeps the focus on itself): the observation says which window has it."""

    model_config = STRICT
    type: Literal["window_focus"]
    window_id: WindowId


class WindowClose(BaseModel):
    """Ask the window ``window_id`` to close (EWMH ``_NET_CLOSE_WINDOW``, as its title bar's
    close button does): the program decides, and may ask first (a save prompt); closing may
    lose unsaved work. The observation's list says whether it closed."""

    model_config = STRICT
    type: Literal["window_close"]
    window_id: WindowId


class WindowMove(BaseModel):
    """Move the window ``window_id`` so its box's top-left corner is at (``x``, ``y``), model
    space, inside the screen (EWMH ``_NET_MOVERESIZE_WINDOW``); its size is kept."""

    model_config = STRICT
    type: Literal["window_move"]
    window_id: WindowId
    x: Annotated[int, Field(strict=True, description="pixels from the left, model space")]
    y: Annotated[int, Field(strict=True, description="pixels from the top, model space")]


class WindowResize(BaseModel):
    """Resize the window ``window_id``'s box to ``width`` x ``height`` model-space pixels
    (EWMH ``_NET_MOVERESIZE_WINDOW``), its top-left corner kept. The program's size hints
    may round or bound the size: the observation's box says what it became."""

    model_config = STRICT
    type: Literal["window_resize"]
    window_id: WindowId
    width: _Extent
    height: _Extent


WindowAction = WindowFocus | WindowClose | WindowMove | WindowResize
"""An action on one window by its id."""

WINDOW_ACTION_TYPES: Final = frozenset({"window_focus", "window_close", "window_move", "window_resize"})
"""The ``type`` of every :data:`WindowAction`."""
