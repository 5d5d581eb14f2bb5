"""The daemon's workspace tools for code agents: confined files, exec, tests, diff.

Everything here executes; nothing decides. Risk levels, confirmation, retry
budgets and the "done means the tests pass" rule live in the controller
(:mod:`deskpod.controller.code_agent`).

The parts it is built on each have their module: the file tools are
:mod:`deskpod.agentd.workspace.files`, paths are confined and opened
without following symlinks by :mod:`deskpod.agentd.workspace.confined`, commands run
through :mod:`deskpod.agentd.workspace.process`, seed archives are checked and unpacked
by :mod:`deskpod.agentd.workspace.archive`.

The verdict's requests (the controller's, never an agent's). ``workspace_manifest``
walks the workspace as it is on disk (no git, so no ignore rule applies) and hashes
every file. ``clean_room`` builds a fresh folder from an archive the controller
made (the seed plus the accepted change) and runs the controller's test command
there; the runner kills every agent process first (:mod:`deskpod.agentd.runner`).

Seeding. ``seed_workspace`` unpacks a gzip'd tar the host sends in the message
(checked in full first, :func:`~deskpod.agentd.workspace.archive.check_archive`). Without
a ``.git`` it becomes a git repository whose first commit is the baseline
``workspace_diff`` compares against. The tools' own git commands run through
:func:`~deskpod.agentd.workspace.process.run_process` like an agent's, with hooks and
fsmonitor off, so a hostile ``.git/config`` gains nothing an ``exec`` does not
already have.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import hashlib
import logging
import os
import posixpath
import secrets
import shutil
import stat
import tarfile
import threading
import time
from typing import Any

from typing_extensions import TypeIs

from deskpod.agentd.workspace.archive import open_seed_archive, unpack_members
from deskpod.agentd.workspace.confined import clear_folder, confine
from deskpod.agentd.workspace.files import WorkspaceFiles
from deskpod.agentd.workspace.output import StreamCap
from deskpod.agentd.workspace.process import OutputCap, ProcessResult, exec_env, run_process
from deskpod.errors import WorkspaceError
from deskpod.protocol import (
    MAX_EXEC_OUTPUT_BYTES,
    MAX_REPLY_PATHS,
    WORKSPACE_REQUEST_TYPES,
    ApplyPatchRequest,
    ChangedFile,
    CleanRoomRequest,
    CleanRoomRun,
    EditFileRequest,
    ExecOutput,
    ExecRequest,
    ListDirRequest,
    ManifestEntry,
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
    WorkspaceRequest,
    WorkspaceSeeded,
    WriteFileRequest,
)

__all__ = [
    "CLEAN_ROOM_PREFIX",
    "CLEAN_ROOM_REPORT",
    "GIT_TIMEOUT_S",
    "Workspace",
    "is_workspace_request",
    "patch_paths",
]

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 60.0
"""Deadline of each git command the daemon runs itself (seed, patch, diff), seconds."""

CLEAN_ROOM_PREFIX = "deskpod-verdict-"
"""Name prefix of a clean room's folder (followed by 32 random hex digits)."""

CLEAN_ROOM_REPORT = "report.xml"
"""The file in a clean room's folder whose text a ``clean_room`` reply returns."""

_GIT_SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgsign=false"]
_WORKSPACE_TYPES = tuple(WORKSPACE_REQUEST_TYPES.values())


def is_workspace_request(request: object) -> TypeIs[WorkspaceRequest]:
    """Return whether ``request`` is one of the workspace requests (served by :class:`Workspace`)."""
    return isinstance(request, _WORKSPACE_TYPES)


def patch_paths(patch: str) -> list[str]:
    """Every file path a unified diff names, without its ``a/``/``b/`` prefix.

    Reads ``---`` lines followed by ``+++`` lines (``/dev/null`` skipped), ``rename``/``copy`` lines
    and ``diff --git`` headers; C-quoted names are unquoted.

    Raises:
        WorkspaceError: the text names no file (``reason`` ``"bad_patch"``).
    """
    found: list[str] = []

    def add(name: str, strip: bool) -> None:
        name = name.strip()
        if name.startswith('"') and name.endswith('"') and len(name) >= 2:
            raw = codecs.escape_decode(name[1:-1].encode("utf-8"))[0]
            name = bytes(raw).decode("utf-8", "replace")
        if name == "/dev/null" or not name:
            return
        if strip and "/" in name:
            name = name.split("/", 1)[1]
        if name not in found:
            found.append(name)

    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            add(line[4:].split("\t", 1)[0], strip=True)
            add(lines[i + 1][4:].split("\t", 1)[0], strip=True)
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            add(line.split(" ", 2)[2], strip=False)
        elif line.startswith("diff --git ") and '"' not in line:
            rest = line[len("diff --git ") :]
            if rest.startswith("a/") and " b/" in rest:
                left, right = rest.split(" b/", 1)
                add(left, strip=True)
                add("b/" + right, strip=True)
    if not found:
        raise WorkspaceError("the patch names no file (expected unified diff headers)", detail={"reason": "bad_patch"})
    return found


