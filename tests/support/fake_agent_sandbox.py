"""A fake Kubernetes cluster running agent-sandbox, for the Kubernetes backend's tests.

- The API server is ``kmock``'s :class:`kmock.KubernetesEmulator` on 127.0.0.1 (an
  in-memory object store over HTTP, with watches), in a thread of its own.
- The agent-sandbox controller is :class:`FakeAgentSandbox`: it keeps a warm pool of
  real sandboxes made by deskpod's Docker backend on the local engine (their daemons
  hold only the bootstrap token, as the warm pods of deskpod's SandboxTemplate do),
  and reconciles ``SandboxClaim`` objects. A new claim that matches agent-sandbox's CRD
  schema (strict) gets a warm sandbox: the fake writes the claim's status as
  agent-sandbox does (``Ready`` condition, ``status.sandbox.name`` and ``podIPs``:
  the container's address) and starts a replacement. A deleted claim's sandbox is
  destroyed. A claim that does not match the schema is marked ``Ready: False``,
  reason ``Invalid``, and recorded in :attr:`FakeAgentSandbox.invalid`.

What it does not fake: scheduling, pods, the shutdown-time reaper, network policies.
A pod's containers share one address; here the sandbox and workspace containers have
one each, and the claim's ``podIPs`` names the sandbox container's.

``on_made`` and ``on_destroy`` let a test change a warm sandbox once it is ready (e.g.
attach it to a shared egress proxy) and undo that before it is destroyed.
"""

from __future__ import annotations

import asyncio
import datetime
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jsonschema
import kmock
from kubernetes import client as kclient

from deskpod.backend import DockerBackend, SandboxHandle
from deskpod.backend.kubernetes_backend import CLAIM_GROUP, CLAIM_PLURAL, CLAIM_VERSION
from agent_sandbox_crds import crd_schemas

__all__ = ["FakeAgentSandbox", "fake_cluster"]


