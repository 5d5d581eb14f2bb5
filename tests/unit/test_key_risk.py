"""Keys judged by what they will do (security review round 3, finding 3): a modified Enter in a
field presses the nearest button, a chord matching an ``accesskey`` or ``aria-keyshortcuts``
presses that control, a printable key with nothing editable focused on a page listening for keys
is ``L2``, Enter in a button-less form submits it. The guards: typing into a field, arrows, Page
Down and Escape stay ``L1``, on a page listening for keys too."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deskpod.controller.policy.key_effects import chord_modifiers, pressed_shortcuts, types_character
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.protocol import FocusedElement, KeyShortcut, Observation, PageKeys, parse_action
from deskpod.protocol.observation import MAX_NEAR_LABELS
from deskpod.protocol.page_keys import MAX_KEY_SHORTCUTS, MAX_SHORTCUT_KEYS_CHARS

LISTENING = PageKeys(listeners=["document"])
"""A page with a keydown listener on its document (a mail client's shortcuts)."""

COMPOSER = FocusedElement(tag="textarea", role="textbox", name="Message", editable=True,
                          near_buttons=["Bold", "Send message"])
"""A chat box with no form, its toolbar's buttons beside it."""

LONE_FIELD = FocusedElement(tag="input", role="textbox", name="message", input_type="text", editable=True,
                            in_form=True, form_labels=["Send message", "send-form"])
"""The one field of a form with no submit button."""


def keys(*names: str, focused: FocusedElement | None = None, page_keys: PageKeys | None = None) -> tuple[str, str]:
    risk = classify_action(parse_action({"type": "keypress", "keys": list(names)}, 0),
                           ActionContext(url="http://demo.test/", focused=focused, page_keys=page_keys))
    return risk.level, " ".join(risk.reasons)


def typed(text: str, focused: FocusedElement | None = None, page_keys: PageKeys | None = None) -> str:
    return classify_action(parse_action({"type": "type", "text": text}, 0),
                           ActionContext(url="http://demo.test/", focused=focused, page_keys=page_keys)).level


@pytest.mark.parametrize("chord", ["ctrl+Return", "Control_L+KP_Enter", "shift+Return", "alt+Return", "cmd+Return"])
def test_a_modified_enter_in_a_field_presses_the_nearest_button(chord: str) -> None:
    level, why = keys(chord, focused=COMPOSER)
    assert level == "L3" and "send" in why


def test_a_modified_enter_presses_the_forms_submit_button_before_a_nearer_one() -> None:
    field = COMPOSER.model_copy(update={"in_form": True, "form_submit": "Comment"})
    assert keys("ctrl+Return", focused=field)[0] == "L1"
    assert keys("ctrl+Return", focused=field.model_copy(update={"form_submit": "Post comment"}))[0] == "L3"


def test_plain_enter_and_typing_in_a_chat_box_stay_l1() -> None:
    assert keys("Return", focused=COMPOSER)[0] == "L1"
    assert typed("ship it", COMPOSER, LISTENING) == "L1"


@pytest.mark.parametrize(("shortcut", "chord", "level"), [
    (KeyShortcut(kind="accesskey", keys="p", label="Pay now"), "alt+p", "L3"),
    (KeyShortcut(kind="accesskey", keys="p", label="Pay now"), "alt+shift+P", "L3"),
    (KeyShortcut(kind="accesskey", keys="P", label="Pay now"), "alt+p", "L3"),
    (KeyShortcut(kind="accesskey", keys="p", label="Pay now"), "ctrl+p", "L1"),
    (KeyShortcut(kind="accesskey", keys="p", label="Pay now"), "p", "L1"),
    (KeyShortcut(kind="accesskey", keys="s", label="Sign in"), "alt+s", "L2"),
    (KeyShortcut(kind="aria", keys="Control+Enter", label="Send"), "ctrl+Return", "L3"),
    (KeyShortcut(kind="aria", keys="Alt+Shift+D Delete", label="Delete message"), "Delete", "L3"),
    (KeyShortcut(kind="aria", keys="Alt+Shift+D Delete", label="Delete message"), "alt+shift+d", "L3"),
    (KeyShortcut(kind="aria", keys="Alt+Shift+D", label="Delete message"), "alt+d", "L1"),
    (KeyShortcut(kind="aria", keys="Alt+P", label="Preview"), "alt+p", "L1"),
    (KeyShortcut(kind="aria", keys="Control+Bogus+", label="Pay"), "ctrl+b", "L1"),
])
def test_a_chord_matching_a_declared_shortcut_presses_that_control(shortcut: KeyShortcut, chord: str,
                                                                    level: str) -> None:
    assert keys(chord, page_keys=PageKeys(shortcuts=[shortcut]))[0] == level


@pytest.mark.parametrize("chord", ["numbersign", "#", "shift+3", "e", "Delete", "BackSpace", "space", "eacute", "U4E2D"])
def test_a_character_key_with_nothing_editable_focused_on_a_listening_page_is_l2(chord: str) -> None:
    assert keys(chord, page_keys=LISTENING)[0] == "L2"
    button = FocusedElement(tag="button", role="button", name="Archive")
    assert keys(chord, focused=button, page_keys=PageKeys(listeners=["focused"]))[0] == "L2"
    assert keys(chord)[0] == "L1"
    assert keys(chord, page_keys=PageKeys())[0] == "L1"


def test_text_typed_with_nothing_editable_focused_on_a_listening_page_is_l2() -> None:
    assert typed("#", None, LISTENING) == "L2"
    assert typed("#", None, PageKeys()) == "L1"


@pytest.mark.parametrize("chord", ["Up", "Down", "Left", "Right", "Page_Down", "Page_Up", "Escape", "Home", "End",
                                   "Tab", "ctrl+c", "F5"])
def test_moving_keys_stay_l1_on_a_listening_page(chord: str) -> None:
    assert keys(chord, page_keys=PageKeys(listeners=["window", "document", "body"]))[0] == "L1"


@pytest.mark.parametrize("focused", [
    FocusedElement(tag="input", role="textbox", input_type="text", editable=True),
    FocusedElement(tag="textarea", role="textbox", editable=True),
    FocusedElement(tag="div", role="textbox", editable=True),
])
def test_typing_into_a_focused_field_stays_l1_on_a_listening_page(focused: FocusedElement) -> None:
    assert typed("hello world #1", focused, LISTENING) == "L1"
    for chord in ("e", "numbersign", "BackSpace", "Up", "Page_Down", "Escape"):
        assert keys(chord, focused=focused, page_keys=LISTENING)[0] == "L1", chord


def test_enter_in_a_buttonless_form_submits_it_judged_by_its_labels() -> None:
    level, why = keys("Return", focused=LONE_FIELD)
    assert level == "L3" and "send" in why
    plain = LONE_FIELD.model_copy(update={"form_labels": ["search"]})
    level, why = keys("Return", focused=plain)
    assert level == "L2" and "no submit button" in why
    assert keys("Return", focused=plain.model_copy(update={"form_labels": []}))[0] == "L2"
    assert keys("ctrl+Return", focused=plain)[0] == "L2"


def test_enter_in_a_buttonless_form_typed_as_a_newline_is_judged_the_same() -> None:
    assert typed("\n", LONE_FIELD) == "L3"


def test_a_textarea_in_a_buttonless_form_takes_a_plain_enter_as_a_newline() -> None:
    area = LONE_FIELD.model_copy(update={"tag": "textarea"})
    assert keys("Return", focused=area)[0] == "L1"
    assert keys("ctrl+Return", focused=area)[0] == "L3"


def test_a_form_with_a_harmless_submit_button_stays_l1() -> None:
    search = FocusedElement(tag="input", role="textbox", input_type="text", editable=True, in_form=True,
                            form_submit="Search", form_labels=["Send feedback"])
    assert keys("Return", focused=search)[0] == "L1"


def test_chord_helpers() -> None:
    assert chord_modifiers(["Control_L", "Shift_R", "Super_L", "Return"]) == {"control", "shift", "meta"}
    assert types_character(["Shift_L", "numbersign"]) and types_character(["eacute"])
    assert not types_character(["Control_L", "c"]) and not types_character(["Alt_L", "p"])
    assert not types_character(["Shift_L"]) and not types_character([])
    shortcut = KeyShortcut(kind="accesskey", keys="p q", label="Pay")
    assert pressed_shortcuts(["Alt_L", "q"], [shortcut]) == [shortcut]
    assert pressed_shortcuts(["Alt_L", "p", "q"], [shortcut]) == []


def test_the_facts_are_bounded_and_strict() -> None:
    with pytest.raises(ValidationError):
        PageKeys(shortcuts=[KeyShortcut(kind="accesskey", keys="p")] * (MAX_KEY_SHORTCUTS + 1))
    with pytest.raises(ValidationError):
        KeyShortcut(kind="accesskey", keys="p" * (MAX_SHORTCUT_KEYS_CHARS + 1))
    with pytest.raises(ValidationError):
        KeyShortcut.model_validate({"kind": "hotkey", "keys": "p"})
    with pytest.raises(ValidationError):
        PageKeys.model_validate({"listeners": ["window", "elsewhere"]})
    with pytest.raises(ValidationError):
        PageKeys.model_validate({"listeners": [], "extra": 1})
    with pytest.raises(ValidationError):
        FocusedElement(tag="input", near_buttons=["x"] * (MAX_NEAR_LABELS + 1))


def test_empty_facts_are_left_out_of_a_message_so_older_peers_accept_it() -> None:
    message = Observation(focused=FocusedElement(tag="input")).model_dump(mode="json")
    assert "page_keys" not in message and set(message["focused"]) == {
        "tag", "role", "name", "input_type", "is_password", "editable", "autocomplete", "form_submit", "frame"}
    full = Observation(focused=LONE_FIELD, page_keys=LISTENING)
    assert Observation.model_validate_json(full.model_dump_json()) == full
