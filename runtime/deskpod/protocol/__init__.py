"""The wire contract between the controller and the in-sandbox daemon (agentd).

Pure: no I/O, no FastAPI, Xlib, mss or docker. Both sides import this package and
never each other. The names their users import are re-exported here; the rest of each
module's public names are imported from the module itself:

- :mod:`~deskpod.protocol.limits`: caps (message sizes, counts, lengths);
- :mod:`~deskpod.protocol.actions`: actions, points, sizes;
- :mod:`~deskpod.protocol.observation`: observe options and the observation;
- :mod:`~deskpod.protocol.expect`: what must still hold before a pointer action's input;
- :mod:`~deskpod.protocol.requests`: the websocket requests and their union;
- :mod:`~deskpod.protocol.egress`: the run's egress allowlist in the browser, refused requests;
- :mod:`~deskpod.protocol.permissions`: the run's browser permission grants, pages' requests;
- :mod:`~deskpod.protocol.page_logs`: the active tab's console messages and network requests;
- :mod:`~deskpod.protocol.page_keys`: the page's declared key shortcuts and key listeners;
- :mod:`~deskpod.protocol.clipboard`: reading and writing the desktop's clipboard;
- :mod:`~deskpod.protocol.tabs`: recovering a tab whose page does not answer;
- :mod:`~deskpod.protocol.windows`: the desktop's windows in the observation, actions on them;
- :mod:`~deskpod.protocol.native`: desktop applications' native controls (AT-SPI) in the observation;
- :mod:`~deskpod.protocol.mask`: the secrets the daemon masks in its images and texts;
- :mod:`~deskpod.protocol.workspace`: workspace requests and outputs (code agents);
- :mod:`~deskpod.protocol.snapshot_http`: the snapshot HTTP endpoints' models;
- :mod:`~deskpod.protocol.replies`: hello, replies, the error envelope;
- :mod:`~deskpod.protocol.coords`: model space ↔ screen mapping;
- :mod:`~deskpod.protocol.codec`: parsing and encoding frames;
- :mod:`~deskpod.protocol.live`: the live stream of screen frames (``/v1/live``).

The controller service's wire (``deskpod serve``) is not here: it is
:mod:`deskpod.service.messages`.

Transport: JSON text frames over one websocket (``/v1/ws`` on the daemon),
authenticated by ``Authorization: Bearer <token>``. After the upgrade the daemon
sends a :class:`Hello`. Then every client message is one request with an ``id``;
the daemon answers each with exactly one reply carrying the same ``id``: the
request's reply model (:data:`REPLY_TYPES`, e.g. :class:`ActReply`, all tagged
``"type": "result"``) or an :class:`ErrorReply` (the envelope ``code``,
``message``, ``detail``). An error never closes the connection, except for
messages over :data:`MAX_MESSAGE_BYTES`.

Requests:

- :class:`ActRequest` ``{"type": "act", "id", "actions": [...], "observe": {...}}``:
  the actions run strictly in order on one serial executor; the reply carries the
  :class:`Observation` taken after the batch. An empty ``actions`` list only observes.
  An optional ``expect`` (:class:`ScreenExpectation`) binds its pointer actions to
  the screen they were planned on; the daemon refuses one whose screen changed with
  ``screen_changed`` before its input.
- :class:`NavigateRequest` ``{"type": "navigate", "id", "url"}``: loads a URL in
  the browser's active tab, then observes.
- :class:`ConfigureRequest` ``{"type": "configure", "id", "model_size"}``: declares
  the size of the images the model sees (the *model space*).
- :class:`ResetRequest` ``{"type": "reset", "id", "start_url", "token_sha256"}``:
  puts the sandbox back to its baseline in place and rotates the control token
  (see :mod:`~deskpod.protocol.requests`; snapshots: :mod:`~deskpod.protocol.snapshot_http`).
- :class:`EgressRequest` ``{"type": "egress", "id", "allowed_domains"}``: the hosts
  the browser may reach during a run (every other request fails before it is sent);
  ``null`` turns that off (see :mod:`~deskpod.protocol.egress`).
- :class:`PermissionsRequest` ``{"type": "permissions", "id", "grants"}``: the browser
  permissions pages get during a run (every other one is denied without a prompt; see
  :mod:`~deskpod.protocol.permissions`).
- Workspace tools for code agents (``seed_workspace``, ``list_dir``, ``read_file``,
  ``write_file``, ``edit_file``, ``apply_patch``, ``exec``, ``run_tests``,
  ``workspace_diff``; the controller's ``workspace_manifest`` and ``clean_room``): see :mod:`~deskpod.protocol.workspace`; the
  reply's ``workspace`` field carries their output (e.g. :class:`ExecReply`).

Coordinates: every ``x``/``y`` in an action is an int pixel from the top-left of
the *model space*: the size of the screenshots this session receives. Unless a
session declares ``model_size``, the model space equals the screen. The daemon
checks coordinates against the model space and maps them to screen pixels with
:class:`CoordinateMap`; every :class:`Screenshot` states both sizes, the scale and
the offset, so a client can map back. Durations are float seconds.
"""

