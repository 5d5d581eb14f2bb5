"""The desktop's clipboard: the X ``CLIPBOARD`` selection, read and owned by the daemon.

A copy in any window makes that window the owner of ``CLIPBOARD``; a paste asks the
owner to convert it (ICCCM section 2, https://x.org/releases/X11R7.7/doc/xorg-docs/icccm/icccm.html#Peer_to_Peer_Communication_by_Means_of_Selections).
:meth:`XClipboard.read` asks the owner for ``UTF8_STRING`` (``STRING`` when refused) on a
connection of its own and waits for the answer; :meth:`XClipboard.write` takes the
selection with a window of a serving thread, which answers every paste (``TARGETS``,
``UTF8_STRING``, ``STRING``, ``TEXT``) until another client takes the selection or
:meth:`XClipboard.stop` (a reset stops it before its X server goes: the new server has
no selection, so the clipboard is empty). Text larger than one property (``INCR``
transfers) is not read: the clipboard's text is at most
:data:`~deskpod.protocol.MAX_CLIPBOARD_CHARS` characters here.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from Xlib import X, Xatom
from Xlib.display import Display
from Xlib.protocol import event as xevent

from deskpod.agentd.display.xconn import X_FAILURES
from deskpod.errors import ExecutionError
from deskpod.protocol import MAX_CLIPBOARD_CHARS

__all__ = ["CLIPBOARD_TIMEOUT_S", "XClipboard"]

log = logging.getLogger(__name__)

CLIPBOARD_TIMEOUT_S: Final = 2.0
"""Longest wait for the clipboard's owner to answer a read (float seconds)."""

_POLL_S: Final = 0.05
_READ_BYTES: Final = MAX_CLIPBOARD_CHARS * 4  # UTF-8: at most four bytes a character


def _unreadable(why: str) -> ExecutionError:
    return ExecutionError(f"the clipboard could not be read: {why}", detail={"reason": "clipboard_unreadable"})


class _Owner(threading.Thread):
    """Owns ``CLIPBOARD`` with ``data`` (UTF-8) and answers pastes until it loses it or is stopped."""

    def __init__(self, display_name: str, data: bytes) -> None:
        super().__init__(name="deskpod-clipboard", daemon=True)
        self.data = data
        self.stopping = threading.Event()
        self.display = Display(display_name)
        atom = self.display.intern_atom
        self.clipboard, self.targets = atom("CLIPBOARD"), atom("TARGETS")
        self.texts = (atom("UTF8_STRING"), Xatom.STRING, atom("TEXT"))
        self.window = self.display.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        self.window.set_selection_owner(self.clipboard, X.CurrentTime)
        if self.display.get_selection_owner(self.clipboard) != self.window:
            self.display.close()
            raise ExecutionError("the clipboard could not be taken", detail={"reason": "clipboard_unwritable"})
        self.display.flush()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if not self.display.pending_events():
                    select.select([self.display.fileno()], [], [], _POLL_S)
                    continue
                ev = self.display.next_event()
                if ev.type == X.SelectionClear:
                    return
                if ev.type == X.SelectionRequest:
                    self._answer(ev)
        except X_FAILURES as exc:
            log.info("clipboard owner stopped: %s", type(exc).__name__)
        finally:
            self.stopping.set()
            try:
                self.display.close()
            except X_FAILURES:
                pass

    def _answer(self, request: Any) -> None:
        prop = request.property or request.target  # an obsolete client names no property (ICCCM 2.2)
        if request.target == self.targets:
            request.requestor.change_property(prop, Xatom.ATOM, 32, [self.targets, *self.texts])
        elif request.target in self.texts:
            data = self.data if request.target != Xatom.STRING else self.data.decode().encode("latin-1", "replace")
            request.requestor.change_property(prop, request.target, 8, data)
        else:
            prop = X.NONE
        reply = xevent.SelectionNotify(time=request.time, requestor=request.requestor, selection=request.selection,
                                       target=request.target, property=prop)
        request.requestor.send_event(reply)
        self.display.flush()