class FakeAgentSandbox:
    """The fake agent-sandbox controller (see the module docstring).

    It reconciles by listing claims every :data:`POLL_S` (level-triggered, as real
    controllers are, so no event can be missed); a worker thread makes and destroys
    sandboxes, so binding a claim to a warm sandbox never waits for Docker.

    Args:
        api: a ``CustomObjectsApi`` on the fake API server.
        backend: the Docker backend that makes the warm sandboxes.
        bootstrap_token: the token every warm sandbox's daemon accepts.
        namespace: the namespace watched.
        warm: how many ready sandboxes to keep.
        schema: the claim schema claims must match.
        on_made: called with each warm sandbox once it is ready (in the worker thread).
        on_destroy: called with a sandbox's handle before it is destroyed.
        replenish: make a new warm sandbox for each one bound (False: the first ``warm``
            are all there is, which keeps a test's machine quieter).
    """

    POLL_S = 0.1

    def __init__(self, api: Any, backend: DockerBackend, bootstrap_token: str, namespace: str, warm: int,
                 schema: dict[str, Any], on_made: Callable[[SandboxHandle], None] | None = None,
                 on_destroy: Callable[[SandboxHandle], None] | None = None, replenish: bool = True) -> None:
        self.api = api
        self.backend = backend
        self.bootstrap_token = bootstrap_token
        self.namespace = namespace
        self.warm = warm
        self.schema = schema
        self.on_made = on_made
        self.on_destroy = on_destroy
        self.replenish = replenish
        self.handles: dict[str, SandboxHandle] = {}
        self.ready: queue.Queue[SandboxHandle] = queue.Queue()
        self.bound: dict[str, SandboxHandle] = {}
        self.made: list[str] = []
        self.destroyed: list[str] = []
        self.invalid: list[str] = []
        self.errors: list[str] = []
        self._jobs: queue.Queue[tuple[str, str]] = queue.Queue()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._reconcile, name="fake-agent-sandbox", daemon=True),
                         threading.Thread(target=self._work, name="fake-agent-sandbox-docker", daemon=True)]

    def start(self) -> None:
        """Fill the warm pool (in parallel), then start reconciling claims."""
        async def fill() -> list[SandboxHandle]:
            return list(await asyncio.gather(*(self._make() for _ in range(self.warm))))

        for handle in asyncio.run(fill()):
            self.ready.put(handle)
        for thread in self._threads:
            thread.start()

    async def _make(self) -> SandboxHandle:
        handle = await self.backend.create(token=self.bootstrap_token, pool="k8s-fake")
        self.made.append(handle.id)
        self.handles[handle.id] = handle
        await self.backend.wait_ready(handle)
        if self.on_made is not None:
            self.on_made(handle)
        return handle

    async def _destroy(self, sandbox_id: str) -> None:
        if self.on_destroy is not None and sandbox_id in self.handles:
            self.on_destroy(self.handles[sandbox_id])
        await self.backend.destroy(sandbox_id)

    def _work(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while not self._stop.is_set():
                try:
                    job, sandbox_id = self._jobs.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    if job == "make":
                        self.ready.put(loop.run_until_complete(self._make()))
                    else:
                        loop.run_until_complete(self._destroy(sandbox_id))
                        self.destroyed.append(sandbox_id)
                except Exception as exc:  # a test reads the errors; the fake keeps serving
                    self.errors.append(f"{job} {sandbox_id}: {exc!r}")
        finally:
            loop.close()

    def _reconcile(self) -> None:
        while not self._stop.is_set():
            try:
                claims = self._list()
                names = {claim["metadata"]["name"] for claim in claims}
                for claim in claims:
                    if claim["metadata"]["name"] not in self.bound and not claim.get("status"):
                        self._bind(claim)
                for name in set(self.bound) - names:
                    self._jobs.put(("destroy", self.bound.pop(name).id))
            except Exception as exc:  # a test reads the errors; the fake keeps serving
                self.errors.append(repr(exc))
            self._stop.wait(self.POLL_S)

    def _list(self) -> list[dict[str, Any]]:
        """The namespace's claims; none while the emulator has never held one (it answers 404
        for a resource it has not seen yet)."""
        try:
            return list(self.api.list_namespaced_custom_object(CLAIM_GROUP, CLAIM_VERSION, self.namespace,
                                                               CLAIM_PLURAL)["items"])
        except kclient.ApiException as exc:
            if exc.status == 404:
                return []
            raise

    def _bind(self, claim: dict[str, Any]) -> None:
        name = claim["metadata"]["name"]
        try:
            jsonschema.validate(claim, self.schema)
        except jsonschema.ValidationError as exc:
            self.invalid.append(f"{name}: {exc.message}")
            self._status(name, ready=False, reason="Invalid", message=exc.message)
            return
        try:
            handle = self.ready.get_nowait()
        except queue.Empty:
            return  # bound at a later pass, once the worker has made one
        try:
            self._status(name, ready=True, reason="SandboxReady", message="bound", sandbox=handle)
        except kclient.ApiException as exc:
            if exc.status != 404:
                raise
            self.ready.put(handle)  # the claim was deleted since it was listed: keep the sandbox warm
            return
        self.bound[name] = handle
        if self.replenish:
            self._jobs.put(("make", ""))

    def _status(self, name: str, *, ready: bool, reason: str, message: str,
                sandbox: SandboxHandle | None = None) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                  "reason": reason, "message": message,
                                                  "lastTransitionTime": now}]}
        if sandbox is not None:
            status["sandbox"] = {"name": sandbox.container, "podIPs": [sandbox.address]}
        self.api.patch_namespaced_custom_object_status(CLAIM_GROUP, CLAIM_VERSION, self.namespace, CLAIM_PLURAL,
                                                       name, {"status": status})

    def stop(self) -> None:
        """Stop reconciling and destroy every sandbox the fake made."""
        self._stop.set()
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout=120)

        async def destroy_all() -> None:
            await asyncio.gather(*(self._destroy(sandbox_id) for sandbox_id in self.made
                                   if sandbox_id not in self.destroyed))

        asyncio.run(destroy_all())


@contextmanager
def fake_cluster(backend: DockerBackend, bootstrap_token: str, *, namespace: str = "deskpod",
                 warm: int = 1, on_made: Callable[[SandboxHandle], None] | None = None,
                 on_destroy: Callable[[SandboxHandle], None] | None = None, replenish: bool = True,
                 ) -> Iterator[tuple[str, Any, FakeAgentSandbox]]:
    """Run the fake API server and agent-sandbox controller (``on_made``, ``on_destroy``,
    ``replenish``: see :class:`FakeAgentSandbox`).

    Yields:
        (the API server's URL, a ``CustomObjectsApi`` on it, the fake controller).
    """
    box: dict[str, Any] = {}
    stop = threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
                box["url"] = str(server.url).rstrip("/")
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(main())

    thread = threading.Thread(target=serve, name="fake-k8s-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while "url" not in box and time.monotonic() < deadline:
        time.sleep(0.02)
    configuration = kclient.Configuration()
    configuration.host = box["url"]
    api = kclient.CustomObjectsApi(kclient.ApiClient(configuration))
    controller = FakeAgentSandbox(api, backend, bootstrap_token, namespace, warm,
                                  crd_schemas()[(CLAIM_GROUP, CLAIM_VERSION, "SandboxClaim")],
                                  on_made=on_made, on_destroy=on_destroy, replenish=replenish)
    try:
        controller.start()
        yield box["url"], api, controller
    finally:
        controller.stop()
        stop.set()
        thread.join(timeout=10)
