"""Element refs: the page's accessibility tree as text with ``[ref=eN]``, and acting by ref.

**The snapshot** (:attr:`deskpod.protocol.Observation.snapshot`) is the accessibility tree
of the page and its frames (same- and cross-origin: each frame's tree is read in the
DevTools session that holds it, as :class:`~deskpod.agentd.browser.frames.FrameReader` does),
written in playwright-mcp's style, one node a line: ``- role "name" [ref=eN]: value``.
Actionable nodes (links, buttons, fields, options...: :data:`ACTIONABLE_ROLES`, or any
focusable node) carry a ref. Refs are the daemon's own numbers, counted across its
snapshots and never reused, so a ref of an older snapshot is unknown to the newer one;
every string taken from the page is normalised (NFKC; every Unicode line break a space;
format characters such as zero-width spaces removed; ``[`` and ``]`` written ``(`` and
``)``) and JSON-quoted, so no page string can end its line or its name, or hold anything
that reads as a ref: no page can show a ref the daemon did not give. Each ref remembers the DOM node (its session, frame and backend
node id) and the node's border box when the snapshot was taken.

**Acting by ref** is real input. An element action is turned, right before it runs, into
the pointer and key actions a person would use on that element: a click at the centre of
its box on screen (XTEST, through the same executor, the same screen check right before
the input and the same release of every key and button on abort as any ``click``), then
``ctrl+a`` and the typed text for ``type_element``. Only ``select_option`` goes through
DevTools (a native ``<select>``'s popup is drawn outside the page), after the same screen
check at the select's centre. Why input rather than DevTools clicks: a DevTools click
(``HTMLElement.click()``, ``Input.dispatchMouseEvent``) would reach an element a person
could not (hidden under an overlay, off screen, inside a frame the page covers), skip the
page's own hit-testing, and need a second set of policy checks; input at the element's
box hits exactly what a click at those pixels hits, so the controller judges it with the
pixel rules, unchanged (:mod:`deskpod.controller.gui.element_actions`).

A ref is refused with :class:`~deskpod.errors.StaleRefError` when it is not one of the
latest snapshot's (``unknown_ref``), its node is gone from the page (``gone``), its box
moved by more than :data:`MOVED_TOLERANCE_PX` CSS pixels since the snapshot (``moved``),
or its centre is outside the viewport (``not_visible``: scroll, then take a new snapshot);
and with :class:`~deskpod.errors.RefObscuredError` (code ``ref_obscured``) when a click at
that centre would not land on its node (another element covers it there: the node hit
is not it, inside it or a label of it). So what an element action does is what a click
at its point does, and what the controller judges there (the control a click there
hits) is the ref's own element; a ``fill_form`` field is filled as
:func:`~deskpod.protocol.form_field_kind` says of that control, the function the
controller judges it by.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from deskpod.agentd.native_controls import NATIVE_REF_PREFIX, NativeRefs
from deskpod.errors import BrowserError, InvalidActionError, RefObscuredError, StaleRefError
from deskpod.protocol import (
    Action,
    MAX_AX_NAME_CHARS,
    MAX_SNAPSHOT_CHARS,
    ClickElement,
    CoordinateMap,
    DragElement,
    FillForm,
    HoverElement,
    SelectOption,
    TypeElement,
    form_field_kind,
    pixel_actions,
)

if TYPE_CHECKING:
    from deskpod.agentd.browser.cdp import Browser
    from deskpod.agentd.browser.frames import FrameReader

__all__ = [
    "ACTIONABLE_ROLES",
    "ElementActions",
    "MOVED_TOLERANCE_PX",
    "RefEntry",
    "RefTable",
    "Snapshot",
    "snapshot_line",
]

ACTIONABLE_ROLES: Final = frozenset({
    "button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox", "listbox", "option", "menuitem",
    "menuitemcheckbox", "menuitemradio", "tab", "switch", "slider", "spinbutton", "treeitem", "PopUpButton",
    "ToggleButton", "textField", "TextField",
})
"""Roles whose nodes get a ref (besides any node the tree marks focusable)."""

MOVED_TOLERANCE_PX: Final = 2.0
"""CSS pixels an element's box may shift since the snapshot before its ref is stale."""

_HIDDEN_ROLES = frozenset({"none", "generic", "InlineTextBox", "LineBreak"})
_DOCUMENT_ROLES = frozenset({"RootWebArea", "WebArea", "Iframe", "IframePresentational"})
"""Focusable nodes that are documents or frames, not controls: no ref."""
_LINE_BREAKS = re.compile("[\n\v\f\r\x1c-\x1e\x85\u2028\u2029]")
"""Every character ``str.splitlines`` breaks a line at."""
_ROLE_CHARS = re.compile(r"[^A-Za-z0-9_-]")

