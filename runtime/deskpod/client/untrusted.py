"""Host-side checks of what a sandbox sends: the controller trusts nothing from it.

Code the agent runs can take over everything inside the sandbox, the daemon
included, so a reply may be written by an attacker. Every field the host uses in a
file name, a path, a command line, a log or a page has to be safe whatever the
sandbox says. The checks happen once, at the client's boundary
(:meth:`deskpod.client.SandboxClient.request`), in two layers:

1. :func:`deskpod.protocol.parse_server_message` validates the message against the
   reply models, whose every string has a length cap, every hash a pattern and every
   list a count cap (``MAX_URL_CHARS``, ``MAX_TITLE_CHARS``, ``MAX_TABS``... in
   :mod:`deskpod.protocol`), and refuses lone UTF-16 surrogates.
2. :func:`check_result` checks what needs the request or the bytes: the reply
   answers this request with the kind of output it asks for, no more page text,
   accessibility nodes, timings, file content or command output than asked for, no
   element snapshot or page log (console, network) it did not ask for, and
   every image is what it claims (:func:`screenshot_bytes`): its SHA-256 recomputed
   from the bytes, its format and size read by Pillow from the bytes, its pixel count
   checked before anything is decoded.

A failed check raises :class:`~deskpod.errors.BadReplyError`; the client then closes
the connection, so a run stops with that reason instead of going on with a sandbox
that lies. Consumers still never take a file name from a reply:
:class:`~deskpod.controller.audit_log.ScreenshotStore` names files by the hash it
computes itself and by a fixed extension per format.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import posixpath
import warnings
from typing import Any, overload

from deskpod.errors import BadReplyError
from deskpod.protocol import (
    MAX_SCREENSHOT_BYTES,
    MAX_SCREENSHOT_PIXELS,
    REPLY_TYPES,
    ActReply,
    ActRequest,
    AnyReply,
    AnyRequest,
    AnyWorkspaceReply,
    CleanRoomRequest,
    CleanRoomRun,
    ConfigureReply,
    ConfigureRequest,
    EgressReply,
    EgressRequest,
    PermissionsReply,
    PermissionsRequest,
    DirListing,
    ExecOutput,
    ExecRequest,
    FileContent,
    ListDirRequest,
    NavigateReply,
    NavigateRequest,
    Observation,
    ObserveOptions,
    ReadFileRequest,
    ResetReply,
    ResetRequest,
    Result,
    RunTestsOutput,
    RunTestsRequest,
    Screenshot,
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceManifest,
    WorkspaceManifestRequest,
    WorkspaceRequest,
)

__all__ = ["IMAGE_EXTENSIONS", "OUTPUT_SLACK_CHARS", "OUTPUT_SLACK_LINES", "check_result", "screenshot_bytes"]

IMAGE_EXTENSIONS: dict[str, str] = {"png": "png", "jpeg": "jpeg", "webp": "webp"}
"""The file extension the host uses for each screenshot format (a fixed set: a
reply's ``format`` is one of these keys or the reply is refused)."""

_PILLOW_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}

OUTPUT_SLACK_CHARS = 1024
"""Characters a capped text output may exceed its cap by (the daemon's truncation
marker between head and tail)."""

OUTPUT_SLACK_LINES = 4
"""Line breaks an exec's or test run's output may exceed its line cap by (the marker's)."""


def _refuse(reason: str, message: str) -> BadReplyError:
    return BadReplyError(f"the sandbox sent a bad reply: {message}", detail={"reason": reason})


