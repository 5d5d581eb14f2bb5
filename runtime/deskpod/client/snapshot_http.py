"""The snapshot endpoint's transport: ``GET``/``PUT`` :data:`~deskpod.protocol.SNAPSHOT_PATH`.

Snapshots travel over HTTP on the daemon's port (same host and port as the
websocket, same bearer token), not the websocket, because an archive is often
larger than one websocket message. Both calls block (run them in a thread); no
proxy is ever used. Error answers map to :mod:`deskpod.errors`' tree.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request

from deskpod.errors import SnapshotError, SnapshotIntegrityError, error_from_wire
from deskpod.protocol import (
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_PATH,
    SNAPSHOT_SHA256_HEADER,
    ErrorBody,
    SnapshotRestored,
)

__all__ = ["SNAPSHOT_TIMEOUT_S", "download_snapshot", "upload_snapshot"]

SNAPSHOT_TIMEOUT_S = 120.0
"""Time allowed for one snapshot download or upload, seconds."""

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _snapshot_url(ws_url: str, query: dict[str, str] | None = None) -> str:
    parts = urllib.parse.urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit((scheme, parts.netloc, SNAPSHOT_PATH, urllib.parse.urlencode(query or {}), ""))


def _http_error(exc: urllib.error.HTTPError) -> Exception:
    """Map an error answer of the snapshot endpoint to deskpod's exception tree."""
    body = exc.read(65_536)
    try:
        envelope = ErrorBody.model_validate(json.loads(body)).model_dump()
    except ValueError:
        envelope = {"code": "internal", "message": f"HTTP {exc.code} from the sandbox", "detail": {}}
    if exc.code in (401, 403):
        envelope["code"] = "unauthorized"
    return error_from_wire(envelope)


def download_snapshot(ws_url: str, token: str) -> bytes:
    """Fetch a snapshot of the browser session (blocking).

    Args:
        ws_url: the sandbox's websocket URL (the endpoint is on its host and port).
        token: the control token in force.

    Returns:
        The archive, at most :data:`~deskpod.protocol.MAX_SNAPSHOT_BYTES` bytes.

    Raises:
        UnauthorizedError: the token was refused.
        BusyError: another request was running in the sandbox.
        SnapshotIntegrityError: the body does not match the SHA-256 the daemon sent.
        SnapshotError: the daemon could not take the snapshot, or the answer was unusable.
    """
    req = urllib.request.Request(_snapshot_url(ws_url), headers={"Authorization": f"Bearer {token}"})
    try:
        with _NO_PROXY.open(req, timeout=SNAPSHOT_TIMEOUT_S) as resp:
            data: bytes = resp.read(MAX_SNAPSHOT_BYTES + 1)
            digest = resp.headers.get(SNAPSHOT_SHA256_HEADER, "")
    except urllib.error.HTTPError as exc:
        raise _http_error(exc) from exc
    except OSError as exc:
        raise SnapshotError(f"snapshot download failed: {exc}", detail={"reason": "transport"}) from exc
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError("the snapshot exceeds MAX_SNAPSHOT_BYTES", detail={"reason": "too_large"})
    if hashlib.sha256(data).hexdigest() != digest:
        raise SnapshotIntegrityError("the snapshot does not match the SHA-256 the sandbox sent")
    return data


def upload_snapshot(ws_url: str, token: str, archive: bytes, start_url: str | None) -> SnapshotRestored:
    """Restore a snapshot into the sandbox's browser (blocking).

    Args:
        ws_url: the sandbox's websocket URL (the endpoint is on its host and port).
        token: the control token in force.
        archive: the snapshot's bytes.
        start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.

    Returns:
        What the daemon restored (files and bytes).

    Raises:
        UnauthorizedError: the token was refused.
        BusyError: another request was running in the sandbox.
        SnapshotIntegrityError: a file of the archive does not match its manifest.
        SnapshotError: the archive is malformed or too large, the browser did not
            start, or the answer was unusable.
        InvalidRequestError: ``start_url`` is not an http(s) URL.
    """
    if len(archive) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError("the snapshot exceeds MAX_SNAPSHOT_BYTES", detail={"reason": "too_large"})
    query = {"start_url": start_url} if start_url is not None else {}
    req = urllib.request.Request(
        _snapshot_url(ws_url, query), data=archive, method="PUT",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"},
    )
    try:
        with _NO_PROXY.open(req, timeout=SNAPSHOT_TIMEOUT_S) as resp:
            return SnapshotRestored.model_validate_json(resp.read(65_536))
    except urllib.error.HTTPError as exc:
        raise _http_error(exc) from exc
    except OSError as exc:
        raise SnapshotError(f"snapshot upload failed: {exc}", detail={"reason": "transport"}) from exc
    except ValueError as exc:
        raise SnapshotError("the sandbox's answer to a restore is malformed") from exc
