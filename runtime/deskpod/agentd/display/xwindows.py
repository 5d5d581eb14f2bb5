"""The desktop's top-level windows through the window manager (EWMH), and the actions on them.

:class:`XWindows` lists the windows the window manager manages, front to back, from the root
window's ``_NET_CLIENT_LIST_STACKING`` and ``_NET_ACTIVE_WINDOW`` and each window's
``WM_CLASS``, ``_NET_WM_NAME`` (else ``WM_NAME``), ``_NET_WM_STATE``, ``_NET_WM_WINDOW_TYPE``
and ``WM_TRANSIENT_FOR`` (Extended Window Manager Hints,
https://specifications.freedesktop.org/wm-spec/latest/; openbox implements them). It focuses,
closes, moves and resizes one of them by asking the window manager, as a taskbar or pager
does: a ``_NET_ACTIVE_WINDOW``, ``_NET_CLOSE_WINDOW`` or ``_NET_MOVERESIZE_WINDOW`` client
message to the root window (source indication 2, a pager), then waits a moment
(:data:`WINDOW_ACTION_WAIT_S`) for the effect to show. A process is never signalled: a
window asked to close is its program's to close (openbox sends it ``WM_DELETE_WINDOW``, or
closes its X connection when it does not take that).

An action names a window of the latest list only (:meth:`XWindows.list_windows`); any other id, or a
window gone since: :class:`~deskpod.errors.NoWindowError`. Titles and applications are the
programs' own words, cut to printable text (:func:`window_label`).

Every call runs on the daemon's executor thread (:mod:`deskpod.agentd.executor`), on a
connection of its own; X and socket failures become :class:`~deskpod.errors.InputError` here,
once. Coordinates are int screen pixels; durations float seconds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.protocol import event as xevent

from deskpod.agentd.display.xconn import X_FAILURES, translating
from deskpod.errors import InputError, NoWindowError
from deskpod.protocol import CoordinateMap
from deskpod.protocol.windows import (
    MAX_WINDOW_LABEL_CHARS,
    MAX_WINDOWS,
    WindowAction,
    WindowClose,
    WindowFocus,
    WindowMove,
)

__all__ = [
    "WINDOW_ACTION_WAIT_S",
    "WindowInfo",
    "XWindows",
    "format_window_id",
    "is_modal",
    "moveresize_flags",
    "parse_window_id",
    "window_label",
    "wm_class_app",
]

WINDOW_ACTION_WAIT_S: Final = 1.0
"""Longest wait for a window action's effect to show (the focus moved, the window gone, its
box changed), seconds; a window manager or program that does otherwise is not an error: the
next list says what happened."""

_POLL_S: Final = 0.01
_SOURCE_PAGER: Final = 2
"""EWMH source indication of a pager or taskbar: the window manager honours its requests."""
_MAX_CORRECTION_PX: Final = 8
"""Largest miss of a move's corner corrected by a second request, screen pixels (a frame's border)."""
_STATIC_GRAVITY: Final = 10
"""``StaticGravity``: a ``_NET_MOVERESIZE_WINDOW``'s x and y place the client window itself,
its frame around it."""


@dataclass(frozen=True)
class WindowInfo:
    """One managed top-level window as read. ``id``: the client window's X resource id;
    ``app``: the class part of its ``WM_CLASS``; ``title``: its ``_NET_WM_NAME`` or ``WM_NAME``
    (either ``None`` when unset; :func:`window_label`); ``box``: [x0, y0, x1, y1] of the client
    window in screen pixels (the frame excluded); ``focused``: it is ``_NET_ACTIVE_WINDOW``;
    ``modal``: :func:`is_modal`."""

    id: int
    app: str | None
    title: str | None
    box: tuple[int, int, int, int]
    focused: bool
    modal: bool


def window_label(value: object) -> str | None:
    """A window's label as reported: text (bytes read as Latin-1, as ICCCM's ``STRING`` is),
    every unprintable character a space, stripped, at most :data:`MAX_WINDOW_LABEL_CHARS`
    characters; ``None`` for no text."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    text = "".join(c if c.isprintable() else " " for c in value).strip()
    return text[:MAX_WINDOW_LABEL_CHARS] or None


