"""Command output a model can read: head and tail kept, bounded in bytes and lines, never raw control bytes.

An agent's ``exec`` and ``run_tests`` output goes back into a model's context, so
each stream is cut to what a model can use, the way widely used coding agents do
(a few KB and a few hundred lines per tool call, head and tail kept):

- at most ``head_bytes``/``head_lines`` from the start and ``tail_bytes``/``tail_lines``
  from the end are kept (cuts fall on a line break when one is near, and never in
  the middle of a UTF-8 character); between them an explicit marker states the
  bytes and line breaks omitted and the stream's totals (:data:`OMITTED_MARKER`);
- output that looks binary (more than :data:`BINARY_FRACTION` of the kept
  characters invalid UTF-8 or control characters, NUL included) is not shown: a
  marker gives its size and a hex preview of its first :data:`PREVIEW_BYTES`
  bytes (:data:`BINARY_MARKER`);
- text is cleaned: ``\\r\\n`` becomes ``\\n``, ANSI escape sequences (colours,
  cursor moves, window titles) are removed, and every other control character
  (NUL, ESC, BEL, a lone CR, DEL, C1 controls, bidirectional overrides) and every
  byte that is not UTF-8 is written as a visible escape (``\\x07``, ``\\u202e``);
  ``\\n`` and ``\\t`` stay. The rendered text never has more characters than the
  kept byte budget (bytes are dropped, and counted as omitted, when escapes would
  make it longer).

Memory stays bounded by the kept bytes plus one read chunk, however much is fed.
:class:`StreamCap` is pure: it is fed bytes and renders text.
"""

from __future__ import annotations

import collections
import re
import typing

__all__ = [
    "BINARY_FRACTION",
    "BINARY_MARKER",
    "ByteSink",
    "OMITTED_MARKER",
    "PREVIEW_BYTES",
    "StreamCap",
    "clean_text",
]

OMITTED_MARKER = (
    "\n[... deskpod: output truncated: {omitted_bytes} bytes and {omitted_lines} line breaks omitted "
    "(of {total_bytes} bytes, {total_lines} line breaks) ...]\n"
)
"""Put between the head and the tail of capped output."""

BINARY_MARKER = "[deskpod: binary output not shown: {total_bytes} bytes; first {preview_bytes} bytes (hex): {hex}]\n"
"""Replaces a stream that looks binary."""

PREVIEW_BYTES = 32
"""Bytes of a binary stream shown (as hex) in its marker."""

BINARY_FRACTION = 0.1
"""Share of invalid-UTF-8 or control characters in the kept output above which a stream counts as binary."""

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\udc80-\udcff]")
_LINE_ALIGN_SHARE = 0.5


class ByteSink(typing.Protocol):
    """What :func:`~deskpod.agentd.workspace.process.run_process` feeds a stream's bytes to."""

    def feed(self, data: bytes) -> None:
        """Account for one chunk of output."""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if char == "\r":
        return "\\r"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def clean_text(raw: bytes) -> str:
    """Render bytes as text a model can read: UTF-8, ANSI sequences removed, other controls escaped.

    Args:
        raw: the bytes (need not be valid UTF-8).

    Returns:
        The text; it holds no control character but ``\\n`` and ``\\t``.
    """
    text = raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n")
    return _UNSAFE.sub(_escape, _ANSI.sub("", text))


def _unsafe_share(raw: bytes) -> float:
    if not raw:
        return 0.0
    text = raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n")
    text = _ANSI.sub("", text)
    return len(_UNSAFE.findall(text)) / max(1, len(text))


def _first_lines(raw: bytes, lines: int) -> bytes:
    pos = -1
    for _ in range(lines):
        pos = raw.find(b"\n", pos + 1)
        if pos < 0:
            return raw
    return raw[: pos + 1]


def _last_lines(raw: bytes, lines: int) -> bytes:
    pos = len(raw) - 1 if raw.endswith(b"\n") else len(raw)
    for _ in range(lines):
        pos = raw.rfind(b"\n", 0, pos)
        if pos < 0:
            return raw
    return raw[pos + 1 :]


