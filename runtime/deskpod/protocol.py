"""The wire contract between the controller and the in-sandbox daemon (agentd).

Pure: no I/O, no FastAPI, Xlib, mss or docker. Both sides import this module and
never each other.

Transport: JSON text frames over one websocket (``/v1/ws`` on the daemon),
authenticated by ``Authorization: Bearer <token>``. After the upgrade the daemon
sends a :class:`Hello`. Then every client message is one request with an ``id``;
the daemon answers each with exactly one :class:`Result` or :class:`ErrorReply`
carrying the same ``id``. An error never closes the connection, except for
messages over :data:`MAX_MESSAGE_BYTES`.

Requests:

- :class:`ActRequest` ``{"type": "act", "id", "actions": [...], "observe": {...}}``:
  the actions run strictly in order on one serial executor; the reply carries the
  :class:`Observation` taken after the batch. An empty ``actions`` list only observes.
- :class:`NavigateRequest` ``{"type": "navigate", "id", "url"}``: loads a URL in
  the browser's active tab, then observes.
- :class:`ConfigureRequest` ``{"type": "configure", "id", "model_size"}``: declares
  the size of the images the model sees (the *model space*).

Coordinates: every ``x``/``y`` in an action is an int pixel from the top-left of
the *model space*: the size of the screenshots this session receives. Unless a
session declares ``model_size``, the model space equals the screen. The daemon
checks coordinates against the model space and maps them to screen pixels with
:class:`CoordinateMap`; every :class:`Screenshot` states both sizes, the scale and
the offset, so a client can map back. Durations are float seconds.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from deskpod.errors import (
    InvalidActionError,
    InvalidRequestError,
    MessageTooLargeError,
    OutOfBoundsError,
    UnknownActionError,
)

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_MESSAGE_BYTES",
    "MAX_SERVER_MESSAGE_BYTES",
    "MAX_ACTIONS_PER_REQUEST",
    "MAX_TEXT_CHARS",
    "MAX_WAIT_S",
    "MAX_SCROLL_NOTCHES",
    "ACTION_TYPES",
    "Point",
    "Size",
    "Click",
    "DoubleClick",
    "Move",
    "Drag",
    "Scroll",
    "Keypress",
    "TypeText",
    "Wait",
    "TakeScreenshot",
    "Action",
    "ObserveOptions",
    "ActRequest",
    "NavigateRequest",
    "ConfigureRequest",
    "Request",
    "Hello",
    "Screenshot",
    "ActionTiming",
    "Observation",
    "Result",
    "ErrorBody",
    "ErrorReply",
    "CoordinateMap",
    "parse_request",
    "parse_action",
    "parse_server_message",
    "action_points",
]

PROTOCOL_VERSION = "1"
"""Sent in :class:`Hello`; a client refuses a daemon speaking another version."""

MAX_MESSAGE_BYTES = 1_048_576
"""Largest client message the daemon reads (1 MiB); larger ones close the socket."""

MAX_SERVER_MESSAGE_BYTES = 64 * 1_048_576
"""Largest daemon message a client reads (64 MiB: a large PNG screenshot in base64)."""

MAX_ACTIONS_PER_REQUEST = 100
"""Most actions one :class:`ActRequest` may carry."""

MAX_TEXT_CHARS = 10_000
"""Longest text one ``type`` action may type."""

MAX_WAIT_S = 60.0
"""Longest single ``wait`` action, seconds."""

MAX_SCROLL_NOTCHES = 100
"""Largest wheel-notch count per axis in one ``scroll`` action."""

_STRICT = ConfigDict(extra="forbid", frozen=True)

Coordinate = Annotated[int, Field(strict=True, description="pixels from the top-left, model space")]


class Point(BaseModel):
    """A point in model-space pixels."""

    model_config = _STRICT
    x: Coordinate
    y: Coordinate


class Size(BaseModel):
    """A width and height in pixels (each 1..16384)."""

    model_config = _STRICT
    width: Annotated[int, Field(strict=True, ge=1, le=16384)]
    height: Annotated[int, Field(strict=True, ge=1, le=16384)]


class Click(BaseModel):
    """Press and release a mouse button at (x, y), model space."""

    model_config = _STRICT
    type: Literal["click"]
    x: Coordinate
    y: Coordinate
    button: Literal["left", "right", "middle", "back", "forward"] = "left"


class DoubleClick(BaseModel):
    """Two left clicks at (x, y) close enough in time to fire ``dblclick`` (detail 2)."""

    model_config = _STRICT
    type: Literal["double_click"]
    x: Coordinate
    y: Coordinate


class Move(BaseModel):
    """Move the pointer to (x, y), model space."""

    model_config = _STRICT
    type: Literal["move"]
    x: Coordinate
    y: Coordinate


class Drag(BaseModel):
    """Press the left button at ``path[0]``, move through the points, release at the last.

    The button is released even when a later step fails (seed 002 §15:
    "拖动保证释放鼠标").
    """

    model_config = _STRICT
    type: Literal["drag"]
    path: Annotated[list[Point], Field(min_length=2, max_length=1000)]


class Scroll(BaseModel):
    """Move to (x, y) and turn the wheel.

    ``scroll_y`` > 0 scrolls down, < 0 up; ``scroll_x`` > 0 right, < 0 left. Both
    are counts of wheel notches, never pixels, and are never scaled.
    """

    model_config = _STRICT
    type: Literal["scroll"]
    x: Coordinate
    y: Coordinate
    scroll_x: Annotated[int, Field(strict=True, ge=-MAX_SCROLL_NOTCHES, le=MAX_SCROLL_NOTCHES)] = 0
    scroll_y: Annotated[int, Field(strict=True, ge=-MAX_SCROLL_NOTCHES, le=MAX_SCROLL_NOTCHES)] = 0


class Keypress(BaseModel):
    """Press ``keys`` as one chord: modifiers down first, all released in reverse.

    Names may be OpenAI-style (``"ENTER"``, ``"CTRL"``), X keysym names
    (``"Return"``, ``"Control_L"``) or single characters; see :mod:`deskpod.keys`.
    An element may also be chord text joined by ``+`` (``"ctrl+a"``).
    """

    model_config = _STRICT
    type: Literal["keypress"]
    keys: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1, max_length=16)]


class TypeText(BaseModel):
    """Type ``text`` exactly, any Unicode, never through a shell."""

    model_config = _STRICT
    type: Literal["type"]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class Wait(BaseModel):
    """Do nothing for ``seconds`` (0..:data:`MAX_WAIT_S`)."""

    model_config = _STRICT
    type: Literal["wait"]
    seconds: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 1.0


class TakeScreenshot(BaseModel):
    """Take a screenshot now; the reply's observation carries the last one taken."""

    model_config = _STRICT
    type: Literal["screenshot"]


