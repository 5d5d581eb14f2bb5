"""Sandbox backends: create, recreate and destroy sandboxes, and keep a warm pool of them.

- :mod:`deskpod.backend.base`: the :class:`Backend` interface, :class:`SandboxHandle`,
  :class:`Readiness`.
- :mod:`deskpod.backend.config`: the Docker backend's tagged configuration
  (``type: "docker"``) and its translation from compose semantics (pure).
- :mod:`deskpod.backend.docker_backend`: :class:`DockerBackend` (docker SDK,
  imported lazily: ``pip install 'deskpod[backend]'``).
- :mod:`deskpod.backend.launch`: :class:`DockerSandbox`, one call that starts a sandbox for
  this process and removes it when closed.
- :mod:`deskpod.backend.pool`: :class:`SandboxPool`, acquire / release / reset.
- :mod:`deskpod.backend.pool_state`: the pool's host state file, for the CLI.
"""

from deskpod.backend.base import Backend, Readiness, SandboxHandle
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.docker_backend import DockerBackend
from deskpod.backend.launch import DockerSandbox
from deskpod.backend.pool import PoolMember, ResetMode, ResetReport, SandboxPool
from deskpod.backend.pool_state import PoolRecord, PoolStateFile

__all__ = [
    "Backend",
    "DockerBackend",
    "DockerBackendConfig",
    "DockerSandbox",
    "PoolMember",
    "PoolRecord",
    "PoolStateFile",
    "Readiness",
    "ResetMode",
    "ResetReport",
    "SandboxHandle",
    "SandboxPool",
]
