"""The browser tools of a GUI task's session: playwright-mcp's names, parameters and meanings.

Each call is one step of the session's run (a :class:`~deskpod.mcp_server.steps.Step`), judged
by the policy like the same actions from any client. The ref-based tools send the element
actions of the daemon protocol (``click_element``, ``hover_element``, ``drag_element``,
``type_element``, ``select_option``, ``fill_form``), which the policy judges like the pixels
they land on; back is the key chord Alt+Left and a file upload the ``set_files`` action
(workspace files only); ``browser_console_messages`` and ``browser_network_requests`` look,
their observation carrying the page's logs (:mod:`.page_logs`), and ``browser_wait_for`` waits
for a text to appear or (``textGone``) to disappear. playwright-mcp's parameters and titles:
``@playwright/mcp``, https://github.com/microsoft/playwright-mcp#tools.

deskpod's own browser tools, which playwright-mcp has no counterpart for, are named in its style
after the protocol actions they send (:data:`OWN_BROWSER_TOOLS`): ``browser_clipboard_read``
and ``browser_clipboard_write`` (the desktop's clipboard, :mod:`deskpod.protocol.clipboard`; a
read's text is untrusted content), ``browser_drop_files`` (workspace files dropped onto the page
at a point, judged an upload as ``browser_file_upload`` is) and ``browser_recover_tab`` (a tab
whose page does not answer, :mod:`deskpod.protocol.tabs`; the summary of every step lists such
tabs).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from deskpod.errors import DeskpodError
from deskpod.keys import parse_chord
from deskpod.mcp_server.hints import add_tool
from deskpod.mcp_server.page_logs import LogView
from deskpod.mcp_server.steps import Step, protocol_action
from deskpod.protocol.clipboard import MAX_CLIPBOARD_CHARS
from deskpod.protocol.downloads import MAX_UPLOAD_FILES
from deskpod.protocol.limits import MAX_PATH_CHARS

__all__ = ["BROWSER_TOOLS", "OWN_BROWSER_TOOLS", "PLAYWRIGHT_TOOLS", "add_browser_tools"]

PLAYWRIGHT_TOOLS = ("browser_navigate", "browser_navigate_back", "browser_snapshot", "browser_click", "browser_hover",
                    "browser_drag", "browser_type", "browser_fill_form", "browser_press_key", "browser_select_option",
                    "browser_file_upload", "browser_tabs", "browser_handle_dialog", "browser_wait_for",
                    "browser_take_screenshot", "browser_console_messages", "browser_network_requests")
"""The browser tools of playwright-mcp (its names, parameters and meanings)."""

OWN_BROWSER_TOOLS = ("browser_clipboard_read", "browser_clipboard_write", "browser_drop_files",
                         "browser_recover_tab")
"""The browser tools playwright-mcp has no counterpart for, named in its style."""

BROWSER_TOOLS = PLAYWRIGHT_TOOLS + OWN_BROWSER_TOOLS
"""Every browser tool."""

Element = Annotated[str, Field(max_length=1000, description="Human-readable element description, for the audit log "
                                                             "and the approver")]
Ref = Annotated[str, Field(description="the element's ref ([ref=eN]) from the last browser_snapshot")]
WorkspaceFile = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS,
                                     description="a file of the workspace, relative to its root")]


class FillField(BaseModel):
    """One field of ``browser_fill_form``, as playwright-mcp's: ``name`` and ``type`` describe it (for
    the audit log and the approver); what is done follows the control at ``ref``, which the policy
    judges."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=200, description="Human-readable field name")
    type: Literal["textbox", "checkbox", "radio", "combobox", "slider"] = Field(description="Type of the field")
    ref: str = Field(description="Exact target field reference from the page snapshot")
    value: str = Field(description="Value to fill in the field. If the field is a checkbox, the value should be "
                                   "`true` or `false`. If the field is a combobox, the value should be the text of "
                                   "the option.")


