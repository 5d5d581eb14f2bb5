"""Page content fitted into one reply: strings cut to the protocol's caps, and the page text,
accessibility summary and text sources cut to what the reply's byte budgets leave.

A reply holds at most ``max_reply_bytes`` (the client's declared message size) and at most
``ObserveOptions.max_content_bytes`` of page content; every page-derived string is cut to
its field's cap here, so the controller, which refuses a reply beyond them, never sees one.
"""

from __future__ import annotations

import json
from typing import Any

from deskpod.agentd.browser.axtree import AXSummary
from deskpod.agentd.browser.request_filter import clean_url
from deskpod.protocol import (
    MAX_LABEL_CHARS,
    MAX_PAGE_TEXT_BYTES,
    AXNode,
    Observation,
    ObserveOptions,
    TextSource,
    Truncation,
    encode_message,
)

__all__ = ["REPLY_ENVELOPE_BYTES", "clean_page_url", "content_bytes", "cut_label", "cut_text", "element_labels",
           "fit_sources", "json_bytes", "with_page_content"]

REPLY_ENVELOPE_BYTES = 1024
"""Bytes a reply takes besides its observation without page content (type, id, the
page text's and summary's keys, the truncation record), rounded up."""

_URL_FIELDS = ("href", "form_action", "frame")


def cut_label(value: Any, limit: int) -> Any:
    """A page-derived string cut to ``limit`` characters (other values unchanged)."""
    return value[:limit] if isinstance(value, str) else value


def clean_page_url(value: Any) -> Any:
    """A URL with any raw control character percent-encoded (a browser never reports
    one; the protocol refuses them) and cut to the protocol's cap (:func:`clean_url`)."""
    return clean_url(value) if isinstance(value, str) else value


def element_labels(info: dict[str, Any]) -> dict[str, Any]:
    """An element description with every string cut to the protocol's caps (the
    controller refuses a reply beyond them)."""
    return {k: clean_page_url(v) if k in _URL_FIELDS else cut_label(v, MAX_LABEL_CHARS) for k, v in info.items()}


def json_bytes(text: str) -> int:
    """Bytes ``text`` takes as a JSON string in a reply (quotes and escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def cut_text(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` (whole characters) that takes at most ``max_bytes``
    bytes as a JSON string; ``text`` itself when it fits."""
    if json_bytes(text) <= max_bytes:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits: prefix sizes only grow
        middle = (low + high + 1) // 2
        if json_bytes(text[:middle]) <= max_bytes:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def content_bytes(observation: Observation) -> int:
    """Bytes the page content already in ``observation`` takes as JSON: its snapshot, text
    sources and console and network logs (page text and the accessibility summary are added
    by :func:`_with_page_content`)."""
    parts = observation.model_dump(mode="json", include={"snapshot", "text_sources", "console", "network"},
                                   exclude_none=True)
    return len(json.dumps(parts, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def fit_sources(sources: list[TextSource], max_bytes: int) -> list[TextSource]:
    """``sources`` with their texts cut, in order, to take at most ``max_bytes`` bytes as JSON
    in all (an entry left empty is dropped)."""
    out: list[TextSource] = []
    left = max_bytes
    for source in sources:
        text = cut_text(source.text, max(0, left - 64))
        if not text:
            break
        out.append(source if text == source.text else source.model_copy(update={"text": text}))
        left -= json_bytes(text) + 64
    return out


def with_page_content(
    observation: Observation, options: ObserveOptions, text: str | None, summary: AXSummary | None,
    max_reply_bytes: int,
) -> Observation:
    """``observation`` with the page text and accessibility summary cut to their caps
    and to what ``max_reply_bytes`` leaves (see :meth:`Observer.observe`)."""
    left = min(max_reply_bytes - REPLY_ENVELOPE_BYTES - len(encode_message(observation).encode()),
               options.max_content_bytes - content_bytes(observation))
    truncation: dict[str, Any] = {}
    update: dict[str, Any] = {}
    if text is not None:
        page_text = text[:options.max_text_chars]
        page_text = cut_text(page_text, max(0, min(MAX_PAGE_TEXT_BYTES, left)))
        if page_text != text:
            truncation.update(page_text=True, page_text_chars=len(text))
        update["page_text"] = page_text
        left -= json_bytes(page_text) + 16
    if summary is not None:
        nodes = [AXNode(**element_labels(n)) for n in summary.nodes]
        kept, used = [], 2
        for node in nodes:
            size = len(node.model_dump_json()) + 1
            if used + size > left:
                break
            kept.append(node)
            used += size
        reason = summary.reason if len(kept) == len(nodes) else "bytes"
        if reason is not None or summary.clipped:
            truncation.update(accessibility=reason is not None, accessibility_nodes=summary.total,
                              accessibility_reason=reason, labels=summary.clipped)
        update["accessibility"] = kept
    if truncation:
        kept_snapshot = observation.truncated is not None and observation.truncated.snapshot
        update["truncated"] = Truncation(**truncation, snapshot=kept_snapshot)
    return observation.model_copy(update=update) if update else observation

