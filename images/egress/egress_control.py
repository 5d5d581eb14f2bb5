#!/usr/bin/python3
"""The egress proxy's control endpoint: the controller gives it each run's allowlist.

The proxy's own allowlist (``DESKPOD_EGRESS_ALLOWLIST``, written to
``/run/squid/allowlist.txt`` at start) is the stack's: every sandbox run on this stack may
at most reach it. A run's task usually names fewer hosts; the controller puts that list in
force here at the start of the run and takes it away at the end, so the proxy refuses a
host the stack allows but the task does not, whoever asks (Chromium, an agent's command,
or code that took over the daemon's zone). squid asks ``grant_check.py --task`` about each
request's host; that helper reads the file this endpoint writes
(:data:`TASK_ALLOWLIST`, one domain per line; no file: no run list).

``PUT /v1/allowlist`` with ``Authorization: Bearer <token>`` and the JSON body
``{"allowed_domains": ["demo.test", ...]}`` (a domain also allows its subdomains) sets the
run's list; ``{"allowed_domains": null}`` removes it. Answers: 200 ``{"allowed_domains": ...,
"stack": [...]}``; 401 a missing or wrong token; 400 a body that is not such a list; 422
``{"error", "refused": [...]}`` when a domain is outside the stack's allowlist (the list must
be a subset of the stack's; nothing is changed). ``GET /v1/allowlist`` reads it (same token).

Authentication: the proxy holds only the token's SHA-256
(``DESKPOD_EGRESS_CONTROL_TOKEN_SHA256``); the token is the controller's alone and is never
given to the sandbox or workspace containers, which share the proxy's network and can reach
this port. Without the variable the endpoint does not start and the stack's list alone
applies. Standard library only (the egress image has no deskpod package).

Environment: ``DESKPOD_EGRESS_CONTROL_TOKEN_SHA256``; ``DESKPOD_EGRESS_CONTROL_LISTEN``
(``host:port``, default ``0.0.0.0:3129``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "CONTROL_PATH",
    "DEFAULT_LISTEN",
    "MAX_BODY_BYTES",
    "MAX_DOMAINS",
    "STACK_ALLOWLIST",
    "TASK_ALLOWLIST",
    "check_domains",
    "main",
    "stack_covers",
]

CONTROL_PATH = "/v1/allowlist"
"""The endpoint's one path."""

DEFAULT_LISTEN = "0.0.0.0:3129"
"""Where it listens when ``DESKPOD_EGRESS_CONTROL_LISTEN`` is not set."""

STACK_ALLOWLIST = "/run/squid/allowlist.txt"
"""The stack's allowlist (squid's ``dstdomain`` file, written by the entrypoint)."""

TASK_ALLOWLIST = "/run/squid/task-allowlist.txt"
"""The run's allowlist this endpoint writes and ``grant_check.py --task`` reads."""

MAX_BODY_BYTES = 16_384
"""Largest request body read, bytes."""

MAX_DOMAINS = 200
"""Most domains a run's list may name."""

REQUEST_TIMEOUT_S = 10.0
"""How long one connection may take to send its request, seconds."""