def screenshot_bytes(shot: Screenshot) -> bytes:
    """Decode a screenshot and check that it is what it claims.

    Args:
        shot: a screenshot from a reply (already validated by the reply model).

    Returns:
        The image bytes (PNG, JPEG or WebP, ``shot.width`` × ``shot.height``).

    Raises:
        BadReplyError: ``data`` is not base64 or over :data:`~deskpod.protocol.MAX_SCREENSHOT_BYTES`
            (reason ``"bad_image"``), the claimed size is over
            :data:`~deskpod.protocol.MAX_SCREENSHOT_PIXELS` (``"too_many_pixels"``),
            ``sha256`` is not the bytes' (``"sha256_mismatch"``), or Pillow reads
            another format or size from the bytes, or cannot decode them (``"bad_image"``).
    """
    if shot.width * shot.height > MAX_SCREENSHOT_PIXELS:
        raise _refuse("too_many_pixels", f"a {shot.width}x{shot.height} screenshot is over "
                      f"{MAX_SCREENSHOT_PIXELS} pixels")
    try:
        data = base64.b64decode(shot.data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _refuse("bad_image", "the screenshot's data is not base64") from exc
    if len(data) > MAX_SCREENSHOT_BYTES:
        raise _refuse("bad_image", f"a screenshot of {len(data)} bytes is over {MAX_SCREENSHOT_BYTES}")
    if hashlib.sha256(data).hexdigest() != shot.sha256:
        raise _refuse("sha256_mismatch", "the screenshot's sha256 is not the SHA-256 of its bytes")
    _check_image(data, shot)
    return data


def _jpeg_check_size(size: tuple[int, int]) -> tuple[int, int]:
    """The size a JPEG is decoded at to check it: 1/8 of each side (libjpeg's smallest DCT
    scaling, https://libjpeg-turbo.org/Documentation/OfficialLibjpegDocumentation,
    "scale_num/scale_denom"). libjpeg still reads every marker and entropy-decodes every
    block at that scale, so what a full decode refuses (a cut stream, a damaged scan or
    table) is refused the same (tests/unit/test_untrusted_images.py); the full-size
    inverse DCT and colour conversion, which cannot fail on decoded blocks, are skipped
    (a 1280x800 screen: 0.5 ms instead of 1.8)."""
    return max(1, size[0] // 8), max(1, size[1] // 8)


def _check_image(data: bytes, shot: Screenshot) -> None:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[_PILLOW_FORMATS[shot.format]]) as image:
                # Sizes first, from the header: nothing is decoded before they are known good.
                if image.size != (shot.width, shot.height):
                    raise _refuse("bad_image", f"the {shot.format} image is {image.size[0]}x{image.size[1]}, "
                                  f"the reply says {shot.width}x{shot.height}")
                if shot.format == "jpeg":
                    image.draft(image.mode, _jpeg_check_size(image.size))
                image.load()
    except BadReplyError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning,
            MemoryError) as exc:
        raise _refuse("bad_image", f"the screenshot is not a readable {shot.format} image: "
                      f"{type(exc).__name__}") from exc


def _check_observation(observation: Observation, options: ObserveOptions, actions: int) -> None:
    for shot in (observation.screenshot, observation.zoom):
        if shot is not None:
            screenshot_bytes(shot)
    if observation.page_text is not None and len(observation.page_text) > options.max_text_chars:
        raise _refuse("over_request", f"{len(observation.page_text)} characters of page text, "
                      f"{options.max_text_chars} asked for")
    if observation.accessibility is not None and len(observation.accessibility) > options.max_ax_nodes:
        raise _refuse("over_request", f"{len(observation.accessibility)} accessibility nodes, "
                      f"{options.max_ax_nodes} asked for")
    if len(observation.timings) > actions:
        raise _refuse("over_request", f"{len(observation.timings)} action timings for {actions} actions")
    if observation.snapshot is not None and (not options.snapshot
                                             or observation.snapshot.count("\n") >= options.max_ax_nodes):
        raise _refuse("over_request", "an element snapshot that was not asked for, or longer than asked")
    if observation.windows is not None and not options.windows:
        raise _refuse("over_request", "a list of windows that was not asked for")
    if observation.element_ref_point is not None and options.element_ref is None:
        raise _refuse("over_request", "an element ref's point that was not asked for")
    for log, asked in ((observation.console, options.console), (observation.network, options.network)):
        if log is not None and not asked:
            raise _refuse("over_request", f"a page log that was not asked for ({type(log).__name__})")


def _over(what: str, size: int, cap: int) -> None:
    if size > cap + OUTPUT_SLACK_CHARS:
        raise _refuse("over_request", f"{what} of {size} characters, {cap} asked for")


def _over_lines(what: str, text: str, cap: int) -> None:
    lines = text.count("\n")
    if lines > cap + OUTPUT_SLACK_LINES:
        raise _refuse("over_request", f"{what} of {lines} lines, {cap} asked for")


def _check_workspace(request: Any, output: Any) -> None:
    expected = REPLY_TYPES[type(request)].model_fields["workspace"].annotation
    if not isinstance(output, expected):  # type: ignore[arg-type]
        raise _refuse("wrong_kind", f"a {type(output).__name__} answers a {request.type} request")
    if isinstance(request, ReadFileRequest) and isinstance(output, FileContent):
        _over("file content", len(output.content), request.max_bytes)
    elif isinstance(request, ListDirRequest) and isinstance(output, DirListing):
        if len(output.entries) > request.max_entries:
            raise _refuse("over_request", f"{len(output.entries)} entries, {request.max_entries} asked for")
    elif isinstance(request, ExecRequest) and isinstance(output, ExecOutput):
        _over("stdout", len(output.stdout), request.max_output_bytes)
        _over("stderr", len(output.stderr), request.max_output_bytes)
        _over_lines("stdout", output.stdout, request.max_output_lines)
        _over_lines("stderr", output.stderr, request.max_output_lines)
    elif isinstance(request, RunTestsRequest) and isinstance(output, RunTestsOutput):
        _over("the test output's tail", len(output.tail), request.tail_bytes)
        _over_lines("the test output's tail", output.tail, request.tail_lines)
    elif isinstance(request, WorkspaceDiffRequest) and isinstance(output, WorkspaceDiff):
        _over("the diff", len(output.diff), request.max_bytes)
    elif isinstance(request, WorkspaceManifestRequest) and isinstance(output, WorkspaceManifest):
        _check_manifest(request, output)
    elif isinstance(request, CleanRoomRequest) and isinstance(output, CleanRoomRun):
        _over("the clean-room output", len(output.output), request.output_bytes)
        if output.report is not None:
            _over("the test report", len(output.report), request.max_report_bytes)


