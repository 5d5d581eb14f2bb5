"""The console's JavaScript speaks exactly the messages of :mod:`deskpod.service.messages`.

Every message the console builds is one ``send({type: ...})`` (or, for a person's input
during a takeover, ``input({type: ...})``, the action of a ``human_input``) in
``service/console/static/console.js``. The pure test reads those literals and checks each
type against the generated JSON Schemas; the browser test runs the real page in Debian's
Chromium (Playwright) against a stand-in of ``/console/ws``, answers every question and
drives a takeover, and validates every message the page sent against the JSON Schema
``deskpod schema`` writes for its type, and against the models the service reads it with.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, TypeAdapter

from deskpod.controller.confirm import ActionSubject, ConfirmationRequest, PauseNotice
from deskpod.controller.credentials import CredentialRequest
from deskpod.protocol import ACTION_TYPES, Size
from deskpod.schema import write_schemas
from deskpod.service.console.app import STATIC_DIR
from deskpod.service.messages import (
    ClientMessage,
    ConfirmationRequestBody,
    CredentialRequestBody,
    PauseNoticeBody,
    ServiceConfirmationRequired,
    ServiceCredentialRequired,
    ServicePauseRequired,
    ServiceSession,
    ServiceTakeoverState,
)

CONSOLE_JS = STATIC_DIR / "console.js"
ORIGIN = "http://console.test"
PERSON = "alice"
SESSION = "session-1"
SCREEN = Size(width=1280, height=800)


def _js_literal_types(call: str) -> set[str]:
    """The ``type`` of every object literal console.js passes to ``call(...)``."""
    return set(re.findall(rf'\b{call}\(\{{type: "([a-z_]+)"', CONSOLE_JS.read_text()))


def _inbound_types() -> dict[str, type[BaseModel]]:
    """Every inbound message ``type`` and its model."""
    found: dict[str, type[BaseModel]] = {}
    for model in get_args(get_args(ClientMessage)[0]):
        for value in get_args(model.model_fields["type"].annotation):
            found[value] = model
    return found


def test_every_message_literal_of_the_console_is_a_service_message(tmp_path: Path) -> None:
    """Each ``send({type})`` of console.js names an inbound message with a published schema,
    and each ``input({type})`` a protocol action (the ``action`` of a ``human_input``)."""
    sent, inputs = _js_literal_types("send"), _js_literal_types("input")
    assert {"confirm", "review", "credential", "takeover", "handback", "human_input"} <= sent
    models = _inbound_types()
    assert sent <= set(models)
    published = {m["name"] for m in write_schemas(tmp_path)["wires"]["service"]}
    assert {models[t].__name__ for t in sent} <= published
    assert inputs and inputs <= set(ACTION_TYPES)


def _confirmation(request_id: str) -> ServiceConfirmationRequired:
    request = ConfirmationRequest(
        id=request_id, run_id="run-1", step=1, summary="click Pay",
        subject=ActionSubject(action={"type": "click", "x": 640, "y": 400, "button": "left"}, data=None,
                              url="http://demo.test/pay", screenshot_format="png", screenshot_data="iVBORw0KGgo=",
                              screenshot_sha256="b" * 64),
        level="L2", reasons=("payment",), reversible=False, digest="a" * 64, timeout_s=120.0)
    return ServiceConfirmationRequired(session=SESSION, request=ConfirmationRequestBody.model_validate(
        request.to_json()))


def _pause(pause_id: str) -> ServicePauseRequired:
    notice = PauseNotice(pause_id, "run-1", "injection", "the page instructs the agent", ("ignore the task",),
                         "http://demo.test/", None, 300.0)
    return ServicePauseRequired(session=SESSION, notice=PauseNoticeBody.model_validate(notice.to_json()))


def _credential(request_id: str) -> ServiceCredentialRequired:
    request = CredentialRequest(request_id, "run-1", "shop password", "http://shop.test/login", "textbox",
                                "Password", 120.0)
    return ServiceCredentialRequired(session=SESSION, request=CredentialRequestBody.model_validate(request.to_json()))


class _Console:
    """The console page in Chromium, its ``/console/ws`` answered by the test."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.sent: list[dict[str, Any]] = []
        self.socket: Any = None
        page.route(f"{ORIGIN}/**", self._serve)
        # The secret the answer to the sign-in form gives the page (static/secret.js keeps it there).
        page.add_init_script("window.localStorage.setItem('deskpod-console-page-secret', 'p'.repeat(43));")
        page.route_web_socket(re.compile(r"/console/live/"), lambda ws: None)  # the live view: silent
        page.route_web_socket(f"ws://{urlsplit(ORIGIN).netloc}/console/ws", self._connected)

    def _serve(self, route: Any) -> None:
        path = urlsplit(route.request.url).path
        if path == "/console/me":
            route.fulfill(status=200, content_type="application/json", body=json.dumps(
                {"name": PERSON, "role": "approver"}))
        elif path == "/console/":
            route.fulfill(status=200, content_type="text/html", body=(STATIC_DIR / "index.html").read_text())
        elif path.startswith("/console/static/") and (STATIC_DIR / path.rsplit("/", 1)[1]).is_file():
            name = path.rsplit("/", 1)[1]
            kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/html")
            route.fulfill(status=200, content_type=kind, body=(STATIC_DIR / name).read_text())
        else:
            route.fulfill(status=404, body="")

    def _connected(self, socket: Any) -> None:
        self.socket = socket
        socket.on_message(lambda text: self.sent.append(json.loads(text)))

    def tell(self, message: BaseModel) -> None:
        """Send one service message to the page."""
        self.socket.send(message.model_dump_json())
        self.page.wait_for_timeout(50)

    def expect(self, count: int) -> None:
        """Wait until the page has sent ``count`` messages in all."""
        deadline = time.monotonic() + 10
        while len(self.sent) < count and time.monotonic() < deadline:
            self.page.wait_for_timeout(25)
        assert len(self.sent) >= count, self.sent