from __future__ import annotations

from deskpod.protocol.limits import (
    DEFAULT_CONTENT_BYTES,
    DEFAULT_EXEC_OUTPUT_BYTES,
    DEFAULT_EXEC_OUTPUT_LINES,
    DEFAULT_READ_BYTES,
    MAX_ACTIONS_PER_REQUEST,
    MAX_DIALOG_CHARS,
    MAX_EXEC_OUTPUT_BYTES,
    MAX_FRAMES,
    MAX_LABEL_CHARS,
    MAX_MESSAGE_BYTES,
    MAX_REPLY_PATHS,
    MAX_SCREENSHOT_BYTES,
    MAX_SCREENSHOT_PIXELS,
    MAX_SCROLL_NOTCHES,
    MAX_SELECT_OPTIONS,
    MAX_SEED_ARCHIVE_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    MAX_SNAPSHOT_BYTES,
    MAX_TABS,
    MAX_TEST_REPORT_BYTES,
    MAX_TEXT_SOURCES,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    MAX_AX_BYTES,
    MAX_CONTENT_BYTES,
    MAX_SNAPSHOT_CHARS,
    MAX_AX_NAME_CHARS,
    MAX_IMAGE_SIDE_PX,
    MAX_PAGE_TEXT_BYTES,
    MAX_SCREENSHOT_BASE64_BYTES,
    MESSAGE_SIZE_HEADER,
    MIN_CLIENT_MESSAGE_BYTES,
    MIN_CONTENT_BYTES,
    MIN_SCREENSHOT_BASE64_BYTES,
    PROTOCOL_VERSION,
)
from deskpod.protocol.actions import (
    ACTION_TYPES,
    CHOICE_ROLES,
    ELEMENT_ACTION_TYPES,
    NO_INPUT_ACTION_TYPES,
    Action,
    Click,
    ClickElement,
    CursorPosition,
    DialogAccept,
    DialogDismiss,
    DoubleClick,
    Drag,
    DragElement,
    DropFiles,
    FillForm,
    HoldKey,
    HoverElement,
    Keypress,
    MouseDown,
    MouseUp,
    Move,
    Navigate,
    Point,
    Scroll,
    SelectOption,
    Size,
    TakeScreenshot,
    TripleClick,
    TypeElement,
    TypeText,
    Wait,
    WaitFor,
    Zoom,
    form_field_kind,
    parse_action,
    pixel_actions,
)
from deskpod.protocol.clipboard import MAX_CLIPBOARD_CHARS, ClipboardRead, ClipboardWrite
from deskpod.protocol.apps import APPS, AppName, OpenApp
from deskpod.protocol.native import MAX_NATIVE_NODES, NativeDialog, NativeElement, NativeNode
from deskpod.protocol.tabs import RecoverTab
from deskpod.protocol.windows import (
    MAX_WINDOWS,
    WINDOW_ACTION_TYPES,
    Window,
    WindowAction,
    WindowClose,
    WindowFocus,
    WindowMove,
    WindowResize,
)
from deskpod.protocol.downloads import (
    DOWNLOADS_DIR,
    Download,
    FileChooser,
    MAX_DOWNLOADS,
    MAX_DOWNLOAD_NAME_CHARS,
    SetFiles,
)
from deskpod.protocol.observation import (
    AXNode,
    ActionTiming,
    AgentWindow,
    Dialog,
    ElementInfo,
    FocusedElement,
    Observation,
    ObserveOptions,
    SettleSignal,
    Screenshot,
    SelectChoice,
    TEXT_SOURCE_KINDS,
    Tab,
    TextSource,
    Truncation,
    UNREAD_PARTS,
    Unread,
    UnresponsivePage,
)
from deskpod.protocol.page_logs import ConsoleLog, ConsoleMessage, NetworkLog, NetworkRequest
from deskpod.protocol.page_keys import KeyShortcut, PageKeys
from deskpod.protocol.egress import (
    BLOCK_RULE,
    BlockedRequest,
    EgressRequest,
    EgressState,
    MAX_BLOCKED_PER_OBSERVATION,
    intersect_domains,
)
from deskpod.protocol.permissions import (
    GeoPosition,
    PermissionGrants,
    PermissionName,
    PermissionRequest,
    PermissionsRequest,
)
from deskpod.protocol.expect import BOUND_POINTER_ACTIONS, PRESS_ACTIONS, ScreenExpectation
from deskpod.protocol.requests import (
    ActRequest,
    AnyRequest,
    ConfigureRequest,
    NavigateRequest,
    REQUEST_TYPES,
    ResetRequest,
)
from deskpod.protocol.workspace import (
    ApplyPatchRequest,
    ChangedFile,
    CleanRoomRequest,
    CleanRoomRun,
    DirEntry,
    DirListing,
    EditFileRequest,
    ExecOutput,
    ExecRequest,
    FileContent,
    FileWritten,
    ListDirRequest,
    ManifestEntry,
    PatchApplied,
    ReadFileRequest,
    RunTestsOutput,
    RunTestsRequest,
    SeedWorkspaceRequest,
    WORKSPACE_REQUEST_TYPES,
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceManifest,
    WorkspaceManifestRequest,
    WorkspaceOutput,
    WorkspaceRequest,
    WorkspaceSeeded,
    WriteFileRequest,
)
from deskpod.protocol.snapshot_http import (
    RestoreQuery,
    SNAPSHOT_FORMAT,
    SNAPSHOT_MANIFEST_NAME,
    SNAPSHOT_PATH,
    SNAPSHOT_SHA256_HEADER,
    SnapshotFile,
    SnapshotManifest,
    SnapshotRestored,
)
from deskpod.protocol.replies import (
    ActReply,
    AnyReply,
    AnyWorkspaceReply,
    ApplyPatchReply,
    CleanRoomReply,
    ConfigureReply,
    EditFileReply,
    EgressReply,
    ErrorBody,
    PermissionsReply,
    ErrorReply,
    ExecReply,
    Hello,
    ListDirReply,
    NavigateReply,
    REPLY_TYPES,
    ReadFileReply,
    Reply,
    ResetReply,
    Result,
    RunTestsReply,
    SeedWorkspaceReply,
    WorkspaceDiffReply,
    WorkspaceManifestReply,
    WriteFileReply,
)
from deskpod.protocol.coords import (
    CoordinateMap,
    action_points,
    fit_within,
)
from deskpod.protocol.codec import (
    encode_message,
    error_summary,
    find_lone_surrogate,
    first_error,
    parse_request,
    parse_server_message,
    request_id,
    scrub_json,
    scrub_surrogates,
)

