"""deskpod: a hardened desktop sandbox for computer-use and code agents.

Packages: :mod:`deskpod.protocol` (the wire contract), :mod:`deskpod.agentd`
(the daemon inside the sandbox), :mod:`deskpod.controller` (the host-side
policy enforcement point), :mod:`deskpod.client` (websocket clients).
"""

from deskpod.client import Sandbox, SandboxClient
from deskpod.errors import DeskpodError

__version__ = "0.1.0"

__all__ = ["DeskpodError", "Sandbox", "SandboxClient", "__version__"]
