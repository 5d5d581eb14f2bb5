"""How much memory each container of a pool slot gets when many slots share one host (pure).

A slot is three containers: the sandbox (Xvfb, openbox, Chromium, agentd), the
workspace (the agent's commands) and the egress proxy (squid); with the desktop
profile a fourth, the desktop applications' zone. By default they get compose.yaml's
limits: 3 GiB, 2 GiB and 512 MiB (and 2 GiB), 5.5 GiB a slot (7.5 with the desktop), so
thirty slots would promise 165 GiB on a 24 GiB host. A memory limit is a cgroup's ceiling, not a
reservation: limits that add up to more than the host has are an overcommit, and when
every tenant fills its memory at once the *host's* OOM killer runs, which may pick any
process on the host, another tenant's included.

The policy here: the limits of all slots add up to at most the host's memory less a
reserve (:data:`HOST_RESERVE_BYTES`, for dockerd, the controller and the kernel), so no
tenant can push the host into its global OOM killer. Each container's limit is split
from the slot's budget (:func:`slot_memory`), and each container's tmpfs mounts and
``/dev/shm`` (whose pages are charged to its cgroup and cannot be reclaimed without
swap) stay well below its limit, as in compose.yaml. A hostile tenant who fills its
memory therefore:

- can: make its own processes fail to allocate and be killed by the kernel's OOM
  killer *inside its own cgroup* (its Chromium tab crashes, its command exits with 137,
  or its container dies and the pool replaces it: ``oom_killed``); fill its own tmpfs
  mounts (``ENOSPC``); use CPU within its own ``cpus`` limit;
- cannot: take memory from another slot (each limit is a hard ceiling, the memory+swap
  limit equals the memory limit), start the host's OOM killer (the limits fit the
  host), or keep its sandbox's OOM-killed state into the next lease (a crashed
  container is replaced, a reset wipes the tmpfs mounts).

What it still shares: the page cache and memory bandwidth of the host, and the CPU
cores (limits, not reservations: thirty sandboxes driven at once on two cores are
slow, not broken).
"""

from __future__ import annotations

from dataclasses import dataclass

from deskpod.errors import BackendError

__all__ = [
    "DESKTOP_FULL_BYTES",
    "EGRESS_SLOT_BYTES",
    "FULL_SLOT_BYTES",
    "HOST_RESERVE_BYTES",
    "MIN_DESKTOP_SLOT_BYTES",
    "MIN_SLOT_BYTES",
    "SlotMemory",
    "auto_slot_bytes",
    "slot_memory",
]

_MIB = 1_048_576

HOST_RESERVE_BYTES = 2048 * _MIB
"""Host memory no slot may count on (dockerd, the controller, the kernel), bytes."""

EGRESS_SLOT_BYTES = 96 * _MIB
"""The egress proxy's limit in a sized slot, bytes (squid without a memory cache, its
helpers and the control endpoint use about 40 MiB)."""

MIN_SLOT_BYTES = 640 * _MIB
"""The smallest slot budget accepted, bytes: below it Chromium has too little room
beside its tmpfs mounts to show a page."""

FULL_SLOT_BYTES = (3072 + 2048 + 512) * _MIB
"""What a slot may use with compose.yaml's limits (sandbox 3 GiB, workspace 2 GiB,
proxy 512 MiB), bytes; a larger budget changes nothing."""

DESKTOP_FULL_BYTES = 2048 * _MIB
"""The desktop applications' zone's limit with compose.yaml's limits, bytes: a slot with
the desktop profile may use :data:`FULL_SLOT_BYTES` plus this."""

MIN_DESKTOP_SLOT_BYTES = 800 * _MIB
"""The smallest slot budget accepted with the desktop profile, bytes: its sandbox then
gets about what a slot of :data:`MIN_SLOT_BYTES` without it gives its sandbox."""


@dataclass(frozen=True)
class SlotMemory:
    """The limits of one slot's containers, every size in bytes.

    Attributes:
        sandbox_bytes: the sandbox container's memory (and memory+swap) limit.
        sandbox_shm_bytes: its ``/dev/shm``. sandbox_tmp_bytes: its ``/tmp`` tmpfs.
        sandbox_home_bytes: its home folder's tmpfs.
        workspace_bytes: the workspace container's memory (and memory+swap) limit.
        workspace_dir_bytes: its ``/workspace`` tmpfs. workspace_tmp_bytes: its ``/tmp``.
        workspace_home_bytes: its home folder. workspace_shm_bytes: its ``/dev/shm``.
        egress_bytes: the egress proxy's memory (and memory+swap) limit.
        desktop_bytes: the desktop applications' zone's memory (and memory+swap) limit;
            0: no desktop profile. desktop_tmp_bytes: its ``/tmp``. desktop_home_bytes:
            its home folder. desktop_shm_bytes: its ``/dev/shm``. (Its ``/workspace`` is
            the workspace's, ``workspace_dir_bytes``, charged to whoever writes it.)
    """

    sandbox_bytes: int
    sandbox_shm_bytes: int
    sandbox_tmp_bytes: int
    sandbox_home_bytes: int
    workspace_bytes: int
    workspace_dir_bytes: int
    workspace_tmp_bytes: int
    workspace_home_bytes: int
    workspace_shm_bytes: int
    egress_bytes: int
    desktop_bytes: int = 0
    desktop_tmp_bytes: int = 0
    desktop_home_bytes: int = 0
    desktop_shm_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """The containers' limits added up: the most this slot can take from the host, bytes."""
        return self.sandbox_bytes + self.workspace_bytes + self.egress_bytes + self.desktop_bytes