_DOMAIN = re.compile(r"^\.?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_LOCK = threading.Lock()


def stack_covers(domain: str, stack: list[str]) -> bool:
    """Whether the stack's list admits ``domain`` itself, as squid's ``dstdomain`` reads it
    (``example.com`` only that host, ``.example.com`` it and its subdomains)."""
    for entry in stack:
        entry = entry.lower()
        if entry.startswith("."):
            if domain == entry[1:] or domain.endswith(entry):
                return True
        elif domain == entry:
            return True
    return False


def check_domains(value: Any, stack: list[str]) -> tuple[list[str] | None, list[str]]:
    """The run's list from a request body's ``allowed_domains``, and the domains outside the stack's.

    Returns:
        ``(domains, refused)``: the list (lowercase, no leading or trailing dot; ``None``: no
        run list) and the domains the stack's list does not admit.

    Raises:
        ValueError: ``value`` is not ``null`` or a list of at most :data:`MAX_DOMAINS` host names.
    """
    if value is None:
        return None, []
    if not isinstance(value, list) or len(value) > MAX_DOMAINS:
        raise ValueError(f"allowed_domains must be null or a list of at most {MAX_DOMAINS} domains")
    domains: list[str] = []
    for item in value:
        if not isinstance(item, str) or not _DOMAIN.fullmatch(item):
            raise ValueError("every allowed domain must be a host name")
        name = item.strip(".").lower()
        if name not in domains:
            domains.append(name)
    return domains, [d for d in domains if not stack_covers(d, stack)]


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="ascii") as f:
            return [line.strip() for line in f if line.strip()]
    except (OSError, UnicodeDecodeError):
        return []


def _write_task_list(domains: list[str] | None) -> None:
    if domains is None:
        try:
            os.unlink(TASK_ALLOWLIST)
        except FileNotFoundError:
            pass
        return
    folder = os.path.dirname(TASK_ALLOWLIST)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".task-allowlist.")
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("".join(d + "\n" for d in domains))
    os.chmod(tmp, 0o644)
    os.replace(tmp, TASK_ALLOWLIST)


def _current() -> list[str] | None:
    return _read_lines(TASK_ALLOWLIST) if os.path.exists(TASK_ALLOWLIST) else None


class _Handler(BaseHTTPRequestHandler):
    server_version = "deskpod-egress-control"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S
    token_sha256 = ""

    def _authorized(self) -> bool:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token or len(token) > 512:
            return False
        digest = hashlib.sha256(token.strip().encode("utf-8", "replace")).hexdigest()
        return hmac.compare_digest(digest, self.token_sha256)

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _gate(self) -> bool:
        if self.path != CONTROL_PATH:
            self._answer(404, {"error": "not found"})
            return False
        if not self._authorized():
            self._answer(401, {"error": "a valid bearer token is required"})
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        if self._gate():
            self._answer(200, {"allowed_domains": _current(), "stack": _read_lines(STACK_ALLOWLIST)})

    def do_PUT(self) -> None:  # noqa: N802
        if not self._gate():
            return
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._answer(400, {"error": f"the body must be JSON of at most {MAX_BODY_BYTES} bytes"})
            return
        stack = _read_lines(STACK_ALLOWLIST)
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict) or set(body) != {"allowed_domains"}:
                raise ValueError('the body must be {"allowed_domains": [...] | null}')
            domains, refused = check_domains(body["allowed_domains"], stack)
        except ValueError as exc:
            self._answer(400, {"error": str(exc)[:300]})
            return
        if refused:
            self._answer(422, {"error": "domains outside the stack's allowlist", "refused": refused[:50]})
            return
        with _LOCK:
            _write_task_list(domains)
        shown = "removed (the stack's list applies)" if domains is None else " ".join(domains) or "(no host)"
        sys.stderr.write(f"deskpod-egress-control: run allowlist: {shown}\n")
        self._answer(200, {"allowed_domains": domains, "stack": stack})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        sys.stderr.write("deskpod-egress-control: " + (format % args) + "\n")


def main() -> None:
    """Serve the endpoint until the process ends (not at all without a token hash)."""
    digest = (os.environ.get("DESKPOD_EGRESS_CONTROL_TOKEN_SHA256") or "").strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        sys.stderr.write("deskpod-egress-control: no DESKPOD_EGRESS_CONTROL_TOKEN_SHA256: endpoint off\n")
        return
    host, _, port = (os.environ.get("DESKPOD_EGRESS_CONTROL_LISTEN") or DEFAULT_LISTEN).rpartition(":")
    _Handler.token_sha256 = digest
    _write_task_list(None)
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _Handler)
    server.daemon_threads = True
    sys.stderr.write(f"deskpod-egress-control: listening on {host}:{port}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
