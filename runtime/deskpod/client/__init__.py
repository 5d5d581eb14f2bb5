"""Clients for a sandbox's control websocket, on the host side.

Two levels (as in docker-py), plus a blocking facade:

- :class:`SandboxClient` (:mod:`deskpod.client.wire`): low level, one method per
  protocol message; snapshots over the daemon's HTTP endpoint
  (:mod:`deskpod.client.snapshot_http`).
- :class:`Sandbox` (:mod:`deskpod.client.sandbox`): a verb for every action and
  request of the protocol, GUI and workspace (:mod:`deskpod.client.workspace`); it
  owns the control token and rotates it on every reset.
- :class:`SyncSandbox` (:mod:`deskpod.client.sync`): the same verbs for synchronous
  scripts, on a private event loop (:mod:`deskpod.client.loop_thread`, which the
  service's blocking client uses too).

Everything received is untrusted and checked before a caller sees it (see
:mod:`deskpod.client.wire`; the checks are :mod:`deskpod.client.untrusted`).

Beside them, two host-side pieces the other packages share: the store of named
browser snapshots (:mod:`deskpod.client.snapshot_store`) and the egress proxy's control
endpoint (:mod:`deskpod.client.egress_control`).
"""

from deskpod.client.sandbox import Sandbox
from deskpod.client.sync import SyncSandbox
from deskpod.client.wire import SandboxClient, reset_and_reconnect

__all__ = ["Sandbox", "SandboxClient", "SyncSandbox", "reset_and_reconnect"]