def _mib_floor(value: float) -> int:
    return max(_MIB, int(value) // _MIB * _MIB)


def slot_memory(budget_bytes: int, *, desktop: bool = False) -> SlotMemory:
    """Split a slot's memory budget between its containers.

    The proxy gets :data:`EGRESS_SLOT_BYTES`; of the rest the sandbox gets three
    quarters and the workspace one quarter (with ``desktop``: the sandbox three fifths,
    the workspace and the desktop applications' zone one fifth each; in the latter
    ``/tmp`` an eighth, home and ``/dev/shm`` a sixteenth each, so that with the shared
    ``/workspace`` full too half its limit is left to the applications). In the sandbox, ``/tmp`` and ``/dev/shm``
    take a quarter of its limit each and the home folder a sixteenth (at least
    32 MiB), leaving about 7/16 for agentd, Xvfb and Chromium when all are full; in
    the workspace, ``/workspace`` a quarter, ``/tmp`` an eighth, home and ``/dev/shm``
    a sixteenth each (``/dev/shm`` at most 64 MiB, the SysV limit there). Every size
    is rounded down to whole MiB.

    Args:
        budget_bytes: the slot's budget, at least :data:`MIN_SLOT_BYTES` (with ``desktop``
            :data:`MIN_DESKTOP_SLOT_BYTES`), bytes.
        desktop: the slot runs the desktop applications' zone too.

    Returns:
        The limits; their :attr:`SlotMemory.total_bytes` is at most ``budget_bytes``.

    Raises:
        BackendError: the budget is below the minimum (``reason`` ``"config"``).
    """
    minimum = MIN_DESKTOP_SLOT_BYTES if desktop else MIN_SLOT_BYTES
    if budget_bytes < minimum:
        raise BackendError(f"a slot{' with the desktop' if desktop else ''} needs at least {minimum // _MIB} MiB "
                           f"of memory, got {budget_bytes // _MIB} MiB", detail={"reason": "config"})
    rest = budget_bytes - EGRESS_SLOT_BYTES
    apps = _mib_floor(rest / 5) if desktop else 0
    sandbox = _mib_floor((rest - apps) * 3 / 4)
    workspace = _mib_floor(rest - apps - sandbox)
    return SlotMemory(
        sandbox_bytes=sandbox,
        sandbox_shm_bytes=_mib_floor(sandbox / 4),
        sandbox_tmp_bytes=_mib_floor(sandbox / 4),
        sandbox_home_bytes=max(32 * _MIB, _mib_floor(sandbox / 16)),
        workspace_bytes=workspace,
        workspace_dir_bytes=_mib_floor(workspace / 4),
        workspace_tmp_bytes=_mib_floor(workspace / 8),
        workspace_home_bytes=_mib_floor(workspace / 16),
        workspace_shm_bytes=min(64 * _MIB, _mib_floor(workspace / 16)),
        egress_bytes=EGRESS_SLOT_BYTES,
        desktop_bytes=apps,
        desktop_tmp_bytes=apps // 8 // _MIB * _MIB,
        desktop_home_bytes=apps // 16 // _MIB * _MIB,
        desktop_shm_bytes=min(64 * _MIB, apps // 16 // _MIB * _MIB),
    )


def auto_slot_bytes(host_bytes: int, slots: int, *, desktop: bool = False) -> int | None:
    """The budget of each of ``slots`` slots so that all their limits fit the host.

    Args:
        host_bytes: the host's memory (the engine's ``MemTotal``), bytes.
        slots: how many slots share it (the pool's size).
        desktop: the slots run the desktop applications' zone too.

    Returns:
        ``(host_bytes - HOST_RESERVE_BYTES) // slots`` rounded down to MiB, or ``None``
        when that is at least :data:`FULL_SLOT_BYTES` (with ``desktop`` plus
        :data:`DESKTOP_FULL_BYTES`: compose.yaml's limits fit).

    Raises:
        BackendError: the share is below :data:`MIN_SLOT_BYTES` (with ``desktop``
            :data:`MIN_DESKTOP_SLOT_BYTES`): this host cannot hold ``slots`` slots
            without overcommitting (the message says how many it can).
    """
    full = FULL_SLOT_BYTES + (DESKTOP_FULL_BYTES if desktop else 0)
    minimum = MIN_DESKTOP_SLOT_BYTES if desktop else MIN_SLOT_BYTES
    share = _mib_floor((host_bytes - HOST_RESERVE_BYTES) / max(1, slots))
    if share >= full:
        return None
    if share < minimum:
        fits = max(0, (host_bytes - HOST_RESERVE_BYTES) // minimum)
        raise BackendError(f"{slots} slots do not fit in {host_bytes // _MIB} MiB of memory "
                           f"(at most {fits} of {minimum // _MIB} MiB each)", detail={"reason": "config"})
    return share
