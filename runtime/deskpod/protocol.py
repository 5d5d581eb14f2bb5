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
- :class:`ResetRequest` ``{"type": "reset", "id", "start_url", "token_sha256"}``:
  puts the sandbox back to its baseline in place and rotates the control token
  (see "Reset and snapshots" below).
- Workspace tools for code agents (``seed_workspace``, ``list_dir``, ``read_file``,
  ``write_file``, ``edit_file``, ``apply_patch``, ``exec``, ``run_tests``,
  ``workspace_diff``): see the section "Workspace tools (code agents)" below; the
  reply's :attr:`Result.workspace` carries their output.

Coordinates: every ``x``/``y`` in an action is an int pixel from the top-left of
the *model space*: the size of the screenshots this session receives. Unless a
session declares ``model_size``, the model space equals the screen. The daemon
checks coordinates against the model space and maps them to screen pixels with
:class:`CoordinateMap`; every :class:`Screenshot` states both sizes, the scale and
the offset, so a client can map back. Durations are float seconds.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import PydanticSerializationError

from deskpod.errors import (
    BadReplyError,
    printable,
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
    "MAX_SEED_ARCHIVE_BYTES",
    "MAX_PATH_CHARS",
    "MAX_LIST_ENTRIES",
    "DEFAULT_READ_BYTES",
    "MAX_READ_BYTES",
    "MAX_EXEC_TIMEOUT_S",
    "MAX_EXEC_OUTPUT_BYTES",
    "MAX_REPLY_PATHS",
    "WorkspacePath",
    "SeedWorkspaceRequest",
    "ListDirRequest",
    "ReadFileRequest",
    "WriteFileRequest",
    "EditFileRequest",
    "ApplyPatchRequest",
    "ExecRequest",
    "RunTestsRequest",
    "WorkspaceDiffRequest",
    "WorkspaceRequest",
    "WORKSPACE_REQUEST_TYPES",
    "WorkspaceSeeded",
    "DirEntry",
    "DirListing",
    "FileContent",
    "FileWritten",
    "PatchApplied",
    "ExecOutput",
    "RunTestsOutput",
    "ChangedFile",
    "WorkspaceDiff",
    "WorkspaceOutput",
    "parse_server_message",
    "action_points",
    "fit_within",
    "HeldKeys",
    "TripleClick",
    "MouseDown",
    "MouseUp",
    "HoldKey",
    "CursorPosition",
    "Zoom",
    "WaitFor",
    "Tab",
    "FocusedElement",
    "Dialog",
    "ElementInfo",
    "AXNode",
    "MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_PATH",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_MANIFEST_NAME",
    "SNAPSHOT_SHA256_HEADER",
    "SESSION_EVENTS",
    "ResetRequest",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotRestored",
    "RestoreQuery",
    "request_id",
    "MAX_URL_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_TABS",
    "MAX_DIALOG_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_PAGE_TEXT_CHARS",
    "MAX_AX_NODES",
    "MAX_SCREENSHOT_BYTES",
    "MAX_SCREENSHOT_PIXELS",
    "find_lone_surrogate",
    "scrub_surrogates",
    "scrub_json",
    "encode_message",
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

MAX_URL_CHARS = 8192
"""Longest URL a reply carries (an observation's URL, a tab's, a link's ``href``, a
form's action); the daemon cuts longer ones, the controller refuses a reply with one."""

MAX_TITLE_CHARS = 2000
"""Longest page or tab title a reply carries (cut by the daemon, refused beyond by the controller)."""

MAX_TABS = 100
"""Most tabs an observation lists (the active one first); the daemon lists the first ones."""

MAX_DIALOG_CHARS = 2000
"""Longest JavaScript dialog type or message a reply carries."""

MAX_LABEL_CHARS = 2000
"""Longest element description string a reply carries (tag, role, name, text, input
type, autocomplete, an accessibility node's role, name or value)."""

MAX_PAGE_TEXT_CHARS = 1_000_000
"""Longest page text a reply carries (and the largest ``max_text_chars`` a request may ask)."""

MAX_AX_NODES = 5000
"""Most accessibility-tree nodes a reply carries (and the largest ``max_ax_nodes``)."""

MAX_SCREENSHOT_BYTES = 32 * 1_048_576
"""Largest encoded screenshot (PNG, JPEG or WebP bytes, before base64) a reply may carry."""

MAX_SCREENSHOT_PIXELS = 7680 * 4320
"""Most pixels (width × height) a screenshot may have: an 8K screen. The controller
checks an image's declared size against it before decoding anything (decompression bombs)."""

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


HeldKeys = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=8)]
"""Keys (names as in :class:`Keypress`) held down around a click or scroll, e.g. ``["shift"]``."""


class _PointerAction(BaseModel):
    """A pointer action at (x, y), model space; both ``None``: where the pointer is now."""

    model_config = _STRICT
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
    """Move to (x, y) and turn the wheel, with ``hold_keys`` held.

    ``scroll_y`` > 0 scrolls down, < 0 up; ``scroll_x`` > 0 right, < 0 left. Both
    are counts of wheel notches, never pixels, and are never scaled (case C-05).
    """

    model_config = _STRICT
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


