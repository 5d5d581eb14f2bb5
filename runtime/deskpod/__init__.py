"""deskpod: a hardened desktop sandbox for computer-use and code agents.

Packages: :mod:`deskpod.protocol` (the wire contract), :mod:`deskpod.agentd`
(the daemon inside the sandbox), :mod:`deskpod.controller` (the host-side
policy enforcement point), :mod:`deskpod.client` (websocket clients).
"""

from typing import Any

from deskpod.client import Sandbox, SandboxClient, SyncSandbox
from deskpod.errors import DeskpodError

__version__ = "0.1.0"

__all__ = ["ControllerClient", "DeskpodError", "Sandbox", "SandboxClient", "SyncControllerClient", "SyncSandbox",
           "__version__"]


def __getattr__(name: str) -> Any:
    # The controller service's client imports the controller's models: loaded on first use.
    if name in ("ControllerClient", "SyncControllerClient"):
        from deskpod import service_client

        return getattr(service_client, name)
    raise AttributeError(f"module 'deskpod' has no attribute {name!r}")
