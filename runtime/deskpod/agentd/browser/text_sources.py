"""The page's readable text beyond ``innerText``, for the controller's injection scan.

An agent reads more than ``document.body.innerText``: the screenshot shows text in
CSS generated content, on a canvas and in frames, in the order the layout puts it;
the accessibility tree carries ``alt``, ``aria-label``, ``placeholder`` and ``title``
text. A page that hides an instruction in one of those is read by the agent and
missed by a scan of ``innerText`` alone. The observer gathers them
(:func:`deskpod.agentd.observe.collect_text_sources`) as
:class:`~deskpod.protocol.TextSource` entries (kinds in
:data:`~deskpod.protocol.TEXT_SOURCE_KINDS`):

- one script, :data:`COLLECT_SCRIPT`, run in a document: the text in visual order
  (text nodes sorted by where their boxes are laid out, so spans reordered by CSS
  ``order`` or positioning read as shown), text attributes, ``::before``/``::after``
  content (``attr()`` resolved), text of open shadow roots, and the same again for
  each same-origin frame, recursively (cross-origin frames live in other renderer
  processes: run the script per frame target to cover them);
- canvas text: :func:`canvas_hook_script` is registered with
  ``Page.addScriptToEvaluateOnNewDocument`` when the daemon attaches to a page, so it
  runs in every frame before the page's own scripts; it wraps
  ``CanvasRenderingContext2D.prototype.fillText``/``strokeText`` (and the
  ``OffscreenCanvas`` ones) with non-writable, non-configurable properties that
  record each string, readable through a non-configurable function on ``window``
  under :data:`CANVAS_KEY` (random per daemon);
- the accessibility tree's names and values (closed shadow roots included).

Everything is page content: untrusted, cut to the request's character budget.
Residuals: text drawn from images (``drawImage``, ``putImageData``, WebGL,
``<img>``, video) and canvases drawn in workers; pages that were already loaded when
the daemon attached (the hook runs on the next load); a page script may shadow DOM
methods the collection script calls in the page's world.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from deskpod.protocol import MAX_TEXT_SOURCES, TextSource

__all__ = ["CANVAS_KEY", "COLLECT_SCRIPT", "MAX_PIECE_CHARS", "build_sources", "canvas_hook_script",
           "collection_expression"]

CANVAS_KEY = f"__deskpod_canvas_{secrets.token_hex(8)}"
"""Name of the window property through which the canvas hook's record is read."""

MAX_PIECE_CHARS = 2000
"""Longest single piece (one attribute, one line, one canvas string) collected."""

_MAX_CANVAS_STRINGS = 500
_MAX_ELEMENTS = 20_000
_MAX_FRAME_DEPTH = 4

_CANVAS_HOOK = r"""(() => {
  const key = __KEY__;
  if (Object.prototype.hasOwnProperty.call(window, key)) return;
  const texts = [];
  const record = (t) => { if (texts.length < __MAX__) texts[texts.length] = String(t).slice(0, __PIECE__); };
  const wrap = (proto) => {
    if (!proto) return;
    for (const name of ["fillText", "strokeText"]) {
      const original = proto[name];
      if (typeof original !== "function") continue;
      const hooked = { [name](text, ...rest) { record(text); return Reflect.apply(original, this, [text, ...rest]); } }[name];
      Object.defineProperty(proto, name, { value: hooked, writable: false, configurable: false, enumerable: true });
    }
  };
  wrap(window.CanvasRenderingContext2D && window.CanvasRenderingContext2D.prototype);
  wrap(window.OffscreenCanvasRenderingContext2D && window.OffscreenCanvasRenderingContext2D.prototype);
  Object.defineProperty(window, key, { value: () => texts.slice(), enumerable: false, writable: false,
                                       configurable: false });
})()"""

