"""Seeing a page as its user does: through frames, shadow roots and accessible names.

A page's controls are not all in its top document. An embedded payment widget is an
``<iframe>`` (often from another site, so Chromium's site isolation runs it in another
renderer process: an out-of-process iframe, its own DevTools target); a component
keeps its button in a shadow root; a ``<div>`` with a click listener is a button to the
user; a button's label may be an image's ``alt`` or CSS ``content``. Reading
``document.elementFromPoint`` and ``innerText`` of the top document misses all of them.
This module reads them through DevTools instead:

- **Hit-testing**: ``DOM.getNodeForLocation`` answers the deepest node under a point in
  the frame tree of one renderer, author shadow roots included (in-process child frames
  too). When the node is the owner of an out-of-process frame, the point is translated by
  the frame's content box (``DOM.getBoxModel``) and hit-tested again in the frame's own
  session (``Target.setAutoAttach`` with ``flatten`` attaches them: :class:`Browser`).
  ``includeUserAgentShadowDOM`` is off, so an ``<input>``'s own internals answer as the
  input; ``ignorePointerEventsNone`` is off, so an overlay a click passes through is
  passed through here as well.
- **The control**: from the node up its composed ancestors (slots, shadow hosts), at
  most :data:`MAX_ANCESTORS`, the nearest of: a semantic control (link, button, input,
  widget role...), an element with a click-like listener (``DOMDebugger.getEventListeners``:
  ``click``, ``mousedown``, ``pointerup``...; ``onclick`` attributes included), or the
  element that sets ``cursor: pointer``. ``clickable`` says an element from the point up
  to the control has such a listener or the pointer cursor.
- **Its label**: the computed accessible name and role of the accessibility tree
  (``Accessibility.getPartialAXTree``), which count ``alt``, ``aria-*``, labels and
  CSS generated content as a screen reader does.
- **Focus** follows ``document.activeElement`` through open shadow roots and into each
  focused frame, to the deepest focused element.
- **Page text and the accessibility tree** cover every frame (each frame's text after
  the top document's, under a ``[frame URL]`` line; accessibility nodes of a frame inline
  under its ``Iframe`` node, each with its frame's URL); a frame that could not be read
  is named in ``unread`` and marked in the text.

Scripts run in an isolated world (``Page.createIsolatedWorld``): the page's own scripts
cannot replace the DOM methods they call (click listeners are looked up on the page's
own side: listeners belong to a world). A point in a frame that could not be seen into
(its target not attached, or not answering) is reported as ``frame_unreadable``, so the
controller does not take it for empty page. Every call is bounded in time, all calls of
one read together and the frames read per request in number
(:mod:`deskpod.agentd.browser.frame_calls`, :data:`deskpod.protocol.MAX_FRAMES`).
Everything returned is page data: untrusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deskpod.agentd.browser.frame_calls import WORLD
from deskpod.agentd.browser.frame_scripts import (
    ACTIVE_SCRIPT,
    CHAIN_SCRIPT,
    DESCRIBE_SCRIPT,
    FOCUS_SCRIPT,
    LANDS_ON_SCRIPT,
    TEXT_SCRIPT,
    TRAITS_SCRIPT,
)
from deskpod.agentd.browser.key_facts import FocusStep, KeyFacts
from deskpod.errors import BrowserError

__all__ = [
    "AxForest",
    "CLICK_EVENTS",
    "FrameReader",
    "MAX_ANCESTORS",
    "MAX_FRAME_DEPTH",
    "PDF_MIME_TYPE",
    "frame_header",
    "summarize_ax",
]

MAX_FRAME_DEPTH = 8
"""Most frame boundaries a hit test or the focus is followed through."""

MAX_ANCESTORS = 6
"""Elements examined from the one under the point up (its composed ancestors) when
looking for the control a click activates."""

CLICK_EVENTS = frozenset(
    {"click", "auxclick", "dblclick", "mousedown", "mouseup", "pointerdown", "pointerup", "touchstart", "touchend"}
)
"""Listener types that make an element a control."""


PDF_MIME_TYPE = "application/pdf"
"""The MIME type of a frame's document that the browser's PDF viewer shows."""


def _web_url(url: str) -> bool:
    """Whether ``url`` is a page's (``http``, ``https``, ``about``, ``data``, ``blob``), not
    the browser's own (the PDF viewer's ``chrome-extension:`` frames, or a frame reported
    with no URL)."""
    return url.split(":", 1)[0].lower() in ("http", "https", "about", "data", "blob") and ":" in url[1:]

_FRAME_OWNERS = frozenset({"IFRAME", "FRAME"})

_UNREADABLE_FRAME: dict[str, Any] = {"tag": "iframe", "frame_unreadable": True}



@dataclass(frozen=True)
class _Hit:
    """The deepest node at a point: ``backend`` of frame ``frame_id`` in ``session``, the
    frame's CSS offset (``dx``, ``dy``) in the top viewport; ``owner``: it is a frame's
    owner that answered for its content (the frame was not seen into); ``backend``
    ``None``: a frame there could not be read."""

    session: str
    frame_id: str
    backend: int | None
    dx: float
    dy: float
    owner: bool
"""What hit-testing reports when the point is in a frame it could not see into."""


@dataclass(frozen=True)
class AxForest:
    """The accessibility trees of a page's frames, as :meth:`FrameReader.ax_forest` read them.

    ``top``: the top document's frame id. ``trees``: ``Accessibility.getFullAXTree`` nodes
    per frame id. ``owners``: ``(session, backend node id)`` of each frame owner element,
    to the id of the frame it holds. ``sessions`` and ``urls``: each frame's session and
    URL. ``unread``: the URLs of frames whose tree could not be read.
    """

    top: str
    trees: dict[str, list[dict[str, Any]]]
    owners: dict[tuple[str, int], str]
    sessions: dict[str, str]
    urls: dict[str, str]
    unread: list[str]


def frame_header(url: str, readable: bool = True) -> str:
    """The line that starts a frame's text in the page text (or says it could not be read)."""
    return f"[frame {url}]" if readable else f"[frame {url}: not readable]"


