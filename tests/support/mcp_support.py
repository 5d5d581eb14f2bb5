"""Helpers of the ``deskpod mcp`` tests: an in-process MCP client of a session on the fake daemon
(:func:`mcp_session`, :func:`mcp_client`; a code task's: :func:`code_client`), what reached the
daemon, a result's text and the runs' audit records; and what an MCP client must see
in tools/list, whatever the transport (:func:`check_listing`): every tool titled and annotated (``readOnlyHint``, ``destructiveHint``), the browser tools with
playwright-mcp's names and parameters, deskpod's own browser tools and the window tools with honest hints (``@playwright/mcp``,
https://github.com/microsoft/playwright-mcp#tools), Anthropic's ``repeat`` on ``key``, and
``serverInfo.version`` deskpod's version."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

from mcp import Client

from deskpod import __version__
from deskpod.controller.code_task import load_code_task
from deskpod.controller.policy.policy_file import Policy
from deskpod.mcp_server.app import EmbeddedController, embedded_controller
from deskpod.mcp_server.server import NO_SUCCESS_CHECK, build_server
from deskpod.mcp_server.sessions import McpConfig
from deskpod.mcp_server.sources import GivenSandbox
from deskpod.service.messages import SessionTask
from deskpod.tokens import token_sha256
from hostile_daemon import HostileDaemon
from running_service import free_port

__all__ = ["LOOK_ONLY", "McpSession", "OWN_BROWSER", "PLAYWRIGHT_COMMON", "TOKEN", "WINDOWS", "acts", "audit_records",
           "check_listing", "code_client", "gui_task", "mcp_client", "mcp_session", "text"]

TOKEN = "t" * 32
"""The fake daemon's token."""


def gui_task(**extra: Any) -> SessionTask:
    """A GUI session's task on demo.test, without a success check unless ``extra`` gives one."""
    return SessionTask.model_validate({"name": "mcp", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                                       "success": {"url_matches": NO_SUCCESS_CHECK, "timeout_s": 0.2}, **extra})


class McpSession(NamedTuple):
    """What :func:`mcp_session` gives: the MCP ``client``, the server's ``config`` (its
    ``controller_url``) and the ``source`` of its sessions' sandbox (its token in force)."""

    client: Client
    config: McpConfig
    source: GivenSandbox


@contextlib.asynccontextmanager
async def mcp_session(daemon: HostileDaemon, tmp_path: Path, task: SessionTask | None = None,
                      policy: Policy | None = None, approver: str | None = None,
                      token_file: Path | None = None) -> AsyncIterator[McpSession]:
    """The MCP SDK's in-process client of ``deskpod mcp``'s server, its sessions' runs on an
    embedded controller service driving ``daemon``; ``approver``: the approvers' token
    (``None``: nobody can approve); ``token_file``: the sandbox's token file, reset in place
    (and the new token written there) when a session ends (``None``: not reset)."""
    source = GivenSandbox(daemon.url, TOKEN, token_file=token_file, reset_on_end=token_file is not None)
    config = McpConfig(task or gui_task(), source.lease, source.release, audit_dir=tmp_path, policy=policy or Policy())
    approvers = token_sha256(approver) if approver else None
    async with embedded_controller(config, EmbeddedController(free_port(), approvers, str(tmp_path))):
        async with Client(build_server(config)) as client:
            yield McpSession(client, config, source)


@contextlib.asynccontextmanager
async def mcp_client(daemon: HostileDaemon, tmp_path: Path, task: SessionTask | None = None,
                     policy: Policy | None = None) -> AsyncIterator[Client]:
    """:func:`mcp_session`'s client, nobody to approve."""
    async with mcp_session(daemon, tmp_path, task, policy) as session:
        yield session.client


@contextlib.asynccontextmanager
async def code_client(daemon: HostileDaemon, tmp_path: Path) -> AsyncIterator[Client]:
    """An MCP client of a code task's session (``code_mini_billing``) on ``daemon``, its run in process."""
    task = load_code_task(Path(__file__).resolve().parents[2] / "runtime/deskpod/tasks/code_mini_billing.yaml")
    source = GivenSandbox(daemon.url, TOKEN)
    async with Client(build_server(McpConfig(task, source.lease, source.release, audit_dir=tmp_path))) as client:
        yield client


def audit_records(audit_dir: Path) -> list[dict[str, Any]]:
    """Every record of the runs' audit logs in ``audit_dir``."""
    return [json.loads(line) for log in audit_dir.glob("run-*.jsonl") for line in log.read_text().splitlines()]


def acts(daemon: HostileDaemon) -> list[dict[str, Any]]:
    """The actions of every ``act`` request that reached ``daemon``, in order."""
    return [a for r in daemon.requests if r.get("type") == "act" for a in r.get("actions", [])]


