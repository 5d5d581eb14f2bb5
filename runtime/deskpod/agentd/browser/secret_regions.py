"""Where a page shows a secret: the screen boxes to paint over before an image is encoded.

One script per frame (:class:`~deskpod.agentd.browser.frames.FrameReader`'s isolated
world, so the page's own scripts cannot hide a match from it) walks the frame's
document and its open shadow roots and reports, in the frame's CSS pixels, clipped to
its viewport:

- every ``<input>`` other than ``type=password`` (which Chromium masks itself),
  ``<textarea>`` and ``<select>`` whose value, placeholder or selected option holds a
  secret: the field's box;
- every run of characters of a text node that is a secret: the boxes of those
  characters alone (``Range.getClientRects``), so a secret inside a paragraph hides
  only itself;
- an element under the pointer (``:hover``) whose ``title`` holds a secret: a
  ``tooltip`` flag, as Chromium draws the tooltip in a window of its own near the
  pointer (:class:`~deskpod.agentd.secret_mask.SecretMask` paints that area).

Each frame's boxes are moved by the frame's offset in the top viewport (its owner
element's content box, ``DOM.getBoxModel``, through out-of-process frames too) and
mapped to screen pixels with the viewport's origin and scale. A frame that cannot be
read is reported so the caller can fail closed. A secret drawn on a ``<canvas>``, shown
as an image, or changed by the page (reversed, split across elements) is not found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

from deskpod.agentd.browser.frames import FrameReader
from deskpod.errors import BrowserError

__all__ = ["MAX_SECRET_BOXES", "SecretRegions", "find_secret_regions"]

MAX_SECRET_BOXES = 256
"""Most boxes one frame reports; a page that shows a secret more often is painted over
whole (:attr:`SecretRegions.complete` is False)."""

_FIND: Final = r"""((secrets, max) => {
  const out = [];
  let tooltip = false, full = false;
  const W = window.innerWidth, H = window.innerHeight;
  const add = (r) => {
    const x0 = Math.max(0, r.left), y0 = Math.max(0, r.top), x1 = Math.min(W, r.right), y1 = Math.min(H, r.bottom);
    if (x1 <= x0 || y1 <= y0) return;
    if (out.length >= max) { full = true; return; }
    out.push([x0, y0, x1, y1]);
  };
  const has = (v) => typeof v === "string" && v !== "" && secrets.some((s) => v.includes(s));
  const text = (node) => {
    const data = node.data;
    for (const s of secrets) {
      for (let i = data.indexOf(s); i >= 0; i = data.indexOf(s, i + s.length)) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + s.length);
        for (const r of range.getClientRects()) add(r);
      }
    }
  };
  const element = (el) => {
    const tag = el.localName;
    const field = (tag === "input" && String(el.type).toLowerCase() !== "password") || tag === "textarea";
    if ((field && (has(el.value) || has(el.placeholder)))
        || (tag === "select" && el.selectedOptions && Array.from(el.selectedOptions).some((o) => has(o.text)))) {
      for (const r of el.getClientRects()) add(r);
    }
    if (has(el.getAttribute("title")) && el.matches(":hover")) tooltip = true;
  };
  const walk = (root) => {
    const it = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    for (let n = it.nextNode(); n; n = it.nextNode()) {
      if (n.nodeType === 3) { if (has(n.data)) text(n); continue; }
      element(n);
      if (n.shadowRoot) walk(n.shadowRoot);
    }
  };
  if (document.documentElement) { element(document.documentElement); walk(document.documentElement); }
  return [out, tooltip, full];
})"""


@dataclass
class SecretRegions:
    """Where the page shows a secret: ``boxes`` (screen pixels ``x0, y0, x1, y1``, float),
    ``tooltip`` (the element under the pointer has a secret ``title``), and ``complete``
    (False: a frame could not be read or showed too many matches, so the boxes do not
    cover every place)."""

    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    tooltip: bool = False
    complete: bool = True


async def find_secret_regions(reader: FrameReader, secrets: list[str], device_scale_factor: float) -> SecretRegions:
    """Find where the page read by ``reader`` shows any of ``secrets`` (see the module).

    Args:
        reader: a reader of the active tab.
        secrets: the strings to find (non-empty).
        device_scale_factor: the one Chromium was started with.

    Returns:
        The boxes in screen pixels; ``complete`` False when a frame could not be read.

    Raises:
        BrowserError: the top document could not be read.
    """
    ox, oy, zoom = await reader.viewport(device_scale_factor)
    found = SecretRegions()
    offsets: dict[str, tuple[float, float]] = {}  # a session's root frame: its CSS offset in the top viewport
    expression = f"({_FIND})({json.dumps(secrets)}, {MAX_SECRET_BOXES})"
    for frame in await reader.frames():
        try:
            if frame.owner_session is None:
                dx, dy = 0.0, 0.0
            else:
                owner = await reader.cdp("DOM.getFrameOwner", {"frameId": frame.frame_id}, frame.owner_session)
                model = await reader.cdp("DOM.getBoxModel", {"backendNodeId": owner["backendNodeId"]},
                                         frame.owner_session)
                base = offsets[frame.owner_session]
                dx, dy = base[0] + float(model["model"]["content"][0]), base[1] + float(model["model"]["content"][1])
            offsets.setdefault(frame.session, (dx, dy))
            result = await reader.evaluate(frame.session, frame.frame_id, expression)
            boxes, tooltip, full = result["value"]
        except (BrowserError, KeyError, IndexError, TypeError, ValueError):
            if frame.owner_session is None:
                raise
            found.complete = False
            continue
        found.tooltip = found.tooltip or bool(tooltip)
        found.complete = found.complete and not full
        for x0, y0, x1, y1 in boxes:
            found.boxes.append((ox + (x0 + dx) * zoom, oy + (y0 + dy) * zoom,
                                ox + (x1 + dx) * zoom, oy + (y1 + dy) * zoom))
    return found
