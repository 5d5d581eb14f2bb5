"""How a GUI run ends: the success check, the failure scene and the sealed last record.

A run succeeds only when the task's success condition holds in the environment: it is
checked on every observation before the agent is asked, and when the agent says it is
done its claim is checked again and again (every :data:`VERIFY_INTERVAL_S` seconds) until
the condition's own timeout. A run that does not succeed leaves its failure scene
(:mod:`deskpod.controller.scene`), with a last screenshot taken when the last observation
had none. However it ends, the audit log ends with the sealed ``run_finished`` record and
the run's :class:`~deskpod.controller.run_api.RunResult`.

Before that, a run whose observations reported downloads writes each one's last state in a
``downloads`` record, so the audit log tells whether the file a run started arrived whole.
The run's downloads are those every observation of its sandbox reported
(:class:`~deskpod.controller.download_watch.DownloadWatch`), not only the last one's. A
download still in progress is waited for (at most :data:`DOWNLOAD_WAIT_S`). A download
begins only once its server answers, which can be after the reply to the action that
started it and after the success condition already holds (a page that says "downloaded"
at the click); so when the last request that sent input was permitted to start downloads,
was answered less than :data:`DOWNLOAD_BEGIN_WAIT_S` ago and no download was reported
since, the run looks for one to begin until then. A run whose last input could start no
download (every ``L0``/``L1`` action: the daemon refuses their downloads) spends nothing on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Literal

from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.record import RunRecord
from deskpod.controller.gui.step_record import download_fields
from deskpod.controller.policy.policy_file import redact_url
from deskpod.controller.run_api import RunResult, check_files, check_success
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.scene import save_scene
from deskpod.controller.state import RunState
from deskpod.errors import DeskpodError, NotVerifiedError
from deskpod.protocol import Observation, ObserveOptions

__all__ = ["DOWNLOAD_BEGIN_WAIT_S", "DOWNLOAD_WAIT_S", "Endings", "RunStatus", "VERIFY_INTERVAL_S"]

log = logging.getLogger(__name__)

VERIFY_INTERVAL_S = 0.2
"""Seconds between re-observations while waiting for the success condition."""

DOWNLOAD_WAIT_S = 15.0
"""Longest wait, in seconds, at a run's end for the downloads still in progress."""

DOWNLOAD_BEGIN_WAIT_S = 3.0
"""Seconds after the answer to a request permitted to start downloads during which a run that
ends looks for its download to begin. A download begins when its server answers, which can
be after the reply; the daemon keeps downloads permitted for one second after that reply
(``GRACE_S`` of :mod:`deskpod.agentd.browser.download_gate`) and refuses any that begins
later, so the rest covers the browser's event and the observation's round trip on a loaded
machine (the daemon gives a permitted navigation's download as long to begin:
``NAVIGATION_DOWNLOAD_WAIT_S``)."""

RunStatus = Literal["succeeded", "failed", "cancelled", "ended"]
"""How a run ended (:attr:`~deskpod.controller.run_api.RunResult.status`)."""

_FINAL_STATES = {"succeeded": RunState.SUCCEEDED, "failed": RunState.FAILED, "cancelled": RunState.CANCELLED,
                 "ended": RunState.ENDED}


