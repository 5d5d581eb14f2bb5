"""The window tools of a GUI task's session: the desktop's windows, listed and acted on by id.

``desktop_windows`` looks: the desktop's top-level windows as the observation lists them
(:mod:`deskpod.protocol.windows`: each one's id, application, title, box, focus, whether it is
modal and whose program it is; at most :data:`~deskpod.protocol.MAX_WINDOWS`, their labels cut),
the programs' words as untrusted content (:func:`~deskpod.mcp_server.content.window_list`).
``window_focus``, ``window_close``, ``window_move`` and ``window_resize`` send the protocol's window
action of the same name for a window id that list gave, each one step of the session's run (a
:class:`~deskpod.mcp_server.steps.Step`) judged by the policy as the same action from any client
(a close ``L2``: its program may lose unsaved work; the others ``L1``), and answer the screen and
the list after it. Named after the actions they send, as deskpod's own browser tools are; an id
the latest list did not hold is a tool error ``no_window`` and nothing is done. Their parameters
are the actions' own (``window_id``, ``width``, ``height``), a point a ``coordinate`` as the
computer tools' (model space).

``desktop_open_app`` opens a desktop application (the protocol's ``open_app``: one of
:data:`~deskpod.protocol.APPS`, and a workspace file for it to open), one step judged ``L1``,
answering the screen and the list after it, where its window appears once its program maps it. It needs a sandbox
started with the desktop profile (:mod:`deskpod.protocol.apps`); elsewhere the sandbox fails it
(``execution_failed``, reason ``no_desktop``), a tool error saying so.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from deskpod.mcp_server.hints import add_tool
from deskpod.mcp_server.steps import Step, WindowView, protocol_action
from deskpod.protocol.apps import AppName, WorkspaceFile
from deskpod.protocol.windows import WindowId

__all__ = ["WINDOW_TOOLS", "add_window_tools"]

WINDOW_TOOLS = ("desktop_windows", "window_focus", "window_close", "window_move", "window_resize", "desktop_open_app")
"""The window tools, and the tool that opens an application's window."""

ListedWindow = Annotated[WindowId, Field(description="the window's id, as desktop_windows lists it (e.g. '0x1a00007')")]


def add_window_tools(server: MCPServer[Any], step: Step) -> None:
    """Register the window tools (:data:`WINDOW_TOOLS`) on ``server``.

    Args:
        server: the MCP server.
        step: runs a tool's actions as one step of its session's run and answers its content.
    """

    async def desktop_windows(ctx: Context | None = None) -> list[Any]:
        """List the desktop's windows, the frontmost first: each one's id (what window_focus,
        window_close, window_move and window_resize take), application, title, box [x0, y0, x1, y1]
        in the model space, and whether it has the keyboard focus, is a modal dialog or is a window
        of the agent's own program (a command run with display). Titles are the programs' words
        (untrusted content). Looking only."""
        return await step(ctx, [{"type": "screenshot"}], want=WindowView(), intent="list the desktop's windows")

    async def acted(ctx: Context | None, fields: dict[str, Any], intent: str) -> list[Any]:
        return await step(ctx, [protocol_action(fields)], want=WindowView(screenshot=True), intent=intent)

    async def window_focus(window_id: ListedWindow, ctx: Context | None = None) -> list[Any]:
        """Raise a window and give it the keyboard focus, by its id from desktop_windows: keys go to
        it next. The window_focus action, judged L1. The window manager may keep the focus on a
        modal dialog: the result's list says which window has it."""
        return await acted(ctx, {"type": "window_focus", "window_id": window_id}, f"focus window {window_id}")

    async def window_close(window_id: ListedWindow, ctx: Context | None = None) -> list[Any]:
        """Ask a window to close, by its id from desktop_windows, as its close button does: its
        program decides, and may ask first (a save prompt). The window_close action, judged L2 (its
        program may lose unsaved work), so it waits for the approver where the policy confirms L2."""
        return await acted(ctx, {"type": "window_close", "window_id": window_id}, f"close window {window_id}")

    async def window_move(
        window_id: ListedWindow,
        coordinate: Annotated[list[int], Field(min_length=2, max_length=2, description=(
            "[x, y] in the model space: where the window's top-left corner goes"))],
        ctx: Context | None = None,
    ) -> list[Any]:
        """Move a window, by its id from desktop_windows, so its top-left corner is at a point of
        the screen; its size is kept. The window_move action, judged L1."""
        return await acted(ctx, {"type": "window_move", "window_id": window_id, "x": coordinate[0], "y": coordinate[1]},
                           f"move window {window_id} to ({coordinate[0]}, {coordinate[1]})")

    async def window_resize(
        window_id: ListedWindow,
        width: Annotated[int, Field(description="pixels, model space")],
        height: Annotated[int, Field(description="pixels, model space")],
        ctx: Context | None = None,
    ) -> list[Any]:
        """Resize a window, by its id from desktop_windows, to width x height; its top-left corner
        is kept, and its program may round or bound the size (the result's list says what it
        became). The window_resize action, judged L1."""
        return await acted(ctx, {"type": "window_resize", "window_id": window_id, "width": width, "height": height},
                           f"resize window {window_id} to {width}x{height}")

    async def desktop_open_app(
        app: Annotated[AppName, Field(description=(
            "'terminal' (xterm), 'editor' (Mousepad, text), 'file_manager' (Thunar), 'document' (AbiWord), "
            "'spreadsheet' (Gnumeric), 'pdf_viewer' (Zathura) or 'image_viewer' (Ristretto)"))],
        path: Annotated[WorkspaceFile | None, Field(description=(
            "a file of the workspace for the application to open (a folder for the file manager), relative to "
            "/workspace (e.g. 'notes.txt'); the terminal ignores it"))] = None,
        ctx: Context | None = None,
    ) -> list[Any]:
        """Open a desktop application: a terminal, a text editor, a file manager, a word
        processor, a spreadsheet, a PDF or an image viewer, its working folder /workspace (the
        files write_file writes; what an application saves, read_file reads). Each
        call opens another window; it joins desktop_windows' list as the agent's program once
        it is drawn (list them again if it is not there yet), and keys and clicks reach it as
        any window. The open_app action, judged L1. Only where the sandbox has the desktop
        profile: elsewhere a tool error (reason no_desktop)."""
        return await acted(ctx, {"type": "open_app", "app": app, "path": path},
                           f"open the {app}" + (f" on {path}" if path else ""))

    for fn in (desktop_windows, window_focus, window_close, window_move, window_resize, desktop_open_app):
        add_tool(server, fn)
