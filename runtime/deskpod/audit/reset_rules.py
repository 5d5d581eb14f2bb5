"""The reset rule: judge whether a reset of the daemon empties every folder the sandbox's
user can write (:func:`reset_checks`), from the inside probe's facts
(:mod:`deskpod.audit.probes`) and the container's environment (:func:`reset_wipe_folders`)."""

from __future__ import annotations

from typing import Any

from deskpod.audit.report import Check, _check, _summ
from deskpod.settings import variable_name

__all__ = ["RESET_WIPE_DEFAULT", "reset_checks", "reset_wipe_folders"]

RESET_WIPE_DEFAULT = ("/tmp", "/dev/shm", "$HOME")
"""The folders the daemon's reset empties when ``DESKPOD_RESET_WIPE`` is not set
(:mod:`deskpod.agentd.config`); ``$HOME`` is the container's ``HOME``."""

_RESET_CLEARS_OTHERWISE = {"/dev/mqueue"}
"""Writable mounts a reset clears without emptying a folder: POSIX message queues are
removed one by one (``deskpod.agentd.ipc``)."""


def reset_wipe_folders(env: list[str]) -> list[str]:
    """The folders a reset of the daemon empties, from the container's environment.

    Args:
        env: the container's ``Config.Env`` (``NAME=value`` strings).

    Returns:
        ``DESKPOD_RESET_WIPE`` split at colons, else :data:`RESET_WIPE_DEFAULT` with ``$HOME``
        replaced by ``HOME`` (``/home/deskpod`` when unset), as the daemon reads them.
    """
    values = dict(str(e).partition("=")[::2] for e in env)
    home = values.get("HOME") or "/home/deskpod"
    wipe = values.get(variable_name("reset_wipe"))
    if wipe is None:
        return [home if folder == "$HOME" else folder for folder in RESET_WIPE_DEFAULT]
    return [folder.strip() for folder in wipe.split(":") if folder.strip()]


def reset_checks(facts: dict[str, Any], wipe: list[str]) -> list[Check]:
    """Judge whether a reset empties every folder the sandbox's user can write.

    Anything a process of the sandbox can write to (the browser's profile with its cookies,
    service workers, Cache API, HSTS pins and HTTP cache; what an escaped renderer drops)
    lies in one of those folders, so none of it reaches the next task. A check on the live
    sandbox without resetting it: a reset would end its tenant's task, and the audit holds
    no control token (tests/integration/test_reset.py resets and looks).

    Args:
        facts: the probe's JSON output; ``writable`` maps each writable mount to a path in it.
        wipe: the folders a reset empties (:func:`reset_wipe_folders`).

    Returns:
        One check, ``reset_empties_writable``.
    """
    writable: dict[str, str] = facts.get("writable") or {}
    emptied = [w.rstrip("/") or "/" for w in wipe]
    kept = [f"{mount} (e.g. {path})" for mount, path in sorted(writable.items())
            if mount not in _RESET_CLEARS_OTHERWISE
            and not any(mount == w or mount.startswith(w + "/") for w in emptied if w != "/")]
    return [_check(
        "reset_empties_writable",
        "a reset empties every folder the sandbox's user can write (no browser store outlives it)",
        bool(writable) and not kept,
        (f"not emptied by a reset ({':'.join(wipe)}): {_summ(kept)}" if kept else
         "no writable path found" if not writable else
         f"writable: {', '.join(sorted(writable))}; a reset empties {':'.join(wipe)}"),
        source="inside",
    )]
