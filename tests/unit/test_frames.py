"""Pure parts of reading a page through its frames (:mod:`deskpod.agentd.browser.frames`) and the
risk rules that use what hit-testing reports (accessible name, role, ``clickable``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from deskpod.agentd.browser.frame_calls import ChildTarget
from deskpod.agentd.browser.frames import FrameReader, _pick, frame_header, summarize_ax
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.errors import BrowserError
from deskpod.protocol import ElementInfo, parse_action


def ax(node_id: str, role: str, name: str = "", parent: str | None = None, children: tuple[str, ...] = (),
       backend: int = 0, ignored: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {"nodeId": node_id, "role": {"value": role}, "name": {"value": name},
                            "childIds": list(children), "backendDOMNodeId": backend, "ignored": ignored}
    if parent is not None:
        node["parentId"] = parent
    return node


TOP = [ax("1", "RootWebArea", "shop", children=("2", "3")), ax("2", "heading", "Checkout", parent="1"),
       ax("3", "Iframe", "payment widget", parent="1", backend=42)]
WIDGET = [ax("1", "RootWebArea", "widget", children=("2",)), ax("2", "generic", parent="1", children=("3",)),
          ax("3", "button", "Pay now", parent="2", backend=7)]


def test_a_frames_nodes_follow_its_iframe_node_one_level_deeper_with_its_url() -> None:
    """Found in review: the summary showed a bare ``Iframe`` node and nothing of the widget."""
    nodes = summarize_ax({"top": TOP, "w": WIDGET}, "top", {("page", 42): "w"}, {"top": "page", "w": "child"},
                         {"top": "http://shop.test/", "w": "http://pay.test/widget"}, 100)
    assert [(n["depth"], n["role"], n["name"], n["frame"]) for n in nodes] == [
        (0, "RootWebArea", "shop", None), (1, "heading", "Checkout", None), (1, "Iframe", "payment widget", None),
        (2, "RootWebArea", "widget", "http://pay.test/widget"), (3, "button", "Pay now", "http://pay.test/widget"),
    ]


def test_the_summary_stops_at_max_nodes_and_never_loops_on_a_frame() -> None:
    looping = {("page", 42): "top"}
    nodes = summarize_ax({"top": TOP}, "top", looping, {"top": "page"}, {"top": "u"}, 100)
    assert len(nodes) == 3
    assert len(summarize_ax({"top": TOP, "w": WIDGET}, "top", {("page", 42): "w"}, {"top": "page", "w": "c"},
                            {}, 2)) == 2


def test_an_owner_in_another_session_does_not_match_the_same_backend_id() -> None:
    """Backend node ids are per renderer: the same number in another session is another node."""
    nodes = summarize_ax({"top": TOP, "w": WIDGET}, "top", {("other", 42): "w"}, {"top": "page", "w": "c"}, {}, 100)
    assert [n["role"] for n in nodes] == ["RootWebArea", "heading", "Iframe"]


def test_the_control_is_the_nearest_semantic_listened_or_pointer_element() -> None:
    # [semantic, cursor: pointer] per element from the hit up; listeners per element.
    assert _pick([(False, False), (True, False)], [False, False]) == (1, False)  # <img> in a <button>
    assert _pick([(False, False), (False, False)], [False, True]) == (1, True)  # text in a <div onclick>
    assert _pick([(False, True), (False, True), (False, False)], [False] * 3) == (1, True)  # the pointer's setter
    assert _pick([(False, False)], [False]) == (0, False)  # plain text: the element itself
    assert _pick([(False, False), (False, False), (True, False)], [False, True, False]) == (1, True)


def test_frame_headers_name_the_frame_and_say_when_it_was_unreadable() -> None:
    assert frame_header("http://pay.test/w") == "[frame http://pay.test/w]"
    assert frame_header("http://pay.test/w", readable=False) == "[frame http://pay.test/w: not readable]"


def click_on(element: ElementInfo) -> str:
    return classify_action(parse_action({"type": "click", "x": 1, "y": 1}, 0), ActionContext(element=element)).level


def test_a_clickable_element_or_a_widget_role_labelled_pay_is_l3() -> None:
    """Found in review: a ``<div onclick>`` "Pay now" was L1 (not a control to the classifier)."""
    assert click_on(ElementInfo(tag="div", text="Pay now", clickable=True)) == "L3"
    assert click_on(ElementInfo(tag="div", text="Pay now")) == "L1"
    # An image-only button: the accessible name (from alt) is the label.
    assert click_on(ElementInfo(tag="button", role="button", name="Pay now")) == "L3"
    assert click_on(ElementInfo(tag="pay-widget", role="menuitem", name="Delete account")) == "L3"


def test_a_computed_non_widget_role_does_not_make_text_a_control() -> None:
    """The accessibility tree gives every element a role; "paragraph" is not a button."""
    assert click_on(ElementInfo(tag="p", role="paragraph", text="Please pay attention")) == "L1"
    assert click_on(ElementInfo(tag="span", role="generic", text="Send")) == "L1"


class FakeCdp:
    """Answers a hit test: the page's point lands on an out-of-process frame's owner; the
    frame's own session fails as ``child`` says."""

    def __init__(self, child: str = "error") -> None:
        self.child = child
        self.calls: list[tuple[str, str | None]] = []

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        self.calls.append((method, session))
        if session == "child":
            if self.child == "slow":
                await asyncio.sleep(timeout_s)
            raise BrowserError(f"{method} got no answer")
        answers = {
            "Page.createIsolatedWorld": {"executionContextId": 1},
            "Runtime.evaluate": {"result": {"value": [0, 80, 1]}},
            "DOM.getNodeForLocation": {"backendNodeId": 5, "frameId": "main"},
            "DOM.describeNode": {"node": {"nodeName": "IFRAME", "frameId": "oopif"}},
            "DOM.getBoxModel": {"model": {"content": [0, 100, 1280, 100, 1280, 700, 0, 700]}},
        }
        return answers.get(method, {})


