"""Anthropic computer use: computer-tool ``tool_use`` inputs in, ``tool_result`` out.

Shapes follow Anthropic's computer tool
(https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool;
``computer_20250124``, plus ``zoom`` from ``computer_20251124``, each behind its
beta flag in :data:`BETA_FLAGS`): an ``input`` with an ``action`` — ``key`` (xdotool-style
chord text such as ``"ctrl+a"``), ``type``, ``mouse_move``, ``left_click``,
``right_click``, ``middle_click``, ``double_click``, ``triple_click``,
``left_click_drag`` (``start_coordinate`` → ``coordinate``), ``left_mouse_down``,
``left_mouse_up``, ``scroll`` (``scroll_direction`` up/down/left/right,
``scroll_amount`` wheel notches), ``hold_key`` (``text``, ``duration`` seconds),
``wait`` (``duration`` seconds), ``screenshot``, ``cursor_position``, ``zoom``
(``region`` [x0, y0, x1, y1]). Clicks and scrolls may carry ``text``: keys held
meanwhile. ``coordinate`` is ``[x, y]`` in the pixels of the screenshot the adapter
last returned; :func:`tool_definition` declares that size (:func:`display_size`), and
:func:`execute` maps the points to the model space and binds them to that screenshot.

The answer is a ``tool_result`` block: an image for most actions, the text
``"X=…,Y=…"`` for ``cursor_position``, or ``is_error`` with the reason, so an
unknown or failed action never ends the agent loop.

**The computer toolset** ``computer_toolset_20260801`` (generally available, no beta
flag; shapes checked against the ``anthropic`` SDK 2.15, ``ComputerToolset20260801Param``
and ``BetaComputer*Input``): one ``tools`` entry ``{"type": "computer_toolset_20260801",
"configs": {member: {"enabled": bool, "defer_loading": bool}}}`` (no ``name``, no display
size: coordinates are screenshot pixels) expands into the member tools
:data:`TOOLSET_MEMBERS`. The model calls a member by name, several per turn:
``{"type": "tool_use", "id", "name": "left_click", "toolset_name": "computer", "input":
{"coordinate": [x, y], "text": "shift"}}``; member inputs are the older tool's without
``action`` (``key`` adds ``repeat``, which :func:`to_actions` honours for both tools;
``left_mouse_down``/``left_mouse_up`` take no coordinate). :func:`member_actions` converts one (a member the configs disabled is
refused), :func:`member_result` answers it as the SDK's toolset does: the fixed
acknowledgment (``"Clicked."``) for a pure action, an image for ``screenshot`` and
``zoom``, ``"X=…,Y=…"`` for ``cursor_position``.

Errors are answered in band for every tool version, as the OpenAI adapter answers them:
:func:`execute` never raises for an input it cannot convert or an action the sandbox
refused; it returns a ``tool_result`` with ``is_error`` and the text ``"<code>: <message>"``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from deskpod.adapters._common import build, display_size, point, require, shown, state_note, unknown
from deskpod.client import SandboxClient
from deskpod.errors import BadReplyError, DeskpodError, InvalidActionError
from deskpod.keys import parse_chord
from deskpod.protocol import Action, Observation, ObserveOptions, Screenshot, Size

__all__ = [
    "BETA_FLAGS",
    "MAX_KEY_REPEAT",
    "MEMBER_ACKS",
    "TOOLSET_MEMBERS",
    "TOOLSET_NAME",
    "TOOLSET_TYPE",
    "TOOL_TYPE",
    "ZOOM_TOOL_TYPE",
    "dialog_note",
    "display_size",
    "enabled_members",
    "error_result",
    "execute",
    "image_block",
    "is_member_use",
    "member_actions",
    "member_result",
    "text_error_result",
    "to_actions",
    "tool_definition",
    "tool_result",
    "toolset_definition",
]

TOOL_TYPE = "computer_20250124"
"""The computer-tool version whose input shapes this adapter follows."""

ZOOM_TOOL_TYPE = "computer_20251124"
"""The later version: the same inputs plus ``zoom`` (enabled by ``enable_zoom``)."""

BETA_FLAGS = {TOOL_TYPE: "computer-use-2025-01-24", ZOOM_TOOL_TYPE: "computer-use-2025-11-24"}
"""The ``anthropic-beta`` flag each tool version needs (the toolset needs none)."""

TOOLSET_TYPE = "computer_toolset_20260801"
"""The computer toolset: one ``tools`` entry expanding into :data:`TOOLSET_MEMBERS`."""

TOOLSET_NAME = "computer"
"""The ``toolset_name`` its members' ``tool_use`` blocks carry."""

