"""The Docker backend's desktop profile, the order and lifecycle of a slot's resources: with
``desktop`` on a slot gets a memory-only ``/workspace`` volume that its workspace and desktop
containers mount, the desktop container starts before the sandbox, a recreate replaces the
desktop container and the volume (nothing of the previous tenant's files survives), and destroy
removes the volume with the rest; with it off a slot is as before.

The engine here is a recording stand-in (this module is about what the backend asks for, in
which order); ``tests/integration/test_backend.py`` runs a desktop slot on the real engine.
"""

from __future__ import annotations

import asyncio
from typing import Any

from deskpod.backend import DockerBackend, DockerBackendConfig
from deskpod.backend.config import LABEL_ROLE, LABEL_SANDBOX

SECCOMP = "{}"


def _matches(labels: dict[str, str], filters: dict[str, Any] | None) -> bool:
    wanted = (filters or {}).get("label", [])
    for item in [wanted] if isinstance(wanted, str) else wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


class Engine:
    """The docker SDK's ``DockerClient`` surface the backend uses, recording every change in
    :attr:`log` (``("create", kind, name)``, ``("start", name)``, ``("remove", kind, name)``)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, ...]] = []
        self.containers_by_name: dict[str, Container] = {}
        self.volumes_by_name: dict[str, Volume] = {}
        self.network_labels: dict[str, dict[str, str]] = {}
        self.api = Api(self)
        self.containers = Containers(self)
        self.networks = Networks(self)
        self.volumes = Volumes(self)


class Container:
    def __init__(self, engine: Engine, name: str, labels: dict[str, str], network: str, **kwargs: Any) -> None:
        self.engine, self.name, self.labels, self.kwargs = engine, name, labels, kwargs
        self.aliases = kwargs.pop("networking_config")[network]["Aliases"]
        self.attrs = {"NetworkSettings": {"Networks": {network: {"IPAddress": "10.0.0.2"}}}}

    def start(self) -> None:
        self.engine.log.append(("start", self.name))

    def reload(self) -> None:
        pass

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.engine.api.remove_container(self.name, force=force, v=v)


class Volume:
    def __init__(self, engine: Engine, name: str, driver: str, driver_opts: dict[str, str],
                 labels: dict[str, str]) -> None:
        self.engine, self.name, self.driver, self.driver_opts = engine, name, driver, driver_opts
        self.attrs = {"Labels": labels}

    def remove(self, force: bool = False) -> None:
        self.engine.api.remove_volume(self.name, force=force)


class Api:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create_endpoint_config(self, aliases: list[str]) -> dict[str, Any]:
        return {"Aliases": aliases}

    def remove_container(self, name: str, force: bool = False, v: bool = False) -> None:
        import docker.errors

        if self.engine.containers_by_name.pop(name, None) is None:
            raise docker.errors.NotFound(name)
        self.engine.log.append(("remove", "container", name))

    def remove_volume(self, name: str, force: bool = False) -> None:
        import docker.errors

        if any(name in c.kwargs.get("volumes", {}) for c in self.engine.containers_by_name.values()):
            raise docker.errors.APIError(f"volume {name} is in use")
        if self.engine.volumes_by_name.pop(name, None) is None:
            raise docker.errors.NotFound(name)
        self.engine.log.append(("remove", "volume", name))


class Containers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, *, name: str, labels: dict[str, str], network: str, **kwargs: Any) -> Container:
        for volume in kwargs.get("volumes", {}):
            assert volume in self.engine.volumes_by_name, f"{name} mounts the missing volume {volume}"
        container = Container(self.engine, name, labels, network, **kwargs)
        self.engine.containers_by_name[name] = container
        self.engine.log.append(("create", "container", name))
        return container

    def list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Container]:
        return [c for c in self.engine.containers_by_name.values() if _matches(c.labels, filters)]


class Network:
    def __init__(self, engine: Engine, name: str) -> None:
        self.engine, self.name = engine, name
        self.attrs = {"Labels": engine.network_labels.get(name, {}), "Options": {}}

    def connect(self, container: Container) -> None:
        pass

    def remove(self) -> None:
        self.engine.network_labels.pop(self.name)
        self.engine.log.append(("remove", "network", self.name))


class Networks:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, name: str, *, labels: dict[str, str], **options: Any) -> None:
        self.engine.network_labels[name] = labels
        self.engine.log.append(("create", "network", name))

    def get(self, name: str) -> Network:
        return Network(self.engine, name)

    def list(self, filters: dict[str, Any] | None = None) -> list[Network]:
        return [Network(self.engine, n) for n, labels in self.engine.network_labels.items()
                if _matches(labels, filters)]


class Volumes:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, *, name: str, driver: str, driver_opts: dict[str, str], labels: dict[str, str]) -> Volume:
        assert name not in self.engine.volumes_by_name, f"volume {name} exists"
        volume = Volume(self.engine, name, driver, driver_opts, labels)
        self.engine.volumes_by_name[name] = volume
        self.engine.log.append(("create", "volume", name))
        return volume

    def list(self, filters: dict[str, Any] | None = None) -> list[Volume]:
        return [v for v in self.engine.volumes_by_name.values() if _matches(v.attrs["Labels"], filters)]


def _backend(desktop: bool) -> tuple[DockerBackend, Engine]:
    engine = Engine()
    config = DockerBackendConfig(desktop=desktop, host_firewall=False, name_prefix="t")
    backend = DockerBackend(config, client=engine)
    backend._profile = SECCOMP  # the profile's text, as if read
    return backend, engine


def test_a_desktop_slot_shares_a_memory_only_volume_and_starts_the_desktop_before_the_sandbox() -> None:
    backend, engine = _backend(desktop=True)
    handle = asyncio.run(backend.create(pool="p"))
    base = f"t-{handle.id}"
    volume = engine.volumes_by_name[f"{base}-workspace"]
    assert volume.driver == "local" and volume.driver_opts == {
        "type": "tmpfs", "device": "tmpfs", "o": "size=512m,uid=1001,gid=1001,mode=0770,nosuid,nodev,noexec"}
    assert volume.attrs["Labels"] == {LABEL_SANDBOX: handle.id, LABEL_ROLE: "volume", "deskpod.pool": "p"}
    workspace = engine.containers_by_name[f"{base}-workspace"]
    desktop = engine.containers_by_name[f"{base}-desktop"]
    for container in (workspace, desktop):
        assert container.kwargs["volumes"] == {volume.name: {"bind": "/workspace", "mode": "rw"}}
        assert "/workspace" not in container.kwargs["tmpfs"]
    assert desktop.aliases == ["desktop"] and desktop.kwargs["user"] == "1001:1001"
    assert desktop.labels[LABEL_ROLE] == "desktop" and desktop.kwargs["image"] == backend.config.desktop_image
    sandbox = engine.containers_by_name[handle.container]
    assert sandbox.kwargs["environment"]["DESKPOD_APPS_RUNNER"] == "desktop:8771"
    starts = [entry[1] for entry in engine.log if entry[0] == "start"]
    assert starts.index(desktop.name) < starts.index(handle.container)
    assert engine.log.index(("create", "volume", volume.name)) < engine.log.index(("create", "container", workspace.name))


def test_a_recreated_desktop_slot_gets_a_fresh_volume_and_desktop_and_destroy_removes_the_volume() -> None:
    backend, engine = _backend(desktop=True)
    handle = asyncio.run(backend.create(pool="p"))
    base = f"t-{handle.id}"
    old_volume, old_desktop = engine.volumes_by_name[f"{base}-workspace"], engine.containers_by_name[f"{base}-desktop"]
    engine.log.clear()
    asyncio.run(backend.recreate(handle))
    assert engine.volumes_by_name[f"{base}-workspace"] is not old_volume
    assert engine.containers_by_name[f"{base}-desktop"] is not old_desktop
    removed = [entry[2] for entry in engine.log if entry[0] == "remove"]
    assert {handle.container, f"{base}-workspace", f"{base}-desktop"} <= set(removed)
    assert engine.log.index(("remove", "volume", old_volume.name)) < engine.log.index(("create", "volume", old_volume.name))
    assert asyncio.run(backend.list_ids()) == [handle.id]
    asyncio.run(backend.destroy(handle.id))
    assert engine.volumes_by_name == {} and engine.containers_by_name == {} and engine.network_labels == {}


def test_a_leaked_volume_alone_is_found_and_removed() -> None:
    """A slot whose containers and network are gone but whose volume is left (a crash between
    the two) is still listed, so a pool's cleanup removes it."""
    backend, engine = _backend(desktop=True)
    handle = asyncio.run(backend.create(pool="p"))
    for name in list(engine.containers_by_name):
        engine.api.remove_container(name)
    engine.network_labels.clear()
    assert asyncio.run(backend.list_ids(pool="p")) == [handle.id]
    asyncio.run(backend.destroy(handle.id))
    assert engine.volumes_by_name == {}


def test_without_the_desktop_a_slot_is_as_before() -> None:
    backend, engine = _backend(desktop=False)
    handle = asyncio.run(backend.create(pool="p"))
    assert engine.volumes_by_name == {}
    assert sorted(engine.containers_by_name) == sorted(f"t-{handle.id}-{r}" for r in ("egress", "workspace", "sandbox"))
    workspace = engine.containers_by_name[f"t-{handle.id}-workspace"]
    assert "volumes" not in workspace.kwargs and "/workspace" in workspace.kwargs["tmpfs"]
    assert "DESKPOD_APPS_RUNNER" not in engine.containers_by_name[handle.container].kwargs["environment"]
    asyncio.run(backend.recreate(handle))
    assert engine.volumes_by_name == {}
    asyncio.run(backend.destroy(handle.id))
    assert engine.containers_by_name == {}