def _utf8_head(raw: bytes) -> bytes:
    """``raw`` without an incomplete UTF-8 sequence at its end."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            return raw
        if byte >= 0xC0:
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return raw[:-back] if needed > back else raw
    return raw


def _utf8_tail(raw: bytes) -> bytes:
    """``raw`` without UTF-8 continuation bytes at its start (the rest of a cut character)."""
    skip = 0
    while skip < min(3, len(raw)) and 0x80 <= raw[skip] < 0xC0:
        skip += 1
    return raw[skip:]


class StreamCap:
    """Keeps the head and the tail of one output stream, in bytes and lines, and renders them for a model.

    Args:
        head_bytes: bytes kept from the start (0: none).
        tail_bytes: bytes kept from the end (0: none).
        head_lines: line breaks kept from the start (``None``: no line limit).
        tail_lines: lines kept from the end (``None``: no line limit).
    """

    def __init__(
        self, head_bytes: int, tail_bytes: int, head_lines: int | None = None, tail_lines: int | None = None
    ) -> None:
        self.head_bytes = max(0, head_bytes)
        self.tail_bytes = max(0, tail_bytes)
        self.head_lines = head_lines
        self.tail_lines = tail_lines
        self.total = 0
        """Bytes fed in all."""
        self.newlines = 0
        """Line breaks fed in all."""
        self._head = bytearray()
        self._head_full = False
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self._rendered: tuple[str, bool, bool] | None = None

    @classmethod
    def split(cls, limit_bytes: int, limit_lines: int | None = None) -> StreamCap:
        """A cap of ``limit_bytes`` and ``limit_lines`` in all, half head and half tail."""
        head_lines = None if limit_lines is None else limit_lines // 2
        tail_lines = None if limit_lines is None else limit_lines - limit_lines // 2
        return cls(limit_bytes // 2, limit_bytes - limit_bytes // 2, head_lines, tail_lines)

    def feed(self, data: bytes) -> None:
        """Account for one chunk of output."""
        self._rendered = None
        self.total += len(data)
        self.newlines += data.count(b"\n")
        if not self._head_full:
            room = self.head_bytes - len(self._head)
            part = data[: max(0, room)]
            if self.head_lines is not None:
                allowed = self.head_lines - self._head.count(b"\n")
                part = _first_lines(part, allowed) if allowed > 0 else b""
            self._head += part
            data = data[len(part) :]
            self._head_full = bool(data)
        if not data or not self.tail_bytes:
            return
        self._tail.append(bytes(data))
        self._tail_len += len(data)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_bytes:
            self._tail_len -= len(self._tail.popleft())

    def _parts(self) -> tuple[bytes, bytes]:
        """The raw head and tail to show, cut to the byte and line limits, lines and UTF-8 characters."""
        head = bytes(self._head)
        joined = b"".join(self._tail)
        tail = joined[-self.tail_bytes :] if self.tail_bytes else b""
        if self.tail_lines is not None:
            tail = _last_lines(tail, self.tail_lines) if self.tail_lines > 0 else b""
        if self.total <= len(head) + len(tail):
            return head + tail, b""
        if not head.endswith(b"\n"):
            cut = head.rfind(b"\n")
            if cut >= 0 and cut + 1 >= len(head) * _LINE_ALIGN_SHARE:
                head = head[: cut + 1]
        dropped = len(joined) - len(tail)
        if tail and (dropped > 0 and joined[dropped - 1 : dropped] != b"\n"):
            cut = tail.find(b"\n")
            if 0 <= cut < len(tail) * _LINE_ALIGN_SHARE and cut + 1 < len(tail):
                tail = tail[cut + 1 :]
        return _utf8_head(head), _utf8_tail(tail)

    def _render(self) -> tuple[str, bool, bool]:
        if self._rendered is not None:
            return self._rendered
        head, tail = self._parts()
        sample = head + tail
        if _unsafe_share(sample) > BINARY_FRACTION:
            preview = (head or tail)[:PREVIEW_BYTES]
            marker = BINARY_MARKER.format(total_bytes=self.total, preview_bytes=len(preview), hex=preview.hex())
            self._rendered = (marker, True, True)
            return self._rendered
        if not tail and len(head) >= self.total:
            whole = clean_text(head)
            if len(whole) <= self.head_bytes + self.tail_bytes:
                self._rendered = (whole, False, False)
                return self._rendered
            # Escapes make it longer than the cap: show its head and tail instead.
            half = len(head) // 2
            head, tail = _utf8_head(head[:half]), _utf8_tail(head[half:])
        head_text, tail_text = clean_text(head), clean_text(tail)
        while len(head_text) > self.head_bytes:  # escapes made it longer: drop bytes until it fits
            head = _utf8_head(head[: len(head) - (len(head_text) - self.head_bytes)])
            head_text = clean_text(head)
        while len(tail_text) > self.tail_bytes:
            tail = _utf8_tail(tail[len(tail_text) - self.tail_bytes :])
            tail_text = clean_text(tail)
        omitted_lines = self.newlines - head.count(b"\n") - tail.count(b"\n")
        marker = OMITTED_MARKER.format(
            omitted_bytes=self.total - len(head) - len(tail),
            omitted_lines=omitted_lines,
            total_bytes=self.total,
            total_lines=self.newlines,
        )
        self._rendered = (head_text + marker + tail_text, True, False)
        return self._rendered

    @property
    def truncated(self) -> bool:
        """Whether some of the output is not in :meth:`text` (binary output included)."""
        return self._render()[1]

    @property
    def binary(self) -> bool:
        """Whether the output looked binary and :meth:`text` is only its marker."""
        return self._render()[2]

    def text(self) -> str:
        """The kept output as clean text, with the marker where bytes were omitted (see the module)."""
        return self._render()[0]
