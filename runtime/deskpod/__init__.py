"""deskpod: a hardened desktop sandbox for computer-use and code agents.

Packages: :mod:`deskpod.protocol` (the wire contract), :mod:`deskpod.agentd`
(the daemon inside the sandbox), :mod:`deskpod.controller` (the host-side
policy enforcement point), :mod:`deskpod.client` (websocket clients).

What a script on the host needs is here: :class:`Sandbox` and :class:`SyncSandbox`
(a sandbox's own client), :meth:`DockerSandbox.create` (start a sandbox for this
process on the local Docker engine, removed when closed), :func:`attach` and
:func:`attach_sync` (the controller service of the compose stack on this host, from its
``.env``), :class:`ControllerClient` and :class:`SyncControllerClient`, the protocol's
:class:`Observation`, :class:`ObserveOptions`, :class:`Point` and :class:`Size`, and the
root of the exceptions, :class:`DeskpodError`.

The names below load on first use (PEP 562 module ``__getattr__``), so that
importing :mod:`deskpod.protocol` or :mod:`deskpod.agentd` does not import the
host client or ``websockets``.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskpod.backend.launch import DockerSandbox
    from deskpod.client import Sandbox, SandboxClient, SyncSandbox
    from deskpod.errors import DeskpodError
    from deskpod.protocol import Observation, ObserveOptions, Point, Size
    from deskpod.service.attach import attach, attach_sync
    from deskpod.service.client import ControllerClient, SyncControllerClient

__version__ = "0.1.0"

__all__ = ["ControllerClient", "DeskpodError", "DockerSandbox", "Observation", "ObserveOptions", "Point", "Sandbox",
           "SandboxClient", "Size", "SyncControllerClient", "SyncSandbox", "__version__", "attach", "attach_sync"]

_LAZY: dict[str, str] = {
    "ControllerClient": "deskpod.service.client",
    "DeskpodError": "deskpod.errors",
    "DockerSandbox": "deskpod.backend.launch",
    "ObserveOptions": "deskpod.protocol",
    "Observation": "deskpod.protocol",
    "Point": "deskpod.protocol",
    "Size": "deskpod.protocol",
    "attach": "deskpod.service.attach",
    "attach_sync": "deskpod.service.attach",
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
