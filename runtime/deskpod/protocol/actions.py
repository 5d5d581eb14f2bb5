"""Actions: what an ``act`` request runs, in order, on the daemon's serial executor.

Coordinates are int pixels from the top-left of the *model space* (see
:mod:`deskpod.protocol`); durations are float seconds.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter, ValidationError, model_validator

from deskpod.errors import InvalidActionError, UnknownActionError
from deskpod.protocol._base import STRICT, TabId, first_error
from deskpod.protocol.clipboard import ClipboardRead, ClipboardWrite
from deskpod.protocol.downloads import SetFiles, UploadPaths
from deskpod.protocol.apps import OpenApp
from deskpod.protocol.tabs import RecoverTab
from deskpod.protocol.windows import WindowClose, WindowFocus, WindowMove, WindowResize
from deskpod.errors import PatternError
from deskpod.protocol.patterns import compile_pattern
from deskpod.protocol.limits import MAX_DIALOG_CHARS, MAX_SCROLL_NOTCHES, MAX_TEXT_CHARS, MAX_URL_CHARS, MAX_WAIT_S

__all__ = [
    "ACTION_TYPES",
    "Action",
    "CHOICE_ROLES",
    "Click",
    "ClickElement",
    "Coordinate",
    "CursorPosition",
    "DialogAccept",
    "DialogDismiss",
    "DoubleClick",
    "Drag",
    "DragElement",
    "DropFiles",
    "ELEMENT_ACTION_TYPES",
    "ElementRef",
    "FillForm",
    "FormField",
    "HeldKeys",
    "HoldKey",
    "HoverElement",
    "Keypress",
    "MouseDown",
    "MouseUp",
    "Move",
    "NO_INPUT_ACTION_TYPES",
    "NavigableUrl",
    "Navigate",
    "Point",
    "Scroll",
    "SelectOption",
    "Size",
    "TakeScreenshot",
    "TripleClick",
    "TypeElement",
    "TypeText",
    "Wait",
    "WaitFor",
    "Zoom",
    "form_field_kind",
    "parse_action",
    "pixel_actions",
]

Coordinate = Annotated[int, Field(strict=True, description="pixels from the top-left, model space")]


class Point(BaseModel):
    """A point in model-space pixels."""

    model_config = STRICT
    x: Coordinate
    y: Coordinate


class Size(BaseModel):
    """A width and height in pixels (each 1..16384)."""

    model_config = STRICT
    width: Annotated[int, Field(strict=True, ge=1, le=16384)]
    height: Annotated[int, Field(strict=True, ge=1, le=16384)]


HeldKeys = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=8)]
"""Keys (names as in :class:`Keypress`) held down around a click or scroll, e.g. ``["shift"]``."""


class _PointerAction(BaseModel):
    """A pointer action at (x, y), model space; both ``None``: where the pointer is now."""

    model_config = STRICT
    x: Coordinate | None = None
    y: Coordinate | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> _PointerAction:
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither (the current pointer position)")
        return self


class Click(_PointerAction):
    """Press and release ``button`` at (x, y), with ``hold_keys`` held around the click."""

    type: Literal["click"]
    button: Literal["left", "right", "middle", "back", "forward"] = "left"
    hold_keys: HeldKeys = []


class DoubleClick(_PointerAction):
    """Two left clicks at (x, y), back to back in one input batch: ``dblclick`` with detail 2."""

    type: Literal["double_click"]
    hold_keys: HeldKeys = []


class TripleClick(_PointerAction):
    """Three left clicks at (x, y) in one input batch: a click with detail 3 (selects a paragraph)."""

    type: Literal["triple_click"]
    hold_keys: HeldKeys = []


class MouseDown(_PointerAction):
    """Move to (x, y) if given, then press ``button`` and keep it down (released by
    :class:`MouseUp`, or by the daemon when the request fails or the client goes away)."""

    type: Literal["mouse_down"]
    button: Literal["left", "right", "middle"] = "left"


class MouseUp(_PointerAction):
    """Move to (x, y) if given, then release ``button``."""

    type: Literal["mouse_up"]
    button: Literal["left", "right", "middle"] = "left"


class Move(BaseModel):
    """Move the pointer to (x, y), model space, with ``hold_keys`` held during the move."""

    model_config = STRICT
    type: Literal["move"]
    x: Coordinate
    y: Coordinate
    hold_keys: HeldKeys = []


class Drag(BaseModel):
    """Press the left button at ``path[0]``, move through the points, release at the last.

    The button is released even when a later step fails, so a failed drag never
    leaves it held; so are ``hold_keys``, held from before the press to after the release.
    """

    model_config = STRICT
    type: Literal["drag"]
    path: Annotated[list[Point], Field(min_length=2, max_length=1000)]
    hold_keys: HeldKeys = []


class Scroll(BaseModel):
    """Move to (x, y) and turn the wheel, with ``hold_keys`` held.

    ``scroll_y`` > 0 scrolls down, < 0 up; ``scroll_x`` > 0 right, < 0 left. Both
    are counts of wheel notches, never pixels, and are never scaled.
    """

    model_config = STRICT
    type: Literal["scroll"]
    x: Coordinate
    y: Coordinate
    hold_keys: HeldKeys = []
    scroll_x: Annotated[int, Field(strict=True, ge=-MAX_SCROLL_NOTCHES, le=MAX_SCROLL_NOTCHES)] = 0
    scroll_y: Annotated[int, Field(strict=True, ge=-MAX_SCROLL_NOTCHES, le=MAX_SCROLL_NOTCHES)] = 0


class Keypress(BaseModel):
    """Press ``keys`` as one chord: modifiers down first, all released in reverse.

    Names may be OpenAI-style (``"ENTER"``, ``"CTRL"``), X keysym names
    (``"Return"``, ``"Control_L"``) or single characters; see :mod:`deskpod.keys`.
    An element may also be chord text joined by ``+`` (``"ctrl+a"``).
    """

    model_config = STRICT
    type: Literal["keypress"]
    keys: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1, max_length=16)]


class TypeText(BaseModel):
    """Type ``text`` exactly, any Unicode, never through a shell."""

    model_config = STRICT
    type: Literal["type"]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class Wait(BaseModel):
    """Do nothing for ``seconds`` (0..:data:`MAX_WAIT_S`)."""

    model_config = STRICT
    type: Literal["wait"]
    seconds: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 1.0


class HoldKey(BaseModel):
    """Hold ``keys`` down (one chord) for ``seconds``, then release them in reverse order."""

    model_config = STRICT
    type: Literal["hold_key"]
    keys: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1, max_length=16)]
    seconds: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)]


class TakeScreenshot(BaseModel):
    """Take a screenshot now; the reply's observation carries the last one taken."""

    model_config = STRICT
    type: Literal["screenshot"]


