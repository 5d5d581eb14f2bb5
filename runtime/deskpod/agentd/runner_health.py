"""The workspace container's health check: ``python -m deskpod.agentd.runner_health``.

It sends the runner a ping over the runner's wire (:mod:`deskpod.agentd.runner_frames`;
the request is :class:`~deskpod.agentd.runner_wire.RunnerPingRequest`, the reply
:class:`~deskpod.agentd.runner_wire.RunnerPong`) and exits 0 when the runner answers
``pong``, 1 when it does not, and 2 when ``DESKPOD_RUNNER_PORT`` is not a port number
(one line on stderr naming it). Docker runs it every few seconds, so it imports only
the standard library: loading the runner's models for it cost about half a CPU-second
each time. Like the runner, it reads its environment only, never a configuration file
(the agent's commands can write the container user's home), and it always asks
``127.0.0.1``.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from deskpod.agentd.runner_frames import FRAME_HEADER, RUNNER_PORT, frame_length

__all__ = ["PING_PAYLOAD", "ping", "runner_port"]

PING_PAYLOAD = b'{"type":"ping"}'
"""The ping request's JSON, as :class:`~deskpod.agentd.runner_wire.RunnerPingRequest` encodes it."""

_MAX_PONG_BYTES = 4096
"""Largest reply the health check reads: a pong is ``{"type":"pong","pid":N}``."""


def runner_port(environ: dict[str, str] | os._Environ[str]) -> int:
    """``DESKPOD_RUNNER_PORT`` from ``environ`` (:data:`~deskpod.agentd.runner_frames.RUNNER_PORT`
    when unset or empty).

    Raises:
        ValueError: it is not a port number (1 to 65535); the message names the variable.
    """
    raw = environ.get("DESKPOD_RUNNER_PORT", "").strip()
    if not raw:
        return RUNNER_PORT
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ValueError(f"DESKPOD_RUNNER_PORT: {raw[:40]!r} is not a port number (1 to 65535)")
    return int(raw)


def ping(port: int = RUNNER_PORT, timeout_s: float = 3.0) -> bool:
    """Whether the runner on ``127.0.0.1:port`` answers a ping with a pong within ``timeout_s`` seconds."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(FRAME_HEADER.pack(len(PING_PAYLOAD)) + PING_PAYLOAD)
            data = b""
            need = FRAME_HEADER.size
            while len(data) < need:
                chunk = sock.recv(_MAX_PONG_BYTES)
                if not chunk:
                    return False
                data += chunk
                if need == FRAME_HEADER.size and len(data) >= need:
                    need += frame_length(data[:need], _MAX_PONG_BYTES)
        reply = json.loads(data[FRAME_HEADER.size:need])
    except (OSError, ValueError):
        return False
    return isinstance(reply, dict) and reply.get("type") == "pong" and isinstance(reply.get("pid"), int)


def main() -> None:
    """Exit 0 when the local runner answers a ping, 1 when not, 2 on a bad ``DESKPOD_RUNNER_PORT``."""
    try:
        port = runner_port(os.environ)
    except ValueError as exc:
        print(f"deskpod.agentd.runner_health: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    sys.exit(0 if ping(port) else 1)


if __name__ == "__main__":
    main()