Action = Annotated[
    Union[Click, DoubleClick, Move, Drag, Scroll, Keypress, TypeText, Wait, TakeScreenshot],
    Field(discriminator="type"),
]
"""One action; the ``type`` field selects the model."""

ACTION_TYPES: frozenset[str] = frozenset(
    {"click", "double_click", "move", "drag", "scroll", "keypress", "type", "wait", "screenshot"}
)

_ACTION_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)


class ObserveOptions(BaseModel):
    """What the observation after a request should contain.

    ``screenshot``: include a screenshot. ``format``/``quality``: PNG (lossless)
    or JPEG with quality 1..95. ``page_text``: include the page's visible text
    (``document.body.innerText``, capped at ``max_text_chars``).
    """

    model_config = _STRICT
    screenshot: bool = True
    format: Literal["png", "jpeg"] = "png"
    quality: Annotated[int, Field(strict=True, ge=1, le=95)] = 80
    page_text: bool = False
    max_text_chars: Annotated[int, Field(strict=True, ge=0, le=1_000_000)] = 20_000


class ActRequest(BaseModel):
    """Run ``actions`` in order, then observe."""

    model_config = _STRICT
    type: Literal["act"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    actions: Annotated[list[Action], Field(max_length=MAX_ACTIONS_PER_REQUEST)]
    observe: ObserveOptions = ObserveOptions()
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0, allow_inf_nan=False)] = 60.0


class NavigateRequest(BaseModel):
    """Load ``url`` (http or https only) in the active tab, then observe."""

    model_config = _STRICT
    type: Literal["navigate"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    url: Annotated[str, Field(min_length=1, max_length=8192, pattern=r"^https?://")]
    observe: ObserveOptions = ObserveOptions()
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0, allow_inf_nan=False)] = 30.0


