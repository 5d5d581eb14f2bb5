"""Native controls of desktop applications: read over AT-SPI in the applications' zone
(:mod:`deskpod.agentd.atspi_reader`, here over a fake accessibility tree), carried by the runner
as untrusted answers, put into the observation in the model space, and judged by the policy.
On main none of this was read: every click or key in an application's window was ``L1``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deskpod.agentd import apps_runner, atspi_reader
from deskpod.agentd.apps_runner import AppsConfig, AppsRunner
from deskpod.agentd.apps_wire import AppsAccessible, AppsAccessibleRequest
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.agentd.browser.elements import ElementActions
from deskpod.agentd.native_controls import NativeRefs, native_fields
from deskpod.agentd.runner_wire import RunnerError
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.errors import ExecutionError, StaleRefError
from deskpod.protocol import AgentWindow, CoordinateMap, NativeDialog, NativeElement, NativeNode, Size, parse_action


class FakeAccessible:
    """An accessible of a fake AT-SPI tree (pyatspi's calls the reader makes)."""

    def __init__(self, role: str, name: str = "", box: tuple[int, int, int, int] | None = None,
                 states: tuple[str, ...] = ("showing",), children: list[FakeAccessible] | None = None,
                 text: str | None = None) -> None:
        self.role, self.name, self.box, self.states = role, name, box, set(states)
        self.children = children or []
        self.text = text

    @property
    def childCount(self) -> int:
        return len(self.children)

    def getChildAtIndex(self, i: int) -> FakeAccessible:
        return self.children[i]

    def getRoleName(self) -> str:
        return self.role

    def getState(self) -> FakeStates:
        return FakeStates(self.states)

    def queryComponent(self) -> FakeAccessible:
        if self.box is None:
            raise NotImplementedError
        return self

    def getExtents(self, _coords: int) -> tuple[int, int, int, int]:
        assert self.box is not None
        x0, y0, x1, y1 = self.box
        return x0, y0, x1 - x0, y1 - y0

    def getAccessibleAtPoint(self, x: int, y: int, _coords: int) -> FakeAccessible | None:
        return next((c for c in self.children if c.box and c.box[0] <= x < c.box[2] and c.box[1] <= y < c.box[3]), None)

    def queryText(self) -> FakeAccessible:
        if self.text is None:
            raise NotImplementedError
        return self

    @property
    def characterCount(self) -> int:
        return len(self.text or "")

    def getText(self, start: int, end: int) -> str:
        return (self.text or "")[start:end]


class FakeStates:
    def __init__(self, states: set[str]) -> None:
        self.states = states

    def getStates(self) -> list[str]:
        return sorted(self.states)

    def contains(self, state: str) -> bool:
        return state in self.states


class FakePyatspi:
    """The parts of ``pyatspi`` the reader uses, over one fake desktop."""

    DESKTOP_COORDS = 0
    STATE_SHOWING = "showing"
    STATE_FOCUSED = "focused"

    def __init__(self, desktop: FakeAccessible) -> None:
        self.Registry = self
        self.desktop = desktop
        self.timeouts: tuple[int, int] | None = None

    def getDesktop(self, _n: int) -> FakeAccessible:
        return self.desktop

    def setTimeout(self, call_ms: int, startup_ms: int) -> None:
        self.timeouts = (call_ms, startup_ms)

    @staticmethod
    def stateToString(state: str) -> str:
        return state


def _dialog() -> FakeAccessible:
    delete = FakeAccessible("push button", "Delete", (647, 419, 732, 453), ("showing", "focusable", "focused"))
    keep = FakeAccessible("push button", "Keep", (558, 419, 643, 453), ("showing", "focusable"))
    label = FakeAccessible("label", "Delete every file?", (612, 352, 727, 400), text="Delete every file?")
    secret = FakeAccessible("password text", "Password", (612, 400, 727, 410), text="hunter2")
    hidden = FakeAccessible("menu item", "Quit", None, ("sensitive",))
    box = FakeAccessible("filler", "", (547, 347, 732, 453), children=[label, secret, keep, delete, hidden])
    return FakeAccessible("dialog", "Question", (540, 340, 739, 460), ("showing", "active"), [box])


def _desktop() -> FakeAccessible:
    other = FakeAccessible("frame", "Untitled 1 - Mousepad", (0, 0, 640, 480), ("showing",))
    return FakeAccessible("desktop", children=[FakeAccessible("application", "mousepad", children=[other]),
                                               FakeAccessible("application", "zenity", children=[_dialog()])])


def test_the_reader_finds_the_control_at_a_point_and_the_focused_one_in_the_window_of_that_box() -> None:
    fake = FakePyatspi(_desktop())
    # The X box is the client window; the toolkit counts the window manager's title bar and border.
    answer = atspi_reader.answer({"point": [690, 436], "window": [541, 362, 738, 459],
                                  "focus_window": [540, 340, 739, 460], "summary": True, "max_nodes": 50}, fake)
    assert fake.timeouts == (atspi_reader.CALL_TIMEOUT_MS, atspi_reader.CALL_TIMEOUT_MS)
    assert answer["at"]["name"] == "Delete" and answer["at"]["app"] == "zenity" and answer["at"]["depth"] == 2
    assert answer["focused"]["name"] == "Delete" and "focused" in answer["focused"]["states"]
    names = [n["name"] for n in answer["nodes"]]
    # The hidden menu item is not walked; a password field's text is never read.
    assert names == ["Question", None, "Delete every file?", "Password", "Keep", "Delete"], names
    assert [n["text"] for n in answer["nodes"] if n["role"] == "password text"] == [None]
    assert answer["truncated"] is False
    # The focused window is a dialog: its labels and buttons, as state.
    assert answer["dialog"] == {"role": "dialog", "title": "Question", "app": "zenity",
                                "message": "Delete every file?", "buttons": ["Keep", "Delete"]}
    AppsAccessible.model_validate(answer)  # what the runner then checks


def test_the_reader_answers_nothing_for_a_box_no_application_window_has_and_cuts_the_summary() -> None:
    fake = FakePyatspi(_desktop())
    # xterm's window: no accessible application window has its box.
    assert atspi_reader.answer({"point": [900, 700], "window": [800, 600, 1000, 800], "focus_window": None,
                                "summary": False, "max_nodes": 0}, fake)["at"] is None
    cut = atspi_reader.answer({"focus_window": [540, 340, 739, 460], "summary": True, "max_nodes": 2}, fake)
    assert len(cut["nodes"]) == 2 and cut["truncated"] is True


def test_a_long_name_is_cut_and_its_white_space_folded() -> None:
    node = atspi_reader.node(FakeAccessible("push button", "Send\n" + "x" * 500, (0, 0, 5, 5)), "app", 0,
                             FakePyatspi(FakeAccessible("desktop")))
    assert node["name"].startswith("Send x") and len(node["name"]) == atspi_reader.MAX_NAME_CHARS


def _ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, request: AppsAccessibleRequest
         ) -> AppsAccessible | RunnerError:
    """``request`` asked of a runner whose session bus runs and whose reader is the program ``reader``."""
    script = tmp_path / "reader.py"
    script.write_text(reader)
    monkeypatch.setattr(apps_runner, "READER_ARGV", (sys.executable, str(script)))
    runner = AppsRunner(AppsConfig(workspace=tmp_path, home=tmp_path, state_dir=tmp_path), is_init=False)
    (tmp_path / "bus").touch()
    runner._bus = bus = subprocess.Popen(["sleep", "30"])  # the zone's session bus, running
    try:
        return runner.accessible(request)
    finally:
        bus.kill()
        bus.wait()


