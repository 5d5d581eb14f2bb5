"""The daemon's messages: hello, one reply type per request, the error envelope.

Every successful reply has ``"type": "result"`` and the request's ``id``, plus one
payload field: ``observation`` (act, navigate, reset), ``model_size`` (configure),
``egress`` (egress) or ``workspace`` (the workspace requests). :data:`REPLY_TYPES` maps each request
model to its reply model. A client reads a frame as the permissive :class:`Result`
first (it cannot know which request a frame answers before it has read the
``id``), then :func:`deskpod.client.untrusted.check_result` checks it against the request
and returns the reply model for it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT, RequestId
from deskpod.protocol.actions import Size
from deskpod.protocol.egress import EgressRequest, EgressState
from deskpod.protocol.permissions import PermissionGrants, PermissionsRequest
from deskpod.protocol.limits import MAX_SERVER_MESSAGE_BYTES, MIN_CLIENT_MESSAGE_BYTES, PROTOCOL_VERSION
from deskpod.protocol.observation import Observation
from deskpod.protocol.requests import ActRequest, ConfigureRequest, NavigateRequest, ResetRequest
from deskpod.protocol.workspace import (
    ApplyPatchRequest,
    CleanRoomRequest,
    CleanRoomRun,
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
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceManifest,
    WorkspaceManifestRequest,
    WorkspaceOutput,
    WorkspaceSeeded,
    WriteFileRequest,
)

__all__ = [
    "ActReply",
    "AnyReply",
    "AnyWorkspaceReply",
    "ApplyPatchReply",
    "CleanRoomReply",
    "ConfigureReply",
    "EditFileReply",
    "EgressReply",
    "ErrorBody",
    "ErrorReply",
    "ExecReply",
    "Hello",
    "ListDirReply",
    "NavigateReply",
    "PermissionsReply",
    "REPLY_TYPES",
    "ReadFileReply",
    "Reply",
    "ResetReply",
    "Result",
    "RunTestsReply",
    "SeedWorkspaceReply",
    "WorkspaceDiffReply",
    "WorkspaceManifestReply",
    "WriteFileReply",
]


class Hello(BaseModel):
    """First message the daemon sends on a new connection: the screen's size and the
    model space in force (pixels), and ``sandbox_id``: the daemon's identity, random at
    its start and kept across in-place resets, so that one sandbox is recognised
    whatever URL reaches it (``deskpod serve`` runs one session per ``sandbox_id``).
    ``max_message_bytes``: the longest reply the daemon sends on this connection: what
    the client declared in :data:`~deskpod.protocol.MESSAGE_SIZE_HEADER`, else
    :data:`~deskpod.protocol.MAX_SERVER_MESSAGE_BYTES`."""

    model_config = STRICT
    type: Literal["hello"] = "hello"
    protocol_version: str = PROTOCOL_VERSION
    screen: Size
    model_size: Size
    sandbox_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,127}$")]
    max_message_bytes: Annotated[
        int, Field(strict=True, ge=MIN_CLIENT_MESSAGE_BYTES, le=MAX_SERVER_MESSAGE_BYTES)
    ] = MAX_SERVER_MESSAGE_BYTES


class Result(BaseModel):
    """Any successful reply as read off the wire, before it is matched to its request.

    Exactly one payload field is set by a well-behaved daemon; ``None`` means the
    field is absent. :func:`deskpod.client.untrusted.check_result` refuses a reply whose
    payload does not fit the request and turns it into the request's reply model.
    """

    model_config = STRICT
    type: Literal["result"] = "result"
    id: RequestId
    observation: Observation | None = None
    model_size: Size | None = None
    egress: EgressState | None = None
    permissions: Annotated[PermissionGrants | None, Field(exclude_if=lambda grants: grants is None)] = None
    workspace: WorkspaceOutput | None = None


class Reply(BaseModel):
    """The fields every successful reply has: the tag and the request's ``id``."""

    model_config = STRICT
    type: Literal["result"] = "result"
    id: RequestId


class ActReply(Reply):
    """Reply to ``act``: the observation taken after the batch."""

    observation: Observation


