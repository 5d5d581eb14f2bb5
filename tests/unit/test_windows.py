"""Windows as state: the protocol's window list and actions, the EWMH helpers that read a window's
properties, the daemon's window entries (zone, model-space box, masked titles), the reply check,
the risk levels and what a person and the audit log are told."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deskpod.agentd.display.xwindows import (
    WindowInfo,
    format_window_id,
    is_modal,
    moveresize_flags,
    parse_window_id,
    window_label,
    wm_class_app,
)
from deskpod.agentd.observe import Observer
from deskpod.agentd.secret_mask import SecretMask
from deskpod.client.untrusted import check_result
from deskpod.controller.gui import run_task
from deskpod.controller.gui.step_record import StepRecord
from deskpod.controller.gui_agent import Proposal
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.controller.task import TaskSpec
from deskpod.errors import BadReplyError, InvalidActionError, NoWindowError, error_from_wire
from deskpod.protocol import (
    MAX_WINDOWS,
    ActRequest,
    CoordinateMap,
    Dialog,
    FileChooser,
    NativeDialog,
    Observation,
    ObserveOptions,
    Result,
    Size,
    Window,
    encode_message,
    parse_action,
)
from deskpod.protocol.windows import MAX_WINDOW_LABEL_CHARS
from fake_sandbox import FakeSandbox, Page

ATOMS = {"_NET_WM_STATE_MODAL": 301, "_NET_WM_WINDOW_TYPE_DIALOG": 302}
NORMAL = 303  # _NET_WM_WINDOW_TYPE_NORMAL, as far as these tests care


def _window(**fields: Any) -> Window:
    return Window.model_validate({"id": "0x1a00007", "box": [0, 0, 400, 300], **fields})


# The protocol ------------------------------------------------------------------------------

@pytest.mark.parametrize("action", [
    {"type": "window_focus", "window_id": "0x1a00007"},
    {"type": "window_close", "window_id": "0x1a00007"},
    {"type": "window_move", "window_id": "0x1a00007", "x": 10, "y": 20},
    {"type": "window_resize", "window_id": "0x1a00007", "width": 640, "height": 480},
])
def test_each_window_action_parses(action: dict[str, Any]) -> None:
    assert parse_action(action).model_dump(mode="json") == action


@pytest.mark.parametrize("action", [
    {"type": "window_focus"},
    {"type": "window_focus", "window_id": ""},
    {"type": "window_close", "window_id": "0x1 ; kill"},
    {"type": "window_close", "window_id": "w" * 65},
    {"type": "window_move", "window_id": "0x1", "x": 1.5, "y": 2},
    {"type": "window_resize", "window_id": "0x1", "width": 0, "height": 10},
    {"type": "window_resize", "window_id": "0x1", "width": 10, "height": 16385},
    {"type": "window_focus", "window_id": "0x1", "pid": 42},
])
def test_a_bad_window_action_is_refused_before_anything_runs(action: dict[str, Any]) -> None:
    with pytest.raises(InvalidActionError):
        parse_action(action)


def test_the_list_and_its_labels_are_bounded() -> None:
    Observation(windows=[_window()] * MAX_WINDOWS)
    with pytest.raises(ValidationError):
        Observation(windows=[_window()] * (MAX_WINDOWS + 1))
    with pytest.raises(ValidationError):
        _window(title="t" * (MAX_WINDOW_LABEL_CHARS + 1))
    with pytest.raises(ValidationError):
        _window(zone="browser")
    with pytest.raises(ValidationError):
        _window(box=[0, 0, 1])


def test_the_list_is_left_out_of_messages_when_not_asked_so_older_peers_accept_them() -> None:
    assert "windows" not in ObserveOptions().model_dump(mode="json")
    assert ObserveOptions(windows=True).model_dump(mode="json")["windows"] is True
    assert "windows" not in Observation().model_dump(mode="json")
    assert Observation(windows=[]).model_dump(mode="json")["windows"] == []


def test_an_unknown_window_crosses_the_wire_as_its_own_code() -> None:
    error = error_from_wire({"code": "no_window", "message": "no window '0x7'", "detail": {"window_id": "0x7"}})
    assert isinstance(error, NoWindowError) and error.detail == {"window_id": "0x7"}


# The EWMH helpers, on property values as python-xlib returns them ------------------------------

def test_the_application_is_the_class_part_of_wm_class() -> None:
    assert wm_class_app(b"xterm\0XTerm\0") == "XTerm"
    assert wm_class_app(b"chromium\0Chromium\0") == "Chromium"
    assert wm_class_app(b"only-instance\0") is None
    assert wm_class_app(b"") is None
    assert wm_class_app(None) is None
    assert wm_class_app(b"x\0Evil\x1b[31mApp\0") == "Evil [31mApp"


def test_a_label_is_printable_text_cut_to_its_cap() -> None:
    assert window_label("Report\n\x07 - Editor\x00") == "Report   - Editor"
    assert window_label(b"caf\xe9") == "café"  # ICCCM STRING is Latin-1
    assert window_label("  ") is None and window_label(None) is None and window_label(42) is None
    assert window_label("t" * 500) == "t" * MAX_WINDOW_LABEL_CHARS


@pytest.mark.parametrize(("states", "types", "transient", "modal"), [
    ([], [], 0, False),  # a normal top-level window
    ([ATOMS["_NET_WM_STATE_MODAL"]], [], 0, True),
    ([], [], 0x400001, True),  # transient without a type: a dialog (EWMH)
    ([], [ATOMS["_NET_WM_WINDOW_TYPE_DIALOG"]], 0x400001, True),
    ([], [NORMAL], 0x400001, False),  # a transient tool window is no dialog
    ([], [ATOMS["_NET_WM_WINDOW_TYPE_DIALOG"]], 0, False),  # a dialog holding no parent
])
def test_modal_is_the_modal_state_or_a_transient_dialog(states: list[int], types: list[int], transient: int,
                                                       modal: bool) -> None:
    assert is_modal(states, types, transient, ATOMS) is modal


def test_moveresize_asks_with_static_gravity_the_fields_given_and_a_pagers_source() -> None:
    assert moveresize_flags(True, False) == 10 | 0x100 | 0x200 | (2 << 12)
    assert moveresize_flags(False, True) == 10 | 0x400 | 0x800 | (2 << 12)


def test_window_ids_round_trip_and_nothing_else_names_a_window() -> None:
    assert format_window_id(0x1A00007) == "0x1a00007" and parse_window_id("0x1a00007") == 0x1A00007
    for text in ("1a00007", "0x", "0xzz", "0x1a000070000", "e4"):
        assert parse_window_id(text) is None


# The daemon's entries ------------------------------------------------------------------------

class _Gate:
    """The X gate's answer: which X windows an agent's client made."""

    async def window_at(self, x: int, y: int) -> None:
        return None

    async def focus_window(self) -> None:
        return None

    def agent_window(self, window: int) -> bool:
        return window == 0x600001


class _Executor:
    def __init__(self, listed: list[WindowInfo]) -> None:
        self.listed = listed

    async def windows(self) -> list[WindowInfo]:
        return self.listed


def _entries(listed: list[WindowInfo], coords: CoordinateMap) -> list[Window] | None:
    observer = Observer.__new__(Observer)  # only the window list is read: no browser, no settling
    observer.executor, observer.windows = _Executor(listed), _Gate()  # type: ignore[assignment]
    return asyncio.run(observer._window_list(coords))


def test_entries_carry_the_zone_and_a_model_space_box() -> None:
    listed = [WindowInfo(0x600001, "XTerm", "agent's shell", (100, 50, 740, 530), True, False),
              WindowInfo(0x400002, "Chromium", "page - Chromium", (0, 0, 1280, 800), False, False),
              WindowInfo(0x400009, "Chromium", None, (-20, 700, 300, 900), False, True)]
    coords = CoordinateMap(Size(width=1280, height=800), Size(width=640, height=400))
    shell, browser, off_screen = _entries(listed, coords) or []
    assert shell == Window(id="0x600001", app="XTerm", title="agent's shell", box=[50, 25, 370, 265],
                           focused=True, zone="agent")
    assert browser.zone == "sandbox" and browser.box == [0, 0, 640, 400] and not browser.focused
    assert off_screen.box == [-10, 350, 150, 450] and off_screen.modal and off_screen.title is None


def test_a_title_holding_a_secret_is_masked_like_every_text_of_an_observation() -> None:
    mask = SecretMask(None)  # type: ignore[arg-type]
    mask.add(["hunter2-secret"])
    masked = mask.observation(Observation(windows=[_window(title="Login hunter2-secret - Chromium")]))
    assert masked.windows is not None and "hunter2-secret" not in (masked.windows[0].title or "")


def test_a_list_of_windows_the_request_did_not_ask_for_is_a_bad_reply() -> None:
    request = ActRequest(type="act", id="r1", actions=[], observe=ObserveOptions())
    with pytest.raises(BadReplyError) as refused:
        check_result(request, Result(id="r1", observation=Observation(windows=[_window()])))
    assert refused.value.detail.get("reason") == "over_request"
    asked = ActRequest(type="act", id="r2", actions=[], observe=ObserveOptions(windows=True))
    assert check_result(asked, Result(id="r2", observation=Observation(windows=[_window()]))).observation.windows


# The policy ---------------------------------------------------------------------------------

LISTED = [Window(id="0x400009", app="Mousepad", title="notes.txt - Mousepad", box=[0, 0, 400, 300], focused=True),
          Window(id="0x600001", app="XTerm", title="shell", box=[0, 0, 400, 300], zone="agent")]


@pytest.mark.parametrize(("action", "level"), [
    ({"type": "window_focus", "window_id": "0x400009"}, "L1"),
    ({"type": "window_move", "window_id": "0x400009", "x": 5, "y": 5}, "L1"),
    ({"type": "window_resize", "window_id": "0x400009", "width": 300, "height": 200}, "L1"),
    ({"type": "window_close", "window_id": "0x400009"}, "L2"),
])
def test_focus_move_and_resize_are_l1_and_close_is_l2(action: dict[str, Any], level: str) -> None:
    risk = ActionClassifier().classify(parse_action(action), ActionContext(windows=LISTED))
    assert risk.level == level and risk.target == "'Mousepad' window 'notes.txt - Mousepad'", risk
    if level == "L2":
        assert "unsaved work" in risk.reasons[0]


def test_a_card_names_an_agents_window_as_such_and_an_unlisted_one_by_its_id() -> None:
    classify = ActionClassifier().classify
    close = parse_action({"type": "window_close", "window_id": "0x600001"})
    assert classify(close, ActionContext(windows=LISTED)).target == "'XTerm' window of the agent's program 'shell'"
    assert classify(close, ActionContext()).target == "window 0x600001"
    assert classify(close, ActionContext()).level == "L2"


def test_the_audit_records_the_windows_a_step_ended_on() -> None:
    proposal = Proposal(intent="arrange the windows", actions=[])
    step = StepRecord.open(1, proposal, Observation(windows=LISTED))
    recorded = step.finished()["windows"]
    assert [w["title"] for w in recorded] == ["notes.txt - Mousepad", "shell"]
    assert "windows" not in StepRecord.open(2, proposal, Observation()).finished()


def test_the_audit_records_the_dialogs_a_step_ended_on() -> None:
    """The page's JavaScript dialog, an application's dialog and a file chooser, each when open."""
    proposal = Proposal(intent="save the document", actions=[])
    native = NativeDialog(role="file chooser", title="Save As", app="mousepad", buttons=["Cancel", "Save"])
    ended = Observation(dialog=Dialog(type="confirm", message="Leave? " + "x" * 900), native_dialog=native,
                        file_chooser=FileChooser(application="editor", save=True))
    recorded = StepRecord.open(1, proposal, ended).finished()
    assert recorded["dialog"] == {"type": "confirm", "message": ("Leave? " + "x" * 900)[:500]}
    assert recorded["native_dialog"]["title"] == "Save As" and recorded["native_dialog"]["buttons"] == ["Cancel", "Save"]
    assert recorded["file_chooser"]["application"] == "editor" and recorded["file_chooser"]["save"] is True
    assert not {"dialog", "native_dialog", "file_chooser"} & set(StepRecord.open(2, proposal, Observation()).finished())


def test_a_window_list_encodes_as_strict_json() -> None:
    text = encode_message(Observation(windows=LISTED))
    assert '"zone":"agent"' in text and '"modal":false' in text


# A GUI run on an in-memory sandbox --------------------------------------------------------

def test_a_run_moves_a_window_at_l1_and_asks_before_closing_it_naming_the_window(tmp_path: Path) -> None:
    """Without a person to ask, the close (L2) is denied: the card named the window, the audit
    log recorded the windows the run saw, and the window is still there."""
    start = "http://notes.test/"
    sandbox = FakeSandbox({start: Page("Notes", "notes")}, windows=list(LISTED))
    task = TaskSpec.model_validate({
        "name": "arrange", "start_url": start, "success": {"page_text_contains": "never"},
        "steps": [{"actions": [{"type": "window_focus", "window_id": "0x400009"},
                               {"type": "window_move", "window_id": "0x400009", "x": 40, "y": 30}]},
                  {"actions": [{"type": "window_close", "window_id": "0x400009"}]}]})
    result = asyncio.run(run_task(task, sandbox, audit_dir=tmp_path))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [a["type"] for a in sandbox.executed] == ["window_focus", "window_move"]
    [asked] = [e for e in events if e["event"] == "confirmation_requested"]
    assert asked["level"] == "L2" and asked["summary"] == "close the 'Mousepad' window 'notes.txt - Mousepad'", asked
    first = next(e for e in events if e["event"] == "step" and e["outcome"] == "ok")
    assert [r["risk"] for r in first["risks"]] == ["L1", "L1"]
    assert first["windows"][0]["box"] == [40, 30, 440, 330] and first["windows"][0]["focused"]
    assert [w.id for w in sandbox.windows] == ["0x400009", "0x600001"]