_CHECKED = "function () { return !!this.checked; }"
_SELECT = r"""function (labels, byValue) {
  if (this.tagName !== "SELECT") return {error: "not a <select> element"};
  const shown = o => byValue ? [o.value, o.label] : [o.label, (o.textContent || "").trim()];
  const wanted = new Set(labels);
  const found = [];
  for (const o of this.options) if (shown(o).some(l => wanted.has(l))) found.push(o);
  if (byValue && !this.multiple) found.splice(1);
  if (found.length < labels.length && !(this.multiple === false && found.length === 1 && labels.length === 1))
    return {error: "no option labelled " + JSON.stringify(labels.filter(v => !found.some(o => shown(o).includes(v))))};
  if (!this.multiple && found.length > 1) return {error: "this select takes one option"};
  for (const o of this.options) o.selected = found.includes(o);
  this.dispatchEvent(new Event("input", {bubbles: true}));
  this.dispatchEvent(new Event("change", {bubbles: true}));
  return {selected: found.map(o => o.label)};
}"""
"""Selects the options whose visible label (``label``, or the text) is one of ``labels``:
never by ``value``, which the page does not show, so the strings the controller judges are
the labels of what gets selected; with ``byValue`` (a direct client's ``by="value"``, which
a controller never sends) those whose ``value`` or label is one of them."""


def _page_string(value: Any) -> str:
    """A page-derived string as it appears in a snapshot: clipped, in NFKC form (a
    fullwidth ``［`` is ``[``), every line break (``\\n``, U+2028, U+0085... any that
    ``str.splitlines`` splits at) a space, format characters (category ``Cf``: zero-width
    spaces, joiners, bidi controls) removed, every ``[`` and ``]`` written ``(`` and ``)``
    (no page string can hold a bracket, so none reads as ``[ref=eN]`` or a ``[state]``),
    then JSON-quoted (its own quotes escaped)."""
    text = unicodedata.normalize("NFKC", str(value)[:MAX_AX_NAME_CHARS])
    text = "".join(c for c in _LINE_BREAKS.sub(" ", text) if unicodedata.category(c) != "Cf")
    return json.dumps(text.replace("[", "(").replace("]", ")"), ensure_ascii=False)


def snapshot_line(depth: int, role: str, name: str | None, value: str | None, ref: str | None,
                  states: tuple[str, ...] = (), frame: str | None = None) -> str:
    """One node of a snapshot: ``- role "name" [state] [frame "URL"] [ref=eN]: "value"``,
    indented two spaces per level (every page string JSON-quoted, see the module)."""
    parts = ["  " * min(depth, 40) + "- " + (_ROLE_CHARS.sub("", role)[:40] or "node")]
    if name:
        parts.append(_page_string(name))
    parts += [f"[{state}]" for state in states]
    if frame is not None:
        parts.append(f"[frame {_page_string(frame)}]")
    if ref is not None:
        parts.append(f"[ref={ref}]")
    line = " ".join(parts)
    return f"{line}: {_page_string(value)}" if value else line


@dataclass(frozen=True)
class RefEntry:
    """What a ref points at: the DOM node ``backend`` of frame ``frame_id`` read through
    DevTools session ``session``, its ``role`` and ``name`` in the tree, and its border box
    ``box`` (CSS pixels of its frame's local root, ``None``: no box) at the snapshot."""

    ref: str
    session: str
    frame_id: str
    backend: int
    role: str
    name: str | None
    box: tuple[float, float, float, float] | None


@dataclass
class Snapshot:
    """A snapshot's text, the refs it gave, whether it was cut, and the frames it could not read."""

    text: str
    refs: dict[str, RefEntry] = field(default_factory=dict)
    truncated: bool = False
    unread: list[str] = field(default_factory=list)


