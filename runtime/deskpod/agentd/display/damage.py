"""Screen-change signals from the X server's DAMAGE extension.

:class:`DamageMonitor` opens its own X connection, asks the server to report damage
to the root window (which covers every drawing on the screen: Xvfb draws all windows
into it) and counts the reports. A report is requested at the ``NonEmpty`` level and
the damage is subtracted after each one, so the server sends one event per burst of
drawing rather than one per rectangle. Consumers read :attr:`DamageMonitor.seq` before
an operation and ask :meth:`DamageMonitor.damaged_since` or await
:meth:`DamageMonitor.wait_for_change` after it, instead of polling pixels.

The pointer is not part of the damage: the X server draws the cursor as an overlay.

The same connection follows the **popups** (:attr:`DamageMonitor.popups`,
:mod:`deskpod.agentd.display.popups`): the root window's top-level windows are selected
with ``SubstructureNotifyMask`` and their ``CreateNotify``, ``MapNotify`` and
``DestroyNotify`` events handed over.

Source: the X DAMAGE extension protocol, version 1.1
(https://gitlab.freedesktop.org/xorg/proto/xorgproto/-/blob/master/damageproto.txt).
Durations are float seconds, times are :func:`time.monotonic` seconds.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from contextlib import suppress
from typing import Final

from Xlib import X
from Xlib.display import Display
from Xlib.ext import damage as xdamage

from deskpod.agentd.display.popups import Popups
from deskpod.errors import CaptureError

__all__ = ["DamageMonitor"]

_JOIN_S: Final = 2.0
"""How long :meth:`DamageMonitor.close` waits for the reader thread (woken at once by its pipe)."""


_WINDOW_EVENTS: Final = (X.CreateNotify, X.MapNotify, X.DestroyNotify)
"""The root's ``SubstructureNotify`` events :class:`~deskpod.agentd.display.popups.Popups` follows."""


class DamageMonitor:
    """Counts the X server's damage reports for the whole screen, and follows the popups.

    Args:
        display: the X display name, e.g. ``":99"``.

    :meth:`start` opens the connection and the reader thread; :meth:`close` stops
    both (idempotent). The async methods may be awaited from any event loop; the
    counter may be read from any thread.
    """

    def __init__(self, display: str) -> None:
        self._display_name = display
        self._display: Display | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._seq = 0
        self._last_damage_monotonic_s = 0.0
        self.popups = Popups()
        """The popups created and mapped on the screen since :meth:`start`."""
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._damage = 0
        self._notify_code = 0
        self._wake: tuple[int, int] | None = None

    @property
    def seq(self) -> int:
        """The number of damage reports received since :meth:`start`."""
        return self._seq

    @property
    def last_damage_monotonic_s(self) -> float:
        """When the last report arrived (:func:`time.monotonic`), 0.0 before the first."""
        return self._last_damage_monotonic_s

    def damaged_since(self, seq: int) -> bool:
        """Whether the screen was drawn on after the counter read ``seq``."""
        return self._seq > seq

    def start(self) -> None:
        """Open the X connection, create the damage object and start reading reports.

        Raises:
            CaptureError: the display cannot be opened or has no DAMAGE extension.
        """
        if self._thread is not None:
            return
        try:
            display = Display(self._display_name)
        except Exception as exc:  # python-xlib raises several unrelated types here
            raise CaptureError(f"cannot open display {self._display_name!r} for damage reports: {exc}") from exc
        if not display.has_extension(xdamage.extname):
            display.close()
            raise CaptureError(f"display {self._display_name!r} has no DAMAGE extension")
        display.damage_query_version()
        root = display.screen().root
        self._damage = root.damage_create(xdamage.DamageReportNonEmpty)
        # Other clients may select these too (only the redirect masks are exclusive).
        root.change_attributes(event_mask=X.SubstructureNotifyMask)
        display.sync()
        while display.pending_events():  # the report of what was drawn before now
            display.next_event()
        display.damage_subtract(self._damage)
        display.flush()
        self._notify_code = display.query_extension(xdamage.extname).first_event + xdamage.DamageNotifyCode
        self._display = display
        # close() writes to this pipe: the reader's select returns at once instead of
        # at its next timeout (a reset closes the monitor while the screen is still).
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._read, name="damage-monitor", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the reader thread and close the connection; pending waits return."""
        self._closed.set()
        if self._wake is not None:
            with suppress(OSError):
                os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_S)
        if self._wake is not None and (self._thread is None or not self._thread.is_alive()):
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        if self._display is not None:
            with suppress(Exception):
                self._display.close()
        self._display = None
        self._wake_all()

    async def wait_for_change(self, after_seq: int, timeout_s: float) -> int:
        """Wait until the counter exceeds ``after_seq`` or ``timeout_s`` passes.

        Returns:
            The counter when the wait ended: greater than ``after_seq`` after a change,
            equal to it on timeout (or when the monitor was closed).
        """
        if self._seq > after_seq or self._closed.is_set() or timeout_s <= 0:
            return self._seq
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._seq > after_seq:
                return self._seq
            self._waiters.append(entry)
        try:
            with suppress(TimeoutError):
                await asyncio.wait_for(future, timeout_s)
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)
        return self._seq

    def _read(self) -> None:
        display = self._display
        assert display is not None
        assert self._wake is not None
        fileno, woken = display.fileno(), self._wake[0]
        while not self._closed.is_set():
            try:
                if not display.pending_events():
                    select.select([fileno, woken], [], [])
                damaged = False
                while display.pending_events():
                    event = display.next_event()
                    if event.type == self._notify_code:
                        damaged = True
                    elif event.type in _WINDOW_EVENTS:
                        self.popups.on_event(event)
                if damaged:
                    display.damage_subtract(self._damage)
                    display.flush()
                    self._record()
            except Exception:  # the server went away: report nothing more, wake waiters
                self._closed.set()
        self._wake_all()

    def _record(self) -> None:
        with self._lock:
            self._seq += 1
            self._last_damage_monotonic_s = time.monotonic()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with suppress(RuntimeError):  # the waiter's loop has closed
                loop.call_soon_threadsafe(_resolve, future)

    def _wake_all(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