COLLECT_SCRIPT = r"""((budget, key, maxElements, maxDepth, maxPiece) => {
  const out = {visual_text: [], attributes: [], generated_content: [], canvas: [], frames: [], shadow: []};
  const push = (kind, value) => {
    const s = String(value == null ? "" : value).replace(/\s+/g, " ").trim().slice(0, Math.min(maxPiece, budget));
    if (!s || budget <= 0) return;
    budget -= s.length + 1;
    out[kind].push(s);
  };
  const ATTRS = ["alt", "title", "placeholder", "aria-label", "aria-description", "aria-placeholder",
                 "aria-roledescription", "aria-valuetext", "aria-braillelabel", "aria-brailleroledescription"];
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE"]);
  const CSS_STRING = /"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|attr\(\s*([\w-]+)\s*\)/g;
  const unescape = (s) => s.replace(/\\([0-9a-fA-F]{1,6})\s?/g, (_, h) => String.fromCodePoint(parseInt(h, 16)))
    .replace(/\\(.)/g, "$1");
  const generated = (el, value) => {
    if (!value || value === "none" || value === "normal") return "";
    let text = "";
    for (const m of value.matchAll(CSS_STRING)) {
      text += m[3] !== undefined ? (el.getAttribute(m[3]) || "") : unescape(m[1] !== undefined ? m[1] : m[2]);
    }
    return text;
  };
  const shown = (el) => !el.checkVisibility || el.checkVisibility({visibilityProperty: true, checkVisibilityCSS: true});
  let elements = 0;
  const visual = [];
  const texts = (root, win) => {
    const walker = (root.ownerDocument || root).createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const range = (root.ownerDocument || root).createRange();
    const pieces = [];
    for (let n = walker.nextNode(); n && visual.length < maxElements; n = walker.nextNode()) {
      const parent = n.parentElement;
      if (!parent || SKIP.has(parent.tagName) || !n.data.trim() || !shown(parent)) continue;
      range.selectNodeContents(n);
      const r = range.getBoundingClientRect();
      if (r.width <= 0 || r.height <= 0) continue;
      pieces.push(n.data);
      visual.push({top: r.top + win.offset, bottom: r.bottom + win.offset, left: r.left, text: n.data});
    }
    return pieces.join(" ");
  };
  const visit = (doc, depth, offset) => {
    const win = {offset};
    const roots = [doc];
    while (roots.length) {
      const root = roots.shift();
      if (root !== doc) push("shadow", texts(root, win));
      for (const el of root.querySelectorAll("*")) {
        if (++elements > maxElements || budget <= 0) break;
        for (const a of ATTRS) { const v = el.getAttribute(a); if (v) push("attributes", v); }
        if (el.tagName === "INPUT" && ["button", "submit", "reset"].includes(el.type)) push("attributes", el.value);
        if (!SKIP.has(el.tagName)) {
          const view = doc.defaultView;
          push("generated_content", generated(el, view.getComputedStyle(el, "::before").content));
          push("generated_content", generated(el, view.getComputedStyle(el, "::after").content));
        }
        if (el.shadowRoot) roots.push(el.shadowRoot);
        if ((el.tagName === "IFRAME" || el.tagName === "FRAME") && depth < maxDepth) {
          let inner = null;
          try { inner = el.contentDocument; } catch (e) { inner = null; }
          if (inner && inner.body) {
            push("frames", inner.body.innerText);
            visit(inner, depth + 1, offset + el.getBoundingClientRect().top);
          }
        }
      }
    }
    if (doc.body) texts(doc.body, win);
    try {
      const canvas = doc.defaultView[key];
      if (typeof canvas === "function") for (const t of canvas()) push("canvas", t);
    } catch (e) { /* a frame without the hook */ }
  };
  visit(document, 0, 0);
  visual.sort((a, b) => a.top - b.top || a.left - b.left);
  const lines = [];
  for (const piece of visual) {
    const middle = (piece.top + piece.bottom) / 2;
    const line = lines[lines.length - 1];
    if (line && middle >= line.top && middle <= line.bottom) line.pieces.push(piece);
    else lines.push({top: piece.top, bottom: piece.bottom, pieces: [piece]});
  }
  for (const line of lines) push("visual_text", line.pieces.sort((a, b) => a.left - b.left).map(p => p.text).join(" "));
  return out;
})"""
"""Called with ``(budget_chars, canvas_key, max_elements, max_frame_depth, max_piece_chars)``
in a document; returns ``{kind: [piece, ...]}`` for the kinds it collects (all of
:data:`~deskpod.protocol.TEXT_SOURCE_KINDS` but ``accessibility``), at most
``budget_chars`` characters in all."""


def canvas_hook_script(key: str = CANVAS_KEY) -> str:
    """The script that records canvas text in every frame (see the module docstring).

    Args:
        key: the window property its record is read through.

    Returns:
        JavaScript source for ``Page.addScriptToEvaluateOnNewDocument``.
    """
    return (_CANVAS_HOOK.replace("__KEY__", json.dumps(key)).replace("__MAX__", str(_MAX_CANVAS_STRINGS))
            .replace("__PIECE__", str(MAX_PIECE_CHARS)))


def collection_expression(max_chars: int, key: str = CANVAS_KEY) -> str:
    """The expression that runs :data:`COLLECT_SCRIPT` in a document (the top one, or a
    frame's execution context).

    Args:
        max_chars: character budget for everything collected.
        key: the canvas hook's window property.

    Returns:
        A JavaScript expression whose value is ``{kind: [piece, ...]}``.
    """
    return (f"({COLLECT_SCRIPT})({int(max_chars)}, {json.dumps(key)}, {_MAX_ELEMENTS}, {_MAX_FRAME_DEPTH}, "
            f"{MAX_PIECE_CHARS})")


def build_sources(collected: Any, ax_nodes: list[dict[str, Any]], max_chars: int) -> list[TextSource]:
    """:class:`TextSource` entries from what the script returned and the accessibility
    summary, each kind's pieces one a line, at most ``max_chars`` characters in all.

    Args:
        collected: the script's value (page-made: anything that is not a list of
            strings under a known kind is dropped).
        ax_nodes: :meth:`~deskpod.agentd.browser.cdp.Browser.accessibility` nodes.
        max_chars: character budget.

    Returns:
        One entry per kind that has text, in :data:`~deskpod.protocol.TEXT_SOURCE_KINDS` order.
    """
    pieces: dict[str, list[str]] = {}
    if isinstance(collected, dict):
        for kind, values in collected.items():
            if isinstance(values, list):
                pieces[str(kind)] = [v for v in values if isinstance(v, str)]
    pieces["accessibility"] = [str(n[k]) for n in ax_nodes for k in ("name", "value") if n.get(k)]
    sources: list[TextSource] = []
    budget = max_chars
    for kind in ("visual_text", "attributes", "generated_content", "canvas", "frames", "shadow", "accessibility"):
        text = "\n".join(p[:MAX_PIECE_CHARS] for p in pieces.get(kind, []) if p)[:budget]
        if text and len(sources) < MAX_TEXT_SOURCES:
            sources.append(TextSource.model_validate({"source": kind, "text": text}))
            budget -= len(text)
    return sources
