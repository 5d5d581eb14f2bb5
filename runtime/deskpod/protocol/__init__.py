"""The wire contract between the controller and the in-sandbox daemon (agentd).

Pure: no I/O, no FastAPI, Xlib, mss or docker. Both sides import this package and
never each other. Every public name of its modules is re-exported here:

- :mod:`~deskpod.protocol.limits`: caps (message sizes, counts, lengths);
- :mod:`~deskpod.protocol.actions`: actions, points, sizes;
- :mod:`~deskpod.protocol.observation`: observe options and the observation;
- :mod:`~deskpod.protocol.requests`: the websocket requests and their union;
- :mod:`~deskpod.protocol.workspace`: workspace requests and outputs (code agents);
- :mod:`~deskpod.protocol.snapshots`: the snapshot HTTP endpoints' models;
- :mod:`~deskpod.protocol.replies`: hello, replies, the error envelope;
- :mod:`~deskpod.protocol.coords`: model space ↔ screen mapping;
- :mod:`~deskpod.protocol.codec`: parsing and encoding frames;
- :mod:`~deskpod.protocol.service`: the outbound messages of the controller service
  (``deskpod serve``), whose inbound ones are in :mod:`deskpod.controller.serve`.

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
- :class:`NavigateRequest` ``{"type": "navigate", "id", "url"}``: loads a URL in
  the browser's active tab, then observes.
- :class:`ConfigureRequest` ``{"type": "configure", "id", "model_size"}``: declares
  the size of the images the model sees (the *model space*).
- :class:`ResetRequest` ``{"type": "reset", "id", "start_url", "token_sha256"}``:
  puts the sandbox back to its baseline in place and rotates the control token
  (see :mod:`~deskpod.protocol.requests`; snapshots: :mod:`~deskpod.protocol.snapshots`).
- Workspace tools for code agents (``seed_workspace``, ``list_dir``, ``read_file``,
  ``write_file``, ``edit_file``, ``apply_patch``, ``exec``, ``run_tests``,
  ``workspace_diff``): see :mod:`~deskpod.protocol.workspace`; the
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
    DEFAULT_EXEC_OUTPUT_BYTES,
    DEFAULT_EXEC_OUTPUT_LINES,
    DEFAULT_READ_BYTES,
    MAX_ACTIONS_PER_REQUEST,
    MAX_AX_NODES,
    MAX_DIALOG_CHARS,
    MAX_EXEC_OUTPUT_BYTES,
    MAX_EXEC_OUTPUT_LINES,
    MAX_EXEC_STREAM_BYTES,
    MAX_EXEC_TIMEOUT_S,
    MAX_LABEL_CHARS,
    MAX_LIST_ENTRIES,
    MAX_MESSAGE_BYTES,
    MAX_PAGE_TEXT_CHARS,
    MAX_PATH_CHARS,
    MAX_READ_BYTES,
    MAX_REPLY_PATHS,
    MAX_SCREENSHOT_BYTES,
    MAX_SCREENSHOT_PIXELS,
    MAX_SCROLL_NOTCHES,
    MAX_SEED_ARCHIVE_BYTES,
    MAX_SERVER_MESSAGE_BYTES,
    MAX_SNAPSHOT_BYTES,
    MAX_TABS,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    MAX_WAIT_S,
    PROTOCOL_VERSION,
)
from deskpod.protocol.actions import (
    ACTION_TYPES,
    Action,
    Click,
    Coordinate,
    CursorPosition,
    DoubleClick,
    Drag,
    HeldKeys,
    HoldKey,
    Keypress,
    MouseDown,
    MouseUp,
    Move,
    Point,
    Scroll,
    Size,
    TakeScreenshot,
    TripleClick,
    TypeText,
    Wait,
    WaitFor,
    Zoom,
    parse_action,
)
from deskpod.protocol.observation import (
    AXNode,
    ActionTiming,
    Dialog,
    ElementInfo,
    FocusedElement,
    Observation,
    ObserveOptions,
    SESSION_EVENTS,
    Screenshot,
    Tab,
)
from deskpod.protocol.requests import (
    ActRequest,
    AnyRequest,
    ConfigureRequest,
    NavigateRequest,
    REQUEST_TYPES,
    Request,
    ResetRequest,
)
from deskpod.protocol.workspace import (
    ApplyPatchRequest,
    ChangedFile,
    DirEntry,
    DirListing,
    EditFileRequest,
    ExecOutput,
    ExecRequest,
    FileContent,
    FileWritten,
    ListDirRequest,
    PatchApplied,
    ReadFileRequest,
    RunTestsOutput,
    RunTestsRequest,
    SeedWorkspaceRequest,
    WORKSPACE_REQUEST_TYPES,
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceOutput,
    WorkspacePath,
    WorkspaceRequest,
    WorkspaceSeeded,
    WriteFileRequest,
)
from deskpod.protocol.snapshots import (
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
    ConfigureReply,
    EditFileReply,
    ErrorBody,
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
    WriteFileReply,
)
from deskpod.protocol.coords import (
    CoordinateMap,
    action_points,
    fit_within,
)
from deskpod.protocol.codec import (
    encode_message,
    find_lone_surrogate,
    first_error,
    parse_request,
    parse_server_message,
    request_id,
    scrub_json,
    scrub_surrogates,
)
from deskpod.protocol.service import (
    ServiceConfirmationRequired,
    ServiceError,
    ServiceEvent,
    ServiceFinished,
    ServiceHealth,
    ServiceMessage,
    ServiceObservation,
    ServiceOk,
    ServiceOpened,
    ServicePauseRequired,
    ServiceResetDone,
    ServiceRunSummary,
)

__all__ = [
    "ACTION_TYPES",
    "AXNode",
    "ActReply",
    "ActRequest",
    "Action",
    "ActionTiming",
    "AnyReply",
    "AnyRequest",
    "AnyWorkspaceReply",
    "ApplyPatchReply",
    "ApplyPatchRequest",
    "ChangedFile",
    "Click",
    "ConfigureReply",
    "ConfigureRequest",
    "Coordinate",
    "CoordinateMap",
    "CursorPosition",
    "DEFAULT_EXEC_OUTPUT_BYTES",
    "DEFAULT_EXEC_OUTPUT_LINES",
    "DEFAULT_READ_BYTES",
    "Dialog",
    "DirEntry",
    "DirListing",
    "DoubleClick",
    "Drag",
    "EditFileReply",
    "EditFileRequest",
    "ElementInfo",
    "ErrorBody",
    "ErrorReply",
    "ExecOutput",
    "ExecReply",
    "ExecRequest",
    "FileContent",
    "FileWritten",
    "FocusedElement",
    "HeldKeys",
    "Hello",
    "HoldKey",
    "Keypress",
    "ListDirReply",
    "ListDirRequest",
    "MAX_ACTIONS_PER_REQUEST",
    "MAX_AX_NODES",
    "MAX_DIALOG_CHARS",
    "MAX_EXEC_OUTPUT_BYTES",
    "MAX_EXEC_OUTPUT_LINES",
    "MAX_EXEC_STREAM_BYTES",
    "MAX_EXEC_TIMEOUT_S",
    "MAX_LABEL_CHARS",
    "MAX_LIST_ENTRIES",
    "MAX_MESSAGE_BYTES",
    "MAX_PAGE_TEXT_CHARS",
    "MAX_PATH_CHARS",
    "MAX_READ_BYTES",
    "MAX_REPLY_PATHS",
    "MAX_SCREENSHOT_BYTES",
    "MAX_SCREENSHOT_PIXELS",
    "MAX_SCROLL_NOTCHES",
    "MAX_SEED_ARCHIVE_BYTES",
    "MAX_SERVER_MESSAGE_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "MAX_TABS",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_URL_CHARS",
    "MAX_WAIT_S",
    "MouseDown",
    "MouseUp",
    "Move",
    "NavigateReply",
    "NavigateRequest",
    "Observation",
    "ObserveOptions",
    "PROTOCOL_VERSION",
    "PatchApplied",
    "Point",
    "REPLY_TYPES",
    "REQUEST_TYPES",
    "ReadFileReply",
    "ReadFileRequest",
    "Reply",
    "Request",
    "ResetReply",
    "ResetRequest",
    "RestoreQuery",
    "Result",
    "RunTestsOutput",
    "RunTestsReply",
    "RunTestsRequest",
    "SESSION_EVENTS",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_MANIFEST_NAME",
    "SNAPSHOT_PATH",
    "SNAPSHOT_SHA256_HEADER",
    "Screenshot",
    "Scroll",
    "SeedWorkspaceReply",
    "SeedWorkspaceRequest",
    "ServiceConfirmationRequired",
    "ServiceError",
    "ServiceEvent",
    "ServiceFinished",
    "ServiceHealth",
    "ServiceMessage",
    "ServiceObservation",
    "ServiceOk",
    "ServiceOpened",
    "ServicePauseRequired",
    "ServiceResetDone",
    "ServiceRunSummary",
    "Size",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotRestored",
    "Tab",
    "TakeScreenshot",
    "TripleClick",
    "TypeText",
    "WORKSPACE_REQUEST_TYPES",
    "Wait",
    "WaitFor",
    "WorkspaceDiff",
    "WorkspaceDiffReply",
    "WorkspaceDiffRequest",
    "WorkspaceOutput",
    "WorkspacePath",
    "WorkspaceRequest",
    "WorkspaceSeeded",
    "WriteFileReply",
    "WriteFileRequest",
    "Zoom",
    "action_points",
    "encode_message",
    "find_lone_surrogate",
    "first_error",
    "fit_within",
    "parse_action",
    "parse_request",
    "parse_server_message",
    "request_id",
    "scrub_json",
    "scrub_surrogates",
]
