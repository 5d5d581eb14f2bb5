"""Summarizing an accessibility tree from DevTools within node, label and byte limits.

The input is the accessibility tree of a page and its frames, flattened
(:func:`deskpod.agentd.browser.frames.summarize_ax`, from DevTools ``AXNode`` objects); the
output is the summary an observation carries: unignored nodes with a role, depth-first, each ``{"depth", "role", "name",
"value", "focused"}``, with names and values clipped to
:data:`~deskpod.protocol.MAX_AX_NAME_CHARS` characters, at most ``max_nodes`` nodes and
at most ``max_bytes`` bytes of JSON, and what was cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from deskpod.protocol import MAX_AX_NAME_CHARS

__all__ = ["AXSummary", "AX_ESTIMATE_SCRIPT", "AX_NODE_OVERHEAD_BYTES", "DOM_SUMMARY_SCRIPT", "bounded",
           "dom_summary"]

AX_NODE_OVERHEAD_BYTES = 100
"""Bytes one node's JSON takes besides its role, name, value and frame (keys, depth, flags),
rounded up: the byte count of a summary never falls short of its JSON."""

AX_ESTIMATE_SCRIPT = r"""((limit) => {
  // Chromium's answer to Accessibility.getFullAXTree repeats each name several times
  // (the node's name and its sources, the StaticText and InlineTextBox under it) and
  // takes a few hundred bytes per node besides: about 600 bytes per element plus three
  // times its labels and text. Stops counting at the limit.
  const walker = document.createTreeWalker(document, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
  let size = 0;
  for (let n = walker.nextNode(); n && size <= limit; n = walker.nextNode()) {
    if (n.nodeType === 3) { size += 3 * n.length; continue; }
    size += 600;
    for (const a of ["aria-label", "alt", "title", "placeholder", "value"]) {
      const v = n.getAttribute(a); if (v) size += 3 * v.length;
    }
  }
  return size;
})"""
"""Called with a byte limit; estimates the size of the page's full accessibility tree
as DevTools would send it (an over-estimate for ordinary pages), up to just past the limit.
On a page of 20,000 links with 1,500-character labels Chromium took 22 s to send 175 MB
for one ``getChildAXNodes`` and never answered ``getFullAXTree`` in the sandbox, blocking
the page's other DevTools calls meanwhile: such a tree is never asked for."""

DOM_SUMMARY_SCRIPT = r"""((maxNodes, maxChars) => {
  const implied = (e) => {
    const tag = e.tagName.toLowerCase();
    if (tag === "a" && e.hasAttribute("href")) return "link";
    if (/^h[1-6]$/.test(tag)) return "heading";
    if (tag === "input") return ({checkbox: "checkbox", radio: "radio", button: "button", submit: "button",
      reset: "button", range: "slider", search: "searchbox", hidden: null}[(e.type || "text").toLowerCase()]
      ?? "textbox");
    return {button: "button", textarea: "textbox", select: "combobox", img: e.alt ? "img" : null,
            main: "main", nav: "navigation", form: "form", table: "table", li: "listitem", ul: "list",
            ol: "list", summary: "button", dialog: "dialog"}[tag] || null;
  };
  const out = []; let total = 0;
  const walk = (e, depth) => {
    for (const c of e.children) {
      const role = c.getAttribute("role") || implied(c);
      if (role && role !== "none" && role !== "presentation" && !c.hidden) {
        total++;
        if (out.length < maxNodes) {
          const name = c.getAttribute("aria-label") || c.getAttribute("alt") || c.getAttribute("title")
            || (c.textContent || "").trim();
          const value = ("value" in c && typeof c.value === "string" && c.type !== "password") ? c.value : "";
          out.push({depth, role: String(role).slice(0, maxChars), name: name ? String(name).slice(0, maxChars + 1) : null,
                    value: value ? value.slice(0, maxChars + 1) : null, focused: c === document.activeElement});
        }
        walk(c, depth + 1);
      } else {
        walk(c, depth);
      }
    }
  };
  if (document.body) walk(document.body, 1);
  return {nodes: out, total};
})"""
"""Called with ``max_nodes`` and :data:`~deskpod.protocol.MAX_AX_NAME_CHARS`; lists the
page's controls, headings and landmarks from the DOM (explicit ``role`` or the one the
tag implies; name from ``aria-label``, ``alt``, ``title`` or the text), depth-first,
for a page whose accessibility tree is too large to ask for. Names and values come one
character longer than the cap, so clipping can be counted."""


@dataclass
class AXSummary:
    """A summary: ``nodes``; ``total``: the shown nodes found (``None``: the tree could
    not be read); ``clipped``: names and values clipped; ``reason``: why it is
    incomplete (``None``: it is not)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    total: int | None = 0
    clipped: int = 0
    reason: Literal["max_nodes", "bytes", "too_large", "timeout"] | None = None


def _text_bytes(value: str | None) -> int:
    return 0 if value is None else len(json.dumps(value, ensure_ascii=False).encode())


def bounded(entries: list[dict[str, Any]], max_nodes: int, max_bytes: int) -> AXSummary:
    """Fit a flattened accessibility summary into the limits (see the module docstring).

    Args:
        entries: ``{"depth", "role", "name", "value", "focused", ...}`` per shown node,
            depth-first (:func:`deskpod.agentd.browser.frames.summarize_ax`); names and values
            unclipped.
        max_nodes: most nodes to list.
        max_bytes: most bytes of JSON the listed nodes may take.

    Returns:
        The summary; ``total`` counts every entry, listed or not.
    """
    summary = AXSummary(total=len(entries))
    used_bytes = 0
    for raw in entries:
        if len(summary.nodes) >= max_nodes:
            summary.reason = "max_nodes"
            break
        entry = {**raw, "role": str(raw.get("role", ""))[:MAX_AX_NAME_CHARS]}
        for key in ("name", "value"):
            text = entry.get(key)
            if isinstance(text, str) and len(text) > MAX_AX_NAME_CHARS:
                entry[key] = text[:MAX_AX_NAME_CHARS]
                summary.clipped += 1
        size = AX_NODE_OVERHEAD_BYTES + sum(_text_bytes(entry.get(k)) for k in ("role", "name", "value", "frame"))
        if used_bytes + size > max_bytes:
            summary.reason = "bytes"
            break
        summary.nodes.append(entry)
        used_bytes += size
    return summary


def dom_summary(value: Any, max_bytes: int) -> AXSummary:
    """An :class:`AXSummary` from :data:`DOM_SUMMARY_SCRIPT`'s answer (reason ``"too_large"``).

    Args:
        value: the script's JSON value, ``{"nodes": [...], "total": n}`` (page data:
            anything else gives an empty summary).
        max_bytes: most bytes of JSON the listed nodes may take.
    """
    summary = AXSummary(total=None, reason="too_large")
    if not isinstance(value, dict) or not isinstance(value.get("nodes"), list):
        return summary
    total = value.get("total")
    summary.total = total if isinstance(total, int) and total >= 0 else None
    used_bytes = 0
    for raw in value["nodes"]:
        if not isinstance(raw, dict) or not isinstance(raw.get("role"), str) or not raw["role"]:
            continue
        depth = raw.get("depth")
        entry: dict[str, Any] = {"depth": depth if isinstance(depth, int) and 0 <= depth <= 100_000 else 0,
                                 "role": raw["role"][:MAX_AX_NAME_CHARS], "focused": raw.get("focused") is True}
        for key in ("name", "value"):
            text = raw.get(key) if isinstance(raw.get(key), str) and raw.get(key) else None
            if text is not None and len(text) > MAX_AX_NAME_CHARS:
                text = text[:MAX_AX_NAME_CHARS]
                summary.clipped += 1
            entry[key] = text
        size = AX_NODE_OVERHEAD_BYTES + sum(_text_bytes(entry[k]) for k in ("role", "name", "value"))
        if used_bytes + size > max_bytes:
            break
        summary.nodes.append(entry)
        used_bytes += size
    return summary
