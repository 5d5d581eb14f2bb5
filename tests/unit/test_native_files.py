"""An application's file dialog as the observation's ``file_chooser`` and its ``set_files``
answer (:mod:`deskpod.agentd.native_files`), against a scripted display and accessibility
reader; the real dialog: ``tests/integration/test_desktop_zone.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deskpod.adapters._common import CHOOSER_NOTE, state_note
from deskpod.agentd.apps_wire import AppsAccessible, AppsAccessibleRequest
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.agentd.native_controls import file_chooser_of, native_fields
from deskpod.agentd.native_files import NativeFileDialog
from deskpod.controller.gui.chooser import ChooserTyping
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.errors import ExecutionError
from deskpod.protocol import FileChooser, NativeDialog, Observation, SetFiles, parse_action
from deskpod.protocol.coords import CoordinateMap, Size

SAVE = NativeDialog(role="file chooser", title="Save As", app="mousepad", buttons=["Up Path", "Cancel", "Save"])
OPEN = NativeDialog(role="file chooser", title="Open File", app="mousepad", buttons=["Cancel", "_Open"])
EDITOR = AgentWindowInfo(app="Mousepad", title="Save As", box=(0, 21, 1280, 800), window=9, source="editor")
COMMAND = AgentWindowInfo(app="XTerm", title="x", box=(0, 0, 10, 10), window=8, source="command")


class Display:
    def __init__(self, focus: AgentWindowInfo | None) -> None:
        self.focus = focus

    async def window_at(self, x: int, y: int) -> AgentWindowInfo | None:
        return None

    async def focus_window(self) -> AgentWindowInfo | None:
        return self.focus

    def agent_window(self, window: int) -> bool:
        return True


class Reader:
    def __init__(self, dialog: NativeDialog | None) -> None:
        self.dialog = dialog
        self.asked: list[AppsAccessibleRequest] = []

    async def accessible(self, request: AppsAccessibleRequest) -> AppsAccessible:
        self.asked.append(request)
        return AppsAccessible(dialog=self.dialog)


def keys_for(paths: list[str], dialog: NativeDialog | None = SAVE, focus: AgentWindowInfo | None = EDITOR,
             page_chooser: bool = False) -> list[dict[str, Any]] | None:
    answer = NativeFileDialog(Display(focus), Reader(dialog), lambda: page_chooser)
    steps = asyncio.run(answer.keys(SetFiles(type="set_files", paths=paths)))
    return None if steps is None else [step.model_dump(exclude_defaults=True) for step in steps]


def test_a_focused_file_dialog_of_an_application_is_the_file_chooser() -> None:
    assert file_chooser_of(SAVE, EDITOR) == FileChooser(application="editor", save=True)
    assert file_chooser_of(OPEN, EDITOR) == FileChooser(application="editor", save=False)
    assert file_chooser_of(NativeDialog(role="alert", buttons=["Save"]), EDITOR) is None
    assert file_chooser_of(SAVE, COMMAND) is None  # the agent's own command's window: not an application's
    fields = asyncio.run(native_fields(Reader(SAVE), None, None, EDITOR,
                                       CoordinateMap(Size(width=1280, height=800), Size(width=1280, height=800)),
                                       False, False))
    assert fields["file_chooser"] == FileChooser(application="editor", save=True)


def test_set_files_names_the_workspace_file_in_the_dialog_s_location_field_and_confirms() -> None:
    assert keys_for(["reports/./q3.txt"]) == [
        {"type": "keypress", "keys": ["ctrl", "l"]}, {"type": "keypress", "keys": ["ctrl", "a"]},
        {"type": "type", "text": "/workspace/reports/q3.txt"}, {"type": "wait", "seconds": 0.5},
        {"type": "keypress", "keys": ["Delete"]},
        {"type": "keypress", "keys": ["Return"]}]


def test_the_page_s_chooser_goes_first_and_no_dialog_leaves_set_files_to_the_page() -> None:
    assert keys_for(["a.txt"], page_chooser=True) is None
    assert keys_for(["a.txt"], focus=None) is None
    assert keys_for(["a.txt"], focus=COMMAND) is None
    assert keys_for(["a.txt"], dialog=NativeDialog(role="dialog", title="Save changes?", buttons=["Save"])) is None


@pytest.mark.parametrize("paths, reason", [(["a.txt", "b.txt"], "too_many_files"),
                                           (["../etc/passwd"], "not_a_workspace_file"),
                                           (["/etc/passwd"], "not_a_workspace_file"),
                                           (["a/../.."], "not_a_workspace_file"), (["."], "not_a_workspace_file"),
                                           (["a.txt\n/workspace/b.txt"], "not_a_workspace_file"),
                                           (["a\tb.txt"], "not_a_workspace_file")])
def test_more_than_one_file_or_a_path_outside_the_workspace_is_a_typed_error(paths: list[str], reason: str) -> None:
    """A control character is refused too: typed, a newline would confirm the dialog mid-path and
    type the rest into whichever window has the focus next."""
    with pytest.raises(ExecutionError) as caught:
        keys_for(paths)
    assert caught.value.detail["reason"] == reason


def test_the_policy_says_which_file_dialog_set_files_answers() -> None:
    action = parse_action({"type": "set_files", "paths": ["report.txt"]}, 0)
    native = ActionClassifier().classify(action, ActionContext(file_chooser=FileChooser(application="editor", save=True)))
    assert native.level == "L2" and "file dialog" in native.reasons[0] and "may replace" in native.reasons[0]
    assert native.target == "the file dialog of the desktop application 'editor': report.txt"
    page = ActionClassifier().classify(action, ActionContext(file_chooser=FileChooser(tab="T1")))
    assert page.level == "L2" and page.reasons[0].startswith("uploads workspace files")


def test_typing_goes_to_an_application_s_dialog_and_the_page_s_chooser_takes_it_as_its_answer() -> None:
    """The page's chooser has no window: the vendor formats are told, and typed text and
    Return become its ``set_files``. An application's file dialog is on the screen: no note,
    and the keys go to it (judged as input to a file dialog)."""
    dialog = Observation(file_chooser=FileChooser(application="editor", save=True))
    page = Observation(file_chooser=FileChooser(tab="T1"))
    assert state_note(dialog) is None and state_note(page) == CHOOSER_NOTE
    typed = parse_action({"type": "type", "text": "report.txt"}, 0)
    enter = parse_action({"type": "keypress", "keys": ["Return"]}, 0)
    typing = ChooserTyping()
    assert typing.answer(typed, dialog) is typed and typing.answer(enter, dialog) is enter
    assert typing.answer(typed, page) is None
    assert typing.answer(enter, page) == SetFiles(type="set_files", paths=["report.txt"])
