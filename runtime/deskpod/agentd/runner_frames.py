"""The framing of the workspace runner's wire, standard library only.

One connection carries one request and its one reply, each a frame: a 4-byte
big-endian length (:data:`FRAME_HEADER`), then that many bytes of UTF-8 JSON. The
models of the frames' JSON are in :mod:`deskpod.agentd.runner_wire`; this module holds
only what a client needs to frame bytes, so that the container's health check
(:mod:`deskpod.agentd.runner_health`) can speak the wire without loading them.
"""

from __future__ import annotations

import struct

__all__ = ["FRAME_HEADER", "MAX_RUNNER_REPLY_BYTES", "MAX_RUNNER_REQUEST_BYTES", "RUNNER_PORT", "frame_length"]

RUNNER_PORT = 8770
"""TCP port the workspace runner listens on (in the workspace container)."""

MAX_RUNNER_REQUEST_BYTES = 4 * 1_048_576
"""Largest request frame the runner reads (a daemon message is at most 1 MiB; a seed
archive re-encoded stays under that), bytes."""

MAX_RUNNER_REPLY_BYTES = 64 * 1_048_576
"""Largest reply frame agentd reads: two 4 MiB output streams JSON-escaped in the
worst case (6 bytes per control character) plus the envelope, bytes."""

FRAME_HEADER = struct.Struct(">I")
"""The frame header: the payload's length in bytes, 4-byte big-endian unsigned."""


def frame_length(header: bytes, limit_bytes: int) -> int:
    """The payload length a header announces.

    Raises:
        ValueError: it exceeds ``limit_bytes``.
    """
    (length,) = FRAME_HEADER.unpack(header)
    if length > limit_bytes:
        raise ValueError(f"frame of {length} bytes exceeds {limit_bytes}")
    return int(length)
