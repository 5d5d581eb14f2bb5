"""The element snapshot and refs (deskpod.agentd.browser.elements) on a real Chromium and Xvfb:
the tree Chromium gives, a ref's point on screen, and a click by ref as real XTEST input."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from conftest import Page, wait_for

from deskpod.agentd.browser.elements import ElementActions
from deskpod.agentd.browser.frames import FrameReader
from deskpod.agentd.display.xinput import XInput
from deskpod.errors import BrowserError
from deskpod.protocol import CoordinateMap, Size


class _Browser:
    """The part of :class:`deskpod.agentd.browser.cdp.Browser` the element code uses, over the
    fixture page's own DevTools websocket."""

    device_scale_factor = 1.0

    def __init__(self, page: Page) -> None:
        self.page = page

    async def read_page(self, use: Any) -> Any:
        async def call(method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 5.0) -> dict[str, Any]:
            try:
                return self.page.call(method, params)
            except RuntimeError as exc:  # as the real client does: a DevTools error is a BrowserError
                raise BrowserError(str(exc)) from exc

        main = self.page.call("Page.getFrameTree")["frameTree"]["frame"]["id"]
        return await use(FrameReader(call, "page", main, []))

    async def element_at(self, sx: int, sy: int) -> dict[str, Any] | None:
        return await self.read_page(lambda reader: reader.element_at(sx, sy, self.device_scale_factor))

    async def ax_tree_fits(self) -> bool:
        return True


def test_a_click_by_ref_lands_on_its_element(page: Page, xinput: XInput) -> None:
    page.call("DOM.enable")
    elements = ElementActions(_Browser(page))  # type: ignore[arg-type]
    shot = asyncio.run(elements.snapshot(200))
    line = next(line for line in shot.text.splitlines() if re.match(r"\s*- textbox", line))
    ref = re.search(r"\[ref=(e\d+)\]", line).group(1)  # type: ignore[union-attr]
    coords = CoordinateMap(Size(width=1280, height=800))
    x, y = asyncio.run(elements.point(ref, coords))
    left, top = page.center("field")
    assert abs(x - left) <= 2 and abs(y - top) <= 2, (shot.text, (x, y), (left, top))
    xinput.click(x, y)
    wait_for(lambda: page.evaluate("document.activeElement && document.activeElement.id") == "field")
    assert "RootWebArea" in shot.text and "[ref=" not in shot.text.splitlines()[0]


def test_keys_are_held_around_a_move_and_a_drag(page: Page, desktop: Any) -> None:
    """OpenAI's ``keys`` on move and drag (``hold_keys``): down before the pointer moves
    or presses, up after the release."""
    import threading

    from deskpod.agentd.batch import Batch
    from deskpod.agentd.executor import Executor
    from deskpod.protocol import parse_action

    async def body() -> None:
        executor = Executor(desktop.display_name)
        await executor.start()
        try:
            coords = CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1]))
            x, y = page.center("pad")
            actions = [parse_action({"type": "move", "x": x, "y": y, "hold_keys": ["shift"]}),
                       parse_action({"type": "drag", "path": [{"x": x, "y": y}, {"x": x + 20, "y": y}],
                                     "hold_keys": ["ctrl"]})]

            async def probe(_: bool) -> tuple[None, None]:
                return None, None

            await executor.run(Batch(actions, coords, threading.Event(), probe), 10.0)
        finally:
            await executor.close()

    page.reset_events()
    asyncio.run(body())
    seen = wait_for(lambda: [(e["type"], e.get("key")) for e in page.events("keydown", "keyup", "mousedown",
                                                                             "mouseup")]
                    if len(page.events("keyup")) >= 2 else None)
    assert seen == [("keydown", "Shift"), ("keyup", "Shift"), ("keydown", "Control"), ("mousedown", None),
                    ("mouseup", None), ("keyup", "Control")], seen


def _ref(shot_text: str, pattern: str) -> str:
    line = next(line for line in shot_text.splitlines() if re.search(pattern, line))
    return re.search(r"\[ref=(e\d+)\]", line).group(1)  # type: ignore[union-attr]


def test_select_option_matches_labels_only_never_the_hidden_values(page: Page, desktop: Any) -> None:
    """"opt2" is the value of the option labelled "Delete my account permanently": the
    policy judges the strings sent, so the daemon selects only by what the page shows."""
    from deskpod.errors import InvalidActionError
    from deskpod.protocol import SelectOption

    page.open(f"{desktop.base_url}/select.html")
    page.call("DOM.enable")
    elements = ElementActions(_Browser(page))  # type: ignore[arg-type]
    ref = _ref(asyncio.run(elements.snapshot(200)).text, r'combobox "Account action"')
    with pytest.raises(InvalidActionError):
        asyncio.run(elements.select(SelectOption(type="select_option", ref=ref, values=["opt2"])))
    assert page.evaluate("[window.deleted, document.getElementById('act').value]") == [0, "none"]
    asyncio.run(elements.select(SelectOption(type="select_option", ref=ref, values=["Colour theme number 3"])))
    assert page.evaluate("[window.deleted, document.getElementById('act').value]") == [0, "c3"]


