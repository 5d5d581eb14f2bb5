"""Desktop applications: the ``open_app`` action.

A sandbox started with the desktop profile (compose profile ``desktop``) has a third zone,
the desktop applications' zone: a container of its own where a fixed set of Debian
applications runs as their own uid, with the agent's ``/workspace`` shared, on the
sandbox's display as untrusted X clients (SECURITY.md, "Trust zones"). :class:`OpenApp`
starts one of them by its name in :data:`APPS`, never by a command line; its windows join
the observation's list (:attr:`~deskpod.protocol.Observation.windows`, zone ``"agent"``)
and live across steps until a reset. A sandbox without that zone answers
``execution_failed`` with ``detail["reason"]`` ``"no_desktop"``.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BaseModel, Field

from deskpod.protocol._base import STRICT

__all__ = ["APPS", "AppName", "OpenApp", "WorkspaceFile"]

AppName = Literal["terminal", "editor", "file_manager", "document", "spreadsheet", "pdf_viewer", "image_viewer"]
"""An application of the desktop profile: ``terminal`` (xterm), ``editor`` (Mousepad, text),
``file_manager`` (Thunar), ``document`` (AbiWord, a word processor), ``spreadsheet``
(Gnumeric), ``pdf_viewer`` (Zathura), ``image_viewer`` (Ristretto)."""

APPS: Final[tuple[str, ...]] = ("terminal", "editor", "file_manager", "document", "spreadsheet", "pdf_viewer",
                                "image_viewer")
"""Every :data:`AppName`, in the order the docs list them."""

def _inside_workspace(path: str) -> str:
    if path.startswith("/") or ".." in path.split("/"):
        raise ValueError("a path relative to /workspace, without a '..' part")
    return path


WorkspaceFile = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$"),
                          AfterValidator(_inside_workspace)]
"""A path relative to ``/workspace``: no leading ``/``, no ``..`` part, no control character."""


class OpenApp(BaseModel):
    """Start the desktop application ``app`` (:data:`APPS`), its working folder
    ``/workspace``; ``path``: a file of the workspace for it to open (a folder for the file
    manager; the terminal ignores it). Each call starts another instance (another window)."""

    model_config = STRICT
    type: Literal["open_app"]
    app: AppName
    path: WorkspaceFile | None = None
