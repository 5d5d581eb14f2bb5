"""The sessions of ``deskpod mcp``: what every session runs (:class:`McpConfig`) and the runs of
the open sessions by session key (:class:`SessionRegistry`).

A session's run starts at its first tool call, on a sandbox the config's ``lease`` gives;
when the session ends the run ends and the sandbox goes back: reset in place, released to
its pool, or handed to a detached helper (:mod:`.handback`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from deskpod.controller.code_task import CodeTaskSpec
from deskpod.controller.policy.policy_file import Policy
from deskpod.errors import DeskpodError
from deskpod.mcp_server.handback import spawn
from deskpod.mcp_server.runs import CodeRun, GuiRun, SandboxLease
from deskpod.service.messages import SessionTask

__all__ = ["LeaseFactory", "LeaseRelease", "MAX_SESSION_NAME_CHARS", "McpConfig", "SessionRegistry", "session_name"]

log = logging.getLogger(__name__)

LeaseFactory = Callable[[], Awaitable[SandboxLease]]
"""Gives a new session its sandbox (a given one, or one leased from a pool)."""

LeaseRelease = Callable[[SandboxLease, str | None], Awaitable[None]]
"""Gives a session's sandbox back when the session ends (with its new token after a reset)."""


@dataclass
class McpConfig:
    """What every session of the server runs.

    ``task``: a GUI task (:class:`SessionTask`) or a code task (:class:`CodeTaskSpec`).
    ``controller_url`` / ``controller_token``: the controller service GUI runs go through.
    ``policy``: the
    operator's policy (code runs; the service holds its own for GUI runs).
    ``detach_handback``: a session's sandbox is reset (or released to its pool) by a helper
    in a session of its own (:mod:`.handback`: a stdio client kills the server soon after
    the session ends); ``state_dir``: the pools' state folder, for that helper.
    ``elicit_approvals``: confirmations are asked of the MCP client's human by MCP elicitation
    (:class:`GuiRun` ``elicit``; the operator's policy must allow self-approval).
    ``client_names``: a GUI session's run is named after its MCP client (``clientInfo.name``,
    :func:`session_name`), for a task without a name of its own (no task file, no ``--name``).
    """

    task: SessionTask | CodeTaskSpec
    lease: LeaseFactory
    release: LeaseRelease
    controller_url: str = ""
    controller_token: str = ""
    policy: Policy = field(default_factory=Policy)
    audit_dir: Path = Path("deskpod-audit")
    detach_handback: bool = False
    state_dir: Path | None = None
    elicit_approvals: bool = False
    client_names: bool = False

    @property
    def kind(self) -> Literal["gui", "code"]:
        """``"code"`` for a code task, else ``"gui"``."""
        return "code" if isinstance(self.task, CodeTaskSpec) else "gui"


@dataclass
class _Entry:
    lease: SandboxLease
    run: GuiRun | CodeRun