def test_a_select_by_value_is_judged_by_the_labels_its_options_report(page: Page, desktop: Any) -> None:
    """The control at a select's point reports its options (value and label), from which the
    controller turns playwright-mcp's values into labels: "opt2" is "Delete my account
    permanently", which is what is judged (L3) and selected; a direct client's ``by="value"``
    selects by value in the daemon too."""
    from deskpod.controller.gui.element_actions import by_label
    from deskpod.controller.policy.risk import ActionClassifier, ActionContext
    from deskpod.protocol import ElementInfo, SelectOption

    page.open(f"{desktop.base_url}/select.html")
    page.call("DOM.enable")
    browser = _Browser(page)
    elements = ElementActions(browser)  # type: ignore[arg-type]
    ref = _ref(asyncio.run(elements.snapshot(200)).text, r'combobox "Account action"')
    x, y = page.evaluate("(() => { const r = document.getElementById('act').getBoundingClientRect();"
                         " return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)]; })()")
    info = asyncio.run(browser.element_at(x, y)) or {}
    select = ElementInfo(tag=info["tag"], role="combobox", name="Account action", options=info["options"])
    assert len(select.options or []) == 42 and select.options and select.options[-1].value == "opt2"
    judged = by_label(SelectOption(type="select_option", ref=ref, values=["opt2"], by="value"), select)
    assert judged.values == ["Delete my account permanently"] and judged.by == "label"
    assert ActionClassifier().classify(judged, ActionContext(element=select)).level == "L3"
    asyncio.run(elements.select(judged))
    assert page.evaluate("[window.deleted, document.getElementById('act').value]") == [1, "opt2"]
    asyncio.run(elements.select(SelectOption(type="select_option", ref=ref, values=["c3"], by="value")))
    assert page.evaluate("document.getElementById('act').value") == "c3"


def test_a_ref_covered_at_its_centre_is_refused(page: Page, desktop: Any) -> None:
    """The security review's page: a checkbox "Remember me" over the centre of the text
    field "Your name", then "Pay now". A click at the field's point lands on the checkbox,
    so its ref is refused (``ref_obscured``): the controller judged the checkbox there,
    and ``fill_form`` used to type "\\t\\n" into the field (Tab to "Pay now", Return
    pressed it) unjudged. Refs that are not covered (a button, one whose centre is a
    child ``<span>``) still resolve."""
    from deskpod.errors import RefObscuredError

    page.open(f"{desktop.base_url}/overlay.html")
    page.call("DOM.enable")
    elements = ElementActions(_Browser(page))  # type: ignore[arg-type]
    text = asyncio.run(elements.snapshot(200)).text
    name, agree = _ref(text, r'textbox "Your name"'), _ref(text, r'checkbox "Remember me"')
    pay, wrapped = _ref(text, r'button "Pay now"'), _ref(text, r'button "Inner text')
    coords = CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1]))
    with pytest.raises(RefObscuredError) as caught:
        asyncio.run(elements.point(name, coords))
    assert caught.value.code == "ref_obscured" and caught.value.detail == {"reason": "obscured", "ref": name}
    for ref, element_id in ((agree, "agree"), (pay, "pay"), (wrapped, "wrapped")):
        x, y = asyncio.run(elements.point(ref, coords))
        cx, cy = page.center(element_id)
        assert abs(x - cx) <= 2 and abs(y - cy) <= 2, (ref, (x, y), (cx, cy))


def test_fill_form_on_a_covered_text_field_types_nothing(page: Page, desktop: Any) -> None:
    """The review's reproduction on the daemon: ``fill_form`` "\\t\\n" into "Your name"
    (covered by "Remember me") is refused before any input; nothing is paid or typed."""
    import threading

    from deskpod.agentd.batch import Batch
    from deskpod.agentd.executor import Executor
    from deskpod.errors import RefObscuredError
    from deskpod.protocol import parse_action

    page.open(f"{desktop.base_url}/overlay.html")
    page.call("DOM.enable")
    elements = ElementActions(_Browser(page))  # type: ignore[arg-type]
    name = _ref(asyncio.run(elements.snapshot(200)).text, r'textbox "Your name"')
    coords = CoordinateMap(Size(width=desktop.size[0], height=desktop.size[1]))

    async def fill() -> None:
        executor = Executor(desktop.display_name)
        await executor.start()
        executor.elements = elements
        try:
            async def probe(_: bool) -> tuple[None, None]:
                return None, None

            form = parse_action({"type": "fill_form", "fields": [{"ref": name, "value": "\t\n"}]})
            await executor.run(Batch([form], coords, threading.Event(), probe), 10.0)
        finally:
            await executor.close()

    with pytest.raises(RefObscuredError):
        asyncio.run(fill())
    page.evaluate("new Promise(r => setTimeout(() => r(true), 300))")
    assert page.evaluate("[window.paid, document.getElementById('name').value, "
                         "document.getElementById('agree').checked]") == [0, "", False]
