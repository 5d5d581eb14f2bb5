"""Keyboard moves judged key by key, against the real sandbox and the demo site.

A chord or typed text that moves the focus and then presses or types is split by the
controller (:mod:`deskpod.controller.keysplit`), and each piece is judged against the
element focused when it lands. The human is a scripted channel; what happened is read
back from the fixtures' ``STATE`` line, the audit log and the failure scene.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskpod_stack import Stack
from test_enforcement import Human, approve, events, fixture_state, play, task_file

pytestmark = pytest.mark.integration

EMAIL = {"type": "click", "x": 640, "y": 240}
"""The centre of the login fixture's Email field at 1280x800 (the password field is below it)."""
SECRET = "hunter2-SECRET"
BLANK = {"type": "click", "x": 1200, "y": 200}
"""An empty spot of the pay fixture's page: the page has the keyboard focus, no element has
(right after a navigation the focus may still be in the browser's own toolbar)."""


@pytest.mark.parametrize("press", [
    {"type": "keypress", "keys": ["Tab", "Return"]},
    {"type": "type", "text": "\t\n"},
    {"type": "type", "text": "\t "},
], ids=["chord", "typed-tab-newline", "typed-tab-space"])
def test_tab_then_press_with_nothing_focused_is_l3_on_the_button_it_reaches(
    stack: Stack, tmp_path: Path, press: dict
) -> None:
    """Found by the review: with nothing focused these pressed "Pay now" as L1 (judged against
    the element focused before the action). The press is judged on "Pay now" now: L3, asked, denied."""
    human = Human()
    path = task_file(tmp_path, "http://demo.test/fixtures/pay", [[BLANK], [press]],
                     {"page_text_contains": "Payment sent"})
    result = play(stack, tmp_path, path, human)
    steps = [e for e in events(result) if e["event"] == "step"]
    assert result.status == "cancelled" and "confirmation denied" in result.reason, (result.reason, steps)
    assert fixture_state(stack)["paid"] == 0
    [request] = human.requests
    assert request.level == "L3" and "Pay now" in request.summary, request.summary
    assert steps[0]["risks"][0]["risk"] == "L1"
    step = steps[-1]
    assert step["outcome"] == "cancelled" and step["segments_done"] == 1
    [risk] = step["risks"]
    assert risk["risk"] == "L3" and [s["risk"] for s in risk["segments"]] == ["L1", "L3"]
    assert risk["segments"][-1]["approval"] == "refused"


@pytest.mark.parametrize("answer", ["approve", "deny"])
def test_a_password_typed_after_a_tab_is_asked_for_and_never_recorded(
    stack: Stack, tmp_path: Path, answer: str
) -> None:
    """Found by the review: "alice@example.com\\thunter2-SECRET" typed from the Email field was L1
    and the password was in the audit log and the failure scene. Its second half lands in the
    password field: L2, asked; approved, the exact text is typed; either way it is recorded nowhere."""
    human = Human(on_confirm=approve if answer == "approve" else None)
    path = task_file(tmp_path, "http://demo.test/fixtures/login",
                     [[EMAIL], [{"type": "type", "text": f"alice@example.com\t{SECRET}"}]],
                     {"page_text_contains": f'"password_length":{len(SECRET)}'})
    result = play(stack, tmp_path, path, human)
    assert len(human.requests) == 1, [e for e in events(result) if e["event"] == "step"]
    [request] = human.requests
    assert request.level == "L2" and "password" in " ".join(request.reasons)
    assert SECRET not in json.dumps(request.to_json(with_screenshot=False))
    text = result.audit_log.read_text()
    assert SECRET not in text and "hunter2" not in text
    typing = [e for e in events(result) if e["event"] == "step" and e["actions"]
              and e["actions"][-1]["type"] == "type"]
    [step] = typing
    assert step["actions"][-1]["text"] == f"[redacted {len(SECRET) + 18} chars]"
    assert [s["risk"] for s in step["risks"][0]["segments"]] == ["L1", "L1", "L2"]
    if answer == "approve":
        assert result.status == "succeeded", result.reason
        return
    assert result.status == "cancelled", result.reason
    assert fixture_state(stack) == {"password_length": 0}
    assert result.scene is not None
    scene = (result.scene / "scene.json").read_text()
    assert SECRET not in scene and "hunter2" not in scene
    assert json.loads(scene)["recent_actions"][-1]["text"] == f"[redacted {len(SECRET) + 18} chars]"


COMPOSER = {"type": "click", "x": 500, "y": 340}
"""The centre of the chat fixture's text box at 1280x800."""
FIELD = {"type": "click", "x": 500, "y": 280}
"""The centre of the button-less form fixture's one field at 1280x800."""


@pytest.mark.parametrize(("page", "steps", "level", "said", "counter"), [
    ("keys-ctrl-enter", [[COMPOSER], [{"type": "type", "text": "ship it"}], [{"type": "keypress", "keys": ["ctrl+Return"]}]],
     "L3", "send", "sent"),
    ("keys-accesskey", [[BLANK], [{"type": "keypress", "keys": ["alt+p"]}]], "L3", "pay", "paid"),
    ("keys-shortcut", [[BLANK], [{"type": "keypress", "keys": ["Down"]}], [{"type": "keypress", "keys": ["Page_Down"]}],
                       [{"type": "keypress", "keys": ["Escape"]}], [{"type": "keypress", "keys": ["Up"]}],
                       [{"type": "keypress", "keys": ["numbersign"]}]], "L2", "listening for keys", "deleted"),
    ("keys-form-enter", [[FIELD], [{"type": "type", "text": "on my way"}], [{"type": "keypress", "keys": ["Return"]}]],
     "L3", "send", "sent"),
], ids=["ctrl-enter-sends", "accesskey-pays", "page-shortcut-deletes", "enter-in-buttonless-form-sends"])
def test_a_key_is_judged_by_what_it_presses_and_a_denial_sends_nothing(
    stack: Stack, tmp_path: Path, page: str, steps: list[list[dict]], level: str, said: str, counter: str
) -> None:
    """Found by the third review: on four honest pages a key paid, sent or deleted at L1 under
    ``--confirm deny``: Control+Enter in a chat box that sends on it, Alt+P on a button with
    ``accesskey="p"``, ``#`` on a mail page whose document deletes the selected message on it,
    Enter in a one-field form with no button labelled "Send message". Each is judged now by what
    it will press: asked, denied, nothing happens. The moves before it (a click, typing into the
    focused field, arrows, Page Down and Escape on the page listening for keys) stay L1."""
    human = Human()
    done_text = {"sent": "Message sent", "paid": "Payment sent", "deleted": "Message deleted"}[counter]
    path = task_file(tmp_path, f"http://demo.test/fixtures/{page}", steps, {"page_text_contains": done_text})
    result = play(stack, tmp_path, path, human)
    done = [e for e in events(result) if e["event"] == "step"]
    assert result.status == "cancelled" and "confirmation denied" in result.reason, (result.reason, done)
    assert fixture_state(stack)[counter] == 0
    [request] = human.requests
    assert request.level == level and said in " ".join(request.reasons).lower(), request.reasons
    assert [step["risks"][0]["risk"] for step in done] == ["L1"] * (len(steps) - 1) + [level], done
    assert done[-1]["outcome"] == "cancelled", done[-1]