@dataclass
class SessionRegistry:
    """The runs of the server's MCP sessions, by session key (stdio has one)."""

    config: McpConfig
    entries: dict[str, _Entry] = field(default_factory=dict)
    starting: asyncio.Lock = field(default_factory=asyncio.Lock)
    unavailable: str | None = None
    """Why no run can start (the embedded controller service did not start); ``None``: they can."""
    in_flight: dict[str, int] = field(default_factory=dict)
    """HTTP requests (an open stream included) being served, by session key."""
    last_active: dict[str, float] = field(default_factory=dict)
    """When each session's last request ended or began (:func:`time.monotonic`, seconds)."""

    def request_began(self, key: str) -> None:
        """Note that a request of session ``key`` is being served (it is not idle while it is)."""
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.last_active[key] = time.monotonic()

    def request_ended(self, key: str) -> None:
        """Note that a request of session ``key`` has been answered."""
        left = self.in_flight.get(key, 1) - 1
        if left > 0:
            self.in_flight[key] = left
            return
        self.in_flight.pop(key, None)
        if key in self.entries:
            self.last_active[key] = time.monotonic()
        else:  # a session without a run (yet, or any more) is nothing to end
            self.last_active.pop(key, None)

    def idle(self, idle_s: float) -> list[str]:
        """The sessions with a run that have had no request in flight for ``idle_s`` seconds."""
        now = time.monotonic()
        return [key for key in self.entries if key not in self.in_flight
                and now - self.last_active.get(key, now) >= idle_s]

    async def end_idle(self, idle_s: float) -> list[str]:
        """End every session :meth:`idle` for ``idle_s`` seconds (as :meth:`end`); returns their keys."""
        keys = self.idle(idle_s)
        for key in keys:
            log.info("MCP session %s idle for %.0f s: ending it", key[:12], idle_s)
            await self.end(key)
        return keys

    async def run_for(self, key: str, client: str | None = None) -> GuiRun | CodeRun:
        """The session's run, started at its first tool call (named after ``client``, the MCP
        client's name, when :attr:`McpConfig.client_names`).

        Raises:
            DeskpodError: no sandbox could be leased, the run could not start, or no run can
                (:attr:`unavailable`).
        """
        if self.unavailable is not None:
            raise DeskpodError(self.unavailable)
        async with self.starting:
            entry = self.entries.get(key)
            if entry is not None:
                return entry.run
            lease = await self.config.lease()
            run: GuiRun | CodeRun
            task = self.config.task
            if isinstance(task, CodeTaskSpec):
                run = CodeRun(task, lease, self.config.policy, self.config.audit_dir)
            else:
                if self.config.client_names and client:
                    task = task.model_copy(update={"name": session_name(client)})
                run = GuiRun(self.config.controller_url, self.config.controller_token, lease, task,
                             elicit=self.config.elicit_approvals)
            try:
                await run.start()
            except BaseException:
                await self._give_back(lease, run)
                raise
            self.entries[key] = _Entry(lease, run)
            return run

    async def end(self, key: str) -> None:
        """End a session: its run ends, its sandbox goes back (reset)."""
        self.last_active.pop(key, None)
        entry = self.entries.pop(key, None)
        if entry is not None:
            await self._give_back(entry.lease, entry.run)

    async def end_all(self) -> None:
        """End every session (the server stops)."""
        for key in list(self.entries):
            await self.end(key)

    async def _give_back(self, lease: SandboxLease, run: GuiRun | CodeRun) -> None:
        """End the run, then reset the sandbox or release it to its pool (here, or detached)."""
        detached = self.config.detach_handback and (lease.reset_on_end or lease.pool is not None)
        token: str | None = None
        try:
            if isinstance(run, GuiRun):
                token = await run.close(reset=lease.reset_on_end and not detached)
            else:
                await run.close()
                if lease.reset_on_end and not detached:
                    token = await _reset_directly(lease, self.config.task)
        except DeskpodError as exc:
            log.warning("ending the session's run failed: %s", exc.message)
        if detached:
            spawn(lease, getattr(self.config.task, "start_url", None), self.config.state_dir)
            return
        await self.config.release(lease, token)


MAX_SESSION_NAME_CHARS = 64
"""Most characters of a session's name taken from its MCP client."""


def session_name(client: str) -> str:
    """The name of a run whose MCP client calls itself ``client``: its letters, digits and
    ``._-`` (others become ``-``), at most :data:`MAX_SESSION_NAME_CHARS` of them; ``mcp-session``
    when none is left. The client names itself: the name is a label, never an identity."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", client).strip("-.")[:MAX_SESSION_NAME_CHARS]
    return name or "mcp-session"


async def _reset_directly(lease: SandboxLease, task: SessionTask | CodeTaskSpec) -> str:
    from deskpod.client import Sandbox

    sandbox = await Sandbox.open(lease.url, lease.token)
    try:
        await sandbox.reset(getattr(task, "start_url", None))
    finally:
        await sandbox.close()
    return sandbox.token
