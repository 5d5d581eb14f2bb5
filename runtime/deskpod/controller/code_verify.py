"""Judging a code run's change: the seed's tests collected in a clean room, a completion
claim checked there (:mod:`.verdict`'s rules), and the change summary every run records.

The change is read from the workspace's disk with no ignore rule and checked against the
manifest's SHA-256; the clean room is built from the host's own seed archive plus that
change, never from the agent's workspace. :mod:`.code_agent` runs the loop and calls these.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from deskpod.controller.audit_log import AuditLog
from deskpod.controller.code_task import CodeTaskSpec
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.verdict import (
    Change,
    SeedFile,
    Verdict,
    clean_room_archive,
    compute_changes,
    is_cache,
    judge,
    parse_collected,
    parse_junit,
    pytest_argv,
    refusals,
)
from deskpod.errors import DeskpodError, JUnitError, WorkspaceError
from deskpod.protocol import (
    CleanRoomRequest,
    CleanRoomRun,
    ManifestEntry,
    WorkspaceManifest,
    WorkspaceManifestRequest,
    WorkspaceRequest,
)

__all__ = [
    "AUDIT_TAIL_CHARS",
    "CodeRunState",
    "MAX_AUDIT_DIFF_BYTES",
    "MAX_COLLECT_OUTPUT_BYTES",
    "collect_seed_tests",
    "last_line",
    "record_changes",
    "verify_claim",
    "workspace_reply",
]

MAX_AUDIT_DIFF_BYTES = 262_144
"""Largest diff text the change summary records (256 KiB); longer diffs are cut."""

AUDIT_TAIL_CHARS = 2000
"""How much of a test run's output tail an audit event keeps."""

MAX_COLLECT_OUTPUT_BYTES = 1_048_576
"""Output of the seed's test collection kept (1 MiB); more fails the seeding."""


@dataclass
class CodeRunState:
    """What one code run carries from step to step: ``steps`` taken, ``failures`` counted
    against the retry budget, the seed commit (``base``), the last claim, the changed paths
    (``"status path"``), the host's seed (``archive``, its files in ``seed``), the seed's test
    ids and its pytest ini (``ini``)."""

    steps: int = 0
    failures: int = 0
    base: str | None = None
    last_claim: str | None = None
    changed: list[str] = field(default_factory=list)
    archive: bytes = b""
    seed: dict[str, SeedFile] = field(default_factory=dict)
    seed_ids: list[str] = field(default_factory=list)
    ini: str | None = None


async def workspace_reply(client: SandboxAPI, request: WorkspaceRequest) -> Any:
    """Send a workspace request and return its reply's ``workspace`` output.

    Raises:
        DeskpodError: the sandbox refused the request or cannot be reached.
    """
    return (await client.request(request)).workspace


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, cut to 300 characters (``""`` when there is none)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


async def collect_seed_tests(task: CodeTaskSpec, client: SandboxAPI, state: CodeRunState) -> tuple[list[str], str | None]:
    """The seed's test ids, collected in a clean room from the host's seed archive alone.

    Returns:
        The node ids, and ``None`` or why they could not be collected.
    """
    run: CleanRoomRun = await workspace_reply(
        client,
        CleanRoomRequest(
            type="clean_room", id=client.next_id(), archive=base64.b64encode(state.archive).decode("ascii"),
            argv=pytest_argv(task.success.test_command, state.ini, collect=True), timeout_s=task.success.timeout_s,
            output_bytes=MAX_COLLECT_OUTPUT_BYTES, display=task.display,
        ),
    )
    ids = parse_collected(run.output)
    if run.timed_out:
        return ids, f"the collection did not finish within {task.success.timeout_s:g} s"
    if run.exit_code != 0 or run.output_bytes > MAX_COLLECT_OUTPUT_BYTES:
        return ids, f"exit {run.exit_code}: {last_line(run.output)}"
    if not ids:
        return ids, "the seed has no tests"
    return ids, None


async def _read_change(
    client: SandboxAPI, state: CodeRunState
) -> tuple[WorkspaceManifest, list[Change], dict[str, bytes], str | None]:
    """The workspace's change against the host's seed, read from the disk with no ignore rule.

    Returns:
        The manifest, the changes, the new bytes of changed files (checked against
        the manifest's SHA-256), and ``None`` or why the change cannot be judged.
    """
    manifest: WorkspaceManifest = await workspace_reply(
        client, WorkspaceManifestRequest(type="workspace_manifest", id=client.next_id())
    )
    changes = compute_changes(state.seed, manifest.entries)
    if manifest.truncated:
        return manifest, changes, {}, f"the workspace holds more than {len(manifest.entries)} entries"
    listed = {e.path: e for e in manifest.entries}
    wanted = [c.path for c in changes if c.kind == "file" and not is_cache(c.path)]
    contents: dict[str, bytes] = {}
    if not wanted:
        return manifest, changes, contents, None
    fetched: WorkspaceManifest = await workspace_reply(
        client, WorkspaceManifestRequest(type="workspace_manifest", id=client.next_id(), paths=wanted)
    )
    if fetched.content_omitted:
        return manifest, changes, contents, (
            f"the change is too large to judge ({len(fetched.content_omitted)} file(s) beyond the content cap)"
        )
    for entry in fetched.entries:
        if entry.content is None:
            continue
        data = base64.b64decode(entry.content)
        expected: ManifestEntry | None = listed.get(entry.path)
        if expected is None or hashlib.sha256(data).hexdigest() != expected.sha256:
            return manifest, changes, contents, f"{entry.path} changed while the change was read"
        contents[entry.path] = data
    missing = [path for path in wanted if path not in contents]
    if missing:
        return manifest, changes, contents, f"{missing[0]} could not be read back from the workspace"
    return manifest, changes, contents, None


