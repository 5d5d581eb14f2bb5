"""One X connection for synthesised input: XTEST requests, syncs, errors and pings.

:class:`XConnection` opens the display, checks for the XTEST extension, sends fake
events and waits for the server to process them (:meth:`XConnection.sync` raises any
X error the server reported). :meth:`XConnection.ping_focused` asks the client with the
keyboard focus to confirm, through a ``_NET_WM_PING`` (EWMH) round trip, that it has
handled every event sent so far; :meth:`XConnection.sync_window_manager` asks the same of
the window manager, through a ``_NET_REQUEST_FRAME_EXTENTS`` round trip. :func:`translating` turns python-xlib and socket
failures into :class:`~deskpod.errors.InputError`, once, at this boundary.

Every call must come from one thread, serially; the only exception is setting a
``cancel`` event, which any thread may do. Durations are float seconds.
"""

from __future__ import annotations

import functools
import itertools
import select
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import Any, Final, NoReturn, ParamSpec, TypeVar

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import xtest
from Xlib.protocol import event as xevent

from deskpod.errors import DeskpodError, InputError

__all__ = [
    "PING_TIMEOUT_S",
    "XConnection",
    "X_FAILURES",
    "check_cancel",
    "translating",
    "x_failures_become",
]

PING_TIMEOUT_S: Final = 10.0
"""Longest wait for the focused client's ``_NET_WM_PING`` answer (see
:meth:`XConnection.ping_focused`)."""

X_FAILURES: Final = (xerror.XError, xerror.ConnectionClosedError, OSError)
"""What a broken or refusing X connection raises (python-xlib and the socket)."""

WM_SYNC_TIMEOUT_S: Final = 5.0
"""Longest wait for the window manager's answer to ``_NET_REQUEST_FRAME_EXTENTS`` (see
:meth:`XConnection.sync_window_manager`)."""

_PING_TOKEN_BASE: Final = 0x7D000000  # far from a window manager's own ping serials
_MAX_WINDOW_DEPTH: Final = 16

_P = ParamSpec("_P")
_R = TypeVar("_R")


