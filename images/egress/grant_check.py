#!/usr/bin/python3
"""squid's external ACL helper: who may use the egress proxy (deskpod's egress grants).

squid (``external_acl_type deskpod_grant ... %SRC %DST %>{Proxy-Authorization}``,
no result cache) sends one line per request: the client's address, the requested
host and the ``Proxy-Authorization`` header (``-`` when absent), each URL-escaped,
then the acl line's arguments (``-``: none), which are ignored.
The helper answers ``OK`` or ``ERR`` on one line:

- ``OK`` when the client is the sandbox container itself (its address is what the
  daemon's host name resolves to): Chromium's egress, under the domain allowlist
  that squid checks before asking. squid asks this alone first, through a second
  helper type (``--sandbox``, ``%SRC`` only) whose answers it caches for a few
  seconds, so Chromium's requests rarely wait for a helper;
- ``OK`` when the header carries a Basic credential that agentd (the daemon, in the
  sandbox container) holds as a live egress grant for that host: a command run with
  ``network: true``, while it runs. The helper sends agentd only the credential's
  SHA-256 and the host (``POST /v1/egress/check``); agentd answers ``{"allowed": true}``
  or ``{"allowed": false}``;
- ``ERR`` otherwise, and on any failure (no answer, a bad answer, no header).

A third helper type (``--task``, ``%DST`` only, never cached) answers whether the host
is inside the running task's allowlist, which the controller sets through the proxy's
control endpoint (``egress_control.py``, file :data:`TASK_ALLOWLIST`): ``OK`` when no run
list is in force or the host is one of its domains or a subdomain of one, ``ERR`` otherwise
(an unreadable list refuses everything). It applies to every client, the sandbox included.

Nothing is cached here: every request is asked anew, so a grant ends when agentd
revokes it. Standard library only (the egress image has no deskpod package).

Environment: ``DESKPOD_EGRESS_DAEMON``, agentd's ``host:port`` as the egress proxy
resolves it (default ``sandbox:8765``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse

__all__ = [
    "ADDRESS_CACHE_S",
    "CHECK_PATH",
    "CHECK_TIMEOUT_S",
    "DEFAULT_DAEMON",
    "GrantChecker",
    "MAX_CREDENTIAL_CHARS",
    "TASK_ALLOWLIST",
    "TaskList",
    "credential_of",
    "main",
]

CHECK_PATH = "/v1/egress/check"
"""agentd's endpoint that says whether a credential is a live grant for a host."""

CHECK_TIMEOUT_S = 3.0
"""How long one check with agentd may take, seconds; after that the request is refused."""

ADDRESS_CACHE_S = 2.0
"""How long the daemon host's resolved addresses are reused, seconds."""

DEFAULT_DAEMON = "sandbox:8765"
"""agentd's ``host:port`` when ``DESKPOD_EGRESS_DAEMON`` is not set."""

MAX_CREDENTIAL_CHARS = 256
"""Longest credential looked at; a longer one is refused without asking agentd."""

TASK_ALLOWLIST = "/run/squid/task-allowlist.txt"
"""The running task's allowlist (one domain per line; absent: none), by ``egress_control.py``."""


class TaskList:
    """The running task's allowlist, read again whenever the file changes.

    Args:
        path: the file (:data:`TASK_ALLOWLIST`).
    """

    def __init__(self, path: str = TASK_ALLOWLIST) -> None:
        self.path = path
        self._key: tuple[int, int, int] | None = None
        self._domains: tuple[str, ...] | None = None

    def domains(self) -> tuple[str, ...] | None:
        """The list in force (``None``: none); ``()`` when the file cannot be read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._key, self._domains = None, None
            return None
        except OSError:
            return ()
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._key:
            try:
                with open(self.path, encoding="ascii") as f:
                    self._domains = tuple(line.strip().lower() for line in f if line.strip())
            except (OSError, UnicodeDecodeError):
                return ()
            self._key = key
        return self._domains

    def answer(self, line: str) -> str:
        """squid's answer to a ``--task`` line (the requested host first)."""
        fields = line.split()
        domains = self.domains()
        if domains is None:
            return "OK"
        host = urllib.parse.unquote(fields[0]).rstrip(".").lower() if fields else ""
        if host and any(host == d or host.endswith("." + d) for d in domains):
            return "OK"
        return "ERR message=outside%20the%20task%27s%20allowlist"


