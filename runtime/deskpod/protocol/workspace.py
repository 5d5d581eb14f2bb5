"""Workspace tools (code agents): requests and their outputs.

Requests on the sandbox's workspace directory (``/workspace``): seed it from an
archive the host sends, list, read, write, edit and patch files, run commands
and the test command, and diff it against its seed. A path is relative to the
workspace root (an absolute path is accepted only when it lies inside it); the
daemon resolves it, symlinks included, and refuses anything that leads out
(code ``path_denied``). These requests never take the X11 executor, so a GUI
connection and a code connection work side by side; one workspace request runs
at a time per sandbox (another one meanwhile gets ``busy``). The reply is a
:class:`~deskpod.protocol.replies.Reply` whose ``workspace`` field carries the tool's output
(one reply model per request, e.g. :class:`~deskpod.protocol.replies.ExecReply`). Sizes are
bytes, durations float seconds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import (
    DEFAULT_EXEC_OUTPUT_BYTES,
    DEFAULT_EXEC_OUTPUT_LINES,
    DEFAULT_READ_BYTES,
    MAX_EXEC_OUTPUT_BYTES,
    MAX_EXEC_OUTPUT_LINES,
    MAX_EXEC_STREAM_BYTES,
    MAX_EXEC_TIMEOUT_S,
    MAX_LIST_ENTRIES,
    MAX_MANIFEST_CONTENT_BYTES,
    MAX_PATH_CHARS,
    MAX_READ_BYTES,
    MAX_REPLY_PATHS,
    MAX_SEED_ARCHIVE_BYTES,
    MAX_TEST_REPORT_BYTES,
)

__all__ = [
    "ApplyPatchRequest",
    "ChangedFile",
    "CleanRoomRequest",
    "CleanRoomRun",
    "DirEntry",
    "DirListing",
    "EditFileRequest",
    "ExecOutput",
    "ExecRequest",
    "FileContent",
    "FileWritten",
    "ListDirRequest",
    "ManifestEntry",
    "PatchApplied",
    "ReadFileRequest",
    "RunTestsOutput",
    "RunTestsRequest",
    "SeedWorkspaceRequest",
    "WORKSPACE_REQUEST_TYPES",
    "WorkspaceDiff",
    "WorkspaceDiffRequest",
    "WorkspaceManifest",
    "WorkspaceManifestRequest",
    "WorkspaceOutput",
    "WorkspacePath",
    "WorkspaceRequest",
    "WorkspaceSeeded",
    "WriteFileRequest",
]

_Id = Annotated[str, Field(min_length=1, max_length=128)]
WorkspacePath = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
"""A path in the workspace: relative to its root, or absolute inside it. Checked by the daemon."""
_Arg = Annotated[str, Field(max_length=131_072, pattern=r"^[^\x00]*$")]
_Argv = Annotated[list[_Arg], Field(min_length=1, max_length=1024)]
_ExecTimeout = Annotated[float, Field(gt=0.0, le=MAX_EXEC_TIMEOUT_S, allow_inf_nan=False)]
_OutputCap = Annotated[int, Field(strict=True, ge=1, le=MAX_EXEC_OUTPUT_BYTES)]
_StreamBytes = Annotated[int, Field(strict=True, ge=1, le=MAX_EXEC_STREAM_BYTES)]
_StreamLines = Annotated[int, Field(strict=True, ge=1, le=MAX_EXEC_OUTPUT_LINES)]
_Domain = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^\.?[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*\.?$")
]
_ReplyPath = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
"""A path in a workspace reply (relative to the workspace root)."""
_Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_Archive = Annotated[str, Field(max_length=4 * (MAX_SEED_ARCHIVE_BYTES // 3 + 1))]
"""A gzip'd tar as the wire carries it: base64, at most :data:`MAX_SEED_ARCHIVE_BYTES` before base64."""
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

    model_config = STRICT
    type: Literal["seed_workspace"]
    id: _Id
    archive: _Archive | None = None
    clear: bool = True
    git_init: bool = True


class ListDirRequest(BaseModel):
    """List a folder's entries (not recursive), sorted by name, at most ``max_entries``."""

    model_config = STRICT
    type: Literal["list_dir"]
    id: _Id
    path: WorkspacePath = "."
    max_entries: Annotated[int, Field(strict=True, ge=1, le=MAX_LIST_ENTRIES)] = 1000


