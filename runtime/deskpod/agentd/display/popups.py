"""The popups on the screen: windows a browser draws its own UI in.

Chromium draws a ``<select>``'s list, the date and colour pickers, the context menu and
an autofill list in top-level windows of their own with ``override_redirect`` set (the
window manager leaves them alone), a moment after the input that opens them: it creates
the window, maps it 2-110 ms later (once it has something to show), and the colour
picker's content comes up to about 100 ms after that. :class:`Popups` follows these
windows from the root window's ``CreateNotify``, ``MapNotify`` and ``DestroyNotify``
events (``SubstructureNotifyMask``), which
:class:`~deskpod.agentd.display.damage.DamageMonitor` reads on its connection and hands
over; settling (:mod:`deskpod.agentd.settle`) asks :meth:`Popups.since` what was opened
since a request began.

Source: the X Window System Protocol, sections 8 (``CreateNotify``, ``MapNotify``,
``DestroyNotify``) and 3 (``CreateWindow``'s ``override-redirect``)
(https://www.x.org/releases/X11R7.7/doc/xproto/x11protocol.html). Times are
:func:`time.monotonic` seconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from Xlib import X

__all__ = ["MAX_UNMAPPED", "Opened", "POPUP_DRAW_S", "POPUP_MAP_S", "Popups"]

POPUP_DRAW_S: Final = 0.15
"""After a popup maps, the screen is not settled before this long past the map
(:mod:`deskpod.agentd.settle`): the colour picker's content came up to
100 ms after its window mapped on the shared 2-core machine (Chromium's fade-in of such
windows, another 150 ms, is off: ``--wm-window-animations-disabled``,
:mod:`deskpod.agentd.browser.chromium`)."""

POPUP_MAP_S: Final = 0.5
"""Longest wait for a popup created since the request began to map: Chromium maps it
2-110 ms after creating it on the shared machine (once it has something to show)."""

MAX_UNMAPPED: Final = 64
"""Most popups kept as created and not yet mapped; the oldest is forgotten past it (a
window a client creates and never maps or destroys would otherwise be kept for ever)."""


@dataclass(frozen=True)
class Opened:
    """What :meth:`Popups.since` reports: ``mapped_at``, when the last popup mapped since
    then did (``None``: none did); ``created_at``, when the first popup created since then
    and not yet mapped or destroyed was created (``None``: none is waiting to map)."""

    mapped_at: float | None
    created_at: float | None

    def drawn_by(self) -> float | None:
        """When the popups opened are drawn at the latest (:func:`time.monotonic`; ``None``:
        none opened): :data:`POPUP_DRAW_S` past the last map, and :data:`POPUP_MAP_S` past
        the creation of one not mapped yet."""
        until = [self.mapped_at + POPUP_DRAW_S] if self.mapped_at is not None else []
        until += [self.created_at + POPUP_MAP_S] if self.created_at is not None else []
        return max(until) if until else None


class Popups:
    """The override-redirect top-level windows created and mapped, counted.

    :meth:`on_event` is called from the reader thread; :attr:`seq` and :meth:`since` may
    be read from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._mapped: tuple[int, float] = (0, 0.0)  # the last map: its seq and time
        self._unmapped: dict[int, tuple[int, float]] = {}  # window id -> its creation's seq and time

    @property
    def seq(self) -> int:
        """The number of popups created or mapped so far (a mark to pass to :meth:`since`)."""
        return self._seq

    def on_event(self, event: Any) -> None:
        """Note a root window's ``CreateNotify``, ``MapNotify`` or ``DestroyNotify`` event
        (python-xlib's event object; others are ignored)."""
        kind, now = event.type, time.monotonic()
        with self._lock:
            if kind == X.CreateNotify and event.override:
                self._seq += 1
                self._unmapped[event.window.id] = (self._seq, now)
                if len(self._unmapped) > MAX_UNMAPPED:
                    del self._unmapped[next(iter(self._unmapped))]
            elif kind == X.MapNotify and event.override:
                self._seq += 1
                self._unmapped.pop(event.window.id, None)
                self._mapped = (self._seq, now)
            elif kind == X.DestroyNotify:
                self._unmapped.pop(event.window.id, None)

    def since(self, seq: int) -> Opened:
        """What was opened after :attr:`seq` read ``seq`` (:class:`Opened`)."""
        with self._lock:
            mapped_seq, mapped_at = self._mapped
            waiting = [at for created, at in self._unmapped.values() if created > seq]
        return Opened(mapped_at if mapped_seq > seq else None, min(waiting) if waiting else None)