def add_browser_tools(server: MCPServer[Any], step: Step) -> None:
    """Register the browser tools (:data:`BROWSER_TOOLS`) on ``server``.

    Args:
        server: the MCP server.
        step: runs a tool's actions as one step of its session's run and answers its content.
    """

    async def browser_navigate(url: Annotated[str, Field(description="the http(s) URL to open")],
                               ctx: Context | None = None) -> list[Any]:
        """Open exactly this URL in the active tab (a navigate action, judged as a link to it;
        the allowlists apply)."""
        return await step(ctx, [protocol_action({"type": "navigate", "url": url})], intent=f"open {url[:200]}")

    async def browser_navigate_back(ctx: Context | None = None) -> list[Any]:
        """Go back to the previous page in the history (the key chord Alt+Left, judged as that chord)."""
        return await step(ctx, [{"type": "keypress", "keys": ["alt", "Left"]}], intent="go back")

    async def browser_snapshot(ctx: Context | None = None) -> list[Any]:
        """The page's accessibility tree with element refs, as text (untrusted content)."""
        return await step(ctx, [{"type": "screenshot"}], want="snapshot")

    async def browser_click(ref: Ref, element: Element = "", doubleClick: bool = False,  # noqa: N803 - playwright's
                            button: Literal["left", "right", "middle"] = "left",
                            ctx: Context | None = None) -> list[Any]:
        """Click an element by its ref (judged by the policy like a click at its point)."""
        return await step(ctx, [{"type": "click_element", "ref": ref, "button": button,
                                 "count": 2 if doubleClick else 1}], intent=element[:500])

    async def browser_hover(ref: Ref, element: Element = "", ctx: Context | None = None) -> list[Any]:
        """Hover over an element by its ref (the pointer moves to its centre; judged as that move)."""
        return await step(ctx, [{"type": "hover_element", "ref": ref}], intent=element[:500])

    async def browser_drag(startRef: Ref, endRef: Ref, startElement: Element = "",  # noqa: N803 - playwright's
                           endElement: Element = "", ctx: Context | None = None) -> list[Any]:  # noqa: N803
        """Drag and drop between two elements by their refs (judged as a drag between their points)."""
        return await step(ctx, [{"type": "drag_element", "ref": startRef, "to_ref": endRef}],
                          intent=f"drag {startElement[:240]} onto {endElement[:240]}")

    async def browser_type(ref: Ref, text: str, element: Element = "", submit: bool = False,
                           ctx: Context | None = None) -> list[Any]:
        """Type text into an element by its ref, replacing what it holds (submit: press Enter after)."""
        return await step(ctx, [{"type": "type_element", "ref": ref, "text": text, "submit": submit}],
                          intent=element[:500])

    async def browser_fill_form(
        fields: Annotated[list[FillField], Field(min_length=1, max_length=50, description="Fields to fill in")],
        ctx: Context | None = None,
    ) -> list[Any]:
        """Fill several form fields by ref in one step; each is filled as the control at its ref is (a
        select by the option's text, a checkbox or radio button by true/false, else typed)."""
        return await step(ctx, [{"type": "fill_form", "fields": [{"ref": f.ref, "value": f.value} for f in fields]}],
                          intent="fill " + ", ".join(f"{f.name} ({f.type})" for f in fields)[:500])

    async def browser_select_option(
        ref: Ref, values: Annotated[list[str], Field(min_length=1, max_length=64, description=(
            "Array of values to select in the dropdown (each an option's value, or its label)"))],
        element: Element = "", ctx: Context | None = None,
    ) -> list[Any]:
        """Select options in a dropdown by ref, by their values as playwright-mcp does; the policy and the
        approver judge the labels of the options they choose."""
        return await step(ctx, [{"type": "select_option", "ref": ref, "values": values, "by": "value"}],
                          intent=element[:500])

    async def browser_press_key(key: Annotated[str, Field(description="a key name, e.g. 'Enter', 'ArrowLeft'")],
                                ctx: Context | None = None) -> list[Any]:
        """Press a key."""
        try:
            keys = parse_chord(_PLAYWRIGHT_KEYS.get(key, key))
        except DeskpodError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from None
        return await step(ctx, [{"type": "keypress", "keys": keys}])

    async def browser_file_upload(
        paths: Annotated[list[WorkspaceFile] | None, Field(max_length=MAX_UPLOAD_FILES, description=(
            "files of the workspace, relative to its root (a leading / is read from the root too); "
            "omitted: nothing is uploaded"))] = None,
        ctx: Context | None = None,
    ) -> list[Any]:
        """Answer the open file chooser with workspace files (the set_files action: only regular
        files inside the workspace; judged an upload, L2): the page's, or a desktop application's
        file dialog (one file, which it opens or saves to; judged L2 too)."""
        if not paths:
            return ["No files given: nothing was uploaded. deskpod's file chooser is not a window, so it blocks "
                    "nothing: act on the page as it is."]
        return await step(ctx, [{"type": "set_files", "paths": paths}], intent="upload " + ", ".join(paths)[:400])

    async def browser_tabs(action: Literal["list", "new", "close", "select"] = "list",
                           index: Annotated[int | None, Field(ge=0, le=7)] = None,
                           ctx: Context | None = None) -> list[Any]:
        """List, open, close or select browser tabs (by index, 0-7)."""
        chords: list[Any] = []
        if action in ("close", "select") and index is not None:
            chords.append({"type": "keypress", "keys": ["ctrl", str(index + 1)]})
        if action == "new":
            chords.append({"type": "keypress", "keys": ["ctrl", "t"]})
        elif action == "close":
            chords.append({"type": "keypress", "keys": ["ctrl", "w"]})
        elif action == "select" and index is None:
            raise ToolError("browser_tabs select needs an index")
        return await step(ctx, chords or [{"type": "screenshot"}], want="text")

    async def browser_handle_dialog(accept: bool, promptText: str | None = None,  # noqa: N803 - playwright's names
                                    ctx: Context | None = None) -> list[Any]:
        """Accept or dismiss the open JavaScript dialog."""
        action: dict[str, Any] = {"type": "dialog_accept", "text": promptText} if accept else {"type": "dialog_dismiss"}
        return await step(ctx, [action])

    async def browser_wait_for(
        time: Annotated[float | None, Field(ge=0, le=30, description="seconds: with text or textGone the longest "
                                                                     "wait (default 10), alone the wait")] = None,
        text: Annotated[str | None, Field(description="The text to wait for")] = None,
        textGone: Annotated[str | None, Field(description="The text to wait for to disappear")] = None,  # noqa: N803
        ctx: Context | None = None,
    ) -> list[Any]:
        """Wait for a text to appear on the page, a text to disappear from it, or for a time."""
        waits = [{"type": "wait_for", condition: wanted, "timeout_s": time or 10.0}
                 for condition, wanted in (("text_absent", textGone), ("text_present", text)) if wanted is not None]
        return await step(ctx, waits or [{"type": "wait", "seconds": time if time is not None else 1.0}])

    async def browser_take_screenshot(
        type: Annotated[Literal["png", "jpeg"], Field(description="accepted; the image comes in the sandbox's "  # noqa: A002
                                                               "format, which its MIME type names")] = "png",
        filename: Annotated[str | None, Field(description="accepted and ignored: nothing is written on the host; "
                                                          "the image is in the result")] = None,
        element: Element | None = None, ref: Annotated[str | None, Field(description="not supported: the whole "
                                                                          "screen is shown")] = None,
        fullPage: Annotated[bool | None, Field(description="not supported: the visible screen is shown")] = None,  # noqa: N803
        ctx: Context | None = None,
    ) -> list[Any]:
        """Take a screenshot of the browser (the whole screen, in the model space, in the sandbox's image format)."""
        shot = await step(ctx, [{"type": "screenshot"}])
        notes = [note for given, note in (
            (filename, "filename ignored: deskpod writes no file on the host; the image is in this result"),
            (element or ref, "element screenshots are not supported: this is the whole screen"),
            (fullPage, "fullPage is not supported: this is the visible screen")) if given]
        return [*shot, *notes]

    async def browser_console_messages(
        onlyErrors: Annotated[bool, Field(description="Only return error messages")] = False,  # noqa: N803
        ctx: Context | None = None,
    ) -> list[Any]:
        """Returns the console messages of the page since it loaded (untrusted content; looking only)."""
        return await step(ctx, [{"type": "screenshot"}], want=LogView("console", only_errors=onlyErrors))

    async def browser_network_requests(
        includeStatic: Annotated[bool, Field(description="Whether to include successful static resources like "  # noqa: N803
                                                         "images, fonts, scripts, etc. Defaults to false.")] = False,
        ctx: Context | None = None,
    ) -> list[Any]:
        """Returns all network requests since loading the page (URLs redacted, untrusted content; looking only)."""
        return await step(ctx, [{"type": "screenshot"}], want=LogView("network", include_static=includeStatic))

    tools = (browser_navigate, browser_navigate_back, browser_snapshot, browser_click, browser_hover, browser_drag,
             browser_type, browser_fill_form, browser_press_key, browser_select_option, browser_file_upload,
             browser_tabs, browser_handle_dialog, browser_wait_for, browser_take_screenshot, browser_console_messages,
             browser_network_requests)
    for fn in tools:
        add_tool(server, fn)
    _add_deskpod_tools(server, step)


