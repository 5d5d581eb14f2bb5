"""Keyboard actions judged key by key: the pure splitting and the run loop.

The pure half checks :mod:`deskpod.controller.keysplit`: where typed text and chords are
cut, and that the pieces add up to the action. The run-loop half plays tasks on a fake
sandbox with a focus ring (Tab moves the focus, Enter or space presses a focused
button, characters go into a focused field), so the controller's re-observation
between pieces sees the focus move as it does in Chromium.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest
from deskpod.controller.keysplit import chord_keysyms, chord_segments, may_move_focus, next_text_segment
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.keys import MODIFIER_KEYSYMS
from deskpod.protocol import FocusedElement, HoldKey, Keypress, Observation, ObserveOptions, TypeText, parse_action
from fake_sandbox import FakeSandbox, Page
from pydantic import BaseModel

PAY_BUTTON = FocusedElement(tag="button", role="button", name="Pay now")
NOTE_BUTTON = FocusedElement(tag="button", role="button", name="Add a note")
EMAIL = FocusedElement(tag="input", role="textbox", name="Email", input_type="text", editable=True)
PASSWORD = FocusedElement(tag="input", role="textbox", name="Password", input_type="password", is_password=True,
                          editable=True)
NOTES = FocusedElement(tag="textarea", role="textbox", name="Notes", editable=True)
SECRET = "hunter2-SECRET"
START = "http://shop.test/"


def pieces(text: str, focus: Sequence[FocusedElement | None]) -> list[str]:
    """Cut ``text`` as the runner does, the focus after piece ``i`` being ``focus[i]`` (the last repeats)."""
    out: list[str] = []
    current = focus[0]
    while text:
        piece = next_text_segment(text, current)
        out.append(piece)
        text = text[len(piece):]
        current = focus[min(len(out), len(focus) - 1)]
    return out


@pytest.mark.parametrize(("text", "focus", "expected"), [
    ("\t\n", [None], ["\t", "\n"]),
    ("\t ", [None, PAY_BUTTON], ["\t", " "]),
    (f"alice@example.com\t{SECRET}", [EMAIL, EMAIL, PASSWORD], ["alice@example.com", "\t", SECRET]),
    ("hello big world", [EMAIL], ["hello big world"]),
    ("line one\r\nline two", [NOTES], ["line one\r\nline two"]),
    ("query\r\nmore", [EMAIL], ["query", "\r\n", "more"]),
    ("a b", [None], ["a", " ", "b"]),
    ("", [None], []),
])
def test_typed_text_is_cut_before_each_key_that_can_move_the_focus_or_press(
    text: str, focus: list[FocusedElement | None], expected: list[str]
) -> None:
    got = pieces(text, focus)
    assert got == expected and "".join(got) == text


def test_a_chord_with_several_keys_becomes_one_chord_per_key_with_its_modifiers() -> None:
    split = chord_segments(Keypress(type="keypress", keys=["shift", "Tab", "Return"]))
    assert [s.keys for s in split] == [["Shift_L", "Tab"], ["Shift_L", "Return"]]
    assert [s.keys for s in chord_segments(Keypress(type="keypress", keys=["ctrl+Tab+ENTER"]))] == [
        ["Control_L", "Tab"], ["Control_L", "Return"]]
    held = chord_segments(HoldKey(type="hold_key", keys=["Tab", "Return"], seconds=0.5))
    assert [(type(s).__name__, s.keys, s.seconds) for s in held if isinstance(s, HoldKey)] == [
        ("HoldKey", ["Tab"], 0.5), ("HoldKey", ["Return"], 0.5)]


@pytest.mark.parametrize("keys", [["ctrl", "a"], ["shift+Tab"], ["Return"], ["Tab", "no-such-key"], ["ctrl", "a", "A"]])
def test_chords_with_one_key_or_an_unknown_name_stay_whole(keys: list[str]) -> None:
    action = Keypress(type="keypress", keys=keys)
    assert chord_segments(action) == [action]


def test_the_pieces_press_what_the_chord_pressed() -> None:
    chord = ["ctrl", "shift", "Tab", "Down", "Return"]
    split = chord_segments(Keypress(type="keypress", keys=chord))
    pressed = [ks for s in split for ks in chord_keysyms(s.keys) or [] if ks not in MODIFIER_KEYSYMS]
    assert pressed == ["Tab", "Down", "Return"]
    assert all(s.keys[:2] == ["Control_L", "Shift_L"] for s in split)


def test_text_with_a_tab_or_newline_may_move_the_focus() -> None:
    assert may_move_focus(TypeText(type="type", text="a\tb")) and may_move_focus(TypeText(type="type", text="a\r"))
    assert not may_move_focus(TypeText(type="type", text="a b"))
    assert not may_move_focus(Keypress(type="keypress", keys=["Tab"]))


@pytest.mark.parametrize("key", ["SPACEBAR", "U0020", "U000D", "NUMPADENTER", "Kp-Enter", "shift+U000D"])
def test_every_spelling_of_enter_or_space_presses_a_focused_button(key: str) -> None:
    """Judged by the keysym the daemon presses: these spellings were L1 on a focused "Pay now"."""
    risk = classify_action(Keypress(type="keypress", keys=[key]), ActionContext(url=START, focused=PAY_BUTTON))
    assert risk.level == "L3", risk


# ---- the run loop ------------------------------------------------------------------------------


@dataclass
class FocusSandbox(FakeSandbox):
    """:class:`FakeSandbox` with a focus ring. ``advance_after``: a field's page script moves the
    focus to the next element after that many characters typed into it (0: never)."""

    ring: list[FocusedElement] = field(default_factory=list)
    focus: int | None = None
    advance_after: int = 0
    pressed: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)

    async def act(self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
                  timeout_s: float = 60.0, **kwargs: Any) -> Observation:
        for index, raw in enumerate(actions):
            action = raw if isinstance(raw, BaseModel) else parse_action(raw, index)
            if isinstance(action, TypeText):
                text = action.text.replace("\r\n", "\n").replace("\r", "\n")
                for char in text:
                    self._key({"\n": "Return", "\t": "Tab"}.get(char, char))
            elif isinstance(action, (Keypress, HoldKey)):
                for keysym in chord_keysyms(action.keys) or []:
                    if keysym not in MODIFIER_KEYSYMS:
                        self._key(keysym)
        return await super().act(actions, observe, timeout_s, **kwargs)

    def _observe(self, options: ObserveOptions, cursor: Any) -> Observation:
        return super()._observe(options, cursor).model_copy(update={"focused": self.focused()})

    def focused(self) -> FocusedElement | None:
        return None if self.focus is None else self.ring[self.focus]

    def _key(self, key: str) -> None:
        element = self.focused()
        if key == "Tab":
            self.focus = 0 if self.focus is None else (self.focus + 1) % len(self.ring)
        elif key in ("Return", "space", " ") and element is not None and element.tag == "button":
            self.pressed.append(element.name or "")
        elif element is not None and element.editable and len(key) == 1:
            name = element.name or ""
            self.values[name] = self.values.get(name, "") + key
            if self.advance_after and self.focus == 0 and len(self.values[name]) == self.advance_after:
                self.focus = 1


class Human:
    """Approves or denies every confirmation; keeps them."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.requests: list[ConfirmationRequest] = []

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        self.requests.append(request)
        return ConfirmationAnswer(self.approve, request.digest, "test")

    async def review(self, notice: Any) -> None:
        return None