def wm_class_app(value: object) -> str | None:
    """The application of a ``WM_CLASS`` property's raw value: its class part, the second of
    its two NUL-terminated strings (ICCCM 4.1.2.5); ``None`` when it has none."""
    if isinstance(value, str):
        value = value.encode("latin-1", "replace")
    if not isinstance(value, bytes):
        return None
    parts = value.split(b"\0")
    return window_label(parts[1]) if len(parts) > 1 else None


def is_modal(states: Sequence[int], types: Sequence[int], transient_for: int, atoms: dict[str, int]) -> bool:
    """Whether a window is a modal dialog: ``_NET_WM_STATE_MODAL`` is among its ``states``, or
    it is transient for another window (``transient_for`` not 0) and of the dialog type (its
    ``_NET_WM_WINDOW_TYPE`` ``types`` hold ``_NET_WM_WINDOW_TYPE_DIALOG``, or are empty: EWMH
    takes a transient window without a type for a dialog). ``atoms``: those atoms' values by name."""
    if atoms["_NET_WM_STATE_MODAL"] in states:
        return True
    return bool(transient_for) and (not types or atoms["_NET_WM_WINDOW_TYPE_DIALOG"] in types)


def moveresize_flags(position: bool, size: bool) -> int:
    """The first datum of a ``_NET_MOVERESIZE_WINDOW``: static gravity, the x and y bits (8, 9)
    when ``position``, the width and height bits (10, 11) when ``size``, a pager's source
    indication (bits 12-15)."""
    return _STATIC_GRAVITY | (0x300 if position else 0) | (0xC00 if size else 0) | (_SOURCE_PAGER << 12)


def format_window_id(window: int) -> str:
    """A window's id on the wire: its X resource id in lower-case hex (``"0x1a00007"``)."""
    return f"0x{window:x}"


def parse_window_id(text: str) -> int | None:
    """The X resource id a wire id names (:func:`format_window_id`); ``None``: not one."""
    if not text.startswith("0x") or len(text) > 10:
        return None
    try:
        return int(text[2:], 16)
    except ValueError:
        return None


_ATOMS: Final = ("_NET_CLIENT_LIST_STACKING", "_NET_ACTIVE_WINDOW", "_NET_WM_NAME", "UTF8_STRING",
                 "_NET_WM_STATE", "_NET_WM_STATE_MODAL", "_NET_WM_WINDOW_TYPE", "_NET_WM_WINDOW_TYPE_DIALOG",
                 "_NET_CLOSE_WINDOW", "_NET_MOVERESIZE_WINDOW", "_NET_WM_STATE_MAXIMIZED_VERT",
                 "_NET_WM_STATE_MAXIMIZED_HORZ")


