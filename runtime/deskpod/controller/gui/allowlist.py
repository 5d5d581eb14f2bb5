"""The GUI run's egress checks: its allowlist put in force, and every observation's URLs checked.

At the start the run's allowlist (the task's and the policy's domains,
:func:`~deskpod.controller.egress.run_domains`) goes to the browser's interception
and, when configured, to the egress proxy; at the end, however the run ends, the
browser's list is lifted and the proxy gets its stack's list back (the next client of
the sandbox is not held to this run's hosts). Requests the browser refused are written as ``policy`` events. Every observation
the run takes passes :meth:`Allowlist.observed`: each tab's URL is checked against both
allowlists (a refusal is written and raised, and the run stops), its flags are written,
its host counted as visited, and the observation remembered as the run's last.
"""

from __future__ import annotations

import logging
from typing import Literal

from deskpod.controller.egress import EgressControl, run_domains
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.policy.policy_file import check_url, redact_url
from deskpod.controller.policy.risk import url_host
from deskpod.controller.sandbox import SandboxAPI
from deskpod.errors import DeskpodError, PolicyDeniedError
from deskpod.protocol import BlockedRequest, Observation

__all__ = ["Allowlist"]

log = logging.getLogger(__name__)


class Allowlist:
    """One run's allowlist, in force and checked (see the module).

    Args:
        run: the run's record.
        egress_control: the sandbox's egress proxy (``None``: the browser's interception
            alone holds the run's list).
    """

    def __init__(self, run: RunRecord, egress_control: EgressControl | None) -> None:
        self.run = run
        self.egress_control = egress_control
        self._browser: SandboxAPI | None = None

    def blocked(self, blocked: BlockedRequest) -> None:
        """Log a request the browser's interception refused before it left (a policy event)."""
        self.run.emit("policy", decision="blocked", rule=blocked.rule, host=blocked.host, url=redact_url(blocked.url),
                      resource_type=blocked.resource_type, document=blocked.document, count=blocked.count,
                      where="browser")

    async def start(self, client: SandboxAPI) -> None:
        """Put the run's allowlist in force in the browser and, if configured, at the proxy.

        Raises:
            EgressControlError: the proxy refused it or cannot be reached (the run fails).
        """
        domains = run_domains(self.run.task.allowed_domains, self.run.policy.allowed_domains)
        held = await client.set_egress(domains)
        if held is not None:
            self._browser = client
        proxy = "not_configured"
        if self.egress_control is not None:
            await self.egress_control.set(domains)
            proxy = "set"
        self.run.emit("egress", allowed_domains=held, proxy=proxy)

    async def end(self) -> None:
        """Lift the run's list in the browser and give the proxy its stack's allowlist back
        (a failure is logged, not raised: a sandbox that went away keeps it until its reset)."""
        if self._browser is not None:
            try:
                await self._browser.set_egress(None)
            except DeskpodError as exc:
                log.warning("%s: the browser kept the run's allowlist: %s", self.run.run_id, exc.message)
            self._browser = None
        if self.egress_control is None:
            return
        try:
            await self.egress_control.set(None)
        except DeskpodError as exc:
            log.warning("%s: the egress proxy kept the run's allowlist: %s", self.run.run_id, exc.message)
            self.run.emit("egress", allowed_domains=None, proxy=f"restore_failed: {exc.message[:200]}")

    def enforce(self, url: str, where: str, doing: str) -> tuple[str, ...]:
        """Check ``url`` against the task's and the policy's allowlists.

        Args:
            url: the URL.
            where: where it was seen (``"start_url"``, ``"omnibox"``, ``"step 3"``...).
            doing: what the browser does with it, for the message (``"the browser is at"``).

        Returns:
            Its flags from both lists.

        Raises:
            PolicyDeniedError: either list refuses it (written to the audit log first).
        """
        flags: tuple[str, ...] = ()
        for allowed in (self.run.task.allowed_domains, self.run.policy.allowed_domains):
            decision = check_url(url, allowed)
            flags += decision.flags
            if not decision.allowed:
                shown = redact_url(url)
                self.run.emit("policy", decision="denied", rule=decision.rule, url=shown, where=where)
                raise PolicyDeniedError(f"{where}: {doing} {shown}, which the policy refuses ({decision.rule})",
                                        detail={"rule": decision.rule, "url": shown})
        return flags

    def before_loading(self, url: str, where: Literal["navigate", "omnibox"]) -> None:
        """Check ``url``, which a ``navigate`` action or the address bar's Enter (``where``)
        would load, against both allowlists before anything of that action is sent.

        Raises:
            PolicyDeniedError: a list refuses ``url`` (:meth:`enforce`). A step refuses the
                ``navigate`` and the run goes on; for the address bar the key is not
                pressed and the run stops, as when a tab leaves the allowlist.
        """
        self.enforce(url, where, "navigate would open" if where == "navigate" else "the address bar would load")

    def observed(self, obs: Observation, where: str) -> Observation:
        """Apply the URL policy to every tab of ``obs`` and remember it.

        Returns:
            ``obs``.

        Raises:
            PolicyDeniedError: a tab is off an allowlist.
        """
        urls = [t.url for t in obs.tabs or []]
        if obs.url and obs.url not in urls:
            urls.append(obs.url)
        flags: list[str] = []
        for url in urls:
            flags += [f for f in self.enforce(url, where, "the browser is at") if f not in flags]
            host = url_host(url)
            if host:
                self.run.visited_hosts.add(host)
        if flags:
            self.run.emit("url_flags", url=redact_url(obs.url), flags=flags, where=where)
        if obs.screenshot is not None or self.run.last_obs is None:
            self.run.last_obs = obs
        return obs

    async def look(self, client: SandboxAPI) -> Observation:
        """A full observation (:meth:`RunRecord.full_look`), its screenshot counted and its URLs checked.

        Raises:
            LimitExceededError: the run took too many screenshots.
            PolicyDeniedError: a tab is off an allowlist.
            DeskpodError: the sandbox failed.
        """
        run = self.run
        obs = await client.act([], run.full_look(), timeout_s=run.limits.action_timeout_s)
        return self.observed(run.count_screenshot(obs), f"step {run.steps}")