def _check_manifest(request: WorkspaceManifestRequest, output: WorkspaceManifest) -> None:
    """A manifest lists each path once; asked-for paths only, with at most the content asked for."""
    paths = [entry.path for entry in output.entries]
    if len(set(paths)) != len(paths):
        raise _refuse("over_request", "the manifest lists a path twice")
    for path in paths:
        if path.startswith("/") or posixpath.normpath(path) != path or path == ".." or path.startswith("../"):
            raise _refuse("bad_path", f"the manifest lists a path outside the workspace: {path[:200]!r}")
    with_content = [entry.content for entry in output.entries if entry.content is not None]
    if request.paths is None:
        if with_content:
            raise _refuse("over_request", "a manifest without paths carries file content")
        return
    if not set(paths) <= set(request.paths):
        raise _refuse("over_request", "the manifest lists paths that were not asked for")
    _over("the manifest's content", sum(len(c) * 3 // 4 for c in with_content), request.max_content_bytes)


@overload
def check_result(request: ActRequest, result: Result) -> ActReply: ...
@overload
def check_result(request: NavigateRequest, result: Result) -> NavigateReply: ...
@overload
def check_result(request: ResetRequest, result: Result) -> ResetReply: ...
@overload
def check_result(request: ConfigureRequest, result: Result) -> ConfigureReply: ...
@overload
def check_result(request: EgressRequest, result: Result) -> EgressReply: ...
@overload
def check_result(request: PermissionsRequest, result: Result) -> PermissionsReply: ...
@overload
def check_result(request: WorkspaceRequest, result: Result) -> AnyWorkspaceReply: ...
def check_result(request: AnyRequest, result: Result) -> AnyReply:
    """Check that ``result`` answers ``request`` and holds nothing it should not.

    Args:
        request: the request sent.
        result: the reply received, already validated by the reply models.

    Returns:
        The reply as the model of ``request``'s reply (:data:`~deskpod.protocol.REPLY_TYPES`),
        holding ``result``'s payload.

    Raises:
        BadReplyError: the reply answers another id (reason ``"wrong_id"``), lacks the
            output the request asks for or carries another kind (``"wrong_kind"``),
            carries more than asked for (``"over_request"``), or an image is not what
            it claims (see :func:`screenshot_bytes`).
    """
    if result.id != request.id:
        raise _refuse("wrong_id", f"a reply for another request ({result.id[:64]!r}) answers {request.id!r}")
    reply_type = REPLY_TYPES[type(request)]
    if isinstance(request, (ActRequest, NavigateRequest, ResetRequest)):
        if result.observation is None or result.workspace is not None:
            raise _refuse("wrong_kind", f"the reply to a {request.type} request has no observation")
        actions = len(request.actions) if isinstance(request, ActRequest) else 0
        _check_observation(result.observation, request.observe, actions)
        payload: dict[str, Any] = {"observation": result.observation}
    elif isinstance(request, ConfigureRequest):
        if result.model_size is None:
            raise _refuse("wrong_kind", "the reply to a configure request has no model_size")
        payload = {"model_size": result.model_size}
    elif isinstance(request, EgressRequest):
        if result.egress is None or result.observation is not None or result.workspace is not None:
            raise _refuse("wrong_kind", "the reply to an egress request has no egress state")
        if result.egress.allowed_domains != request.allowed_domains:
            raise _refuse("wrong_kind", "the reply to an egress request names another allowlist")
        payload = {"egress": result.egress}
    elif isinstance(request, PermissionsRequest):
        if result.permissions is None or result.observation is not None or result.workspace is not None:
            raise _refuse("wrong_kind", "the reply to a permissions request has no permission grants")
        if result.permissions != request.grants:
            raise _refuse("wrong_kind", "the reply to a permissions request names other grants")
        payload = {"permissions": result.permissions}
    else:
        if result.workspace is None or result.observation is not None:
            raise _refuse("wrong_kind", f"the reply to a {request.type} request has no workspace output")
        _check_workspace(request, result.workspace)
        payload = {"workspace": result.workspace}
    return reply_type.model_construct(id=result.id, **payload)  # type: ignore[return-value]
