"""deskpod: a hardened desktop sandbox for computer-use and code agents.

Packages: :mod:`deskpod.protocol` (the wire contract), :mod:`deskpod.agentd`
(the daemon inside the sandbox), :mod:`deskpod.controller` (the host-side
policy enforcement point), :mod:`deskpod.client` (websocket clients).

The names below load on first use (PEP 562 module ``__getattr__``), so that
importing :mod:`deskpod.protocol` or :mod:`deskpod.agentd` does not import the
host client or ``websockets``.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskpod.client import Sandbox, SandboxClient, SyncSandbox
    from deskpod.errors import DeskpodError
    from deskpod.service.client import ControllerClient, SyncControllerClient

__version__ = "0.1.0"

__all__ = ["ControllerClient", "DeskpodError", "Sandbox", "SandboxClient", "SyncControllerClient", "SyncSandbox",
           "__version__"]

_LAZY: dict[str, str] = {
    "ControllerClient": "deskpod.service.client",
    "DeskpodError": "deskpod.errors",
    "Sandbox": "deskpod.client",
    "SandboxClient": "deskpod.client",
    "SyncControllerClient": "deskpod.service.client",
    "SyncSandbox": "deskpod.client",
}


def __getattr__(name: str) -> Any:
    """Import a lazily exported name on first access (PEP 562).

    Args:
        name: The attribute asked for.

    Returns:
        The object ``name`` is bound to in its module.

    Raises:
        AttributeError: ``name`` is not one of the package's exports.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deskpod' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the module's names, the lazy exports included.

    Returns:
        The sorted names.
    """
    return sorted(set(globals()) | set(__all__))
