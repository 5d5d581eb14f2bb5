"""A secret the page shows is painted over, and only it,
on a real Chromium and Xvfb.

A sign-in page's "Show password" checkbox turns the password field into a text field;
the page copies what is typed into another visible text field, a paragraph's text and a
same-origin frame. Once the secret is in the session's mask set
(:class:`deskpod.agentd.secret_mask.SecretMask`), the screenshot, a zoom and a live frame
have opaque boxes over each of those places, every other pixel is the unmasked
screenshot's, and the page text and snapshot the daemon reads have it replaced."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import Page, wait_for
from PIL import Image

from deskpod.agentd.batch import Batch
from deskpod.agentd.browser.elements import ElementActions
from deskpod.agentd.browser.frame_calls import ChildTarget
from deskpod.agentd.browser.frames import FrameReader
from deskpod.agentd.display.live import _Stream
from deskpod.agentd.display.xinput import XInput
from deskpod.agentd.executor import Executor
from deskpod.agentd.secret_mask import SecretMask
from deskpod.errors import BrowserError
from deskpod.protocol import CoordinateMap, Size, parse_action
from deskpod.protocol.live import WatchRequest

pytestmark = pytest.mark.display

SECRET = "Zq8-hunter2-Wx"
"""The credential the controller typed: long enough that its glyphs fill a box."""

Box = tuple[int, int, int, int]


class _Browser:
    """The part of :class:`deskpod.agentd.browser.cdp.Browser` the mask uses, over the fixture
    page's own DevTools websocket; ``children``: out-of-process frames attached as flat
    sessions (their commands carry the ``sessionId``)."""

    device_scale_factor = 1.0

    def __init__(self, page: Page, children: Sequence[ChildTarget] = ()) -> None:
        self.page = page
        self.children = list(children)

    async def read_page(self, use: Any) -> Any:
        async def call(method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 5.0) -> dict[str, Any]:
            try:
                if session in (None, "page"):
                    return self.page.call(method, params)
                return _session_call(self.page, session, method, params)
            except RuntimeError as exc:
                raise BrowserError(str(exc)) from exc

        main = self.page.call("Page.getFrameTree")["frameTree"]["frame"]["id"]
        reader = FrameReader(call, "page", main, self.children)
        try:
            return await use(reader)
        finally:
            await reader.release()

    async def ax_tree_fits(self) -> bool:
        return True


def _session_call(page: Page, session: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One DevTools command to the flat session ``session`` over the page's websocket."""
    call_id = next(page._ids)
    page._ws.send(json.dumps({"id": call_id, "sessionId": session, "method": method, "params": params or {}}))
    while True:
        message = json.loads(page._ws.recv(timeout=10))
        if message.get("id") != call_id:
            continue
        if "error" in message:
            raise RuntimeError(f"CDP {method} failed: {message['error']}")
        result: dict[str, Any] = message["result"]
        return result


def _box(page: Page, expression: str) -> Box:
    """The screen box (kiosk: CSS pixels == screen pixels) of the rectangle ``expression`` gives."""
    r = page.evaluate(f"(() => {{ const r = {expression}; return [r.left, r.top, r.right, r.bottom]; }})()")
    return int(r[0]), int(r[1]), int(r[2] + 0.999), int(r[3] + 0.999)


def _shown_places(page: Page) -> dict[str, Box]:
    """Where the page shows the secret now: the text field the password field became, the
    copy field, the paragraph's span and the frame's bold text."""
    return {
        "password field": _box(page, "document.getElementById('pw').getBoundingClientRect()"),
        "copy field": _box(page, "document.getElementById('copy').getBoundingClientRect()"),
        "paragraph": _box(page, "document.getElementById('echo-value').getBoundingClientRect()"),
        "frame": _box(page, "(() => { const f = document.getElementById('frame').getBoundingClientRect();"
                            " const b = document.getElementById('frame').contentDocument.getElementById('v')"
                            ".getBoundingClientRect(); return {left: f.left + b.left, top: f.top + b.top,"
                            " right: f.left + b.right, bottom: f.top + b.bottom}; })()"),
    }