@pytest.mark.process
@pytest.mark.parametrize("program, reason", [
    ("print('not json')", "not JSON"),
    ("print('{\"error\": \"GLib.Error: no reply\"}')", "GLib.Error: no reply"),
    ("print('{\"at\": {\"role\": 5}}')", "role"),
    ("import time; time.sleep(30)", "no answer within"),
    ("import sys; sys.stdout.write('[' * (2 << 20)); sys.stdout.flush(); import time; time.sleep(30)", "over 1048576"),
])
def test_a_reader_that_fails_lies_or_hangs_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           program: str, reason: str) -> None:
    monkeypatch.setattr(apps_runner, "READER_TIMEOUT_S", 1.0)
    reply = _ask(tmp_path, monkeypatch, program, AppsAccessibleRequest(point=[1, 1], window=[0, 0, 5, 5]))
    assert isinstance(reply, RunnerError) and reply.error.detail == {"reason": "accessibility"}, reply
    assert reason in reply.error.message, reply.error.message


@pytest.mark.process
def test_the_runner_passes_the_question_to_its_reader_and_returns_the_checked_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = ("import json, sys; q = json.load(sys.stdin); "
              "print(json.dumps({'at': {'role': 'push button', 'name': str(q['point'])}}))")
    reply = _ask(tmp_path, monkeypatch, reader, AppsAccessibleRequest(point=[7, 9], window=[0, 0, 50, 50]))
    assert isinstance(reply, AppsAccessible) and reply.at is not None and reply.at.name == "[7, 9]"
    # Before any application started the bus, there is nothing to read.
    assert AppsRunner(AppsConfig(home=tmp_path), is_init=False).accessible(AppsAccessibleRequest()) == AppsAccessible()


