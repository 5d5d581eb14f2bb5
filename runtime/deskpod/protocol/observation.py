"""The observation a reply carries: screenshot, browser state, page text, AX tree.

Everything here is built by the daemon and read by the controller, which treats it
as untrusted (see :mod:`deskpod.client.untrusted`).
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from deskpod.protocol._base import STRICT, Sha256, TabId
from deskpod.protocol.actions import ElementRef, Point
from deskpod.protocol.apps import AppName
from deskpod.protocol.clipboard import MAX_CLIPBOARD_CHARS
from deskpod.protocol.downloads import MAX_DOWNLOADS, Download, FileChooser
from deskpod.protocol.egress import MAX_BLOCKED_PER_OBSERVATION, BlockedRequest
from deskpod.protocol.page_logs import ConsoleLog, NetworkLog
from deskpod.protocol.permissions import MAX_PERMISSION_REQUESTS, PermissionRequest
from deskpod.protocol.native import MAX_NATIVE_NODES, NativeDialog, NativeElement, NativeNode
from deskpod.protocol.page_keys import PageKeys
from deskpod.protocol.windows import MAX_WINDOWS, Window
from deskpod.protocol.limits import (
    DEFAULT_CONTENT_BYTES,
    MAX_ACTIONS_PER_REQUEST,
    MAX_AX_NODES,
    MAX_CONTENT_BYTES,
    MAX_DIALOG_CHARS,
    MAX_FRAMES,
    MAX_IMAGE_SIDE_PX,
    MAX_LABEL_CHARS,
    MAX_PAGE_TEXT_CHARS,
    MAX_SCAN_TEXT_CHARS,
    MAX_SCREENSHOT_BASE64_BYTES,
    MAX_SELECT_OPTIONS,
    MAX_SNAPSHOT_CHARS,
    MAX_TABS,
    MAX_TEXT_SOURCES,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    MIN_CONTENT_BYTES,
)

__all__ = [
    "AXNode",
    "ActionTiming",
    "AgentWindow",
    "Dialog",
    "ElementInfo",
    "FocusedElement",
    "MAX_NEAR_LABELS",
    "Observation",
    "ObserveOptions",
    "SESSION_EVENTS",
    "Screenshot",
    "SelectChoice",
    "SettleSignal",
    "TEXT_SOURCE_KINDS",
    "Tab",
    "TextSource",
    "Truncation",
    "UNREAD_PARTS",
    "Unread",
    "UnresponsivePage",
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

MAX_NEAR_LABELS = 8
"""Most labels :attr:`FocusedElement.form_labels` and :attr:`FocusedElement.near_buttons` hold."""

_Pixels = Annotated[int, Field(strict=True, ge=1, le=MAX_IMAGE_SIDE_PX)]
_Scale = Annotated[float, Field(gt=0.0, le=16384.0, allow_inf_nan=False)]
_Seconds = Annotated[float, Field(ge=0.0, le=86_400.0, allow_inf_nan=False)]

SettleSignal = Literal["frame", "damage", "animation", "network", "navigation", "dialog", "popup", "quiet_window",
                       "timeout"]
"""What ended a settle wait (``Observation.settle_signal``): the page painted the frame
after the input and nothing followed (``frame``), the screen's damage went quiet after it
(``damage``), running animations ended (``animation``), the requests the page started
finished (``network``), a navigation finished (``navigation``), a JavaScript dialog is open
(``dialog``), a window the browser opened for its own UI since the input (a ``<select>``'s
list, a date or colour picker, a context menu) has drawn (``popup``), the bounded quiet
window of the fallback (no page signal, or an endless animation: ``quiet_window``), or
``settle_timeout_s`` (``timeout``)."""
_Count = Annotated[int, Field(strict=True, ge=0)]


class ObserveOptions(BaseModel):
    """What the observation after a request should contain, and when to take it.

    Each field is documented below (the docs' reference table is made from these
    docstrings). Settling: with ``settle`` the daemon observes once the page has painted
    the frame after the input, its animations and the requests it started have finished,
    no navigation is in flight and the screen's damage is quiet; ``settle_window_s`` is the
    quiet window of the fallback, when the page gives no signal (a native window, an
    endless animation). It waits at most ``settle_timeout_s`` (the observation reports
    how long it waited, whether it settled and which signal ended the wait). Without
    it, the observation is taken at once.
    """

    model_config = ConfigDict(**STRICT, use_attribute_docstrings=True)
    screenshot: bool = True
    """Include a screenshot (:attr:`Observation.screenshot`)."""
    format: Literal["png", "jpeg", "webp"] = "png"
    """The screenshot's encoding: PNG (lossless), JPEG or WebP (lossy)."""
    quality: Annotated[int, Field(strict=True, ge=1, le=95)] = 80
    """JPEG and WebP quality, 1..95."""
    cursor: bool = False
    """Draw the pointer into the screenshot."""
    page_text: bool = False
    """Include the page's visible text (``document.body.innerText``, capped at ``max_text_chars``)."""
    max_text_chars: Annotated[int, Field(strict=True, ge=0, le=MAX_PAGE_TEXT_CHARS)] = 20_000
    """Most characters of ``page_text``."""
    accessibility: bool = False
    """Include a summary of the page's accessibility tree (at most ``max_ax_nodes`` nodes)."""
    max_ax_nodes: Annotated[int, Field(strict=True, ge=1, le=MAX_AX_NODES)] = 300
    """Most nodes of ``accessibility``, most lines of ``snapshot``."""
    element_at: Point | None = None
    """Describe the element under this model-space point (``None``: no element)."""
    text_sources: bool = False
    """Include the page's other readable text for the injection scan (:class:`TextSource`)."""
    max_scan_chars: Annotated[int, Field(strict=True, ge=0, le=MAX_SCAN_TEXT_CHARS)] = 100_000
    """Most characters of ``text_sources``, in all."""
    snapshot: bool = False
    """Include :attr:`Observation.snapshot`, the accessibility tree as text with a ``[ref=eN]`` on
    each actionable node (at most ``max_ax_nodes`` lines); taking one makes every earlier ref stale."""
    element_ref: ElementRef | None = None
    """Describe, in ``element_at``, the control an element action on this ref of the latest
    snapshot would act on (hit-tested at the centre of the ref's box, as a click there would
    be), and give that point in ``element_ref_point``; a stale ref: error ``stale_ref``."""
    max_content_bytes: Annotated[int, Field(strict=True, ge=MIN_CONTENT_BYTES, le=MAX_CONTENT_BYTES,
                                            exclude_if=lambda size: size == DEFAULT_CONTENT_BYTES)
                                 ] = DEFAULT_CONTENT_BYTES
    """Most bytes the page content of the observation takes as JSON in all: page text, accessibility
    summary, snapshot, text sources, console and network logs. The snapshot gets at most an eighth
    of it (in characters), the text sources a quarter, each log an eighth; page text and then the
    accessibility summary what is left. Each cut is flagged as its own cap's is. Left out of a
    message at its default, so a daemon from before it accepts the request."""
    console: Annotated[bool, Field(exclude_if=lambda asked: not asked)] = False
    """Include :attr:`Observation.console`, the active tab's console messages since its page loaded
    (left out of a message when ``False``, so a daemon from before it accepts the request)."""
    network: Annotated[bool, Field(exclude_if=lambda asked: not asked)] = False
    """Include :attr:`Observation.network`, the active tab's network requests since its page loaded
    (left out of a message when ``False``)."""
    windows: Annotated[bool, Field(exclude_if=lambda asked: not asked)] = False
    """Include :attr:`Observation.windows`, the desktop's top-level windows (left out of a message
    when ``False``)."""
    settle: bool = True
    """Wait for the page to settle before observing (see the class docstring); ``False``: at once."""
    settle_window_s: Annotated[float, Field(ge=0.0, le=5.0, allow_inf_nan=False)] = 0.05
    """The quiet window of the settling fallback, seconds."""
    settle_timeout_s: Annotated[float, Field(ge=0.0, le=30.0, allow_inf_nan=False)] = 3.0
    """The longest settle wait, seconds."""