class XWindows:
    """The window manager's windows on one display (see the module).

    Args:
        display_name: the X display, e.g. ``":99"``.

    Raises:
        InputError: the display cannot be opened.
    """

    def __init__(self, display_name: str) -> None:
        try:
            self._display = Display(display_name)
        except (xerror.DisplayError, *X_FAILURES) as exc:
            raise InputError(f"cannot open X display {display_name!r} for its windows: {exc}") from exc
        # Errors of requests without a reply (a client message about a window gone meanwhile)
        # are of no use here: the list read after says what is.
        self._display.set_error_handler(lambda error, request: None)
        self._root = self._display.screen().root
        self._atoms = {name: self._display.intern_atom(name) for name in _ATOMS}
        self._listed: frozenset[int] = frozenset()

    @translating
    def list_windows(self) -> list[WindowInfo]:
        """The managed windows, the frontmost first, at most :data:`~deskpod.protocol.MAX_WINDOWS`
        (a window gone while it was read is left out). Action ids are checked against this list.

        Raises:
            InputError: the display could not be asked.
        """
        active = self._active()
        found: list[WindowInfo] = []
        for window_id in reversed(self._stacking()):
            if len(found) >= MAX_WINDOWS:
                break
            try:
                found.append(self._describe(window_id, active))
            except (xerror.BadWindow, xerror.BadDrawable, xerror.BadMatch):
                continue
        self._listed = frozenset(window.id for window in found)
        return found

    def act(self, action: WindowAction, coords: CoordinateMap) -> None:
        """Run a window action, its model-space numbers made screen pixels (``coords``).

        Raises:
            NoWindowError: its window is not in the latest list, or it is gone.
            InputError: the display could not be asked.
        """
        if isinstance(action, WindowFocus):
            self.focus(action.window_id)
        elif isinstance(action, WindowClose):
            self.close(action.window_id)
        elif isinstance(action, WindowMove):
            self.move(action.window_id, *coords.to_screen(action.x, action.y))
        else:
            self.resize(action.window_id, max(1, round(action.width * coords.scale_x)),
                        max(1, round(action.height * coords.scale_y)))

    @translating
    def focus(self, window_id: str) -> None:
        """Ask the window manager to activate (raise and focus) the window ``window_id``.

        Raises:
            NoWindowError: it is not in the latest list, or it is gone.
            InputError: the display could not be asked.
        """
        window = self._known(window_id)
        self._ask(window, "_NET_ACTIVE_WINDOW", [_SOURCE_PAGER, X.CurrentTime, 0, 0, 0])
        self._until(lambda: self._active() == window)

    @translating
    def close(self, window_id: str) -> None:
        """Ask the window manager to close the window ``window_id`` (its program decides).

        Raises:
            NoWindowError: it is not in the latest list, or it is gone.
            InputError: the display could not be asked.
        """
        window = self._known(window_id)
        self._ask(window, "_NET_CLOSE_WINDOW", [X.CurrentTime, _SOURCE_PAGER, 0, 0, 0])
        self._until(lambda: window not in self._stacking())

    @translating
    def move(self, window_id: str, x: int, y: int) -> None:
        """Ask the window manager to put the window ``window_id``'s top-left corner (its client
        window, the frame excluded) at screen point (``x``, ``y``).

        Raises:
            NoWindowError: it is not in the latest list, or it is gone.
            InputError: the display could not be asked.
        """
        window = self._restored(self._known(window_id))
        before = self._box(window)[:2]
        if before == (x, y):
            return
        self._ask(window, "_NET_MOVERESIZE_WINDOW", [moveresize_flags(True, False), x, y, 0, 0])
        self._until(lambda: self._box(window)[:2] != before)
        # A window manager may place the frame a border's width off the asked corner (openbox
        # does, by one pixel): asked once more, by what it missed.
        got = self._box(window)[:2]
        if got != (x, y) and abs(got[0] - x) <= _MAX_CORRECTION_PX and abs(got[1] - y) <= _MAX_CORRECTION_PX:
            self._ask(window, "_NET_MOVERESIZE_WINDOW",
                      [moveresize_flags(True, False), 2 * x - got[0], 2 * y - got[1], 0, 0])
            self._until(lambda: self._box(window)[:2] == (x, y))

    @translating
    def resize(self, window_id: str, width: int, height: int) -> None:
        """Ask the window manager to make the window ``window_id`` ``width`` x ``height`` screen
        pixels (its client window), its top-left corner kept.

        Raises:
            NoWindowError: it is not in the latest list, or it is gone.
            InputError: the display could not be asked.
        """
        window = self._restored(self._known(window_id))
        self._ask(window, "_NET_MOVERESIZE_WINDOW", [moveresize_flags(False, True), 0, 0, width, height])
        self._until(lambda: (lambda b: (b[2] - b[0], b[3] - b[1]))(self._box(window)) == (width, height))

    def disconnect(self) -> None:
        """Close the connection (idempotent; errors are ignored: the server may be gone)."""
        try:
            self._display.close()
        except (*X_FAILURES, xerror.DisplayError):
            pass

    def _known(self, window_id: str) -> int:
        """The X id of ``window_id`` when the latest list held it and the window manager still
        manages it."""
        window = parse_window_id(window_id)
        if window is None or window not in self._listed or window not in self._stacking():
            raise NoWindowError(f"no window {window_id!r} in the latest list of windows (observe with windows "
                                "to list them)", detail={"window_id": window_id})
        return window

    def _restored(self, window: int) -> int:
        """``window``, no longer maximized (a maximized window keeps the screen's size and place:
        the sandbox's window manager maximizes every window it maps), as a user's drag of its
        title bar does: a ``_NET_WM_STATE`` removing both maximized states."""
        states = self._cardinals(self._display.create_resource_object("window", window), "_NET_WM_STATE",
                                 Xatom.ATOM)
        maximized = [self._atoms[f"_NET_WM_STATE_MAXIMIZED_{axis}"] for axis in ("VERT", "HORZ")]
        if any(state in states for state in maximized):
            self._ask(window, "_NET_WM_STATE", [0, *maximized, _SOURCE_PAGER, 0])
            self._until(lambda: not any(state in maximized for state in self._cardinals(
                self._display.create_resource_object("window", window), "_NET_WM_STATE", Xatom.ATOM)))
        return window

    def _ask(self, window: int, message: str, data: list[int]) -> None:
        """Send the window manager the client message ``message`` about ``window``."""
        target = self._display.create_resource_object("window", window)
        self._root.send_event(
            xevent.ClientMessage(window=target, client_type=self._atoms[message], data=(32, data)),
            event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
        self._display.flush()

    def _until(self, done: Any) -> None:
        """Poll ``done()`` until true, at most :data:`WINDOW_ACTION_WAIT_S` (a window gone
        meanwhile ends the wait)."""
        deadline = time.monotonic() + WINDOW_ACTION_WAIT_S
        while time.monotonic() < deadline:
            try:
                if done():
                    return
            except (xerror.BadWindow, xerror.BadDrawable):
                return
            time.sleep(_POLL_S)

    def _cardinals(self, window: Any, name: str, kind: int) -> list[int]:
        prop = window.get_full_property(self._atoms[name], kind)
        return [int(v) for v in prop.value] if prop is not None else []

    def _stacking(self) -> list[int]:
        """``_NET_CLIENT_LIST_STACKING``: the managed windows, bottom to top."""
        return self._cardinals(self._root, "_NET_CLIENT_LIST_STACKING", Xatom.WINDOW)

    def _active(self) -> int:
        active = self._cardinals(self._root, "_NET_ACTIVE_WINDOW", Xatom.WINDOW)
        return active[0] if active else 0

    def _box(self, window: int) -> tuple[int, int, int, int]:
        resource = self._display.create_resource_object("window", window)
        geometry = resource.get_geometry()
        origin = resource.translate_coords(self._root, 0, 0)
        x0, y0 = -origin.x, -origin.y
        return x0, y0, x0 + geometry.width, y0 + geometry.height

    def _describe(self, window_id: int, active: int) -> WindowInfo:
        window = self._display.create_resource_object("window", window_id)
        wm_class = window.get_full_property(Xatom.WM_CLASS, Xatom.STRING)
        title = window.get_full_text_property(self._atoms["_NET_WM_NAME"], self._atoms["UTF8_STRING"])
        if not title:
            title = window.get_full_text_property(Xatom.WM_NAME, X.AnyPropertyType)
        transient = self._transient_for(window)
        modal = is_modal(self._cardinals(window, "_NET_WM_STATE", Xatom.ATOM),
                         self._cardinals(window, "_NET_WM_WINDOW_TYPE", Xatom.ATOM), transient, self._atoms)
        return WindowInfo(id=window_id, app=wm_class_app(wm_class.value if wm_class is not None else None),
                          title=window_label(title), box=self._box(window_id), focused=window_id == active,
                          modal=modal)

    @staticmethod
    def _transient_for(window: Any) -> int:
        prop = window.get_full_property(Xatom.WM_TRANSIENT_FOR, Xatom.WINDOW)
        return int(prop.value[0]) if prop is not None and len(prop.value) else 0
