"""Where a run's screen recording is kept, how long, and whether it is the one its audit log sealed.

A GUI run's recording (:mod:`deskpod.controller.recording`) is the file
``<audit_dir>/recordings/<run_id>.mp4`` (mode 0600, folder 0700), beside the run's audit log
``<audit_dir>/<run_id>.jsonl``. Before the log is sealed, the run writes one
:data:`RECORDING_EVENT` record: ``recorded`` (whether a video was made), and for one that
was: ``file`` (its name in the audit folder), ``size_bytes``, ``frames``, ``duration_s``,
``width``/``height`` (pixels), ``sha256`` of the file and ``kept`` (whether the retention
rule kept it); for one that was not, ``reason``. The seal therefore covers the hash.

The recording follows the policy's screenshot retention (``screenshots``): ``"all"`` keeps
every run's, ``"failures"`` only those of runs that did not succeed (a successful run's is
deleted at its end, its hash stays in the log), ``"none"`` records nothing. Files older than
``screenshot_max_age_days`` are deleted (:func:`prune_recordings`), as screenshots are.

:func:`check_recording` compares the file with the hash its log sealed: ``deskpod verify-log``
and the console's run history report a file that does not match (or one no log record
covers) as tampered with.
"""

from __future__ import annotations

import json
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from deskpod.controller.video import file_sha256

__all__ = [
    "RECORDINGS_DIR", "RECORDING_EVENT", "RecordingCheck", "RecordingState", "check_log_recording", "check_recording",
    "keeps_recording", "prune_recordings", "recording_path",
]

RECORDINGS_DIR: Final = "recordings"
"""The audit folder's sub-folder of recordings."""

RECORDING_EVENT: Final = "recording"
"""The audit event that names a run's recording and its SHA-256 (or why there is none)."""

RecordingState = Literal["none", "matches", "not_kept", "modified", "unsealed"]


def recording_path(audit_dir: str | Path, run_id: str) -> Path:
    """The recording of run ``run_id``: ``<audit_dir>/recordings/<run_id>.mp4`` (a name made
    by the controller, never read from a record)."""
    return Path(audit_dir) / RECORDINGS_DIR / f"{run_id}.mp4"


def keeps_recording(retention: Literal["all", "failures", "none"], succeeded: bool) -> bool:
    """Whether the screenshot retention ``retention`` keeps the recording of a run that
    ``succeeded`` (or not)."""
    return retention == "all" or (retention == "failures" and not succeeded)


def prune_recordings(audit_dir: str | Path, max_age_days: float | None, now_s: float | None = None) -> int:
    """Delete the recordings of ``audit_dir`` last written more than ``max_age_days`` ago
    (``None``: none); return how many."""
    folder = Path(audit_dir) / RECORDINGS_DIR
    if max_age_days is None or not folder.is_dir():
        return 0
    cutoff = (time.time() if now_s is None else now_s) - max_age_days * 86_400
    removed = 0
    for path in folder.iterdir():
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and path.suffix == ".mp4" and info.st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


@dataclass(frozen=True)
class RecordingCheck:
    """What :func:`check_recording` found.

    ``state``: ``"none"`` (the log names no recording, and there is no file), ``"matches"`` (the
    file's SHA-256 is the one the log holds), ``"not_kept"`` (the log names one, the file is gone:
    the retention rule or pruning deleted it), ``"modified"`` (the file's hash is another: it was
    changed or replaced) or ``"unsealed"`` (a file is there, and the log holds no hash for it).
    ``ok``: neither of the last two. ``text``: the finding in words. ``record``: the log's
    :data:`RECORDING_EVENT` record (``None``: none). ``path``: the file, when there is one.
    """

    state: RecordingState
    text: str
    record: dict[str, Any] | None = None
    path: Path | None = None

    @property
    def ok(self) -> bool:
        """Whether nothing was found tampered with."""
        return self.state not in ("modified", "unsealed")


def _record_of(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in records if r.get("event") == RECORDING_EVENT), None)


def check_recording(audit_dir: str | Path, run_id: str, records: list[dict[str, Any]]) -> RecordingCheck:
    """Check run ``run_id``'s recording against the hash in its log's records.

    Args:
        audit_dir: the audit folder.
        run_id: the run (its recording is :func:`recording_path`'s).
        records: the run's log records, parsed (trust them only as far as the log verifies).

    Returns:
        The :class:`RecordingCheck`.

    Raises:
        OSError: the file is there and cannot be read.
    """
    path = recording_path(audit_dir, run_id)
    record = _record_of(records)
    sealed = record.get("sha256") if record is not None and record.get("recorded") is True else None
    try:
        present = stat.S_ISREG(path.lstat().st_mode)
    except FileNotFoundError:
        present = False
    if not present:
        if isinstance(sealed, str):
            return RecordingCheck("not_kept", "the recording was not kept (the screenshot retention, or pruned)",
                                  record)
        why = record.get("reason") if record is not None else None
        return RecordingCheck("none", f"no recording: {str(why)[:300]}" if why else "no recording", record)
    if not isinstance(sealed, str):
        return RecordingCheck("unsealed", f"{path.name} is not covered by the log: it holds no hash of a recording",
                              record, path)
    actual = file_sha256(path)
    if actual != sealed:
        return RecordingCheck("modified", f"{path.name} was modified: its SHA-256 is {actual}, the log sealed "
                              f"{sealed[:64]}", record, path)
    return RecordingCheck("matches", f"{path.name} matches the SHA-256 the log sealed ({actual})", record, path)


def check_log_recording(log: str | Path) -> RecordingCheck:
    """:func:`check_recording` for the log file ``log`` (``<audit_dir>/<run_id>.jsonl``), its
    records read from it.

    Raises:
        OSError: the log or the recording cannot be read.
    """
    path = Path(log)
    records = []
    for line in path.read_bytes().splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return check_recording(path.parent, path.stem, records)
