"""What every tool tells an MCP client before it is called: its title and behaviour hints.

Each tool of :mod:`.server`, :mod:`.browser_tools`, :mod:`.window_tools` and :mod:`.code_tools`
is registered through :func:`add_tool`, which takes its title and hints from :data:`TOOL_HINTS`:
a tool without an entry cannot be registered, so none goes without. The hints are the MCP
specification's tool annotations
(https://modelcontextprotocol.io/specification/2025-06-18/server/tools#tool; the SDK's
``mcp.types.ToolAnnotations``): ``readOnlyHint`` a tool that sends no input to the sandbox
and changes nothing in it (it looks, waits or reports), ``destructiveHint`` one that may do
what cannot be undone (a click or a key may submit a form or pay; a file written replaces
what was there; a window closed may lose its program's unsaved work), and for some tools also
``idempotentHint`` (a second call with the same arguments does nothing more: a window focused,
moved or resized again stays as it was) and ``openWorldHint`` (false: the tool reaches nothing
outside the sandbox's desktop, such as its clipboard or where its windows are; a window closed
may have its program reach the web, a page's unload handler say; a tool without them has the
specification's defaults, not idempotent and open world). The browser tools carry
playwright-mcp's titles (``@playwright/mcp``,
https://github.com/microsoft/playwright-mcp#tools). Hints are what a client may show or
auto-approve by; the controller's policy judges every call whatever they say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

__all__ = ["TOOL_HINTS", "ToolHint", "add_tool"]


class ToolHint(NamedTuple):
    """A tool's ``title``, whether it only looks (``read_only``), whether it may do what
    cannot be undone (``destructive``; meaningful only when not ``read_only``), whether a
    second call with the same arguments does nothing more (``idempotent``) and whether it may
    reach beyond the sandbox's desktop, the web (``open_world``); ``None``: not stated (the
    specification's defaults: not idempotent, open world)."""

    title: str
    read_only: bool
    destructive: bool = False
    idempotent: bool | None = None
    open_world: bool | None = None


TOOL_HINTS: dict[str, ToolHint] = {
    # computer (Anthropic's action names)
    "screenshot": ToolHint("Take a screenshot", True),
    "left_click": ToolHint("Left-click", False, True),
    "right_click": ToolHint("Right-click", False, True),
    "middle_click": ToolHint("Middle-click", False, True),
    "double_click": ToolHint("Double-click", False, True),
    "triple_click": ToolHint("Triple-click", False, True),
    "mouse_move": ToolHint("Move the pointer", False),
    "left_click_drag": ToolHint("Drag with the left button", False, True),
    "left_mouse_down": ToolHint("Press the left button", False, True),
    "left_mouse_up": ToolHint("Release the left button", False, True),
    "scroll": ToolHint("Scroll", False),
    "key": ToolHint("Press a key", False, True),
    "hold_key": ToolHint("Hold a key", False, True),
    "type": ToolHint("Type text", False, True),
    "wait": ToolHint("Wait", True),
    "cursor_position": ToolHint("Pointer position", True),
    "zoom": ToolHint("Zoom into a region", True),
    "computer_batch": ToolHint("Several computer actions", False, True),
    # browser (playwright-mcp's names and titles)
    "browser_navigate": ToolHint("Navigate to a URL", False, True),
    "browser_navigate_back": ToolHint("Go back", False, True),
    "browser_snapshot": ToolHint("Page snapshot", True),
    "browser_click": ToolHint("Click", False, True),
    "browser_hover": ToolHint("Hover mouse", False),
    "browser_drag": ToolHint("Drag mouse", False, True),
    "browser_type": ToolHint("Type text", False, True),
    "browser_fill_form": ToolHint("Fill form", False, True),
    "browser_select_option": ToolHint("Select option", False, True),
    "browser_press_key": ToolHint("Press a key", False, True),
    "browser_file_upload": ToolHint("Upload files", False, True),
    "browser_tabs": ToolHint("Manage tabs", False, True),
    "browser_handle_dialog": ToolHint("Handle a dialog", False, True),
    "browser_wait_for": ToolHint("Wait for", True),
    "browser_take_screenshot": ToolHint("Take a screenshot", True),
    "browser_console_messages": ToolHint("Get console messages", True),
    "browser_network_requests": ToolHint("List network requests", True),
    # browser (deskpod's own, named in playwright-mcp's style)
    "browser_clipboard_read": ToolHint("Read the clipboard", True, open_world=False),
    "browser_clipboard_write": ToolHint("Write the clipboard", False, True, idempotent=True, open_world=False),
    "browser_drop_files": ToolHint("Drop files", False, True, idempotent=False, open_world=True),
    "browser_recover_tab": ToolHint("Recover an unresponsive tab", False, True, idempotent=False, open_world=True),
    # the desktop's windows (named after the actions they send)
    "desktop_windows": ToolHint("List the desktop's windows", True, open_world=False),
    "window_focus": ToolHint("Focus a window", False, False, idempotent=True, open_world=False),
    "window_move": ToolHint("Move a window", False, False, idempotent=True, open_world=False),
    "window_resize": ToolHint("Resize a window", False, False, idempotent=True, open_world=False),
    "window_close": ToolHint("Close a window", False, True, idempotent=False, open_world=True),
    "desktop_open_app": ToolHint("Open a desktop application", False, False, idempotent=False, open_world=False),
    # code (a code task)
    "exec": ToolHint("Run a command", False, True),
    "read_file": ToolHint("Read a file", True),
    "write_file": ToolHint("Write a file", False, True),
    "edit_file": ToolHint("Edit a file", False, True),
    "list_dir": ToolHint("List a folder", True),
    "run_tests": ToolHint("Run the task's tests", False),
    # both
    "finish": ToolHint("Finish the task", False),
}
"""Every tool's title and hints, by tool name."""


def add_tool(server: MCPServer[Any], fn: Callable[..., Any], name: str | None = None,
             description: str | None = None) -> None:
    """Register ``fn`` as the tool ``name`` (default: the function's name) with its title
    and annotations from :data:`TOOL_HINTS`; its result is content blocks (images, text),
    not structured output.

    Raises:
        KeyError: the tool has no entry in :data:`TOOL_HINTS`.
    """
    tool = name or fn.__name__
    hint = TOOL_HINTS[tool]
    server.add_tool(fn, name=tool, title=hint.title, description=description, structured_output=False,
                    annotations=ToolAnnotations(title=hint.title, read_only_hint=hint.read_only,
                                                destructive_hint=hint.destructive and not hint.read_only,
                                                idempotent_hint=hint.idempotent, open_world_hint=hint.open_world))