def _prop(node: dict[str, Any], key: str) -> Any:
    return (node.get(key) or {}).get("value")


def summarize_ax(
    trees: dict[str, list[dict[str, Any]]],
    top: str,
    owners: dict[tuple[str, int], str],
    sessions: dict[str, str],
    frame_urls: dict[str, str],
    max_nodes: int,
) -> list[dict[str, Any]]:
    """Flatten per-frame accessibility trees into one depth-first summary.

    Args:
        trees: ``Accessibility.getFullAXTree`` nodes per frame id.
        top: the top document's frame id.
        owners: ``(session, backend node id)`` of each frame owner element (backend node
            ids are unique within a renderer, which one session reads), to the id of the
            frame it holds; that frame's nodes are listed under the owner's node.
        sessions: each frame's session.
        frame_urls: each frame's URL, named on its nodes (``frame``; ``None`` on the top's).
        max_nodes: at most this many nodes.

    Returns:
        ``{"depth", "role", "name", "value", "focused", "frame"}`` per unignored node
        with a role other than ``none``, ``generic`` or ``InlineTextBox``.
    """
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def walk_frame(frame_id: str, depth: int) -> None:
        if frame_id in seen or frame_id not in trees:
            return
        seen.add(frame_id)
        nodes = {n["nodeId"]: n for n in trees[frame_id] if "nodeId" in n}
        for root in [nid for nid, n in nodes.items() if not n.get("parentId") or n["parentId"] not in nodes]:
            walk(frame_id, nodes, root, depth)

    def walk(frame_id: str, nodes: dict[str, dict[str, Any]], nid: str, depth: int) -> None:
        if len(out) >= max_nodes or nid not in nodes:
            return
        node = nodes[nid]
        role = _prop(node, "role")
        shown = not node.get("ignored") and role not in (None, "none", "generic", "InlineTextBox")
        if shown:
            focused = any(p.get("name") == "focused" and p.get("value", {}).get("value")
                          for p in node.get("properties", []))
            name, value = _prop(node, "name"), _prop(node, "value")
            out.append({"depth": depth, "role": str(role),
                        "name": None if name in (None, "") else str(name),
                        "value": None if value in (None, "") else str(value), "focused": bool(focused),
                        "frame": None if frame_id == top else frame_urls.get(frame_id)})
        inner = depth + 1 if shown else depth
        for child in node.get("childIds", []):
            walk(frame_id, nodes, child, inner)
        held = owners.get((sessions.get(frame_id, ""), node.get("backendDOMNodeId", -1)))
        if held is not None:
            walk_frame(held, inner)

    walk_frame(top, 0)
    return out


