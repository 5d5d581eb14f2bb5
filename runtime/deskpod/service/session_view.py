"""What a console shows of one session of ``deskpod serve``: its task, state and page.

:class:`SessionView` folds the run's audit records (the ones the service streams as
``event``) into the few fields of a :class:`~deskpod.service.messages.ServiceSession`
message: ``run_started`` gives the task, ``state`` the run's state, ``navigate``,
``step`` and ``verify`` the page's URL and title, ``run_finished`` the final status.
The service sends the message to approver and viewer connections each time one of
those fields changes, so that a console's list of sessions is driven by the same
records the audit log holds (never by anything the agent says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from deskpod.protocol import Size
from deskpod.service.messages import ServiceSession

__all__ = ["MAX_SHOWN_CHARS", "SessionView"]

MAX_SHOWN_CHARS = 2000
"""Longest task name, URL or title a view holds (characters; longer ones are cut)."""


def _text(value: Any) -> str | None:
    return value[:MAX_SHOWN_CHARS] if isinstance(value, str) else None


@dataclass
class SessionView:
    """One session's task, state and page, as a console shows them.

    Args:
        session: the session's id.
        task: the task's name.
        screen: the sandbox's screen size (screen pixels, from the daemon's hello).
        approver: who answers the session's questions.
    """

    session: str
    task: str
    screen: Size
    approver: Literal["approver", "self"] = "approver"
    start_url: str | None = None
    url: str | None = None
    title: str | None = None
    state: str = "opening"

    def apply(self, record: dict[str, Any]) -> bool:
        """Fold one audit record in.

        Args:
            record: an audit record of the session's run (``event`` names its kind).

        Returns:
            Whether a shown field changed (then the service sends :meth:`message`).
        """
        before = (self.task, self.start_url, self.url, self.title, self.state)
        event = record.get("event")
        if event == "run_started":
            self.task = _text(record.get("task")) or self.task
            self.start_url = _text(record.get("start_url"))
        elif event == "state":
            self.state = _text(record.get("dst")) or self.state
        elif event == "run_finished":
            self.state = _text(record.get("status")) or self.state
        if event in {"navigate", "step", "look", "verify"} and isinstance(record.get("url"), str):
            self.url = _text(record.get("url"))
            self.title = _text(record.get("title"))
        return (self.task, self.start_url, self.url, self.title, self.state) != before

    def message(self) -> ServiceSession:
        """The ``session`` message of the current view."""
        return ServiceSession(session=self.session, task=self.task, start_url=self.start_url, url=self.url,
                              title=self.title, state=self.state, screen=self.screen, approver=self.approver)
