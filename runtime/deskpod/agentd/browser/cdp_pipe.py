"""Reading one DevTools message off Chromium's pipe, within a size limit.

Chromium writes each message as one JSON object followed by a NUL byte. An
``asyncio.StreamReader`` made with ``limit=max_bytes`` raises ``LimitOverrunError``
when no NUL comes within that many bytes; letting it end the read loop (as the first
version did) lost the browser on any page whose accessibility tree was over the limit
(20,000 long-labelled links gave a message over 64 MiB), while Chromium kept running.
:func:`read_message` instead skips the rest of such a message, keeping its first bytes
so the caller can fail the one command it answers (Chromium writes a reply's ``"id"``
first), and the channel goes on.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

__all__ = ["HEAD_BYTES", "OversizedMessage", "read_message"]

HEAD_BYTES = 64
"""Bytes kept from the start of an oversized message (enough for its ``"id"``)."""

_ID = re.compile(rb'^\s*\{\s*"id"\s*:\s*(\d{1,18})\s*[,}]')


@dataclass(frozen=True)
class OversizedMessage:
    """A message that was over the limit and skipped: its ``size`` in bytes (without
    the NUL) and, for a command's reply, its ``id`` (``None`` for an event)."""

    size: int
    id: int | None


async def read_message(stream: asyncio.StreamReader) -> bytes | OversizedMessage:
    """Read the next NUL-terminated message from ``stream`` (whose limit is the
    largest message accepted).

    Returns:
        The message without its NUL, or an :class:`OversizedMessage` when it was longer
        than the stream's limit (its bytes are read and dropped, never held at once).

    Raises:
        asyncio.IncompleteReadError: the pipe closed before a NUL.
        OSError: the pipe failed.
    """
    try:
        return (await stream.readuntil(b"\0"))[:-1]
    except asyncio.LimitOverrunError as exc:
        skipped = await stream.readexactly(exc.consumed)
    head = skipped[:HEAD_BYTES]
    size = len(skipped)
    while True:
        try:
            size += len(await stream.readuntil(b"\0")) - 1
            break
        except asyncio.LimitOverrunError as exc:
            size += len(await stream.readexactly(exc.consumed))
    match = _ID.match(head)
    return OversizedMessage(size=size, id=int(match.group(1)) if match else None)