class Screenshot(BaseModel):
    """An encoded screenshot and how its pixels map to the screen.

    ``width``/``height``: the image's size: the model space, unless ``fitted`` is
    ``"downscaled"``. ``screen_width``/``screen_height``: the X screen's size. An image
    point (x, y) is the screen point (``offset_x + x * scale_x``, ``offset_y + y * scale_y``).
    ``data``: base64 of the PNG, JPEG or WebP bytes, at most
    :data:`~deskpod.protocol.MAX_SCREENSHOT_BASE64_BYTES` characters (or the lower limit
    ``configure`` set, or what the client's declared message size leaves). ``sha256``: of those bytes.
    ``fitted``: ``None`` when the image is what was asked; ``"reencoded"`` when the
    asked format and quality were over the limit and the image was sent as JPEG at a
    lower quality (``format`` says which); ``"downscaled"`` when even that was over and
    the image was also scaled down: it is then smaller than the model space (its
    scale says by how much) and actions still take model-space coordinates.
    ``perceptual_hash``: a 64-bit average hash of the screen (16 hex digits: the
    screen shrunk to 8x8 grey pixels, one bit per pixel brighter than their mean),
    so nearly equal screens (a blinking caret, a ticking clock) differ in only a
    few bits; ``None`` for zoom images.
    ``masked``: how many boxes the daemon painted over secrets the page shows
    (:mod:`~deskpod.protocol.mask`); ``-1``: the page could not be read, so the whole
    image was painted over.
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
    data: Annotated[str, Field(max_length=MAX_SCREENSHOT_BASE64_BYTES)]
    perceptual_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")] | None = None
    fitted: Literal["reencoded", "downscaled"] | None = None
    masked: Annotated[int, Field(strict=True, ge=-1, le=4096)] = 0


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
    button (what Enter would press), else ``None``. ``in_form``: it is inside a form
    (with or without a submit button). ``form_labels``: that form's own labels, what a
    submission by Enter is judged by when it has no button: its ``aria-label``, ``title``,
    ``name``, ``id``, ``<legend>``, the path of its ``action`` URL and its first heading,
    at most :data:`MAX_NEAR_LABELS`. ``near_buttons``: the labels of the buttons (``button``,
    ``role=button``, ``input[type=submit]``) in the nearest ancestor holding one, at most
    :data:`MAX_NEAR_LABELS` (a chat box's "Send" beside its text field). The element is the
    deepest focused one: through open shadow roots and into the focused frame; ``frame``:
    the URL of the frame holding it (``None``: the top document). The last three are left
    out of a message when empty, so a peer from before them accepts it. Page content:
    untrusted.
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
    frame: _Url | None = None
    in_form: Annotated[bool, Field(exclude_if=lambda inside: not inside)] = False
    form_labels: Annotated[list[_Label], Field(max_length=MAX_NEAR_LABELS, exclude_if=lambda labels: not labels)] = []
    near_buttons: Annotated[list[_Label], Field(max_length=MAX_NEAR_LABELS,
                                                exclude_if=lambda labels: not labels)] = []


class Dialog(BaseModel):
    """A JavaScript dialog open in a tab: ``type`` ``alert``, ``confirm``, ``prompt`` or
    ``beforeunload``; ``message`` its text; ``default_prompt``: a ``prompt``'s default
    answer (else ``None``); ``tab_id``: the tab it belongs to (:attr:`Tab.id`), which may
    be a background tab or a popup; ``url``: that tab's page. Answered by the
    ``dialog_accept`` and ``dialog_dismiss`` actions (a key press works too). While it
    is open the tab's scripts are blocked, so its page text, focus, element and
    accessibility tree cannot be read (see :class:`Unread`). Page content, untrusted."""

    model_config = STRICT
    type: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)]
    message: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)]
    default_prompt: Annotated[str, Field(max_length=MAX_DIALOG_CHARS)] | None = None
    tab_id: TabId | None = None
    url: _Url | None = None


class UnresponsivePage(BaseModel):
    """A tab whose page does not answer: its renderer is stuck in a script that never
    ends (``while (true) {}``). ``unresponsive_s``: seconds since the first command the
    daemon sent it went unanswered. The daemon reads nothing more of that page (its
    parts are in ``unread`` with reason ``timeout``) and a ``navigate`` there fails at
    once (``navigation_failed``, ``detail["reason"]`` ``"page_unresponsive"``); closing
    the tab (``ctrl+w``) recovers, and other tabs, the screen and input stay usable."""

    model_config = STRICT
    tab_id: TabId
    url: _Url | None = None
    unresponsive_s: _Seconds


UnreadPart = Literal["tabs", "page_text", "focused", "element_at", "accessibility", "text_sources", "snapshot",
                     "console", "network", "native"]
UNREAD_PARTS: tuple[str, ...] = get_args(UnreadPart)
"""The parts of an observation that are read one by one, from the browser but ``native`` (the
desktop applications' native controls, reason ``app_error``); ``tabs`` also stands for ``url``
and ``title``."""


class Unread(BaseModel):
    """A part of the observation the daemon could not read: ``part`` one of
    :data:`UNREAD_PARTS`; ``reason`` ``"dialog_open"`` (a JavaScript dialog blocks the
    tab's scripts: answer it first), ``"timeout"`` (the browser did not answer in time),
    ``"browser_error"`` (it answered an error, or is not running), ``"too_large"`` (the page's
    accessibility tree is too large to ask the browser for: no ``snapshot``; ``accessibility``
    then lists the page's controls read from the DOM) or ``"pdf"`` (the page, or
    a frame of it, is a PDF document, shown by the browser's PDF viewer as pictures: its text
    is not in ``page_text``, which names it under a ``[frame URL: PDF, text not read]`` line,
    and its URL is in ``unread_frames``; read it from the screenshot, or download it). That
    part is ``None`` in the observation (``page_text`` for ``"pdf"``: the rest of the page's
    text); the other parts were read independently."""

    model_config = STRICT
    part: UnreadPart
    reason: Literal["dialog_open", "timeout", "browser_error", "too_large", "pdf", "app_error"]


class SelectChoice(BaseModel):
    """An option of a ``<select>``: its ``value`` attribute and its visible ``label`` (its
    ``label`` attribute, else its text), each cut to 200 characters. Page content: untrusted."""

    model_config = STRICT
    value: _Label
    label: _Label


class ElementInfo(BaseModel):
    """An element of the page, with its box mapped into model-space pixels.

    ``box``: [x0, y0, x1, y1] in the model space (from CSS pixels through the
    page's zoom, device scale factor and the viewport's place on the screen);
    ``None`` when the element has no box on screen. ``text``: its visible text, at
    most 200 characters. The point is hit-tested as a click would be: through frames
    (out-of-process ones included) and shadow roots. When it is inside a control (link,
    button, input, select, textarea, label, summary, an element with a widget role,
    with a click listener or that sets ``cursor: pointer``), the element described is
    that control, the one a click activates. ``role``/``name``: its computed role and
    accessible name from the accessibility tree (``alt``, ``aria-*``, labels and CSS
    generated content count); where the tree has none, its ``role`` attribute and its
    ``aria-label``, ``alt``, ``title``, ``placeholder`` or ``name``.
    ``clickable``: it, or an element between it and the point, has a click listener
    or the pointer cursor (what makes a ``<div>`` a button to its user). ``frame``: the URL of the frame holding it (``None``: the top document).
    ``frame_unreadable``: the point is in a frame whose content could not be read (its
    process did not answer, or it is nested too deep); the element described, if any, is
    the frame's owner. ``input_type``: the
    ``type`` of an ``<input>`` (``"file"``, ``"submit"``, ``"password"``...), else
    ``None``. ``download``: a link with a ``download`` attribute. ``form_action``:
    for a control inside a form, the URL the form submits to. ``options``: a ``<select>``'s
    options in document order, the first :data:`~deskpod.protocol.MAX_SELECT_OPTIONS`
    (``None``: not a select); the controller turns a ``select_option`` by value into the
    labels of the options it chooses from them. Page content: untrusted.
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
    clickable: bool = False
    frame: _Url | None = None
    frame_unreadable: bool = False
    options: Annotated[list[SelectChoice] | None, Field(max_length=MAX_SELECT_OPTIONS,
                                                        exclude_if=lambda options: options is None)] = None
    """Left out of a message when ``None``, so a peer from before it accepts the message."""


class AgentWindow(BaseModel):
    """A window of the agent's own programs: an X client of the agent's zone, come in through a
    display grant (``display: true``). What is on top of the screen there is that program's,
    not the browser's: a click there goes to it, and so do keys while it has the focus.

    ``app``: the class part of its ``WM_CLASS``; ``title``: its ``_NET_WM_NAME`` or ``WM_NAME``;
    either ``None`` when unset (the program's own words: untrusted). ``box``: [x0, y0, x1, y1]
    in the model space (a window manager's frame around it excluded). ``source``: how its
    program came in, as the daemon's X gate knows it (not the program's words): ``"command"``,
    an agent's command run with ``display: true``; else the desktop application ``open_app``
    started (:data:`~deskpod.protocol.apps.APPS`: ``"terminal"``, ``"editor"``...), or a program
    run from it.
    """

    model_config = STRICT
    app: _Label | None = None
    title: _Label | None = None
    box: Annotated[list[Annotated[int, Field(strict=True, ge=-(1 << 20), le=1 << 20)]],
                   Field(min_length=4, max_length=4)]
    source: Literal["command"] | AppName = "command"


TextSourceKind = Literal["visual_text", "attributes", "generated_content", "canvas", "frames", "shadow",
                         "accessibility", "native"]
TEXT_SOURCE_KINDS: tuple[str, ...] = get_args(TextSourceKind)
"""What a :class:`TextSource` may be: the page's text in visual order (top to bottom, left
to right, as laid out, whatever the DOM order); ``alt``, ``title``, ``placeholder``,
``value`` of buttons and every ``aria-*`` text attribute; CSS ``::before``/``::after``
``content``; text drawn with ``fillText``/``strokeText`` on a canvas; the visible text
of same-origin frames; of open shadow roots; accessible names, values and descriptions
of the accessibility tree; the names and text of the focused desktop application's controls
(:attr:`Observation.native_accessibility`)."""


class TextSource(BaseModel):
    """Text of the page a reader can see or an agent can read, other than ``page_text``,
    for the controller's injection scan. ``source``: one of :data:`TEXT_SOURCE_KINDS`.
    ``text``: the pieces, one a line. Page content: untrusted."""

    model_config = STRICT
    source: TextSourceKind
    text: Annotated[str, Field(max_length=MAX_SCAN_TEXT_CHARS)]


class AXNode(BaseModel):
    """One node of the accessibility-tree summary: ``depth`` from the root, ARIA role, name.
    A frame's nodes follow its ``Iframe`` node, one level deeper, with ``frame`` the
    frame's URL (``None``: the top document)."""

    model_config = STRICT
    depth: Annotated[int, Field(strict=True, ge=0, le=100_000)]
    role: _Label
    name: _Label | None = None
    value: _Label | None = None
    focused: bool = False
    frame: _Url | None = None


class Truncation(BaseModel):
    """What the daemon cut from an observation to keep it within the limits.

    ``page_text``: the page text is cut (at ``max_text_chars``, at
    :data:`~deskpod.protocol.MAX_PAGE_TEXT_BYTES` UTF-8 bytes, or to fit the client's
    message size); ``page_text_chars``: how many characters the page's text had (as
    far as the daemon read it: ``max_text_chars`` plus one at most). ``accessibility``:
    the accessibility summary is incomplete; ``accessibility_nodes``: how many nodes
    the daemon found (``None`` when it could not read the tree);
    ``accessibility_reason``: ``"max_nodes"`` (more nodes than ``max_ax_nodes``),
    ``"bytes"`` (over :data:`~deskpod.protocol.MAX_AX_BYTES` or the client's message
    size), ``"too_large"`` (the tree is too large to ask the browser for: the nodes
    listed are the page's controls, headings and landmarks read from the DOM, with the
    roles and names the page declares; ``accessibility_nodes`` counts those) or ``"timeout"`` (the browser did
    not answer in time). ``labels``: this many accessibility names or values were
    clipped to :data:`~deskpod.protocol.MAX_AX_NAME_CHARS` characters. ``snapshot``: the
    element snapshot is cut (at ``max_ax_nodes`` lines, :data:`~deskpod.protocol.MAX_SNAPSHOT_CHARS`
    or the client's message size); its refs still hold.
    """

    model_config = STRICT
    page_text: bool = False
    page_text_chars: _Count | None = None
    accessibility: bool = False
    accessibility_nodes: _Count | None = None
    accessibility_reason: Literal["max_nodes", "bytes", "too_large", "timeout"] | None = None
    labels: _Count = 0
    snapshot: bool = False


def _session_event(name: str) -> str:
    if name not in SESSION_EVENTS:
        raise ValueError(f"not one of the session events {sorted(SESSION_EVENTS)}")
    return name


class Observation(BaseModel):
    """The sandbox's state after a request. Everything page-derived is untrusted data.

    Each field is documented below (the docs' reference table is made from these
    docstrings); what a request asks for is its :class:`ObserveOptions`.
    """

    model_config = ConfigDict(**STRICT, use_attribute_docstrings=True)
    screenshot: Screenshot | None = None
    """The screen, taken after the batch (and after settling, see :class:`ObserveOptions`);
    ``None`` when not asked for."""
    settled: bool | None = None
    """The screen was stable and no navigation was in flight (``None``: no settling asked)."""
    settle_s: _Seconds = 0.0
    """Seconds spent waiting for the page to settle."""
    settle_signal: SettleSignal | None = None
    """The signal that ended the settle wait (:data:`SettleSignal`; ``None`` without settling)."""
    url: _Url | None = None
    """The active tab's URL, read through CDP by the daemon (``None``: the browser could not be asked)."""
    title: _Title | None = None
    """The active tab's title (``None``: the browser could not be asked)."""
    tabs: Annotated[list[Tab], Field(max_length=MAX_TABS)] | None = None
    """Every open tab, the active one marked (``None``: the browser could not be asked)."""
    focused: FocusedElement | None = None
    """The element that has the keyboard focus (``None``: none, or the browser could not be asked)."""
    page_keys: Annotated[PageKeys | None, Field(exclude_if=lambda keys: keys is None)] = None
    """Read with :attr:`focused`: the page's declared key shortcuts and, when nothing editable has the
    focus, where it listens for keys (:class:`~deskpod.protocol.PageKeys`; ``None``: not read, and
    left out of a message then)."""
    dialog: Dialog | None = None
    """The JavaScript dialog of the active tab, else the newest one open in any tab (``None``: none)."""
    dialogs: Annotated[list[Dialog], Field(max_length=MAX_TABS)] = []
    """Every open JavaScript dialog, the active tab's first."""
    unresponsive: Annotated[list[UnresponsivePage], Field(max_length=MAX_TABS, exclude_if=lambda pages: not pages)] = []
    """The tabs whose page does not answer (:class:`UnresponsivePage`), found 2.5 s after the
    first command it left unanswered, the longest first (empty: none; left out of a message then,
    so a peer from before it accepts the message)."""
    unread: Annotated[list[Unread], Field(max_length=len(UNREAD_PARTS))] = []
    """The parts asked for that could not be read, and why (each part is read on its own)."""
    page_text: Annotated[str, Field(max_length=MAX_PAGE_TEXT_CHARS)] | None = None
    """The page's visible text, when asked: each frame's text after the top document's, under a
    line ``[frame URL]`` (``[frame URL: not readable]`` for one that could not be read)."""
    element_at: ElementInfo | None = None
    """The element under :attr:`ObserveOptions.element_at` (or the one ``element_ref`` names)."""
    window_at: Annotated[AgentWindow | None, Field(exclude_if=lambda window: window is None)] = None
    """The agent's window on top at that point, over the browser: a click there goes to it, not to
    ``element_at`` (``None``: the browser's or the desktop's own window is on top; left out of a
    message then, so a peer from before it accepts the message)."""
    focus_window: Annotated[AgentWindow | None, Field(exclude_if=lambda window: window is None)] = None
    """The agent's window that has the keyboard focus: keys go to it, not to ``focused`` (``None``:
    a window of the sandbox's own has it; left out of a message then)."""
    native_at: Annotated[NativeElement | None, Field(exclude_if=lambda element: element is None)] = None
    """The native control at that point when ``window_at`` is a desktop application's
    (:mod:`deskpod.protocol.native`; ``None``: none read; left out of a message then)."""
    native_focused: Annotated[NativeElement | None, Field(exclude_if=lambda element: element is None)] = None
    """The native control with the keyboard focus in ``focus_window``, a desktop application's."""
    native_dialog: Annotated[NativeDialog | None, Field(exclude_if=lambda dialog: dialog is None)] = None
    """``focus_window`` when it is a desktop application's dialog (message box, prompt, file chooser)."""
    native_accessibility: Annotated[list[NativeNode] | None, Field(max_length=MAX_NATIVE_NODES,
                                                                   exclude_if=lambda nodes: nodes is None)] = None
    """With ``accessibility``, the tree of ``focus_window`` when it is a desktop application's."""
    windows: Annotated[list[Window] | None, Field(max_length=MAX_WINDOWS, exclude_if=lambda listed: listed is None)
                       ] = None
    """When asked (:attr:`ObserveOptions.windows`), the desktop's top-level windows, the frontmost first
    (:class:`~deskpod.protocol.Window`: application, title, box, focus, modal, zone), at most
    :data:`~deskpod.protocol.MAX_WINDOWS`; their ids are what window actions name (``None``: not asked,
    or the window manager could not be asked; left out of a message then). Titles: untrusted."""
    accessibility: Annotated[list[AXNode], Field(max_length=MAX_AX_NODES)] | None = None
    """A summary of the page's accessibility tree, when asked."""
    text_sources: Annotated[list[TextSource], Field(max_length=MAX_TEXT_SOURCES)] | None = None
    """The page's other readable text when asked (``None`` when not asked or the page could not be read)."""
    unread_frames: Annotated[list[_Url], Field(max_length=MAX_FRAMES)] = []
    """The URLs of frames whose text or accessibility tree could not be read (at most
    :data:`~deskpod.protocol.MAX_FRAMES`)."""
    cursor: Point | None = None
    """The pointer's position in the model space, after a ``cursor_position`` action."""
    zoom: Screenshot | None = None
    """The image of a ``zoom`` action (screen resolution; its scale maps it back to the screen)."""
    clipboard: Annotated[str | None, Field(max_length=MAX_CLIPBOARD_CHARS, exclude_if=lambda text: text is None)] = None
    """The clipboard's text, after a ``clipboard_read`` action (:mod:`deskpod.protocol.clipboard`;
    ``None``: not read, and left out of a message then). May hold secrets: masked and scrubbed
    like every text here."""
    events: Annotated[list[Annotated[str, AfterValidator(_session_event)]], Field(max_length=64)] = []
    """What the daemon noticed, e.g. ``"renderer_crashed"``, ``"browser_restarted"``,
    ``"display_restarted"`` (the closed list is :data:`SESSION_EVENTS`)."""
    blocked: Annotated[list[BlockedRequest], Field(max_length=MAX_BLOCKED_PER_OBSERVATION)] = []
    """Requests the browser's egress interception refused since the last observation
    (:mod:`deskpod.protocol.egress`)."""
    timings: Annotated[list[ActionTiming], Field(max_length=MAX_ACTIONS_PER_REQUEST)] = []
    """One entry per executed action."""
    observe_s: _Seconds = 0.0
    """Seconds spent observing (settle, capture, encode, CDP)."""
    capture_s: Annotated[_Seconds | None, Field(exclude_if=lambda seconds: seconds is None)] = None
    """Seconds of :attr:`observe_s` spent capturing and encoding the screenshot, after settling (``None``:
    none taken, or a daemon from before it; left out of a message then): the traces' ``capture`` phase."""
    downloads: Annotated[list[Download], Field(max_length=MAX_DOWNLOADS)] = []
    """Every download that began, progressed or ended since the previous observation, and every
    one still in progress (:class:`~deskpod.protocol.Download`)."""
    file_chooser: FileChooser | None = None
    """A file chooser the active tab opened and no ``set_files`` answered (``None``: none)."""
    permission_requests: Annotated[list[PermissionRequest], Field(max_length=MAX_PERMISSION_REQUESTS,
                                                                  exclude_if=lambda asked: not asked)] = []
    """The permissions pages in the active tab asked for since the last observation, each with
    the answer it got at once (no prompt is ever shown; :mod:`deskpod.protocol.permissions`).
    Left out of a message when empty."""
    truncated: Truncation | None = None
    """What was cut to stay within the limits (:class:`Truncation`); ``None`` when nothing was."""
    snapshot: Annotated[str, Field(max_length=MAX_SNAPSHOT_CHARS)] | None = None
    """When asked (:attr:`ObserveOptions.snapshot`), the page's accessibility tree as text in
    playwright-mcp's style, one node a line, indented two spaces per level: ``- role "name"
    [ref=eN]`` (``[ref=eN]`` on actionable nodes only, the daemon's own numbering: names are
    quoted with JSON escapes, so page text cannot end a name and forge a ref), ``[frame URL]``
    nodes for frames. Page content: untrusted."""
    element_ref_point: Point | None = None
    """The model-space point an element action on :attr:`ObserveOptions.element_ref` lands on
    (the centre of the element's box)."""
    console: Annotated[ConsoleLog | None, Field(exclude_if=lambda log: log is None)] = None
    """When asked (:attr:`ObserveOptions.console`), the active tab's console messages since its page
    loaded, the newest kept (:class:`~deskpod.protocol.ConsoleLog`); ``None``: not asked, or not
    read (see ``unread``). Page content: untrusted."""
    network: Annotated[NetworkLog | None, Field(exclude_if=lambda log: log is None)] = None
    """When asked (:attr:`ObserveOptions.network`), the active tab's network requests since its page
    loaded, the newest kept (:class:`~deskpod.protocol.NetworkLog`); ``None``: not asked, or not
    read (see ``unread``). Page content: untrusted."""