async def verify_claim(
    task: CodeTaskSpec, client: SandboxAPI, audit: AuditLog, state: CodeRunState, message: str
) -> tuple[bool, str]:
    """Check a completion claim with the clean-room verdict (:mod:`.verdict`) and audit it.

    Returns:
        Whether the claim holds, and why (what the agent is told).
    """
    check = task.success
    started = time.perf_counter()
    manifest, changes, contents, problem = await _read_change(client, state)
    changed = [f"{c.status} {c.path}" for c in changes]
    refused = refusals(changes, contents, state.seed, check.editable, check.protected, check.new_tests)
    if problem is None and refused:
        problem = "refused: " + "; ".join(f"{path} ({why})" for path, why in list(refused.items())[:10])
    if problem is None:
        try:
            archive = clean_room_archive(
                state.archive, changes, contents,
                {e.path: e.target or "" for e in manifest.entries if e.kind == "symlink"},
                {e.path: e.executable for e in manifest.entries if e.kind == "file"},
            )
        except ValueError as exc:
            problem = str(exc)
    if problem is not None:
        why = f"not judged: {problem}"
        audit.write("verify", ok=False, claim=message, evidence=why, clean_room=True, changed=changed,
                    refused=refused, verdict_s=round(time.perf_counter() - started, 3))
        return False, why
    try:
        run: CleanRoomRun = await workspace_reply(
            client,
            CleanRoomRequest(
                type="clean_room", id=client.next_id(), archive=base64.b64encode(archive).decode("ascii"),
                argv=pytest_argv(check.test_command, state.ini, collect=False), timeout_s=check.timeout_s,
                display=task.display,
            ),
        )
    except WorkspaceError as exc:  # e.g. a symlink of the change leads out of the room: the archive is refused
        why = f"not judged: the clean room could not be built: {exc.message[:500]}"
        audit.write("verify", ok=False, claim=message, evidence=why, clean_room=True, changed=changed,
                    refused={}, verdict_s=round(time.perf_counter() - started, 3))
        return False, why
    try:
        outcomes = parse_junit(run.report)
    except JUnitError as exc:
        verdict = Verdict(False, str(exc))
        outcomes = {}
    else:
        verdict = judge(state.seed_ids, outcomes, run.exit_code)
    summary = last_line(run.output)
    if run.timed_out:
        why = f"the clean room's test run did not finish within {check.timeout_s:g} s"
    elif verdict.ok:
        why = f"verified: the controller re-ran the tests in a clean room (the seed plus the agent's change): " \
              f"{verdict.reason} ({summary})"
    else:
        why = f"the tests in a clean room (the seed plus the agent's change): {verdict.reason} " \
              f"(exit {run.exit_code}: {summary})"
    ok = verdict.ok and not run.timed_out
    audit.write(
        "verify",
        ok=ok,
        claim=message,
        evidence=why,
        clean_room=True,
        changed=changed,
        refused={},
        seed_tests=len(state.seed_ids),
        report_tests=len(outcomes),
        missing=list(verdict.missing[:20]),
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        duration_s=run.duration_s,
        killed_before=run.killed,
        verdict_s=round(time.perf_counter() - started, 3),
        tail=run.output[-AUDIT_TAIL_CHARS:],
    )
    return ok, why


def _unified_diff(seed: dict[str, SeedFile], changes: list[Change], contents: dict[str, bytes]) -> str:
    """A unified diff of the changes against the host's seed (binary files named only)."""
    parts: list[str] = []
    for change in changes:
        old = seed.get(change.path)
        before = old.data if old is not None and old.kind == "file" else b""
        after = contents.get(change.path, b"")
        try:
            old_text, new_text = before.decode("utf-8"), after.decode("utf-8")
        except UnicodeDecodeError:
            parts.append(f"Binary files a/{change.path} and b/{change.path} differ\n")
            continue
        parts.extend(
            difflib.unified_diff(
                old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                "/dev/null" if change.status == "added" else f"a/{change.path}",
                "/dev/null" if change.status == "deleted" else f"b/{change.path}",
            )
        )
    return "".join(parts)


async def record_changes(client: SandboxAPI, audit: AuditLog, state: CodeRunState) -> None:
    """Write the change summary (every changed path, ignored or not, and the diff against the host's seed)."""
    try:
        _, changes, contents, problem = await _read_change(client, state)
    except DeskpodError as exc:
        audit.write("change_summary", error=f"{exc.code}: {exc.message[:500]}")
        return
    state.changed = [f"{c.status} {c.path}" for c in changes]
    diff = _unified_diff(state.seed, changes, contents)
    raw = diff.encode("utf-8", "replace")
    audit.write(
        "change_summary",
        base=state.base,
        files=[{"path": c.path, "status": c.status, "old_path": None} for c in changes],
        diff=raw[:MAX_AUDIT_DIFF_BYTES].decode("utf-8", "ignore"),
        diff_bytes=len(raw),
        truncated=len(raw) > MAX_AUDIT_DIFF_BYTES,
        error=problem,
    )
