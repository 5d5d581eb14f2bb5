"""``deskpod mcp``'s ``desktop_open_app``: a desktop application opened as one step under the policy.

Through the MCP SDK's in-process client, the real controller service and its policy, and the
fake daemon (:class:`hostile_daemon.HostileDaemon`) as the other MCP tests use it: given a
desktop profile, ``open_app`` maps the application's window (the agent's program) as the real
applications' zone does; without it the daemon answers as a sandbox without the zone does
(``execution_failed``, ``detail["reason"]`` ``"no_desktop"``). The tool is listed with its hints
and the protocol's parameters, sends the ``open_app`` action judged ``L1`` and answers the screen
and the list after it; without the zone it is a tool error that says so. On main the tool did
not exist, and a failed step's reason did not reach the agent.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from deskpod.controller.policy.policy_file import Policy
from deskpod.mcp_server.server import WINDOW_TOOLS
from deskpod.protocol import APPS
from hostile_daemon import HostileDaemon
from mcp_support import acts, audit_records, mcp_client, text

BROWSER = {"id": "0x400007", "app": "Chromium", "title": "Demo - Chromium", "box": [0, 0, 64, 40], "focused": True,
           "modal": False, "zone": "sandbox"}
WINDOW_OF = {"terminal": ("XTerm", "xterm"), "editor": ("Mousepad", "notes.txt - Mousepad")}
"""Each application's window as its program titles it."""


def _desktop(with_zone: bool) -> Any:
    """A daemon whose desktop holds the browser's window; with the applications' zone each
    ``open_app`` maps a window of the agent's program, focused, on top; without it
    ``open_app`` fails as the real daemon's does."""
    windows = [copy.deepcopy(BROWSER)]

    def tamper(n: int, request: dict[str, Any], reply: Any) -> Any:
        for action in request.get("actions", []) if request.get("type") == "act" else []:
            if action.get("type") != "open_app":
                continue
            if not with_zone:
                return {"type": "error", "id": request.get("id"), "error": {
                    "code": "execution_failed", "detail": {"reason": "no_desktop"},
                    "message": "this sandbox has no desktop applications (start it with the desktop profile)"}}
            app, title = WINDOW_OF[action["app"]]
            for window in windows:
                window["focused"] = False
            windows.insert(0, {"id": f"0x1a0000{len(windows)}", "app": app, "title": title, "box": [4, 4, 44, 34],
                               "focused": True, "modal": False, "zone": "agent"})
        if isinstance(reply, dict) and "observation" in reply and (request.get("observe") or {}).get("windows"):
            reply["observation"]["windows"] = copy.deepcopy(windows)
        return reply

    return tamper


def test_desktop_open_app_is_listed_with_its_hints_and_the_actions_parameters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It acts (not read-only), destroys nothing, opens another window each call (not
    idempotent) and reaches nothing beyond the sandbox (the zone has no network); its ``app``
    is one of the protocol's :data:`~deskpod.protocol.APPS`, ``path`` optional."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))

    async def main() -> Any:
        with HostileDaemon() as daemon:
            async with mcp_client(daemon, tmp_path) as client:
                return {t.name: t for t in (await client.list_tools()).tools}

    tools = asyncio.run(main())
    assert "desktop_open_app" in WINDOW_TOOLS
    tool = tools["desktop_open_app"]
    hints = tool.annotations
    assert hints is not None and tool.title == "Open a desktop application"
    assert hints.read_only_hint is False and hints.destructive_hint is False
    assert hints.idempotent_hint is False and hints.open_world_hint is False
    assert tool.input_schema["required"] == ["app"]
    assert tool.input_schema["properties"]["app"]["enum"] == list(APPS)
    assert set(tool.input_schema["properties"]) == {"app", "path"}
    assert "L1" in (tool.description or "") and "no_desktop" in (tool.description or "")


def test_desktop_open_app_is_one_step_judged_l1_answering_the_screen_and_the_new_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the default policy (``L2`` and ``L3`` confirmed) nobody is asked: the step sends
    ``open_app`` as given, is judged ``L1`` with the application as its target, and answers a
    screenshot and the list with the new window (the agent's program, focused); a path that
    leaves the workspace is refused before anything is sent."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))

    async def main() -> Any:
        with HostileDaemon(_desktop(with_zone=True)) as daemon:
            async with mcp_client(daemon, tmp_path, policy=Policy()) as client:
                out = {
                    "terminal": await client.call_tool("desktop_open_app", {"app": "terminal"}),
                    "editor": await client.call_tool("desktop_open_app", {"app": "editor", "path": "notes.txt"}),
                    "outside": await client.call_tool("desktop_open_app", {"app": "editor", "path": "../etc/passwd"}),
                    "unknown": await client.call_tool("desktop_open_app", {"app": "shell"}),
                }
                return out, acts(daemon)

    out, sent = asyncio.run(main())
    for name in ("terminal", "editor"):
        assert not out[name].is_error, (name, text(out[name]))
        assert out[name].content[0].type == "image", name
    assert "2 window(s) on the desktop" in text(out["terminal"])
    assert 'app "XTerm", title "xterm", box [4, 4, 44, 34], focused, the agent\'s program' in text(out["terminal"])
    assert "3 window(s) on the desktop" in text(out["editor"]) and '"Mousepad"' in text(out["editor"])
    assert out["outside"].is_error and out["unknown"].is_error
    assert [a for a in sent if a["type"] == "open_app"] == [{"type": "open_app", "app": "terminal", "path": None},
                                                            {"type": "open_app", "app": "editor", "path": "notes.txt"}]
    steps = [r for r in audit_records(tmp_path) if r.get("event") == "step" and r.get("decision") == "allowed"]
    opened = [s for s in steps if s["actions"] and s["actions"][0]["type"] == "open_app"]
    assert [s["risks"][0]["risk"] for s in opened] == ["L1", "L1"]
    assert [s["risks"][0]["target"] for s in opened] == ["terminal", "editor notes.txt"]
    assert [s["intent"] for s in opened] == ["open the terminal", "open the editor on notes.txt"]


def test_desktop_open_app_without_the_desktop_zone_is_a_tool_error_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox started without the desktop profile fails ``open_app`` (reason ``no_desktop``):
    the tool error names the reason and the profile in its own words (the daemon's message
    stays untrusted content), and the session goes on (a look after it works)."""
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "key"))

    async def main() -> Any:
        with HostileDaemon(_desktop(with_zone=False)) as daemon:
            async with mcp_client(daemon, tmp_path) as client:
                failed = await client.call_tool("desktop_open_app", {"app": "terminal"})
                return failed, await client.call_tool("desktop_windows", {})

    failed, listed = asyncio.run(main())
    assert failed.is_error, text(failed)
    own, quoted = text(failed).split('<untrusted-content source="error">', 1)
    assert "error: execution_failed." in own and "reason no_desktop" in own, own
    assert "started without the desktop profile" in own and "desktop_open_app cannot open one" in own, own
    assert "start it with the desktop profile" in quoted
    assert not listed.is_error and "1 window(s) on the desktop" in text(listed), text(listed)