class ConfigureRequest(BaseModel):
    """Declare the model space. ``model_size=None`` makes it equal the screen."""

    model_config = _STRICT
    type: Literal["configure"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    model_size: Size | None = None


Request = Annotated[Union[ActRequest, NavigateRequest, ConfigureRequest], Field(discriminator="type")]
_REQUEST_TYPES = frozenset({"act", "navigate", "configure"})


class Hello(BaseModel):
    """First message the daemon sends on a new connection."""

    model_config = _STRICT
    type: Literal["hello"] = "hello"
    protocol_version: str = PROTOCOL_VERSION
    screen: Size
    model_size: Size


class Screenshot(BaseModel):
    """An encoded screenshot and how its pixels map to the screen.

    ``width``/``height``: the image's size (the model space). ``screen_width``/
    ``screen_height``: the X screen's size. A model-space point (x, y) is the
    screen point (``offset_x + x * scale_x``, ``offset_y + y * scale_y``).
    ``data``: base64 of the PNG or JPEG bytes. ``sha256``: of those bytes.
    """

    model_config = _STRICT
    id: str
    format: Literal["png", "jpeg"]
    width: int
    height: int
    screen_width: int
    screen_height: int
    scale_x: float
    scale_y: float
    offset_x: int = 0
    offset_y: int = 0
    sha256: str
    data: str


class ActionTiming(BaseModel):
    """How long one action took to execute, seconds."""

    model_config = _STRICT
    index: int
    type: str
    duration_s: float


class Observation(BaseModel):
    """The sandbox's state after a request.

    ``url``/``title``: of the browser's active tab, read through CDP (``None`` when
    the browser could not be asked). ``page_text``: only when requested.
    ``timings``: one entry per executed action. ``observe_s``: seconds spent
    observing (capture, encode, CDP).
    """

    model_config = _STRICT
    screenshot: Screenshot | None = None
    url: str | None = None
    title: str | None = None
    page_text: str | None = None
    timings: list[ActionTiming] = []
    observe_s: float = 0.0


class Result(BaseModel):
    """A successful reply to the request with the same ``id``."""

    model_config = _STRICT
    type: Literal["result"] = "result"
    id: str
    observation: Observation | None = None
    model_size: Size | None = None


class ErrorBody(BaseModel):
    """The closed error envelope; ``code`` is one of the codes in :mod:`deskpod.errors`."""

    model_config = _STRICT
    code: str
    message: str
    detail: dict[str, Any] = {}


class ErrorReply(BaseModel):
    """A failed reply. ``id`` is ``None`` when the request's id could not be read."""

    model_config = _STRICT
    type: Literal["error"] = "error"
    id: str | None
    error: ErrorBody


_SERVER_MESSAGE: TypeAdapter[Any] = TypeAdapter(
    Annotated[Union[Hello, Result, ErrorReply], Field(discriminator="type")]
)


class CoordinateMap:
    """Maps model-space pixels to screen pixels for one screen and one model space.

    The scale is always computed from the two sizes, never assumed to be 1.0
    (case C-02). Bounds are checked in model space (case C-03): valid model
    coordinates are ``0 <= x < model.width`` and ``0 <= y < model.height``.

    Args:
        screen: the X screen's size in pixels.
        model: the size of the images the model receives; ``None`` means the screen.
    """

    def __init__(self, screen: Size, model: Size | None = None) -> None:
        self.screen = screen
        self.model = model or screen
        self.scale_x = screen.width / self.model.width
        self.scale_y = screen.height / self.model.height

    def to_screen(self, x: int, y: int) -> tuple[int, int]:
        """Map a model-space point to the screen pixel it covers.

        Args:
            x, y: model-space pixels.

        Returns:
            ``(x, y)`` screen pixels, rounded to the nearest pixel and clamped
            into the screen.

        Raises:
            OutOfBoundsError: the point lies outside the model space.
        """
        self.check(x, y)
        sx = min(self.screen.width - 1, max(0, math.floor((x + 0.5) * self.scale_x)))
        sy = min(self.screen.height - 1, max(0, math.floor((y + 0.5) * self.scale_y)))
        return sx, sy

    def check(self, x: int, y: int) -> None:
        """Raise :class:`OutOfBoundsError` unless (x, y) lies in the model space."""
        if not (0 <= x < self.model.width and 0 <= y < self.model.height):
            raise OutOfBoundsError(
                f"point ({x}, {y}) is outside the {self.model.width}x{self.model.height} model space",
                detail={"x": x, "y": y, "width": self.model.width, "height": self.model.height},
            )


def action_points(action: BaseModel) -> list[Point]:
    """Return every model-space point an action touches (empty for key, type, wait...)."""
    if isinstance(action, Drag):
        return list(action.path)
    if isinstance(action, (Click, DoubleClick, Move, Scroll)):
        return [Point(x=action.x, y=action.y)]
    return []


def _loads(raw: str | bytes, limit: int = MAX_MESSAGE_BYTES) -> Any:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > limit:
        raise MessageTooLargeError(
            f"message of {size} bytes exceeds the {limit}-byte limit",
            detail={"bytes": size, "limit": limit},
        )
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"message is not valid JSON: {exc}") from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"]) or "message"
    return f"{where}: {err['msg']}"


