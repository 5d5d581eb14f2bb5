"""What a key would do on a page besides typing: declared shortcuts and key listeners.

Read along the focus path (the top document and each focused frame's, as
:meth:`~deskpod.agentd.browser.frames.FrameReader.focused` follows it):

- **Shortcuts**: the controls with an ``accesskey`` or ``aria-keyshortcuts`` attribute,
  each with its label (one script per document, in the isolated world).
- **Key listeners**, only when nothing editable has the focus (a key typed into a field is
  typing; elsewhere it reaches the page's scripts): DevTools' ``DOMDebugger.getEventListeners``
  (``on…`` attributes included) on the window, the document, its ``<body>`` and the focused
  element and its composed ancestors (at most :data:`MAX_KEY_CHAIN`), for ``keydown``,
  ``keypress`` and ``keyup``. Listeners belong to a world, so each node is looked up as the
  page's own scripts see it (``DOM.resolveNode`` without a context: the page's main world).

The cost is a few DevTools calls per document: one script for the shortcuts, and with nothing
editable focused about three calls per node examined. The facts only go into
:class:`~deskpod.protocol.PageKeys`; the controller decides what they mean. Page data: untrusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from deskpod.agentd.browser.frame_calls import WORLD, FrameCalls
from deskpod.errors import BrowserError
from deskpod.protocol import MAX_LABEL_CHARS
from deskpod.protocol.page_keys import KEY_LISTENER_PLACES, MAX_KEY_SHORTCUTS, MAX_SHORTCUT_KEYS_CHARS

__all__ = ["FocusStep", "KEY_EVENTS", "KeyFacts", "MAX_KEY_CHAIN"]

KEY_EVENTS: Final = frozenset({"keydown", "keypress", "keyup"})
"""Listener types that make a page listen for keys."""

MAX_KEY_CHAIN: Final = 16
"""Most elements examined from the focused one up (its composed ancestors below ``<body>``)."""

_SHORTCUTS: Final = r"""(() => {
  const clean = (s) => String(s || "").replace(/\s+/g, " ").trim().slice(0, LABEL) || null;
  const out = [];
  for (const e of Array.from(document.querySelectorAll("[accesskey],[aria-keyshortcuts]")).slice(0, MAX)) {
    const label = clean(e.getAttribute("aria-label") || e.innerText || e.value || e.getAttribute("title"));
    if (e.hasAttribute("accesskey")) out.push({kind: "accesskey", keys: e.getAttribute("accesskey").slice(0, KEYS), label});
    if (e.hasAttribute("aria-keyshortcuts"))
      out.push({kind: "aria", keys: e.getAttribute("aria-keyshortcuts").slice(0, KEYS), label});
  }
  return out.slice(0, MAX);
})()""".replace("LABEL", "200").replace("MAX", str(MAX_KEY_SHORTCUTS)).replace("KEYS", str(MAX_SHORTCUT_KEYS_CHARS))
"""A document's declared shortcuts: ``[{kind, keys, label}]``."""

_NODES: Final = r"""(() => {
  const up = (n) => n.assignedSlot || n.parentElement || (n.parentNode && n.parentNode.host) || null;
  let e = document.activeElement;
  while (e && e.shadowRoot && e.shadowRoot.activeElement) e = e.shadowRoot.activeElement;
  const out = [document, document.body || null];
  for (let k = 0; e && k < LIMIT && e !== document.body && e !== document.documentElement; k++, e = up(e)) out.push(e);
  return out;
})()""".replace("LIMIT", str(MAX_KEY_CHAIN))
"""A document's nodes a key reaches: ``[document, body or null, focused, its ancestors...]``."""

_WINDOW: Final = "function () { return this.defaultView; }"


@dataclass(frozen=True)
class FocusStep:
    """One document on the focus path: frame ``frame_id`` read through ``session``."""

    session: str
    frame_id: str


