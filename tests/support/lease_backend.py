"""A pool backend without Docker for the lease tests: sandboxes as records.

Each recreate gives a new token (numbered across every instance, so commands that each
make their own backend, as ``deskpod pool`` does, never hand out the same one twice);
renewals are recorded. It takes the Docker backend's arguments, so ``deskpod pool``
can make it in place of :class:`~deskpod.backend.DockerBackend`.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deskpod.backend import PoolRecord, PoolStateFile, Readiness, SandboxHandle, pool_reset
from deskpod.backend.base import Backend

_TOKENS = itertools.count(1)


class LeaseBackend(Backend):
    """Sandboxes as records; each recreate gives a new token; renewals are recorded.

    Args:
        config: ignored (the Docker backend's configuration).
        client: ignored; :attr:`client` is what ``deskpod pool`` connects to.
    """

    def __init__(self, config: Any = None, client: Any = None) -> None:
        self.client = client or object()
        self.made = 0
        self.recreated = 0
        self.renewed: list[tuple[str, float]] = []

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        self.made += 1
        return SandboxHandle(id=f"s{self.made}", container="c", network="n", egress="e",
                             address=f"10.0.0.{self.made}", token=token or f"token-{self.made}-0" * 4, pool=pool)

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        self.recreated += 1
        return replace(handle, token=token or f"token-{handle.id}-{next(_TOKENS)}" * 4)

    async def destroy(self, sandbox_id: str) -> None:
        return None

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
        return Readiness(attempts=1, elapsed_s=0.0, last_status="running, /healthz 200")

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        return True

    async def renew(self, handle: SandboxHandle, expires_at: float) -> None:
        self.renewed.append((handle.id, expires_at))

    async def list_ids(self, pool: str | None = None) -> list[str]:
        return []


def one_sandbox_pool(monkeypatch: pytest.MonkeyPatch, state_dir: Path, name: str, token: str,
                     backend_site: tuple[object, str]) -> PoolStateFile:
    """A saved pool ``name`` of one idle sandbox ``s1`` (its token ``token``) in ``state_dir``,
    made on :class:`LeaseBackend`: ``backend_site`` (module, attribute) is where the code under
    test makes its Docker backend, and a reset reads no observation."""

    async def observed(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(*backend_site, LeaseBackend)
    monkeypatch.setattr(pool_reset, "ready_observation", observed)
    state = PoolStateFile(name, state_dir)
    state.save(PoolRecord.model_validate({
        "name": name, "size": 1, "reset_mode": "recreate", "backend": {},
        "members": [{"id": "s1", "container": "c", "network": "n", "egress": "e", "address": "10.0.0.1",
                     "token": token, "pool": name, "state": "idle"}]}))
    return state
