"""DamageMonitor against a real Xvfb: drawing is counted, idle is silent, failures are typed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from Xlib import X
from Xlib.display import Display

from deskpod.agentd.display.damage import DamageMonitor
from deskpod.errors import CaptureError

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import PrivateXvfb

pytestmark = pytest.mark.display


@pytest.fixture
def monitor(private_xvfb: PrivateXvfb) -> Iterator[DamageMonitor]:
    damage = DamageMonitor(private_xvfb.display_name)
    damage.start()
    yield damage
    damage.close()


def _draw(display_name: str, colour: int) -> None:
    """Map a window on the display and fill it with ``colour``, from a client of its own."""
    display = Display(display_name)
    try:
        screen = display.screen()
        window = screen.root.create_window(10, 10, 200, 100, 0, screen.root_depth, background_pixel=colour)
        window.map()
        gc = window.create_gc(foreground=colour ^ 0xFFFFFF)
        window.fill_rectangle(gc, 0, 0, 100, 50)
        display.sync()
    finally:
        display.close()


def test_drawing_advances_the_counter_and_wakes_a_waiter(
    private_xvfb: PrivateXvfb, monitor: DamageMonitor
) -> None:
    before = monitor.seq

    async def wait_while_drawing() -> int:
        waiter = asyncio.create_task(monitor.wait_for_change(before, timeout_s=5.0))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(_draw, private_xvfb.display_name, 0x3366CC)
        return await waiter

    after = asyncio.run(wait_while_drawing())
    assert after > before
    assert monitor.damaged_since(before)
    assert monitor.last_damage_monotonic_s <= time.monotonic()


def _quiet(monitor: DamageMonitor) -> int:
    """Wait out the fresh server's own first drawing; return the counter once quiet."""
    seq = -1
    while seq != monitor.seq:
        seq = monitor.seq
        asyncio.run(monitor.wait_for_change(seq, timeout_s=0.2))
    return seq


def test_an_idle_screen_reports_nothing_and_the_wait_times_out(monitor: DamageMonitor) -> None:
    before = _quiet(monitor)
    started = time.monotonic()
    assert asyncio.run(monitor.wait_for_change(before, timeout_s=0.3)) == before
    assert time.monotonic() - started >= 0.3
    assert not monitor.damaged_since(before)


def test_a_dead_server_ends_the_wait(private_xvfb: PrivateXvfb, monitor: DamageMonitor) -> None:
    before = monitor.seq

    async def wait_while_killing() -> int:
        waiter = asyncio.create_task(monitor.wait_for_change(before, timeout_s=10.0))
        await asyncio.sleep(0.05)
        private_xvfb.stop()
        return await waiter

    started = time.monotonic()
    assert asyncio.run(wait_while_killing()) == before
    assert time.monotonic() - started < 5.0


def test_no_display_is_a_capture_error(unused_display: str) -> None:
    with pytest.raises(CaptureError, match="damage"):
        DamageMonitor(unused_display).start()


def test_drawing_is_one_report_per_burst_not_per_rectangle(
    private_xvfb: PrivateXvfb, monitor: DamageMonitor
) -> None:
    display = Display(private_xvfb.display_name)
    try:
        screen = display.screen()
        window = screen.root.create_window(0, 0, 300, 300, 0, screen.root_depth, background_pixel=0)
        window.map()
        gc = window.create_gc(foreground=0xFFFFFF, function=X.GXcopy)
        display.sync()
        time.sleep(0.2)
        before = monitor.seq
        for i in range(200):
            window.fill_rectangle(gc, i, i, 5, 5)
        display.sync()
    finally:
        display.close()
    deadline = time.monotonic() + 2.0
    while not monitor.damaged_since(before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 1 <= monitor.seq - before < 200
