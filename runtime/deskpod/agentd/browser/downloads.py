"""The browser's downloads: permission, events, finished files.

Chromium is told through ``Browser.setDownloadBehavior`` (Chrome DevTools Protocol,
https://chromedevtools.github.io/devtools-protocol/tot/Browser/#method-setDownloadBehavior)
to refuse every download (``deny``) unless the request being served carries the
controller's permission; then, until just after its reply, it saves downloads
(``allowAndName``) into :data:`~deskpod.protocol.DOWNLOADS_DIR` under their ids.
Either way it sends ``Browser.downloadWillBegin`` and ``Browser.downloadProgress``
events (``eventsEnabled``), from which :class:`Downloads` keeps each download's
state for the next observation.

The behaviour is the browser's own decision point, taken before any byte is saved,
so a refused download leaves no file (no ``.crdownload`` either). It is the setting in
force when the download *begins* (its server has answered), which can be long after the
action that started it. So while the run's allowlist is in force (the browser's
``Fetch`` interception, :mod:`deskpod.agentd.browser.request_filter`, pauses every request) each
document request is also marked with the permission in force when it was sent, kept
through its redirect hops (:meth:`Downloads.on_request`): a download whose request was
sent without permission, or of an ``http(s)`` URL no paused request had, is reported
``blocked`` even when it begins inside a permitted window, and cancelled
(``Browser.cancelDownload``); if the browser finished it first, its file is removed.

A download is reported ``complete`` only once the browser says so and a file of the
size it reported is there; it is then renamed to its suggested name made safe (never
overwriting another file), and that path is reported. A page names the download
and its URL: both are untrusted, cut and cleaned before they are reported.

The agent's file tools read the folder: a ``list_dir`` or ``read_file`` whose path is
:data:`~deskpod.protocol.DOWNLOADS_DIR` or under it is answered by the daemon from
the sandbox's folder (:class:`DownloadsFolder`, the workspace tools' own confined
reads), every other tool and path goes to the workspace as before; nothing writes
there but the browser (a write to that path is a workspace path outside the
workspace, refused by the runner).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import TypeIs

from deskpod.agentd.browser.request_filter import clean_url
from deskpod.agentd.workspace.files import WorkspaceFiles
from deskpod.protocol import (
    DOWNLOADS_DIR,
    MAX_DOWNLOAD_NAME_CHARS,
    MAX_DOWNLOADS,
    DirListing,
    Download,
    FileContent,
    ListDirRequest,
    ReadFileRequest,
)

__all__ = ["Downloads", "DownloadsFolder", "NAVIGATION_DOWNLOAD_WAIT_S", "safe_name"]

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]")
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
NAVIGATION_DOWNLOAD_WAIT_S = 3.0
"""Seconds a permitted navigation that ended ``net::ERR_ABORTED`` (what a download does
to it) waits for its download to begin before it answers."""
_MAX_TRACKED = 256
"""Downloads remembered at once (the oldest finished ones are forgotten first)."""
_MAX_MARKS = 4096
"""Document requests whose permission mark is remembered (the oldest go first; a
download whose request's mark is gone is refused while requests are marked)."""


def safe_name(suggested: str) -> str:
    """A file name for a download the site suggested: no path separators or control
    characters (each becomes ``_``), no leading dots or spaces, at most
    :data:`~deskpod.protocol.MAX_DOWNLOAD_NAME_CHARS` UTF-8 bytes; ``download`` when
    nothing is left.

    Args:
        suggested: the name from ``Browser.downloadWillBegin`` (page data).

    Returns:
        A name that is one path component.
    """
    name = _UNSAFE.sub("_", suggested).lstrip(". ").rstrip()
    encoded = name.encode()[: MAX_DOWNLOAD_NAME_CHARS - 8]
    name = encoded.decode(errors="ignore").rstrip()
    return name or "download"


@dataclass
class _Item:
    id: str
    url: str
    name: str
    state: str = "in_progress"
    reason: str | None = None
    received_bytes: int = 0
    total_bytes: int | None = None
    path: str | None = None

    def report(self) -> Download:
        progress = None
        if self.total_bytes:
            progress = min(1.0, self.received_bytes / self.total_bytes)
        elif self.state == "complete":
            progress = 1.0
        return Download(
            id=self.id, url=self.url, name=self.name, state=self.state,  # type: ignore[arg-type]
            reason=self.reason,  # type: ignore[arg-type]
            received_bytes=self.received_bytes, total_bytes=self.total_bytes, progress=progress, path=self.path,
        )


class Downloads:
    """Every download of the current browser, from its DevTools events.

    Args:
        folder: where the browser saves permitted downloads (created when missing).
    """

    def __init__(self, folder: Path = Path(DOWNLOADS_DIR)) -> None:
        self.folder = folder
        self.permitted = False
        """Whether downloads that begin now may start (the request's permission)."""
        self.marking = False
        """Whether the browser pauses every request (``Fetch``, the run's allowlist), so
        that each download's request is seen, and marked, before it is sent."""
        self._items: dict[str, _Item] = {}
        self._changed: list[str] = []
        self._sent: dict[str, bool] = {}  # paused document request id -> permitted when its first hop was sent
        self._request_of: dict[str, str] = {}  # its URL's key (_url_key) -> the latest such request id
        self._cancel: list[str] = []
        self.begun = 0
        """How many downloads began since the browser started."""

    def behavior(self) -> dict[str, Any]:
        """``Browser.setDownloadBehavior``'s parameters for the current permission."""
        return {"behavior": "allowAndName" if self.permitted else "deny", "downloadPath": str(self.folder),
                "eventsEnabled": True}

    def prepare(self) -> None:
        """Forget every download (a new browser) and make sure the folder exists."""
        self._items.clear()
        self._changed.clear()
        self._sent.clear()
        self._request_of.clear()
        self._cancel.clear()
        self.permitted = False
        self.marking = False
        try:
            self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("cannot make the downloads folder %s: %s", self.folder, exc)

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Take one ``Browser.downloadWillBegin`` or ``Browser.downloadProgress`` event."""
        guid = str(params.get("guid", ""))
        if not _ID.match(guid):
            return
        if method == "Browser.downloadWillBegin":
            url = str(params.get("url", ""))  # as the browser sent it, to match its request's mark
            begun = _Item(guid, clean_url(url), safe_name(str(params.get("suggestedFilename", ""))))
            if not self.permitted or not self._sent_permitted(url):
                begun.state, begun.reason = "blocked", "not_permitted"
                if self.permitted:  # the browser saves it: its request was sent without permission
                    self._cancel.append(guid)
            self._items[guid] = begun
            self.begun += 1
            self._forget_old()
            self._touch(guid)
            return
        item = self._items.get(guid)
        if method != "Browser.downloadProgress" or item is None:
            return
        if item.state == "blocked" and params.get("state") == "completed":
            self._remove_saved(item)  # finished before the cancel reached the browser
        if item.state != "in_progress":
            return
        item.received_bytes = _count(params.get("receivedBytes"))
        total = _count(params.get("totalBytes"))
        item.total_bytes = total or None
        state = params.get("state")
        if state == "canceled":
            item.state, item.reason = "failed", "canceled"
        elif state == "completed":
            self._finish(item)
        self._touch(guid)

    def on_request(self, params: dict[str, Any]) -> None:
        """Take one ``Fetch.requestPaused`` event: a document request (a navigation, or a
        download still to begin) is marked with whether downloads are permitted now, or,
        for a redirect hop (``redirectedRequestId``), with its first hop's mark."""
        if params.get("resourceType") != "Document":
            return
        request_id = str(params.get("requestId", ""))
        first = str(params.get("redirectedRequestId") or "")
        self._sent[request_id] = self._sent.get(first, self.permitted) if first else self.permitted
        self._request_of[_url_key(str((params.get("request") or {}).get("url", "")))] = request_id
        for marks in (self._sent, self._request_of):
            while len(marks) > _MAX_MARKS:
                del marks[next(iter(marks))]

    def _sent_permitted(self, url: str) -> bool:
        """Whether the request of a download of ``url`` (as ``Browser.downloadWillBegin``
        gives it) was sent with permission: its mark (:meth:`on_request`); when the browser
        pauses every request but none of this ``http(s)`` URL was seen (or its mark was
        forgotten), no; when it does not pause them (no allowlist) or the URL never goes
        to the network (``blob:``, ``data:``), the permission in force decides alone."""
        mark = self._sent.get(self._request_of.get(_url_key(url), ""))
        if mark is not None:
            return mark
        return not (self.marking and url.lower().startswith(("http:", "https:")))

    def take_cancels(self) -> list[str]:
        """The downloads (guids) to cancel in the browser now: begun with the browser's
        permission, from a request sent without it."""
        cancels, self._cancel = self._cancel, []
        return cancels

    async def wait_begun(self, count: int, timeout_s: float) -> bool:
        """Wait until more than ``count`` downloads have begun, at most ``timeout_s`` seconds.

        Returns:
            True when one began.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.begun <= count and loop.time() < deadline:
            await asyncio.sleep(0.02)
        return self.begun > count

    def take(self) -> list[Download]:
        """The downloads to report now: those that changed since the last call and
        those still in progress, oldest first, at most :data:`~deskpod.protocol.MAX_DOWNLOADS`
        (the newest)."""
        ids = [g for g in self._items if g in self._changed or self._items[g].state == "in_progress"]
        self._changed.clear()
        return [self._items[g].report() for g in ids[-MAX_DOWNLOADS:]]

    def _touch(self, guid: str) -> None:
        if guid not in self._changed:
            self._changed.append(guid)

    def _forget_old(self) -> None:
        while len(self._items) > _MAX_TRACKED:
            oldest = next((g for g, i in self._items.items() if i.state != "in_progress"), next(iter(self._items)))
            del self._items[oldest]

    def _remove_saved(self, item: _Item) -> None:
        """Remove the file the browser saved under ``item``'s id (a refused download)."""
        try:
            (self.folder / item.id).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove refused download %s: %s", item.id, exc)

    def _finish(self, item: _Item) -> None:
        """The browser says ``item`` is complete: check its file and give it its name."""
        saved = self.folder / item.id
        try:
            size = saved.stat().st_size
        except OSError:
            size = -1
        if size < 0 or size != item.received_bytes or (item.total_bytes is not None and size != item.total_bytes):
            log.warning("download %s said complete, but its file is %s bytes of %s", item.id, size,
                        item.total_bytes)
            item.state, item.reason = "failed", "file_missing"
            return
        stem, dot, ext = item.name.rpartition(".")
        if not stem:
            stem, dot, ext = item.name, "", ""
        for n in range(1000):
            name = item.name if n == 0 else f"{stem} ({n}){dot}{ext}"
            target = self.folder / name
            try:
                os.link(saved, target)  # never replaces an existing file
            except FileExistsError:
                continue
            except OSError as exc:
                log.warning("cannot name download %s: %s", item.id, exc)
                item.state, item.reason = "failed", "file_missing"
                return
            saved.unlink(missing_ok=True)
            item.state, item.name, item.path = "complete", name, str(target)
            return
        item.state, item.reason = "failed", "file_missing"


def _url_key(url: str) -> str:
    """A request's URL as :meth:`Downloads.on_request` and ``Browser.downloadWillBegin``
    both know it: without its fragment (``Fetch.requestPaused`` gives the URL without it,
    the download event with it), hashed whole (no two URLs share a key by a common
    prefix)."""
    return hashlib.sha256(url.partition("#")[0].encode("utf-8", "surrogatepass")).hexdigest()


def _count(value: Any) -> int:
    """A byte count from an event: a non-negative int (CDP sends floats), else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(0, min(int(value), 1 << 50))


class DownloadsFolder:
    """Read-only file tools on the downloads folder (see the module docstring).

    Args:
        folder: the downloads folder.
        state_dir: a scratch folder the workspace tools need (never written here).
    """

    def __init__(self, folder: Path = Path(DOWNLOADS_DIR), state_dir: Path = Path("/tmp/deskpod-downloads")) -> None:
        self.folder = folder
        self._tools = WorkspaceFiles(folder, state_dir)

    def handles(self, request: object) -> TypeIs[ListDirRequest | ReadFileRequest]:
        """Whether ``request`` is a ``list_dir`` or ``read_file`` of this folder."""
        if not isinstance(request, (ListDirRequest, ReadFileRequest)):
            return False
        path = request.path.rstrip("/") or "/"
        return path == str(self.folder) or path.startswith(f"{self.folder}/")

    async def serve(self, request: ListDirRequest | ReadFileRequest) -> DirListing | FileContent:
        """Answer it from the folder, paths relative to it.

        Raises:
            PathDeniedError: the path leads out of the folder (e.g. ``..``).
            WorkspaceError: no such file or folder, or not readable as asked.
        """
        self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        relative = request.path.rstrip("/")[len(str(self.folder)):].lstrip("/") or "."
        inner = request.model_copy(update={"path": relative})
        if isinstance(inner, ListDirRequest):
            return await asyncio.to_thread(self._tools.list_dir, inner)
        return await asyncio.to_thread(self._tools.read_file, inner)
