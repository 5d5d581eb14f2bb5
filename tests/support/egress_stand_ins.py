"""The egress proxy's peers for tests without Docker.

``load_egress_module`` loads one of the proxy image's own Python modules
(``images/egress/*.py``: not a package, run by squid as helpers). ``daemon_stand_in``
serves agentd's egress check endpoint (``POST`` :data:`~deskpod.agentd.workspace.egress_grants.EGRESS_CHECK_PATH`)
from a real :class:`~deskpod.agentd.workspace.egress_grants.EgressGrants` registry on a free
loopback port, recording the host of every check it was asked. ``proxy_authorization``
is a credential's ``Proxy-Authorization`` value as squid hands it to its helpers
(URL-escaped).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

from deskpod.agentd.workspace.egress_grants import EGRESS_CHECK_PATH, EgressCheck, EgressGrants

__all__ = ["DaemonStandIn", "EGRESS_IMAGE", "daemon_stand_in", "load_egress_module", "proxy_authorization"]

EGRESS_IMAGE = Path(__file__).resolve().parents[2] / "images" / "egress"
"""The egress proxy image's folder (its helpers' sources)."""


def load_egress_module(name: str, alias: str | None = None) -> ModuleType:
    """``images/egress/<name>.py`` as a fresh module named ``alias`` (default ``name``)."""
    spec = importlib.util.spec_from_file_location(alias or name, EGRESS_IMAGE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class DaemonStandIn:
    """A running stand-in: ``address`` (``host:port``), its registry and the hosts asked."""

    address: str
    grants: EgressGrants = field(default_factory=EgressGrants)
    asked: list[str] = field(default_factory=list)


@contextlib.contextmanager
def daemon_stand_in(host_name: str = "127.0.0.1") -> Iterator[DaemonStandIn]:
    """Serve agentd's egress check endpoint on a free port of 127.0.0.1 while the block
    runs; ``host_name`` is the host its ``address`` names (``"localhost"`` where the
    helper must resolve it)."""
    stand_in = DaemonStandIn(address="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            check = EgressCheck.model_validate_json(self.rfile.read(int(self.headers["Content-Length"])))
            stand_in.asked.append(check.host)
            data = json.dumps({"allowed": self.path == EGRESS_CHECK_PATH and stand_in.grants.allows(check)}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stand_in.address = f"{host_name}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()


def proxy_authorization(credential: str) -> str:
    """``Basic deskpod:<credential>`` (base64), URL-escaped as squid passes headers to helpers."""
    return urllib.parse.quote("Basic " + base64.b64encode(f"deskpod:{credential}".encode()).decode())


@contextlib.contextmanager
def control_endpoint(control: ModuleType, folder: Path, monkeypatch: Any, token: str,
                     tenants: bool = False) -> Iterator[str]:
    """Serve the egress image's real control endpoint on a free port of 127.0.0.1 while the
    block runs; yields its URL.

    Args:
        control: ``images/egress/egress_control.py`` as :func:`load_egress_module` loads it.
        folder: where its allowlist files are written (the stack's: allowed.test, demo.test).
        monkeypatch: pytest's, to point the module at those files for the test only.
        token: the control token it accepts.
        tenants: the multi-tenant mode, its tenant store in ``folder`` too (default: single).
    """
    stack = folder / "allowlist.txt"
    stack.write_text("allowed.test\ndemo.test\n")
    monkeypatch.setattr(control, "STACK_ALLOWLIST", str(stack))
    monkeypatch.setattr(control, "TASK_ALLOWLIST", str(folder / "task-allowlist.txt"))

    class Handler(control._Handler):
        token_sha256 = hashlib.sha256(token.encode()).hexdigest()

        def log_message(self, *args: Any) -> None:
            return

    if tenants:
        Handler.tenants = control.TenantStore(str(folder / "tenants.json"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
