"""What a run knows of its downloads: each one's last reported state, and whether one may
still begin.

The daemon reports a download in the first observation after it began, progressed or
ended, and in every observation while it is in progress (:class:`~deskpod.protocol.Download`);
only the observation right after a change shows it, whichever request asked for it (a
step, an element probe, a verification look). So the run's sandbox
(:class:`~deskpod.controller.egress.WatchedSandbox`) hands every observation to
:meth:`DownloadWatch.seen`, and the run's end reads the downloads from here, not from
one observation.

A download begins only once its server has answered, which can be after the reply to the
action that started it. The daemon keeps downloads permitted for a moment after the reply
to a request that carried the permission (a second: ``GRACE_S`` of
:mod:`deskpod.agentd.browser.download_gate`), until the next request that sends input or
navigates without it. The watch follows the same requests (:meth:`DownloadWatch.answered`):
:attr:`DownloadWatch.permitted_at` says when the answer came to the last such request, if it
carried the permission and no new download was reported since, so a run that ends then
can look for the download to begin.

The daemon's reports are untrusted: at most :data:`MAX_WATCHED_DOWNLOADS` downloads are
kept (the oldest finished ones are forgotten first).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from deskpod.protocol import NO_INPUT_ACTION_TYPES, Action, Download, Observation

__all__ = ["DownloadWatch", "MAX_WATCHED_DOWNLOADS", "sends_input"]

MAX_WATCHED_DOWNLOADS = 256
"""Most downloads one run's watch keeps (as many as the daemon tracks at once)."""


def sends_input(actions: Sequence[dict[str, Any] | Action]) -> bool:
    """Whether an ``act`` of ``actions`` sends the sandbox input (an action not in
    :data:`~deskpod.protocol.NO_INPUT_ACTION_TYPES`), as the daemon's download permission counts it."""
    return any((a.get("type") if isinstance(a, dict) else a.type) not in NO_INPUT_ACTION_TYPES for a in actions)


class DownloadWatch:
    """One run's downloads (see the module)."""

    def __init__(self) -> None:
        self._downloads: dict[str, Download] = {}
        self.permitted_at: float | None = None
        """When the answer came (:func:`time.monotonic` seconds) to the last request that sent
        input or navigated, if it carried the download permission and no new download was reported
        since; else ``None``."""

    @property
    def downloads(self) -> list[Download]:
        """Every download reported so far, at its last reported state, in the order they were
        first reported."""
        return list(self._downloads.values())

    @property
    def in_progress(self) -> bool:
        """Whether a download was last reported ``in_progress``."""
        return any(d.state == "in_progress" for d in self._downloads.values())

    def seen(self, obs: Observation) -> None:
        """Take the downloads ``obs`` reports."""
        for download in obs.downloads:
            if download.id not in self._downloads:
                self.permitted_at = None  # one began
            self._downloads[download.id] = download
        while len(self._downloads) > MAX_WATCHED_DOWNLOADS:
            oldest = next((k for k, d in self._downloads.items() if d.state != "in_progress"),
                          next(iter(self._downloads)))
            del self._downloads[oldest]

    def answered(self, allow_downloads: bool) -> None:
        """A request that sent input or navigated was answered (or failed); ``allow_downloads``:
        whether it carried the download permission."""
        self.permitted_at = time.monotonic() if allow_downloads else None

    def may_begin(self, wait_s: float) -> bool:
        """Whether a download may still begin that the watch would be told of: the last request
        that sent input or navigated carried the permission, was answered less than ``wait_s``
        seconds ago, and no new download was reported since."""
        return self.permitted_at is not None and time.monotonic() < self.permitted_at + wait_s

    def forget(self) -> None:
        """Forget every download (the sandbox was reset: its browser and folder are new)."""
        self._downloads.clear()
        self.permitted_at = None