class RefTable:
    """The refs of the daemon's latest snapshot (the only valid ones), and the counter that
    numbers refs across snapshots so an older one is never valid again."""

    def __init__(self) -> None:
        self._next = 1
        self.refs: dict[str, RefEntry] = {}

    def allocate(self) -> str:
        """A ref never handed out before (``e1``, ``e2``... across snapshots)."""
        ref = f"e{self._next}"
        self._next += 1
        return ref

    def replace(self, refs: dict[str, RefEntry]) -> None:
        """Make ``refs`` the valid ones; every earlier ref is stale from now on."""
        self.refs = dict(refs)

    def clear(self) -> None:
        """Forget every ref (a reset, a new browser); numbering goes on."""
        self.refs = {}

    def get(self, ref: str) -> RefEntry:
        """The entry of ``ref``.

        Raises:
            StaleRefError: ``ref`` is not one of the latest snapshot's (reason ``unknown_ref``).
        """
        entry = self.refs.get(ref)
        if entry is None:
            raise StaleRefError(f"ref {ref!r} is not one of the latest snapshot's refs; take a new snapshot",
                                detail={"reason": "unknown_ref", "ref": ref})
        return entry


def _prop(node: dict[str, Any], key: str) -> Any:
    return (node.get(key) or {}).get("value")


def _flags(node: dict[str, Any]) -> dict[str, Any]:
    return {p.get("name"): (p.get("value") or {}).get("value") for p in node.get("properties", [])}


def _quad_box(quad: list[float]) -> tuple[float, float, float, float] | None:
    xs, ys = [float(v) for v in quad[0::2]], [float(v) for v in quad[1::2]]
    if not xs or max(xs) <= min(xs) or max(ys) <= min(ys):
        return None
    return min(xs), min(ys), max(xs), max(ys)


