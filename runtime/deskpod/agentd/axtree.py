"""Summarizing an accessibility tree from DevTools within node, label and byte limits.

The input is a list of DevTools ``AXNode`` objects (``Accessibility.getFullAXTree`` or
the pieces ``getChildAXNodes`` returned); the output is the summary an observation
carries: unignored nodes with a role, depth-first, each ``{"depth", "role", "name",
"value", "focused"}``, with names and values clipped to
:data:`~deskpod.protocol.MAX_AX_NAME_CHARS` characters, at most ``max_nodes`` nodes and
at most ``max_bytes`` bytes of JSON, and what was cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from deskpod.protocol import MAX_AX_NAME_CHARS

__all__ = ["AXSummary", "AX_NODE_OVERHEAD_BYTES", "summarize"]

AX_NODE_OVERHEAD_BYTES = 80
"""Bytes one node's JSON takes besides its role, name and value (keys, depth, flags),
rounded up: the byte count of a summary never falls short of its JSON."""

_HIDDEN_ROLES = (None, "none", "generic", "InlineTextBox")


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


def summarize(raw_nodes: list[dict[str, Any]], max_nodes: int, max_bytes: int) -> AXSummary:
    """Summarize DevTools AX nodes (see the module docstring).

    Args:
        raw_nodes: DevTools ``AXNode`` objects, each with ``nodeId`` and, but for roots,
            ``parentId``; ``childIds`` give the order.
        max_nodes: most nodes to list.
        max_bytes: most bytes of JSON the listed nodes may take.

    Returns:
        The summary; ``total`` counts every shown node, listed or not.
    """
    nodes = {n["nodeId"]: n for n in raw_nodes if isinstance(n, dict) and "nodeId" in n}
    roots = [nid for nid, n in nodes.items() if not n.get("parentId") or n["parentId"] not in nodes]
    summary = AXSummary()
    used_bytes = 0
    total = 0
    seen: set[str] = set()
    stack: list[tuple[str, int]] = [(nid, 0) for nid in reversed(roots)]
    while stack:
        nid, depth = stack.pop()
        if nid in seen or nid not in nodes:
            continue
        seen.add(nid)
        node = nodes[nid]
        role = (node.get("role") or {}).get("value")
        shown = not node.get("ignored") and role not in _HIDDEN_ROLES
        if shown:
            total += 1
            if summary.reason is None and len(summary.nodes) >= max_nodes:
                summary.reason = "max_nodes"
            if summary.reason is None:
                entry, clipped = _entry(node, depth, str(role))
                size = AX_NODE_OVERHEAD_BYTES + sum(_text_bytes(entry[k]) for k in ("role", "name", "value"))
                if used_bytes + size > max_bytes:
                    summary.reason = "bytes"
                else:
                    summary.nodes.append(entry)
                    summary.clipped += clipped
                    used_bytes += size
        child_depth = depth + 1 if shown else depth
        stack.extend((child, child_depth) for child in reversed(node.get("childIds") or []))
    summary.total = total
    return summary


def _entry(node: dict[str, Any], depth: int, role: str) -> tuple[dict[str, Any], int]:
    """One node's summary entry and how many of its strings were clipped."""
    focused = any(p.get("name") == "focused" and (p.get("value") or {}).get("value")
                  for p in node.get("properties") or [] if isinstance(p, dict))
    entry: dict[str, Any] = {"depth": depth, "role": role[:MAX_AX_NAME_CHARS], "focused": bool(focused)}
    clipped = 0
    for key in ("name", "value"):
        value = (node.get(key) or {}).get("value")
        text = None if value in (None, "") else str(value)
        if text is not None and len(text) > MAX_AX_NAME_CHARS:
            text = text[:MAX_AX_NAME_CHARS]
            clipped += 1
        entry[key] = text
    return entry, clipped
