"""OpenAI computer use: ``computer_call`` actions in, ``computer_call_output`` out.

Shapes follow OpenAI's Responses API computer-use tool
(https://developers.openai.com/api/docs/guides/tools-computer-use): a
``computer_call`` item carries ``call_id`` and either one ``action`` (the
``computer_use_preview`` tool) or a batch ``actions`` (the GA ``computer`` tool).
An action is ``click`` with ``button`` left / right / wheel / back / forward,
``double_click``, ``drag`` with ``path``, ``keypress`` with ``keys``, ``move``,
``screenshot``, ``scroll`` with ``scroll_x`` / ``scroll_y``, ``type`` or ``wait``;
pointer actions (``click``, ``double_click``, ``drag``, ``move``, ``scroll``) may carry
``keys`` held during the action (as the ``openai`` SDK 3.57 types say, ``keys`` on
``ActionMove`` and ``ActionDrag`` too): they become the protocol's ``hold_keys``. The
answer is a ``computer_call_output`` whose ``output`` is
``{"type": "computer_screenshot", "image_url": "data:image/png;base64,..."}``, with
``acknowledged_safety_checks`` when a human confirmed the call's pending checks.

Errors are answered in band, as the Anthropic adapter answers them: :func:`execute`
never raises for a call it cannot convert or the sandbox refused; it returns the items
that answer the call, the ``computer_call_output`` with the screen as it is now followed
by a user message ``"Computer call <call_id>: <code>: <message>"`` (:func:`error_items`),
so the agent loop goes on and the model reads why.

``scroll_x`` / ``scroll_y`` are pixels (as in OpenAI's reference implementation,
which passes them to a mouse wheel); they become wheel notches of
:data:`PIXELS_PER_NOTCH` pixels, the distance one notch scrolls in Chromium on X11.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deskpod.adapters._common import build, display_size, require, shown, unknown
from deskpod.client import SandboxClient
from deskpod.errors import BadReplyError, DeskpodError, InvalidActionError
from deskpod.protocol import MAX_SCROLL_NOTCHES, Action, ObserveOptions, Screenshot, Size

__all__ = [
    "DEFAULT_WAIT_S",
    "PIXELS_PER_NOTCH",
    "PREVIEW_TOOL_TYPE",
    "TOOL_TYPE",
    "call_actions",
    "computer_call_output",
    "display_size",
    "error_items",
    "execute",
    "image_url",
    "to_actions",
    "tool_definition",
]

TOOL_TYPE = "computer"
"""The GA computer tool (``gpt-5.4`` and later): batched ``actions``, no declared display size."""

PREVIEW_TOOL_TYPE = "computer_use_preview"
"""The preview tool of the ``computer-use-preview`` model: one ``action``, a declared display size."""

PIXELS_PER_NOTCH = 53
"""Pixels Chromium scrolls per wheel notch on Linux/X11 (its ``kWheelScrollAmount``)."""

DEFAULT_WAIT_S = 1.0
"""Seconds a ``wait`` action waits (OpenAI's ``wait`` carries no duration)."""

_BUTTONS = {"left": "left", "right": "right", "wheel": "middle", "middle": "middle", "back": "back",
            "forward": "forward"}
_KNOWN = ["click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait"]


def _notches(pixels: Any, field: str) -> int:
    if isinstance(pixels, bool) or not isinstance(pixels, (int, float)):
        raise InvalidActionError(f"scroll: {field!r} must be a number of pixels", detail={"field": field})
    if pixels == 0:
        return 0
    count = max(1, round(abs(pixels) / PIXELS_PER_NOTCH))
    return int(min(count, MAX_SCROLL_NOTCHES) * (1 if pixels > 0 else -1))


def _held(action: dict[str, Any], kind: str) -> list[Any]:
    keys = action.get("keys") or []
    if not isinstance(keys, list):
        raise InvalidActionError(f"{kind}: 'keys' must be a list of key names",
                                 detail={"action": kind, "field": "keys"})
    return keys


def to_actions(action: dict[str, Any]) -> list[Action]:
    """Convert one OpenAI computer action to protocol actions.

    Args:
        action: the ``action`` object of a ``computer_call`` item.

    Returns:
        The protocol actions, in order (coordinates as given: :func:`execute` maps them to the
        model space).

    Raises:
        UnknownActionError: ``type`` is not an OpenAI computer action (named in
            ``detail["action"]``).
        InvalidActionError: a field is missing or malformed.
    """
    if not isinstance(action, dict):
        raise InvalidActionError("computer_call action must be an object")
    kind = action.get("type")
    if kind == "click":
        button = action.get("button", "left")
        if not isinstance(button, str) or button not in _BUTTONS:
            raise InvalidActionError(f"click: unknown button {button!r}", detail={"action": "click", "field": "button"})
        return [build({"type": "click", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "button": _BUTTONS[button], "hold_keys": _held(action, kind)})]
    if kind == "double_click":
        return [build({"type": "double_click", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "hold_keys": _held(action, kind)})]
    if kind == "move":
        return [build({"type": "move", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "hold_keys": _held(action, kind)})]
    if kind == "drag":
        return [build({"type": "drag", "path": require(action, "path", kind), "hold_keys": _held(action, kind)})]
    if kind == "scroll":
        return [build({"type": "scroll", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "scroll_x": _notches(action.get("scroll_x", 0), "scroll_x"),
                       "scroll_y": _notches(action.get("scroll_y", 0), "scroll_y"),
                       "hold_keys": _held(action, kind)})]
    if kind == "keypress":
        return [build({"type": "keypress", "keys": require(action, "keys", kind)})]
    if kind == "type":
        return [build({"type": "type", "text": require(action, "text", kind)})]
    if kind == "wait":
        return [build({"type": "wait", "seconds": DEFAULT_WAIT_S})]
    if kind == "screenshot":
        return [build({"type": "screenshot"})]
    raise unknown("OpenAI", kind, _KNOWN)


def call_actions(call: dict[str, Any]) -> list[Action]:
    """Convert a whole ``computer_call`` item: its batch ``actions`` or its one ``action``.

    Args:
        call: a ``computer_call`` output item of a response.

    Returns:
        The protocol actions of every vendor action, in order (coordinates as given).

    Raises:
        InvalidActionError: the call has neither ``actions`` nor ``action``, or a field
            is missing or malformed.
        UnknownActionError: an action's ``type`` is not an OpenAI computer action.
    """
    batch = call.get("actions")
    if batch is None:
        return to_actions(call.get("action"))  # type: ignore[arg-type]
    if not isinstance(batch, list) or not batch:
        raise InvalidActionError("computer_call: 'actions' must be a non-empty list",
                                 detail={"field": "actions"})
    return [converted for action in batch for converted in to_actions(action)]


def tool_definition(display: Size, tool_type: str = TOOL_TYPE) -> dict[str, Any]:
    """The computer tool's entry in a Responses request's ``tools``.

    Args:
        display: the size of the images the model is sent, declared as ``display_width`` /
            ``display_height`` by the preview tool (the GA tool reads the size from the
            screenshots): :func:`display_size` of the connection.
        tool_type: :data:`TOOL_TYPE` or :data:`PREVIEW_TOOL_TYPE`.

    Returns:
        ``{"type": "computer"}``, or ``{"type": "computer_use_preview", "display_width",
        "display_height", "environment": "browser"}``.
    """
    if tool_type == PREVIEW_TOOL_TYPE:
        return {"type": PREVIEW_TOOL_TYPE, "display_width": display.width, "display_height": display.height,
                "environment": "browser"}
    return {"type": TOOL_TYPE}


def image_url(screenshot: Screenshot) -> str:
    """The screenshot as a ``data:`` URL (its format's media type, base64)."""
    media = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}[screenshot.format]
    return f"data:{media};base64,{screenshot.data}"