TOOLSET_MEMBERS = (
    "key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down", "left_mouse_up", "left_click",
    "left_click_drag", "right_click", "middle_click", "double_click", "triple_click", "scroll", "wait", "screenshot",
    "zoom",
)
"""The toolset's members (the SDK's ``ComputerToolsetConfigsParam`` keys), every one enabled by default."""

MEMBER_ACKS = {
    "key": "Pressed {text}.", "hold_key": "Held {text} for {duration}s.", "type": "Typed.",
    "mouse_move": "Moved the mouse.", "left_mouse_down": "Left mouse button pressed.",
    "left_mouse_up": "Left mouse button released.", "left_click": "Clicked.", "left_click_drag": "Dragged.",
    "right_click": "Right-clicked.", "middle_click": "Middle-clicked.", "double_click": "Double-clicked.",
    "triple_click": "Triple-clicked.", "scroll": "Scrolled {scroll_direction}.", "wait": "Waited {duration}s.",
}
"""The text a pure member's result carries (the SDK's toolset registry), filled from its input."""

MAX_KEY_REPEAT = 100
"""The most times one ``key`` action (its ``repeat``) presses its key or chord."""

_CONFIG_KEYS = frozenset({"enabled", "defer_loading"})

_KNOWN = [
    "key", "type", "mouse_move", "left_click", "right_click", "middle_click", "double_click", "triple_click",
    "left_click_drag", "left_mouse_down", "left_mouse_up", "scroll", "hold_key", "wait", "screenshot",
    "cursor_position", "zoom",
]
_CLICKS = {"left_click": ("click", "left"), "right_click": ("click", "right"), "middle_click": ("click", "middle"),
           "double_click": ("double_click", None), "triple_click": ("triple_click", None)}
_DIRECTIONS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def _held(tool_input: dict[str, Any]) -> list[str]:
    text = tool_input.get("text")
    return parse_chord(text) if isinstance(text, str) and text else []


def _at(tool_input: dict[str, Any], kind: str, required: bool) -> dict[str, Any]:
    if "coordinate" not in tool_input or tool_input["coordinate"] is None:
        if required:
            require(tool_input, "coordinate", kind)
        return {}
    x, y = point(tool_input["coordinate"], kind)
    return {"x": x, "y": y}


def _repeat(tool_input: dict[str, Any]) -> int:
    """How many times a ``key`` action presses its key: its ``repeat`` (absent or ``None``: once).

    Raises:
        InvalidActionError: not a whole number 1..:data:`MAX_KEY_REPEAT`.
    """
    repeat = tool_input.get("repeat")
    if repeat is None:
        return 1
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_KEY_REPEAT:
        raise InvalidActionError(f"key: repeat must be a whole number 1..{MAX_KEY_REPEAT}",
                                 detail={"action": "key", "field": "repeat"})
    return repeat


