"""Mark a process non-dumpable, so processes of its own uid cannot read its secrets.

``prctl(PR_SET_DUMPABLE, 0)`` (prctl(2)): the kernel then refuses every other process of the
same uid without ``CAP_SYS_PTRACE`` the process's ``/proc/<pid>/environ``, ``mem`` and ``fd``,
and ``ptrace``, and owns its ``/proc/<pid>`` files to root. The daemon does it first thing;
``deskpod mcp`` and ``deskpod serve`` do it too, since on the operator's host the agent's side
may run code as the same user (an assistant that gives the model a shell) and those processes
hold the approvers' token, the sandbox's token and the credentials typed for a run.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["non_dumpable_on_linux", "set_non_dumpable"]

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3


def set_non_dumpable() -> None:
    """Mark this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, see prctl(2)).

    Raises:
        OSError: the kernel refused, or the flag did not stick.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(code)}")
    if libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) did not stick")


def non_dumpable_on_linux() -> bool:
    """:func:`set_non_dumpable` on Linux; elsewhere (no ``prctl``) nothing.

    Returns:
        Whether the process is now non-dumpable.

    Raises:
        OSError: on Linux, the kernel refused.
    """
    if not sys.platform.startswith("linux"):
        return False
    set_non_dumpable()
    return True