def _image(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def _inner(box: Box, inset: int = 2) -> Box:
    return box[0] + inset, box[1] + inset, box[2] - inset, box[3] - inset


def _all_black(image: Image.Image, box: Box, tolerance: int = 0) -> bool:
    extrema = image.crop(box).getextrema()
    return all(high <= tolerance for _, high in extrema)


def _show_the_password(page: Page, base_url: str, xinput: XInput) -> None:
    """Type the secret into the password field, tick "Show password", and move the pointer
    away (no tooltip, no hover)."""
    page.open(f"{base_url}/secret.html")
    xinput.click(*page.center("pw"))
    wait_for(lambda: page.evaluate("document.activeElement && document.activeElement.id") == "pw")
    xinput.type_text(SECRET)
    wait_for(lambda: page.value("copy") == SECRET)
    xinput.click(*page.center("show"))
    wait_for(lambda: page.evaluate("document.getElementById('pw').type") == "text")
    xinput.move(1200, 780)
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    time.sleep(0.3)  # the last frame reaches the X server


def test_a_shown_password_is_painted_over_only_where_it_shows(desktop: Any, xinput: XInput) -> None:
    page: Page = desktop.page
    _show_the_password(page, desktop.base_url, xinput)
    places = _shown_places(page)
    coords = CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1]))
    mask = SecretMask(_Browser(page))  # type: ignore[arg-type]

    async def body() -> tuple[Any, Any, Any, bytes]:
        executor = Executor(desktop.display_name)
        await executor.start()
        try:
            plain = await executor.screenshot(coords, "png", 80)
            mask.add([SECRET])
            executor.mask_plan = mask.plan
            masked = await executor.screenshot(coords, "png", 80)
            x0, y0, x1, y1 = places["paragraph"]

            async def probe(_: bool) -> tuple[None, None]:
                return None, None

            zoom_action = parse_action({"type": "zoom", "region": [0, y0 - 20, 700, y1 + 20]})
            outcome = await executor.run(Batch([zoom_action], coords, threading.Event(), probe), 10.0)
        finally:
            await executor.close()
        stream = _Stream(desktop.display_name, None, WatchRequest(type="watch", id="w1", quality=90),  # type: ignore[arg-type]
                         mask.plan)
        await stream._submit(stream._open)
        try:
            shot = await stream._submit(stream._shoot, await mask.plan())
        finally:
            await stream.release()
        return plain, masked, outcome.zoom, shot[0]

    plain, masked, zoom, live_jpeg = asyncio.run(body())
    before, after = _image(plain.data), _image(masked.data)
    assert plain.masked == 0 and masked.masked >= len(places), (plain.masked, masked.masked)
    for name, box in places.items():
        assert not _all_black(before, _inner(box)), f"the {name} shows nothing to mask"
        assert _all_black(after, _inner(box)), f"the secret in the {name} is not painted over"
    # Every other pixel is the unmasked screenshot's: the heading, the checkbox, the help text.
    margin = 6
    grown = [(b[0] - margin, b[1] - margin, b[2] + margin, b[3] + margin) for b in places.values()]
    width = before.size[0]
    changed = [(i % width, i // width) for i, (a, b) in enumerate(zip(before.tobytes()[0::3], after.tobytes()[0::3],
                                                                     strict=True)) if a != b]
    stray = [p for p in changed if not any(g[0] <= p[0] < g[2] and g[1] <= p[1] < g[3] for g in grown)]
    assert not stray, f"{len(stray)} pixels outside the secret's places changed, e.g. {stray[:5]}"
    assert len(changed) < 0.05 * before.size[0] * before.size[1], len(changed)
    # The zoom over the paragraph: the span is painted over, the words around it are not.
    zoomed = _image(zoom.data)
    x0, y0, x1, y1 = places["paragraph"]
    top = zoom.offset_y
    assert zoom.masked >= 1
    assert _all_black(zoomed, (x0 + 2, y0 - top + 2, x1 - 2, y1 - top - 2))
    heading_words = _box(page, "document.getElementById('echo').getBoundingClientRect()")
    assert not _all_black(zoomed, (heading_words[0], y0 - top, x0 - 4, y1 - top))
    # The live frame (JPEG): the places are dark, the heading is not.
    live = Image.open(io.BytesIO(live_jpeg)).convert("L")
    for name, box in places.items():
        assert live.crop(_inner(box, 4)).getextrema()[1] < 60, f"the live frame shows the {name}"
    heading = _box(page, "document.getElementById('heading').getBoundingClientRect()")
    low, high = live.crop(heading).getextrema()
    assert low < 60 and high > 200

    # The texts the daemon returns: the page text (every frame) and the element snapshot.
    text, _, _ = asyncio.run(_Browser(page).read_page(lambda reader: reader.text(100_000)))
    snapshot = asyncio.run(ElementActions(_Browser(page)).snapshot(400))  # type: ignore[arg-type]
    assert SECRET in text and SECRET in snapshot.text  # what the page shows, unmasked
    for shown in (mask.text(text), mask.text(snapshot.text)):
        assert SECRET not in shown and "*" * len(SECRET) in shown
        assert "Sign in to the demo shop" in shown

    # A tooltip holding the secret (the paragraph's title) is painted over near the pointer.
    xinput.move(*page.center("echo-value"))
    wait_for(lambda: page.evaluate("document.getElementById('echo').matches(':hover')"))
    assert asyncio.run(mask.plan()).tooltip