def to_actions(tool_input: dict[str, Any]) -> list[Action]:
    """Convert one computer-tool input to protocol actions.

    Args:
        tool_input: the ``input`` of a ``tool_use`` block for the computer tool.

    Returns:
        The protocol actions, in order (coordinates as given: :func:`execute` maps them to the
        model space).

    Raises:
        UnknownActionError: ``action`` is not a computer-tool action (named in
            ``detail["action"]``).
        InvalidActionError: a field is missing or malformed.
    """
    if not isinstance(tool_input, dict):
        raise InvalidActionError("computer tool input must be an object")
    kind = tool_input.get("action")
    if not isinstance(kind, str):
        raise unknown("Anthropic computer-tool", kind, _KNOWN)
    if kind in _CLICKS:
        protocol_type, button = _CLICKS[kind]
        data: dict[str, Any] = {"type": protocol_type, **_at(tool_input, kind, False), "hold_keys": _held(tool_input)}
        if button is not None:
            data["button"] = button
        return [build(data)]
    if kind == "key":
        keys = parse_chord(require(tool_input, "text", kind))
        return [build({"type": "keypress", "keys": keys}) for _ in range(_repeat(tool_input))]
    if kind == "type":
        return [build({"type": "type", "text": require(tool_input, "text", kind)})]
    if kind == "mouse_move":
        return [build({"type": "move", **_at(tool_input, kind, True)})]
    if kind == "left_click_drag":
        start = point(require(tool_input, "start_coordinate", kind), kind, "start_coordinate")
        end = point(require(tool_input, "coordinate", kind), kind)
        return [build({"type": "drag", "path": [{"x": start[0], "y": start[1]}, {"x": end[0], "y": end[1]}]})]
    if kind in ("left_mouse_down", "left_mouse_up"):
        return [build({"type": "mouse_down" if kind == "left_mouse_down" else "mouse_up", "button": "left",
                       **_at(tool_input, kind, False)})]
    if kind == "scroll":
        direction = require(tool_input, "scroll_direction", kind)
        if not isinstance(direction, str) or direction not in _DIRECTIONS:
            raise InvalidActionError(f"scroll: unknown scroll_direction {direction!r}",
                                     detail={"action": kind, "field": "scroll_direction"})
        amount = require(tool_input, "scroll_amount", kind)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidActionError("scroll: scroll_amount must be a whole number of notches",
                                     detail={"action": kind, "field": "scroll_amount"})
        dx, dy = _DIRECTIONS[direction]
        return [build({"type": "scroll", **_at(tool_input, kind, True), "scroll_x": dx * amount,
                       "scroll_y": dy * amount, "hold_keys": _held(tool_input)})]
    if kind == "hold_key":
        return [build({"type": "hold_key", "keys": parse_chord(require(tool_input, "text", kind)),
                       "seconds": require(tool_input, "duration", kind)})]
    if kind == "wait":
        return [build({"type": "wait", "seconds": tool_input.get("duration", 1.0)})]
    if kind == "screenshot":
        return [build({"type": "screenshot"})]
    if kind == "cursor_position":
        return [build({"type": "cursor_position"})]
    if kind == "zoom":
        return [build({"type": "zoom", "region": require(tool_input, "region", kind)})]
    raise unknown("Anthropic computer-tool", kind, _KNOWN)


def tool_definition(display: Size, tool_type: str = TOOL_TYPE) -> dict[str, Any]:
    """The computer tool's definition for the Messages API, declaring ``display``.

    Args:
        display: the size of the images the model is sent, ``display_width_px`` /
            ``display_height_px``: :func:`display_size` of the connection (the model space,
            or the smaller image the daemon sent when it scaled one down to fit the
            vendors' limits), declared anew with every request.
        tool_type: :data:`TOOL_TYPE`, or :data:`ZOOM_TOOL_TYPE` (which also sets
            ``enable_zoom``).
    """
    definition: dict[str, Any] = {"type": tool_type, "name": "computer", "display_width_px": display.width,
                                  "display_height_px": display.height}
    if tool_type == ZOOM_TOOL_TYPE:
        definition["enable_zoom"] = True
    return definition


