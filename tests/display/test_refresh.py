"""The display's refresh rate (``deskpod.agentd.display.refresh``) on a real Xvfb and Chromium: the
daemon's X server, and a standby's, take the configured rate and keep it after the
connection that set it closes, Chromium paints at that rate, and a server without RandR
is refused with a typed error and keeps serving."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from Xlib import display as xdisplay
from Xlib.ext import randr
from Xlib.protocol.display import Display as XlibProtocolDisplay

from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.display.refresh import apply_refresh_rate
from deskpod.errors import RefreshRateError
from deskpod.agentd.session import DesktopSession
from deskpod.protocol import Size

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop


def current_refresh_hz(display_name: str) -> float:
    """The refresh rate of the first CRTC's current mode, read over a new connection
    (dot clock / (htotal × vtotal), as Chromium reads it; 0 for Xvfb's own mode)."""
    d = xdisplay.Display(display_name)
    try:
        resources = randr.get_screen_resources(d.screen().root)
        crtc = randr.get_crtc_info(d, resources.crtcs[0], resources.config_timestamp)
        mode = next(m for m in resources.modes if m.id == crtc.mode)
        return 0.0 if not (mode.h_total and mode.v_total) else mode.dot_clock / (mode.h_total * mode.v_total)
    finally:
        d.close()


def test_the_daemons_display_takes_the_configured_rate_and_keeps_it(daemon_session: DesktopSession) -> None:
    session = daemon_session
    session.start_display()
    # The connection that made the mode is closed: the server keeps it (RetainPermanent).
    assert current_refresh_hz(session.config.display) == pytest.approx(120)
    assert session.frame_interval_s == pytest.approx(1 / 120)
    # A restarted server (a reset) starts at Xvfb's own mode and is given the rate again.
    session.kill_desktop()
    session.start_display()
    assert current_refresh_hz(session.config.display) == pytest.approx(120)


def test_a_standby_display_takes_the_rate_with_its_own_cookie(daemon_session: DesktopSession,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby session's server (started while the daemon's XAUTHORITY names the active
    seat's file) is given the rate before its Chromium starts, with its own cookie."""
    daemon_session.start_display(activate=False)
    assert daemon_session.frame_interval_s == pytest.approx(1 / 120)
    monkeypatch.setenv("XAUTHORITY", str(daemon_session.xauthority))
    assert current_refresh_hz(daemon_session.config.display) == pytest.approx(120)


def test_chromium_paints_at_the_displays_rate(desktop: Desktop) -> None:
    """The shared desktop runs at the sandbox's rate; a page's animation frames follow it
    (at 60 Hz half a second holds 30 of them)."""
    assert current_refresh_hz(desktop.display_name) == pytest.approx(AgentdConfig.display_refresh_hz)
    frames = desktop.page.evaluate("""new Promise(resolve => {
        let n = 0; const t0 = performance.now();
        const tick = () => { n++; if (performance.now() - t0 < 500) requestAnimationFrame(tick); else resolve(n); };
        requestAnimationFrame(tick);
    })""")
    assert frames > 0.5 * 60 * 1.5, frames


@pytest.fixture
def xlib_event_table() -> Iterator[None]:
    """python-xlib keeps one table of extension event codes for every connection of the
    process (a class attribute): a server without RandR numbers the other extensions'
    events differently, so the table is put back afterwards for the other tests' servers."""
    saved = {code: dict(value) if isinstance(value, dict) else value
             for code, value in XlibProtocolDisplay.event_classes.items()}
    yield
    XlibProtocolDisplay.event_classes.clear()
    XlibProtocolDisplay.event_classes.update(saved)


@pytest.mark.usefixtures("xlib_event_table")
def test_a_server_without_randr_is_refused_with_a_typed_error_and_keeps_serving(unused_display: str,
                                                                                tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "XAUTHORITY"}
    # -noreset: an X server resets when its last client leaves, and a connection made during
    # the reset (the Display after apply_refresh_rate's) is reset by the server (seen in CI).
    xvfb = subprocess.Popen(["Xvfb", unused_display, "-screen", "0", "640x480x24", "-nolisten", "tcp",
                             "-extension", "RANDR", "-noreset"], env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "xvfb.log").open("wb"))
    try:
        socket_path = Path(f"/tmp/.X11-unix/X{unused_display.lstrip(':')}")
        deadline = time.monotonic() + 10
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(RefreshRateError, match="no RandR"):
            apply_refresh_rate(unused_display, Size(width=640, height=480), 240)
        d = xdisplay.Display(unused_display)
        assert (d.screen().width_in_pixels, d.screen().height_in_pixels) == (640, 480)
        d.close()
    finally:
        xvfb.terminate()  # an X server removes its socket and lock file at SIGTERM, not at SIGKILL
        xvfb.wait()


@pytest.mark.parametrize(("size", "hz"), [((640, 480), 0), ((7680, 4320), 240)])
def test_a_rate_no_mode_can_say_is_a_value_error(size: tuple[int, int], hz: int) -> None:
    with pytest.raises(ValueError, match="no RandR mode"):
        apply_refresh_rate(":0", Size(width=size[0], height=size[1]), hz)


DOCUMENTED_SCREENS = ("1280x800", "1920x1080", "3840x2160", "7680x4320")
"""The screen sizes the docs name (the default, the tests' HD and 4K stacks, and the largest:
docs/reference/limits.md, docs/guides/driving.md)."""


@pytest.mark.parametrize("screen", DOCUMENTED_SCREENS)
def test_every_documented_screen_takes_the_default_rate_or_the_highest_its_mode_can_say(
        screen: str, unused_display: str, tmp_path: Path) -> None:
    """On 63c358c the daemon refused to start at 7680x4320 with the default 240 Hz (its mode's
    dot clock would be over 32 bits); it starts at 129 Hz now, and its X server takes that rate."""
    config = AgentdConfig.from_env({"DESKPOD_TOKEN": "t" * 32, "DESKPOD_SCREEN_SIZE": screen})
    expected = 129 if screen == "7680x4320" else 240
    assert config.display_refresh_hz == expected
    env = {k: v for k, v in os.environ.items() if k != "XAUTHORITY"}
    xvfb = subprocess.Popen(["Xvfb", unused_display, "-screen", "0", f"{screen}x24", "-nolisten", "tcp",
                             "-noreset"], env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "xvfb.log").open("wb"))
    try:
        socket_path = Path(f"/tmp/.X11-unix/X{unused_display.lstrip(':')}")
        deadline = time.monotonic() + 20
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        apply_refresh_rate(unused_display, config.screen, config.display_refresh_hz)
        assert current_refresh_hz(unused_display) == pytest.approx(expected, rel=0.01)
    finally:
        xvfb.terminate()
        xvfb.wait()
