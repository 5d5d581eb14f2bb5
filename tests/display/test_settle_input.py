"""The page's settle script waits for the request's input to reach the page before it
counts frames (agentd/settle.py, ``PAGE_SETTLE_SCRIPT``), in real Chromium on Xvfb.

The input reaches the page's main thread on another channel than the script. When the
click came after the script had run its frames, the transition the click starts was
missed: the script reported no animation, and the settled screenshot could be taken
before the click's effect."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from deskpod.agentd.settle import PAGE_SETTLE_SCRIPT

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop, Page

    from deskpod.agentd.xinput import XInput

LATE_S = 0.3
"""How long after the script starts the click is sent: far past the script's own frames
(about 50 ms), well inside the wait the test allows (1 s)."""


def _start(page: Page, expect: dict[str, Any] | None) -> None:
    """Start the settle script with ``expect``; its answer lands in ``window.__settled``."""
    page.evaluate(f"window.__settled = null; {PAGE_SETTLE_SCRIPT}(3000, {json.dumps(expect)})"
                  ".then(answer => { window.__settled = answer; }); 0")


def _answer(page: Page) -> dict[str, Any]:
    answer: dict[str, Any] = page.wait_until(lambda: page.evaluate("window.__settled"), timeout_s=5)
    return answer


def test_a_late_click_is_waited_for_and_its_transition_counted(desktop: Desktop, page: Page, xinput: XInput) -> None:
    page.open(f"{desktop.base_url}/settle.html")
    _start(page, None)
    seen = _answer(page)["input"]
    x, y = page.center("go")
    _start(page, {"doc": seen["doc"], "event": "pointerup", "count": seen["counts"]["pointerup"],
                  "x": x, "y": y, "scale": 1, "wait_ms": 1000})
    time.sleep(LATE_S)
    xinput.click(x, y)
    answer = _answer(page)
    assert answer["animations"] >= 1, answer
    assert answer["input"]["counts"]["pointerup"] == seen["counts"]["pointerup"] + 1


def test_no_wait_for_a_point_off_the_page_or_another_document(desktop: Desktop, page: Page) -> None:
    """A point outside the viewport, or an expectation of another document, is not waited for."""
    page.open(f"{desktop.base_url}/settle.html")
    _start(page, None)
    seen = _answer(page)["input"]
    for expect in ({"doc": seen["doc"], "event": "pointerup", "count": 0, "x": -50, "y": -50, "scale": 1},
                   {"doc": "another", "event": "pointerup", "count": 0, "x": 10, "y": 10, "scale": 1}):
        started = time.monotonic()
        _start(page, {**expect, "wait_ms": 2000})
        _answer(page)
        assert time.monotonic() - started < 1.5, expect
