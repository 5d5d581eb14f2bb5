"""The daemon's read of a page's key facts (:mod:`deskpod.agentd.browser.key_facts`) over a scripted
DevTools session: where key listeners are, the declared shortcuts cut to their caps, a frame that
fails left out, listeners not read while a field has the focus."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deskpod.agentd.browser.key_facts import FocusStep
from deskpod.agentd.browser.frames import FrameReader
from deskpod.agentd.browser.frame_calls import ChildTarget
from deskpod.errors import BrowserError
from deskpod.protocol import PageKeys
from deskpod.protocol.page_keys import MAX_KEY_SHORTCUTS, MAX_SHORTCUT_KEYS_CHARS


class KeysCdp:
    """A page whose nodes a key reaches are the document, no body and a focused button; the
    listeners on each (by page-side object id) are ``listeners``; ``shortcuts`` is what the
    shortcut script answers; the session ``child`` fails."""

    def __init__(self, listeners: dict[str, list[str]], shortcuts: Any = ()) -> None:
        self.listeners = listeners
        self.shortcuts = list(shortcuts)
        self.calls: list[tuple[str, str | None]] = []

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        params = params or {}
        self.calls.append((method, session))
        if session == "child":
            raise BrowserError(f"{method} got no answer")
        if method == "Page.createIsolatedWorld":
            return {"executionContextId": 1}
        if method == "Runtime.evaluate":
            if "accesskey" in params["expression"]:
                return {"result": {"value": self.shortcuts}}
            return {"result": {"objectId": "nodes"}}
        if method == "Runtime.getProperties":
            return {"result": [{"name": "0", "value": {"objectId": "document"}},
                               {"name": "1", "value": {"type": "object", "subtype": "null"}},
                               {"name": "2", "value": {"objectId": "button"}},
                               {"name": "3", "value": {"objectId": "list"}},
                               {"name": "length", "value": {"value": 4}}]}
        if method == "DOM.describeNode":
            return {"node": {"backendNodeId": {"document": 1, "button": 2, "list": 3}[params["objectId"]]}}
        if method == "DOM.resolveNode":
            return {"object": {"objectId": {1: "document", 2: "button", 3: "list"}[params["backendNodeId"]]}}
        if method == "Runtime.callFunctionOn":
            return {"result": {"objectId": "window"}}
        if method == "DOMDebugger.getEventListeners":
            return {"listeners": [{"type": t} for t in self.listeners.get(params["objectId"], [])]}
        return {}


def read(cdp: KeysCdp, editable: bool = False, path: list[FocusStep] | None = None) -> PageKeys:
    reader = FrameReader(cdp, "page", "main", [ChildTarget("child", "oopif", "page")])
    facts = asyncio.run(reader.key_facts(path or [FocusStep("page", "main")], editable))
    return PageKeys(**facts)


def test_key_listeners_are_found_on_the_window_and_the_focused_chain() -> None:
    cdp = KeysCdp({"window": ["keydown"], "list": ["keyup"], "button": ["click"]})
    assert read(cdp).listeners == ["window", "focused"]
    assert read(KeysCdp({"document": ["keypress"]})).listeners == ["document"]
    assert read(KeysCdp({"button": ["click", "mousedown"]})).listeners == []


def test_the_focused_chain_is_read_up_to_its_first_listener() -> None:
    cdp = KeysCdp({"button": ["keydown"], "list": ["keydown"]})
    assert read(cdp).listeners == ["focused"]
    assert sum(1 for method, _ in cdp.calls if method == "DOMDebugger.getEventListeners") == 3  # document, window, button


def test_listeners_are_not_read_while_a_field_has_the_focus() -> None:
    cdp = KeysCdp({"window": ["keydown"]}, [{"kind": "accesskey", "keys": "p", "label": "Pay now"}])
    facts = read(cdp, editable=True)
    assert facts.listeners == [] and [s.label for s in facts.shortcuts] == ["Pay now"]
    assert not any(method == "DOMDebugger.getEventListeners" for method, _ in cdp.calls)


def test_shortcuts_are_checked_and_cut_whatever_the_script_answers() -> None:
    answered = [{"kind": "aria", "keys": "Control+Enter" * 50, "label": "Send" * 1000}, "junk",
                {"kind": "other", "keys": 5}] + [{"kind": "accesskey", "keys": "x"}] * (MAX_KEY_SHORTCUTS + 5)
    facts = read(KeysCdp({}, answered))
    assert len(facts.shortcuts) == MAX_KEY_SHORTCUTS
    first, second = facts.shortcuts[:2]
    assert first.kind == "aria" and len(first.keys) == MAX_SHORTCUT_KEYS_CHARS and first.label is not None
    assert second.kind == "accesskey" and second.keys == "5"


def test_a_frame_that_fails_is_left_out_and_the_top_document_must_answer() -> None:
    cdp = KeysCdp({"window": ["keydown"]}, [{"kind": "accesskey", "keys": "p", "label": "Pay"}])
    facts = read(cdp, path=[FocusStep("page", "main"), FocusStep("child", "oopif")])
    assert facts.listeners == ["window"] and len(facts.shortcuts) == 1
    with pytest.raises(BrowserError):
        read(FailingTop())


class FailingTop(KeysCdp):
    """A page whose top document does not answer."""

    def __init__(self) -> None:
        super().__init__({})

    async def __call__(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, Any]:
        raise BrowserError(f"{method} got no answer")
