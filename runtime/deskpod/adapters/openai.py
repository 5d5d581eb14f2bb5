"""OpenAI computer use: ``computer_call`` actions in, ``computer_call_output`` out.

Shapes follow OpenAI's Responses API computer-use tool: a ``computer_call`` item
carries ``call_id`` and one ``action`` (``click`` with ``button`` left / right /
wheel / back / forward, ``double_click``, ``drag`` with ``path``, ``keypress`` with
``keys``, ``move``, ``screenshot``, ``scroll`` with ``scroll_x`` / ``scroll_y``,
``type``, ``wait``); the answer is a ``computer_call_output`` whose ``output`` is
``{"type": "computer_screenshot", "image_url": "data:image/png;base64,..."}``.

``scroll_x`` / ``scroll_y`` are pixels (as in OpenAI's reference implementation,
which passes them to a mouse wheel); they become wheel notches of
:data:`PIXELS_PER_NOTCH` pixels, the distance one notch scrolls in Chromium on X11.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from deskpod.adapters._common import build, require, unknown
from deskpod.client import SandboxClient
from deskpod.errors import InvalidActionError
from deskpod.protocol import MAX_SCROLL_NOTCHES, ObserveOptions, Screenshot

__all__ = ["PIXELS_PER_NOTCH", "DEFAULT_WAIT_S", "to_actions", "computer_call_output", "execute"]

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


def to_actions(action: dict[str, Any]) -> list[BaseModel]:
    """Convert one OpenAI computer action to protocol actions.

    Args:
        action: the ``action`` object of a ``computer_call`` item.

    Returns:
        The protocol actions, in order (coordinates stay in the model space).

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
        if button not in _BUTTONS:
            raise InvalidActionError(f"click: unknown button {button!r}", detail={"action": "click", "field": "button"})
        return [build({"type": "click", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "button": _BUTTONS[button]})]
    if kind == "double_click":
        return [build({"type": "double_click", "x": require(action, "x", kind), "y": require(action, "y", kind)})]
    if kind == "move":
        return [build({"type": "move", "x": require(action, "x", kind), "y": require(action, "y", kind)})]
    if kind == "drag":
        return [build({"type": "drag", "path": require(action, "path", kind)})]
    if kind == "scroll":
        return [build({"type": "scroll", "x": require(action, "x", kind), "y": require(action, "y", kind),
                       "scroll_x": _notches(action.get("scroll_x", 0), "scroll_x"),
                       "scroll_y": _notches(action.get("scroll_y", 0), "scroll_y")})]
    if kind == "keypress":
        return [build({"type": "keypress", "keys": require(action, "keys", kind)})]
    if kind == "type":
        return [build({"type": "type", "text": require(action, "text", kind)})]
    if kind == "wait":
        return [build({"type": "wait", "seconds": DEFAULT_WAIT_S})]
    if kind == "screenshot":
        return [build({"type": "screenshot"})]
    raise unknown("OpenAI", kind, _KNOWN)


def computer_call_output(call: dict[str, Any], screenshot: Screenshot) -> dict[str, Any]:
    """Build the ``computer_call_output`` item answering ``call`` with ``screenshot``.

    Pending safety checks are not acknowledged here: acknowledging is a human's
    decision, taken by the controller's confirmation flow.
    """
    media = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}[screenshot.format]
    return {
        "type": "computer_call_output",
        "call_id": call.get("call_id"),
        "output": {"type": "computer_screenshot", "image_url": f"data:{media};base64,{screenshot.data}"},
    }


async def execute(client: SandboxClient, call: dict[str, Any], observe: ObserveOptions | None = None) -> dict[str, Any]:
    """Run a ``computer_call`` item unchanged and return its ``computer_call_output``.

    Raises:
        UnknownActionError, InvalidActionError: the action cannot be converted.
        DeskpodError: the sandbox's typed error for the action.
    """
    if not isinstance(call, dict) or call.get("type") != "computer_call":
        raise InvalidActionError("expected a computer_call item")
    actions = to_actions(call.get("action"))  # type: ignore[arg-type]
    obs = await client.act(actions, (observe or ObserveOptions()).model_copy(update={"screenshot": True}))
    assert obs.screenshot is not None
    return computer_call_output(call, obs.screenshot)
