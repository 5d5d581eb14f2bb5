"""The workspace verbs of :class:`~deskpod.client.sandbox.Sandbox` (code agents).

Each is one workspace request of the protocol (:mod:`deskpod.protocol.workspace`),
answered by its tool's output model: :meth:`~WorkspaceVerbs.seed`,
:meth:`~WorkspaceVerbs.list_dir`, :meth:`~WorkspaceVerbs.read_file`,
:meth:`~WorkspaceVerbs.write_file`, :meth:`~WorkspaceVerbs.edit_file`,
:meth:`~WorkspaceVerbs.apply_patch`, :meth:`~WorkspaceVerbs.exec`,
:meth:`~WorkspaceVerbs.run_tests`, :meth:`~WorkspaceVerbs.diff`. Paths are relative
to the workspace root (the daemon refuses any that leads out, ``path_denied``);
sizes are bytes, durations float seconds. These requests never wait for the GUI.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deskpod.client.wire import SandboxClient
from deskpod.errors import InvalidRequestError
from deskpod.protocol import (
    DEFAULT_EXEC_OUTPUT_BYTES,
    DEFAULT_EXEC_OUTPUT_LINES,
    DEFAULT_READ_BYTES,
    ApplyPatchRequest,
    DirListing,
    EditFileRequest,
    ExecOutput,
    ExecRequest,
    FileContent,
    FileWritten,
    ListDirRequest,
    ObserveOptions,
    PatchApplied,
    ReadFileRequest,
    RunTestsOutput,
    RunTestsRequest,
    SeedWorkspaceRequest,
    WorkspaceDiff,
    WorkspaceDiffRequest,
    WorkspaceSeeded,
    WriteFileRequest,
    first_error,
)

__all__ = ["ObserveLike", "WorkspaceVerbs", "build", "observe_options"]

M = TypeVar("M", bound=BaseModel)


def build(model: type[M], **fields: Any) -> M:
    """Validate a request (or a part of one) as the daemon will, before it is sent.

    Args:
        model: the protocol model.
        **fields: its fields (``type`` and ``id`` included for a request).

    Returns:
        The model.

    Raises:
        InvalidRequestError: a field is missing, of the wrong type or out of range.
    """
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise InvalidRequestError(f"{fields.get('type', model.__name__)}: {first_error(exc, empty='')}") from exc


ObserveLike = ObserveOptions | Mapping[str, Any] | None
"""What an observation holds, as the verbs' ``observe=`` takes it: an
:class:`~deskpod.protocol.ObserveOptions`, a mapping of its fields (``{"page_text": True}``),
or ``None`` for the defaults (a PNG screenshot and the browser state)."""


def observe_options(observe: ObserveLike) -> ObserveOptions | None:
    """``observe`` as the protocol's model, checked before anything is sent.

    Args:
        observe: see :data:`ObserveLike`.

    Returns:
        The options (``None``: the defaults).

    Raises:
        InvalidRequestError: a field is unknown, of the wrong type or out of range.
    """
    if observe is None or isinstance(observe, ObserveOptions):
        return observe
    return build(ObserveOptions, **dict(observe))


class WorkspaceVerbs:
    """The workspace verbs, on the connection :attr:`client` (a base of :class:`~deskpod.client.sandbox.Sandbox`)."""

    client: SandboxClient
    """The connection the requests go to."""

    async def seed(self, source: bytes | str | os.PathLike[str] | None, *, clear: bool = True,
                   git_init: bool = True) -> WorkspaceSeeded:
        """Reset the workspace and unpack an archive into it.

        Args:
            source: a gzip'd tar's bytes, or a host folder or ``.tar.gz`` file to pack
                (:func:`deskpod.controller.code_task.pack_workspace`); ``None``: no archive.
            clear: empty the workspace first.
            git_init: make it a git repository with everything committed as the baseline
                :meth:`diff` compares against, when it is not one.

        Returns:
            How many files and bytes were unpacked, and the baseline commit.

        Raises:
            WorkspaceError: the archive holds something that may not be unpacked.
        """
        if isinstance(source, (str, os.PathLike)):
            from deskpod.controller.code_task import pack_workspace

            source = pack_workspace(Path(source))
        archive = None if source is None else base64.b64encode(source).decode("ascii")
        req = build(SeedWorkspaceRequest, type="seed_workspace", id=self.client.next_id(), archive=archive,
                     clear=clear, git_init=git_init)
        return (await self.client.request(req)).workspace

    async def list_dir(self, path: str = ".", *, max_entries: int = 1000) -> DirListing:
        """List a workspace folder's entries (not recursive), sorted by name.

        Returns:
            At most ``max_entries`` entries (``truncated`` says whether more exist).

        Raises:
            PathDeniedError: the path leads out of the workspace.
        """
        req = build(ListDirRequest, type="list_dir", id=self.client.next_id(), path=path, max_entries=max_entries)
        return (await self.client.request(req)).workspace

    async def read_file(self, path: str, *, start_line: int = 1, max_lines: int | None = None,
                        max_bytes: int = DEFAULT_READ_BYTES) -> FileContent:
        """Read a UTF-8 text file of the workspace from line ``start_line`` (1-based).

        Returns:
            At most ``max_lines`` lines and ``max_bytes`` bytes (``truncated``: more follows).

        Raises:
            PathDeniedError: the path leads out of the workspace.
        """
        req = build(ReadFileRequest, type="read_file", id=self.client.next_id(), path=path, start_line=start_line,
                     max_lines=max_lines, max_bytes=max_bytes)
        return (await self.client.request(req)).workspace

    async def write_file(self, path: str, content: str, *, create_dirs: bool = True) -> FileWritten:
        """Create or replace a workspace file with ``content`` (UTF-8).

        Returns:
            Its new size and whether it is new.

        Raises:
            PathDeniedError: the path leads out of the workspace.
        """
        req = build(WriteFileRequest, type="write_file", id=self.client.next_id(), path=path, content=content,
                     create_dirs=create_dirs)
        return (await self.client.request(req)).workspace

    async def edit_file(self, path: str, old_text: str, new_text: str) -> FileWritten:
        """Replace the one occurrence of ``old_text`` in a workspace file with ``new_text``.

        Returns:
            The file's new size.

        Raises:
            WorkspaceError: ``old_text`` occurs not exactly once (reason ``no_match`` or ``ambiguous``).
        """
        req = build(EditFileRequest, type="edit_file", id=self.client.next_id(), path=path, old_text=old_text,
                     new_text=new_text)
        return (await self.client.request(req)).workspace

    async def apply_patch(self, patch: str) -> PatchApplied:
        """Apply a unified diff to the workspace, whole or not at all.

        Returns:
            The files it touched.

        Raises:
            WorkspaceError: the patch does not apply.
            PathDeniedError: it names a path outside the workspace.
        """
        req = build(ApplyPatchRequest, type="apply_patch", id=self.client.next_id(), patch=patch)
        return (await self.client.request(req)).workspace

    async def exec(self, command: Sequence[str] | str, *, cwd: str = ".", timeout_s: float = 30.0,
                   max_output_bytes: int = DEFAULT_EXEC_OUTPUT_BYTES, max_output_lines: int = DEFAULT_EXEC_OUTPUT_LINES,
                   network: bool = False, allowed_domains: Sequence[str] | None = None,
                   display: bool = False) -> ExecOutput:
        """Run one command in the workspace container (never through a shell unless ``command`` is a string).

        Args:
            command: an argv (run directly) or a shell string (run as ``bash -c``).
            cwd: a workspace folder.
            timeout_s: its process group is killed then, seconds.
            max_output_bytes: cap of each of stdout and stderr, bytes (head and tail kept
                around a marker; at most ``MAX_EXEC_STREAM_BYTES``).
            max_output_lines: cap of each of stdout and stderr, lines (at most ``MAX_EXEC_OUTPUT_LINES``).
            network: give it the egress proxy, with a credential good only while it runs.
            allowed_domains: with ``network``, the hosts (and their subdomains) it may reach,
                within the proxy's allowlist; ``None``: the proxy's allowlist alone.
            display: let it open windows on the sandbox's display (the task must grant it).

        Returns:
            Its exit status, output and duration.

        Raises:
            InvalidRequestError: an argument out of the protocol's bounds.
            DisplayUnavailableError: ``display`` asked of a sandbox that grants none.
        """
        shape: dict[str, Any] = {"cmd": command} if isinstance(command, str) else {"argv": list(command)}
        domains = list(allowed_domains) if allowed_domains is not None else None
        req = build(ExecRequest, type="exec", id=self.client.next_id(), **shape, cwd=cwd, timeout_s=timeout_s,
                    max_output_bytes=max_output_bytes, max_output_lines=max_output_lines, network=network,
                    allowed_domains=domains, display=display)
        return (await self.client.request(req)).workspace

    async def run_tests(self, argv: Sequence[str], *, cwd: str = ".", timeout_s: float = 300.0,
                        tail_bytes: int = 8_000, tail_lines: int = DEFAULT_EXEC_OUTPUT_LINES,
                        display: bool = False) -> RunTestsOutput:
        """Run the test command ``argv`` in the workspace and report pass/fail (exit 0 in time).

        Args:
            argv: the test command.
            cwd: a workspace folder.
            timeout_s: its process group is killed then, seconds.
            tail_bytes: at most this many bytes of the end of its merged output are returned.
            tail_lines: at most this many lines of the end of its merged output are returned.
            display: as :meth:`exec`.

        Returns:
            Whether it passed, and the end of its merged output.
        """
        req = build(RunTestsRequest, type="run_tests", id=self.client.next_id(), argv=list(argv), cwd=cwd,
                    timeout_s=timeout_s, tail_bytes=tail_bytes, tail_lines=tail_lines, display=display)
        return (await self.client.request(req)).workspace

    async def diff(self, base: str | None = None, *, max_bytes: int = 262_144) -> WorkspaceDiff:
        """Summarize the workspace's changes since ``base`` (a commit; ``None``: ``HEAD``).

        Returns:
            The changed files and the unified diff (cut at ``max_bytes``).

        Raises:
            WorkspaceError: the workspace is not a git repository.
        """
        req = build(WorkspaceDiffRequest, type="workspace_diff", id=self.client.next_id(), base=base,
                     max_bytes=max_bytes)
        return (await self.client.request(req)).workspace