def parse_action(data: Any, index: int = 0) -> Action:
    """Validate one action object.

    Args:
        data: the decoded JSON object.
        index: its position in the batch, reported in errors.

    Returns:
        The typed action model.

    Raises:
        UnknownActionError: ``type`` is missing or names no known action
            (``detail["action"]`` names it).
        InvalidActionError: fields are missing, extra or of the wrong type.
    """
    if not isinstance(data, dict):
        raise InvalidActionError(f"action {index} is not an object", detail={"action_index": index})
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in ACTION_TYPES:
        raise UnknownActionError(
            f"action {index}: unknown action type {kind!r}; known: {', '.join(sorted(ACTION_TYPES))}",
            detail={"action_index": index, "action": kind if isinstance(kind, str) else repr(kind)[:64]},
        )
    try:
        return _ACTION_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise InvalidActionError(
            f"action {index} ({kind}): {_first_error(exc)}",
            detail={"action_index": index, "action": kind},
        ) from exc


def parse_request(raw: str | bytes) -> ActRequest | NavigateRequest | ConfigureRequest:
    """Decode and validate one client message.

    Args:
        raw: the websocket frame's payload.

    Returns:
        The typed request.

    Raises:
        MessageTooLargeError: ``raw`` exceeds :data:`MAX_MESSAGE_BYTES`.
        InvalidRequestError: not JSON, not an object, unknown request ``type``, or
            bad request fields. ``detail["id"]`` carries the id when readable.
        UnknownActionError, InvalidActionError: an action is bad
            (``detail["action_index"]`` says which).
    """
    data = _loads(raw)
    if not isinstance(data, dict):
        raise InvalidRequestError("message must be a JSON object")
    rid = data.get("id")
    id_detail = {"id": rid} if isinstance(rid, str) else {}
    kind = data.get("type")
    if kind not in _REQUEST_TYPES:
        raise InvalidRequestError(
            f"unknown request type {kind!r}; known: {', '.join(sorted(_REQUEST_TYPES))}", detail=id_detail
        )
    if kind == "act":
        actions = data.get("actions")
        if not isinstance(actions, list):
            raise InvalidRequestError("act: 'actions' must be a list", detail=id_detail)
        if len(actions) > MAX_ACTIONS_PER_REQUEST:
            raise InvalidRequestError(
                f"act: {len(actions)} actions exceed the limit of {MAX_ACTIONS_PER_REQUEST}", detail=id_detail
            )
        for i, item in enumerate(actions):
            try:
                parse_action(item, i)
            except (UnknownActionError, InvalidActionError) as exc:
                exc.detail.update(id_detail)
                raise
    model = {"act": ActRequest, "navigate": NavigateRequest, "configure": ConfigureRequest}[kind]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequestError(f"{kind}: {_first_error(exc)}", detail=id_detail) from exc


def parse_server_message(raw: str | bytes) -> Hello | Result | ErrorReply:
    """Decode one daemon message (client side).

    Raises:
        InvalidRequestError: the message is not a valid :class:`Hello`,
            :class:`Result` or :class:`ErrorReply`.
    """
    data = _loads(raw, MAX_SERVER_MESSAGE_BYTES)
    try:
        return _SERVER_MESSAGE.validate_python(data)
    except ValidationError as exc:
        raise InvalidRequestError(f"bad message from the sandbox: {_first_error(exc)}") from exc