def text(result: Any) -> str:
    """A tool result's text content."""
    return "\n".join(getattr(c, "text", "") for c in result.content)

PLAYWRIGHT_COMMON = {"browser_navigate", "browser_navigate_back", "browser_snapshot", "browser_click", "browser_hover",
                     "browser_drag", "browser_type", "browser_fill_form", "browser_press_key", "browser_select_option",
                     "browser_file_upload", "browser_tabs", "browser_handle_dialog", "browser_wait_for",
                     "browser_take_screenshot", "browser_console_messages", "browser_network_requests"}
"""playwright-mcp's common tools that deskpod offers (its names)."""

LOOK_ONLY = {"screenshot", "wait", "cursor_position", "zoom", "browser_snapshot", "browser_wait_for",
             "browser_take_screenshot", "browser_console_messages", "browser_network_requests",
             "browser_clipboard_read", "desktop_windows", "read_file", "list_dir"}
"""The tools that send the sandbox no input and change nothing there: ``readOnlyHint``."""

OWN_BROWSER = ("browser_clipboard_read", "browser_clipboard_write", "browser_drop_files", "browser_recover_tab")
"""deskpod's browser tools that playwright-mcp has no counterpart for."""

WINDOWS = ("desktop_windows", "window_focus", "window_close", "window_move", "window_resize", "desktop_open_app")
"""The window tools, and the tool that opens an application's window."""


def check_listing(tools: list[Any], version: str | None) -> None:
    """What a client sees before it calls anything: every tool titled and annotated, the browser
    tools with playwright-mcp's names and parameters, the server's version (also used by the
    transports' tests, over stdio and streamable HTTP)."""
    assert version == __version__
    by_name = {t.name: t for t in tools}
    for tool in tools:
        hints = tool.annotations
        assert tool.title and hints is not None and hints.title == tool.title, tool.name
        assert hints.read_only_hint is not None and hints.destructive_hint is not None, tool.name
        assert hints.read_only_hint == (tool.name in LOOK_ONLY), tool.name
    if "browser_click" not in by_name:
        return
    assert PLAYWRIGHT_COMMON <= set(by_name)
    assert by_name["screenshot"].annotations.read_only_hint and by_name["browser_snapshot"].annotations.read_only_hint
    assert by_name["browser_click"].annotations.destructive_hint
    item = by_name["browser_fill_form"].input_schema
    field = item["$defs"][item["properties"]["fields"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert set(field["required"]) == {"name", "type", "ref", "value"}
    assert field["properties"]["type"]["enum"] == ["textbox", "checkbox", "radio", "combobox", "slider"]
    assert {"type", "filename", "element", "ref", "fullPage"} <= set(by_name["browser_take_screenshot"]
                                                                    .input_schema["properties"])
    assert "values" in by_name["browser_select_option"].input_schema["required"]
    assert "repeat" in by_name["key"].input_schema["properties"]
    assert {"time", "text", "textGone"} <= set(by_name["browser_wait_for"].input_schema["properties"])
    assert set(by_name["browser_console_messages"].input_schema["properties"]) == {"onlyErrors"}
    assert set(by_name["browser_network_requests"].input_schema["properties"]) == {"includeStatic"}
    for name in ("browser_click", "browser_hover", "browser_type", "browser_select_option"):
        assert by_name[name].input_schema["required"][0] == "ref" and "element" not in \
            by_name[name].input_schema["required"], name  # element is optional, as playwright-mcp's
    read, write, drop, recover = (by_name[name] for name in OWN_BROWSER)
    assert read.annotations.open_world_hint is False and read.input_schema["properties"] == {}
    assert write.annotations.destructive_hint and write.annotations.idempotent_hint  # it replaces what was there
    assert write.annotations.open_world_hint is False and write.input_schema["required"] == ["text"]
    for tool in (drop, recover):  # the page may send the files; a reload loses what was typed, and asks the web
        assert tool.annotations.destructive_hint and tool.annotations.open_world_hint, tool.name
        assert tool.annotations.idempotent_hint is False, tool.name
    assert set(drop.input_schema["required"]) == {"coordinate", "paths"}
    assert set(recover.input_schema["properties"]) == {"tabId"} and not recover.input_schema.get("required")
    listing, focus, close, move, resize, open_app = (by_name[name] for name in WINDOWS)
    assert listing.annotations.open_world_hint is False
    for tool in (focus, move, resize):  # undone by the next: reversible, the same again changes nothing
        assert not tool.annotations.destructive_hint and tool.annotations.idempotent_hint, tool.name
        assert tool.annotations.open_world_hint is False, tool.name
    assert close.annotations.destructive_hint and close.annotations.idempotent_hint is False  # unsaved work
    assert not open_app.annotations.destructive_hint and open_app.annotations.idempotent_hint is False  # another window
    assert open_app.annotations.open_world_hint is False  # the applications' zone has no network
