"""The run's audit log: JSON Lines, one event per step (seed 002 §13.2).

Each line is written whole with one ``write`` and flushed, so a killed
controller leaves no torn line. Text typed in steps marked sensitive is replaced
by a redaction marker before anything is written; screenshots are recorded by
their SHA-256 only.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from deskpod.protocol import TypeText

__all__ = ["AuditLog", "redact_actions", "utc_now"]


def utc_now() -> str:
    """Return the current UTC time as ISO 8601 with milliseconds and ``Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def redact_actions(actions: list[BaseModel], sensitive: bool) -> list[dict[str, Any]]:
    """Return the actions as JSON dicts, with typed text redacted when ``sensitive``.

    A redacted ``type`` action keeps only the text's length:
    ``{"type": "type", "text": "[redacted 8 chars]"}``.
    """
    out = []
    for action in actions:
        data = action.model_dump(mode="json")
        if sensitive and isinstance(action, TypeText):
            data["text"] = f"[redacted {len(action.text)} chars]"
        out.append(data)
    return out


class AuditLog:
    """Append-only JSONL audit log of one run.

    Args:
        path: the file to append to; parent folders are created.
        run_id: stamped on every event.
    """

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        """Append one event line: ``{"run_id", "event", "time", **fields}``."""
        record = {"run_id": self.run_id, "event": event, "time": utc_now(), **fields}
        self._file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()