def _add_deskpod_tools(server: MCPServer[Any], step: Step) -> None:
    """Register :data:`OWN_BROWSER_TOOLS` on ``server`` (``step`` as for :func:`add_browser_tools`)."""

    async def browser_clipboard_read(ctx: Context | None = None) -> list[Any]:
        """Read the text on the desktop's clipboard (what the last copy in any window put there), as
        untrusted content; secrets the run knows are masked. The clipboard_read action, judged L2 (a
        copy may have put a secret there), so it waits for the approver where the policy confirms L2."""
        return await step(ctx, [{"type": "clipboard_read"}], want="clipboard", intent="read the clipboard")

    async def browser_clipboard_write(
        text: Annotated[str, Field(max_length=MAX_CLIPBOARD_CHARS, description="the text to put on the clipboard")],
        ctx: Context | None = None,
    ) -> list[Any]:
        """Put text on the desktop's clipboard, as a copy does, replacing what it held: the next paste
        (the key ctrl+v) in any window pastes it. The clipboard_write action, judged L1."""
        done = await step(ctx, [protocol_action({"type": "clipboard_write", "text": text})], want="text",
                          intent="write the clipboard")
        return [f"The clipboard now holds the {len(text)} characters given: paste them with the key ctrl+v.", *done]

    async def browser_drop_files(
        coordinate: Annotated[list[int], Field(min_length=2, max_length=2, description=(
            "[x, y] in the model space: where the files are dropped (the page's drop zone)"))],
        paths: Annotated[list[WorkspaceFile], Field(min_length=1, max_length=MAX_UPLOAD_FILES, description=(
            "files of the workspace, relative to its root (a leading / is read from the root too)"))],
        element: Element = "", ctx: Context | None = None,
    ) -> list[Any]:
        """Drop workspace files onto the page at a point, as a user drags them in from a file manager
        (the drop_files action: the element there gets dragenter, dragover and drop events holding
        the files; only regular files inside the workspace; judged an upload, L2)."""
        action = protocol_action({"type": "drop_files", "x": coordinate[0], "y": coordinate[1], "paths": paths})
        return await step(ctx, [action], intent=(f"drop {', '.join(paths)}" + (f" onto {element}" if element else ""))[:500])

    async def browser_recover_tab(
        tabId: Annotated[str | None, Field(min_length=1, max_length=128, description=(  # noqa: N803 - playwright's style
            "the tab to recover, by the id the result's tab lines give it; omitted: the first tab listed as not "
            "answering"))] = None,
        ctx: Context | None = None,
    ) -> list[Any]:
        """Recover a tab whose page does not answer (a script that never ends; step results list such
        tabs): its script is stopped and its URL loaded again, what was typed there is lost; a tab
        stuck otherwise is replaced by a new one. The recover_tab action, judged L1. A page that
        answers is left alone (error page_responsive)."""
        return await step(ctx, [protocol_action({"type": "recover_tab", "tab_id": tabId})], intent="recover an unresponsive tab")

    for fn in (browser_clipboard_read, browser_clipboard_write, browser_drop_files, browser_recover_tab):
        add_tool(server, fn)


_PLAYWRIGHT_KEYS = {"Enter": "Return", "ArrowLeft": "Left", "ArrowRight": "Right", "ArrowUp": "Up",
                    "ArrowDown": "Down", "Backspace": "BackSpace", "PageUp": "Prior", "PageDown": "Next"}
"""playwright's key names where the X keysym differs."""
