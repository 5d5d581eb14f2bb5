"""The Docker engine: the connection the audit uses and the translation of the docker SDK's
errors into :class:`~deskpod.errors.AuditError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from deskpod.errors import AuditError

__all__ = [
    "mounted_volumes",
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


def mounted_volumes(client: Any, attrs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The inspect data of every volume a container mounts (``attrs``: its inspect data), by
    volume name; a volume gone meanwhile is left out.

    Raises:
        AuditError: the engine could not be asked.
    """
    import docker.errors

    out = {}
    for mount in attrs.get("Mounts") or []:
        if mount.get("Type") == "volume" and mount.get("Name"):
            with _docker_errors(f"inspecting volume {mount['Name']}"):
                try:
                    out[str(mount["Name"])] = client.volumes.get(mount["Name"]).attrs
                except docker.errors.NotFound:
                    continue
    return out