class CursorPosition(BaseModel):
    """Report the pointer position (model space) in :attr:`Observation.cursor`."""

    model_config = STRICT
    type: Literal["cursor_position"]


class Zoom(BaseModel):
    """Capture the model-space rectangle ``region`` = [x0, y0, x1, y1] (x1, y1 exclusive)
    at the screen's full resolution into :attr:`Observation.zoom`."""

    model_config = STRICT
    type: Literal["zoom"]
    region: Annotated[list[Coordinate], Field(min_length=4, max_length=4)]

    @model_validator(mode="after")
    def _ordered(self) -> Zoom:
        x0, y0, x1, y1 = self.region
        if not (x1 > x0 and y1 > y0):
            raise ValueError("region must be [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
        return self


class WaitFor(BaseModel):
    """Wait until a condition holds in the environment, checked by the daemon.

    Exactly one condition: ``url_matches`` (a regular expression in RE2 syntax,
    :mod:`deskpod.protocol.patterns`, searched in the active tab's URL), ``text_present``
    (a substring of the page's visible text), ``text_absent`` (a text the page's visible
    text no longer holds; a page whose text cannot be read does not count as without it),
    or ``screen_changed`` (the screen differs from the frame at the start of this action).
    Not met within ``timeout_s`` seconds: error ``timeout``.
    """

    model_config = STRICT
    type: Literal["wait_for"]
    url_matches: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    text_present: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    text_absent: Annotated[str | None, Field(min_length=1, max_length=2048,
                                             exclude_if=lambda text: text is None)] = None
    """Left out of a message when ``None``, so a daemon from before it accepts the message."""
    screen_changed: Literal[True] | None = None
    timeout_s: Annotated[float, Field(gt=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 10.0

    @model_validator(mode="after")
    def _one_condition(self) -> WaitFor:
        given = [c for c in (self.url_matches, self.text_present, self.text_absent, self.screen_changed)
                 if c is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of url_matches, text_present, text_absent, screen_changed")
        if self.url_matches is not None:
            try:
                compile_pattern(self.url_matches)
            except PatternError as exc:
                raise ValueError(f"url_matches: {exc}") from None
        return self


def _navigable(url: str) -> str:
    """``url`` when a browser loads exactly it (see :data:`NavigableUrl`); else ``ValueError``
    saying what is wrong."""
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in url):
        raise ValueError("the URL holds a space or a control character: percent-encode it (RFC 3986)")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"only http and https URLs can be opened, not {parts.scheme[:20] or 'a URL without a scheme'!r}")
    try:
        host, _ = parts.hostname, parts.port
    except ValueError as exc:  # a port that is not a number from 0 to 65535
        raise ValueError(f"the URL's port is not valid: {exc}") from exc
    if not host:
        raise ValueError("the URL names no host")
    return url


NavigableUrl = Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS), AfterValidator(_navigable)]
"""A URL a :class:`Navigate` opens: ``http`` or ``https`` with a host, at most
:data:`~deskpod.protocol.MAX_URL_CHARS` characters, no whitespace and no control character
(percent-encode them, RFC 3986: https://www.rfc-editor.org/rfc/rfc3986#section-2.1)."""


