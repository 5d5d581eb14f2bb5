"""Windows as state (deskpod.agentd.display.xwindows) on a real Xvfb, openbox and Chromium: a popup
the page opens is listed beside the browser's window with its application, title, box and focus, and
the window actions (focus, move, resize, close: EWMH requests to openbox) run through the daemon's
executor change what the next list says; an id not in the list is ``no_window``. A window an agent's
client made (through the X gate's grant) is in the agent's zone whatever ``WM_CLASS`` it claims, and
closing it asks its program (``WM_DELETE_WINDOW``)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import Page, wait_for
from Xlib import X, display
from Xlib.protocol import event as xevent

from deskpod.agentd.batch import Batch, validate_batch
from deskpod.agentd.display.xgate import XGate
from deskpod.agentd.display.xwindows import WindowInfo, format_window_id
from deskpod.agentd.executor import Executor
from deskpod.agentd.observe import Observer
from deskpod.agentd.runner import xauthority_entry
from deskpod.errors import NoWindowError, OutOfBoundsError
from deskpod.protocol import Action, CoordinateMap, Size, parse_action

POPUP_TITLE = "windows fixture: a popup"


async def _no_page(_: bool) -> tuple[None, None]:
    return None, None


class _Desk:
    """The daemon's executor on the test display, driven from the test's thread."""

    def __init__(self, display_name: str, size: tuple[int, int]) -> None:
        self.loop = asyncio.new_event_loop()
        self.executor = Executor(display_name)
        self.coords = CoordinateMap(Size(width=size[0], height=size[1]))
        self.loop.run_until_complete(self.executor.start())

    def windows(self) -> list[WindowInfo]:
        return self.loop.run_until_complete(self.executor.windows())

    def act(self, *actions: dict[str, Any]) -> None:
        batch: Sequence[Action] = [parse_action(a, i) for i, a in enumerate(actions)]
        validate_batch(batch, self.coords)
        self.loop.run_until_complete(self.executor.run(Batch(batch, self.coords, threading.Event(), _no_page), 10.0))

    def close(self) -> None:
        self.loop.run_until_complete(self.executor.close())
        self.loop.close()


@pytest.fixture
def desk(desktop: Any) -> Any:
    opened = _Desk(desktop.display_name, desktop.size)
    yield opened
    opened.close()


def _popup(windows: list[WindowInfo]) -> WindowInfo | None:
    return next((w for w in windows if (w.title or "").startswith(POPUP_TITLE)), None)


def test_a_popup_is_listed_then_focused_moved_resized_and_closed_through_the_window_manager(
        page: Page, desktop: Any, desk: _Desk) -> None:
    browser_title = page.evaluate("document.title")
    page.call("Runtime.evaluate", {"userGesture": True, "expression": "window.open("
                                   f"{json.dumps(desktop.base_url + '/popup.html')}, 'deskpod_popup', "
                                   "'popup,width=400,height=300,left=100,top=80'), true"})
    try:
        listed = wait_for(lambda: (found := desk.windows()) and _popup(found) and _popup(found).focused and found,
                          timeout_s=10)
        popup = _popup(listed)
        assert popup is not None and listed[0] == popup, listed  # the frontmost first
        browser = next(w for w in listed if w is not popup)
        assert (popup.app, browser.app) == ("Chromium", "Chromium"), listed
        assert browser_title in (browser.title or ""), listed
        assert browser.box == (0, 0, *desktop.size) and not browser.focused and not popup.modal, listed
        popup_id, browser_id = format_window_id(popup.id), format_window_id(browser.id)

        desk.act({"type": "window_focus", "window_id": browser_id})
        now = desk.windows()
        assert [w.focused for w in now if w.id == browser.id] == [True] and not _popup(now).focused, now  # type: ignore[union-attr]

        desk.act({"type": "window_focus", "window_id": popup_id}, {"type": "window_move", "window_id": popup_id,
                                                                    "x": 200, "y": 150})
        moved = _popup(desk.windows())
        assert moved is not None and moved.focused and moved.box[:2] == (200, 150), moved

        desk.act({"type": "window_resize", "window_id": popup_id, "width": 500, "height": 260})
        resized = _popup(desk.windows())
        assert resized is not None and resized.box == (200, 150, 700, 410), resized

        with pytest.raises(OutOfBoundsError):
            desk.act({"type": "window_move", "window_id": popup_id, "x": desktop.size[0], "y": 0})

        desk.act({"type": "window_close", "window_id": popup_id})
        after = desk.windows()
        assert _popup(after) is None and [w.id for w in after] == [browser.id], after
        with pytest.raises(NoWindowError) as gone:
            desk.act({"type": "window_focus", "window_id": popup_id})
        assert gone.value.code == "no_window" and gone.value.detail["window_id"] == popup_id
        with pytest.raises(NoWindowError):  # a window id never listed
            desk.act({"type": "window_close", "window_id": "0x7"})
    finally:  # the session's browser stays alone, focused, for the next tests
        left = _popup(desk.windows())
        if left is not None:
            desk.act({"type": "window_close", "window_id": format_window_id(left.id)})
        wait_for(lambda: all(w.focused for w in desk.windows()), timeout_s=5)


AGENT_PROGRAM = r'''
import os
from Xlib import X, display, xauth
from Xlib.support import unix_connect
cookie = xauth.Xauthority(os.environ["XAUTHORITY"]).entries[0][4]
unix_connect.get_auth = lambda *args: (b"MIT-MAGIC-COOKIE-1", cookie)
d = display.Display()
screen = d.screen()
window = screen.root.create_window(50, 60, 300, 200, 0, screen.root_depth, background_pixel=screen.black_pixel)
window.set_wm_class("chromium", "Chromium")  # it claims to be the browser
window.set_wm_name("Chromium")
delete = d.intern_atom("WM_DELETE_WINDOW")
window.set_wm_protocols([delete])
window.map()
d.flush()
print("mapped", flush=True)
while True:
    event = d.next_event()
    if event.type == X.ClientMessage and event.data[1][0] == delete:
        print("asked to close", flush=True)
        break
'''


def test_an_agents_window_is_in_the_agents_zone_whatever_it_claims_and_closes_when_asked(
        daemon_session: Any, tmp_path: Any) -> None:
    """The zone comes from which X client made the window (the gate's grant), never from its
    ``WM_CLASS``: a program of the agent's zone naming itself Chromium is listed as the agent's."""
    session = daemon_session
    session.start_display()
    session.start_wm()
    name = session.config.display
    own = display.Display(name)  # a window of the sandbox's own, as the browser's is
    screen = own.screen()
    sandbox_window = screen.root.create_window(0, 0, 640, 480, 0, screen.root_depth)
    sandbox_window.set_wm_class("standin", "StandInBrowser")
    sandbox_window.map()
    own.sync()
    gate = XGate(6000 + int(name.lstrip(":")), "127.0.0.1", lambda: name)
    desk = _Desk(name, (640, 480))

    async def listed() -> list[Any] | None:
        observer = Observer.__new__(Observer)  # only its window list is read
        observer.executor, observer.windows = desk.executor, gate
        return await observer._window_list(desk.coords)

    async def run() -> tuple[list[Any] | None, list[Any] | None, str]:
        await gate.start()
        try:
            async with gate.grant(60) as grant:
                xauthority = tmp_path / "Xauthority"
                xauthority.write_bytes(xauthority_entry(grant, socket.gethostname().encode()))
                agent = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", AGENT_PROGRAM, stdout=asyncio.subprocess.PIPE,
                    env={**os.environ, "DISPLAY": grant.display, "XAUTHORITY": str(xauthority)})
                assert agent.stdout is not None
                assert await asyncio.wait_for(agent.stdout.readline(), 30) == b"mapped\n"
                for _ in range(200):
                    before = await listed()
                    if before and len(before) == 2:
                        break
                    await asyncio.sleep(0.05)
                claimed = next(w for w in before or [] if w.app == "Chromium")
                await desk.executor.run(Batch([parse_action({"type": "window_close", "window_id": claimed.id})],
                                              desk.coords, threading.Event(), _no_page), 10.0)
                said = (await asyncio.wait_for(agent.stdout.readline(), 10)).decode()
                await asyncio.wait_for(agent.wait(), 10)
                for _ in range(100):
                    after = await listed()
                    if after is not None and len(after) == 1:
                        break
                    await asyncio.sleep(0.05)
                return before, after, said
        finally:
            await gate.close()

    try:
        before, after, said = desk.loop.run_until_complete(run())
    finally:
        desk.close()
        own.close()
    zones = {(w.app, w.title): w.zone for w in before or []}
    assert zones == {("Chromium", "Chromium"): "agent", ("StandInBrowser", None): "sandbox"}, before
    agents = [w for w in before or [] if w.zone == "agent"]
    assert agents[0] is (before or [])[0]  # mapped last: on top
    assert said == "asked to close\n"  # WM_DELETE_WINDOW from the window manager: no signal, no kill
    assert [(w.app, w.zone) for w in after or []] == [("StandInBrowser", "sandbox")], after


TITLING_AGENT = r'''
import os
from Xlib import X, display, xauth
from Xlib.protocol import event
from Xlib.support import unix_connect
cookie = xauth.Xauthority(os.environ["XAUTHORITY"]).entries[0][4]
unix_connect.get_auth = lambda *args: (b"MIT-MAGIC-COOKIE-1", cookie)
d = display.Display()
screen = d.screen()
window = screen.root.create_window(0, 0, 20, 20, 0, screen.root_depth)
window.set_wm_class("chromium", "Chromium")
window.set_wm_name("fixture: bank - Chromium")  # the title of a tab in the browser behind
window.change_property(d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING"), 8, b"fixture: bank - Chromium")
window.map()
d.sync()
active = d.intern_atom("_NET_ACTIVE_WINDOW")  # a pager's request about its own window: the gate lets it
screen.root.send_event(event.ClientMessage(window=window, client_type=active, data=(32, [2, 0, 0, 0, 0])),
                       event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
d.sync()
print("mapped", flush=True)
os.read(0, 1)
'''


def test_an_agents_active_window_names_no_tab(daemon_session: Any, tmp_path: Any) -> None:
    """The daemon follows a tab brought to the front beside a JavaScript dialog by the active
    window's title (Chromium's, ``"<tab title> - Chromium"``). An agent's program (a display
    grant) maps a window titled after a tab behind and makes it active: its title is not the
    browser's, and names nothing (on main the daemon read it as Chromium's and took that tab as
    the one in front, judging the next click against a page the screen does not show)."""
    session = daemon_session
    session.start_display()
    session.start_wm()
    name = session.config.display
    own = display.Display(name)  # the sandbox's own window, as the browser's is
    screen = own.screen()
    sandbox_window = screen.root.create_window(0, 0, 640, 480, 0, screen.root_depth)
    sandbox_window.set_wm_name("fixture: shop - Chromium")
    sandbox_window.map()
    own.sync()
    stacking = own.intern_atom("_NET_CLIENT_LIST_STACKING")
    wait_for(lambda: sandbox_window.id in getattr(screen.root.get_full_property(stacking, X.AnyPropertyType), "value", ()),
             timeout_s=10)
    screen.root.send_event(xevent.ClientMessage(window=sandbox_window, client_type=own.intern_atom("_NET_ACTIVE_WINDOW"),
                                                data=(32, [2, 0, 0, 0, 0])),
                           event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
    own.sync()
    gate = XGate(6000 + int(name.lstrip(":")), "127.0.0.1", lambda: name)
    desk = _Desk(name, (640, 480))
    desk.executor.agent_window = gate.agent_window  # as the daemon wires them

    async def run() -> tuple[str | None, str | None, list[Any]]:
        for _ in range(200):
            if (before := await desk.executor.active_title()) is not None:
                break
            await asyncio.sleep(0.05)
        await gate.start()
        try:
            async with gate.grant(60) as grant:
                xauthority = tmp_path / "Xauthority"
                xauthority.write_bytes(xauthority_entry(grant, socket.gethostname().encode()))
                agent = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", TITLING_AGENT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    env={**os.environ, "DISPLAY": grant.display, "XAUTHORITY": str(xauthority)})
                assert agent.stdout is not None and agent.stdin is not None
                assert await asyncio.wait_for(agent.stdout.readline(), 30) == b"mapped\n"
                observer = Observer.__new__(Observer)  # only its window list is read
                observer.executor, observer.windows = desk.executor, gate
                for _ in range(200):
                    listed = await observer._window_list(desk.coords) or []
                    if any(w.focused and w.zone == "agent" for w in listed):
                        break
                    await asyncio.sleep(0.05)
                during = await desk.executor.active_title()
                agent.stdin.close()
                await asyncio.wait_for(agent.wait(), 10)
                return before, during, listed
        finally:
            await gate.close()

    try:
        before, during, listed = desk.loop.run_until_complete(run())
    finally:
        desk.close()
        own.close()
    assert before == "fixture: shop - Chromium"  # the sandbox's own window's title is read
    assert [(w.title, w.zone) for w in listed if w.focused] == [("fixture: bank - Chromium", "agent")], listed
    assert during is None
