"""A request whose input opens UI the browser draws itself, in a window of its own (a
popup: an override-redirect top-level window), answers with that UI drawn in its screenshot,
on a real Xvfb, openbox and Chromium (the daemon's command line) driven by the daemon's own
executor, DevTools client and observer (agentd/settle.py, agentd/display/popups.py).

Chromium maps a ``<select>``'s list, a date picker and a colour picker 2-110 ms after it
creates their window, and faded them in over about 150 ms; the settle wait ended on the
page's own frame, and the reply's screenshot caught the popup half-faded (or not yet
drawn) in about half the rounds at 60 Hz and most at 240 Hz. A context menu is drawn at
once. Each round compares the popup's box in the reply's screenshot with a screenshot
taken 1 s later: they must be the same pixels, and differ from the page before the click.
The reply's ``settle_signal`` is usually ``popup`` but is not asserted: on a loaded machine
Chromium may create a popup's window only after the screen has settled (a clean-clone run saw
a date picker so, which the observation's later reads still caught drawn in full); a popup
created after the screenshot is not waited for, which the docs say."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import http.server
import io
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import FIXTURES_DIR, REFRESH_HZ, _chromium_binary, _start_xvfb, _stop, _wait_for_wm
from PIL import Image, ImageChops
from Xlib import X
from Xlib.display import Display

from deskpod.agentd.batch import Batch
from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.browser.chromium import chromium_args, chromium_env
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.display.refresh import apply_refresh_rate, frame_interval_s
from deskpod.agentd.executor import Executor
from deskpod.agentd.observe import Observer
from deskpod.agentd.session import OPENBOX_RC
from deskpod.protocol import CoordinateMap, Observation, ObserveOptions, Size, parse_action

pytestmark = pytest.mark.display

SCREEN = (1024, 768)
"""The test display's size in screen pixels (the browser window fills it)."""

LATER_S = 1.0
"""How long after the reply the screen is captured again: the popup has long finished drawing."""

ROUNDS = 2
"""Rounds per kind of popup (on the old settle wait about half the rounds of a list or a picker failed)."""

Box = tuple[int, int, int, int]


@dataclass
class _Desktop:
    display: str
    base_url: str
    pipe: socket.socket