def computer_call_output(
    call: dict[str, Any], screenshot: Screenshot, acknowledged_safety_checks: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """Build the ``computer_call_output`` item answering ``call`` with ``screenshot``.

    Args:
        call: the ``computer_call`` item answered (its ``call_id`` is echoed).
        screenshot: the screen after the call, in the model space.
        acknowledged_safety_checks: the call's ``pending_safety_checks`` a human
            confirmed; acknowledging is the controller's confirmation flow's decision,
            never this function's. Empty: the field is left out.
    """
    item: dict[str, Any] = {
        "type": "computer_call_output",
        "call_id": call.get("call_id"),
        "output": {"type": "computer_screenshot", "image_url": image_url(screenshot)},
    }
    if acknowledged_safety_checks:
        item["acknowledged_safety_checks"] = [dict(check) for check in acknowledged_safety_checks]
    return item


def error_items(call: dict[str, Any], screenshot: Screenshot, note: str) -> list[dict[str, Any]]:
    """The items answering a call that was not executed: its ``computer_call_output`` with
    ``screenshot`` (the screen now), then a user message ``"Computer call <call_id>: <note>"``."""
    return [computer_call_output(call, screenshot),
            {"role": "user", "content": [{"type": "input_text", "text": f"Computer call {call.get('call_id')}: {note}"}]}]


async def execute(client: SandboxClient, call: dict[str, Any],
                  observe: ObserveOptions | None = None) -> list[dict[str, Any]]:
    """Run a ``computer_call`` item unchanged and return the input items that answer it.

    The call is planned on the screenshot this adapter last returned on ``client``
    (:func:`~deskpod.adapters._common.shown`): its points are that image's pixels, mapped to
    the model space when the daemon sent the image scaled down, and its pointer actions are
    bound to that screenshot: when the screen under a point has changed since (a banner
    moved in, the page navigated), nothing is pressed and the answer is the
    ``screen_changed`` error with the screen as it is now.

    Returns:
        ``[computer_call_output]`` with the screenshot after the call; when the call could
        not be converted or the sandbox refused it, :func:`error_items` with the screen as
        it is then and ``"<code>: <message>"``.

    Raises:
        BadReplyError: the sandbox broke the wire contract (nothing can be shown then).
    """
    options = (observe or ObserveOptions()).model_copy(update={"screenshot": True})
    screen = shown(client)
    try:
        if not isinstance(call, dict) or call.get("type") != "computer_call":
            raise InvalidActionError("expected a computer_call item")
        actions, expect = screen.bind(call_actions(call), client.model_size)
        obs = await client.act(actions, options, expect=expect)
    except BadReplyError:
        raise
    except DeskpodError as exc:
        now = await client.act([], options)
        assert now.screenshot is not None
        screen.returned(now)
        return error_items(call if isinstance(call, dict) else {}, now.screenshot, f"{exc.code}: {exc.message}")
    assert obs.screenshot is not None
    screen.returned(obs)
    return [computer_call_output(call, obs.screenshot)]