def credential_of(header: str) -> str | None:
    """The password of a ``Basic`` ``Proxy-Authorization`` header value, or ``None``."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token or len(token) > 4 * MAX_CREDENTIAL_CHARS:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, password = decoded.partition(":")
    if not sep or not password or len(password) > MAX_CREDENTIAL_CHARS:
        return None
    return password


class GrantChecker:
    """Answers squid's lines against agentd.

    Args:
        daemon: agentd's ``host:port``.
    """

    def __init__(self, daemon: str) -> None:
        host, _, port = daemon.rpartition(":")
        self.host = host.strip("[]") or daemon
        self.port = int(port) if port.isdigit() else 8765
        self._addresses: frozenset[str] = frozenset()
        self._resolved_at = -ADDRESS_CACHE_S

    def daemon_addresses(self) -> frozenset[str]:
        """The addresses the daemon's host name resolves to (empty when it does not resolve)."""
        now = time.monotonic()
        if now - self._resolved_at >= ADDRESS_CACHE_S:
            try:
                infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
                self._addresses = frozenset(str(info[4][0]) for info in infos)
            except OSError:
                self._addresses = frozenset()
            self._resolved_at = now
        return self._addresses

    def granted(self, credential: str, host: str) -> bool:
        """Whether agentd holds ``credential`` as a live grant for ``host``."""
        body = json.dumps(
            {"credential_sha256": hashlib.sha256(credential.encode("utf-8")).hexdigest(), "host": host}
        )
        conn = http.client.HTTPConnection(self.host, self.port, timeout=CHECK_TIMEOUT_S)
        try:
            conn.request("POST", CHECK_PATH, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read(4096)
            if resp.status != 200:
                return False
            answer = json.loads(data)
        except (OSError, ValueError, http.client.HTTPException):
            return False
        finally:
            conn.close()
        return isinstance(answer, dict) and answer.get("allowed") is True

    def answer_sandbox(self, line: str) -> str:
        """squid's answer to a ``--sandbox`` line (the client's address first): ``OK`` when
        the client is the sandbox container."""
        fields = line.split()
        if fields and urllib.parse.unquote(fields[0]) in self.daemon_addresses():
            return "OK"
        return "ERR"

    def answer(self, line: str) -> str:
        """squid's answer (``OK`` or ``ERR ...``) to one request line."""
        fields = line.split()
        # squid appends the acl line's arguments (``-`` when it has none).
        if len(fields) < 3:
            return "ERR message=bad%20request%20line"
        src, host, header = (urllib.parse.unquote(f) for f in fields[:3])
        if src in self.daemon_addresses():
            return "OK"
        credential = credential_of(header) if header != "-" else None
        if credential is None:
            return "ERR message=no%20egress%20grant"
        if self.granted(credential, host.rstrip(".").lower()):
            return "OK"
        return "ERR message=egress%20grant%20refused"


def main(argv: list[str] | None = None) -> None:
    """Answer squid's lines on stdin until it closes them (``--sandbox``: only whether the
    client is the sandbox container; ``--task``: whether the host is in the task's list)."""
    args = sys.argv[1:] if argv is None else argv
    checker = GrantChecker(os.environ.get("DESKPOD_EGRESS_DAEMON") or DEFAULT_DAEMON)
    answer = checker.answer_sandbox if args == ["--sandbox"] else checker.answer
    if args == ["--task"]:
        answer = TaskList().answer
    for line in sys.stdin:
        sys.stdout.write(answer(line) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