class KeyFacts(FrameCalls):
    """Reads :class:`~deskpod.protocol.PageKeys`' facts along a focus path (see the module);
    the base of :class:`~deskpod.agentd.browser.frames.FrameReader`."""

    async def key_facts(self, path: list[FocusStep], editable: bool) -> dict[str, Any]:
        """The declared shortcuts of the documents on ``path`` (the deepest first) and, unless
        ``editable``, where key listeners are.

        Args:
            path: the documents on the focus path, the top one first.
            editable: the focused element takes text (its listeners are not read).

        Returns:
            :class:`~deskpod.protocol.PageKeys`' fields (strings cut to their caps).

        Raises:
            BrowserError: the top document could not be read (a frame's failure only leaves
                its facts out).
        """
        shortcuts: list[dict[str, Any]] = []
        places: set[str] = set()
        for step in reversed(path):
            try:
                found = (await self._evaluate(step.session, step.frame_id, _SHORTCUTS)).get("value")
                shortcuts += [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []
                if not editable:
                    places |= await self._listening(step)
            except (BrowserError, KeyError, TypeError, ValueError):
                if step.session == self._page and step.frame_id == self._main:
                    raise
        return {"shortcuts": [_cut_shortcut(s) for s in shortcuts[:MAX_KEY_SHORTCUTS]],
                "listeners": [p for p in KEY_LISTENER_PLACES if p in places]}

    async def _listening(self, step: FocusStep) -> set[str]:
        """Where in ``step``'s document key listeners are: ``window``, ``document``, ``body``,
        ``focused`` (the focused chain is read up to its first hit)."""
        nodes = await self._evaluate(step.session, step.frame_id, _NODES, by_value=False)
        props = await self._cdp("Runtime.getProperties", {"objectId": nodes["objectId"], "ownProperties": True},
                                step.session)
        members = sorted((int(p["name"]), p.get("value", {}).get("objectId")) for p in props.get("result", [])
                         if p.get("name", "").isdigit())
        places: set[str] = set()
        for index, object_id in members:
            if not object_id or ("focused" in places and index > 1):
                continue
            page_side = await self._page_side(step.session, object_id)
            if page_side is None:
                continue
            if await self._listens(step.session, page_side):
                places.add("document" if index == 0 else "body" if index == 1 else "focused")
            if index == 0:
                window = await self._cdp("Runtime.callFunctionOn", {
                    "functionDeclaration": _WINDOW, "objectId": page_side, "returnByValue": False,
                    "objectGroup": WORLD}, step.session)
                window_id = window.get("result", {}).get("objectId")
                if window_id and await self._listens(step.session, str(window_id)):
                    places.add("window")
        return places

    async def _page_side(self, session: str, object_id: str) -> str | None:
        """The node ``object_id`` (this reader's world) as the page's own scripts see it."""
        node = (await self._cdp("DOM.describeNode", {"objectId": object_id}, session)).get("node", {})
        if node.get("backendNodeId") is None:
            return None
        resolved = await self._cdp("DOM.resolveNode", {"backendNodeId": node["backendNodeId"], "objectGroup": WORLD},
                                   session)
        found = resolved.get("object", {}).get("objectId")
        return str(found) if found else None

    async def _listens(self, session: str, object_id: str) -> bool:
        found = await self._cdp("DOMDebugger.getEventListeners", {"objectId": object_id}, session)
        self._used.add(session)
        return any(entry.get("type") in KEY_EVENTS for entry in found.get("listeners", []))


def _cut_shortcut(found: dict[str, Any]) -> dict[str, Any]:
    """One shortcut as the page script reported it, every field checked and cut to its cap."""
    label = found.get("label")
    return {"kind": "aria" if found.get("kind") == "aria" else "accesskey",
            "keys": str(found.get("keys") or "")[:MAX_SHORTCUT_KEYS_CHARS],
            "label": str(label)[:MAX_LABEL_CHARS] if label else None}
