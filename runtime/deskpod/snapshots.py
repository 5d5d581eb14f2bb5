"""A re-export kept for the old import path ``from deskpod.snapshots import SnapshotStore``:
the store lives in :mod:`deskpod.client.snapshot_store`."""

from __future__ import annotations

from deskpod.client.snapshot_store import SNAPSHOT_NAME_PATTERN, SnapshotInfo, SnapshotStore

__all__ = ["SNAPSHOT_NAME_PATTERN", "SnapshotInfo", "SnapshotStore"]