def toolset_definition(configs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The computer toolset's ``tools`` entry, with per-member ``configs`` when given.

    Args:
        configs: ``{member: {"enabled": bool, "defer_loading": bool}}``; a member left out
            keeps its defaults (enabled).

    Raises:
        InvalidActionError: a key is not a member, or a member's config has another field
            or a value that is not a boolean (the API refuses those too).
    """
    entry: dict[str, Any] = {"type": TOOLSET_TYPE}
    checked = _checked_configs(configs)
    if checked:
        entry["configs"] = checked
    return entry


def _checked_configs(configs: Mapping[str, Any] | None) -> dict[str, dict[str, bool]]:
    out: dict[str, dict[str, bool]] = {}
    for member, config in (configs or {}).items():
        if member not in TOOLSET_MEMBERS:
            raise InvalidActionError(f"computer toolset: {member!r} is not a member ({', '.join(TOOLSET_MEMBERS)})",
                                     detail={"field": "configs"})
        if not isinstance(config, Mapping) or not set(config) <= _CONFIG_KEYS or not all(
                isinstance(v, bool) for v in config.values()):
            raise InvalidActionError(f"computer toolset: {member!r} takes only boolean 'enabled' and 'defer_loading'",
                                     detail={"field": "configs"})
        out[member] = dict(config)
    return out


def enabled_members(configs: Mapping[str, Any] | None = None) -> frozenset[str]:
    """The members a toolset entry with ``configs`` offers (every one unless disabled)."""
    checked = _checked_configs(configs)
    return frozenset(m for m in TOOLSET_MEMBERS if checked.get(m, {}).get("enabled", True))


def is_member_use(tool_use: dict[str, Any]) -> bool:
    """Whether a ``tool_use`` block calls a computer toolset member (rather than the older
    single ``computer`` tool, whose input names an ``action``)."""
    return tool_use.get("toolset_name") == TOOLSET_NAME or (
        tool_use.get("name") in TOOLSET_MEMBERS and tool_use.get("name") != "computer")


def member_actions(name: str, tool_input: dict[str, Any],
                   enabled: Collection[str] = TOOLSET_MEMBERS) -> list[Action]:
    """Convert one toolset member call to protocol actions.

    Args:
        name: the member (the ``tool_use`` block's ``name``).
        tool_input: its ``input``.
        enabled: the members the toolset entry offered (:func:`enabled_members`).

    Raises:
        UnknownActionError: ``name`` is not a member, or a member the configs disabled.
        InvalidActionError: a field is missing or malformed.
    """
    if name not in TOOLSET_MEMBERS or name not in enabled:
        raise unknown("computer toolset member", name, sorted(enabled))
    if not isinstance(tool_input, dict) or "action" in tool_input:
        raise InvalidActionError(f"{name}: a member's input is an object without 'action'",
                                 detail={"action": name})
    if name in ("left_mouse_down", "left_mouse_up") and "coordinate" in tool_input:
        raise InvalidActionError(f"{name}: takes no coordinate (it acts where the pointer is)",
                                 detail={"action": name, "field": "coordinate"})
    return to_actions({**tool_input, "action": name})


def member_result(tool_use_id: str, name: str, tool_input: dict[str, Any],
                  observation: Observation) -> dict[str, Any]:
    """The ``tool_result`` of a toolset member that ran: its acknowledgment text
    (:data:`MEMBER_ACKS`), the screenshot for ``screenshot``, the zoomed image for
    ``zoom``, ``"X=…,Y=…"`` for ``cursor_position``; a dialog line when one is open."""
    if name in MEMBER_ACKS:
        values = {k: tool_input.get(k, "") for k in ("text", "duration", "scroll_direction")}
        text = MEMBER_ACKS[name].format(**{k: str(v)[:64] for k, v in values.items()})
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id,
                                  "content": [{"type": "text", "text": text}]}
        note = dialog_note(observation)
        if note is not None:
            result["content"].append({"type": "text", "text": note})
        return result
    return tool_result(tool_use_id, name, observation)


def image_block(screenshot: Screenshot) -> dict[str, Any]:
    """The screenshot as a base64 ``image`` content block (its format's media type)."""
    media = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}[screenshot.format]
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": screenshot.data}}


def tool_result(tool_use_id: str, action: str, observation: Observation) -> dict[str, Any]:
    """Build the ``tool_result`` block for a computer-tool action.

    ``cursor_position`` answers with text ``"X=<x>,Y=<y>"`` (the observation's cursor, which
    :func:`execute` gives in the pixels of the screenshot the model last saw); ``zoom``
    with the zoomed image; every other action with the screenshot after it. While a
    JavaScript dialog is open, a text block (:func:`dialog_note`) follows.
    """
    if action == "cursor_position" and observation.cursor is not None:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": f"X={observation.cursor.x},Y={observation.cursor.y}"}
        ]
    elif action == "zoom" and observation.zoom is not None:
        content = [image_block(observation.zoom)]
    elif observation.screenshot is not None:
        content = [image_block(observation.screenshot)]
    else:
        content = [{"type": "text", "text": "done"}]
    note = dialog_note(observation)
    if note is not None:
        content.append({"type": "text", "text": note})
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


_DIALOG_TYPES = ("alert", "confirm", "prompt", "beforeunload")


def dialog_note(observation: Observation) -> str | None:
    """A line telling the model a JavaScript dialog is open and how to answer it with the
    computer tool's own actions (the tool has no dialog action; a key press answers it).
    Only the dialog's type is named, never its message: that is page content, which the
    screenshot shows. With no dialog open, the file chooser's and the unresponsive tab's notes
    (:func:`~deskpod.adapters._common.state_note`); ``None`` when none holds."""
    dialog = observation.dialog
    if dialog is None:
        return state_note(observation)
    kind = dialog.type if dialog.type in _DIALOG_TYPES else "JavaScript"
    return (f"A {kind} dialog is open in the browser and blocks its page: press Return (key action) "
            "to accept it or Escape to dismiss it.")


def error_result(tool_use_id: str, error: DeskpodError) -> dict[str, Any]:
    """A ``tool_result`` with ``is_error`` carrying the typed error's code and message."""
    return text_error_result(tool_use_id, f"{error.code}: {error.message}")


def text_error_result(tool_use_id: str, text: str) -> dict[str, Any]:
    """A ``tool_result`` with ``is_error`` and ``text`` as its only content."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True,
            "content": [{"type": "text", "text": text}]}


async def execute(
    client: SandboxClient, tool_use: dict[str, Any], observe: ObserveOptions | None = None,
    enabled: Collection[str] = TOOLSET_MEMBERS,
) -> dict[str, Any]:
    """Run a computer-tool ``tool_use`` block unchanged (the single tool's, or a toolset
    member's: :func:`is_member_use`) and return its ``tool_result``.

    Errors (unknown actions, bad fields, out-of-bounds points, sandbox failures)
    become an ``is_error`` result, so the agent loop goes on.

    The call is planned on the screenshot this adapter last returned on ``client``
    (:func:`~deskpod.adapters._common.shown`): its coordinates are that image's pixels,
    mapped to the model space when the daemon sent the image scaled down (declare
    :func:`display_size` in the tool definition), ``cursor_position`` answers in them, and
    its pointer actions are bound to that screenshot: when the screen under a point has
    changed since (a banner moved in, the page navigated), nothing is pressed and the
    result is the ``screen_changed`` error (take a screenshot and plan again).

    Args:
        client: the sandbox.
        tool_use: the block.
        observe: what the observation after it holds (the screenshot is set per action).
        enabled: the toolset members offered (:func:`enabled_members`).

    Raises:
        BadReplyError: the sandbox broke the wire contract.
    """
    tool_use_id = str(tool_use.get("id", "")) if isinstance(tool_use, dict) else ""
    screen = shown(client)
    try:
        if not isinstance(tool_use, dict) or tool_use.get("type") != "tool_use":
            raise InvalidActionError("expected a tool_use block")
        tool_input = tool_use.get("input")
        member = is_member_use(tool_use)
        if member:
            kind = str(tool_use.get("name"))
            actions = member_actions(kind, tool_input, enabled)  # type: ignore[arg-type]
        else:
            actions = to_actions(tool_input)  # type: ignore[arg-type]
            kind = str(tool_input.get("action"))  # type: ignore[union-attr]
        wants_image = kind not in ("cursor_position", "zoom")
        options = (observe or ObserveOptions()).model_copy(update={"screenshot": wants_image})
        actions, expect = screen.bind(actions, client.model_size)
        observation = await client.act(actions, options, expect=expect)
    except BadReplyError:
        raise
    except DeskpodError as exc:
        return error_result(tool_use_id, exc)
    if observation.cursor is not None:
        observation = observation.model_copy(update={"cursor": screen.to_image(observation.cursor,
                                                                                client.model_size)})
    if member:
        if kind == "screenshot":
            screen.returned(observation)
        return member_result(tool_use_id, kind, tool_input, observation)  # type: ignore[arg-type]
    screen.returned(observation)
    return tool_result(tool_use_id, kind, observation)
