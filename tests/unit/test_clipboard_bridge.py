"""The clipboard bridge between the browser's side of the display and the zones': a read goes
where the selection is, a write where the keyboard focus is; the zone's side is the applications
runner's helper, whose answers are checked. On main an application's copy could not be read
(the X gate kept its answer from the daemon) and a write was the browser's alone."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from deskpod.agentd import apps_runner
from deskpod.agentd.apps_runner import AppsConfig, AppsRunner
from deskpod.agentd.apps_wire import AppsClipboard, AppsClipboardRequest, parse_apps_request
from deskpod.agentd.clipboard_bridge import ClipboardBridge
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.agentd.runner_wire import RunnerError, X11Grant

AGENT_WINDOW = 0x1C00003
GRANT = X11Grant(display="sandbox:99", cookie_hex="ab" * 16)


class Local:
    """The daemon's own clipboard (:class:`~deskpod.agentd.display.clipboard.XClipboard`)."""

    def __init__(self, owner: int) -> None:
        self.owner_id, self.text, self.stopped = owner, "browser's text", 0

    def owner(self) -> int:
        return self.owner_id

    def read(self) -> str:
        return self.text

    def write(self, text: str) -> None:
        self.text = text

    def stop(self) -> None:
        self.stopped += 1


class Gate:
    def __init__(self, focused: bool) -> None:
        self.focused = focused

    def agent_window(self, window: int) -> bool:
        return window == AGENT_WINDOW

    async def focus_window(self) -> AgentWindowInfo | None:
        return AgentWindowInfo(app="Mousepad", title="t", box=(0, 0, 9, 9), source="editor") if self.focused else None


class Zone:
    def __init__(self) -> None:
        self.calls: list[str | None] = []

    async def __call__(self, text: str | None) -> str | None:
        self.calls.append(text)
        return "zone's text" if text is None else None


@pytest.mark.parametrize("owner, expected, asked", [(AGENT_WINDOW, "zone's text", [None]),
                                                    (0x600003, "browser's text", []), (0, "browser's text", [])])
def test_a_read_goes_where_the_selection_is(owner: int, expected: str, asked: list[None]) -> None:
    zone = Zone()
    bridge = ClipboardBridge(Local(owner), Gate(False), zone)  # type: ignore[arg-type]
    assert asyncio.run(bridge.read()) == expected and zone.calls == asked


@pytest.mark.parametrize("focused", [True, False])
def test_a_write_goes_where_the_keyboard_focus_is(focused: bool) -> None:
    local, zone = Local(0), Zone()
    asyncio.run(ClipboardBridge(local, Gate(focused), zone).write("new"))  # type: ignore[arg-type]
    assert (zone.calls, local.text, local.stopped) == ((["new"], "browser's text", 1) if focused else ([], "new", 0))


def test_without_a_zone_the_clipboard_is_the_daemon_s_own() -> None:
    local = Local(AGENT_WINDOW)
    bridge = ClipboardBridge(local)  # type: ignore[arg-type]
    asyncio.run(bridge.write("x"))
    assert asyncio.run(bridge.read()) == "x"


def test_the_wire_carries_a_read_or_a_write() -> None:
    request = AppsClipboardRequest(x11=GRANT, text="hello")
    assert parse_apps_request(request.model_dump_json().encode()) == request
    with pytest.raises(ValueError):
        AppsClipboardRequest(x11=GRANT, text="x" * 1_000_000)


def _runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: str) -> AppsRunner:
    script = tmp_path / "helper.py"
    script.write_text(helper)
    monkeypatch.setattr(apps_runner, "CLIPBOARD_ARGV", (sys.executable, str(script)))
    monkeypatch.setattr(apps_runner, "READER_TIMEOUT_S", 1.0)
    runner = AppsRunner(AppsConfig(workspace=tmp_path, home=tmp_path, state_dir=tmp_path / "state"), is_init=False)
    runner._session_bus = lambda: "unix:path=/nonexistent"  # type: ignore[method-assign]
    return runner


ECHO = ("import json, sys, os\n"
        "mode = sys.argv[1]\n"
        "if mode == 'read':\n"
        "    print(json.dumps({'text': os.environ['DISPLAY'] + ' ' + str('XAUTHORITY' in os.environ)}))\n"
        "else:\n"
        "    text = json.loads(sys.stdin.read())['text']\n"
        "    print(json.dumps({'text': None}), flush=True)\n"
        "    os.close(1)\n"
        "    import time; time.sleep(60)\n")


@pytest.mark.process
def test_the_runner_reads_through_its_helper_and_keeps_the_owning_one_until_the_next_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _runner(tmp_path, monkeypatch, ECHO)
    try:
        read = runner.clipboard(AppsClipboardRequest(x11=GRANT))
        assert read == AppsClipboard(text="sandbox:99 True")  # on the grant's display, with its own cookie
        assert not list((tmp_path / "state").glob("x11-*"))  # its spent cookie's file is gone
        assert runner.clipboard(AppsClipboardRequest(x11=GRANT, text="one")) == AppsClipboard()
        first = runner._clipboard
        assert first is not None and first.poll() is None  # it lives on, answering pastes
        assert runner.clipboard(AppsClipboardRequest(x11=GRANT, text="two")) == AppsClipboard()
        assert first.wait(5) is not None and runner._clipboard is not first  # the first one was killed
    finally:
        runner._kill()


@pytest.mark.process
@pytest.mark.parametrize("helper, reason", [
    ("print('nonsense')", "not JSON"),
    ("import json; print(json.dumps({'error': 'BadAccess'}))", "BadAccess"),
    ("import json; print(json.dumps({'text': 'x' * 2_000_000}))", "over"),
    ("import time; time.sleep(30)", "no answer within"),
])
def test_a_helper_that_fails_lies_or_hangs_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          helper: str, reason: str) -> None:
    runner = _runner(tmp_path, monkeypatch, helper)
    reply: Any = runner.clipboard(AppsClipboardRequest(x11=GRANT))
    assert isinstance(reply, RunnerError) and reply.error.detail == {"reason": "clipboard"}, reply
    assert reason in reply.error.message, reply.error.message
    assert runner._clipboard is None and json.dumps(reply.model_dump())