def test_with_no_secret_in_the_page_nothing_is_painted(desktop: Any, xinput: XInput) -> None:
    """The guard: a secret the page does not show leaves the screenshot as it is."""
    page: Page = desktop.page
    page.open(f"{desktop.base_url}/secret.html")
    mask = SecretMask(_Browser(page))  # type: ignore[arg-type]
    mask.add([SECRET])

    async def body() -> Any:
        executor = Executor(desktop.display_name)
        await executor.start()
        executor.mask_plan = mask.plan
        try:
            return await executor.screenshot(CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1])),
                                             "png", 80)
        finally:
            await executor.close()

    shot = asyncio.run(body())
    assert shot.masked == 0


def test_a_secret_a_cross_site_frame_shows_is_painted_over_where_the_frame_shows_it(desktop: Any) -> None:
    """A payment widget from another site runs in its own renderer (an out-of-process frame):
    its boxes are moved by where its owner element is in the page."""
    page: Page = desktop.page
    page.open(f"{desktop.base_url}/secret.html?widget=1")
    target = wait_for(lambda: next((t for t in page.call("Target.getTargets")["targetInfos"]
                                    if t["type"] == "iframe" and "secret-frame" in t["url"]), None))
    session = page.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
    try:
        page.evaluate(f"(() => {{ const pw = document.getElementById('pw'); pw.value = {json.dumps(SECRET)};"
                      " pw.dispatchEvent(new Event('input')); return true; })()")

        def shown() -> Any:
            value = _session_call(page, session, "Runtime.evaluate", {
                "expression": "(() => { const r = document.getElementById('shown').getBoundingClientRect();"
                              " return [document.getElementById('shown').textContent, r.left, r.top, r.right,"
                              " r.bottom]; })()", "returnByValue": True})["result"]["value"]
            return value if value[0] == SECRET else None

        _, left, top, right, bottom = wait_for(shown)
        frame = _box(page, "document.getElementById('widget').getBoundingClientRect()")
        expected = (frame[0] + left, frame[1] + top, frame[0] + right, frame[1] + bottom)
        mask = SecretMask(_Browser(page, [ChildTarget(session, target["targetId"], "page")]))  # type: ignore[arg-type]
        mask.add([SECRET])
        plan = asyncio.run(mask.plan())
    finally:
        page.call("Target.detachFromTarget", {"sessionId": session})
    assert not plan.whole, "the cross-site frame was not read"
    covering = [b for b in plan.boxes if b[0] <= expected[0] + 1 and b[1] <= expected[1] + 1
                and b[2] >= expected[2] - 1 and b[3] >= expected[3] - 1]
    assert covering, (plan.boxes, expected)
    assert all(b[2] - b[0] < 400 for b in covering), "more than the secret's characters were boxed"
