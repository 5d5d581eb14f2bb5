"""The clipboard actions' validation, their risk levels and the scrubbing of what a read returns;
``drop_files``' validation and level; a file chooser answered by a typed path and Enter."""

from __future__ import annotations

import pytest

from deskpod.adapters import anthropic
from deskpod.adapters._common import CHOOSER_NOTE
from deskpod.controller.credentials import scrub_observation
from deskpod.controller.gui.chooser import ChooserTyping
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.errors import InvalidActionError
from deskpod.protocol import (
    MAX_CLIPBOARD_CHARS,
    ClipboardRead,
    ClipboardWrite,
    DropFiles,
    FileChooser,
    Keypress,
    Observation,
    SetFiles,
    TypeText,
    action_points,
    parse_action,
)


def test_clipboard_actions_parse_and_bad_ones_are_refused_by_name() -> None:
    assert isinstance(parse_action({"type": "clipboard_read"}), ClipboardRead)
    written = parse_action({"type": "clipboard_write", "text": "héllo\nworld"})
    assert isinstance(written, ClipboardWrite) and written.text == "héllo\nworld"
    for bad in ({"type": "clipboard_write", "text": "x" * (MAX_CLIPBOARD_CHARS + 1)},
                {"type": "clipboard_write", "text": "a\x00b"},
                {"type": "clipboard_write"},
                {"type": "clipboard_read", "text": "x"}):
        with pytest.raises(InvalidActionError) as caught:
            parse_action(bad, 2)
        assert caught.value.detail == {"action_index": 2, "action": bad["type"]}


def test_a_clipboard_read_is_l2_unless_the_task_allows_it_and_a_write_is_l1() -> None:
    read, write = ClipboardRead(type="clipboard_read"), ClipboardWrite(type="clipboard_write", text="hi")
    judged = ActionClassifier().classify(read, ActionContext())
    assert judged.level == "L2" and "secret" in " ".join(judged.reasons)
    assert ActionClassifier(clipboard_read=True).classify(read, ActionContext()).level == "L1"
    assert ActionClassifier().classify(write, ActionContext()).level == "L1"


def test_drop_files_takes_a_point_and_workspace_paths_and_is_an_upload() -> None:
    dropped = parse_action({"type": "drop_files", "x": 3, "y": 4, "paths": ["a.txt"]})
    assert isinstance(dropped, DropFiles) and [(p.x, p.y) for p in action_points(dropped)] == [(3, 4)]
    assert ActionClassifier().classify(dropped, ActionContext()).level == "L2"
    for bad in ({"type": "drop_files", "x": 3, "y": 4, "paths": []},
                {"type": "drop_files", "x": 3, "y": 4, "paths": ["a"] * 17},
                {"type": "drop_files", "x": 3, "y": 4, "paths": ["a\x00b"]},
                {"type": "drop_files", "paths": ["a.txt"]}):
        with pytest.raises(InvalidActionError):
            parse_action(bad)


def test_a_typed_secret_is_scrubbed_from_the_clipboard_text() -> None:
    secret = "correct-horse-battery-staple"
    obs = Observation(clipboard=f"copied: {secret}!")
    assert scrub_observation(obs, [secret]).clipboard == "copied: [secret]!"


def test_an_observation_without_a_read_leaves_the_clipboard_out_of_its_message() -> None:
    assert "clipboard" not in Observation().model_dump(mode="json")
    assert Observation(clipboard="").model_dump(mode="json")["clipboard"] == ""


# ---- a file chooser answered by a typed path and Enter (controller/gui/chooser.py) ----------------

CHOOSER = Observation(file_chooser=FileChooser(multiple=True, tab="T1"))


def test_typing_while_a_chooser_is_reported_fills_its_field_and_enter_answers_it_with_set_files() -> None:
    typing = ChooserTyping()
    assert typing.answer(TypeText(type="type", text="/workspace/upload/a.txt"), CHOOSER) is None
    answered = typing.answer(Keypress(type="keypress", keys=["ENTER"]), CHOOSER)
    assert answered == SetFiles(type="set_files", paths=["upload/a.txt"])
    assert typing.answer(TypeText(type="type", text="b.txt\nc d.txt\n"), CHOOSER) == SetFiles(
        type="set_files", paths=["b.txt", "c d.txt"])
    assert ActionClassifier().classify(answered, ActionContext()).level == "L2"


def test_without_a_chooser_typing_and_keys_go_to_the_page_and_escape_forgets_the_field() -> None:
    typing = ChooserTyping()
    text, enter = TypeText(type="type", text="hello\n"), Keypress(type="keypress", keys=["Return"])
    assert typing.answer(text, Observation()) is text and typing.answer(enter, Observation()) is enter
    assert typing.answer(TypeText(type="type", text="secret.txt"), CHOOSER) is None
    escape = Keypress(type="keypress", keys=["Escape"])
    assert typing.answer(escape, CHOOSER) is escape and typing.field == ""
    assert typing.answer(enter, CHOOSER) is enter, "Enter with an empty field sends Enter"
    assert typing.answer(TypeText(type="type", text="x.txt"), CHOOSER) is None
    assert typing.answer(enter, Observation()) is enter and typing.field == "", "the chooser closed: field forgotten"


def test_the_vendor_formats_tell_the_model_how_to_answer_a_reported_chooser() -> None:
    assert anthropic.dialog_note(CHOOSER) == CHOOSER_NOTE and anthropic.dialog_note(Observation()) is None
    assert "press Return" in CHOOSER_NOTE and "Escape" in CHOOSER_NOTE
