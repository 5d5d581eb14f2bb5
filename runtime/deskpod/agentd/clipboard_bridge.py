"""Where the agent's clipboard actions go: the browser's side of the display or the zones'.

The X gate keeps the agent's X clients (the desktop applications, a command run with
``display: true``) and the sandbox's own (Chromium, the daemon) from reading each other's
selections: an untrusted client's answer never reaches a trusted requestor, and a trusted
owner's selection is never converted for an untrusted one. So ``CLIPBOARD`` is either the
browser's side's or the zones', whoever copied last. ``clipboard_read`` and
``clipboard_write`` (the policy's clipboard rules: reading ``L2``, writing ``L1``) cross that
line, and nothing else does:

- ``clipboard_read`` reads the clipboard where it is: when an agent's window owns it, through
  the applications' zone's clipboard helper (:meth:`~deskpod.agentd.apps_client.AppsClient.clipboard`:
  an X client of the zone, on a grant of its own), else with the daemon's own connection;
- ``clipboard_write`` puts the text where the keyboard focus is: with an agent's window focused,
  the zone's helper owns it (the applications paste it), else the daemon does (the browser
  pastes it).

Copying from a document into a web form is then a copy in the application, ``clipboard_read``,
``clipboard_write`` with the browser focused, and a paste; and the other way round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from deskpod.agentd.display.clipboard import XClipboard
from deskpod.agentd.display.xtrusted import AgentWindowInfo

__all__ = ["AgentFocus", "ClipboardBridge", "ZoneClipboard"]

ZoneClipboard = Callable[[str | None], Awaitable[str | None]]
"""Reads (``None``) or owns (the text) the applications' zone's clipboard
(:meth:`deskpod.agentd.apps_client.AppsClient.clipboard`)."""


class AgentFocus(Protocol):
    """What the X gate knows of the agent's windows (:class:`~deskpod.agentd.display.xgate.XGate`)."""

    def agent_window(self, window: int) -> bool:
        """Whether the X window ``window`` is one an agent's client made."""
        ...

    async def focus_window(self) -> AgentWindowInfo | None:
        """The agent's window with the keyboard focus, if one has it."""
        ...


class ClipboardBridge:
    """Routes ``clipboard_read`` and ``clipboard_write`` (see the module).

    Args:
        local: the display's clipboard through the daemon's own X connection.
        gate: the X gate (``None``: no agent's clients, the local clipboard alone).
        zone: the applications' zone's clipboard (``None``: no such zone).
    """

    def __init__(self, local: XClipboard, gate: AgentFocus | None = None, zone: ZoneClipboard | None = None) -> None:
        self.local = local
        self.gate = gate
        self.zone = zone

    async def read(self) -> str:
        """The clipboard's text, from whichever side owns it (untrusted either way).

        Raises:
            ExecutionError: it could not be read (``clipboard_unreadable``, or ``clipboard``
                from the zone).
        """
        if self.gate is not None and self.zone is not None:
            owner = await asyncio.to_thread(self.local.owner)
            if owner and self.gate.agent_window(owner):
                return await self.zone(None) or ""
        return await asyncio.to_thread(self.local.read)

    async def write(self, text: str) -> None:
        """Put ``text`` on the clipboard of the side that has the keyboard focus.

        Raises:
            ExecutionError: it could not be written.
        """
        if self.gate is not None and self.zone is not None and await self.gate.focus_window() is not None:
            await asyncio.to_thread(self.local.stop)
            await self.zone(text)
            return
        await asyncio.to_thread(self.local.write, text)
