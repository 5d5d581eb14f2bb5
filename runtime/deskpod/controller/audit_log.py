"""The run's audit log: JSON Lines, one event per step, hash-chained, its end signed.

Each line is one JSON object with ``run_id``, ``seq`` (0, 1, 2...), ``event``,
``time`` and ``prev``: the SHA-256 (hex) of the previous line's bytes (64 zeros
for the first line). Changing, inserting or removing a line breaks the chain at
the next line. Every log ends with one ``run_finished`` record
(:meth:`AuditLog.finish`), whose last member is its ``seal``: the controller's
Ed25519 signature of that line without the seal, made for the log's run id and file
name (:mod:`.audit_sign`), which through ``prev`` covers every line before it.
:func:`verify_log` checks the chain, that the last record is ``run_finished``, and its
seal against the public key the caller pins (never one found beside the log), so a log
cut short, emptied, rewritten with its chain recomputed, or copied under another run's
name fails without any other anchor; the head (SHA-256 of the last line, returned by :meth:`AuditLog.finish`)
can still be checked as well. Each line is written whole with one ``write`` and
flushed, so a killed controller leaves no torn line.

Secrets are redacted before anything is written: text typed in sensitive steps
or fields becomes a length marker, and URLs lose credentials and secret-looking
query values (:func:`deskpod.controller.policy.policy_file.redact_url`). Screenshots are not
in the log: they are referenced by SHA-256 and kept, when the retention setting
says so, in a :class:`ScreenshotStore`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any, Literal

from deskpod.controller.audit_sign import AuditPublicKey, AuditSigner, SealBinding
from deskpod.controller.policy.policy_file import redact_url
from deskpod.protocol import Action, DialogAccept, Navigate, Screenshot, TypeText
from deskpod.client.untrusted import IMAGE_EXTENSIONS

__all__ = [
    "AuditLog", "ChainCheck", "FINAL_EVENT", "GENESIS", "NO_PINNED_KEY", "ScreenshotStore", "log_name",
    "redact_action", "redact_actions", "utc_now", "verify_log",
]

GENESIS = "0" * 64
"""The ``prev`` of a log's first line."""

FINAL_EVENT = "run_finished"
"""The event of every log's last record, the one that carries the seal."""

NO_PINNED_KEY = "chain intact, seal NOT verified (no pinned key)"
"""What ``deskpod verify-log`` and the console's run history say of a finished log whose chain holds
when no key was pinned to check its seal with."""


def log_name(run_id: str) -> str:
    """The file name of run ``run_id``'s log: ``<run_id>.jsonl``."""
    return f"{run_id}.jsonl"


