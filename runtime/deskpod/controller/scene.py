"""The failure scene: what a human needs to pick up a run that stopped.

When a run fails, is cancelled or hits a limit, the controller saves, in
``<audit_dir>/scenes/<run_id>/``: ``screenshot.<format>`` (the last screen) and
``scene.json`` with the reason, the final state, the recent actions (typed
secrets redacted), the URL (redacted), the window title, the open tabs, the last
dialog, and the audit log's path with the hash of its last line when the scene
was saved (the run's ``run_finished`` line comes after it). Files are mode 0600.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deskpod.controller.policy.policy_file import redact_url
from deskpod.protocol import Observation
from deskpod.client.untrusted import IMAGE_EXTENSIONS

__all__ = ["RECENT_ACTIONS", "save_scene"]

RECENT_ACTIONS = 10
"""How many of the last actions a scene keeps."""


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def save_scene(
    audit_dir: str | Path,
    run_id: str,
    *,
    reason: str,
    state: str,
    observation: Observation | None,
    recent_actions: Sequence[dict[str, Any]],
    audit_log: Path,
    audit_head: str,
) -> Path:
    """Save the failure scene of ``run_id``; return its folder.

    Args:
        audit_dir: the run's audit folder.
        reason: why the run stopped. state: the state it ended in.
        observation: the last observation (with a screenshot when one was taken).
        recent_actions: the latest actions, already redacted (at most
            :data:`RECENT_ACTIONS` are kept).
        audit_log: path of the run's audit log. audit_head: hash of its last line.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = Path(audit_dir) / "scenes" / run_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    screenshot = None
    if observation is not None and observation.screenshot is not None:
        shot = observation.screenshot
        screenshot = f"screenshot.{IMAGE_EXTENSIONS[shot.format]}"
        _write_private(folder / screenshot, base64.b64decode(shot.data))
    scene = {
        "run_id": run_id,
        "reason": reason,
        "state": state,
        "url": redact_url(observation.url) if observation else None,
        "title": observation.title if observation else None,
        "tabs": [{"url": redact_url(t.url), "title": t.title, "active": t.active} for t in observation.tabs or []]
        if observation else [],
        "dialog": observation.dialog.model_dump() if observation and observation.dialog else None,
        "screenshot": screenshot,
        "screenshot_sha256": observation.screenshot.sha256 if observation and observation.screenshot else None,
        "recent_actions": list(recent_actions)[-RECENT_ACTIONS:],
        "audit_log": str(audit_log),
        "audit_head": audit_head,
    }
    _write_private(folder / "scene.json", json.dumps(scene, ensure_ascii=False, indent=2).encode("utf-8"))
    return folder