class ElementActions:
    """Snapshots with refs, and element actions resolved to input at the elements' boxes.

    Args:
        browser: the DevTools client of the daemon's browser.
    """

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.table = RefTable()
        self.native: NativeRefs | None = None
        """The refs of the latest native tree (``nN``: :mod:`deskpod.agentd.native_controls`)."""

    # ---- the snapshot ------------------------------------------------------------------------

    async def snapshot(self, max_nodes: int, max_chars: int = MAX_SNAPSHOT_CHARS) -> Snapshot:
        """Take a snapshot of the active tab (see the module) and make its refs the valid ones.

        Args:
            max_nodes: most lines (nodes).
            max_chars: most characters of text; cut at a line's end.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the tab.
            BrowserError: the top document's tree could not be read, or is too large to ask
                for (``detail["reason"] == "too_large"``, see
                :meth:`~deskpod.agentd.browser.cdp.Browser.ax_tree_fits`).
        """
        self.table.clear()
        if not await self.browser.ax_tree_fits():
            raise BrowserError("the page's accessibility tree is too large to snapshot",
                               detail={"reason": "too_large"})
        shot = await self.browser.read_page(lambda reader: self._read(reader, max_nodes, max_chars))
        self.table.replace(shot.refs)
        return shot

    async def _read(self, reader: FrameReader, max_nodes: int, max_chars: int) -> Snapshot:
        forest = await reader.ax_forest()
        trees, owners, sessions, urls, unread = (forest.trees, forest.owners, forest.sessions, forest.urls,
                                                 forest.unread)
        lines: list[str] = []
        refs: dict[str, RefEntry] = {}
        state = {"chars": 0, "cut": False}
        seen: set[str] = set()

        def emit(line: str) -> bool:
            if len(lines) >= max_nodes or state["chars"] + len(line) + 1 > max_chars:
                state["cut"] = True
                return False
            lines.append(line)
            state["chars"] += len(line) + 1
            return True

        async def walk_frame(frame_id: str, depth: int) -> None:
            if frame_id in seen or frame_id not in trees:
                return
            seen.add(frame_id)
            nodes = {n["nodeId"]: n for n in trees[frame_id] if "nodeId" in n}
            for root in [nid for nid, n in nodes.items() if not n.get("parentId") or n["parentId"] not in nodes]:
                await walk(frame_id, nodes, root, depth)

        async def walk(frame_id: str, nodes: dict[str, dict[str, Any]], nid: str, depth: int) -> None:
            if state["cut"] or nid not in nodes:
                return
            node = nodes[nid]
            role = _prop(node, "role")
            shown = not node.get("ignored") and role not in (None, *_HIDDEN_ROLES)
            session = sessions.get(frame_id, reader.page)
            backend = node.get("backendDOMNodeId")
            held = owners.get((session, backend if isinstance(backend, int) else -1))
            if shown:
                flags = _flags(node)
                name, value = _prop(node, "name"), _prop(node, "value")
                states = tuple(s for s in ("checked", "disabled", "expanded", "selected", "focused")
                               if flags.get(s) in (True, "true"))
                ref = None
                actionable = str(role) in ACTIONABLE_ROLES or (flags.get("focusable") is True
                                                               and str(role) not in _DOCUMENT_ROLES)
                if actionable and isinstance(backend, int) and held is None and "disabled" not in states:
                    ref = self.table.allocate()
                    refs[ref] = RefEntry(ref, session, frame_id, backend, str(role),
                                         None if name in (None, "") else str(name)[:MAX_AX_NAME_CHARS],
                                         await self._box(reader, session, backend))
                if not emit(snapshot_line(depth, str(role), None if name in (None, "") else str(name),
                                          None if value in (None, "") else str(value), ref, states,
                                          urls.get(held) if held is not None else None)):
                    return
            inner = depth + 1 if shown else depth
            for child in node.get("childIds", []):
                await walk(frame_id, nodes, child, inner)
            if held is not None:
                await walk_frame(held, inner)

        await walk_frame(reader.main_frame, 0)
        for frame_id in trees:  # frames whose owner was not found in a tree: listed after the page
            if frame_id not in seen and emit(snapshot_line(0, "Iframe", None, None, None, (), urls.get(frame_id))):
                await walk_frame(frame_id, 1)
        for url in unread:
            emit(snapshot_line(0, "Iframe", "not readable", None, None, (), url))
        return Snapshot("\n".join(lines), refs, bool(state["cut"]), unread)

    @staticmethod
    async def _box(reader: FrameReader, session: str, backend: int) -> tuple[float, float, float, float] | None:
        try:
            model = (await reader.cdp("DOM.getBoxModel", {"backendNodeId": backend}, session))["model"]
            return _quad_box(model["border"])
        except (BrowserError, KeyError, TypeError, ValueError):
            return None

    # ---- resolving a ref ---------------------------------------------------------------------

    async def point(self, ref: str, coords: CoordinateMap) -> tuple[int, int]:
        """The model-space point an element action on ``ref`` lands on: the centre of the
        element's box on the screen now (a native control's ``nN``: the centre of its box in the
        latest native tree).

        Raises:
            RefObscuredError: another element covers that point (a click there would land
                on it, not on the ref's element, inside it or on a label of it).
            StaleRefError: the ref is unknown, its element gone, moved or off screen.
            BrowserError: the browser could not be asked.
        """
        if self.native is not None and ref.startswith(NATIVE_REF_PREFIX):
            return self.native.point(ref)
        entry = self.table.get(ref)
        sx, sy = await self.browser.read_page(lambda reader: self._screen_point(reader, entry))
        width, height = coords.screen.width, coords.screen.height
        if not (0 <= sx < width and 0 <= sy < height):
            raise StaleRefError(f"ref {ref!r} is off screen; scroll it into view and take a new snapshot",
                                detail={"reason": "not_visible", "ref": ref})
        return coords.to_model(sx, sy)

    async def _screen_point(self, reader: FrameReader, entry: RefEntry) -> tuple[int, int]:
        box = await self._box(reader, entry.session, entry.backend)
        if box is None:
            raise StaleRefError(f"the element of ref {entry.ref!r} is gone from the page or has no box; "
                                "take a new snapshot", detail={"reason": "gone", "ref": entry.ref})
        if entry.box is None or max(abs(a - b) for a, b in zip(box, entry.box, strict=True)) > MOVED_TOLERANCE_PX:
            raise StaleRefError(f"the element of ref {entry.ref!r} moved since the snapshot; take a new one",
                                detail={"reason": "moved", "ref": entry.ref})
        dx, dy = await self._frame_offset(reader, entry.session)
        cx, cy = (box[0] + box[2]) / 2 + dx, (box[1] + box[3]) / 2 + dy
        width, height = await self._viewport_size(reader)
        if not (0 <= cx < width and 0 <= cy < height):
            raise StaleRefError(f"ref {entry.ref!r} is outside the page's viewport; scroll it into view and "
                                "take a new snapshot", detail={"reason": "not_visible", "ref": entry.ref})
        ox, oy, zoom = await reader.viewport(self.browser.device_scale_factor)
        sx, sy = int(ox + cx * zoom), int(oy + cy * zoom)
        if not await reader.lands_on(sx, sy, self.browser.device_scale_factor, entry.session, entry.frame_id,
                                     entry.backend):
            raise RefObscuredError(f"another element covers the centre of ref {entry.ref!r}: a click there would "
                                   "not land on it", detail={"reason": "obscured", "ref": entry.ref})
        return sx, sy

    @staticmethod
    async def _viewport_size(reader: FrameReader) -> tuple[float, float]:
        metrics = await reader.cdp("Page.getLayoutMetrics", {}, reader.page)
        viewport = metrics.get("cssLayoutViewport") or metrics.get("layoutViewport") or {}
        return float(viewport.get("clientWidth", 0)), float(viewport.get("clientHeight", 0))

    @staticmethod
    async def _frame_offset(reader: FrameReader, session: str) -> tuple[float, float]:
        """CSS offset of an out-of-process frame's viewport in the top viewport (0, 0 for the
        page's own session: DevTools gives in-process frames' boxes in its coordinates)."""
        dx = dy = 0.0
        for _ in range(8):
            if session == reader.page:
                return dx, dy
            child = next((c for c in reader.children if c.session == session), None)
            if child is None:
                raise StaleRefError("the frame of this ref is gone; take a new snapshot", detail={"reason": "gone"})
            owner = await reader.cdp("DOM.getFrameOwner", {"frameId": child.target_id}, child.parent)
            content = (await reader.cdp("DOM.getBoxModel", {"backendNodeId": owner["backendNodeId"]},
                                        child.parent))["model"]["content"]
            dx, dy = dx + float(content[0]), dy + float(content[1])
            session = child.parent
        raise StaleRefError("the frame of this ref is nested too deep", detail={"reason": "not_visible"})

    # ---- element actions as input ------------------------------------------------------------

    async def expand(self, action: Action, coords: CoordinateMap) -> list[Action]:
        """The actions ``action`` runs as, resolved now (see the module): pointer and key
        actions in the model space, element actions of a ``fill_form``'s fields (each
        resolved when its turn comes; a field is filled as
        :func:`~deskpod.protocol.form_field_kind` says of the control a click at its point
        hits, as the controller judges it), or ``[action]`` for ``select_option``.

        Raises:
            RefObscuredError: another element covers a ref's point.
            StaleRefError: a ref is stale.
            BrowserError: the browser could not be asked.
        """
        if isinstance(action, ClickElement | HoverElement | TypeElement):
            return pixel_actions(action, await self.point(action.ref, coords))
        if isinstance(action, DragElement):
            start = await self.point(action.ref, coords)
            return pixel_actions(action, start, await self.point(action.to_ref, coords))
        if isinstance(action, FillForm):
            steps: list[Action] = []
            for item in action.fields:
                # Filled as the control a click at its point hits, by the function the
                # controller judged it with (not by the ref's own role: they may differ).
                x, y = await self.point(item.ref, coords)
                hit = await self.browser.element_at(*coords.to_screen(x, y)) or {}
                kind = form_field_kind(hit.get("tag"), hit.get("input_type"), hit.get("role"))
                if kind == "choice":
                    wanted = item.value.strip().lower() in ("true", "on", "yes", "1", "checked")
                    if wanted != await self._checked(self.table.get(item.ref)):
                        steps.append(ClickElement(type="click_element", ref=item.ref))
                elif kind == "select":
                    steps.append(SelectOption(type="select_option", ref=item.ref, values=[item.value]))
                else:
                    steps.append(TypeElement(type="type_element", ref=item.ref, text=item.value))
            return steps
        return [action]

    async def _checked(self, entry: RefEntry) -> bool:
        return bool(await self._on_node(entry, _CHECKED))

    async def _on_node(self, entry: RefEntry, function: str, *args: Any) -> Any:
        async def run(reader: FrameReader) -> Any:
            object_id = await reader.resolve(entry.session, entry.frame_id, entry.backend)
            if object_id is None:
                raise StaleRefError(f"the element of ref {entry.ref!r} is gone from the page; take a new snapshot",
                                    detail={"reason": "gone", "ref": entry.ref})
            return await reader.call_on(entry.session, object_id, function, *args)
        return await self.browser.read_page(run)

    async def select(self, action: SelectOption) -> None:
        """Select the options labelled ``action.values`` (an option's ``label`` or visible
        text, never its ``value``; with ``by="value"`` its value or label) in the ``<select>``
        of ``action.ref`` through DevTools, firing ``input`` and ``change``.

        Raises:
            StaleRefError: the ref is stale.
            InvalidActionError: it is not a ``<select>``, or no option has one of the labels.
            BrowserError: the browser could not be asked.
        """
        result = await self._on_node(self.table.get(action.ref), _SELECT, list(action.values), action.by == "value")
        if not isinstance(result, dict) or "error" in result:
            reason = result.get("error") if isinstance(result, dict) else "no answer"
            raise InvalidActionError(f"select_option {action.ref}: {str(reason)[:200]}",
                                     detail={"action": "select_option", "ref": action.ref})