@pytest.mark.process
def test_what_the_console_sends_fits_the_schemas(tmp_path: Path) -> None:
    """Chromium runs console.js: every answer, a takeover, a person's pointer and keys, and a
    handback; each message it sent is valid against its type's JSON Schema and the service's models."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            console = _Console(page)
            page.goto(f"{ORIGIN}/console/")
            page.wait_for_function("document.getElementById('status').textContent.startsWith('connected')")
            console.tell(ServiceSession(session=SESSION, task="pay", start_url="http://demo.test/", url=None,
                                        title=None, state="awaiting_confirmation", screen=SCREEN))
            answers = [(_confirmation("confirm-1"), "article.confirm button.approve"),
                       (_confirmation("confirm-2"), "article.confirm button.deny"),
                       (_pause("pause-1"), "article.pause button.resume"),
                       (_pause("pause-2"), "article.pause button.cancel"),
                       (_pause("pause-3"), "article.pause button.takeover"),
                       (_credential("credential-1"), "article.credential button.cancel")]
            for count, (question, button) in enumerate(answers, 1):
                console.tell(question)
                page.click(button)
                console.expect(count)
            console.tell(_credential("credential-2"))
            page.fill("article.credential input.secret", "pw-of-the-shop")
            page.press("article.credential input.secret", "Enter")
            console.expect(len(answers) + 1)
            page.click("article.session button.takeover")
            console.expect(len(answers) + 2)
            console.tell(ServiceTakeoverState(session=SESSION, active=True, by=PERSON))
            box = page.locator("article.session canvas.live").bounding_box()
            assert box is not None
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            before = len(console.sent)
            page.mouse.click(x, y)  # click
            page.mouse.dblclick(x + 20, y)  # click, then double_click
            page.mouse.move(x - 100, y - 50)
            page.mouse.down()
            page.mouse.move(x + 100, y + 50, steps=4)
            page.mouse.up()  # drag
            page.mouse.move(x, y)
            page.mouse.wheel(0, 300)  # scroll
            page.keyboard.press("a")  # type
            page.keyboard.press("Enter")  # keypress
            page.keyboard.press("Control+a")  # keypress, a chord
            console.expect(before + 8)
            page.click("article.session button.handback")
            console.expect(before + 9)
        finally:
            browser.close()

    schemas = {m["name"]: json.loads((tmp_path / m["file"]).read_text())
               for m in write_schemas(tmp_path)["wires"]["service"]}
    models = _inbound_types()
    adapter: TypeAdapter[Any] = TypeAdapter(ClientMessage)
    for message in console.sent:
        name = models[message["type"]].__name__
        errors = [e.message for e in Draft202012Validator(schemas[name]).iter_errors(message)]
        assert errors == [], (message, errors)
        assert type(adapter.validate_python(message)).__name__ == name
    kinds = [m["type"] for m in console.sent]
    assert set(kinds) == _js_literal_types("send"), kinds
    actions = [m["action"]["type"] for m in console.sent if m["type"] == "human_input"]
    assert set(actions) == _js_literal_types("input"), actions
    assert [m["answer"] for m in console.sent if m["type"] == "review"] == ["resume", "cancel", "takeover"]
    assert [m.get("approve") for m in console.sent if m["type"] == "confirm"] == [True, False]
    assert {m["request_id"] for m in console.sent if m["type"] == "confirm"} == {"confirm-1", "confirm-2"}
