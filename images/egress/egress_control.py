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
this port.

**Lessee token** (a pool slot's proxy). ``PUT /v1/lessee`` ``{"token_sha256": HEX | null}``,
with the control token only, puts a second token in force (by its SHA-256; ``null``: none) and
empties the run's list. That token may ``GET`` and ``PUT /v1/allowlist`` and nothing else: the
pool hands it to a lease's holder and replaces it at every reset, so a holder keeps no hold on
the slot's proxy after its lease (its old token is answered 401) and never starts the next
lease with its own list in force. Answers: 200 ``{"lessee": true|false}``; 400 a body that is
not such an object; 403 the lessee token itself asking. Without the variable the endpoint does not start and the stack's list alone
applies. Standard library only (the egress image has no deskpod package).

**Multi-tenant mode** (``DESKPOD_EGRESS_MODE=tenants``; one proxy for many sandboxes, the
Kubernetes manifests' egress Deployment). ``/v1/allowlist`` is refused (409: there is no one
run), and each sandbox is a tenant kept in :data:`TENANTS`, which ``grant_check.py``'s
``--tenant*`` helpers read (same token for every call):

- ``PUT /v1/tenants/ID`` ``{"addresses": [IP, ...], "browser_addresses": [IP, ...],
  "daemon": "IP:PORT", "allowed_domains": [...]}`` registers or replaces tenant ``ID``: the
  client addresses that are it (at most :data:`MAX_ADDRESSES`), those admitted as its browser
  without a credential (a subset), its daemon (where its egress grants are checked) and its
  run's allowlist (inside the stack's, else 422). An address another tenant held moves to
  this one (a pod's IP is reused by a later pod); a tenant left with none is removed.
  200: the record.
- ``PUT /v1/tenants/ID/allowlist`` ``{"allowed_domains": [...] | null}``: the running task's
  list, inside the tenant's run list (else 422); ``null`` back to the run list. 200
  ``{"allowed_domains": ..., "tenant": [run list]}``; 404 an unknown tenant.
- ``GET /v1/tenants/ID`` reads the record (404: none); ``DELETE /v1/tenants/ID`` removes it
  (200 ``{"removed": true|false}``): its next request is refused.

Environment: ``DESKPOD_EGRESS_CONTROL_TOKEN_SHA256``; ``DESKPOD_EGRESS_CONTROL_LISTEN``
(``host:port``, default ``0.0.0.0:3129``); ``DESKPOD_EGRESS_MODE`` (``single``, the default,
or ``tenants``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
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
    "LESSEE_PATH",
    "MAX_ADDRESSES",
    "MAX_BODY_BYTES",
    "MAX_DOMAINS",
    "MAX_TENANTS",
    "STACK_ALLOWLIST",
    "TASK_ALLOWLIST",
    "TENANTS",
    "TENANTS_PATH",
    "TenantStore",
    "check_domains",
    "check_registration",
    "main",
    "stack_covers",
]

CONTROL_PATH = "/v1/allowlist"
"""The run's allowlist (single mode)."""

LESSEE_PATH = "/v1/lessee"
"""Where the control token puts the lessee token in force (single mode)."""

DEFAULT_LISTEN = "0.0.0.0:3129"
"""Where it listens when ``DESKPOD_EGRESS_CONTROL_LISTEN`` is not set."""

STACK_ALLOWLIST = "/run/squid/allowlist.txt"
"""The stack's allowlist (squid's ``dstdomain`` file, written by the entrypoint)."""

TASK_ALLOWLIST = "/run/squid/task-allowlist.txt"
"""The run's allowlist this endpoint writes and ``grant_check.py --task`` reads."""

TENANTS = "/run/squid/tenants.json"
"""The multi-tenant mode's tenants, which ``grant_check.py --tenant*`` reads."""

TENANTS_PATH = "/v1/tenants/"
"""The multi-tenant mode's paths: ``/v1/tenants/ID`` and ``/v1/tenants/ID/allowlist``."""

MAX_TENANTS = 1024
"""Most tenants one proxy holds; a registration beyond is refused (507)."""

MAX_ADDRESSES = 4
"""Most client addresses one tenant may have."""

MAX_BODY_BYTES = 16_384
"""Largest request body read, bytes."""

MAX_DOMAINS = 200
"""Most domains a run's list may name."""

REQUEST_TIMEOUT_S = 10.0
"""How long one connection may take to send its request, seconds."""

_DOMAIN = re.compile(r"^\.?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
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


def _address(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("an address must be a string")
    try:
        address = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        raise ValueError(f"not an IP address: {value[:60]!r}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        raise ValueError(f"not a client address: {address}")
    return str(address)


def check_registration(body: Any, stack: list[str]) -> tuple[dict[str, Any], list[str]]:
    """A tenant's record from a registration body, and its domains outside the stack's list.

    Args:
        body: the decoded JSON body (see the module docstring).
        stack: the stack's allowlist.

    Returns:
        ``(record, refused)``: the record as :data:`TENANTS` stores it (addresses normalized,
        ``task_domains`` ``None``) and the run-list domains the stack's list does not admit.

    Raises:
        ValueError: a field is missing, unknown or malformed.
    """
    fields = {"addresses", "browser_addresses", "daemon", "allowed_domains"}
    if not isinstance(body, dict) or set(body) != fields:
        raise ValueError(f"the body must have exactly the fields {sorted(fields)}")
    listed = body["addresses"]
    if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_ADDRESSES:
        raise ValueError(f"addresses must list 1 to {MAX_ADDRESSES} IP addresses")
    addresses = list(dict.fromkeys(_address(a) for a in listed))
    browser = body["browser_addresses"]
    if not isinstance(browser, list):
        raise ValueError("browser_addresses must be a list")
    browser_addresses = list(dict.fromkeys(_address(a) for a in browser))
    if not set(browser_addresses) <= set(addresses):
        raise ValueError("every browser address must be one of the tenant's addresses")
    daemon = body["daemon"]
    host, _, port = daemon.rpartition(":") if isinstance(daemon, str) else ("", "", "")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("daemon must be IP:PORT")
    domains, refused = check_domains(body["allowed_domains"], stack)
    if domains is None:
        raise ValueError("a tenant's allowed_domains must be a list")
    record = {"addresses": addresses, "browser_addresses": browser_addresses,
              "daemon": f"{_address(host)}:{int(port)}", "allowed_domains": domains, "task_domains": None}
    return record, refused


def _covered_by(domain: str, domains: list[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in domains)


class TenantStore:
    """The tenants file: read, changed and replaced atomically (under one lock).

    Args:
        path: the file (:data:`TENANTS`).
    """

    def __init__(self, path: str = TENANTS) -> None:
        self.path = path
        self.lock = threading.Lock()

    def read(self) -> dict[str, dict[str, Any]]:
        """Every tenant's record by id (none when the file is absent)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                tenants = json.load(f).get("tenants") or {}
        except FileNotFoundError:
            return {}
        return dict(tenants)

    def write(self, tenants: dict[str, dict[str, Any]]) -> None:
        """Replace the file with ``tenants`` (a new inode: the helpers see it at once)."""
        folder = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tenants.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"tenants": tenants}, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)

    def register(self, tenant_id: str, record: dict[str, Any]) -> list[str]:
        """Register or replace ``tenant_id``; its addresses leave any other tenant.

        Returns:
            The ids of other tenants removed because no address was left to them.

        Raises:
            OverflowError: :data:`MAX_TENANTS` are registered already.
        """
        with self.lock:
            tenants = self.read()
            if tenant_id not in tenants and len(tenants) >= MAX_TENANTS:
                raise OverflowError(f"at most {MAX_TENANTS} tenants")
            taken = set(record["addresses"])
            emptied = []
            for other_id, other in list(tenants.items()):
                if other_id == tenant_id or not taken & set(other["addresses"]):
                    continue
                other["addresses"] = [a for a in other["addresses"] if a not in taken]
                other["browser_addresses"] = [a for a in other["browser_addresses"] if a not in taken]
                if not other["addresses"]:
                    del tenants[other_id]
                    emptied.append(other_id)
            tenants[tenant_id] = record
            self.write(tenants)
        return emptied

    def set_task(self, tenant_id: str, value: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """Put the running task's list in force for ``tenant_id`` (``None``: the run's list).

        Returns:
            ``(record, refused)``: the tenant's record after the change (``None``: no such
            tenant, nothing changed) and the domains outside its run list (then nothing changed).

        Raises:
            ValueError: ``value`` is not ``null`` or a list of host names.
        """
        with self.lock:
            tenants = self.read()
            record = tenants.get(tenant_id)
            domains, _ = check_domains(value, [])
            if record is None:
                return None, []
            refused = [d for d in domains or [] if not _covered_by(d, record["allowed_domains"])]
            if refused:
                return record, refused
            record["task_domains"] = domains
            self.write(tenants)
        return record, []

    def remove(self, tenant_id: str) -> bool:
        """Remove ``tenant_id``; whether it was registered."""
        with self.lock:
            tenants = self.read()
            if tenants.pop(tenant_id, None) is None:
                return False
            self.write(tenants)
        return True


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
    lessee_sha256 = ""
    tenants: TenantStore | None = None

    def _role(self) -> str | None:
        """``"control"`` (the control token), ``"lessee"`` (the lessee token in force) or ``None``."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token or len(token) > 512:
            return None
        digest = hashlib.sha256(token.strip().encode("utf-8", "replace")).hexdigest()
        if hmac.compare_digest(digest, self.token_sha256):
            return "control"
        lessee = self.lessee_sha256
        if lessee and hmac.compare_digest(digest, lessee):
            return "lessee"
        return None

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _gate(self) -> bool:
        if self.path not in (CONTROL_PATH, LESSEE_PATH) and not self.path.startswith(TENANTS_PATH):
            self._answer(404, {"error": "not found"})
            return False
        role = self._role()
        if role is None:
            self._answer(401, {"error": "a valid bearer token is required"})
            return False
        if role == "lessee" and self.path != CONTROL_PATH:
            self._answer(403, {"error": "the lessee token sets the run's allowlist only"})
            return False
        if self.path == LESSEE_PATH and self.tenants is not None:
            self._answer(404, {"error": "this proxy serves tenants: no lessee token"})
            return False
        if self.path.startswith(TENANTS_PATH) and self.tenants is None:
            self._answer(404, {"error": "this proxy serves one sandbox (DESKPOD_EGRESS_MODE=single)"})
            return False
        if self.path == CONTROL_PATH and self.tenants is not None:
            self._answer(409, {"error": "this proxy serves tenants: use /v1/tenants/ID/allowlist"})
            return False
        return True

    def _tenant_route(self) -> tuple[str, str] | None:
        """``(tenant id, "" or "allowlist")`` of a tenant path; answers 404 and returns
        ``None`` for anything else."""
        tenant_id, _, rest = self.path[len(TENANTS_PATH):].partition("/")
        if _TENANT_ID.fullmatch(tenant_id) and rest in ("", "allowlist"):
            return tenant_id, rest
        self._answer(404, {"error": "not found"})
        return None

    def _body(self) -> Any:
        """The request's JSON body; answers 400 and raises ``ValueError`` when there is none."""
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._answer(400, {"error": f"the body must be JSON of at most {MAX_BODY_BYTES} bytes"})
            raise ValueError("no body")
        try:
            return json.loads(self.rfile.read(length))
        except ValueError:
            self._answer(400, {"error": "the body is not JSON"})
            raise

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        if not self._gate():
            return
        if self.path == LESSEE_PATH:
            self._answer(405, {"error": "the lessee token is only put"})
            return
        if self.tenants is None:
            self._answer(200, {"allowed_domains": _current(), "stack": _read_lines(STACK_ALLOWLIST)})
            return
        route = self._tenant_route()
        if route is None:
            return
        record = self.tenants.read().get(route[0])
        if record is None:
            self._answer(404, {"error": "no such tenant"})
        elif route[1]:
            self._answer(200, {"allowed_domains": record["task_domains"], "tenant": record["allowed_domains"]})
        else:
            self._answer(200, record)

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._gate():
            return
        route = self._tenant_route() if self.tenants is not None else None
        if self.tenants is None:
            self._answer(405, {"error": "only tenants are removed"})
            return
        if route is None:
            return
        if route[1]:
            self._answer(405, {"error": "remove the tenant, or PUT a null allowlist"})
            return
        removed = self.tenants.remove(route[0])
        if removed:
            sys.stderr.write(f"deskpod-egress-control: tenant {route[0]} removed\n")
        self._answer(200, {"removed": removed})

    def do_PUT(self) -> None:  # noqa: N802
        if not self._gate():
            return
        if self.tenants is not None:
            self._put_tenant()
            return
        try:
            body = self._body()
        except ValueError:
            return
        if self.path == LESSEE_PATH:
            self._put_lessee(body)
            return
        stack = _read_lines(STACK_ALLOWLIST)
        try:
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

    def _put_lessee(self, body: Any) -> None:
        """Put a new lessee token in force (or none) and empty the run's list: the last lease's
        holder keeps neither its token nor its list."""
        value = body.get("token_sha256", "") if isinstance(body, dict) and set(body) == {"token_sha256"} else ""
        if not (value is None or (isinstance(value, str) and _SHA256.fullmatch(value))):
            self._answer(400, {"error": 'the body must be {"token_sha256": "<64 lower-case hex digits>" | null}'})
            return
        with _LOCK:
            type(self).lessee_sha256 = value or ""
            _write_task_list(None)
        sys.stderr.write(f"deskpod-egress-control: lessee token {'replaced' if value else 'removed'}, "
                         "run allowlist removed\n")
        self._answer(200, {"lessee": value is not None})

    def _put_tenant(self) -> None:
        assert self.tenants is not None
        route = self._tenant_route()
        if route is None:
            return
        try:
            body = self._body()
        except ValueError:
            return
        tenant_id, what = route
        stack = _read_lines(STACK_ALLOWLIST)
        try:
            if what:
                if not isinstance(body, dict) or set(body) != {"allowed_domains"}:
                    raise ValueError('the body must be {"allowed_domains": [...] | null}')
                record, refused = self.tenants.set_task(tenant_id, body["allowed_domains"])
            else:
                record, refused = check_registration(body, stack)
        except ValueError as exc:
            self._answer(400, {"error": str(exc)[:300]})
            return
        if record is None:
            self._answer(404, {"error": "no such tenant"})
            return
        if refused:
            whose = "the tenant's run list" if what else "the stack's allowlist"
            self._answer(422, {"error": f"domains outside {whose}", "refused": refused[:50]})
            return
        if what:
            shown = " ".join(record["task_domains"] or ["(the run's list)"])
            sys.stderr.write(f"deskpod-egress-control: tenant {tenant_id} task allowlist: {shown}\n")
            self._answer(200, {"allowed_domains": record["task_domains"], "tenant": record["allowed_domains"]})
            return
        try:
            emptied = self.tenants.register(tenant_id, record)
        except OverflowError as exc:
            self._answer(507, {"error": str(exc)})
            return
        for other in emptied:
            sys.stderr.write(f"deskpod-egress-control: tenant {other} removed (its address moved to {tenant_id})\n")
        sys.stderr.write(f"deskpod-egress-control: tenant {tenant_id} at {' '.join(record['addresses'])}: "
                         f"{' '.join(record['allowed_domains']) or '(no host)'}\n")
        self._answer(200, record)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        sys.stderr.write("deskpod-egress-control: " + (format % args) + "\n")


def main() -> None:
    """Serve the endpoint until the process ends (not at all without a token hash; in the
    multi-tenant mode, with no tenant at the start)."""
    digest = (os.environ.get("DESKPOD_EGRESS_CONTROL_TOKEN_SHA256") or "").strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        sys.stderr.write("deskpod-egress-control: no DESKPOD_EGRESS_CONTROL_TOKEN_SHA256: endpoint off\n")
        return
    mode = (os.environ.get("DESKPOD_EGRESS_MODE") or "single").strip().lower()
    if mode not in ("single", "tenants"):
        sys.stderr.write(f"deskpod-egress-control: DESKPOD_EGRESS_MODE must be single or tenants, not {mode!r}\n")
        sys.exit(2)
    host, _, port = (os.environ.get("DESKPOD_EGRESS_CONTROL_LISTEN") or DEFAULT_LISTEN).rpartition(":")
    _Handler.token_sha256 = digest
    _write_task_list(None)
    if mode == "tenants":
        _Handler.tenants = TenantStore()
        _Handler.tenants.write({})
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _Handler)
    server.daemon_threads = True
    sys.stderr.write(f"deskpod-egress-control: listening on {host}:{port}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
