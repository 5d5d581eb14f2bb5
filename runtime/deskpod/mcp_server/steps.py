"""A GUI tool's step and what it answers: what it shows of its observation, or its refusal.

Every GUI tool of :mod:`.server` and :mod:`.browser_tools` is one step of the session's run,
sent through a :class:`Step` (the server's, which submits it to the run, where the policy
judges it). :func:`gui_result` turns the step's reply into the tool's content: what the tool
wants of the observation (:data:`Want`: an image, a text, a log, the desktop's windows) and the
:func:`~deskpod.mcp_server.content.observation_summary`; a refused or failed step is a tool
error saying why and what to do next. :func:`protocol_action` checks a tool's action before it
is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mcp.server.mcpserver import Image
from mcp.server.mcpserver.exceptions import ToolError

from deskpod.errors import DeskpodError
from deskpod.mcp_server.content import image_of, observation_summary, untrusted, window_list, with_untrusted
from deskpod.mcp_server.page_logs import LogView
from deskpod.mcp_server.runs import StepReply
from deskpod.protocol import Action, parse_action

__all__ = ["Step", "Want", "WindowView", "gui_result", "protocol_action"]


@dataclass(frozen=True)
class WindowView:
    """What a window tool shows of its step's observation: the desktop's windows
    (:func:`~deskpod.mcp_server.content.window_list`), after the screenshot when ``screenshot``
    (the answer to an action on a window; a list alone: looking only)."""

    screenshot: bool = False


Want = Literal["screenshot", "zoom", "cursor", "text", "snapshot", "clipboard"] | LogView | WindowView
"""What a GUI tool shows of its step's observation besides the summary (a log tool: its log;
``clipboard``: the clipboard's text as untrusted content; a window tool: the windows;
``text``: the summary alone)."""


def protocol_action(fields: dict[str, Any]) -> Action:
    """The protocol action of ``fields`` (:func:`deskpod.protocol.parse_action`).

    Raises:
        ToolError: they are not one (``invalid_action: why``), before anything reaches the sandbox.
    """
    try:
        return parse_action(fields)
    except DeskpodError as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from None


class Step(Protocol):
    """Runs ``actions`` (protocol actions, as models or dicts) as one step of the call's
    session's run (``ctx``: the MCP call's context), ``intent`` for the audit log and the
    approver, and answers the tool's content (:func:`gui_result` of ``want``).

    Raises:
        ToolError: the run could not start, refused the call, ended, or refused or failed
            the step (the text says why and what the agent may do next).
    """

    async def __call__(self, ctx: Any, actions: Sequence[Any], want: Want = "screenshot",
                       intent: str = "") -> list[Any]: ...


_NEXT = {
    "denied": "Nothing of the refused action was done. Choose another action (observe first with screenshot), "
              "or finish.",
    "error": "The sandbox could not do it; the screen is as the next screenshot shows. Try another way.",
}


def _refusal(reply: StepReply) -> str:
    error = reply.error
    rule = f" (rule {error['rule']})" if error.get("rule") else ""
    text = f"{reply.status}: {error.get('code', '')}{rule}. {_NEXT[reply.status]}"
    if error.get("code") == "screen_changed":
        text += " The screen changed since your last screenshot: take a new one and plan on it."
    elif error.get("code") in ("stale_ref", "ref_obscured"):
        text += " That ref is not valid now: take a new browser_snapshot and act on its refs."
    elif error.get("code") == "no_window":
        text += " That window is not in the latest list of windows, or it is gone: list them with desktop_windows " \
                "and use an id it gives."
    elif error.get("reason") == "no_desktop":
        text += " No desktop applications here (reason no_desktop): this sandbox was started without the desktop " \
                "profile, so desktop_open_app cannot open one. Work in the browser, or finish."
    return with_untrusted(text, "error", error.get("message", ""))


def _clipboard(text: str | None) -> str:
    """A clipboard read's text: what a page or a window copied, so untrusted content."""
    if text is None:
        return "The sandbox did not report the clipboard."
    if not text:
        return "The clipboard is empty (or holds no text)."
    return with_untrusted(f"The clipboard's text ({len(text)} characters; secrets masked as in every text the "
                          "sandbox reports):", "clipboard", text)


def gui_result(reply: StepReply, want: Want) -> list[Any]:
    """The tool content for a GUI step: an image (or a text) and the summary.

    Raises:
        ToolError: the step was refused (``denied``) or failed (``error``).
    """
    if reply.status in ("error", "denied"):
        raise ToolError(_refusal(reply))
    obs = reply.observation
    out: list[Any] = []
    if isinstance(want, LogView):
        out.append(want.render(obs))
    elif isinstance(want, WindowView):
        if want.screenshot and obs.screenshot is not None:
            shot = image_of(obs.screenshot)
            out.append(Image(data=shot.data, format=shot.format))
        out.append(window_list(obs.windows))
    elif want == "cursor" and obs.cursor is not None:
        out.append(f"X={obs.cursor.x},Y={obs.cursor.y}")
    elif want == "zoom" and obs.zoom is not None:
        shot = image_of(obs.zoom)
        out.append(Image(data=shot.data, format=shot.format))
    elif want == "snapshot":
        tree = getattr(obs, "snapshot", None)
        if tree:
            out.append(untrusted("snapshot", tree))
        else:
            out.append("No accessibility snapshot with element refs in this observation; the page text follows.")
            out.append(untrusted("page_text", obs.page_text or ""))
    elif want == "clipboard":
        out.append(_clipboard(obs.clipboard))
    elif want == "screenshot" and obs.screenshot is not None:
        shot = image_of(obs.screenshot)
        out.append(Image(data=shot.data, format=shot.format))
    out.append(observation_summary(obs, reply.status, windows=not isinstance(want, WindowView)))
    return out
