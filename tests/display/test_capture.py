"""ScreenCapture against a real Xvfb: sizes, pixels, encodings and failures."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from PIL import Image

from deskpod.agentd.display.capture import ScreenCapture
from deskpod.agentd.display.xinput import XInput
from deskpod.errors import CaptureError, InputError, InvalidActionError

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop, Page, PrivateXvfb

pytestmark = pytest.mark.display


@pytest.fixture
def capture(desktop: Desktop) -> Iterator[ScreenCapture]:
    cap = ScreenCapture(desktop.display_name)
    yield cap
    cap.close()


def test_grab_has_the_xvfb_size_and_is_not_blank(
    desktop: Desktop, page: Page, capture: ScreenCapture
) -> None:
    """Configured correctly, a grab is RGB, exactly the Xvfb size, and shows the page."""
    assert capture.health_check(expected_size=desktop.size) == desktop.size
    image = capture.grab()
    assert image.mode == "RGB"
    assert image.size == desktop.size == capture.size
    assert len(image.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 1


def test_grab_pixels_match_the_page(page: Page, capture: ScreenCapture) -> None:
    """The fixture's pad is #ddeeff: its centre pixel proves channel order and position."""
    x, y = page.center("pad")
    page.evaluate("document.getElementById('pad').textContent = ''")
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert capture.grab().getpixel((x, y)) == (0xDD, 0xEE, 0xFF)


def test_grab_reuses_one_mss_instance_with_mit_shm(capture: ScreenCapture) -> None:
    """One capture object serves every grab; mss reports MIT-SHM working where it can."""
    first = capture.grab()
    second = capture.grab()
    assert first.size == second.size
    notes = capture.performance_notes  # empty with mss < 10.2, which has no MIT-SHM path
    if notes:
        assert "MIT-SHM is working correctly." in notes


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
@pytest.mark.parametrize("size", [None, (1024, 640), (640, 400), (1366, 768)])
def test_encode_round_trips_at_the_requested_size(
    desktop: Desktop, capture: ScreenCapture, fmt: str, size: tuple[int, int] | None
) -> None:
    """PNG and JPEG decode with Pillow to the requested size (down- and upscaled)."""
    data = capture.encode(capture.grab(), fmt=fmt, quality=70, size=size)  # type: ignore[arg-type]
    decoded = Image.open(io.BytesIO(data))
    assert decoded.format == fmt.upper()
    assert decoded.size == (size or desktop.size)
    decoded.load()


def test_encode_refuses_bad_arguments(capture: ScreenCapture) -> None:
    image = Image.new("RGB", (10, 10))
    with pytest.raises(InvalidActionError):
        capture.encode(image, fmt="gif")  # type: ignore[arg-type]
    with pytest.raises(InvalidActionError):
        capture.encode(image, fmt="jpeg", quality=0)
    with pytest.raises(InvalidActionError):
        capture.encode(image, size=(0, 10))


def test_health_check_reports_a_size_mismatch(capture: ScreenCapture) -> None:
    with pytest.raises(CaptureError) as caught:
        capture.health_check(expected_size=(1920, 1080))
    assert "1920x1080" in caught.value.message


def test_wrong_display_fails_fast_with_a_clear_message(unused_display: str) -> None:
    """The startup health check fails at once, naming the display, when DISPLAY is wrong."""
    started = time.monotonic()
    with pytest.raises(CaptureError) as caught:
        ScreenCapture(unused_display)
    assert time.monotonic() - started < 5
    assert unused_display in caught.value.message


def test_a_dead_x_server_is_a_capture_error_not_a_crash(private_xvfb: PrivateXvfb) -> None:
    """When the X server goes away, grab() and XInput raise our errors; the process lives."""
    capture = ScreenCapture(private_xvfb.display_name)
    xinput = XInput(private_xvfb.display_name)
    try:
        assert capture.health_check(expected_size=private_xvfb.size) == private_xvfb.size
        assert xinput.screen_size == private_xvfb.size
        private_xvfb.stop()
        with pytest.raises(CaptureError):
            capture.grab()
        with pytest.raises(InputError):
            xinput.move(1, 1)
    finally:
        capture.close()
        xinput.close()


def test_a_prepared_screenshot_is_reused_only_for_the_same_screen(desktop: Desktop, page: Page) -> None:
    """The executor prepares a screenshot during the settle wait: a screenshot of the
    same screen is that encoding, one after the page changed shows the change, and
    prepared ones take no place from the frames screen checks are bound to."""
    import asyncio
    import base64

    from deskpod.agentd.executor import Executor
    from deskpod.agentd.screen_check import KEPT_FRAMES
    from deskpod.protocol import CoordinateMap, Size

    x, y = page.center("pad")
    page.evaluate("document.getElementById('pad').textContent = ''")

    def pixel(shot_data: str) -> tuple[int, int, int]:
        rgb: tuple[int, int, int] = Image.open(io.BytesIO(base64.b64decode(shot_data))).convert("RGB").getpixel((x, y))
        return rgb

    async def body() -> None:
        executor = Executor(desktop.display_name)
        await executor.start()
        try:
            coords = CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1]))
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            await executor.prepare_screenshot(coords, "png", 80)
            same = await executor.screenshot(coords, "png", 80)
            assert pixel(same.data) == (0xDD, 0xEE, 0xFF)
            await executor.prepare_screenshot(coords, "png", 80)
            page.evaluate("document.getElementById('pad').style.background = 'rgb(200, 0, 0)'")
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            time.sleep(0.1)  # the frame reaches the X server
            changed = await executor.screenshot(coords, "png", 80)
            assert changed.sha256 != same.sha256
            assert pixel(changed.data) == (200, 0, 0)
            # Prepared screenshots of other screens keep no frame: a screen check bound to
            # the last one sent still finds its frame after more of them than are kept.
            for shade in range(KEPT_FRAMES + 1):
                page.evaluate(f"document.getElementById('pad').style.background = 'rgb(0, {shade * 20}, 0)'")
                page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                time.sleep(0.05)
                await executor.prepare_screenshot(coords, "png", 80)
            assert executor.frames.get(changed.sha256) is not None
        finally:
            await executor.close()

    asyncio.run(body())