__all__ = [
    "ACTION_TYPES",
    "APPS",
    "AXNode",
    "ActReply",
    "ActRequest",
    "Action",
    "ActionTiming",
    "AgentWindow",
    "AnyReply",
    "AnyRequest",
    "AnyWorkspaceReply",
    "AppName",
    "ApplyPatchReply",
    "ApplyPatchRequest",
    "BLOCK_RULE",
    "BOUND_POINTER_ACTIONS",
    "BlockedRequest",
    "CHOICE_ROLES",
    "ChangedFile",
    "CleanRoomReply",
    "CleanRoomRequest",
    "CleanRoomRun",
    "Click",
    "ClickElement",
    "ClipboardRead",
    "ClipboardWrite",
    "ConfigureReply",
    "ConfigureRequest",
    "ConsoleLog",
    "ConsoleMessage",
    "CoordinateMap",
    "CursorPosition",
    "DEFAULT_CONTENT_BYTES",
    "DEFAULT_EXEC_OUTPUT_BYTES",
    "DEFAULT_EXEC_OUTPUT_LINES",
    "DEFAULT_READ_BYTES",
    "DOWNLOADS_DIR",
    "Dialog",
    "DialogAccept",
    "DialogDismiss",
    "DirEntry",
    "DirListing",
    "DoubleClick",
    "Download",
    "Drag",
    "DragElement",
    "DropFiles",
    "ELEMENT_ACTION_TYPES",
    "EditFileReply",
    "EditFileRequest",
    "EgressReply",
    "EgressRequest",
    "EgressState",
    "ElementInfo",
    "ErrorBody",
    "ErrorReply",
    "ExecOutput",
    "ExecReply",
    "ExecRequest",
    "FileChooser",
    "FileContent",
    "FileWritten",
    "FillForm",
    "FocusedElement",
    "GeoPosition",
    "Hello",
    "HoldKey",
    "HoverElement",
    "KeyShortcut",
    "Keypress",
    "ListDirReply",
    "ListDirRequest",
    "MAX_ACTIONS_PER_REQUEST",
    "MAX_AX_BYTES",
    "MAX_AX_NAME_CHARS",
    "MAX_BLOCKED_PER_OBSERVATION",
    "MAX_CLIPBOARD_CHARS",
    "MAX_CONTENT_BYTES",
    "MAX_DIALOG_CHARS",
    "MAX_DOWNLOADS",
    "MAX_DOWNLOAD_NAME_CHARS",
    "MAX_EXEC_OUTPUT_BYTES",
    "MAX_FRAMES",
    "MAX_IMAGE_SIDE_PX",
    "MAX_LABEL_CHARS",
    "MAX_MESSAGE_BYTES",
    "MAX_NATIVE_NODES",
    "MAX_PAGE_TEXT_BYTES",
    "MAX_REPLY_PATHS",
    "MAX_SCREENSHOT_BASE64_BYTES",
    "MAX_SCREENSHOT_BYTES",
    "MAX_SCREENSHOT_PIXELS",
    "MAX_SCROLL_NOTCHES",
    "MAX_SEED_ARCHIVE_BYTES",
    "MAX_SELECT_OPTIONS",
    "MAX_SERVER_MESSAGE_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "MAX_SNAPSHOT_CHARS",
    "MAX_TABS",
    "MAX_TEST_REPORT_BYTES",
    "MAX_TEXT_SOURCES",
    "MAX_TITLE_CHARS",
    "MAX_URL_CHARS",
    "MAX_WINDOWS",
    "MESSAGE_SIZE_HEADER",
    "MIN_CLIENT_MESSAGE_BYTES",
    "MIN_CONTENT_BYTES",
    "MIN_SCREENSHOT_BASE64_BYTES",
    "ManifestEntry",
    "MouseDown",
    "MouseUp",
    "Move",
    "NO_INPUT_ACTION_TYPES",
    "NativeDialog",
    "NativeElement",
    "NativeNode",
    "Navigate",
    "NavigateReply",
    "NavigateRequest",
    "NetworkLog",
    "NetworkRequest",
    "Observation",
    "ObserveOptions",
    "OpenApp",
    "PRESS_ACTIONS",
    "PROTOCOL_VERSION",
    "PageKeys",
    "PatchApplied",
    "PermissionGrants",
    "PermissionName",
    "PermissionRequest",
    "PermissionsReply",
    "PermissionsRequest",
    "Point",
    "REPLY_TYPES",
    "REQUEST_TYPES",
    "ReadFileReply",
    "ReadFileRequest",
    "RecoverTab",
    "Reply",
    "ResetReply",
    "ResetRequest",
    "RestoreQuery",
    "Result",
    "RunTestsOutput",
    "RunTestsReply",
    "RunTestsRequest",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_MANIFEST_NAME",
    "SNAPSHOT_PATH",
    "SNAPSHOT_SHA256_HEADER",
    "ScreenExpectation",
    "Screenshot",
    "Scroll",
    "SeedWorkspaceReply",
    "SeedWorkspaceRequest",
    "SelectChoice",
    "SelectOption",
    "SetFiles",
    "SettleSignal",
    "Size",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotRestored",
    "TEXT_SOURCE_KINDS",
    "Tab",
    "TakeScreenshot",
    "TextSource",
    "TripleClick",
    "Truncation",
    "TypeElement",
    "TypeText",
    "UNREAD_PARTS",
    "Unread",
    "UnresponsivePage",
    "WINDOW_ACTION_TYPES",
    "WORKSPACE_REQUEST_TYPES",
    "Wait",
    "WaitFor",
    "Window",
    "WindowAction",
    "WindowClose",
    "WindowFocus",
    "WindowMove",
    "WindowResize",
    "WorkspaceDiff",
    "WorkspaceDiffReply",
    "WorkspaceDiffRequest",
    "WorkspaceManifest",
    "WorkspaceManifestReply",
    "WorkspaceManifestRequest",
    "WorkspaceOutput",
    "WorkspaceRequest",
    "WorkspaceSeeded",
    "WriteFileReply",
    "WriteFileRequest",
    "Zoom",
    "action_points",
    "encode_message",
    "error_summary",
    "find_lone_surrogate",
    "first_error",
    "fit_within",
    "form_field_kind",
    "intersect_domains",
    "parse_action",
    "parse_request",
    "parse_server_message",
    "pixel_actions",
    "request_id",
    "scrub_json",
    "scrub_surrogates",
]