def play(sandbox: FocusSandbox, tmp_path: Path, actions: list[dict[str, Any]], human: Human,
         success: str = "never shown") -> tuple[Any, list[dict[str, Any]]]:
    spec = TaskSpec.model_validate({"name": "keys", "start_url": START, "steps": [{"actions": actions}],
                                    "success": {"page_text_contains": success, "timeout_s": 0.1}})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path, channel=human))
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def pay_sandbox() -> FocusSandbox:
    return FocusSandbox({START: Page("Pay", "Order total: $10.00")}, ring=[PAY_BUTTON, NOTE_BUTTON])


def login_sandbox(**extra: Any) -> FocusSandbox:
    return FocusSandbox({START: Page("Sign in", "Sign in")}, ring=[EMAIL, PASSWORD], focus=0, **extra)


@pytest.mark.parametrize("press", [
    {"type": "keypress", "keys": ["Tab", "Return"]},
    {"type": "keypress", "keys": ["Tab+space"]},
    {"type": "hold_key", "keys": ["Tab", "Return"], "seconds": 0.1},
    {"type": "type", "text": "\t\n"},
    {"type": "type", "text": "\t "},
])
@pytest.mark.parametrize("approve", [False, True])
def test_tab_then_press_is_judged_on_the_button_the_focus_reaches(
    tmp_path: Path, press: dict[str, Any], approve: bool
) -> None:
    sandbox = pay_sandbox()
    human = Human(approve)
    result, events = play(sandbox, tmp_path, [press], human)
    [request] = human.requests
    assert request.level == "L3" and "Pay now" in request.summary, request.summary
    assert sandbox.pressed == (["Pay now"] if approve else [])
    assert sandbox.focus == 0  # the Tab ran before the human was asked
    [step] = [e for e in events if e["event"] == "step"]
    [risk] = step["risks"]
    assert risk["risk"] == "L3" and [s["risk"] for s in risk["segments"]] == ["L1", "L3"]
    assert risk["segments"][1]["approval"] == ("approved" if approve else "refused")
    assert step["outcome"] == ("ok" if approve else "cancelled")
    if not approve:
        assert result.status == "cancelled" and step["segments_done"] == 1