class Workspace(WorkspaceFiles):
    """The workspace tools of one sandbox: the file tools and the settings of
    :class:`~deskpod.agentd.workspace.files.WorkspaceFiles` (its arguments), commands,
    tests, patches, diffs and the verdict's requests.
    """

    async def handle(
        self, request: WorkspaceRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> WorkspaceOutput:
        """Carry out one workspace request on a worker thread.

        Args:
            request: a validated workspace request.
            cancel: set when the client goes away; kills a running command.
            env: variables added to the environment of an ``exec`` or ``run_tests``
                command (the display grant's ``DISPLAY`` and ``XAUTHORITY``).

        Returns:
            The request's output model.

        Raises:
            PathDeniedError: a path leads outside the workspace.
            WorkspaceError: the operation failed (``detail["reason"]`` says why).
        """
        started = time.perf_counter()
        output: WorkspaceOutput = await asyncio.to_thread(self._run, request, cancel, env)
        extra = f" exit={output.exit_code}" if isinstance(output, (ExecOutput, RunTestsOutput)) else ""
        log.info("request %s: %s%s (%.3f s)", request.id, request.type, extra, time.perf_counter() - started)
        return output

    def _run(
        self, request: WorkspaceRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> WorkspaceOutput:
        if isinstance(request, SeedWorkspaceRequest):
            return self.seed(request)
        if isinstance(request, ListDirRequest):
            return self.list_dir(request)
        if isinstance(request, ReadFileRequest):
            return self.read_file(request)
        if isinstance(request, WriteFileRequest):
            return self.write_file(request)
        if isinstance(request, EditFileRequest):
            return self.edit_file(request)
        if isinstance(request, ApplyPatchRequest):
            return self.apply_patch(request)
        if isinstance(request, ExecRequest):
            return self.exec(request, cancel, env)
        if isinstance(request, RunTestsRequest):
            return self.run_tests(request, cancel, env)
        if isinstance(request, WorkspaceManifestRequest):
            return self.manifest(request)
        if isinstance(request, CleanRoomRequest):
            return self.clean_room(request, cancel, env)
        return self.diff(request)

    # ---- processes

    def _cwd(self, path: str) -> str:
        rel = confine(self.root, path)
        real = os.path.join(self.root, rel) if rel else self.root
        if not os.path.isdir(real):
            raise WorkspaceError(f"cwd {rel!r} is not a folder", detail={"path": rel, "reason": "not_a_dir"})
        return real

    def _spawn(
        self,
        argv: list[str],
        cwd: str,
        timeout_s: float,
        stdout_cap: OutputCap | StreamCap,
        stderr_cap: OutputCap | StreamCap | None,
        cancel: threading.Event | None,
        network: bool = False,
        extra_env: dict[str, str] | None = None,
    ) -> ProcessResult | OSError:
        env = exec_env(self.home, self.proxy if network else None)
        env.update(extra_env or {})
        try:
            return run_process(
                argv, cwd=cwd, env=env, timeout_s=timeout_s, stdout_cap=stdout_cap, stderr_cap=stderr_cap,
                cancel=cancel, waiter=self.waiter, oom_score_adj=self.oom_score_adj,
            )
        except OSError as exc:
            return exc

    def exec(self, request: ExecRequest, cancel: threading.Event, env: dict[str, str] | None = None) -> ExecOutput:
        """Run a command (see :class:`~deskpod.protocol.ExecRequest`); ``env`` is added to its environment."""
        argv = list(request.argv) if request.argv is not None else ["/bin/bash", "-c", str(request.cmd)]
        cwd = self._cwd(request.cwd)
        out = StreamCap.split(request.max_output_bytes, request.max_output_lines)
        err = StreamCap.split(request.max_output_bytes, request.max_output_lines)
        result = self._spawn(argv, cwd, request.timeout_s, out, err, cancel, network=request.network, extra_env=env)
        if isinstance(result, OSError):
            return _not_started(argv[0], result)
        return ExecOutput(
            exit_code=result.exit_code,
            signal=result.signal,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            stdout=out.text(),
            stderr=err.text(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_lines=out.newlines,
            stderr_lines=err.newlines,
            stdout_binary=out.binary,
            stderr_binary=err.binary,
            truncated=out.truncated or err.truncated,
        )

    def run_tests(
        self, request: RunTestsRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> RunTestsOutput:
        """Run the test command (see :class:`~deskpod.protocol.RunTestsRequest`); ``env`` is added to its environment."""
        cwd = self._cwd(request.cwd)
        out = StreamCap(0, request.tail_bytes, 0, request.tail_lines)
        result = self._spawn(list(request.argv), cwd, request.timeout_s, out, None, cancel, extra_env=env)
        if isinstance(result, OSError):
            failed = _not_started(request.argv[0], result)
            return RunTestsOutput(
                passed=False, exit_code=failed.exit_code, duration_s=0.0, tail=failed.stderr, output_bytes=0
            )
        return RunTestsOutput(
            passed=result.returncode == 0 and not result.timed_out,
            exit_code=result.exit_code,
            signal=result.signal,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            tail=out.text(),
            output_bytes=out.total,
        )

    # ---- git

    def _git(
        self, *args: str, extra_env: dict[str, str] | None = None, out_bytes: int = 1_048_576
    ) -> tuple[int, str, str]:
        out, err = OutputCap(out_bytes, 0), OutputCap(4096, 4096)
        # GIT_NO_REPLACE_OBJECTS: an agent's `git replace` must not change what the
        # daemon's diffs compare against.
        env = {"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root), "GIT_NO_REPLACE_OBJECTS": "1", **(extra_env or {})}
        result = self._spawn(["git", *_GIT_SAFE, *args], self.root, GIT_TIMEOUT_S, out, err, None, extra_env=env)
        if isinstance(result, OSError):
            raise WorkspaceError(f"git cannot run: {result.strerror}", detail={"reason": "git_failed"})
        if result.timed_out:
            raise WorkspaceError(f"git {args[0]} timed out", detail={"reason": "git_failed"})
        return result.returncode, out.text(), err.text()

    def _git_ok(self, *args: str, extra_env: dict[str, str] | None = None, out_bytes: int = 1_048_576) -> str:
        code, out, err = self._git(*args, extra_env=extra_env, out_bytes=out_bytes)
        if code != 0:
            raise WorkspaceError(f"git {args[0]} failed: {err.strip()[-500:]}", detail={"reason": "git_failed"})
        return out

    def _is_repo(self) -> bool:
        return os.path.lexists(os.path.join(self.root, ".git"))

    def apply_patch(self, request: ApplyPatchRequest) -> PatchApplied:
        """Check a unified diff's paths, then apply it with ``git apply``.

        See :class:`~deskpod.protocol.ApplyPatchRequest`.
        """
        root = self.root
        files = [confine(root, p) or "." for p in patch_paths(request.patch)]
        patch_file = os.path.join(self.scratch, f"patch-{secrets.token_hex(6)}.diff")
        with open(patch_file, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(request.patch)
        try:
            code, out, err = self._git("apply", "--recount", "--whitespace=nowarn", "--verbose", "--", patch_file)
        finally:
            os.unlink(patch_file)
        if code != 0:
            raise WorkspaceError(
                f"the patch does not apply: {err.strip()[-1500:]}", detail={"reason": "patch_failed", "files": files}
            )
        return PatchApplied(files=files, output=(out + err).strip()[-4000:])

    def diff(self, request: WorkspaceDiffRequest) -> WorkspaceDiff:
        """Diff the workspace, new files included, against a commit.

        See :class:`~deskpod.protocol.WorkspaceDiffRequest`.
        """
        if not self._is_repo():
            raise WorkspaceError("the workspace is not a git repository", detail={"reason": "not_a_git_repo"})
        code, out, _ = self._git("rev-parse", "--verify", "--quiet", f"{request.base or 'HEAD'}^{{commit}}")
        if code != 0:
            raise WorkspaceError(f"no commit {request.base or 'HEAD'!r}", detail={"reason": "bad_base"})
        base = out.strip()
        index = os.path.join(self.scratch, f"index-{secrets.token_hex(6)}")
        env = {"GIT_INDEX_FILE": index}
        try:
            self._git_ok("read-tree", base, extra_env=env)
            self._git_ok("add", "-A", extra_env=env)
            names = self._git_ok(
                "diff", "--cached", "--name-status", "-z", "-M", base, extra_env=env, out_bytes=MAX_EXEC_OUTPUT_BYTES
            )
            cap = OutputCap(request.max_bytes, 0)
            result = self._spawn(
                ["git", *_GIT_SAFE, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base],
                self.root,
                GIT_TIMEOUT_S,
                cap,
                OutputCap(0, 2048),
                None,
                extra_env={"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root), **env},
            )
            if isinstance(result, OSError) or result.returncode != 0:
                raise WorkspaceError("git diff failed", detail={"reason": "git_failed"})
        finally:
            if os.path.exists(index):
                os.unlink(index)
        return WorkspaceDiff(
            base=base, files=_name_status(names), diff=cap.text(), diff_bytes=cap.total, truncated=cap.truncated
        )

    # ---- the verdict

    def manifest(self, request: WorkspaceManifestRequest) -> WorkspaceManifest:
        """Every entry of the workspace as it is on disk (see :class:`~deskpod.protocol.WorkspaceManifestRequest`)."""
        root = self.root
        wanted = None if request.paths is None else set(request.paths)
        entries: list[ManifestEntry] = []
        omitted: list[str] = []
        budget = request.max_content_bytes
        truncated = False
        for rel in _walk(root):
            if wanted is not None and rel not in wanted:
                continue
            if len(entries) >= MAX_REPLY_PATHS:
                truncated = True
                break
            entry, data = _manifest_entry(root, rel, budget if wanted is not None else -1)
            if data is not None:
                budget -= len(data)
                entry = entry.model_copy(update={"content": base64.b64encode(data).decode("ascii")})
            elif wanted is not None and entry.kind == "file":
                omitted.append(rel)
            entries.append(entry)
        return WorkspaceManifest(entries=entries, truncated=truncated, content_omitted=omitted)

    def clean_room(
        self, request: CleanRoomRequest, cancel: threading.Event, env: dict[str, str] | None = None
    ) -> CleanRoomRun:
        """Build a fresh folder from the request's archive and run its command there
        (see :class:`~deskpod.protocol.CleanRoomRequest`); ``env`` is added to its environment.

        Raises:
            WorkspaceError: the archive is bad, or the room cannot be made.
        """
        started = time.perf_counter()
        tar, members = open_seed_archive(request.archive)
        room = os.path.join(self.verdict_root, CLEAN_ROOM_PREFIX + secrets.token_hex(16))
        try:
            os.makedirs(self.verdict_root, mode=0o700, exist_ok=True)
            os.mkdir(room, 0o700)  # exclusive: fails if anything, a symlink included, is there
            for sub in ("src", "home", "tmp"):
                os.mkdir(os.path.join(room, sub), 0o700)
        except OSError as exc:
            tar.close()
            raise WorkspaceError(
                f"the clean room cannot be made: {exc.strerror or exc}", detail={"reason": "clean_room_failed"}
            ) from exc
        try:
            try:
                unpack_members(os.path.join(room, "src"), tar, members)
            finally:
                tar.close()
            setup_s = time.perf_counter() - started
            command_env = exec_env(os.path.join(room, "home"))
            command_env["TMPDIR"] = os.path.join(room, "tmp")
            command_env.update(env or {})
            argv = [arg.replace("{room}", room) for arg in request.argv]
            out = OutputCap.split(request.output_bytes)
            try:
                result = run_process(
                    argv, cwd=os.path.join(room, "src"), env=command_env, timeout_s=request.timeout_s,
                    stdout_cap=out, cancel=cancel, waiter=self.waiter, oom_score_adj=self.oom_score_adj,
                )
            except OSError as exc:
                failed = _not_started(argv[0], exc)
                return CleanRoomRun(
                    exit_code=failed.exit_code, duration_s=0.0, output=failed.stderr, output_bytes=0,
                    setup_s=round(setup_s, 6),
                )
            report, report_bytes = _read_report(room, request.max_report_bytes)
            return CleanRoomRun(
                exit_code=result.exit_code,
                signal=result.signal,
                timed_out=result.timed_out,
                duration_s=result.duration_s,
                output=out.text(),
                output_bytes=out.total,
                report=report,
                report_bytes=report_bytes,
                report_truncated=report is not None and report_bytes > request.max_report_bytes,
                setup_s=round(setup_s, 6),
            )
        finally:
            shutil.rmtree(room, ignore_errors=True)

    # ---- seeding

    def seed(self, request: SeedWorkspaceRequest) -> WorkspaceSeeded:
        """Reset and unpack the workspace (see :class:`~deskpod.protocol.SeedWorkspaceRequest`)."""
        root = self.root
        members: list[tuple[tarfile.TarInfo, str]] = []
        tar: tarfile.TarFile | None = None
        if request.archive is not None:
            tar, members = open_seed_archive(request.archive)
        try:
            if request.clear:
                clear_folder(root)
                clear_folder(self.home)
            files, size = unpack_members(root, tar, members) if tar is not None else (0, 0)
        finally:
            if tar is not None:
                tar.close()
        head = None
        if self._is_repo():
            code, out, _ = self._git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
            head = out.strip() if code == 0 else None
        elif request.git_init:
            self._git_ok("init", "-q")
            self._git_ok("add", "-A")
            self._git_ok("commit", "-q", "--no-verify", "--allow-empty", "-m", "deskpod: workspace seed")
            head = self._git_ok("rev-parse", "HEAD").strip()
        return WorkspaceSeeded(files=files, size=size, git_head=head)


def _walk(root: str) -> list[str]:
    """Every non-folder entry under ``root`` (relative paths, sorted), symlinks not
    followed, the root ``.git`` folder left out."""
    found: list[str] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                for entry in it:
                    rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
                    if rel == ".git":
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(rel)
                    else:
                        found.append(rel)
        except OSError:
            continue
        if len(found) > MAX_REPLY_PATHS:
            break
    return sorted(found)


def _manifest_entry(root: str, rel: str, keep_bytes: int) -> tuple[ManifestEntry, bytes | None]:
    """The manifest entry of ``root/rel`` and, for a regular file of at most
    ``keep_bytes`` bytes (-1: none), its bytes."""
    path = os.path.join(root, rel)
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            link_sha256 = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()
            return ManifestEntry(path=rel, kind="symlink", size=st.st_size, sha256=link_sha256, target=target), None
        if stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            digest = hashlib.sha256()
            kept = bytearray()
            size = 0
            with os.fdopen(fd, "rb") as f:
                while chunk := f.read(1_048_576):
                    digest.update(chunk)
                    size += len(chunk)
                    if size <= keep_bytes:
                        kept += chunk
            entry = ManifestEntry(
                path=rel, kind="file", size=size, executable=bool(st.st_mode & 0o111), sha256=digest.hexdigest()
            )
            return entry, bytes(kept) if size <= keep_bytes else None
    except OSError:
        pass
    return ManifestEntry(path=rel, kind="other", size=0), None


def _read_report(room: str, max_bytes: int) -> tuple[str | None, int]:
    """The text of ``room/report.xml`` cut to ``max_bytes`` and its size; ``(None, 0)``
    when there is no such regular file."""
    try:
        fd = os.open(os.path.join(room, CLEAN_ROOM_REPORT), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, 0
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None, 0
        size = os.fstat(f.fileno()).st_size
        data = f.read(max_bytes)
    return data.decode("utf-8", "replace"), size


def _not_started(program: str, exc: OSError) -> ExecOutput:
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    message = f"deskpod: cannot run {program[:200]!r}: {exc.strerror or exc}\n"
    return ExecOutput(
        exit_code=code, duration_s=0.0, stdout="", stderr=message, stdout_bytes=0, stderr_bytes=len(message)
    )


_STATUS = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "C": "copied", "T": "type_changed"}


def _name_status(text: str) -> list[ChangedFile]:
    tokens = text.split("\0")
    files: list[ChangedFile] = []
    i = 0
    while i + 1 < len(tokens) and tokens[i]:
        code = tokens[i]
        status: Any = _STATUS.get(code[0], "other")
        if code[0] in "RC" and i + 2 < len(tokens):
            files.append(ChangedFile(path=tokens[i + 2], status=status, old_path=tokens[i + 1]))
            i += 3
        else:
            files.append(ChangedFile(path=tokens[i + 1], status=status))
            i += 2
    return files
