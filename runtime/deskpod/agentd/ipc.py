"""Remove the IPC objects left in a container's IPC namespace (for a reset).

Files are not the only state a process leaves behind: System V shared memory
segments, message queues and semaphore sets, and POSIX message queues, live in the
kernel's IPC namespace until removed or until the namespace goes, so they outlive
their creator and would outlive a reset. (POSIX shared memory and semaphores are
files in ``/dev/shm``, which the reset empties anyway.) The sandbox container has an
IPC namespace of its own (Docker's default, ``ipc: private``), and so has the
workspace container; the daemon cleans the first, the workspace runner the
second. System V objects are listed in ``/proc/sysvipc/{shm,msg,sem}`` and removed
with ``IPC_RMID`` (allowed to their owner: every process of each container runs as
one uid), its POSIX
message queues are the files of the ``mqueue`` file system mounted on
``/dev/mqueue``, removed by unlinking them (which is what ``mq_unlink`` does).

Call :func:`remove_ipc_objects` after every other process of the container is killed
(in the sandbox, also after the daemon's own X connections and their MIT-SHM segments
are closed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from pathlib import Path

__all__ = ["IPC_SETTLE_S", "MQUEUE_DIR", "SYSV_IPC_DIR", "remove_ipc_objects", "shm_segments_of", "sysv_ipc_ids"]

log = logging.getLogger(__name__)

SYSV_IPC_DIR = Path("/proc/sysvipc")
"""Where the kernel lists the IPC namespace's System V objects, one file per kind."""

MQUEUE_DIR = Path("/dev/mqueue")
"""The IPC namespace's POSIX message queues (Docker mounts an ``mqueue`` file system here)."""

IPC_SETTLE_S = 3.0
"""How long a removed shared memory segment may stay listed: ``IPC_RMID`` of a segment
still attached (by a killed process that has not finished exiting, such as one of
Chromium's helpers, which are not the daemon's children and are not waited for) only
marks it, and the kernel destroys it at the last detach."""

_POLL_S = 0.05

_IPC_RMID = 0


def sysv_ipc_ids(kind: str, listing_dir: Path = SYSV_IPC_DIR) -> list[int]:
    """The ids of the System V objects of ``kind`` in this IPC namespace.

    Args:
        kind: ``"shm"``, ``"msg"`` or ``"sem"``.
        listing_dir: where the kernel's listings are (a test may point elsewhere).

    Returns:
        The ids (the second column of ``/proc/sysvipc/<kind>``); empty when the
        listing does not exist.
    """
    try:
        lines = (listing_dir / kind).read_text().splitlines()[1:]
    except FileNotFoundError:
        return []
    return [int(fields[1]) for fields in (line.split() for line in lines) if len(fields) > 1]


def shm_segments_of(pids: frozenset[int], listing_dir: Path = SYSV_IPC_DIR) -> frozenset[int]:
    """The shared memory segments that processes of ``pids`` created and last attached or
    detached (``cpid`` and ``lpid`` of ``/proc/sysvipc/shm``): a standby desktop's
    MIT-SHM segments, which a reset keeps (:mod:`deskpod.agentd.standby`).

    Args:
        pids: the processes.
        listing_dir: where the kernel's listings are.

    Returns:
        The segments' ids.
    """
    if not pids:
        return frozenset()
    try:
        lines = (listing_dir / "shm").read_text().splitlines()[1:]
    except FileNotFoundError:
        return frozenset()
    rows = [line.split() for line in lines]
    return frozenset(int(f[1]) for f in rows if len(f) > 5 and int(f[4]) in pids and int(f[5]) in pids)


def _remove_sysv(libc: ctypes.CDLL, kind: str, ident: int) -> int:
    """``IPC_RMID`` one object; returns 0 or the errno."""
    if kind == "shm":
        result = libc.shmctl(ident, _IPC_RMID, None)
    elif kind == "msg":
        result = libc.msgctl(ident, _IPC_RMID, None)
    else:
        result = libc.semctl(ident, 0, _IPC_RMID)
    return 0 if result == 0 else ctypes.get_errno()


def remove_ipc_objects(spare_pids: frozenset[int] = frozenset()) -> list[str]:
    """Remove every System V object and POSIX message queue of this IPC namespace.

    Args:
        spare_pids: processes whose shared memory segments stay (:func:`shm_segments_of`,
            read as the segments are listed: a standby browser makes its MIT-SHM segments
            when it first draws, which may be during the reset).

    Returns:
        ``"what: reason"`` for every object that could not be removed or was still
        there :data:`IPC_SETTLE_S` afterwards (empty when all went).
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    failures = []
    removed = 0
    for kind in ("shm", "msg", "sem"):
        refused = set(shm_segments_of(spare_pids)) if kind == "shm" else set()
        for ident in sysv_ipc_ids(kind):
            if ident in refused:
                continue
            code = _remove_sysv(libc, kind, ident)
            if code == 0:
                removed += 1
            else:
                refused.add(ident)
                failures.append(f"sysv {kind} {ident}: {os.strerror(code)}")
        # A segment still attached stays listed after IPC_RMID until its last detach.
        deadline = time.monotonic() + IPC_SETTLE_S
        while (left := [i for i in sysv_ipc_ids(kind) if i not in refused
                        and not (kind == "shm" and i in shm_segments_of(spare_pids))]) \
                and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        failures += [f"sysv {kind} {ident}: still there after {IPC_SETTLE_S:g} s" for ident in left]
    if MQUEUE_DIR.is_dir():
        for entry in os.scandir(MQUEUE_DIR):
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError as exc:
                failures.append(f"mqueue {entry.name}: {exc.strerror or exc}")
    if removed:
        log.info("removed %d IPC object(s)", removed)
    return failures