class HoldKey(BaseModel):
    """Hold ``keys`` down (one chord) for ``seconds``, then release them in reverse order."""

    model_config = _STRICT
    type: Literal["hold_key"]
    keys: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1, max_length=16)]
    seconds: Annotated[float, Field(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)]


class TakeScreenshot(BaseModel):
    """Take a screenshot now; the reply's observation carries the last one taken."""

    model_config = _STRICT
    type: Literal["screenshot"]


class CursorPosition(BaseModel):
    """Report the pointer position (model space) in :attr:`Observation.cursor`."""

    model_config = _STRICT
    type: Literal["cursor_position"]


class Zoom(BaseModel):
    """Capture the model-space rectangle ``region`` = [x0, y0, x1, y1] (x1, y1 exclusive)
    at the screen's full resolution into :attr:`Observation.zoom`."""

    model_config = _STRICT
    type: Literal["zoom"]
    region: Annotated[list[Coordinate], Field(min_length=4, max_length=4)]

    @model_validator(mode="after")
    def _ordered(self) -> Zoom:
        x0, y0, x1, y1 = self.region
        if not (x1 > x0 and y1 > y0):
            raise ValueError("region must be [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
        return self


class WaitFor(BaseModel):
    """Wait until a condition holds in the environment, checked by the daemon (seed 002 §6).

    Exactly one condition: ``url_matches`` (a regular expression searched in the
    active tab's URL), ``text_present`` (a substring of the page's visible text), or
    ``screen_changed`` (the screen differs from the frame at the start of this
    action). Not met within ``timeout_s`` seconds: error ``timeout``.
    """

    model_config = _STRICT
    type: Literal["wait_for"]
    url_matches: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    text_present: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    screen_changed: Literal[True] | None = None
    timeout_s: Annotated[float, Field(gt=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 10.0

    @model_validator(mode="after")
    def _one_condition(self) -> WaitFor:
        given = [c for c in (self.url_matches, self.text_present, self.screen_changed) if c is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of url_matches, text_present, screen_changed")
        if self.url_matches is not None:
            try:
                re.compile(self.url_matches)
            except re.error as exc:
                raise ValueError(f"url_matches is not a valid regular expression: {exc}") from exc
        return self


Action = Annotated[
    Union[
        Click, DoubleClick, TripleClick, MouseDown, MouseUp, Move, Drag, Scroll, Keypress, HoldKey, TypeText,
        Wait, WaitFor, TakeScreenshot, CursorPosition, Zoom,
    ],
    Field(discriminator="type"),
]
"""One action; the ``type`` field selects the model."""

ACTION_TYPES: frozenset[str] = frozenset(
    {
        "click", "double_click", "triple_click", "mouse_down", "mouse_up", "move", "drag", "scroll",
        "keypress", "hold_key", "type", "wait", "wait_for", "screenshot", "cursor_position", "zoom",
    }
)

_ACTION_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)


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

    model_config = _STRICT
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
    """Declare the model space: the size of the images the model is sent.

    ``model_size``: that size exactly. ``max_dimension``: instead, the screen scaled
    down (aspect kept) so its longer side is at most this many pixels, e.g. 1280 to
    stay under a vendor's downscaling limit. Neither: the screen itself.
    """

    model_config = _STRICT
    type: Literal["configure"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    model_size: Size | None = None
    max_dimension: Annotated[int, Field(strict=True, ge=16, le=16384)] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ConfigureRequest:
        if self.model_size is not None and self.max_dimension is not None:
            raise ValueError("give model_size or max_dimension, not both")
        return self


# ---------------------------------------------------------------------------
# Workspace tools (code agents)
#
# Requests on the sandbox's workspace directory (``/workspace``): seed it from an
# archive the host sends, list, read, write, edit and patch files, run commands
# and the test command, and diff it against its seed. A path is relative to the
# workspace root (an absolute path is accepted only when it lies inside it); the
# daemon resolves it, symlinks included, and refuses anything that leads out
# (code ``path_denied``). These requests never take the X11 executor, so a GUI
# connection and a code connection work side by side; one workspace request runs
# at a time per sandbox (another one meanwhile gets ``busy``). The reply is a
# :class:`Result` whose ``workspace`` field carries the tool's output. Sizes are
# bytes, durations float seconds.
# ---------------------------------------------------------------------------

MAX_SEED_ARCHIVE_BYTES = 700_000
"""Largest seed archive (gzip'd tar, before base64): its base64 fits in one message."""

MAX_PATH_CHARS = 4096
"""Longest path a workspace request may name."""

MAX_LIST_ENTRIES = 10_000
"""Most entries one ``list_dir`` reply may carry."""

DEFAULT_READ_BYTES = 262_144
"""Default cap on the content one ``read_file`` returns (256 KiB)."""

MAX_READ_BYTES = 8 * 1_048_576
"""Largest cap a ``read_file`` may ask for (8 MiB)."""

MAX_EXEC_TIMEOUT_S = 600.0
"""Longest timeout an ``exec`` or ``run_tests`` may ask for, seconds."""

MAX_EXEC_OUTPUT_BYTES = 4 * 1_048_576
"""Largest output cap per stream an ``exec`` may ask for (4 MiB)."""

MAX_REPLY_PATHS = 100_000
"""Most paths a workspace reply may list (changed files of a diff, files of a patch)."""

_Id = Annotated[str, Field(min_length=1, max_length=128)]
WorkspacePath = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
"""A path in the workspace: relative to its root, or absolute inside it. Checked by the daemon."""
_Arg = Annotated[str, Field(max_length=131_072, pattern=r"^[^\x00]*$")]
_Argv = Annotated[list[_Arg], Field(min_length=1, max_length=1024)]
_ExecTimeout = Annotated[float, Field(gt=0.0, le=MAX_EXEC_TIMEOUT_S, allow_inf_nan=False)]
_OutputCap = Annotated[int, Field(strict=True, ge=1, le=MAX_EXEC_OUTPUT_BYTES)]
_ReplyPath = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
"""A path in a workspace reply (relative to the workspace root)."""
_GitCommit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
"""A full git commit id in a reply: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits."""


class SeedWorkspaceRequest(BaseModel):
    """Reset the workspace and unpack a host-supplied archive into it.

    ``archive``: base64 of a gzip'd tar (at most :data:`MAX_SEED_ARCHIVE_BYTES`
    before base64); it may hold a git repository (its ``.git`` folder). Only
    regular files, folders and symlinks that stay inside the workspace are
    unpacked; anything else fails the whole request. ``None``: no archive.
    ``clear``: empty the workspace first. ``git_init``: when the result is not a
    git repository, make it one and commit everything as the baseline that
    ``workspace_diff`` compares against.
    """

    model_config = _STRICT
    type: Literal["seed_workspace"]
    id: _Id
    archive: Annotated[str, Field(max_length=4 * (MAX_SEED_ARCHIVE_BYTES // 3 + 1))] | None = None
    clear: bool = True
    git_init: bool = True


class ListDirRequest(BaseModel):
    """List a folder's entries (not recursive), sorted by name, at most ``max_entries``."""

    model_config = _STRICT
    type: Literal["list_dir"]
    id: _Id
    path: WorkspacePath = "."
    max_entries: Annotated[int, Field(strict=True, ge=1, le=MAX_LIST_ENTRIES)] = 1000


class ReadFileRequest(BaseModel):
    """Read a UTF-8 text file, from line ``start_line`` (1-based).

    At most ``max_lines`` lines (``None``: no line limit) and ``max_bytes`` bytes of
    content are returned; the reply says whether more follows.
    """

    model_config = _STRICT
    type: Literal["read_file"]
    id: _Id
    path: WorkspacePath
    start_line: Annotated[int, Field(strict=True, ge=1)] = 1
    max_lines: Annotated[int, Field(strict=True, ge=1)] | None = None
    max_bytes: Annotated[int, Field(strict=True, ge=1, le=MAX_READ_BYTES)] = DEFAULT_READ_BYTES


class WriteFileRequest(BaseModel):
    """Create or replace a file with ``content`` (UTF-8); ``create_dirs``: make missing folders."""

    model_config = _STRICT
    type: Literal["write_file"]
    id: _Id
    path: WorkspacePath
    content: str
    create_dirs: bool = True


class EditFileRequest(BaseModel):
    """Replace the one occurrence of ``old_text`` in a file with ``new_text``.

    Fails (``workspace_failed``, reason ``no_match`` or ``ambiguous``) unless
    ``old_text`` occurs exactly once.
    """

    model_config = _STRICT
    type: Literal["edit_file"]
    id: _Id
    path: WorkspacePath
    old_text: Annotated[str, Field(min_length=1)]
    new_text: str


class ApplyPatchRequest(BaseModel):
    """Apply a unified diff (``git diff`` / ``diff -u`` format, paths ``a/…`` ``b/…``).

    Every file it names is checked like any other path first; the patch applies
    whole or not at all.
    """

    model_config = _STRICT
    type: Literal["apply_patch"]
    id: _Id
    patch: Annotated[str, Field(min_length=1)]


class ExecRequest(BaseModel):
    """Run one command in the workspace; exactly one of ``argv`` and ``cmd``.

    ``argv``: the program and its arguments, run directly. ``cmd``: a shell string,
    run as ``["/bin/bash", "-c", cmd]``. ``cwd``: a folder in the workspace. stdin
    is at EOF; the command runs in its own process group, which is killed (SIGKILL)
    at ``timeout_s`` and when the command ends, so nothing it started outlives it.
    The environment is a fixed minimal one (no variable of the daemon or the host);
    ``network``: add the sandbox's egress proxy settings (the egress allowlist
    still applies). Each of stdout and stderr is capped at ``max_output_bytes``,
    keeping its head and tail around a truncation marker. ``display``: the command
    may open windows on the sandbox's display (``DISPLAY`` and ``XAUTHORITY`` are
    set for it alone); the task must grant it, and a sandbox that grants no display
    answers ``display_unavailable``. Without it the command has no X server.
    """

    model_config = _STRICT
    type: Literal["exec"]
    id: _Id
    argv: _Argv | None = None
    cmd: _Arg | None = None
    cwd: WorkspacePath = "."
    timeout_s: _ExecTimeout = 30.0
    max_output_bytes: _OutputCap = 65_536
    network: bool = False
    display: bool = False

    @model_validator(mode="after")
    def _one_command(self) -> ExecRequest:
        if (self.argv is None) == (self.cmd is None):
            raise ValueError("give exactly one of 'argv' and 'cmd'")
        return self


class RunTestsRequest(BaseModel):
    """Run the project's test command (``argv``, chosen by the controller) and report pass/fail.

    Runs like :class:`ExecRequest` with stdout and stderr merged; ``passed`` is
    true when it exits 0 before ``timeout_s``. ``tail_bytes``: how much of the end
    of the output to return. ``display``: as :attr:`ExecRequest.display` (the
    command may open windows on the sandbox's display; the task must grant it).
    """

    model_config = _STRICT
    type: Literal["run_tests"]
    id: _Id
    argv: _Argv
    cwd: WorkspacePath = "."
    timeout_s: _ExecTimeout = 300.0
    tail_bytes: _OutputCap = 8_000
    display: bool = False


class WorkspaceDiffRequest(BaseModel):
    """Summarize the changes since ``base`` (a commit; ``None``: ``HEAD``), new files included.

    Needs the workspace to be a git repository (``seed_workspace`` makes one). The
    diff text is capped at ``max_bytes``; the agent's git index is not touched.
    """

    model_config = _STRICT
    type: Literal["workspace_diff"]
    id: _Id
    base: Annotated[str, Field(pattern=r"^[0-9a-f]{7,64}$")] | None = None
    max_bytes: _OutputCap = 262_144


WorkspaceRequest = Union[
    SeedWorkspaceRequest,
    ListDirRequest,
    ReadFileRequest,
    WriteFileRequest,
    EditFileRequest,
    ApplyPatchRequest,
    ExecRequest,
    RunTestsRequest,
    WorkspaceDiffRequest,
]
"""Any workspace request (a plain union, for annotations)."""

WORKSPACE_REQUEST_TYPES: dict[str, type[BaseModel]] = {
    "seed_workspace": SeedWorkspaceRequest,
    "list_dir": ListDirRequest,
    "read_file": ReadFileRequest,
    "write_file": WriteFileRequest,
    "edit_file": EditFileRequest,
    "apply_patch": ApplyPatchRequest,
    "exec": ExecRequest,
    "run_tests": RunTestsRequest,
    "workspace_diff": WorkspaceDiffRequest,
}
"""Request ``type`` → model, for the workspace requests."""


class WorkspaceSeeded(BaseModel):
    """The workspace after ``seed_workspace``: ``files`` unpacked, ``size`` bytes, ``git_head`` (baseline commit)."""

    model_config = _STRICT
    type: Literal["workspace_seeded"] = "workspace_seeded"
    files: Annotated[int, Field(strict=True, ge=0)]
    size: Annotated[int, Field(strict=True, ge=0)]
    git_head: _GitCommit | None = None


class DirEntry(BaseModel):
    """One folder entry. ``size``: bytes (the link's own for a symlink). ``target``: a symlink's target as stored."""

    model_config = _STRICT
    name: Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
    kind: Literal["file", "dir", "symlink", "other"]
    size: Annotated[int, Field(strict=True, ge=0)]
    target: _ReplyPath | None = None


class DirListing(BaseModel):
    """A folder's entries. ``path``: relative to the workspace root (``"."`` for the root)."""

    model_config = _STRICT
    type: Literal["dir_listing"] = "dir_listing"
    path: _ReplyPath
    entries: Annotated[list[DirEntry], Field(max_length=MAX_LIST_ENTRIES)]
    truncated: bool = False


class FileContent(BaseModel):
    """Lines ``start_line``..``end_line`` (1-based, inclusive) of a file.

    ``end_line`` is ``start_line - 1`` when no line was returned. ``size``: the
    whole file's size, bytes. ``truncated``: more content follows ``end_line``.
    ``replaced_invalid_utf8``: bytes that were not UTF-8 were replaced by U+FFFD.
    """

    model_config = _STRICT
    type: Literal["file_content"] = "file_content"
    path: _ReplyPath
    content: Annotated[str, Field(max_length=MAX_READ_BYTES)]
    size: int
    start_line: int
    end_line: int
    truncated: bool = False
    replaced_invalid_utf8: bool = False


class FileWritten(BaseModel):
    """A file written by ``write_file`` or ``edit_file``: its new ``size`` (bytes); ``created``: it is new."""

    model_config = _STRICT
    type: Literal["file_written"] = "file_written"
    path: _ReplyPath
    size: int
    created: bool


class PatchApplied(BaseModel):
    """A patch applied: the ``files`` it touched (relative paths) and ``git apply``'s messages."""

    model_config = _STRICT
    type: Literal["patch_applied"] = "patch_applied"
    files: Annotated[list[_ReplyPath], Field(max_length=MAX_REPLY_PATHS)]
    output: str = ""


class ExecOutput(BaseModel):
    """How a command ended.

    ``exit_code``: its exit status, ``None`` when a signal ended it (``signal``
    names it). ``timed_out``: killed at the timeout. ``stdout``/``stderr``: UTF-8
    (invalid bytes replaced), each cut to head + marker + tail when over the cap;
    ``stdout_bytes``/``stderr_bytes``: how much was written in all.
    """

    model_config = _STRICT
    type: Literal["exec_output"] = "exec_output"
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    duration_s: float
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool = False


class RunTestsOutput(BaseModel):
    """How the test command ended. ``tail``: the end of its merged output; ``output_bytes``: all of it."""

    model_config = _STRICT
    type: Literal["test_run"] = "test_run"
    passed: bool
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    duration_s: float
    tail: str
    output_bytes: int


class ChangedFile(BaseModel):
    """One changed path since the base commit; ``old_path`` for renames and copies."""

    model_config = _STRICT
    path: _ReplyPath
    status: Literal["added", "modified", "deleted", "renamed", "copied", "type_changed", "other"]
    old_path: _ReplyPath | None = None


class WorkspaceDiff(BaseModel):
    """The workspace's changes since ``base`` (a full commit id).

    ``diff``: unified diff text, cut to the requested cap (``truncated``);
    ``diff_bytes``: its full size.
    """

    model_config = _STRICT
    type: Literal["workspace_diff"] = "workspace_diff"
    base: _GitCommit
    files: Annotated[list[ChangedFile], Field(max_length=MAX_REPLY_PATHS)]
    diff: str
    diff_bytes: int
    truncated: bool = False


WorkspaceOutput = Annotated[
    Union[
        WorkspaceSeeded, DirListing, FileContent, FileWritten, PatchApplied, ExecOutput, RunTestsOutput, WorkspaceDiff
    ],
    Field(discriminator="type"),
]
"""The output of one workspace request, in :attr:`Result.workspace`."""

# ---------------------------------------------------------------------------
# End of workspace tools
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Reset and snapshots
#
# ``reset`` (a websocket request) stops every process of the session (the
# browser, the window manager and anything an agent started), wipes every
# writable path (browser profile, downloads, /tmp, /dev/shm, the workspace, the
# home folder, the clipboard and X selections), starts the window manager and
# Chromium again at ``start_url`` and answers with the first observation of the
# fresh state. The controller chooses the next control token and sends only its
# SHA-256: once the reply is sent the daemon accepts only the new token and
# closes every connection made with the old one (including the one that asked).
#
# Snapshots move over HTTP, not the websocket (an archive is often larger than
# :data:`MAX_MESSAGE_BYTES`), on :data:`SNAPSHOT_PATH` with the same
# ``Authorization: Bearer <token>`` check as the websocket:
#
# - ``GET /v1/snapshot``: the browser is stopped (so its files are consistent),
#   the state needed to restore the session (cookies, Local Storage, IndexedDB,
#   Session Storage, preferences; no caches) is packed as a gzip'd tar whose
#   first member is a :class:`SnapshotManifest`, and the browser is started again
#   at the URL it showed. Body: the archive (``application/gzip``); header
#   :data:`SNAPSHOT_SHA256_HEADER`: its SHA-256.
# - ``PUT /v1/snapshot?start_url=URL``: body: an archive made by ``GET``. It is
#   checked in full (size, member kinds, confined names, every file's SHA-256
#   against the manifest) before the browser is stopped; the browser profile is
#   then replaced by the archive's content and Chromium started at ``start_url``
#   (default: the sandbox's start page). Reply: :class:`SnapshotRestored`.
#
# Errors on these endpoints are the :class:`ErrorBody` envelope as JSON with an
# HTTP status: 401 (token), 409 (``busy``), 413 (too large), 400 (bad archive or
# query), 500 (``internal``).
# ---------------------------------------------------------------------------

MAX_SNAPSHOT_BYTES = 64 * 1_048_576
"""Largest snapshot archive (gzip'd tar) the daemon makes or accepts (64 MiB)."""

SNAPSHOT_PATH = "/v1/snapshot"
"""The daemon's HTTP path for taking (GET) and restoring (PUT) a snapshot."""

SNAPSHOT_FORMAT: Final = "deskpod-snapshot/1"
"""The ``format`` a :class:`SnapshotManifest` names."""

SNAPSHOT_MANIFEST_NAME = "deskpod-snapshot.json"
"""Name of the manifest: the archive's first member."""

SNAPSHOT_SHA256_HEADER = "X-Deskpod-Sha256"
"""Response header of ``GET /v1/snapshot``: the archive's SHA-256, hex."""

SESSION_EVENTS = frozenset({"renderer_crashed", "browser_restarted", "display_restarted", "window_manager_restarted"})
"""What :attr:`Observation.events` may report: a renderer crashed; Chromium exited and
was started again (its pages are gone); the X server died and the display, the
window manager and Chromium were started again; the window manager was restarted."""

_Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_StartUrl = Annotated[str, Field(min_length=1, max_length=8192, pattern=r"^https?://")]


class ResetRequest(BaseModel):
    """Put the sandbox back to its baseline in place, then observe.

    ``start_url``: the page Chromium opens (http or https); ``None``: the sandbox's
    configured start page. ``token_sha256``: SHA-256 (64 lower-case hex digits) of
    the control token that replaces the current one; the daemon never sees the
    token itself. ``observe``: what the reply's observation of the fresh state holds.
    """

    model_config = _STRICT
    type: Literal["reset"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    start_url: _StartUrl | None = None
    token_sha256: _Sha256
    observe: ObserveOptions = ObserveOptions()


class SnapshotFile(BaseModel):
    """One file of a snapshot: ``sha256`` of its bytes (hex) and ``size`` in bytes."""

    model_config = _STRICT
    sha256: _Sha256
    size: Annotated[int, Field(strict=True, ge=0)]


class SnapshotManifest(BaseModel):
    """The first member of a snapshot archive.

    ``format``: :data:`SNAPSHOT_FORMAT`. ``files``: every regular file of the
    archive by its path relative to the browser profile (``/``-separated).
    ``created_at``: when it was taken, seconds since the epoch (UTC).
    """

    model_config = _STRICT
    format: Literal["deskpod-snapshot/1"]
    created_at: float
    files: dict[Annotated[str, Field(min_length=1, max_length=1024)], SnapshotFile]


class SnapshotRestored(BaseModel):
    """Reply of ``PUT /v1/snapshot``: ``files`` restored, ``size`` their total bytes,
    ``url`` the page Chromium was started at."""

    model_config = _STRICT
    type: Literal["snapshot_restored"] = "snapshot_restored"
    files: int
    size: int
    url: str


class RestoreQuery(BaseModel):
    """The query of ``PUT /v1/snapshot``: ``start_url`` (http or https), ``None``: the
    sandbox's start page."""

    model_config = _STRICT
    start_url: _StartUrl | None = None


Request = Annotated[
    Union[ActRequest, NavigateRequest, ConfigureRequest, ResetRequest, WorkspaceRequest], Field(discriminator="type")
]
_REQUEST_TYPES = frozenset({"act", "navigate", "configure", "reset", *WORKSPACE_REQUEST_TYPES})


# Reply fields. Everything below is built by the daemon and read by the controller,
# which treats it as untrusted: every string has a length cap, every hash a pattern,
# every list a count cap, and the controller's parser refuses a reply beyond them
# (:class:`~deskpod.errors.BadReplyError`). The daemon cuts page-derived strings to
# these caps before it builds a reply.

# A browser's URLs never hold a raw control character (the URL standard percent-encodes
# them), so a reply's URL may not either: it may be printed on a terminal.
_Url = Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
_Title = Annotated[str, Field(max_length=MAX_TITLE_CHARS)]
_Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]
_ReplyId = Annotated[str, Field(min_length=1, max_length=128)]
_Pixels = Annotated[int, Field(strict=True, ge=1, le=16384)]
_Scale = Annotated[float, Field(gt=0.0, le=16384.0, allow_inf_nan=False)]
_Seconds = Annotated[float, Field(ge=0.0, le=86_400.0, allow_inf_nan=False)]
_Count = Annotated[int, Field(strict=True, ge=0)]


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
    ``perceptual_hash``: a 64-bit average hash of the screen (16 hex digits: the
    screen shrunk to 8x8 grey pixels, one bit per pixel brighter than their mean),
    so nearly equal screens (a blinking caret, a ticking clock) differ in only a
    few bits; ``None`` for zoom images.
    """

    model_config = _STRICT
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
    sha256: _Sha256
    data: Annotated[str, Field(max_length=4 * (MAX_SCREENSHOT_BYTES // 3 + 1))]
    perceptual_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")] | None = None


class ActionTiming(BaseModel):
    """How long one action took to execute, seconds."""

    model_config = _STRICT
    index: Annotated[int, Field(strict=True, ge=0, lt=MAX_ACTIONS_PER_REQUEST)]
    type: Annotated[str, Field(max_length=32)]
    duration_s: _Seconds


class Tab(BaseModel):
    """One browser tab. ``active``: the tab actions and observations apply to."""

    model_config = _STRICT
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

    model_config = _STRICT
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

    model_config = _STRICT
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

    model_config = _STRICT
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

    model_config = _STRICT
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
    closed list is :data:`SESSION_EVENTS`). ``timings``: one entry per executed action.
    ``observe_s``: seconds spent observing (settle, capture, encode, CDP).
    """

    model_config = _STRICT
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
    timings: Annotated[list[ActionTiming], Field(max_length=MAX_ACTIONS_PER_REQUEST)] = []
    observe_s: _Seconds = 0.0


class Result(BaseModel):
    """A successful reply to the request with the same ``id``.

    ``workspace``: the output of a workspace request (``None`` for other requests).
    """

    model_config = _STRICT
    type: Literal["result"] = "result"
    id: _ReplyId
    observation: Observation | None = None
    model_size: Size | None = None
    workspace: WorkspaceOutput | None = None


class ErrorBody(BaseModel):
    """The closed error envelope; ``code`` is one of the codes in :mod:`deskpod.errors`."""

    model_config = _STRICT
    code: Annotated[str, Field(max_length=64)]
    message: str
    detail: dict[str, Any] = {}


class ErrorReply(BaseModel):
    """A failed reply. ``id`` is ``None`` when the request's id could not be read."""

    model_config = _STRICT
    type: Literal["error"] = "error"
    id: Annotated[str, Field(max_length=128)] | None
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
            ``(round(x * scale_x), round(y * scale_y))`` screen pixels, clamped into
            the screen (so the model's last pixel maps to the screen's last one).

        Raises:
            OutOfBoundsError: the point lies outside the model space.
        """
        self.check(x, y)
        sx = min(self.screen.width - 1, max(0, round(x * self.scale_x)))
        sy = min(self.screen.height - 1, max(0, round(y * self.scale_y)))
        return sx, sy

    def to_model(self, sx: float, sy: float) -> tuple[int, int]:
        """Map a screen point (pixels) to the model-space pixel that covers it, clamped."""
        x = min(self.model.width - 1, max(0, round(sx / self.scale_x)))
        y = min(self.model.height - 1, max(0, round(sy / self.scale_y)))
        return x, y

    def check(self, x: int, y: int) -> None:
        """Raise :class:`OutOfBoundsError` unless (x, y) lies in the model space."""
        if not (0 <= x < self.model.width and 0 <= y < self.model.height):
            raise OutOfBoundsError(
                f"point ({x}, {y}) is outside the {self.model.width}x{self.model.height} model space",
                detail={"x": x, "y": y, "width": self.model.width, "height": self.model.height},
            )


def fit_within(screen: Size, max_dimension: int) -> Size:
    """Scale ``screen`` down (never up), aspect kept, so its longer side is at most
    ``max_dimension`` pixels; each side at least 1."""
    factor = min(1.0, max_dimension / max(screen.width, screen.height))
    return Size(width=max(1, round(screen.width * factor)), height=max(1, round(screen.height * factor)))


def action_points(action: BaseModel) -> list[Point]:
    """Return every model-space point an action touches (empty for key, type, wait...).

    A zoom region contributes its top-left corner and its last pixel (x1 - 1, y1 - 1).
    """
    if isinstance(action, Drag):
        return list(action.path)
    if isinstance(action, Zoom):
        x0, y0, x1, y1 = action.region
        return [Point(x=x0, y=y0), Point(x=x1 - 1, y=y1 - 1)]
    if isinstance(action, (Click, DoubleClick, TripleClick, MouseDown, MouseUp)):
        return [] if action.x is None or action.y is None else [Point(x=action.x, y=action.y)]
    if isinstance(action, (Move, Scroll)):
        return [Point(x=action.x, y=action.y)]
    return []


_SURROGATE = re.compile("[\ud800-\udfff]")


def find_lone_surrogate(data: Any, where: str = "message") -> str | None:
    """Where decoded JSON holds a lone UTF-16 surrogate, or ``None``.

    JSON text may escape one (``"\\ud800"``); Python decodes it into a ``str`` that
    cannot be encoded as UTF-8, so echoing it, logging it or passing it on fails.
    A well-formed pair (``"\\ud83d\\ude00"``) decodes to one character and is fine.

    Args:
        data: what :func:`json.loads` returned (dicts, lists, strings, numbers...).
        where: the name of ``data`` in the answer.

    Returns:
        The dotted path of the first string (a value or a key) holding one, e.g.
        ``"message.actions.0.text"``, or ``None`` when there is none.
    """
    stack: list[tuple[str, Any]] = [(where, data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return f"{path} (a key)"
                stack.append((f"{path}.{key}", value))
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}", value) for i, value in enumerate(item))
    return None


def scrub_surrogates(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD (a string that
    always encodes as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def scrub_json(data: Any) -> Any:
    """Decoded JSON with :func:`scrub_surrogates` applied to every string, keys included
    (returned unchanged, not copied, when it holds no lone surrogate)."""
    if find_lone_surrogate(data) is None:
        return data
    return _scrubbed(data)


def _scrubbed(data: Any) -> Any:
    if isinstance(data, str):
        return scrub_surrogates(data)
    if isinstance(data, dict):
        return {_scrubbed(k): _scrubbed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_scrubbed(v) for v in data]
    return data


def encode_message(message: BaseModel) -> str:
    """Serialize a message for the wire; never fails on its strings.

    A string that cannot be encoded as UTF-8 (a lone surrogate that came from a page
    through CDP, or a file name's undecodable bytes that Python keeps as surrogates)
    is sent with U+FFFD in place of each lone surrogate.

    Returns:
        The JSON text (UTF-8 encodable).
    """
    try:
        return message.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(_scrubbed(message.model_dump(mode="json")), ensure_ascii=False, separators=(",", ":"))


def _safe_id(rid: Any) -> str | None:
    """A request id that can be echoed: a string, cut to 128 characters, lone surrogates
    replaced by U+FFFD; ``None`` when it is not a string."""
    return scrub_surrogates(rid[:128]) if isinstance(rid, str) else None


def _loads(raw: str | bytes, limit: int = MAX_MESSAGE_BYTES) -> Any:
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > limit:
        raise MessageTooLargeError(
            f"message of {size} bytes exceeds the {limit}-byte limit",
            detail={"bytes": size, "limit": limit},
        )
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"message is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError("message is nested too deeply") from exc


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


def request_id(raw: str | bytes) -> str | None:
    """The ``id`` of a client message, safe to echo (cut to 128 characters, lone
    surrogates replaced by U+FFFD), or ``None`` when it cannot be read (too large, not
    JSON, not an object, or an id that is not a string)."""
    try:
        data = _loads(raw)
    except (MessageTooLargeError, InvalidRequestError):
        return None
    return _safe_id(data.get("id")) if isinstance(data, dict) else None


def parse_request(
    raw: str | bytes,
) -> ActRequest | NavigateRequest | ConfigureRequest | ResetRequest | WorkspaceRequest:
    """Decode and validate one client message.

    Args:
        raw: the websocket frame's payload.

    Returns:
        The typed request.

    Raises:
        MessageTooLargeError: ``raw`` exceeds :data:`MAX_MESSAGE_BYTES`.
        InvalidRequestError: not JSON, not an object, a lone UTF-16 surrogate in any
            string (``detail["where"]`` says where), unknown request ``type``, or bad
            request fields. ``detail["id"]`` carries the id when readable, safe to
            echo (lone surrogates replaced by U+FFFD).
        UnknownActionError, InvalidActionError: an action is bad
            (``detail["action_index"]`` says which).
    """
    data = _loads(raw)
    if not isinstance(data, dict):
        raise InvalidRequestError("message must be a JSON object")
    rid = _safe_id(data.get("id"))
    id_detail = {"id": rid} if rid is not None else {}
    where = find_lone_surrogate(data)
    if where is not None:
        raise InvalidRequestError(
            f"{scrub_surrogates(where)[:200]}: a lone UTF-16 surrogate is not text",
            detail={**id_detail, "where": scrub_surrogates(where)[:200]},
        )
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
    models: dict[str, type[BaseModel]] = {
        "act": ActRequest, "navigate": NavigateRequest, "configure": ConfigureRequest, "reset": ResetRequest,
        **WORKSPACE_REQUEST_TYPES,
    }
    model = models[kind]
    try:
        return model.model_validate(data)  # type: ignore[return-value]
    except ValidationError as exc:
        raise InvalidRequestError(f"{kind}: {_first_error(exc)}", detail=id_detail) from exc


def parse_server_message(raw: str | bytes) -> Hello | Result | ErrorReply:
    """Decode one daemon message (client side). The sandbox is untrusted: the message
    must fit every cap of the reply models.

    Raises:
        BadReplyError: the message is over :data:`MAX_SERVER_MESSAGE_BYTES`, not JSON,
            holds a lone UTF-16 surrogate, or is not a valid :class:`Hello`,
            :class:`Result` or :class:`ErrorReply` (``detail["reason"]`` says which).
    """
    try:
        data = _loads(raw, MAX_SERVER_MESSAGE_BYTES)
    except (MessageTooLargeError, InvalidRequestError) as exc:
        raise BadReplyError(f"bad message from the sandbox: {exc.message}"[:500],
                            detail={"reason": "too_large" if isinstance(exc, MessageTooLargeError) else "not_json"}
                            ) from exc
    where = find_lone_surrogate(data)
    if where is not None:
        raise BadReplyError(f"bad message from the sandbox: a lone UTF-16 surrogate in {printable(where)}"[:500],
                            detail={"reason": "surrogate"})
    try:
        return _SERVER_MESSAGE.validate_python(data)
    except ValidationError as exc:
        raise BadReplyError(f"bad message from the sandbox: {printable(_first_error(exc))}"[:500],
                            detail={"reason": "invalid"}) from exc