class Endings:
    """Ends one run (see the module).

    Args:
        run: the run's record.
        allowlist: checks the observations the success check reads.
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist) -> None:
        self.run = run
        self.allowlist = allowlist

    async def verified(self, obs: Observation, client: SandboxAPI) -> str | None:
        """Check the task's success condition on ``obs`` (and its workspace files through
        ``client``); when it holds, write it and end the state machine there.

        Returns:
            ``"verified: <evidence>"``, or ``None`` when it does not hold.
        """
        ok, why = await self._holds(obs, client)
        if not ok:
            return None
        self.run.emit("verify", ok=True, evidence=why, url=redact_url(obs.url), title=obs.title)
        self.run.sm.to(RunState.SUCCEEDED, why)
        return "verified: " + why

    async def verify_claim(self, client: SandboxAPI) -> str:
        """Check the agent's claim that the task is done: observe until the success condition
        holds or its timeout passes.

        Returns:
            ``"verified: <evidence>"``.

        Raises:
            NotVerifiedError: the condition did not hold in time.
            PolicyDeniedError: a tab is off an allowlist.
            DeskpodError: the sandbox failed.
        """
        run = self.run
        check = run.task.success
        deadline = time.monotonic() + check.timeout_s
        options = ObserveOptions(screenshot=False, page_text=True)
        while True:
            obs = self.allowlist.observed(await client.act([], options, timeout_s=run.limits.action_timeout_s),
                                          "verify")
            ok, why = await self._holds(obs, client)
            if ok or time.monotonic() >= deadline:
                run.emit("verify", ok=ok, evidence=why, url=redact_url(obs.url), title=obs.title)
                if ok:
                    run.sm.to(RunState.SUCCEEDED, why)
                    return "verified: " + why
                raise NotVerifiedError(why, detail={"rule": "success_check"})
            await asyncio.sleep(VERIFY_INTERVAL_S)

    async def _holds(self, obs: Observation, client: SandboxAPI) -> tuple[bool, str]:
        """The page's checks on ``obs``, then the workspace files' (read only once the page's hold)."""
        check = self.run.task.success
        ok, why = check_success(check, obs)
        if not ok or not check.files:
            return ok, why
        files_ok, files_why = await check_files(check, client)
        if not files_ok or (check.url_matches is None and check.page_text_contains is None):
            return files_ok, files_why
        return True, f"{why}; {files_why}"

    async def wind_up(self, client: SandboxAPI | None, status: RunStatus, reason: str) -> Path | None:
        """End the state machine in ``status``'s state (unless it ended already) and, when the
        run failed or was cancelled, save its failure scene (after a last look with a screenshot when
        the last observation had none and ``client`` is still there).

        Returns:
            The scene's folder (``None`` when it succeeded or ended).
        """
        run = self.run
        if not run.sm.ended:
            run.sm.to(_FINAL_STATES[status], reason)
        if client is not None:
            await self._downloads_end(client)
        if status in ("succeeded", "ended"):  # nothing failed: no failure scene
            return None
        if client is not None and run.last_obs is not None and run.last_obs.screenshot is None:
            run.last_obs = await self._final_look(client)
        return save_scene(run.audit_dir, run.run_id, reason=reason, state=run.sm.state.value,
                          observation=run.last_obs, recent_actions=run.recent_actions,
                          audit_log=run.audit.path, audit_head=run.audit.head)

    async def _downloads_end(self, client: SandboxAPI) -> None:
        """Look for a download to begin while one may (:meth:`DownloadWatch.may_begin
        <deskpod.controller.download_watch.DownloadWatch.may_begin>` with
        :data:`DOWNLOAD_BEGIN_WAIT_S`) and wait for those in progress to end (at most
        :data:`DOWNLOAD_WAIT_S` in all), then write every download of the run at its last state
        in a ``downloads`` record. Nothing is written when the run saw none; a sandbox that fails
        a look ends the wait."""
        run = self.run
        watch = run.downloads
        deadline = time.monotonic() + DOWNLOAD_WAIT_S
        options = ObserveOptions(screenshot=False, settle=False)
        while (watch.in_progress or watch.may_begin(DOWNLOAD_BEGIN_WAIT_S)) and time.monotonic() < deadline:
            await asyncio.sleep(VERIFY_INTERVAL_S)
            try:
                await client.act([], options, timeout_s=10)  # its downloads go to the watch
            except DeskpodError as exc:
                log.warning("%s: cannot observe the downloads: %s", run.run_id, exc.message)
                break
        if watch.downloads:
            run.emit("downloads", downloads=download_fields(watch.downloads))

    async def _final_look(self, client: SandboxAPI) -> Observation | None:
        """A last observation for the failure scene (the last one when the sandbox fails it)."""
        try:
            return await client.act([], ObserveOptions(settle=False), timeout_s=10)
        except DeskpodError:
            return self.run.last_obs

    def finish(self, started: float, status: RunStatus, reason: str, scene: Path | None) -> RunResult:
        """Write the sealed ``run_finished`` record and close the log.

        Args:
            started: when the run started (:func:`time.monotonic`, seconds).
            status: how it ended.
            reason: why, a readable sentence.
            scene: its failure scene's folder (``None``: none).

        Returns:
            The run's result.
        """
        run = self.run
        duration = time.monotonic() - started
        url = redact_url(run.last_obs.url) if run.last_obs else None
        fields = {"status": status, "reason": reason, "steps": run.steps, "screenshots": run.screenshots,
                  "duration_s": round(duration, 3), "scene": str(scene) if scene else None}
        run.audit.finish(**fields)
        if run.on_event is not None:
            run.on_event({"run_id": run.run_id, "event": "run_finished", **fields})
        log.info("%s %s: %s", run.run_id, status, reason)
        return RunResult(run.run_id, status, reason, run.steps, duration, url, run.audit.path, run.audit.head,
                         scene, run.screenshots)
