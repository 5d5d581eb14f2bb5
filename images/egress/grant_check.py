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

**Multi-tenant mode** (``DESKPOD_EGRESS_MODE=tenants``: one proxy serves many sandboxes, as
the Kubernetes manifests deploy it). Every client is a *tenant* the controller registered
through the control endpoint (``egress_control.py``, file :data:`TENANTS`): its addresses
(a Kubernetes pod's IP, which the CNI and the network policies make hard to forge), those
of them admitted as its browser without a credential, its daemon's ``ip:port`` and its
run's allowlist (and the running task's, within it). A request's tenant is the one whose
addresses hold its source address (``%SRC``, the TCP peer; no header is believed);
an address no tenant holds is refused everything. Three helper types, none cached, so a
removed tenant's next request is refused:

- ``--tenant-list`` (``%SRC %DST``): ``OK`` when the host is on the client's tenant's list;
- ``--tenant-browser`` (``%SRC``): ``OK`` when the client is one of its tenant's browser addresses;
- ``--tenant`` (``%SRC %DST %>{Proxy-Authorization}``): ``OK`` when the host is on the
  tenant's list and the header's credential is a live grant of *that tenant's* daemon
  (asked at its registered address, never another tenant's nor a name squid resolves).

Environment: ``DESKPOD_EGRESS_DAEMON``, agentd's ``host:port`` as the egress proxy
resolves it (default ``sandbox:8765``; single-tenant mode only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import ipaddress
import json
import os
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "ADDRESS_CACHE_S",
    "CHECK_PATH",
    "CHECK_TIMEOUT_S",
    "DEFAULT_DAEMON",
    "GrantChecker",
    "MAX_CREDENTIAL_CHARS",
    "TASK_ALLOWLIST",
    "TENANTS",
    "TaskList",
    "Tenant",
    "TenantChecker",
    "TenantTable",
    "credential_of",
    "host_on",
    "main",
    "normal_address",
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

TENANTS = "/run/squid/tenants.json"
"""The multi-tenant mode's tenants (JSON, written by ``egress_control.py``; absent: none)."""


def host_on(host: str, domains: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one (the task lists' reading)."""
    return bool(host) and any(host == d or host.endswith("." + d) for d in domains)


def normal_address(text: str) -> str | None:
    """``text`` as an IP address in its one spelling (an IPv4-mapped IPv6 address as the
    IPv4 one), or ``None`` when it is not an address."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


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


class Tenant(NamedTuple):
    """One registered sandbox, as the helpers read it.

    Attributes:
        id: the tenant's id (the controller's name for the sandbox).
        addresses: its client addresses (normalized).
        browser_addresses: those admitted without a credential (its browser).
        daemon_host: its daemon's address, where grants are checked.
        daemon_port: its daemon's port.
        domains: the hosts it may reach now: the running task's list, else its run's.
    """

    id: str
    addresses: frozenset[str]
    browser_addresses: frozenset[str]
    daemon_host: str
    daemon_port: int
    domains: tuple[str, ...]


class TenantTable:
    """The tenants file, read again whenever it changes (the control endpoint replaces it
    atomically, so each change is a new inode). A file that cannot be read or parsed
    holds no tenant: every client is refused.

    Args:
        path: the file (:data:`TENANTS`).
    """

    def __init__(self, path: str = TENANTS) -> None:
        self.path = path
        self._key: tuple[int, int, int] | None = None
        self._by_address: dict[str, Tenant] = {}

    def _load(self) -> dict[str, Tenant]:
        with open(self.path, encoding="utf-8") as f:
            document = json.load(f)
        by_address: dict[str, Tenant] = {}
        for tenant_id, record in (document.get("tenants") or {}).items():
            task = record.get("task_domains")
            host, _, port = str(record["daemon"]).rpartition(":")
            tenant = Tenant(
                id=str(tenant_id),
                addresses=frozenset(str(a) for a in record["addresses"]),
                browser_addresses=frozenset(str(a) for a in record.get("browser_addresses") or []),
                daemon_host=host.strip("[]"), daemon_port=int(port),
                domains=tuple(str(d).lower() for d in (record["allowed_domains"] if task is None else task)),
            )
            for address in tenant.addresses:
                by_address[address] = tenant
        return by_address

    def of(self, address: str) -> Tenant | None:
        """The tenant holding ``address`` (as squid writes it), or ``None``."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._key, self._by_address = None, {}
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._key:
            try:
                self._by_address = self._load()
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._by_address = {}
            self._key = key
        normal = normal_address(address)
        return self._by_address.get(normal) if normal is not None else None


class TenantChecker:
    """Answers the multi-tenant helper types' lines (see the module docstring).

    Args:
        table: the tenants.
    """

    def __init__(self, table: TenantTable) -> None:
        self.table = table

    @staticmethod
    def refuse(line: str) -> str:
        """The answer to a helper type this file does not know: ``ERR``."""
        return "ERR"

    @staticmethod
    def _fields(line: str, count: int) -> list[str] | None:
        fields = line.split()
        if len(fields) < count:
            return None
        return [urllib.parse.unquote(f) for f in fields[:count]]

    def answer_list(self, line: str) -> str:
        """``--tenant-list`` (``%SRC %DST``): the host is on the client's tenant's list."""
        fields = self._fields(line, 2)
        if fields is None:
            return "ERR message=bad%20request%20line"
        tenant = self.table.of(fields[0])
        if tenant is None:
            return "ERR message=not%20a%20registered%20sandbox"
        if host_on(fields[1].rstrip(".").lower(), tenant.domains):
            return "OK"
        return "ERR message=outside%20the%20sandbox%27s%20allowlist"

    def answer_browser(self, line: str) -> str:
        """``--tenant-browser`` (``%SRC``): the client is its tenant's browser."""
        fields = self._fields(line, 1)
        tenant = self.table.of(fields[0]) if fields is not None else None
        if fields is not None and tenant is not None and normal_address(fields[0]) in tenant.browser_addresses:
            return "OK"
        return "ERR"

    def answer(self, line: str) -> str:
        """``--tenant`` (``%SRC %DST %>{Proxy-Authorization}``): a live grant of the
        client's own tenant's daemon, for a host on that tenant's list."""
        fields = self._fields(line, 3)
        if fields is None:
            return "ERR message=bad%20request%20line"
        src, host, header = fields
        tenant = self.table.of(src)
        if tenant is None:
            return "ERR message=not%20a%20registered%20sandbox"
        host = host.rstrip(".").lower()
        if not host_on(host, tenant.domains):
            return "ERR message=outside%20the%20sandbox%27s%20allowlist"
        credential = credential_of(header) if header != "-" else None
        if credential is None:
            return "ERR message=no%20egress%20grant"
        if GrantChecker(f"{tenant.daemon_host}:{tenant.daemon_port}").granted(credential, host):
            return "OK"
        return "ERR message=egress%20grant%20refused"


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
    client is the sandbox container; ``--task``: whether the host is in the task's list;
    ``--tenant``, ``--tenant-list``, ``--tenant-browser``: the multi-tenant mode's checks)."""
    args = sys.argv[1:] if argv is None else argv
    checker = GrantChecker(os.environ.get("DESKPOD_EGRESS_DAEMON") or DEFAULT_DAEMON)
    answer: Callable[[str], str] = checker.answer_sandbox if args == ["--sandbox"] else checker.answer
    if args == ["--task"]:
        answer = TaskList().answer
    elif args and args[0].startswith("--tenant"):
        tenants = TenantChecker(TenantTable())
        answers: dict[str, Callable[[str], str]] = {"--tenant": tenants.answer, "--tenant-list": tenants.answer_list,
                                                    "--tenant-browser": tenants.answer_browser}
        answer = answers.get(args[0], tenants.refuse)
    for line in sys.stdin:
        sys.stdout.write(answer(line) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