def test_a_point_in_a_frame_that_does_not_answer_is_reported_unreadable() -> None:
    """Not an empty page: the controller must not take a silent frame for nothing there."""
    fake = FakeCdp()
    reader = FrameReader(fake, "page", "main", [ChildTarget("child", "oopif", "page")])
    info = asyncio.run(reader.element_at(640, 380, 1.0))
    assert info == {"tag": "iframe", "frame_unreadable": True}
    assert ("DOM.getNodeForLocation", "child") in fake.calls
    level = classify_action(parse_action({"type": "click", "x": 1, "y": 1}, 0),
                            ActionContext(element=ElementInfo(tag="iframe", frame_unreadable=True)))
    assert level.level == "L2" and "could not be read" in level.reasons[0]


def test_a_reader_stops_calling_once_its_budget_is_spent() -> None:
    fake = FakeCdp(child="slow")
    reader = FrameReader(fake, "page", "main", [ChildTarget("child", "oopif", "page")], budget_s=0.3)
    started = time.monotonic()
    assert asyncio.run(reader.element_at(640, 380, 1.0)) == {"tag": "iframe", "frame_unreadable": True}
    assert time.monotonic() - started < 1.0
    with pytest.raises(BrowserError, match="budget"):
        asyncio.run(reader.focused())


class TextCdp:
    """A page with one in-process frame and one out-of-process frame that fails to answer."""

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        params = params or {}
        if session == "child":
            if method == "Page.getFrameTree":
                return {"frameTree": {"frame": {"id": "x", "url": "http://pay.test/w"}}}
            raise BrowserError(f"{method} got no answer")
        if method == "Page.getFrameTree":
            return {"frameTree": {"frame": {"id": "main", "url": "http://shop.test/"},
                                  "childFrames": [{"frame": {"id": "same", "url": "http://shop.test/ad"}}]}}
        if method == "Page.createIsolatedWorld":
            return {"executionContextId": {"main": 1, "same": 2}[params["frameId"]]}
        if method == "Runtime.evaluate":
            return {"result": {"value": {1: "Checkout", 2: "An ad"}[params["contextId"]]}}
        return {}


def test_page_text_lists_each_frame_under_its_url_and_marks_one_it_could_not_read() -> None:
    """Found in review: frame text was dropped from the page text without notice."""
    reader = FrameReader(TextCdp(), "page", "main", [ChildTarget("child", "x", "page")])
    text, unread, pdfs = asyncio.run(reader.text(10_000))
    assert text == "Checkout\n\n[frame http://shop.test/ad]\nAn ad\n\n[frame http://pay.test/w: not readable]"
    assert unread == ["http://pay.test/w"] and pdfs == []
    assert asyncio.run(FrameReader(TextCdp(), "page", "main", []).text(12)) == ("Checkout\n\n[f", [], [])


