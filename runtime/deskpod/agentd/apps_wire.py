"""The internal wire between agentd and the applications runner (pure: framing and models only).

agentd (sandbox container, uid 1000) asks the applications runner (the desktop
applications' zone, uid 1001, PID 1 there; :mod:`deskpod.agentd.apps_runner`) to start a
desktop application or to clear the zone, over TCP on :data:`APPS_PORT`: one connection,
one request, one reply, framed as the workspace runner's wire
(:mod:`deskpod.agentd.runner_frames`). Replies come from an untrusted zone: agentd refuses
them over :data:`~deskpod.agentd.runner_frames.MAX_RUNNER_REPLY_BYTES` and validates each
with these models; errors travel as the closed envelope
(:class:`~deskpod.agentd.runner_wire.RunnerError`).

Requests: :class:`AppsOpenRequest` (start one application with a display grant of its
own), :class:`AppsAccessibleRequest` (read native controls from the applications'
accessibility trees), :class:`AppsClipboardRequest` (read or own the zone's clipboard),
:class:`AppsSnapshotRequest` and :class:`AppsRestoreRequest` (pack the zone's home for a
snapshot, write one back: :mod:`deskpod.agentd.zone_home`),
:class:`~deskpod.agentd.runner_wire.RunnerResetRequest` (kill every process of the zone, empty
its home and ``/tmp``) and :class:`~deskpod.agentd.runner_wire.RunnerPingRequest`. Replies:
:class:`AppsOpened`, :class:`AppsAccessible`, :class:`AppsClipboard`, :class:`AppsSnapshot`,
:class:`AppsRestored`,
:class:`~deskpod.agentd.runner_wire.RunnerResetDone`, :class:`~deskpod.agentd.runner_wire.RunnerPong`,
:class:`~deskpod.agentd.runner_wire.RunnerError`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Field, TypeAdapter

from deskpod.agentd.runner_wire import (
    RunnerError,
    RunnerPingRequest,
    RunnerPong,
    RunnerResetDone,
    RunnerResetRequest,
    X11Grant,
)
from deskpod.protocol import MAX_CLIPBOARD_CHARS, MAX_NATIVE_NODES, MAX_SEED_ARCHIVE_BYTES, NativeDialog, NativeNode, OpenApp
from deskpod.protocol.windows import MAX_WINDOW_LABEL_CHARS
from deskpod.protocol._base import STRICT

__all__ = ["APPS_PORT", "AppsAccessible", "AppsAccessibleRequest", "AppsClipboard", "AppsClipboardRequest",
           "AppsOpenRequest", "AppsOpened", "AppsReplyModel", "AppsRequestModel", "AppsRestoreRequest", "AppsRestored",
           "AppsSnapshot", "AppsSnapshotRequest", "ScreenBox", "parse_apps_reply", "parse_apps_request"]

APPS_PORT: Final = 8771
"""TCP port the applications runner listens on (on the sandbox network only)."""


class AppsOpenRequest(BaseModel):
    """Start ``action``'s application on the display ``x11`` grants (its own untrusted cookie)."""

    model_config = STRICT
    type: Literal["open"] = "open"
    action: OpenApp
    x11: X11Grant


class AppsOpened(BaseModel):
    """An application started: ``pid`` in the zone's PID namespace."""

    model_config = STRICT
    type: Literal["opened"] = "opened"
    pid: Annotated[int, Field(ge=1)]


_Coord = Annotated[int, Field(strict=True, ge=-(1 << 20), le=1 << 20)]
ScreenBox = Annotated[list[_Coord], Field(min_length=4, max_length=4)]
"""[x0, y0, x1, y1] in screen pixels."""


class AppsAccessibleRequest(BaseModel):
    """Read native controls (:mod:`deskpod.agentd.atspi_reader`): the one at ``point`` (screen
    pixels) in the application window whose box is ``window`` (and title ``window_title``: the X
    window's); the focused one in the window whose box is ``focus_window`` (title
    ``focus_title``); with ``summary``, at most ``max_nodes`` nodes of that window's tree."""

    model_config = STRICT
    type: Literal["accessible"] = "accessible"
    point: Annotated[list[_Coord], Field(min_length=2, max_length=2)] | None = None
    window: ScreenBox | None = None
    window_title: Annotated[str, Field(max_length=MAX_WINDOW_LABEL_CHARS)] | None = None
    focus_window: ScreenBox | None = None
    focus_title: Annotated[str, Field(max_length=MAX_WINDOW_LABEL_CHARS)] | None = None
    summary: bool = False
    max_nodes: Annotated[int, Field(strict=True, ge=0, le=MAX_NATIVE_NODES)] = MAX_NATIVE_NODES