@pytest.fixture(scope="module")
def popup_desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Desktop]:
    """Xvfb (at the sandbox's refresh rate), openbox and Chromium with the daemon's command
    line (:func:`~deskpod.agentd.browser.chromium.chromium_args`: DevTools on a socket pair)
    and the fixture pages' server."""
    tmp = tmp_path_factory.mktemp("popups")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(FIXTURES_DIR)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    xvfb, display = _start_xvfb(SCREEN, tmp / "xvfb.log")
    procs = [xvfb]
    try:
        apply_refresh_rate(display, Size(width=SCREEN[0], height=SCREEN[1]), REFRESH_HZ)
        env = {"DISPLAY": display, "HOME": str(tmp), "TMPDIR": str(tmp), "PATH": "/usr/bin:/bin"}
        rc = tmp / "openbox-rc.xml"
        rc.write_text(OPENBOX_RC, encoding="utf-8")
        procs.append(subprocess.Popen(["openbox", "--sm-disable", "--config-file", str(rc)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        _wait_for_wm(display)
        ours, theirs = socket.socketpair()
        config = dataclasses.replace(AgentdConfig.from_env({"DESKPOD_TOKEN": "t" * 32}), chromium=_chromium_binary(),
                                     screen=Size(width=SCREEN[0], height=SCREEN[1]))
        argv = chromium_args(config, tmp / "profile")
        # --no-sandbox ONLY because these host tests run as root; the product never passes it.
        argv[1:1] = ["--no-sandbox", "--ozone-platform=x11"]
        procs.append(subprocess.Popen(["/bin/sh", "-c", 'exec "$0" "$@" 3<&0 4<&0 0</dev/null', *argv],
                                      stdin=theirs.fileno(), env=chromium_env(env), stdout=subprocess.DEVNULL,
                                      stderr=(tmp / "chromium.log").open("wb"), start_new_session=True))
        theirs.close()
        yield _Desktop(display, f"http://127.0.0.1:{server.server_address[1]}", ours)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        server.shutdown()
        server.server_close()


def _image(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def _popups(display: str) -> list[Box]:
    """The boxes (screen pixels) of the override-redirect top-level windows shown now."""
    x = Display(display)
    try:
        boxes = []
        for window in x.screen().root.query_tree().children:
            attributes = window.get_attributes()
            if attributes.override_redirect and attributes.map_state == X.IsViewable:
                g = window.get_geometry()
                if g.width > 1 and g.height > 1:
                    boxes.append((g.x, g.y, g.x + g.width, g.y + g.height))
        return boxes
    finally:
        x.close()


class _Daemon:
    """The daemon's executor, DevTools client and observer on the test's desktop."""

    def __init__(self, desktop: _Desktop) -> None:
        self.desktop = desktop
        self.browser = Browser()
        self.executor = Executor(desktop.display)
        self.observer = Observer(self.executor, self.browser, True, lambda: frame_interval_s(REFRESH_HZ))
        self.coords = CoordinateMap(Size(width=SCREEN[0], height=SCREEN[1]))

    async def start(self) -> None:
        await self.browser.attach(self.desktop.pipe)
        await self.executor.start()

    async def act(self, *actions: dict[str, object]) -> Observation:
        """One request: ``actions``, then the settled observation with its screenshot (PNG)."""
        parsed = [parse_action(a) for a in actions]
        self.observer.mark(parsed, self.coords)

        async def probe(_: bool) -> tuple[None, None]:
            return None, None

        outcome = await self.executor.run(Batch(parsed, self.coords, threading.Event(), probe), 10.0)
        return await self.observer.observe(ObserveOptions(format="png"), self.coords, True, outcome)

    async def shot(self) -> Image.Image:
        return _image((await self.executor.screenshot(self.coords, "png", 90)).data)

    async def point(self, element_id: str, right_inset: int | None = None) -> tuple[int, int]:
        """Screen point of the element's centre (``right_inset``: that far left of its right edge)."""
        x, y = await self.browser.evaluate(
            f"(() => {{ const r = document.getElementById('{element_id}').getBoundingClientRect();"
            " const left = screenX + outerWidth - innerWidth, top = screenY + outerHeight - innerHeight;"
            f" return [left + {'r.right - ' + str(right_inset) if right_inset is not None else 'r.x + r.width / 2'},"
            " top + r.y + r.height / 2]; })()")
        return round(x), round(y)


OPENERS: dict[str, tuple[str, dict[str, object], int | None]] = {
    "select list": ("pick", {"type": "click"}, None),
    "date picker": ("when", {"type": "click"}, 16),
    "colour picker": ("hue", {"type": "click"}, None),
    "context menu": ("menu", {"type": "click", "button": "right"}, None),
}
"""What opens each kind of popup: the element, the action at its point, and where on it
(the date field's calendar button is 16 px left of its right edge)."""


def test_the_reply_to_a_click_that_opens_a_popup_shows_it_drawn(popup_desktop: _Desktop) -> None:
    async def body() -> list[str]:
        daemon = _Daemon(popup_desktop)
        await daemon.start()
        faults = []
        try:
            for kind, (element, action, inset) in OPENERS.items():
                for round_ in range(ROUNDS):
                    faults += await _round(daemon, kind, round_, element, action, inset)
        finally:
            await daemon.executor.close()
            await daemon.browser.close()
        return faults

    faults = asyncio.run(body())
    assert not faults, faults


async def _round(daemon: _Daemon, kind: str, round_: int, element: str, action: dict[str, object],
                 inset: int | None) -> list[str]:
    """Open the ``kind`` of popup once; what was wrong with the reply's screenshot."""
    await daemon.browser.navigate(f"{daemon.desktop.base_url}/popups.html?round={round_}", 20)
    await daemon.act()  # settled: the page as it stands before the click
    before = await daemon.shot()
    x, y = await daemon.point(element, inset)
    reply = await daemon.act({**action, "x": x, "y": y})
    assert reply.screenshot is not None
    shown = _image(reply.screenshot.data)
    boxes = _popups(daemon.desktop.display)
    await asyncio.sleep(LATER_S)
    later = await daemon.shot()
    await daemon.act({"type": "keypress", "keys": ["Escape"]})
    where = f"{kind}, round {round_}"
    if len(boxes) != 1:
        return [f"{where}: expected one popup open, found {boxes}"]
    box = boxes[0]
    if ImageChops.difference(before.crop(box), shown.crop(box)).getbbox() is None:
        return [f"{where}: the reply shows the page behind the popup ({box})"]
    changed = ImageChops.difference(shown.crop(box), later.crop(box)).getbbox()
    if changed is not None:
        return [f"{where}: the popup changed after the reply in {changed} of {box}"
                f" (settled in {reply.settle_s:.3f} s by {reply.settle_signal})"]
    return []