def _pick(traits: Sequence[Sequence[bool]], listened: Sequence[bool]) -> tuple[int, bool]:
    """The index of the control in the hit chain and whether it is only clickable
    (a listener or the pointer cursor) rather than a semantic control."""
    semantic = next((i for i, t in enumerate(traits) if t[0]), None)
    listener = next((i for i, hit in enumerate(listened) if hit), None)
    pointer = None
    if traits and traits[0][1]:
        pointer = 0
        while pointer + 1 < len(traits) and traits[pointer + 1][1]:
            pointer += 1
    found = [i for i in (semantic, listener, pointer) if i is not None]
    if not found:
        return 0, False
    chosen = min(found)
    return chosen, listener is not None or pointer is not None


class FrameReader(KeyFacts):
    """Reads one page (its top document's ``page`` session and the out-of-process frames
    attached under it, ``children``) through every frame; its calls are
    :class:`~deskpod.agentd.browser.frame_calls.FrameCalls`'.

    Args:
        call: sends one DevTools command (see :class:`~deskpod.agentd.browser.frame_calls.Call`).
        page: the page target's session id.
        main_frame: its top document's frame id.
        children: the attached out-of-process frames' targets.
        budget_s: the most seconds all of this reader's calls may take together (a call
            after that fails at once, so the frames left are reported unread).
    """

    async def text(self, max_chars: int) -> tuple[str | None, list[str], list[str]]:
        """The visible text of the top document, then of each frame under a
        :func:`frame_header` line, at most ``max_chars`` characters in all.

        A document that is a PDF (``application/pdf``: the browser's PDF viewer shows it) has
        no text this reads: it is named under a ``[frame URL: PDF, text not read]`` line (the
        top document's text is then empty), and the viewer's own frames (any frame that is not
        ``http``/``https``/``about``/``data``/``blob``, and the viewer's content frame of the
        PDF's URL) are neither read nor listed.

        Returns:
            ``(text, unread, pdfs)``: ``text`` is ``None`` when the top document could not be
            read; ``unread`` lists the URLs of frames that could not be (PDFs included);
            ``pdfs`` the URLs of the PDF documents.

        Raises:
            BrowserError: the page's frame tree could not be read.
        """
        frames = await self.frames()
        parts: list[str] = []
        unread: list[str] = []
        pdfs = [f.url for f in frames if f.mime_type == PDF_MIME_TYPE]
        top_text: str | None = None
        left = max_chars
        for frame in frames:
            if frame.mime_type == PDF_MIME_TYPE:
                unread.append(frame.url)
                if frame.owner_session is None:
                    top_text = ""
                parts.append(f"[frame {frame.url}: PDF, text not read]")
                continue
            if pdfs and frame.owner_session is not None and (frame.url in pdfs or not _web_url(frame.url)):
                continue  # the PDF viewer's own frames
            try:
                # Each frame's text is cut in the page, to what is still left of max_chars.
                expression = f"({TEXT_SCRIPT}).slice(0, {max(0, left)})"
                value = (await self._evaluate(frame.session, frame.frame_id, expression)).get("value")
            except BrowserError:
                if frame.owner_session is None:
                    raise
                unread.append(frame.url)
                parts.append(frame_header(frame.url, readable=False))
                continue
            if frame.owner_session is None:
                top_text = str(value or "")
                left -= len(top_text)
            elif value:
                parts.append(f"{frame_header(frame.url)}\n{value}")
                left -= len(parts[-1]) + 2
        if top_text is None:
            return None, unread, pdfs
        text = "\n\n".join([top_text, *parts] if top_text else parts)
        return text[:max_chars], unread, pdfs

    async def ax_forest(self) -> AxForest:
        """Every frame's accessibility tree (``Accessibility.getFullAXTree``) and where each
        frame's owner element is.

        Raises:
            BrowserError: the top document's tree could not be read (a child frame's
                failure only lists it in :attr:`AxForest.unread`).
        """
        frames = await self.frames()
        trees: dict[str, list[dict[str, Any]]] = {}
        owners: dict[tuple[str, int], str] = {}
        unread: list[str] = []
        for frame in frames:
            try:
                tree = await self._cdp("Accessibility.getFullAXTree", {"frameId": frame.frame_id}, frame.session)
                if frame.owner_session is not None:
                    owner = await self._cdp("DOM.getFrameOwner", {"frameId": frame.frame_id}, frame.owner_session)
                    owners[(frame.owner_session, int(owner["backendNodeId"]))] = frame.frame_id
            except (BrowserError, KeyError, TypeError, ValueError):
                if frame.owner_session is None:
                    raise
                unread.append(frame.url)
                continue
            trees[frame.frame_id] = list(tree.get("nodes", []))
        return AxForest(self._main, trees, owners, {f.frame_id: f.session for f in frames},
                        {f.frame_id: f.url for f in frames}, unread)

    async def accessibility(self, max_nodes: int) -> tuple[list[dict[str, Any]], list[str]]:
        """The accessibility tree of every frame as one summary (see :func:`summarize_ax`).

        Returns:
            ``(nodes, unread)``: ``unread`` lists the URLs of frames whose tree could not
            be read.

        Raises:
            BrowserError: the top document's tree could not be read.
        """
        forest = await self.ax_forest()
        return summarize_ax(forest.trees, forest.top, forest.owners, forest.sessions, forest.urls,
                            max_nodes), forest.unread

    async def focused(self) -> dict[str, Any] | None:
        """The deepest focused element (see :meth:`focus`).

        Returns:
            The :class:`deskpod.protocol.FocusedElement` fields, or ``None`` when nothing
            is focused.

        Raises:
            BrowserError: the top document could not be read.
        """
        found, _ = await self.focus()
        return found

    async def focus(self) -> tuple[dict[str, Any] | None, list[FocusStep]]:
        """The deepest focused element: ``document.activeElement`` through open shadow roots
        and into the focused frame, at most :data:`MAX_FRAME_DEPTH` frames deep, with
        ``frame`` the URL of the frame holding it (``None`` for the top document); and the
        documents on the way (the focus path, the top one first).

        Returns:
            ``(fields, path)``: the :class:`deskpod.protocol.FocusedElement` fields, or ``None``
            when nothing is focused; the documents read.

        Raises:
            BrowserError: the top document could not be read.
        """
        session, frame_id, url = self._page, self._main, None
        found: dict[str, Any] | None = None
        path: list[FocusStep] = []
        for _ in range(MAX_FRAME_DEPTH):
            try:
                active = await self._evaluate(session, frame_id, ACTIVE_SCRIPT, by_value=False)
                path.append(FocusStep(session, frame_id))
                object_id = active.get("objectId")
                if not object_id:
                    return found, path
                info = await self._on(session, object_id, FOCUS_SCRIPT)
                if not isinstance(info, dict):
                    return found, path
                info["frame"] = url
                found = info
                if info.get("tag") not in ("iframe", "frame"):
                    return found, path
                node = (await self._cdp("DOM.describeNode", {"objectId": object_id}, session)).get("node", {})
            except BrowserError:
                if url is None:
                    raise
                return found, path
            child_frame = str(node.get("frameId") or "")
            child = self._children.get(child_frame)
            if not child_frame:
                return found, path
            if child is not None:
                session = child.session
            frame_id = child_frame
            url = await self._frame_url(session, frame_id)
        return found, path

    async def element_at(self, sx: float, sy: float, device_scale_factor: float) -> dict[str, Any] | None:
        """The control under the screen point (``sx``, ``sy``), screen pixels (see the
        module docstring).

        Returns:
            The :class:`deskpod.protocol.ElementInfo` fields (``box`` in screen pixels,
            ``frame`` the URL of the frame holding the control, ``None`` in the top
            document), or ``None`` when no element is there.

        Raises:
            BrowserError: the top document could not be read.
        """
        ox, oy, zoom = await self.viewport(device_scale_factor)
        hit = await self._hit((sx - ox) / zoom, (sy - oy) / zoom)
        if hit is None:
            return None
        if hit.backend is None:
            return _UNREADABLE_FRAME.copy()
        try:
            info = await self._control(hit.session, hit.frame_id, hit.backend, hit.dx, hit.dy, ox, oy, zoom)
        except (BrowserError, KeyError, IndexError, TypeError, ValueError):
            if hit.session == self._page:
                raise
            return _UNREADABLE_FRAME.copy()
        if info is not None and hit.owner:
            # A frame's owner answered for its content: the frame was not seen into.
            info["frame_unreadable"] = True
        return info

    async def node_at(self, sx: float, sy: float, device_scale_factor: float) -> tuple[str, str, int] | None:
        """The deepest node under the screen point (``sx``, ``sy``), screen pixels, hit-tested
        as for :meth:`element_at`, as ``(session, frame_id, backend node id)``; ``None`` when
        nothing is there or a frame there could not be seen into.

        Raises:
            BrowserError: the top document could not be read.
        """
        ox, oy, zoom = await self.viewport(device_scale_factor)
        hit = await self._hit((sx - ox) / zoom, (sy - oy) / zoom)
        if hit is None or hit.backend is None or hit.owner:
            return None
        return hit.session, hit.frame_id, hit.backend

    async def lands_on(self, sx: float, sy: float, device_scale_factor: float, session: str, frame_id: str,
                       backend: int) -> bool:
        """Whether a click at the screen point (``sx``, ``sy``), screen pixels, lands on the
        DOM node ``backend`` of frame ``frame_id`` (read through ``session``): the deepest
        node hit-tested there (as for :meth:`element_at`, through frames and shadow roots)
        is that node, inside it (its composed descendants) or a ``<label>`` of it. False
        when another element covers the point, or a frame there could not be seen into.

        Raises:
            BrowserError: the top document could not be read.
        """
        ox, oy, zoom = await self.viewport(device_scale_factor)
        hit = await self._hit((sx - ox) / zoom, (sy - oy) / zoom)
        if hit is None or hit.backend is None or hit.owner or hit.session != session or hit.frame_id != frame_id:
            return False
        if hit.backend == backend:
            return True
        try:
            target = await self.resolve(session, frame_id, backend)
            found = await self.resolve(session, frame_id, hit.backend)
            if target is None or found is None:
                return False
            result = await self._cdp("Runtime.callFunctionOn", {
                "functionDeclaration": LANDS_ON_SCRIPT, "objectId": found, "returnByValue": True,
                "arguments": [{"objectId": target}], "objectGroup": WORLD}, session)
        except BrowserError:
            if session == self._page:
                raise
            return False
        self._used.add(session)
        return result.get("result", {}).get("value") is True

    async def _hit(self, x: float, y: float) -> _Hit | None:
        """The deepest node at the CSS point (``x``, ``y``) of the top viewport, followed
        into out-of-process frames; ``None``: nothing there; ``backend`` ``None``: a frame
        there did not answer or is nested too deep.

        Raises:
            BrowserError: the top document could not be read.
        """
        session, dx, dy = self._page, 0.0, 0.0
        for _ in range(MAX_FRAME_DEPTH):
            try:
                hit = await self._cdp("DOM.getNodeForLocation", {
                    "x": int(x - dx), "y": int(y - dy), "includeUserAgentShadowDOM": False,
                    "ignorePointerEventsNone": False}, session)
                backend, frame_id = hit.get("backendNodeId"), str(hit.get("frameId") or "")
                if backend is None:
                    return None
                node = (await self._cdp("DOM.describeNode", {"backendNodeId": backend}, session)).get("node", {})
                owner = node.get("nodeName") in _FRAME_OWNERS
                child = self._children.get(str(node.get("frameId") or "")) if owner else None
                if child is None:
                    return _Hit(session, frame_id, int(backend), dx, dy, owner)
                content = (await self._cdp("DOM.getBoxModel", {"backendNodeId": backend}, session))["model"]["content"]
                dx, dy = dx + float(content[0]), dy + float(content[1])
            except (BrowserError, KeyError, IndexError, TypeError, ValueError):
                if session == self._page:
                    raise
                return _Hit(session, "", None, dx, dy, True)
            session = child.session
        return _Hit(session, "", None, dx, dy, True)

    async def _control(
        self, session: str, frame_id: str, backend: int, dx: float, dy: float, ox: float, oy: float, zoom: float
    ) -> dict[str, Any] | None:
        """Describe the control for the node ``backend`` of frame ``frame_id`` (in
        ``session``), whose frame starts at CSS offset (``dx``, ``dy``) in the top viewport."""
        context = await self._world(session, frame_id)
        resolved = await self._cdp("DOM.resolveNode", {"backendNodeId": backend, "executionContextId": context,
                                                       "objectGroup": WORLD}, session)
        node_id = resolved.get("object", {}).get("objectId")
        if not node_id:
            return None
        chain = await self._on(session, node_id, CHAIN_SCRIPT, MAX_ANCESTORS, by_value=False)
        props = await self._cdp("Runtime.getProperties", {"objectId": chain["objectId"], "ownProperties": True},
                                session)
        members = sorted((int(p["name"]), p["value"]["objectId"]) for p in props.get("result", [])
                          if p.get("name", "").isdigit() and p.get("value", {}).get("objectId"))
        if not members:
            return None
        traits = await self._on(session, chain["objectId"], TRAITS_SCRIPT)
        listened = []
        for _, object_id in members:
            # Listeners are per world: ask about the element as the page's own scripts see it.
            member = (await self._cdp("DOM.describeNode", {"objectId": object_id}, session)).get("node", {})
            page_side = await self._cdp("DOM.resolveNode", {"backendNodeId": member.get("backendNodeId"),
                                                            "objectGroup": WORLD}, session)
            found = await self._cdp("DOMDebugger.getEventListeners",
                                    {"objectId": page_side.get("object", {}).get("objectId")}, session)
            listened.append(any(entry.get("type") in CLICK_EVENTS for entry in found.get("listeners", [])))
        index, clickable = _pick(traits if isinstance(traits, list) else [], listened)
        object_id = members[min(index, len(members) - 1)][1]
        info = await self._on(session, object_id, DESCRIBE_SCRIPT)
        if not isinstance(info, dict):
            return None
        control = (await self._cdp("DOM.describeNode", {"objectId": object_id}, session)).get("node", {})
        control_backend = control.get("backendNodeId")
        try:
            ax = await self._cdp("Accessibility.getPartialAXTree",
                                 {"backendNodeId": control_backend, "fetchRelatives": False}, session)
            node = next((n for n in ax.get("nodes", []) if n.get("backendDOMNodeId") == control_backend), None)
        except BrowserError:
            node = None
        if node is not None and not node.get("ignored"):
            role, name = _prop(node, "role"), _prop(node, "name")
            info["role"] = str(role) if role not in (None, "", "none") else info.get("role")
            info["name"] = str(name)[:200] if name not in (None, "") else info.get("name")
        info["clickable"] = clickable
        info["frame"] = None if frame_id == self._main else await self._frame_url(session, frame_id)
        info["box"] = None
        try:
            border = (await self._cdp("DOM.getBoxModel", {"backendNodeId": control_backend}, session))["model"]["border"]
        except (BrowserError, KeyError):
            return info
        xs, ys = [float(v) + dx for v in border[0::2]], [float(v) + dy for v in border[1::2]]
        if max(xs) > min(xs) and max(ys) > min(ys):
            info["box"] = [ox + min(xs) * zoom, oy + min(ys) * zoom, ox + max(xs) * zoom, oy + max(ys) * zoom]
        return info