class Navigate(BaseModel):
    """Load ``url`` in the active tab, exactly that URL: the daemon asks the browser
    through DevTools (``Page.navigate``), never through the address bar, so no
    autocompletion from the browser's history can turn it into another one. Then wait
    for the page's load event, at most ``timeout_s`` seconds, or until a JavaScript
    dialog opens (it is then part of the observation). The page did not load, the
    browser refused the URL, or a dialog was already open in the tab: error
    ``navigation_failed`` (``detail["reason"]``). The controller judges it as it judges
    following a link to ``url``."""

    model_config = STRICT
    type: Literal["navigate"]
    url: NavigableUrl
    timeout_s: Annotated[float, Field(gt=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 30.0


class DialogAccept(BaseModel):
    """Accept the open JavaScript dialog (OK; leave the page, for ``beforeunload``),
    answering a ``prompt`` with ``text`` (``None``: its default text).

    ``tab_id``: the tab whose dialog to answer (:attr:`Dialog.tab_id`); ``None``: the
    one :attr:`Observation.dialog` reports. No dialog open there: error ``no_dialog``.
    """

    model_config = STRICT
    type: Literal["dialog_accept"]
    text: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)] | None = None
    tab_id: TabId | None = None


class DialogDismiss(BaseModel):
    """Dismiss the open JavaScript dialog (Cancel; stay on the page, for ``beforeunload``).

    ``tab_id`` as for :class:`DialogAccept`. No dialog open there: error ``no_dialog``.
    """

    model_config = STRICT
    type: Literal["dialog_dismiss"]
    tab_id: TabId | None = None


ElementRef = Annotated[str, Field(pattern=r"^[en][1-9][0-9]{0,8}$")]
"""An element of the latest :attr:`~deskpod.protocol.Observation.snapshot`, by its
``[ref=eN]``. Refs are numbered across the daemon's snapshots, never reused, and valid
only until the next snapshot (or a reset): an older one is refused with
:class:`~deskpod.errors.StaleRefError` (code ``stale_ref``), as is one whose element
left the page, moved, or is off screen. Text on a page cannot make a ref: the daemon
numbers nodes of the accessibility tree it read, never strings it found. Or a desktop
application's native control of the latest
:attr:`~deskpod.protocol.Observation.native_accessibility`, by its ``nN``: valid until the next
observation that reads that tree again, it lands at the centre of the control's box."""