class XClipboard:
    """Reads and writes the ``CLIPBOARD`` selection of the display ``display_name()`` names.

    Args:
        display_name: the X display in force (it changes when a reset swaps in a standby).
        timeout_s: longest wait for the owner's answer to a read.
    """

    def __init__(self, display_name: Callable[[], str], timeout_s: float = CLIPBOARD_TIMEOUT_S) -> None:
        self._display_name = display_name
        self.timeout_s = timeout_s
        self._owner: _Owner | None = None
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Own the clipboard with ``text``: the next paste in any window pastes it (blocking).

        Raises:
            ExecutionError: the X server refused (``detail["reason"]`` ``clipboard_unwritable``).
        """
        with self._lock:
            self._stop_owner()
            try:
                self._owner = _Owner(self._display_name(), text.encode())
            except X_FAILURES as exc:
                raise ExecutionError(f"the clipboard could not be written: {type(exc).__name__}",
                                     detail={"reason": "clipboard_unwritable"}) from exc
            self._owner.start()

    def read(self) -> str:
        """The clipboard's text (blocking; ``""``: no owner, or it holds no text), cut to
        :data:`~deskpod.protocol.MAX_CLIPBOARD_CHARS` characters.

        Raises:
            ExecutionError: the owner did not answer within :attr:`timeout_s`, or answered
                with more than one property holds (``detail["reason"]`` ``clipboard_unreadable``).
        """
        with self._lock:
            owner = self._owner
            if owner is not None and not owner.stopping.is_set():
                return owner.data.decode()[:MAX_CLIPBOARD_CHARS]
        with self._connection() as display:
            return self._read(display)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Display]:
        """A connection of its own to the display, closed after; an X failure in it is
        ``clipboard_unreadable``."""
        try:
            display = Display(self._display_name())
        except X_FAILURES as exc:
            raise _unreadable(type(exc).__name__) from exc
        try:
            yield display
        except X_FAILURES as exc:
            raise _unreadable(type(exc).__name__) from exc
        finally:
            try:
                display.close()
            except X_FAILURES:
                pass

    def _read(self, display: Display) -> str:
        clipboard = display.intern_atom("CLIPBOARD")
        if display.get_selection_owner(clipboard) == X.NONE:
            return ""
        window = display.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        prop = display.intern_atom("deskpod_clipboard")
        for target in (display.intern_atom("UTF8_STRING"), Xatom.STRING):
            window.convert_selection(clipboard, target, prop, X.CurrentTime)
            display.flush()
            answer = self._wait_notify(display)
            if answer.property == X.NONE:
                continue  # refused: try the next target
            got = window.get_property(prop, X.AnyPropertyType, 0, _READ_BYTES // 4, True)
            if got is None:
                return ""
            if got.property_type == display.intern_atom("INCR"):
                raise _unreadable("it is larger than one transfer")
            data = bytes(got.value) if not isinstance(got.value, str) else got.value.encode("latin-1")
            data = data.rstrip(b"\x00")  # some owners (AbiWord) end their text with a C string's NUL
            encoding = "utf-8" if target != Xatom.STRING else "latin-1"
            return data.decode(encoding, "replace")[:MAX_CLIPBOARD_CHARS]
        return ""

    def _wait_notify(self, display: Display) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:
            while display.pending_events():
                ev = display.next_event()
                if ev.type == X.SelectionNotify:
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise _unreadable(f"its owner did not answer within {self.timeout_s:g} s")
            select.select([display.fileno()], [], [], min(left, _POLL_S))

    def owner(self) -> int:
        """The X window that owns ``CLIPBOARD`` now (0: none).

        Raises:
            ExecutionError: the display cannot be reached (``clipboard_unreadable``).
        """
        with self._connection() as display:
            owner = display.get_selection_owner(display.intern_atom("CLIPBOARD"))
            return 0 if owner == X.NONE else int(owner.id)

    def wait_owner(self) -> None:
        """Block while this clipboard answers pastes (until another client takes the selection,
        its X connection ends or :meth:`stop`)."""
        owner = self._owner
        if owner is not None:
            owner.join()

    def stop(self) -> None:
        """Stop answering pastes (before the X server stops: a reset)."""
        with self._lock:
            self._stop_owner()

    def _stop_owner(self) -> None:
        if self._owner is not None:
            self._owner.stopping.set()
            self._owner.join(timeout=1.0)
            self._owner = None
