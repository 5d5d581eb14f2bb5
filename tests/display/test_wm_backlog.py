"""Typing never leaves the window manager behind on keymap changes.

Every character off the keymap costs a spare-keycode remap, and every remap sends each X
client a ``MappingNotify``. A window manager handles each one (openbox re-reads the whole
keymap), and while it is behind it holds the pointer frozen for its click-to-focus grab:
the reviewer's long non-ASCII text typed as many short lines left clicks waiting about
90 s. Here a deliberately slow window manager of the test's own (20 ms a ``MappingNotify``)
runs on a private Xvfb; when ``type_text`` returns, it must have handled every
``MappingNotify`` the server sent for the typing.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from Xlib import X, Xatom, display

from deskpod.agentd.display.xconn import XConnection
from deskpod.agentd.display.xinput import XInput

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import PrivateXvfb

SLOW_S = 0.02
"""What the test's window manager spends on each ``MappingNotify``."""


class SlowWindowManager(threading.Thread):
    """A window manager that takes :data:`SLOW_S` per ``MappingNotify`` and lists and answers
    ``_NET_REQUEST_FRAME_EXTENTS`` in order, as openbox does; it counts what it handled."""

    def __init__(self, display_name: str) -> None:
        super().__init__(daemon=True)
        self.conn = display.Display(display_name)
        root = self.conn.screen().root
        root.change_attributes(event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
        self.request = self.conn.intern_atom("_NET_REQUEST_FRAME_EXTENTS")
        self.extents = self.conn.intern_atom("_NET_FRAME_EXTENTS")
        root.change_property(self.conn.intern_atom("_NET_SUPPORTED"), Xatom.ATOM, 32, [self.request])
        self.conn.sync()
        self.handled = 0
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            if not self.conn.pending_events():
                time.sleep(0.002)
                continue
            event = self.conn.next_event()
            if event.type == X.MappingNotify:
                time.sleep(SLOW_S)
                self.handled += 1
            elif event.type == X.ClientMessage and event.client_type == self.request:
                event.window.change_property(self.extents, Xatom.CARDINAL, 32, [0, 0, 0, 0])
                self.conn.flush()


def test_type_text_returns_only_once_the_window_manager_has_seen_every_keymap_change(
        private_xvfb: PrivateXvfb) -> None:
    counter = display.Display(private_xvfb.display_name)  # a client that only counts
    wm = SlowWindowManager(private_xvfb.display_name)
    wm.start()
    xinput = XInput(private_xvfb.display_name)
    try:
        text = "\n".join("".join(chr(0x4E00 + 30 * line + k) for k in range(30)) for line in range(4))
        xinput.type_text(text)
        handled_at_return = wm.handled
        counter.sync()
        sent = sum(1 for _ in range(counter.pending_events()) if counter.next_event().type == X.MappingNotify)
        assert sent >= 120, sent  # each of the 120 characters needed a remap
        assert handled_at_return == sent, (handled_at_return, sent)
    finally:
        wm.stopping = True
        xinput.close()
        wm.join(5)


def test_without_a_window_manager_that_lists_the_request_nothing_is_waited_for(private_xvfb: PrivateXvfb) -> None:
    """No window manager (or one that does not list ``_NET_REQUEST_FRAME_EXTENTS``): the sync
    answers False at once, it never waits out its timeout."""
    conn = XConnection(private_xvfb.display_name)
    try:
        assert conn.sync_window_manager(timeout_s=30) is False
    finally:
        conn.close()