class Reader:
    def __init__(self, answer: AppsAccessible | Exception) -> None:
        self.answer = answer
        self.asked: list[AppsAccessibleRequest] = []

    async def accessible(self, request: AppsAccessibleRequest) -> AppsAccessible:
        self.asked.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


APP = AgentWindowInfo(app="Zenity", title="Question", box=(1080, 680, 1478, 920), window=7, source="terminal")
COMMAND = AgentWindowInfo(app="XTerm", title="x", box=(0, 0, 10, 10), window=8, source="command")
HALF = CoordinateMap(Size(width=2560, height=1600), Size(width=1280, height=800))


def test_native_fields_ask_only_for_application_windows_and_convert_boxes_to_the_model_space() -> None:
    button = NativeNode(role="push button", name="Delete", box=[1294, 838, 1464, 906], states=["focused"], depth=2)
    label = NativeNode(role="label", name="Delete every file?", text="Delete every file?", depth=2)
    reader = Reader(AppsAccessible(at=button, focused=button, nodes=[button, label]))
    fields = asyncio.run(native_fields(reader, (1380, 872), APP, APP, HALF, summary=True, text_sources=True))
    [asked] = reader.asked
    assert asked.point == [1380, 872] and asked.window == [1080, 680, 1478, 920] and asked.summary
    assert fields["native_at"].box == [647, 419, 732, 453] and fields["native_focused"].name == "Delete"
    assert [n.box for n in fields["native_accessibility"]] == [[647, 419, 732, 453], None]
    assert fields["native_text"].source == "native" and "Delete every file?" in fields["native_text"].text
    # A window of the agent's own command, or none: nothing asked.
    assert asyncio.run(native_fields(reader, (5, 5), COMMAND, COMMAND, HALF, True, True)) == {}
    assert len(reader.asked) == 1


def test_a_tree_that_cannot_be_read_is_listed_unread() -> None:
    reader = Reader(ExecutionError("the applications' controls could not be read", detail={"reason": "accessibility"}))
    fields = asyncio.run(native_fields(reader, None, None, APP, HALF, False, False))
    assert [(u.part, u.reason) for u in fields["unread"]] == [("native", "app_error")]


WINDOW = AgentWindow(app="Zenity", title="Question", box=[0, 0, 100, 100], source="terminal")


def _level(action: dict[str, Any], **context: Any) -> tuple[str, str, str]:
    risk = ActionClassifier().classify(parse_action(action, 0), ActionContext(**context))
    return risk.level, risk.reasons[0], risk.target


CLICK = {"type": "click", "x": 5, "y": 5}
ENTER = {"type": "keypress", "keys": ["Return"]}


