"""The Docker engine: the connection the audit uses and the translation of the docker SDK's
errors into :class:`~deskpod.errors.AuditError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from deskpod.errors import AuditError

__all__ = [
]

@contextmanager
def _docker_errors(what: str) -> Iterator[None]:
    """Translate docker SDK and transport errors into :class:`AuditError`, once."""
    import docker.errors

    try:
        yield
    except docker.errors.NotFound as exc:
        raise AuditError(f"{what}: not found ({exc.explanation or exc})", detail={"reason": "not_found"}) from exc
    except (docker.errors.DockerException, OSError) as exc:
        raise AuditError(f"{what}: {exc}", detail={"reason": "docker"}) from exc


def _client(client: Any | None) -> Any:
    if client is not None:
        return client
    try:
        import docker
    except ImportError as exc:
        raise AuditError("the docker SDK is not installed: pip install 'deskpod[audit]'",
                         detail={"reason": "no_sdk"}) from exc
    with _docker_errors("connecting to the Docker engine"):
        return docker.from_env()