class PdfCdp:
    """A page whose frame is a PDF (``application/pdf``), shown by the viewer's frames: the
    extension's out-of-process frame, and the viewer's content frame reported without a URL."""

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        params = params or {}
        if session == "viewer":
            if method == "Page.getFrameTree":
                return {"frameTree": {"frame": {"id": "v", "url": "chrome-extension://mhjf/index.html"},
                                      "childFrames": [{"frame": {"id": "c", "url": ":"}}]}}
            raise BrowserError(f"{method} got no answer")
        if method == "Page.getFrameTree":
            return {"frameTree": {"frame": {"id": "main", "url": "http://shop.test/", "mimeType": "text/html"},
                                  "childFrames": [{"frame": {"id": "doc", "url": "http://shop.test/a.pdf",
                                                             "mimeType": "application/pdf"}}]}}
        if method == "Page.createIsolatedWorld":
            return {"executionContextId": {"main": 1}[params["frameId"]]}
        if method == "Runtime.evaluate":
            return {"result": {"value": "Invoice"}}
        return {}


def test_a_pdf_is_named_by_its_url_and_its_viewers_frames_are_not_listed() -> None:
    """A PDF in a frame gave no text, and the viewer's frame was reported unread as ``":"``."""
    reader = FrameReader(PdfCdp(), "page", "main", [ChildTarget("viewer", "v", "page")])
    text, unread, pdfs = asyncio.run(reader.text(10_000))
    assert text == "Invoice\n\n[frame http://shop.test/a.pdf: PDF, text not read]"
    assert unread == pdfs == ["http://shop.test/a.pdf"]


def test_the_target_a_human_is_shown_names_the_frame_a_control_is_in() -> None:
    element = ElementInfo(tag="button", role="button", name="Pay now", frame="http://pay.test/widget")
    risk = classify_action(parse_action({"type": "click", "x": 1, "y": 1}, 0), ActionContext(element=element))
    assert risk.target == "button 'Pay now' in a frame from pay.test"


def test_the_browser_tracks_out_of_process_frames_under_its_page_and_forgets_them_on_detach() -> None:
    from deskpod.agentd.browser.cdp import Browser

    async def body() -> list[list[str]]:
        browser = Browser()
        browser._session = "page"
        seen = []

        def attached(child: str, parent: str, kind: str = "iframe") -> None:
            browser._on_event("Target.attachedToTarget",
                              {"sessionId": child, "targetInfo": {"targetId": f"t-{child}", "type": kind}}, parent)

        attached("a", "page")
        attached("b", "a")  # a frame inside the first one
        attached("w", "page", kind="worker")  # not a frame
        attached("z", "elsewhere")  # not under this page
        seen.append(sorted(browser._children))
        await asyncio.sleep(0)  # the auto-attach of the new sessions fails quietly (no browser here)
        browser._on_event("Target.detachedFromTarget", {"sessionId": "a"}, "page")
        seen.append(sorted(browser._children))
        return seen

    assert asyncio.run(body()) == [["a", "b"], []]


def test_a_frames_document_request_that_moved_out_of_process_ends_with_that_frames_load() -> None:
    """A cross-site frame (or the PDF viewer's): its document's request begins in the tab's
    session, then the frame moves to a process of its own, whose session reports the rest.
    The tab's network activity counts the request done when that frame stops loading; on
    ceb13dd it stayed in flight, and every settle waited out its whole network wait (1 s)."""
    from deskpod.agentd.browser.cdp import Browser

    async def body() -> list[int]:
        browser = Browser()
        browser._session = "page"
        generation = browser.network.mark()
        for request, frame in (("doc-x", "t-x"), ("doc-y", "t-y")):
            browser._on_event("Network.requestWillBeSent", {"requestId": request, "type": "Document",
                                                            "frameId": frame}, "page")
        browser._on_event("Network.requestWillBeSent", {"requestId": "img", "type": "Image", "frameId": "t-x"}, "page")
        for child in ("x", "y"):
            browser._on_event("Target.attachedToTarget",
                              {"sessionId": child, "targetInfo": {"targetId": f"t-{child}", "type": "iframe"}}, "page")
        seen = [browser.network.pending_since(generation)]
        browser._on_event("Page.frameStoppedLoading", {"frameId": "t-x"}, "x")
        seen.append(browser.network.pending_since(generation))
        browser._on_event("Page.frameStoppedLoading", {"frameId": "t-y"}, "elsewhere")  # not one of the page's frames
        seen.append(browser.network.pending_since(generation))
        browser._on_event("Page.frameStoppedLoading", {"frameId": "t-y"}, "y")
        browser._on_event("Network.loadingFinished", {"requestId": "img"}, "page")
        seen.append(browser.network.pending_since(generation))
        await asyncio.sleep(0)  # the auto-attach of the new sessions fails quietly (no browser here)
        return seen

    assert asyncio.run(body()) == [3, 2, 2, 0]