class ReadFileRequest(BaseModel):
    """Read a UTF-8 text file, from line ``start_line`` (1-based).

    At most ``max_lines`` lines (``None``: no line limit) and ``max_bytes`` bytes of
    content are returned; the reply says whether more follows.
    """

    model_config = STRICT
    type: Literal["read_file"]
    id: _Id
    path: WorkspacePath
    start_line: Annotated[int, Field(strict=True, ge=1)] = 1
    max_lines: Annotated[int, Field(strict=True, ge=1)] | None = None
    max_bytes: Annotated[int, Field(strict=True, ge=1, le=MAX_READ_BYTES)] = DEFAULT_READ_BYTES


class WriteFileRequest(BaseModel):
    """Create or replace a file with ``content`` (UTF-8); ``create_dirs``: make missing folders."""

    model_config = STRICT
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

    model_config = STRICT
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

    model_config = STRICT
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
    ``network``: add the sandbox's egress proxy settings, carrying a credential
    that the proxy accepts only while this command runs (without ``network`` the
    proxy refuses the command's requests, whatever it sets). ``allowed_domains``:
    the hosts (and their subdomains) a ``network`` command may reach, within the
    proxy's own allowlist (the controller sends the task's list); ``None``: the
    proxy's allowlist alone. Each of stdout and stderr is kept apart and capped at
    ``max_output_bytes`` bytes and ``max_output_lines`` lines (defaults
    :data:`DEFAULT_EXEC_OUTPUT_BYTES`, :data:`DEFAULT_EXEC_OUTPUT_LINES`; at most
    :data:`MAX_EXEC_STREAM_BYTES`, :data:`MAX_EXEC_OUTPUT_LINES`), half head and half
    tail around a marker stating the bytes and line breaks omitted; binary output
    is replaced by a marker with its size and a hex preview, and control characters
    are escaped (:mod:`deskpod.agentd.workspace.output`). ``display``: the command
    may open windows on the sandbox's display (``DISPLAY`` and ``XAUTHORITY`` are
    set for it alone); the task must grant it, and a sandbox that grants no display
    answers ``display_unavailable``. Without it the command has no X server.
    """

    model_config = STRICT
    type: Literal["exec"]
    id: _Id
    argv: _Argv | None = None
    cmd: _Arg | None = None
    cwd: WorkspacePath = "."
    timeout_s: _ExecTimeout = 30.0
    max_output_bytes: _StreamBytes = DEFAULT_EXEC_OUTPUT_BYTES
    max_output_lines: _StreamLines = DEFAULT_EXEC_OUTPUT_LINES
    network: bool = False
    allowed_domains: Annotated[list[_Domain], Field(max_length=100)] | None = None
    display: bool = False

    @model_validator(mode="after")
    def _one_command(self) -> ExecRequest:
        if (self.argv is None) == (self.cmd is None):
            raise ValueError("give exactly one of 'argv' and 'cmd'")
        return self


class RunTestsRequest(BaseModel):
    """Run the project's test command (``argv``, chosen by the controller) and report pass/fail.

    Runs like :class:`ExecRequest` with stdout and stderr merged; ``passed`` is
    true when it exits 0 before ``timeout_s``. ``tail_bytes``/``tail_lines``: how
    much of the end of the output to return (cleaned like an exec's). ``display``: as :attr:`ExecRequest.display` (the
    command may open windows on the sandbox's display; the task must grant it).
    """

    model_config = STRICT
    type: Literal["run_tests"]
    id: _Id
    argv: _Argv
    cwd: WorkspacePath = "."
    timeout_s: _ExecTimeout = 300.0
    tail_bytes: _StreamBytes = 8_000
    tail_lines: _StreamLines = DEFAULT_EXEC_OUTPUT_LINES
    display: bool = False


class WorkspaceDiffRequest(BaseModel):
    """Summarize the changes since ``base`` (a commit; ``None``: ``HEAD``), new files included.

    Needs the workspace to be a git repository (``seed_workspace`` makes one). The
    diff text is capped at ``max_bytes``; the agent's git index is not touched.
    """

    model_config = STRICT
    type: Literal["workspace_diff"]
    id: _Id
    base: Annotated[str, Field(pattern=r"^[0-9a-f]{7,64}$")] | None = None
    max_bytes: _OutputCap = 262_144


class WorkspaceManifestRequest(BaseModel):
    """The controller's: every file, symlink and other entry of the workspace as it is on disk.

    The walk applies no ignore rule (no ``.gitignore``, no ``.git/info/exclude``, no
    excludes file: it does not use git) and follows no symlink; only the root ``.git``
    folder is left out. ``paths``: ``None`` lists every entry without content; a list
    returns only those entries, each regular file with its content, until
    ``max_content_bytes`` in all are used (the rest are named in ``content_omitted``).
    """

    model_config = STRICT
    type: Literal["workspace_manifest"]
    id: _Id
    paths: Annotated[list[_ReplyPath], Field(max_length=MAX_REPLY_PATHS)] | None = None
    max_content_bytes: Annotated[int, Field(strict=True, ge=0, le=MAX_MANIFEST_CONTENT_BYTES)] = (
        MAX_MANIFEST_CONTENT_BYTES
    )


class CleanRoomRequest(BaseModel):
    """The controller's: run a command in a fresh folder the agent never touched.

    The workspace runner first kills every process of the agent's zone, then makes
    a new folder ``{room}`` (a random name, created exclusively, outside the
    workspace) holding ``src`` (``archive`` unpacked: the project, and the
    command's cwd), ``home`` (``HOME``) and ``tmp`` (``TMPDIR``). In ``argv`` every
    ``{room}`` is replaced by that folder's absolute path. The environment is the
    fixed minimal one of :class:`ExecRequest` (no proxy); output is stdout and
    stderr merged, head and tail kept within ``output_bytes``. After the command,
    ``{room}/report.xml`` (if the command wrote one; a regular file, at most
    ``max_report_bytes``) is returned as text, and the folder is removed.
    ``display``: as :attr:`ExecRequest.display`.
    """

    model_config = STRICT
    type: Literal["clean_room"]
    id: _Id
    archive: _Archive
    argv: _Argv
    timeout_s: _ExecTimeout = 300.0
    output_bytes: _OutputCap = 65_536
    max_report_bytes: Annotated[int, Field(strict=True, ge=1, le=MAX_TEST_REPORT_BYTES)] = MAX_TEST_REPORT_BYTES
    display: bool = False


WorkspaceRequest = (
    SeedWorkspaceRequest
    | ListDirRequest
    | ReadFileRequest
    | WriteFileRequest
    | EditFileRequest
    | ApplyPatchRequest
    | ExecRequest
    | RunTestsRequest
    | WorkspaceDiffRequest
    | WorkspaceManifestRequest
    | CleanRoomRequest
)
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
    "workspace_manifest": WorkspaceManifestRequest,
    "clean_room": CleanRoomRequest,
}
"""Request ``type`` → model, for the workspace requests."""


class WorkspaceSeeded(BaseModel):
    """The workspace after ``seed_workspace``: ``files`` unpacked, ``size`` bytes, ``git_head`` (baseline commit)."""

    model_config = STRICT
    type: Literal["workspace_seeded"] = "workspace_seeded"
    files: Annotated[int, Field(strict=True, ge=0)]
    size: Annotated[int, Field(strict=True, ge=0)]
    git_head: _GitCommit | None = None


class DirEntry(BaseModel):
    """One folder entry. ``size``: bytes (the link's own for a symlink). ``target``: a symlink's target as stored."""

    model_config = STRICT
    name: Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
    kind: Literal["file", "dir", "symlink", "other"]
    size: Annotated[int, Field(strict=True, ge=0)]
    target: _ReplyPath | None = None


class DirListing(BaseModel):
    """A folder's entries. ``path``: relative to the workspace root (``"."`` for the root)."""

    model_config = STRICT
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

    model_config = STRICT
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

    model_config = STRICT
    type: Literal["file_written"] = "file_written"
    path: _ReplyPath
    size: int
    created: bool


class PatchApplied(BaseModel):
    """A patch applied: the ``files`` it touched (relative paths) and ``git apply``'s messages."""

    model_config = STRICT
    type: Literal["patch_applied"] = "patch_applied"
    files: Annotated[list[_ReplyPath], Field(max_length=MAX_REPLY_PATHS)]
    output: str = ""


class ExecOutput(BaseModel):
    """How a command ended.

    ``exit_code``: its exit status, ``None`` when a signal ended it (``signal``
    names it). ``timed_out``: killed at the timeout. ``stdout``/``stderr``: text
    with every control character but ``\n`` and ``\t`` and every non-UTF-8 byte
    escaped, each cut to head + marker + tail when over the request's caps, or a
    binary marker (``stdout_binary``/``stderr_binary``);
    ``stdout_bytes``/``stderr_bytes``: how much was written in all;
    ``stdout_lines``/``stderr_lines``: its line breaks in all.
    """

    model_config = STRICT
    type: Literal["exec_output"] = "exec_output"
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    duration_s: float
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_lines: int = 0
    stderr_lines: int = 0
    stdout_binary: bool = False
    stderr_binary: bool = False
    truncated: bool = False


class RunTestsOutput(BaseModel):
    """How the test command ended. ``tail``: the end of its merged output; ``output_bytes``: all of it."""

    model_config = STRICT
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

    model_config = STRICT
    path: _ReplyPath
    status: Literal["added", "modified", "deleted", "renamed", "copied", "type_changed", "other"]
    old_path: _ReplyPath | None = None


class WorkspaceDiff(BaseModel):
    """The workspace's changes since ``base`` (a full commit id).

    ``diff``: unified diff text, cut to the requested cap (``truncated``);
    ``diff_bytes``: its full size.
    """

    model_config = STRICT
    type: Literal["workspace_diff"] = "workspace_diff"
    base: _GitCommit
    files: Annotated[list[ChangedFile], Field(max_length=MAX_REPLY_PATHS)]
    diff: str
    diff_bytes: int
    truncated: bool = False


class ManifestEntry(BaseModel):
    """One workspace entry (not a folder) as it is on disk.

    ``kind``: ``other`` is a FIFO, socket or device (never opened). ``size``: bytes.
    ``executable``: a regular file with an execute bit. ``sha256``: of a file's
    bytes or a symlink's target (``None`` for ``other``). ``target``: a symlink's
    target as stored. ``content``: base64 of a file's bytes, only when asked for.
    """

    model_config = STRICT
    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
    kind: Literal["file", "symlink", "other"]
    size: Annotated[int, Field(strict=True, ge=0)]
    executable: bool = False
    sha256: _Sha256 | None = None
    target: _ReplyPath | None = None
    content: Annotated[str, Field(max_length=4 * (MAX_MANIFEST_CONTENT_BYTES // 3 + 1))] | None = None


class WorkspaceManifest(BaseModel):
    """The workspace's entries, sorted by path. ``truncated``: more than
    :data:`MAX_REPLY_PATHS` entries existed. ``content_omitted``: asked-for files
    whose content did not fit ``max_content_bytes``."""

    model_config = STRICT
    type: Literal["workspace_manifest"] = "workspace_manifest"
    entries: Annotated[list[ManifestEntry], Field(max_length=MAX_REPLY_PATHS)]
    truncated: bool = False
    content_omitted: Annotated[list[_ReplyPath], Field(max_length=MAX_REPLY_PATHS)] = []


class CleanRoomRun(BaseModel):
    """How a clean-room command ended (see :class:`CleanRoomRequest`).

    ``exit_code``/``signal``/``timed_out``/``duration_s``: as :class:`ExecOutput`.
    ``output``: merged stdout and stderr, head + marker + tail; ``output_bytes``: all
    of it. ``report``: the text of ``{room}/report.xml`` (invalid UTF-8 replaced),
    ``None`` when the command wrote none; ``report_bytes``: its size;
    ``report_truncated``: it was larger than asked for and is cut. ``killed``:
    agent processes killed before the room was made. ``setup_s``: seconds spent
    making and filling the room.
    """

    model_config = STRICT
    type: Literal["clean_room_run"] = "clean_room_run"
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    duration_s: float
    output: str
    output_bytes: int
    report: str | None = None
    report_bytes: int = 0
    report_truncated: bool = False
    killed: int = 0
    setup_s: float = 0.0


WorkspaceOutput = Annotated[
    WorkspaceSeeded | DirListing | FileContent | FileWritten | PatchApplied | ExecOutput | RunTestsOutput
    | WorkspaceDiff | WorkspaceManifest | CleanRoomRun,
    Field(discriminator="type"),
]
"""The output of one workspace request, in its reply's ``workspace`` field."""
