"""Hit-testing and reading the page as its user sees it, against the real sandbox.

The demo site's ``/fixtures/hit-cases?case=...`` puts a "Pay now" control where the pay
fixture has its button, in the forms the top document's ``elementFromPoint`` and
``innerText`` do not see: a ``<div onclick>``, an image's ``alt`` as the only label, a
closed shadow root, CSS ``content``, and the ``hit-widget`` page in a same-origin
``<iframe>`` or from ``allowed.test`` (another site: an out-of-process frame). A run that
clicks it must stop at ``L3`` and ask the human; a denial leaves nothing paid. The
observation's ``element_at``, ``focused``, page text and accessibility tree must see
inside both kinds of frame.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod_stack import Stack, page_state, with_client
from deskpod.controller import load_task, run_task
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.protocol import ObserveOptions, Point

pytestmark = pytest.mark.integration

CASES = "http://demo.test/fixtures/hit-cases"
PAY = {"type": "click", "x": 640, "y": 380}
"""The centre of the fixture's "Pay now" control at 1280x800."""
CARD = {"type": "click", "x": 640, "y": 540}
"""The widget's card field at 1280x800 (CSS y 440..480 of the top viewport, below
Chromium's tab strip and toolbar)."""
FRAME_URLS = {"frame": "http://demo.test/fixtures/hit-widget", "xframe": "http://allowed.test/fixtures/hit-widget"}


class Denier:
    """A human who denies every confirmation and cancels every pause, keeping the questions."""

    def __init__(self) -> None:
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        self.requests.append(request)
        return ConfirmationAnswer(False, request.digest, "test", "denied")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        return "cancel"


def pay_task(tmp_path: Path, case: str) -> Path:
    body = {"name": f"hit-{case}", "start_url": f"{CASES}?case={case}",
            "allowed_domains": ["demo.test", "allowed.test"],
            "limits": {"max_steps": 5, "max_wall_time_s": 90}, "steps": [{"actions": [PAY]}],
            "success": {"timeout_s": 2, "page_text_contains": '"paid":1'}}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def page_text(stack: Stack) -> str:
    async def body(client: Any) -> str:
        obs = await client.act([], ObserveOptions(screenshot=False, page_text=True))
        return str(obs.page_text)

    return str(with_client(stack, body))


@pytest.mark.parametrize("case", ["div", "img", "shadow", "css", "frame", "xframe"])
def test_a_pay_control_the_top_document_hides_is_l3(stack: Stack, tmp_path: Path, case: str) -> None:
    """Found in review: each of these "Pay now" controls was pressed as L1 without a question."""
    human = Denier()
    result = asyncio.run(run_task(load_task(pay_task(tmp_path, case)), stack.ws_url, stack.token,
                                  audit_dir=tmp_path / "audit", channel=human))
    assert result.status == "cancelled", result.reason
    [request] = human.requests
    assert request.level == "L3", request
    assert "pay" in " ".join(request.reasons).lower()
    # Denied: nothing was clicked (in the frame cases the state line is the frame's).
    assert '"paid":0' in page_text(stack).replace(" ", "")
    steps = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert any(e.get("event") == "confirmation_requested" and e.get("level") == "L3" for e in steps)


@pytest.mark.parametrize("case", ["frame", "xframe"])
def test_element_at_focus_text_and_accessibility_see_inside_frames(stack: Stack, case: str) -> None:
    """Found in review: element_at and the focus named the iframe, page text left the frame's
    text out without notice, and the accessibility tree showed a bare ``Iframe``."""

    async def body(client: Any) -> tuple[Any, Any, Any]:
        await client.navigate(f"{CASES}?case={case}")
        probe = await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=PAY["x"], y=PAY["y"])))
        focus = await client.act([CARD], ObserveOptions(screenshot=False, page_text=True, accessibility=True,
                                                         max_ax_nodes=1000))
        return probe, focus, await client.act([], ObserveOptions(screenshot=False))

    probe, seen, _ = with_client(stack, body)
    if case == "xframe":
        # The other site's frame really is out of process: the daemon attached its target.
        assert "out-of-process frame attached" in stack.container("sandbox").logs().decode()
    element = probe.element_at
    assert element is not None and element.tag == "button", element
    assert element.role == "button" and element.name == "Pay now"
    assert element.frame == FRAME_URLS[case]
    # The box is the button's on the screen: x 384..896, in the model space (1:1 at 1280x800).
    assert element.box is not None and abs(element.box[0] - 384) <= 2 and abs(element.box[2] - 896) <= 2
    assert element.box[1] < PAY["y"] < element.box[3]

    assert seen.focused is not None and seen.focused.tag == "input", seen.focused
    assert seen.focused.name == "Card number" and seen.focused.autocomplete == "cc-number"
    assert seen.focused.frame == FRAME_URLS[case]

    assert seen.page_text is not None and "Order total: $10.00" in seen.page_text
    assert f"[frame {FRAME_URLS[case]}]\nWidget text: card ending 4242" in seen.page_text
    assert seen.unread_frames == []

    nodes = seen.accessibility or []
    frame_nodes = [n for n in nodes if n.frame == FRAME_URLS[case]]
    assert any(n.role == "button" and n.name == "Pay now" for n in frame_nodes), nodes
    assert any(n.role == "textbox" and n.name == "Card number" and n.focused for n in frame_nodes), nodes
    iframe = next(i for i, n in enumerate(nodes) if n.role == "Iframe")
    assert nodes[iframe + 1].frame == FRAME_URLS[case] and nodes[iframe + 1].depth > nodes[iframe].depth


@pytest.mark.parametrize(("case", "label"), [("div", "Pay now"), ("img", "Pay now"), ("shadow", "Pay now"),
                                             ("css", "Pay now")])
def test_element_at_names_the_control_as_the_accessibility_tree_does(stack: Stack, case: str, label: str) -> None:
    """The control under the point is the one a click activates, labelled by its accessible name."""

    async def body(client: Any) -> Any:
        await client.navigate(f"{CASES}?case={case}")
        return (await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=PAY["x"], y=PAY["y"])))
                ).element_at

    element = with_client(stack, body)
    assert element is not None, case
    assert label in " ".join(filter(None, [element.name, element.text])), element
    assert element.frame is None
    if case == "div":
        assert element.tag == "div" and element.clickable
    else:
        assert element.tag == "button" and element.role == "button" and element.name == label
    assert page_state(str(page_text(stack)))["paid"] == 0