@pytest.mark.parametrize("action, context, level, why", [
    (CLICK, {"native_at": NativeElement(role="push button", name="Delete")}, "L3", "'delete'"),
    (ENTER, {"native_focused": NativeElement(role="push button", name="Delete")}, "L3", "presses by key"),
    ({"type": "type", "text": " "}, {"native_focused": NativeElement(role="push button", name="Send")}, "L3", "space"),
    ({"type": "keypress", "keys": ["Tab"]}, {"native_focused": NativeElement(role="push button", name="Delete")},
     "L1", "presses keys"),
    (CLICK, {"native_at": NativeElement(role="push button", name="Don't Save")}, "L2", "document may be lost"),
    (CLICK, {"native_at": NativeElement(role="push button", name="Replace")}, "L2", "saved over"),
    (CLICK, {"native_at": NativeElement(role="menu item", name="Format Disk…")}, "L3", "'format'"),
    (CLICK, {"native_at": NativeElement(role="push button", name="Empty Trash")}, "L3", "'empty trash'"),
    (CLICK, {"native_at": NativeElement(role="label", name="Delete every file?")}, "L1", "clicks in a desktop"),
    (CLICK, {"native_unread": True}, "L2", "could not be read"),
    (CLICK, {}, "L1", "clicks in a desktop"),
    ({"type": "type", "text": "report.txt"}, {"native_dialog": NativeDialog(role="file chooser", title="Save As")},
     "L2", "file dialog ('Save As')"),
    (CLICK, {"native_dialog": NativeDialog(role="alert", title="Question")}, "L1", "clicks in a desktop"),
])
def test_a_native_press_is_judged_by_the_control_s_name(action: dict[str, Any], context: dict[str, Any], level: str,
                                                          why: str) -> None:
    where = {"window": WINDOW} if action["type"] == "click" else {"focus_window": WINDOW}
    got, reason, target = _level(action, **where, **context)
    assert (got, why in reason) == (level, True), (got, reason)
    assert "desktop application 'terminal' 'Zenity'" in target


def test_the_card_names_the_native_control_and_its_application() -> None:
    _, _, target = _level(CLICK, window=WINDOW, native_at=NativeElement(role="push button", name="Delete"))
    assert target == "push button 'Delete' in the window of the desktop application 'terminal' 'Zenity': 'Question'"
    assert json.dumps(target)  # plain text for the audit log and the card


def test_of_windows_sharing_one_box_the_one_the_x_window_s_title_names_is_read() -> None:
    """Every window is maximized: an editor and its Save As dialog have the same box. On the first
    try the frame behind was read and the file chooser in front was missed."""
    save = FakeAccessible("push button", "Save", (1180, 760, 1270, 790), ("showing", "focused"))
    chooser = FakeAccessible("file chooser", "Save As", (0, 0, 1280, 800), ("showing", "active"), [save])
    frame = FakeAccessible("frame", "notes.txt - Mousepad", (0, 0, 1280, 800), ("showing",))
    fake = FakePyatspi(FakeAccessible("desktop", children=[FakeAccessible("application", "mousepad",
                                                                          children=[frame, chooser])]))
    answer = atspi_reader.answer({"focus_window": [0, 21, 1280, 800], "focus_title": "Save As"}, fake)
    assert answer["dialog"]["role"] == "file chooser" and answer["focused"]["name"] == "Save"
    answer = atspi_reader.answer({"focus_window": [0, 21, 1280, 800], "focus_title": "notes.txt - Mousepad"}, fake)
    assert answer["dialog"] is None


def test_native_nodes_get_refs_from_the_daemon_and_an_element_action_lands_at_the_centre_of_one() -> None:
    """The tree's nodes with a box are numbered ``n1``... by the daemon (a ref the zone's answer
    carried is dropped); an element action's ref ``nN`` resolves to the centre of that node's box
    (model space), a ref of an older tree is stale. On main element actions took page refs only."""
    lying = NativeNode(role="push button", name="Delete", box=[1294, 838, 1464, 906], ref="n99")
    boxless = NativeNode(role="label", name="hidden")
    refs = NativeRefs()
    reader = Reader(AppsAccessible(nodes=[lying, boxless]))
    fields = asyncio.run(native_fields(reader, None, None, APP, HALF, summary=True, text_sources=False, refs=refs))
    assert [n.ref for n in fields["native_accessibility"]] == ["n1", None]
    elements = ElementActions(browser=None)  # type: ignore[arg-type]
    elements.native = refs
    assert asyncio.run(elements.point("n1", HALF)) == (689, 436)
    assert asyncio.run(elements.expand(parse_action({"type": "click_element", "ref": "n1"}, 0), HALF))[0].x == 689
    refs.assign([])  # a new tree
    with pytest.raises(StaleRefError):
        asyncio.run(elements.point("n1", HALF))
