"""Snapshots: taking and restoring the browser's session state over HTTP.

Snapshots move over HTTP, not the websocket (an archive is often larger than
:data:`MAX_MESSAGE_BYTES`), on :data:`SNAPSHOT_PATH` with the same
``Authorization: Bearer <token>`` check as the websocket:

- ``GET /v1/snapshot``: the browser is stopped (so its files are consistent),
  the state needed to restore the session (cookies, Local Storage, IndexedDB,
  Session Storage, preferences; no caches) is packed as a gzip'd tar whose
  first member is a :class:`SnapshotManifest`, and the browser is started again
  at the URL it showed. Body: the archive (``application/gzip``); header
  :data:`SNAPSHOT_SHA256_HEADER`: its SHA-256.
- ``PUT /v1/snapshot?start_url=URL``: body: an archive made by ``GET``. It is
  checked in full (size, member kinds, confined names, every file's SHA-256
  against the manifest) before the browser is stopped; the browser profile is
  then replaced by the archive's content and Chromium started at ``start_url``
  (default: the sandbox's start page). Reply: :class:`SnapshotRestored`.

Errors on these endpoints are the :class:`ErrorBody` envelope as JSON with an
HTTP status: 401 (token), 409 (``busy``), 413 (too large), 400 (bad archive or
query), 500 (``internal``).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT, Sha256, StartUrl

__all__ = [
    "RestoreQuery",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_MANIFEST_NAME",
    "SNAPSHOT_PATH",
    "SNAPSHOT_SHA256_HEADER",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotRestored",
]


SNAPSHOT_PATH = "/v1/snapshot"
"""The daemon's HTTP path for taking (GET) and restoring (PUT) a snapshot."""

SNAPSHOT_FORMAT: Final = "deskpod-snapshot/1"
"""The ``format`` a :class:`SnapshotManifest` names."""

SNAPSHOT_MANIFEST_NAME = "deskpod-snapshot.json"
"""Name of the manifest: the archive's first member."""

SNAPSHOT_SHA256_HEADER = "X-Deskpod-Sha256"
"""Response header of ``GET /v1/snapshot``: the archive's SHA-256, hex."""


class SnapshotFile(BaseModel):
    """One file of a snapshot: ``sha256`` of its bytes (hex) and ``size`` in bytes."""

    model_config = STRICT
    sha256: Sha256
    size: Annotated[int, Field(strict=True, ge=0)]


class SnapshotManifest(BaseModel):
    """The first member of a snapshot archive.

    ``format``: :data:`SNAPSHOT_FORMAT`. ``files``: every regular file of the
    archive by its path relative to the browser profile (``/``-separated).
    ``created_at``: when it was taken, seconds since the epoch (UTC).
    """

    model_config = STRICT
    format: Literal["deskpod-snapshot/1"]
    created_at: float
    files: dict[Annotated[str, Field(min_length=1, max_length=1024)], SnapshotFile]


class SnapshotRestored(BaseModel):
    """Reply of ``PUT /v1/snapshot``: ``files`` restored, ``size`` their total bytes,
    ``url`` the page Chromium was started at."""

    model_config = STRICT
    type: Literal["snapshot_restored"] = "snapshot_restored"
    files: int
    size: int
    url: str


class RestoreQuery(BaseModel):
    """The query of ``PUT /v1/snapshot``: ``start_url`` (http or https), ``None``: the
    sandbox's start page."""

    model_config = STRICT
    start_url: StartUrl | None = None

