"""The run's audit log: JSON Lines, one event per step, hash-chained.

Each line is one JSON object with ``run_id``, ``seq`` (0, 1, 2...), ``event``,
``time`` and ``prev``: the SHA-256 (hex) of the previous line's bytes (64 zeros
for the first line). Changing, inserting or removing a line breaks the chain at
the next line; :func:`verify_log` checks it, and the ``run_finished`` line's hash
(returned by :meth:`AuditLog.close`) anchors the end. Each line is written whole
with one ``write`` and flushed, so a killed controller leaves no torn line.

Secrets are redacted before anything is written: text typed in sensitive steps
or fields becomes a length marker, and URLs lose credentials and secret-looking
query values (:func:`deskpod.controller.policy.redact_url`). Screenshots are not
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

from pydantic import BaseModel

from deskpod.protocol import Screenshot, TypeText
from deskpod.untrusted import IMAGE_EXTENSIONS

__all__ = [
    "AuditLog", "ChainCheck", "GENESIS", "ScreenshotStore", "redact_action", "redact_actions", "utc_now",
    "verify_log",
]

GENESIS = "0" * 64
"""The ``prev`` of a log's first line."""


def utc_now() -> str:
    """Return the current UTC time as ISO 8601 with milliseconds and ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def redact_action(action: BaseModel, sensitive: bool) -> dict[str, Any]:
    """The action as JSON, with typed text replaced by ``"[redacted N chars]"`` when ``sensitive``."""
    data = action.model_dump(mode="json")
    if sensitive and isinstance(action, TypeText):
        data["text"] = f"[redacted {len(action.text)} chars]"
    return data


def redact_actions(actions: list[BaseModel], sensitive: bool) -> list[dict[str, Any]]:
    """:func:`redact_action` over a list."""
    return [redact_action(a, sensitive) for a in actions]


class AuditLog:
    """Append-only, hash-chained JSONL audit log of one run.

    Args:
        path: the file to create (mode 0600); parent folders are created.
        run_id: stamped on every event.
    """

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "ab")
        self._seq = 0
        self._prev = GENESIS

    def write(self, event: str, **fields: Any) -> None:
        """Append one event line: ``{"run_id", "seq", "event", "time", "prev", **fields}``."""
        record = {"run_id": self.run_id, "seq": self._seq, "event": event, "time": utc_now(), "prev": self._prev,
                  **fields}
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._file.write(line + b"\n")
        self._file.flush()
        self._prev = hashlib.sha256(line).hexdigest()
        self._seq += 1

    @property
    def head(self) -> str:
        """SHA-256 of the last line written (:data:`GENESIS` before any)."""
        return self._prev

    def close(self) -> str:
        """Flush and close the file; return :attr:`head`."""
        self._file.close()
        return self._prev


@dataclass(frozen=True)
class ChainCheck:
    """Result of :func:`verify_log`: ``ok``; ``lines`` checked; ``head``: SHA-256 of
    the last good line; ``error``: what broke and at which line (1-based), or ``""``."""

    ok: bool
    lines: int
    head: str
    error: str = ""


def verify_log(path: str | Path, expected_head: str | None = None) -> ChainCheck:
    """Check an audit log's hash chain.

    Args:
        path: the JSONL file.
        expected_head: if given, the hash the last line must have (from the
            run's result, 64 hex digits), which also detects lines removed from the end.

    Returns:
        The :class:`ChainCheck`; a torn last line (no newline), a line that is not
        JSON, a wrong ``prev`` or ``seq``, or a different run id fail it.

    Raises:
        OSError: the file cannot be read.
        ValueError: ``expected_head`` is not 64 hex digits.
    """
    if expected_head is not None and not re.fullmatch(r"[0-9a-f]{64}", expected_head):
        raise ValueError("the expected head is not a SHA-256 (64 lower-case hex digits)")
    data = Path(path).read_bytes()
    prev, run_id, count = GENESIS, None, 0
    if data and not data.endswith(b"\n"):
        return ChainCheck(False, 0, prev, "the last line is torn (no newline)")
    # Lines end with "\n" alone: any other byte (a "\r" added on the way) is part of the
    # line, so it changes the line's hash.
    for number, line in enumerate(data[:-1].split(b"\n") if data else [], start=1):
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
        if run_id is not None and record.get("run_id") != run_id:
            return ChainCheck(False, count, prev, f"line {number}: another run's line")
        run_id = record.get("run_id")
        prev = hashlib.sha256(line).hexdigest()
        count += 1
    if expected_head is not None and prev != expected_head:
        return ChainCheck(False, count, prev, "the log ends before the expected last line")
    return ChainCheck(True, count, prev)


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
        (:data:`deskpod.untrusted.IMAGE_EXTENSIONS`), never from a reply's string (the
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