def x_failures_become(
    error: Callable[[str, BaseException], DeskpodError],
    lock_of: Callable[[Any], AbstractContextManager[Any]] | None = None,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A method decorator: python-xlib and socket failures (:data:`X_FAILURES` and Xlib's
    ``DisplayError``) raised by the method become ``error(method name, exception)``; a
    :class:`DeskpodError` passes unchanged. With ``lock_of``, the method runs holding
    ``lock_of(self)``."""

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(method)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with lock_of(args[0]) if lock_of is not None else nullcontext():
                try:
                    return method(*args, **kwargs)
                except DeskpodError:
                    raise
                except (*X_FAILURES, xerror.DisplayError) as exc:
                    raise error(method.__name__, exc) from exc

        return wrapper

    return decorate


translating = x_failures_become(lambda operation, exc: InputError(
    f"X input failed in {operation}: {type(exc).__name__}: {exc}", detail={"operation": operation}))
"""Turn python-xlib and socket failures into :class:`InputError` (once, here)."""


def check_cancel(cancel: threading.Event | None, operation: str) -> None:
    """Raise :class:`InputError` (``detail["interrupted"]``) when ``cancel`` is set.

    Raises:
        InputError: ``cancel`` is set; the message names ``operation``.
    """
    if cancel is not None and cancel.is_set():
        raise InputError(f"{operation} interrupted", detail={"interrupted": True})


class XConnection:
    """An open X display with the XTEST extension.

    Args:
        display_name: the X display, e.g. ``":99"``; ``None`` uses ``$DISPLAY``.

    Raises:
        InputError: the display cannot be opened, or the server lacks XTEST.
    """

    def __init__(self, display_name: str | None = None, unpinged: Callable[[int], bool] | None = None) -> None:
        self.closed = False
        self.unpinged: Callable[[int], bool] = unpinged or (lambda window: False)
        """Whether a top-level window is not to be pinged (:meth:`ping_focused`): an agent's
        client's, which the X server keeps from answering (its SECURITY extension does not
        deliver an untrusted client's ``ClientMessage`` to the root, where the answer goes, to
        this trusted connection: seen on Xvfb 21); keys to it are paced by estimate."""
        self.sent: Counter[tuple[int, int]] = Counter()
        """XTEST key and button events sent so far: ``(event_type, button)`` → how many
        (key events are counted under button 0, whatever their keycode)."""
        try:
            self.display = Display(display_name)
        except (xerror.DisplayError, xerror.XauthError, xerror.XNoAuthError, OSError) as exc:
            raise InputError(
                f"cannot open X display {display_name or '$DISPLAY'!r}: {exc}",
                detail={"display": display_name},
            ) from exc
        self.display_name: str = self.display.get_display_name()
        self._x_errors: list[str] = []
        self._ping_tokens = itertools.count(_PING_TOKEN_BASE)
        self._wm_probe: Any | None = None  # our unmapped window the WM answers about
        try:
            if not self.display.has_extension("XTEST"):
                raise InputError(
                    f"X display {self.display_name!r} has no XTEST extension",
                    detail={"display": self.display_name},
                )
            self.display.set_error_handler(self._on_x_error)
            self.root = self.display.screen().root
            self._wm_protocols = self.display.intern_atom("WM_PROTOCOLS")
            self._net_wm_ping = self.display.intern_atom("_NET_WM_PING")
            # Pongs come back to the root window with SubstructureNotify.
            self.root.change_attributes(event_mask=X.SubstructureNotifyMask)
        except BaseException as exc:
            self.abandon(exc)

    def abandon(self, exc: BaseException) -> NoReturn:
        """Close the connection after a failure while setting up input, and raise.

        Args:
            exc: what failed.

        Raises:
            InputError: ``exc`` was an X or socket failure (chained).
            BaseException: ``exc`` itself, otherwise.
        """
        self.close()
        if isinstance(exc, X_FAILURES):
            raise InputError(
                f"cannot set up input on X display {self.display_name!r}: {exc}",
                detail={"display": self.display_name},
            ) from exc
        raise exc

    def fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0, delay_ms: int = 0,
             closing: bool = False) -> None:
        """Send one XTEST fake event (not flushed) and count it in :attr:`sent`.

        Args:
            event_type: ``X.KeyPress``, ``X.ButtonRelease``, ``X.MotionNotify``, ...
            detail: the keycode or button number.
            x: screen pixels from the left (motion only).
            y: screen pixels from the top (motion only).
            delay_ms: milliseconds the server waits before it processes the event.
            closing: send it although the connection is being closed (what is held is
                released on the way out).

        Raises:
            InputError: the connection was closed.
        """
        if self.closed and not closing:
            raise InputError("XInput is closed", detail={"display": self.display_name})
        # For XTEST, "time" is a delay in ms before the server processes the event.
        xtest.fake_input(self.display, event_type, detail, time=delay_ms, x=x, y=y)
        if event_type in (X.ButtonPress, X.ButtonRelease):
            self.sent[event_type, detail] += 1
        elif event_type in (X.KeyPress, X.KeyRelease):
            self.sent[event_type, 0] += 1

    def sync(self) -> None:
        """Wait until the server has processed everything; raise any X error it reported.

        Raises:
            InputError: the server reported errors since the last sync.
        """
        self.display.sync()
        while self.display.pending_events():  # MappingNotify etc.; we select no events
            self.display.next_event()
        if self._x_errors:
            errors, self._x_errors = self._x_errors, []
            raise InputError(f"X server rejected input: {'; '.join(errors)[:500]}")

    def flush_and_pause(self, seconds: float) -> None:
        """Send what is buffered, then sleep ``seconds`` (nothing when not positive)."""
        self.display.flush()
        if seconds > 0:
            time.sleep(seconds)

    def ping_focused(self, timeout_s: float, cancel: threading.Event | None = None) -> bool:
        """Send the focused top-level window a ``_NET_WM_PING`` and wait for its answer.

        Args:
            timeout_s: longest wait for the answer, seconds.
            cancel: when set (from any thread), stop waiting and raise :class:`InputError`.

        Returns:
            True once the client answered; False at once if no window has the focus, the
            focused client does not support ``_NET_WM_PING`` or its window is :attr:`unpinged`.

        Raises:
            InputError: no answer within ``timeout_s`` or ``cancel`` was set.
        """
        target = self._ping_target()
        if target is None or self.unpinged(target.id):
            return False
        token = next(self._ping_tokens) & 0xFFFFFFFF
        target.send_event(
            xevent.ClientMessage(
                window=target,
                client_type=self._wm_protocols,
                data=(32, [self._net_wm_ping, token, target.id, 0, 0]),
            ),
            event_mask=X.NoEventMask,
        )
        self.display.flush()
        deadline = time.monotonic() + timeout_s
        while True:
            while self.display.pending_events():
                event = self.display.next_event()
                if (
                    event.type == X.ClientMessage
                    and event.client_type == self._wm_protocols
                    and list(event.data[1][:2]) == [self._net_wm_ping, token]
                ):
                    return True
            check_cancel(cancel, "waiting for the focused client")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InputError(
                    f"the focused window 0x{target.id:x} did not confirm handling input "
                    f"within {timeout_s} s",
                    detail={"window": target.id, "timeout_s": timeout_s},
                )
            select.select([self.display.fileno()], [], [], min(remaining, 0.05))

    def sync_window_manager(self, timeout_s: float = WM_SYNC_TIMEOUT_S,
                            cancel: threading.Event | None = None) -> bool:
        """Wait until the window manager has handled every event the server sent it so far.

        Asks it for the frame extents of an unmapped window of ours (EWMH
        ``_NET_REQUEST_FRAME_EXTENTS``, https://specifications.freedesktop.org/wm-spec/latest/):
        it answers by setting ``_NET_FRAME_EXTENTS`` on that window, from its event loop, so
        the answer comes after it has handled, in order, every earlier event, such as the
        ``MappingNotify`` each keymap change sends every client. A window manager that falls
        behind on those holds the pointer frozen for its click-to-focus grab, and every click
        waits for it.

        Args:
            timeout_s: longest wait for the answer, seconds.
            cancel: when set (from any thread), stop waiting and raise :class:`InputError`.

        Returns:
            True once the window manager answered; False at once when no window manager
            lists the request in the root window's ``_NET_SUPPORTED``, and when it did not
            answer within ``timeout_s``.

        Raises:
            InputError: ``cancel`` was set.
        """
        request = self.display.intern_atom("_NET_REQUEST_FRAME_EXTENTS")
        supported = self.root.get_full_property(self.display.intern_atom("_NET_SUPPORTED"), Xatom.ATOM)
        if supported is None or request not in supported.value:
            return False
        extents = self.display.intern_atom("_NET_FRAME_EXTENTS")
        if self._wm_probe is None:
            self._wm_probe = self.root.create_window(0, 0, 1, 1, 0, X.CopyFromParent, X.InputOnly,
                                                     X.CopyFromParent, event_mask=X.PropertyChangeMask)
        self.root.send_event(
            xevent.ClientMessage(window=self._wm_probe, client_type=request, data=(32, [0, 0, 0, 0, 0])),
            event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask,
        )
        self.display.flush()
        deadline = time.monotonic() + timeout_s
        while True:
            while self.display.pending_events():
                event = self.display.next_event()
                if event.type == X.PropertyNotify and event.window == self._wm_probe and event.atom == extents:
                    return True
            check_cancel(cancel, "waiting for the window manager")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([self.display.fileno()], [], [], min(remaining, 0.05))

    def close(self) -> None:
        """Close the connection; errors are ignored (the server may be gone)."""
        self.closed = True
        with suppress(*X_FAILURES):
            self.display.close()

    def _on_x_error(self, err: xerror.XError, request: Any) -> None:
        self._x_errors.append(str(err))

    def _ping_target(self) -> Any | None:
        """The top-level window of the focused client if it answers ``_NET_WM_PING``."""
        focus = self.display.get_input_focus().focus
        window = focus if hasattr(focus, "query_tree") else None
        try:
            for _ in range(_MAX_WINDOW_DEPTH):
                if window is None or window.id == self.root.id:
                    return None
                protocols = window.get_full_property(self._wm_protocols, Xatom.ATOM)
                if protocols is not None and self._net_wm_ping in protocols.value:
                    return window
                window = window.query_tree().parent
        except xerror.XError:  # the window went away while we looked
            return None
        return None
