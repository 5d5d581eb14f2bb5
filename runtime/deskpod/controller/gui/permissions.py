"""The GUI run's browser permissions: the task's grants put in force, every page's request
written to the audit log.

At the start the task's ``permissions`` (:meth:`~deskpod.controller.task.TaskSpec.permission_grants`),
when it grants any, go to the daemon (:meth:`~deskpod.controller.sandbox.SandboxAPI.set_permissions`;
the sandbox's browser denies every permission until told otherwise, and a reset restores
that) and a ``permissions`` event records them. Every permission they do not grant is denied by
the browser at once, with no prompt. Each request a page made, as an observation reports it
(:attr:`~deskpod.protocol.Observation.permission_requests`, page data), is written as a
``permission`` event with the controller's own decision: ``granted`` when the task grants
it (rule ``task_permissions``), else ``denied`` (rule ``deny_by_default``); the daemon's
``granted`` flag is not trusted. At the end, however the run ends, a run that granted
anything sets the browser back to denying every permission.
"""

from __future__ import annotations

import logging

from deskpod.controller.gui.record import RunRecord
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.sandbox import SandboxAPI
from deskpod.errors import DeskpodError
from deskpod.protocol import PermissionGrants, PermissionRequest

__all__ = ["RunPermissions"]

log = logging.getLogger(__name__)


class RunPermissions:
    """One run's permission grants, in force and audited (see the module).

    Args:
        run: the run's record (its task's ``permissions``).
    """

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self.grants = run.task.permission_grants()
        self._browser: SandboxAPI | None = None

    async def start(self, client: SandboxAPI) -> None:
        """Put the task's grants in force in the browser and record them in a ``permissions``
        event (none: nothing to send or record, the browser denies every permission).

        Raises:
            DeskpodError: the sandbox refused them or failed (the run fails).
        """
        if not self.grants.granted:
            return
        held = await client.set_permissions(self.grants)
        self._browser = client
        position = held.position.model_dump() if held.position is not None else None
        self.run.emit("permissions", granted=list(held.granted), position=position, default="deny")

    async def end(self) -> None:
        """Deny every permission again if the run granted any (a failure is logged, not
        raised: a sandbox that went away keeps the grants until its reset)."""
        if self._browser is None:
            return
        try:
            await self._browser.set_permissions(PermissionGrants())
        except DeskpodError as exc:
            log.warning("%s: the browser kept the run's permission grants: %s", self.run.run_id, exc.message)
        self._browser = None

    def requested(self, request: PermissionRequest) -> None:
        """Write a page's permission request as a ``permission`` event, decided by the task's grants."""
        granted = request.name in self.grants.granted
        self.run.emit("permission", name=request.name, origin=redact_url(request.origin), tab=request.tab,
                      decision="granted" if granted else "denied",
                      rule="task_permissions" if granted else "deny_by_default", count=request.count)