class ClickElement(BaseModel):
    """Click the element ``ref`` ``count`` times with ``button``: real XTEST input at the
    centre of its box on screen, through the same executor, screen check and release on
    abort as :class:`Click` at that point (the daemon turns it into that click)."""

    model_config = STRICT
    type: Literal["click_element"]
    ref: ElementRef
    button: Literal["left", "right", "middle"] = "left"
    count: Literal[1, 2, 3] = 1


class TypeElement(BaseModel):
    """Type ``text`` into the element ``ref``, replacing what it holds: a click at its
    box's centre (it takes the focus), ``ctrl+a``, the text typed as :class:`TypeText`
    does, and with ``submit`` a Return."""

    model_config = STRICT
    type: Literal["type_element"]
    ref: ElementRef
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    submit: bool = False


class SelectOption(BaseModel):
    """Select options of the ``<select>`` element ``ref`` (through DevTools: a native
    select's popup is not part of the page), firing ``input`` and ``change`` as a user's
    choice does. No option matches a string: error ``invalid_action``.

    ``by="label"``: the options whose visible label (its ``label``, or its text) is one of
    ``values``; an option's ``value`` attribute is not matched (the page does not show it).
    ``by="value"``: as Playwright's ``selectOption`` (https://playwright.dev/docs/api/class-locator#locator-select-option),
    for each string the first option whose ``value`` attribute or label is that string.
    Under a controller a select is judged and run by the labels of what it selects: the
    controller turns ``by="value"`` into ``by="label"`` with the labels of the options the
    values choose (read from the select at the ref's point,
    :attr:`~deskpod.protocol.ElementInfo.options`) before it judges, so only a direct client
    of the daemon sends it ``by="value"``."""

    model_config = STRICT
    type: Literal["select_option"]
    ref: ElementRef
    values: Annotated[list[Annotated[str, Field(max_length=1000)]], Field(min_length=1, max_length=64)]
    by: Annotated[Literal["label", "value"], Field(exclude_if=lambda by: by == "label")] = "label"
    """Left out of a message when ``"label"``, so a daemon from before it accepts the message."""


class HoverElement(BaseModel):
    """Move the pointer to the centre of the element ``ref``'s box (a :class:`Move` there)."""

    model_config = STRICT
    type: Literal["hover_element"]
    ref: ElementRef


class DragElement(BaseModel):
    """Drag the element ``ref`` onto the element ``to_ref``: a :class:`Drag` from the centre of
    the first's box to the centre of the second's, both resolved right before it runs."""

    model_config = STRICT
    type: Literal["drag_element"]
    ref: ElementRef
    to_ref: ElementRef


class DropFiles(BaseModel):
    """Drop files of the workspace onto the page at (``x``, ``y``), as a user drags them in from
    a file manager: the element there gets ``dragenter``, ``dragover`` and ``drop`` events whose
    ``dataTransfer.files`` hold them. ``paths`` as for :class:`~deskpod.protocol.SetFiles`
    (workspace files only, copied out for the browser); the page then has them, so the
    controller judges it an upload (``L2``), as it does ``set_files``."""

    model_config = STRICT
    type: Literal["drop_files"]
    x: Coordinate
    y: Coordinate
    paths: UploadPaths


class FormField(BaseModel):
    """One field of :class:`FillForm`: the element ``ref`` and the ``value`` to give it."""

    model_config = STRICT
    ref: ElementRef
    value: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class FillForm(BaseModel):
    """Fill several fields in order: a text field as :class:`TypeElement` (no submit), a
    ``<select>`` as :class:`SelectOption`, a checkbox or radio button clicked when its
    checked state differs from ``value`` (``"true"`` or ``"false"``)."""

    model_config = STRICT
    type: Literal["fill_form"]
    fields: Annotated[list[FormField], Field(min_length=1, max_length=64)]


CHOICE_ROLES: frozenset[str] = frozenset({"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio"})
"""Roles of :class:`FillForm` fields whose value is a checked state (``"true"``/``"false"``)."""


