"""The X gate on this machine (deskpod.agentd.display.xgate), in front of a real Xvfb of the daemon's
``DesktopSession``: an agent's client comes in with a grant's untrusted cookie and tries what would give
it another client's window (here a stand-in browser, a trusted client of the test's own); it keeps its
own window, which the daemon finds on top; connections are bounded and refused without a grant."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from Xlib import X, display
from Xlib.protocol import event

from deskpod.agentd.display.xgate import MAX_GATE_CONNECTIONS, SETUP_TIMEOUT_S, XGate
from deskpod.agentd.display.xinput import XInput
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.agentd.runner import xauthority_entry
from deskpod.agentd.session import DesktopSession
from deskpod.errors import DisplayUnavailableError
from x_attacks import X_ATTACKS

SECRET = "the browser's clipboard"


class StandInBrowser:
    """A trusted client with a 640x480 window of class ``StandInBrowser`` that owns ``CLIPBOARD``,
    answers conversions with :data:`SECRET`, records the key events and conversions it gets and
    closes its window on ``WM_DELETE_WINDOW``, as an application does."""

    def __init__(self, display_name: str) -> None:
        self.display = display.Display(display_name)
        screen = self.display.screen()
        self.window = screen.root.create_window(0, 0, 640, 480, 0, screen.root_depth,
                                                background_pixel=screen.white_pixel,
                                                event_mask=X.KeyPressMask | X.StructureNotifyMask)
        self.window.set_wm_class("standinbrowser", "StandInBrowser")
        self.delete = self.display.intern_atom("WM_DELETE_WINDOW")
        self.window.set_wm_protocols([self.delete])
        self.window.map()
        self.clipboard = self.display.intern_atom("CLIPBOARD")
        self.window.set_selection_owner(self.clipboard, X.CurrentTime)
        self.display.sync()
        self.keys: list[int] = []
        self.conversions = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            if not self.display.pending_events():
                time.sleep(0.02)
                continue
            ev = self.display.next_event()
            if ev.type == X.KeyPress:
                self.keys.append(ev.detail)
            elif ev.type == X.SelectionRequest:
                self.conversions += 1
                ev.requestor.change_property(ev.property, ev.target, 8, SECRET.encode())
                ev.requestor.send_event(event.SelectionNotify(time=ev.time, requestor=ev.requestor,
                                                              selection=ev.selection, target=ev.target,
                                                              property=ev.property))
                self.display.flush()
            elif ev.type == X.ClientMessage and ev.data[1][0] == self.delete:
                self.window.destroy()
                self.display.flush()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.display.close()


@pytest.fixture
def session(daemon_session: DesktopSession) -> DesktopSession:
    daemon_session.start_display()
    return daemon_session


@pytest.fixture
def browser(session: DesktopSession) -> Iterator[StandInBrowser]:
    stand_in = StandInBrowser(session.config.display)
    yield stand_in
    stand_in.close()


def gate_for(session: DesktopSession) -> XGate:
    number = int(session.config.display.lstrip(":"))
    return XGate(6000 + number, "127.0.0.1", lambda: session.config.display)


def x_setup(port: int, cookie: bytes) -> bytes:
    """A connection setup to the gate with ``cookie``: the answer's first 48 bytes (b"" if closed)."""
    name = b"MIT-MAGIC-COOKIE-1"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + name + b"\0\0" + cookie)
        return sock.recv(48)


def test_an_agent_client_is_refused_what_would_give_it_the_browser_and_keeps_its_own_window(
        session: DesktopSession, browser: StandInBrowser, tmp_path: Path) -> None:
    gate = gate_for(session)

    async def run() -> tuple[dict[str, object], dict[str, object], list[AgentWindowInfo | None], bytes]:
        await gate.start()
        try:
            async with gate.grant(60) as grant:
                xauthority = tmp_path / "Xauthority"
                xauthority.write_bytes(xauthority_entry(grant, socket.gethostname().encode()))
                attacks = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", X_ATTACKS, "standinbrowser", "100,120,200,150", "2",
                    env={**os.environ, "DISPLAY": grant.display, "XAUTHORITY": str(xauthority)},
                    stdout=asyncio.subprocess.PIPE)
                assert attacks.stdout is not None
                first = json.loads(await asyncio.wait_for(attacks.stdout.readline(), 60))
                windows = [await gate.window_at(150, 200), await gate.window_at(20, 20), await gate.focus_window()]
                second = json.loads(await asyncio.wait_for(attacks.stdout.readline(), 30))
                await attacks.wait()
                cookie = bytes.fromhex(grant.cookie_hex)
            return first, second, windows, await asyncio.to_thread(x_setup, gate.port, cookie)
        finally:
            await gate.close()

    first, second, windows, after = asyncio.run(run())
    assert first["target"] is True and first["extensions"] == ["BIG-REQUESTS", "XC-MISC"]
    assert first["xtest"] is False
    assert first["get_image"] == "BadAccess"
    assert first["own_image"] == "0000ff00"  # its own window reads back red
    assert first["grab_keyboard"] != 0 and first["grab_pointer"] != 0
    assert first["warped"] is False
    assert first["send_key"] == "ok" and browser.keys == []  # dropped on the way: never delivered
    assert first["clipboard"] is None and browser.conversions == 0
    assert first["server_grab_blocks"] is False
    assert second == {"deleted": False}
    # The daemon finds the agent's window on top where it is, and only there.
    assert [(w.app, w.title, w.box, w.source) if w else None for w in windows] == [
        ("DeskpodProbe", "probe window", (100, 120, 300, 270), "command"), None, None]
    # Once the grant has ended its cookie opens nothing.
    assert after[0] == 0 and b"no display granted" in after


