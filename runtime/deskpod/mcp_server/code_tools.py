"""The workspace tools of a code task's session: each call is one tool call of its code run.

The run (:class:`~deskpod.mcp_server.runs.CodeRun`) judges every call under the exec policy; a
refusal is a tool error naming the rule, and what a file or a command gives is untrusted content
(:func:`~deskpod.mcp_server.content.untrusted`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from deskpod.errors import RunEnded
from deskpod.mcp_server.content import untrusted, with_untrusted
from deskpod.mcp_server.hints import add_tool
from deskpod.mcp_server.runs import CodeRun, GuiRun

__all__ = ["CODE_TOOLS", "add_code_tools"]

CODE_TOOLS = ("exec", "read_file", "write_file", "edit_file", "list_dir", "run_tests")
"""The workspace tools of a code task."""

WorkspacePath = Annotated[str, Field(description="a path relative to the workspace root")]


def add_code_tools(server: MCPServer[Any], run_of: Callable[[Context | None], Awaitable[GuiRun | CodeRun]]) -> None:
    """Register the workspace tools (:data:`CODE_TOOLS`) on ``server``.

    Args:
        server: the MCP server.
        run_of: the code run of a call's session (its context), started at the first call;
            raises ``ToolError`` saying why when it cannot start.
    """

    async def call(ctx: Context | None, tool: str, args: dict[str, Any]) -> str:
        run = await run_of(ctx)
        assert isinstance(run, CodeRun)
        async with run.lock:
            try:
                feedback = await run.call(tool, {k: v for k, v in args.items() if v is not None})
            except RunEnded as exc:
                raise ToolError(exc.message) from None
        if not feedback.ok:
            error = feedback.error or {}
            rule = error["detail"].get("rule") if isinstance(error.get("detail"), dict) else None
            raise ToolError(with_untrusted(f"{error.get('code', 'error')}{f' (rule {rule})' if rule else ''}:",
                                           "error", str(error.get("message", ""))))
        output = dict(feedback.output or {})
        parts = []
        for key in ("content", "stdout", "stderr", "tail", "diff"):
            if isinstance(output.get(key), str):
                parts.append(untrusted(key, output.pop(key)))
        return "\n".join([untrusted("output", json.dumps(output, ensure_ascii=False, default=str)[:20_000]), *parts])

    async def exec(cmd: Annotated[str | None, Field(description="a shell command line")] = None,  # noqa: A001
                   argv: list[str] | None = None, cwd: WorkspacePath = ".", timeout_s: float = 30.0,
                   network: bool = False, ctx: Context | None = None) -> str:
        """Run a command in the workspace (the exec policy may ask a human, or refuse)."""
        return await call(ctx, "exec", {"cmd": cmd, "argv": argv, "cwd": cwd, "timeout_s": timeout_s,
                                        "network": network or None})

    async def read_file(path: WorkspacePath, start_line: int = 1, max_lines: int | None = None,
                        ctx: Context | None = None) -> str:
        """Read a file of the workspace."""
        return await call(ctx, "read_file", {"path": path, "start_line": start_line, "max_lines": max_lines})

    async def write_file(path: WorkspacePath, content: str, ctx: Context | None = None) -> str:
        """Write a file of the workspace (its folders are created)."""
        return await call(ctx, "write_file", {"path": path, "content": content})

    async def edit_file(path: WorkspacePath, old_text: str, new_text: str,
                        ctx: Context | None = None) -> str:
        """Replace the one occurrence of old_text in a file with new_text."""
        return await call(ctx, "edit_file", {"path": path, "old_text": old_text, "new_text": new_text})

    async def list_dir(path: WorkspacePath = ".", ctx: Context | None = None) -> str:
        """List a folder of the workspace."""
        return await call(ctx, "list_dir", {"path": path})

    async def run_tests(ctx: Context | None = None) -> str:
        """Run the task's tests in the workspace."""
        return await call(ctx, "run_tests", {})

    for fn in (exec, read_file, write_file, edit_file, list_dir, run_tests):
        add_tool(server, fn)
