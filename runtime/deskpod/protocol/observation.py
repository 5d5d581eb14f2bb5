"""The observation a reply carries: screenshot, browser state, page text, AX tree.

Everything here is built by the daemon and read by the controller, which treats it
as untrusted (see :mod:`deskpod.untrusted`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from deskpod.protocol._base import STRICT, Sha256
from deskpod.protocol.actions import Point
from deskpod.protocol.egress import MAX_BLOCKED_PER_OBSERVATION, BlockedRequest
from deskpod.protocol.limits import (
    MAX_ACTIONS_PER_REQUEST,
    MAX_AX_NODES,
    MAX_DIALOG_CHARS,
    MAX_LABEL_CHARS,
    MAX_PAGE_TEXT_CHARS,
    MAX_SCREENSHOT_BYTES,
    MAX_TABS,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
)

__all__ = [
    "AXNode",
    "ActionTiming",
    "Dialog",
    "ElementInfo",
    "FocusedElement",
    "Observation",
    "ObserveOptions",
    "SESSION_EVENTS",
    "Screenshot",
    "Tab",
]

SESSION_EVENTS = frozenset({"renderer_crashed", "browser_restarted", "display_restarted", "window_manager_restarted"})
"""What :attr:`Observation.events` may report: a renderer crashed; Chromium exited and
was started again (its pages are gone); the X server died and the display, the
window manager and Chromium were started again; the window manager was restarted."""

# which treats it as untrusted: every string has a length cap, every hash a pattern,
# every list a count cap, and the controller's parser refuses a reply beyond them
# (:class:`~deskpod.errors.BadReplyError`). The daemon cuts page-derived strings to
# these caps before it builds a reply.

# A browser's URLs never hold a raw control character (the URL standard percent-encodes
# them), so a reply's URL may not either: it may be printed on a terminal.
_Url = Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
_Title = Annotated[str, Field(max_length=MAX_TITLE_CHARS)]
_Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]
_Pixels = Annotated[int, Field(strict=True, ge=1, le=16384)]
_Scale = Annotated[float, Field(gt=0.0, le=16384.0, allow_inf_nan=False)]
_Seconds = Annotated[float, Field(ge=0.0, le=86_400.0, allow_inf_nan=False)]
_Count = Annotated[int, Field(strict=True, ge=0)]


class ObserveOptions(BaseModel):
    """What the observation after a request should contain, and when to take it.

    ``screenshot``: include a screenshot. ``format``/``quality``: PNG (lossless),
    JPEG or WebP (lossy, quality 1..95). ``cursor``: draw the pointer into the
    screenshot. ``page_text``: include the page's visible text
    (``document.body.innerText``, capped at ``max_text_chars``).
    ``accessibility``: include a summary of the page's accessibility tree (at most
    ``max_ax_nodes`` nodes). ``element_at``: describe the element under this
    model-space point.

    Settling: with ``settle`` the daemon observes once the screen has not changed
    for ``settle_window_s`` and the browser has no navigation in flight, waiting at
    most ``settle_timeout_s`` (the observation reports how long it waited and
    whether it settled). Without it, the observation is taken at once.
    """

    model_config = STRICT
    screenshot: bool = True
    format: Literal["png", "jpeg", "webp"] = "png"
    quality: Annotated[int, Field(strict=True, ge=1, le=95)] = 80
    cursor: bool = False
    page_text: bool = False
    max_text_chars: Annotated[int, Field(strict=True, ge=0, le=MAX_PAGE_TEXT_CHARS)] = 20_000
    accessibility: bool = False
    max_ax_nodes: Annotated[int, Field(strict=True, ge=1, le=MAX_AX_NODES)] = 300
    element_at: Point | None = None
    settle: bool = True
    settle_window_s: Annotated[float, Field(ge=0.0, le=5.0, allow_inf_nan=False)] = 0.05
    settle_timeout_s: Annotated[float, Field(ge=0.0, le=30.0, allow_inf_nan=False)] = 3.0



class Screenshot(BaseModel):
    """An encoded screenshot and how its pixels map to the screen.

    ``width``/``height``: the image's size (the model space). ``screen_width``/
    ``screen_height``: the X screen's size. A model-space point (x, y) is the
    screen point (``offset_x + x * scale_x``, ``offset_y + y * scale_y``).
    ``data``: base64 of the PNG or JPEG bytes. ``sha256``: of those bytes.
    ``perceptual_hash``: a 64-bit average hash of the screen (16 hex digits: the
    screen shrunk to 8x8 grey pixels, one bit per pixel brighter than their mean),
    so nearly equal screens (a blinking caret, a ticking clock) differ in only a
    few bits; ``None`` for zoom images.
    """

    model_config = STRICT
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    format: Literal["png", "jpeg", "webp"]
    width: _Pixels
    height: _Pixels
    screen_width: _Pixels
    screen_height: _Pixels
    scale_x: _Scale
    scale_y: _Scale
    offset_x: Annotated[int, Field(strict=True, ge=0, le=16384)] = 0
    offset_y: Annotated[int, Field(strict=True, ge=0, le=16384)] = 0
    sha256: Sha256
    data: Annotated[str, Field(max_length=4 * (MAX_SCREENSHOT_BYTES // 3 + 1))]
    perceptual_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")] | None = None


class ActionTiming(BaseModel):
    """How long one action took to execute, seconds."""

    model_config = STRICT
    index: Annotated[int, Field(strict=True, ge=0, lt=MAX_ACTIONS_PER_REQUEST)]
    type: Annotated[str, Field(max_length=32)]
    duration_s: _Seconds


class Tab(BaseModel):
    """One browser tab. ``active``: the tab actions and observations apply to."""

    model_config = STRICT
    id: Annotated[str, Field(max_length=128)]
    url: _Url
    title: _Title
    active: bool


class FocusedElement(BaseModel):
    """The element with the keyboard focus in the active tab.

    ``role``: ARIA role (explicit or implied by the tag). ``name``: accessible name
    (aria-label, label, placeholder or title; for a button or link without
    those, its text; at most 200 characters).
    ``input_type``: an ``<input>``'s type. ``is_password``: a password field, so
    typed text must be treated as secret. ``editable``: text can be typed into it.
    ``autocomplete``: its ``autocomplete`` attribute (e.g. ``"cc-number"``).
    ``form_submit``: when it is inside a form, the text of the form's submit
    button (what Enter would press), else ``None``. Page content: untrusted.
    """

    model_config = STRICT
    tag: _Label
    role: _Label | None = None
    name: _Label | None = None
    input_type: _Label | None = None
    is_password: bool = False
    editable: bool = False
    autocomplete: _Label | None = None
    form_submit: _Label | None = None


class Dialog(BaseModel):
    """A JavaScript dialog open in the active tab (``alert``, ``confirm``, ``prompt``,
    ``beforeunload``); page content, untrusted."""

    model_config = STRICT
    type: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)]
    message: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)]


class ElementInfo(BaseModel):
    """An element of the page, with its box mapped into model-space pixels.

    ``box``: [x0, y0, x1, y1] in the model space (from CSS pixels through the
    page's zoom, device scale factor and the viewport's place on the screen);
    ``None`` when the element has no box on screen. ``text``: its visible text, at
    most 200 characters. When the point is inside a control (link, button, input,
    select, textarea, label, summary or an element with a widget role), the element
    described is that control, the one a click activates. ``input_type``: the
    ``type`` of an ``<input>`` (``"file"``, ``"submit"``, ``"password"``...), else
    ``None``. ``download``: a link with a ``download`` attribute. ``form_action``:
    for a control inside a form, the URL the form submits to. Page content: untrusted.
    """

    model_config = STRICT
    tag: _Label
    role: _Label | None = None
    name: _Label | None = None
    text: _Label | None = None
    href: _Url | None = None
    box: Annotated[list[Annotated[int, Field(strict=True, ge=-(1 << 20), le=1 << 20)]],
                   Field(min_length=4, max_length=4)] | None = None
    input_type: _Label | None = None
    download: bool = False
    form_action: _Url | None = None


class AXNode(BaseModel):
    """One node of the accessibility-tree summary: ``depth`` from the root, ARIA role, name."""

    model_config = STRICT
    depth: Annotated[int, Field(strict=True, ge=0, le=100_000)]
    role: _Label
    name: _Label | None = None
    value: _Label | None = None
    focused: bool = False


def _session_event(name: str) -> str:
    if name not in SESSION_EVENTS:
        raise ValueError(f"not one of the session events {sorted(SESSION_EVENTS)}")
    return name


class Observation(BaseModel):
    """The sandbox's state after a request. Everything page-derived is untrusted data.

    ``screenshot``: taken after the batch (and after settling, see
    :class:`ObserveOptions`). ``settled``: the screen was stable and no navigation
    was in flight; ``settle_s``: seconds spent waiting for that.
    ``url``/``title``/``tabs``/``focused``/``dialog``: of the browser, read through
    CDP by the daemon (``None`` when the browser could not be asked).
    ``cursor``: pointer position in the model space, after a ``cursor_position``
    action. ``zoom``: the image of a ``zoom`` action (screen resolution; its scale
    maps it back to the screen). ``events``: what the daemon noticed, e.g.
    ``"renderer_crashed"``, ``"browser_restarted"``, ``"display_restarted"`` (the
    closed list is :data:`SESSION_EVENTS`). ``blocked``: requests the browser's egress
    interception refused since the last observation (:mod:`deskpod.protocol.egress`). ``timings``: one entry per executed action.
    ``observe_s``: seconds spent observing (settle, capture, encode, CDP).
    """

    model_config = STRICT
    screenshot: Screenshot | None = None
    settled: bool | None = None
    settle_s: _Seconds = 0.0
    url: _Url | None = None
    title: _Title | None = None
    tabs: Annotated[list[Tab], Field(max_length=MAX_TABS)] | None = None
    focused: FocusedElement | None = None
    dialog: Dialog | None = None
    page_text: Annotated[str, Field(max_length=MAX_PAGE_TEXT_CHARS)] | None = None
    element_at: ElementInfo | None = None
    accessibility: Annotated[list[AXNode], Field(max_length=MAX_AX_NODES)] | None = None
    cursor: Point | None = None
    zoom: Screenshot | None = None
    events: Annotated[list[Annotated[str, AfterValidator(_session_event)]], Field(max_length=64)] = []
    blocked: Annotated[list[BlockedRequest], Field(max_length=MAX_BLOCKED_PER_OBSERVATION)] = []
    timings: Annotated[list[ActionTiming], Field(max_length=MAX_ACTIONS_PER_REQUEST)] = []
    observe_s: _Seconds = 0.0