def test_no_grant_without_a_running_x_server(unused_display: str) -> None:
    number = int(unused_display.lstrip(":"))
    gate = XGate(6000 + number, "sandbox", lambda: unused_display)

    async def run() -> None:
        async with gate.grant(30):
            raise AssertionError("a grant was made without an X server")

    with pytest.raises(DisplayUnavailableError) as caught:
        asyncio.run(run())
    assert caught.value.detail["reason"] == "x_failed"


def flood(port: int, browser: StandInBrowser) -> tuple[int, list[bytes], float]:
    """Open three times the gate's bound of idle connections (no setup sent); return how many the
    gate held, what the others read (closed at once: b""), and how long the held ones took to close."""
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3 * MAX_GATE_CONNECTIONS)]
    time.sleep(0.5)
    closed = []
    for sock in idle:
        sock.setblocking(False)
        try:
            closed.append(sock.recv(1))
        except BlockingIOError:
            pass
    # The X server is not one of them: its own clients are served meanwhile.
    assert browser.display.get_input_focus() is not None
    started = time.monotonic()
    for sock in idle:
        sock.settimeout(SETUP_TIMEOUT_S + 5)
        sock.recv(1)
        sock.close()
    return len(idle) - len(closed), closed, time.monotonic() - started


def test_connections_are_bounded_and_refused_without_a_grant(session: DesktopSession,
                                                             browser: StandInBrowser) -> None:
    gate = gate_for(session)

    async def run() -> tuple[tuple[int, list[bytes], float], bytes]:
        await gate.start()
        try:
            flooded = await asyncio.to_thread(flood, gate.port, browser)
            return flooded, await asyncio.to_thread(x_setup, gate.port, bytes(16))
        finally:
            await gate.close()

    (held, closed, waited), refused = asyncio.run(run())
    assert held == MAX_GATE_CONNECTIONS and closed == [b""] * 2 * MAX_GATE_CONNECTIONS
    assert waited < SETUP_TIMEOUT_S + 2
    assert refused[0] == 0 and b"no display granted" in refused


PONGER = r"""
import sys
from Xlib import X, XK, display
from Xlib.protocol import event
d = display.Display()
root = d.screen().root
w = root.create_window(10, 10, 200, 100, 0, d.screen().root_depth, event_mask=X.KeyPressMask)
w.set_wm_class("pinged", "Pinged")
protocols, ping = d.intern_atom("WM_PROTOCOLS"), d.intern_atom("_NET_WM_PING")
w.set_wm_protocols([ping])
w.map()
d.sync()
print(hex(w.id), flush=True)
typed = ""
while not typed.endswith("!"):
    ev = d.next_event()
    if ev.type == X.ClientMessage and ev.client_type == protocols and ev.data[1][0] == ping:
        # EWMH: back to the root, about the root, the pinged window in data.l[2] (as GTK answers)
        root.send_event(event.ClientMessage(window=root, client_type=protocols, data=(32, ev.data[1])),
                        event_mask=X.SubstructureNotifyMask | X.SubstructureRedirectMask)
        d.flush()
    elif ev.type == X.KeyPress:
        typed += XK.keysym_to_string(d.keycode_to_keysym(ev.detail, ev.state & 1) or 0) or ""  # Shift: none
print(typed, flush=True)
"""
"""An agent's client that answers ``_NET_WM_PING`` as EWMH asks (GTK's way): prints its
window's id, then the text typed into it once a ``!`` came."""


def test_typing_into_an_agent_s_window_that_answers_pings_is_not_held_up(
        session: DesktopSession, tmp_path: Path) -> None:
    """After typing the daemon pings the focused window and waits for the answer
    (:meth:`~deskpod.agentd.display.xconn.XConnection.ping_focused`), but the X server does
    not deliver an untrusted client's answer (a ``ClientMessage`` to the root) to the daemon's
    trusted connection: every text typed into a desktop application's window (Mousepad answers
    pings) waited 10 s and failed. An agent's window is not pinged: its keys are paced by estimate."""
    gate = gate_for(session)

    async def run() -> tuple[str, float]:
        await gate.start()
        try:
            async with gate.grant(60, source="editor") as grant:
                xauthority = tmp_path / "Xauthority"
                xauthority.write_bytes(xauthority_entry(grant, socket.gethostname().encode()))
                client = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", PONGER, env={**os.environ, "DISPLAY": grant.display,
                                                       "XAUTHORITY": str(xauthority)},
                    stdout=asyncio.subprocess.PIPE)
                assert client.stdout is not None
                window = int((await asyncio.wait_for(client.stdout.readline(), 30)).decode(), 16)
                trusted = display.Display(session.config.display)
                xinput = XInput(session.config.display, gate.agent_window)
                try:
                    trusted.create_resource_object("window", window).set_input_focus(X.RevertToParent,
                                                                                      X.CurrentTime)
                    trusted.sync()
                    focused = await gate.focus_window()
                    started = time.monotonic()
                    await asyncio.to_thread(xinput.type_text, "final version!")
                    await asyncio.to_thread(xinput.wait_until_handled, 3.0)
                    took = time.monotonic() - started
                    typed = (await asyncio.wait_for(client.stdout.readline(), 10)).decode().strip()
                finally:
                    xinput.close()
                    trusted.close()
                    if client.returncode is None:
                        client.kill()
                    await client.wait()
                assert focused is not None and focused.source == "editor", focused
                return typed, took
        finally:
            await gate.close()

    typed, took = asyncio.run(run())
    assert typed == "final version!" and took < 3.0, (typed, took)