def form_field_kind(tag: str | None, input_type: str | None, role: str | None) -> Literal["text", "select", "choice"]:
    """How :class:`FillForm` fills a field, from the control a click at the field's ref's
    point hits (:class:`~deskpod.protocol.ElementInfo`'s ``tag``, ``input_type`` and
    ``role``): ``"select"`` a ``<select>`` (as :class:`SelectOption`), ``"choice"`` a
    checkbox or radio button (clicked when its checked state differs from the value),
    else ``"text"`` (as :class:`TypeElement`). The controller judges a field and the
    daemon fills it by this one function on the same hit-tested control, so both agree
    on what runs."""
    if tag == "select":
        return "select"
    if input_type in ("checkbox", "radio") or (role or "") in CHOICE_ROLES:
        return "choice"
    return "text"


Action = Annotated[
    Click | DoubleClick | TripleClick | MouseDown | MouseUp | Move | Drag | Scroll | Keypress | HoldKey | TypeText
    | Wait | WaitFor | TakeScreenshot | CursorPosition | Zoom | SetFiles | DialogAccept | DialogDismiss
    | ClipboardRead | ClipboardWrite | DropFiles | RecoverTab | WindowFocus | WindowClose | WindowMove | WindowResize
    | OpenApp | ClickElement | TypeElement | SelectOption | HoverElement | DragElement | FillForm | Navigate,
    Field(discriminator="type"),
]
"""One action; the ``type`` field selects the model."""

ACTION_TYPES: frozenset[str] = frozenset(
    str(get_args(member.model_fields["type"].annotation)[0]) for member in get_args(get_args(Action)[0])
)
"""Every action's ``type`` (derived from :data:`Action`)."""

NO_INPUT_ACTION_TYPES: frozenset[str] = frozenset({"wait", "wait_for", "screenshot", "cursor_position", "zoom"})
"""Actions that send the sandbox no input: they wait, look or report."""

ELEMENT_ACTION_TYPES: frozenset[str] = frozenset(
    {"click_element", "type_element", "select_option", "hover_element", "drag_element", "fill_form"}
)
"""Actions that name an element by its snapshot ref instead of a point."""

_ACTION_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)



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
            f"action {index} ({kind}): {first_error(exc)}",
            detail={"action_index": index, "action": kind},
        ) from exc


def pixel_actions(action: Action, point: tuple[int, int], to: tuple[int, int] | None = None) -> list[Action]:
    """The pointer and key actions that do what an element action does at ``point``.

    ``click_element`` is a click (``count`` 2 or 3: a double or triple click) with its
    button, ``hover_element`` a move, ``drag_element`` a drag from ``point`` to ``to``,
    ``type_element`` a click (focus), ``ctrl+a`` (what the field holds is replaced), the
    text, and Return when ``submit``. The controller judges an element action as these
    actions and the daemon runs it as them, by this one function, so both agree on what runs.

    Args:
        action: any action.
        point: where the element's box is centred, model-space pixels.
        to: for ``drag_element``, where ``to_ref``'s box is centred.

    Raises:
        ValueError: a ``drag_element`` without ``to``.

    Returns:
        Those actions; ``[action]`` for any other action (``select_option`` and
        ``fill_form`` have no pixel equivalent).
    """
    x, y = point
    if isinstance(action, ClickElement):
        if action.count == 2:
            return [DoubleClick(type="double_click", x=x, y=y)]
        if action.count == 3:
            return [TripleClick(type="triple_click", x=x, y=y)]
        return [Click(type="click", x=x, y=y, button=action.button)]
    if isinstance(action, HoverElement):
        return [Move(type="move", x=x, y=y)]
    if isinstance(action, DragElement):
        if to is None:
            raise ValueError("a drag_element needs the point of its to_ref")
        return [Drag(type="drag", path=[Point(x=x, y=y), Point(x=to[0], y=to[1])])]
    if isinstance(action, TypeElement):
        steps: list[Action] = [Click(type="click", x=x, y=y), Keypress(type="keypress", keys=["ctrl", "a"]),
                               TypeText(type="type", text=action.text)]
        if action.submit:
            steps.append(Keypress(type="keypress", keys=["Return"]))
        return steps
    return [action]