class AppsAccessible(BaseModel):
    """What the accessibility trees answered: ``at``, ``focused`` (``None``: none found),
    ``nodes`` (the summary, depth first), ``truncated`` (the tree had more than was read) and
    ``dialog`` (the focused window, when it is a dialog).
    Boxes in screen pixels; every text the applications' own words."""

    model_config = STRICT
    type: Literal["accessible"] = "accessible"
    at: NativeNode | None = None
    focused: NativeNode | None = None
    nodes: Annotated[list[NativeNode], Field(max_length=MAX_NATIVE_NODES)] = []
    truncated: bool = False
    dialog: NativeDialog | None = None


class AppsClipboardRequest(BaseModel):
    """Read the zone's clipboard (``text`` ``None``) or own it with ``text``, as an X client of
    the zone on the display ``x11`` grants (:mod:`deskpod.agentd.zone_clipboard`)."""

    model_config = STRICT
    type: Literal["clipboard"] = "clipboard"
    x11: X11Grant
    text: Annotated[str, Field(max_length=MAX_CLIPBOARD_CHARS)] | None = None


class AppsClipboard(BaseModel):
    """The zone's clipboard's ``text`` (after a read; ``None`` after a write). Untrusted."""

    model_config = STRICT
    type: Literal["clipboard"] = "clipboard"
    text: Annotated[str, Field(max_length=MAX_CLIPBOARD_CHARS)] | None = None


_HomeArchive = Annotated[str, Field(max_length=(MAX_SEED_ARCHIVE_BYTES + 2) // 3 * 4, pattern=r"^[A-Za-z0-9+/=]*$")]
"""The zone's home as a base64 gzip'd tar (:mod:`deskpod.agentd.zone_home`)."""


class AppsSnapshotRequest(BaseModel):
    """Pack the zone's home for a snapshot."""

    model_config = STRICT
    type: Literal["snapshot"] = "snapshot"


class AppsSnapshot(BaseModel):
    """The zone's home, ``archive`` (untrusted: the zone's own files)."""

    model_config = STRICT
    type: Literal["snapshot"] = "snapshot"
    archive: _HomeArchive


class AppsRestoreRequest(BaseModel):
    """Write a snapshot's ``archive`` of the zone's home back over it."""

    model_config = STRICT
    type: Literal["restore"] = "restore"
    archive: _HomeArchive


class AppsRestored(BaseModel):
    """The zone's home was restored: ``files`` written."""

    model_config = STRICT
    type: Literal["restored"] = "restored"
    files: Annotated[int, Field(strict=True, ge=0)]


AppsRequest = Annotated[AppsOpenRequest | AppsAccessibleRequest | AppsClipboardRequest | AppsSnapshotRequest
                        | AppsRestoreRequest | RunnerResetRequest | RunnerPingRequest, Field(discriminator="type")]
"""Any request agentd sends the applications runner."""

AppsReply = Annotated[AppsOpened | AppsAccessible | AppsClipboard | AppsSnapshot | AppsRestored | RunnerResetDone
                      | RunnerPong | RunnerError, Field(discriminator="type")]
"""Any reply of the applications runner."""

_REQUEST: TypeAdapter[Any] = TypeAdapter(AppsRequest)
_REPLY: TypeAdapter[Any] = TypeAdapter(AppsReply)


AppsRequestModel = (AppsOpenRequest | AppsAccessibleRequest | AppsClipboardRequest | AppsSnapshotRequest
                    | AppsRestoreRequest | RunnerResetRequest | RunnerPingRequest)
"""Any request, as one type."""

AppsReplyModel = (AppsOpened | AppsAccessible | AppsClipboard | AppsSnapshot | AppsRestored | RunnerResetDone
                  | RunnerPong | RunnerError)
"""Any reply, as one type."""


def parse_apps_request(payload: bytes) -> AppsRequestModel:
    """Validate a request frame's payload.

    Raises:
        pydantic.ValidationError: not a valid request.
    """
    result: AppsRequestModel = _REQUEST.validate_json(payload)
    return result


def parse_apps_reply(payload: bytes) -> AppsReplyModel:
    """Validate a reply frame's payload (untrusted: it comes from the applications' zone).

    Raises:
        pydantic.ValidationError: not a valid reply.
    """
    result: AppsReplyModel = _REPLY.validate_json(payload)
    return result
