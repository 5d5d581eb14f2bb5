"""The home folder's files a reset puts back: what the session derived at start from
the fonts alone (fontconfig's user caches).

:func:`capture_baseline` keeps them at daemon start, before any connection is accepted;
:func:`restore_baseline` writes them back into the wiped home folder. Sizes are bytes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from deskpod.agentd.workspace.confined import write_files

__all__ = ["BASELINE_DIRS", "MAX_BASELINE_BYTES", "capture_baseline", "restore_baseline"]

log = logging.getLogger(__name__)

BASELINE_DIRS = (".cache/fontconfig",)
"""Folders under ``$HOME`` whose content at daemon start (before any connection is
accepted) a reset puts back after the wipe: fontconfig's user caches, derived from the
fonts only. The image's system cache covers its own fonts, so this stays empty unless
fonts are added at run time (a mounted font folder); without it every Chromium start
would rebuild the cache of those (about 0.3 s for the image's fonts)."""

MAX_BASELINE_BYTES = 8 * 1_048_576
"""Most bytes of baseline files kept in memory; a larger baseline is not kept."""


def capture_baseline(home: Path) -> dict[str, bytes]:
    """The files of :data:`BASELINE_DIRS` under ``home`` as they are now, by their path
    relative to it (empty when they exceed :data:`MAX_BASELINE_BYTES`). Symlinks and
    files of other kinds are skipped."""
    kept: dict[str, bytes] = {}
    total = 0
    for top in BASELINE_DIRS:
        for folder, _dirs, names in os.walk(home / top):
            for name in names:
                path = Path(folder) / name
                if path.is_symlink() or not path.is_file():
                    continue
                data = path.read_bytes()
                total += len(data)
                if total > MAX_BASELINE_BYTES:
                    log.warning("the baseline files exceed %d bytes; none kept", MAX_BASELINE_BYTES)
                    return {}
                kept[path.relative_to(home).as_posix()] = data
    return kept


def restore_baseline(home: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (as :func:`capture_baseline` kept them) back under ``home``.

    Raises:
        OSError: a file could not be written.
    """
    write_files(str(home), files.items(), 0o644)