def _dumps(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def utc_now() -> str:
    """Return the current UTC time as ISO 8601 with milliseconds and ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def redact_action(action: Action, sensitive: bool) -> dict[str, Any]:
    """The action as JSON, with typed text (or a prompt's answer) replaced by
    ``"[redacted N chars]"`` when ``sensitive``, and a ``navigate``'s URL always redacted
    (:func:`~deskpod.controller.policy.policy_file.redact_url`)."""
    data = action.model_dump(mode="json")
    if isinstance(action, Navigate):
        data["url"] = redact_url(action.url)
    if sensitive and isinstance(action, TypeText):
        data["text"] = f"[redacted {len(action.text)} chars]"
    if sensitive and isinstance(action, DialogAccept) and action.text is not None:
        data["text"] = f"[redacted {len(action.text)} chars]"
    return data


def redact_actions(actions: list[Action], sensitive: bool) -> list[dict[str, Any]]:
    """:func:`redact_action` over a list."""
    return [redact_action(a, sensitive) for a in actions]


class AuditLog:
    """Append-only, hash-chained JSONL audit log of one run, sealed when it ends.

    Args:
        path: the file to create (mode 0600); parent folders are created.
        run_id: stamped on every event.
        signer: seals the final record (:meth:`finish`); ``None`` leaves it unsealed,
            which :func:`verify_log` refuses unless told otherwise.
    """

    def __init__(self, path: str | Path, run_id: str, signer: AuditSigner | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self._signer = signer
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "ab")
        self._seq = 0
        self._prev = GENESIS

    def _record(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self._seq, "event": event, "time": utc_now(), "prev": self._prev,
                **fields}

    def _append(self, line: bytes) -> None:
        self._file.write(line + b"\n")
        self._file.flush()
        self._prev = hashlib.sha256(line).hexdigest()
        self._seq += 1

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event line: ``{"run_id", "seq", "event", "time", "prev", **fields}``; return it.

        Raises:
            ValueError: the log is finished or closed.
        """
        record = self._record(event, fields)
        self._append(_dumps(record))
        return record

    def finish(self, **fields: Any) -> dict[str, Any]:
        """Append the final ``run_finished`` record, sealed by the signer, and close the file.

        The seal is the record's last member, ``"seal": {"alg", "v", "key_id", "signature"}``,
        signing the line's bytes as they would be without it, for this log's run id and
        file name (:class:`~deskpod.controller.audit_sign.SealBinding`).

        Returns:
            The record as written (seal included); :attr:`head` is now its line's SHA-256.

        Raises:
            ValueError: the log is already finished or closed.
        """
        record = self._record(FINAL_EVENT, fields)
        line = _dumps(record)
        if self._signer is not None:
            seal = self._signer.seal(line, SealBinding(self.run_id, self.path.name))
            record["seal"] = seal
            line = line[:-1] + b',"seal":' + _dumps(seal) + b"}"
        self._append(line)
        self._file.close()
        return record

    @property
    def head(self) -> str:
        """SHA-256 of the last line written (:data:`GENESIS` before any)."""
        return self._prev

    @property
    def finished(self) -> bool:
        """Whether the file is closed (after :meth:`finish` or :meth:`close`)."""
        return self._file.closed

    def close(self) -> str:
        """Close the file without a final record (the log then fails :func:`verify_log`); return :attr:`head`."""
        self._file.close()
        return self._prev


@dataclass(frozen=True)
class ChainCheck:
    """Result of :func:`verify_log`: ``ok``; ``lines`` checked; ``head``: SHA-256 of
    the last good line; ``error``: what broke and at which line (1-based), or ``""``;
    ``key_id``: the key whose seal was verified (``""``: none was); ``seal_version``: that
    seal's version (2: it names the run id and file name; 1: made before, the file name
    checked against the run id instead; 0: no seal was verified)."""

    ok: bool
    lines: int
    head: str
    error: str = ""
    key_id: str = ""
    seal_version: int = 0


_SEAL_MEMBERS = {1: {"alg", "key_id", "signature"}, 2: {"alg", "v", "key_id", "signature"}}


def _check_seal(line: bytes, record: dict[str, Any], key: AuditPublicKey, name: str) -> tuple[str, int]:
    """Why the final ``line`` of the log named ``name`` is not sealed by ``key`` (``""``: it is),
    and the seal's version."""
    seal = record.get("seal")
    if not isinstance(seal, dict) or not all(isinstance(seal.get(k), str) for k in ("alg", "key_id", "signature")):
        return "the final record carries no seal (signature): the log was not sealed by a controller", 0
    version = seal.get("v", 1)
    suffix = b',"seal":' + _dumps(seal) + b"}"
    if version not in _SEAL_MEMBERS or set(seal) != _SEAL_MEMBERS[version] or not line.endswith(suffix):
        return "the final record's seal is malformed", 0
    if seal["key_id"] != key.key_id:
        return f"the log is sealed by key {seal['key_id'][:32]}, not by the key given ({key.key_id})", 0
    run_id = record["run_id"]
    renamed = (f"its file name {name[:80]!r} is not run {run_id[:64]!r}'s ({log_name(run_id)[:80]!r}): the log was "
               "renamed or copied under another run's name, or its run id changed")
    if version == 1 and name != log_name(run_id):
        return f"the log's seal (v1) does not name its file, and {renamed}", 0
    binding = SealBinding(run_id, name) if version == 2 else None
    if seal["alg"] != "ed25519" or not key.verify(line[: -len(suffix)] + b"}", seal["signature"], binding):
        if name != log_name(run_id):
            return f"the final record's seal does not verify for this file name: {renamed}", 0
        return ("the final record's seal does not verify: the log was rewritten (a line, or the run id it names, "
                "changed after it was sealed)"), 0
    return "", version


def verify_log(path: str | Path, expected_head: str | None = None, *, public_key: AuditPublicKey | None,
               require_seal: bool = True) -> ChainCheck:
    """Check an audit log: its hash chain, its final record, and that record's seal.

    Args:
        path: the JSONL file; its name is part of what the seal covers.
        expected_head: if given, the hash the last line must have (from the run's
            result, 64 hex digits).
        public_key: the key the seal must verify with: one the caller pins (the
            operator's ``--public-key``, ``DESKPOD_AUDIT_PUBLIC_KEY``, or the signer's own
            key held in memory), never one read from beside the log; ``None``: none, and
            then the log fails when ``require_seal``.
        require_seal: ``False`` checks no seal (a log written before logs were sealed,
            or a reviewer without the key): then only ``expected_head`` anchors its end.

    Returns:
        The :class:`ChainCheck`. It fails for an empty file, a torn last line (no
        newline), a line that is not JSON, a wrong ``prev`` or ``seq``, a line with no
        run id or another run's, a last record that is not ``run_finished`` (the log was
        cut short, or its run is still going), a missing, malformed or wrong seal (the
        log was rewritten, renamed or copied under another run's name, or sealed by
        another key; a version 1 seal, which names no file, when the file is not named
        ``<run_id>.jsonl``), no public key to check the seal with, or a head other than
        ``expected_head``.

    Raises:
        OSError: the file cannot be read.
        ValueError: ``expected_head`` is not 64 hex digits.
    """
    if expected_head is not None and not re.fullmatch(r"[0-9a-f]{64}", expected_head):
        raise ValueError("the expected head is not a SHA-256 (64 lower-case hex digits)")
    data = Path(path).read_bytes()
    prev, run_id, count = GENESIS, None, 0
    if not data:
        return ChainCheck(False, 0, prev, "the log is empty")
    if not data.endswith(b"\n"):
        return ChainCheck(False, 0, prev, "the last line is torn (no newline)")
    last: tuple[bytes, dict[str, Any]] = (b"", {})
    # Lines end with "\n" alone: any other byte (a "\r" added on the way) is part of the
    # line, so it changes the line's hash.
    for number, line in enumerate(data[:-1].split(b"\n"), start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return ChainCheck(False, count, prev, f"line {number} is not JSON")
        if not isinstance(record, dict):
            return ChainCheck(False, count, prev, f"line {number} is not an object")
        if record.get("prev") != prev:
            return ChainCheck(False, count, prev, f"line {number}: prev does not match the line before")
        if record.get("seq") != number - 1:
            return ChainCheck(False, count, prev, f"line {number}: seq is {record.get('seq')!r}, not {number - 1}")
        if not isinstance(record.get("run_id"), str):
            return ChainCheck(False, count, prev, f"line {number} names no run (run_id)")
        if run_id is not None and record.get("run_id") != run_id:
            return ChainCheck(False, count, prev, f"line {number}: another run's line")
        run_id = record.get("run_id")
        prev = hashlib.sha256(line).hexdigest()
        count += 1
        last = (line, record)
    if expected_head is not None and prev != expected_head:
        return ChainCheck(False, count, prev, "the log ends before the expected last line")
    if last[1].get("event") != FINAL_EVENT:
        return ChainCheck(False, count, prev, f"the last record is {str(last[1].get('event'))[:40]!r}, not "
                          f"{FINAL_EVENT!r}: the log was cut short (or its run is still going)")
    if not require_seal:
        return ChainCheck(True, count, prev)
    if public_key is None:
        return ChainCheck(False, count, prev, "no public key to check the seal with: pin the controller's "
                          "(deskpod audit-key prints it)")
    why, version = _check_seal(*last, public_key, Path(path).name)
    if why:
        return ChainCheck(False, count, prev, why)
    return ChainCheck(True, count, prev, key_id=public_key.key_id, seal_version=version)


class ScreenshotStore:
    """Screenshots stored by content hash, with a retention setting.

    Files are ``<directory>/<sha256>.<format>`` (mode 0600), written once however
    often a screen repeats. ``retention``: ``"all"`` keeps every screenshot of a
    run, ``"failures"`` keeps only those of runs that did not succeed (the others
    are deleted when the run ends), ``"none"`` keeps none (the audit log still
    has their hashes). ``max_age_days``: files older than this are deleted by
    :meth:`prune` (``None``: never).

    Args:
        directory: where the files go; created on first use.
    """

    def __init__(
        self,
        directory: str | Path,
        retention: Literal["all", "failures", "none"] = "failures",
        max_age_days: float | None = 7.0,
    ) -> None:
        self.directory = Path(directory)
        self.retention = retention
        self.max_age_days = max_age_days
        self._written: list[Path] = []

    def put(self, shot: Screenshot) -> Path | None:
        """Store ``shot`` unless retention is ``"none"``; return its file (``None`` when not kept).

        The file name comes from the host alone: the SHA-256 computed here from the
        decoded bytes and the fixed extension of the format
        (:data:`deskpod.client.untrusted.IMAGE_EXTENSIONS`), never from a reply's string (the
        client checked the image itself when the reply arrived).
        """
        if self.retention == "none":
            return None
        data = base64.b64decode(shot.data)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.directory / f"{hashlib.sha256(data).hexdigest()}.{IMAGE_EXTENSIONS[shot.format]}"
        if not path.exists():
            tmp = self.directory / f"{path.name}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
            self._written.append(path)
        return path

    def finish(self, succeeded: bool) -> None:
        """Apply the retention at the end of a run: under ``"failures"``, a successful
        run's new screenshots are deleted."""
        if self.retention == "failures" and succeeded:
            for path in self._written:
                path.unlink(missing_ok=True)
        self._written.clear()

    def prune(self, now_s: float | None = None) -> int:
        """Delete stored screenshots older than ``max_age_days``; return how many."""
        if self.max_age_days is None or not self.directory.is_dir():
            return 0
        cutoff = (time.time() if now_s is None else now_s) - self.max_age_days * 86_400
        removed = 0
        for path in self.directory.iterdir():
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
