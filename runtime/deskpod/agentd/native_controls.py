"""The observation's native controls: what the desktop applications' accessibility trees say
is under a point and has the focus (:mod:`deskpod.protocol.native`).

agentd asks the applications runner (:meth:`deskpod.agentd.apps_client.AppsClient.accessible`)
only when the window on top at ``element_at``'s point, or the one with the keyboard focus, is a
desktop application's (its X client came in with an application's display grant: the X gate
knows, the application cannot claim it). The runner answers in screen pixels; this module
checks nothing the wire models did not and converts boxes to the model space. A tree that
could not be read is listed in ``unread`` (part ``native``), and the controller judges the
action as one on a control it could not read.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from deskpod.agentd.apps_wire import AppsAccessible, AppsAccessibleRequest
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.errors import DeskpodError, StaleRefError
from deskpod.protocol import APPS, MAX_NATIVE_NODES, FileChooser, NativeDialog, NativeElement, NativeNode, TextSource, Unread
from deskpod.protocol.coords import CoordinateMap

__all__ = ["NATIVE_REF_PREFIX", "NativeReader", "NativeRefs", "file_chooser_of", "model_box", "native_fields"]

NATIVE_REF_PREFIX = "n"
"""A native control's ref starts with it (``n1``...); a page element's with ``e``."""

log = logging.getLogger(__name__)


class NativeReader(Protocol):
    """Reads native controls (:class:`~deskpod.agentd.apps_client.AppsClient`)."""

    async def accessible(self, request: AppsAccessibleRequest) -> AppsAccessible:
        """The answer to ``request``; raises :class:`~deskpod.errors.DeskpodError` when it failed."""
        ...


def model_box(box: tuple[int, int, int, int] | list[int], coords: CoordinateMap) -> list[int]:
    """A screen box [x0, y0, x1, y1] in the model space, not clamped to it (a window may reach
    past the screen's edges)."""
    x0, y0, x1, y1 = box
    return [round(x0 / coords.scale_x), round(y0 / coords.scale_y), round(x1 / coords.scale_x),
            round(y1 / coords.scale_y)]


class NativeRefs:
    """The refs of the latest native tree an observation carried (``n1``, ``n2``...: its nodes
    with a box, numbered by the daemon, never by the application) and their boxes in the model
    space. A new tree replaces them all: a ref of an older one is stale."""

    def __init__(self) -> None:
        self._boxes: dict[str, list[int]] = {}

    def assign(self, nodes: list[NativeNode]) -> list[NativeNode]:
        """``nodes`` (model space) with their refs, which replace every earlier one (a ref the
        zone's answer carried is dropped)."""
        self._boxes = {}
        out = []
        for node in nodes:
            ref = None
            if node.box is not None:
                ref = f"{NATIVE_REF_PREFIX}{len(self._boxes) + 1}"
                self._boxes[ref] = node.box
            out.append(node.model_copy(update={"ref": ref}))
        return out

    def point(self, ref: str) -> tuple[int, int]:
        """The centre of ``ref``'s box (model space).

        Raises:
            StaleRefError: the latest tree holds no such ref (``detail["reason"]`` ``"gone"``).
        """
        box = self._boxes.get(ref)
        if box is None:
            raise StaleRefError(f"ref {ref!r} is not in the latest native tree; observe with accessibility again",
                                detail={"reason": "gone", "ref": ref})
        return (box[0] + box[2]) // 2, (box[1] + box[3]) // 2


def file_chooser_of(dialog: NativeDialog | None, window: AgentWindowInfo | None) -> FileChooser | None:
    """The observation's ``file_chooser`` for the native dialog ``dialog`` of the focused
    window ``window`` (``None``: it is not a desktop application's file chooser). ``save``: the
    dialog has a button named Save (the application's own word: it only changes what the
    agent is told)."""
    if dialog is None or dialog.role != "file chooser" or window is None or window.source not in APPS:
        return None
    save = any(button.replace("_", "").strip().lower() == "save" for button in dialog.buttons)
    return FileChooser(application=window.source, save=save)


def _element(node: NativeNode | None, coords: CoordinateMap) -> NativeElement | None:
    if node is None:
        return None
    return NativeElement(role=node.role, name=node.name, text=node.text, states=node.states, app=node.app,
                         box=model_box(node.box, coords) if node.box is not None else None)


def _in_model(node: NativeNode, coords: CoordinateMap) -> NativeNode:
    return node.model_copy(update={"box": model_box(node.box, coords) if node.box is not None else None, "ref": None})


def _scan_text(nodes: list[NativeNode]) -> str:
    """The names and texts of ``nodes``, one a line, for the controller's injection scan."""
    return "\n".join(piece for node in nodes for piece in (node.name, node.text) if piece)


async def native_fields(reader: NativeReader, point: tuple[int, int] | None, at: AgentWindowInfo | None,
                        focus: AgentWindowInfo | None, coords: CoordinateMap, summary: bool,
                        text_sources: bool, refs: NativeRefs | None = None) -> dict[str, Any]:
    """The observation's ``native_at``, ``native_focused``, ``native_dialog``,
    ``native_accessibility`` (with ``summary``), ``file_chooser`` when the focused window is an
    application's file dialog (:func:`file_chooser_of`) and, with ``text_sources``, a ``native`` text source, for the windows an
    application of :data:`~deskpod.protocol.APPS` made; ``{}`` when neither is one.

    Args:
        point: ``element_at``'s point, screen pixels (``None``: none asked).
        at: the agent's window on top at ``point``; ``focus``: the one with the keyboard focus.
        summary: read the focused application window's tree (``accessibility`` was asked).
        text_sources: its names and texts join the injection scan's sources.
        refs: numbers the tree's nodes (their refs replace the earlier tree's).
    """
    at = at if at is not None and at.source in APPS and point is not None else None
    focus = focus if focus is not None and focus.source in APPS else None
    if at is None and focus is None:
        return {}
    whole = focus is not None and (summary or text_sources)
    request = AppsAccessibleRequest(point=list(point) if at is not None and point is not None else None,
                                    window=list(at.box) if at is not None else None,
                                    window_title=at.title if at is not None else None,
                                    focus_window=list(focus.box) if focus is not None else None,
                                    focus_title=focus.title if focus is not None else None,
                                    summary=whole, max_nodes=MAX_NATIVE_NODES if whole else 0)
    try:
        answer = await reader.accessible(request)
    except DeskpodError as exc:
        log.warning("native controls unread: %s", exc.message)
        return {"unread": [Unread(part="native", reason="app_error")]}
    out: dict[str, Any] = {"native_at": _element(answer.at, coords), "native_focused": _element(answer.focused, coords),
                           "native_dialog": answer.dialog}
    if (chooser := file_chooser_of(answer.dialog, focus)) is not None:
        out["file_chooser"] = chooser
    if summary and focus is not None:
        nodes = [_in_model(node, coords) for node in answer.nodes]
        out["native_accessibility"] = refs.assign(nodes) if refs is not None else nodes
    if text_sources and answer.nodes:
        out["native_text"] = TextSource(source="native", text=_scan_text(answer.nodes))
    return out