class NavigateReply(Reply):
    """Reply to ``navigate``: the observation taken after the page loaded."""

    observation: Observation


class ResetReply(Reply):
    """Reply to ``reset``: the first observation of the fresh state."""

    observation: Observation


class ConfigureReply(Reply):
    """Reply to ``configure``: the model space now in force (pixels)."""

    model_size: Size


class EgressReply(Reply):
    """Reply to ``egress``: the browser's allowlist now in force."""

    egress: EgressState


class PermissionsReply(Reply):
    """Reply to ``permissions``: the grants now in force."""

    permissions: PermissionGrants


class SeedWorkspaceReply(Reply):
    """Reply to ``seed_workspace``."""

    workspace: WorkspaceSeeded


class ListDirReply(Reply):
    """Reply to ``list_dir``."""

    workspace: DirListing


class ReadFileReply(Reply):
    """Reply to ``read_file``."""

    workspace: FileContent


class WriteFileReply(Reply):
    """Reply to ``write_file``."""

    workspace: FileWritten


class EditFileReply(Reply):
    """Reply to ``edit_file``."""

    workspace: FileWritten


class ApplyPatchReply(Reply):
    """Reply to ``apply_patch``."""

    workspace: PatchApplied


class ExecReply(Reply):
    """Reply to ``exec``."""

    workspace: ExecOutput


class RunTestsReply(Reply):
    """Reply to ``run_tests``."""

    workspace: RunTestsOutput


class WorkspaceDiffReply(Reply):
    """Reply to ``workspace_diff``."""

    workspace: WorkspaceDiff


class WorkspaceManifestReply(Reply):
    """Reply to ``workspace_manifest``."""

    workspace: WorkspaceManifest


class CleanRoomReply(Reply):
    """Reply to ``clean_room``."""

    workspace: CleanRoomRun


AnyWorkspaceReply = (
    SeedWorkspaceReply
    | ListDirReply
    | ReadFileReply
    | WriteFileReply
    | EditFileReply
    | ApplyPatchReply
    | ExecReply
    | RunTestsReply
    | WorkspaceDiffReply
    | WorkspaceManifestReply
    | CleanRoomReply
)
"""The reply to any workspace request (its ``workspace`` field is the output)."""

AnyReply = (ActReply | NavigateReply | ResetReply | ConfigureReply | EgressReply | PermissionsReply
            | AnyWorkspaceReply)
"""The reply to any request."""

REPLY_TYPES: dict[type[BaseModel], type[Reply]] = {
    ActRequest: ActReply,
    NavigateRequest: NavigateReply,
    ResetRequest: ResetReply,
    ConfigureRequest: ConfigureReply,
    EgressRequest: EgressReply,
    PermissionsRequest: PermissionsReply,
    SeedWorkspaceRequest: SeedWorkspaceReply,
    ListDirRequest: ListDirReply,
    ReadFileRequest: ReadFileReply,
    WriteFileRequest: WriteFileReply,
    EditFileRequest: EditFileReply,
    ApplyPatchRequest: ApplyPatchReply,
    ExecRequest: ExecReply,
    RunTestsRequest: RunTestsReply,
    WorkspaceDiffRequest: WorkspaceDiffReply,
    WorkspaceManifestRequest: WorkspaceManifestReply,
    CleanRoomRequest: CleanRoomReply,
}
"""Request model → the model of its reply (one per request)."""


class ErrorBody(BaseModel):
    """The one error envelope of every error reply (websocket and HTTP).

    ``code``: one of the codes of the fixed table in :mod:`deskpod.errors`.
    ``message``: for humans. ``detail``: machine-readable specifics (empty when none).
    """

    model_config = STRICT
    code: Annotated[str, Field(max_length=64)]
    message: str
    detail: dict[str, Any] = {}


class ErrorReply(BaseModel):
    """A failed reply. ``id`` is ``None`` when the request's id could not be read."""

    model_config = STRICT
    type: Literal["error"] = "error"
    id: Annotated[str, Field(max_length=128)] | None
    error: ErrorBody