@pytest.mark.parametrize("approve", [False, True])
def test_a_password_reached_by_tab_is_l2_and_redacted_everywhere(tmp_path: Path, approve: bool) -> None:
    sandbox = login_sandbox()
    human = Human(approve)
    text = f"alice@example.com\t{SECRET}"
    result, events = play(sandbox, tmp_path, [{"type": "type", "text": text}], human)
    [request] = human.requests
    assert request.level == "L2" and "password" in " ".join(request.reasons)
    assert SECRET not in json.dumps(request.to_json(with_screenshot=False))
    assert sandbox.values == ({"Email": "alice@example.com", "Password": SECRET} if approve
                              else {"Email": "alice@example.com"})
    log = result.audit_log.read_text()
    assert SECRET not in log and f"[redacted {len(text)} chars]" in log
    [step] = [e for e in events if e["event"] == "step"]
    assert [s["risk"] for s in step["risks"][0]["segments"]] == ["L1", "L1", "L2"]
    assert result.scene is not None  # the success text never shows: the run fails or is cancelled
    scene = (result.scene / "scene.json").read_text()
    assert SECRET not in scene and json.loads(scene)["recent_actions"][-1]["text"] == f"[redacted {len(text)} chars]"


def test_text_a_page_script_carried_into_a_password_field_is_redacted_after_the_fact(tmp_path: Path) -> None:
    """No Tab, one piece judged on the Email field (L1), but the field moved the focus to the
    password field part-way: the focus after typing makes the whole text secret in the records."""
    sandbox = login_sandbox(advance_after=4)
    result, events = play(sandbox, tmp_path, [{"type": "type", "text": "1234" + SECRET}], Human(False))
    assert sandbox.values == {"Email": "1234", "Password": SECRET}
    log = result.audit_log.read_text()
    assert SECRET not in log and result.scene is not None and SECRET not in (result.scene / "scene.json").read_text()


def test_the_pieces_type_exactly_the_text_and_plain_text_is_one_request(tmp_path: Path) -> None:
    sandbox = FocusSandbox({START: Page("Notes", "Notes")}, ring=[NOTES, EMAIL], focus=0)
    text = "first line\r\nsecond line\tuser name\nnext"
    play(sandbox, tmp_path, [{"type": "type", "text": text}, {"type": "type", "text": "plain words here"}],
         Human(False))
    typed = [a["text"] for a in sandbox.executed if a["type"] == "type"]
    assert typed == ["first line\r\nsecond line", "\t", "user name", "\n", "next", "plain words here"]
    assert "".join(typed[:-1]) == text


def test_a_key_is_not_judged_on_the_element_it_leaves(tmp_path: Path) -> None:
    """From "Pay now", Tab then Enter presses the note button: nothing to confirm, and the
    note is pressed (judging the whole text on "Pay now" asked about a payment that never came)."""
    sandbox = pay_sandbox()
    sandbox.focus = 0
    human = Human(False)
    play(sandbox, tmp_path, [{"type": "type", "text": "\t\n"}], human)
    assert human.requests == [] and sandbox.pressed == ["Add a note"]


def test_a_tab_typed_from_the_password_field_is_not_typing_into_it(tmp_path: Path) -> None:
    """One question, for the password; the Tab that leaves the password field and the name
    typed into the next field need none."""
    sandbox = FocusSandbox({START: Page("Sign in", "Sign in")}, ring=[EMAIL, PASSWORD, NOTES], focus=0)
    human = Human(True)
    result, events = play(sandbox, tmp_path, [{"type": "type", "text": f"alice\t{SECRET}\tnote"}], human)
    assert len(human.requests) == 1 and "password" in " ".join(human.requests[0].reasons)
    assert sandbox.values == {"Email": "alice", "Password": SECRET, "Notes": "note"}
    [step] = [e for e in events if e["event"] == "step"]
    assert [s["risk"] for s in step["risks"][0]["segments"]] == ["L1", "L1", "L2", "L1", "L1"]
    assert SECRET not in result.audit_log.read_text()


def test_the_policy_confirming_every_type_action_still_asks_for_split_text(tmp_path: Path) -> None:
    """The policy's ``confirm_actions`` names the action's type, whatever its first piece is judged as."""
    sandbox = pay_sandbox()
    human = Human(False)
    spec = TaskSpec.model_validate({"name": "keys", "start_url": START,
                                    "steps": [{"actions": [{"type": "type", "text": "\tx"}]}],
                                    "success": {"page_text_contains": "never", "timeout_s": 0.1}})
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path, channel=human,
                                  policy=Policy(confirm_actions=["type"])))
    assert result.status == "cancelled" and len(human.requests) == 1 and sandbox.focus is None
    assert "every 'type'" in " ".join(human.requests[0].reasons)
