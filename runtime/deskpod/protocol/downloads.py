"""Downloads and file choosers as the observation reports them.

Built by the daemon from the browser's DevTools events (``Browser.downloadWillBegin``,
``Browser.downloadProgress``, ``Page.fileChooserOpened``) and read by the controller,
which treats them as untrusted: a page chooses a download's URL and suggested name.

A download starts only when the request that caused it carries the controller's
permission (:attr:`~deskpod.protocol.ActRequest.allow_downloads`); otherwise the
browser refuses it and the observation reports it ``blocked`` with reason
``not_permitted``, so the controller can ask a human and start it again.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import MAX_PATH_CHARS, MAX_URL_CHARS

__all__ = [
    "DOWNLOADS_DIR",
    "DOWNLOAD_REASONS",
    "Download",
    "FileChooser",
    "MAX_DOWNLOADS",
    "MAX_DOWNLOAD_NAME_CHARS",
    "MAX_UPLOAD_FILES",
    "SetFiles",
    "UploadPaths",
]

DOWNLOADS_DIR = "/tmp/downloads"
"""Where finished downloads are, in the sandbox container (a reset empties it)."""

MAX_DOWNLOADS = 32
"""Most downloads one observation reports (the newest ones)."""

MAX_DOWNLOAD_NAME_CHARS = 255
"""Longest file name reported for a download (a Linux file name's limit, in bytes)."""

MAX_UPLOAD_FILES = 16
"""Most files one ``set_files`` action sets."""

DOWNLOAD_REASONS = frozenset({"not_permitted", "canceled", "file_missing"})
"""Why a download is ``blocked`` or ``failed``: the request that started it had no
permission (the browser refused it); the browser or the site ended it before it was
complete; the browser said complete but no file of that size was there."""

UploadPaths = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS, pattern=r"^[^\x00]+$")]],
    Field(min_length=1, max_length=MAX_UPLOAD_FILES),
]
"""Workspace files an action gives the page (``set_files``, ``drop_files``): paths relative to
the workspace's root, regular files (no symlinks), at most :data:`MAX_UPLOAD_FILES`."""

_Url = Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
_Bytes = Annotated[int, Field(strict=True, ge=0, le=1 << 50)]


class Download(BaseModel):
    """One download and where it stands.

    ``id``: the browser's id for it. ``url``: where it comes from (page data).
    ``name``: the file name the site suggested, made safe (no ``/``, no control
    characters, no leading dot). ``state``: ``in_progress``; ``complete`` (only once
    the whole file is in :data:`DOWNLOADS_DIR`; a partial file is never reported
    complete); ``blocked`` (refused before it started, see ``reason``); ``failed``
    (ended before it was complete). ``reason``: one of :data:`DOWNLOAD_REASONS` for
    ``blocked`` and ``failed``, else ``None``. ``received_bytes`` / ``total_bytes``:
    bytes so far and in all (``None``: the site did not say). ``progress``: their
    ratio, 0.0 to 1.0 (``None`` with no total). ``path``: the finished file's absolute
    path in the sandbox, only when ``complete``.
    """

    model_config = STRICT
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    url: _Url
    name: Annotated[str, Field(min_length=1, max_length=MAX_DOWNLOAD_NAME_CHARS, pattern=r"^[^/\x00-\x1f\x7f]+$")]
    state: Literal["in_progress", "complete", "blocked", "failed"]
    reason: Literal["not_permitted", "canceled", "file_missing"] | None = None
    received_bytes: _Bytes = 0
    total_bytes: _Bytes | None = None
    progress: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    path: Annotated[str, Field(max_length=4096, pattern=r"^/[^\x00-\x1f\x7f]*$")] | None = None


class FileChooser(BaseModel):
    """A file chooser the page opened (a click on ``<input type=file>`` or a script's
    ``showPicker()``), or a desktop application's file dialog with the keyboard focus. A
    ``set_files`` action answers either (the page's first when both are there).

    For the page's, no native dialog appears: the daemon intercepts it. ``multiple``: the
    input takes several files. ``tab``: the id of the tab it belongs to.

    For an application's (``tab`` ``None``): ``application`` is its name (one of
    :data:`~deskpod.protocol.APPS`), ``save`` whether the dialog saves (it has a Save
    button: ``set_files`` then names the file to write, which need not exist yet). It takes
    one file.
    """

    model_config = STRICT
    multiple: bool = False
    tab: Annotated[str, Field(max_length=128)] | None = None
    application: Annotated[str, Field(max_length=64)] | None = None
    save: bool = False


class SetFiles(BaseModel):
    """An action: answer the open file chooser (:class:`FileChooser`) with files of the
    workspace. ``paths``: relative to the workspace's root, regular files (no
    symlinks), at most :data:`MAX_UPLOAD_FILES`, one unless the chooser takes several.
    The daemon copies them out of the workspace for the browser; the page then has
    them, so the controller judges it an upload (``L2``). An application's file dialog
    gets the one path typed into its location field and confirmed (the file to open, or
    the file to save, which need not exist). No chooser open: error
    ``execution_failed`` with ``detail["reason"] == "no_file_chooser"``.
    """

    model_config = STRICT
    type: Literal["set_files"]
    paths: UploadPaths
