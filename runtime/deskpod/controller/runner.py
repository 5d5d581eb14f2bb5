"""Play a task against a sandbox and verify its outcome from the environment.

The controller decides; it never touches X11. It enforces the task's step and
wall-time limits, writes the audit log, and accepts success only when the page
the sandbox reports (URL and visible text, read through CDP by the daemon)
satisfies the task's success check. An action "succeeding" is not the task
succeeding (seed 002 §15: "不把动作返回成功当成业务成功").
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deskpod.client import SandboxClient
from deskpod.controller.audit import AuditLog, redact_actions, utc_now
from deskpod.controller.task import SuccessCheck, TaskSpec
from deskpod.controller.loops import LoopDetector
from deskpod.controller.policy import check_url, redact_url
from deskpod.errors import DeskpodError, LimitExceededError, PolicyDeniedError
from deskpod.protocol import Observation, ObserveOptions

__all__ = ["RunResult", "run_task", "check_success", "VERIFY_INTERVAL_S"]

log = logging.getLogger(__name__)

VERIFY_INTERVAL_S = 0.2
"""Seconds between re-observations while waiting for the success condition."""


@dataclass(frozen=True)
class RunResult:
    """How a run ended.

    ``status``: ``"succeeded"`` only when the success check held in the environment.
    ``reason``: a readable sentence. ``steps``: action batches executed.
    ``duration_s``: wall time, seconds. ``url``: the last URL observed.
    """

    run_id: str
    status: Literal["succeeded", "failed"]
    reason: str
    steps: int
    duration_s: float
    url: str | None
    audit_log: Path


def check_success(check: SuccessCheck, observation: Observation) -> tuple[bool, str]:
    """Decide whether ``observation`` satisfies ``check``.

    Returns:
        ``(ok, why)``: ``why`` names the first condition that failed, or the evidence.
    """
    url = observation.url or ""
    if check.url_matches is not None and not re.search(check.url_matches, url):
        return False, f"URL {url!r} does not match {check.url_matches!r}"
    if check.page_text_contains is not None and check.page_text_contains not in (observation.page_text or ""):
        return False, f"page text does not contain {check.page_text_contains!r}"
    return True, f"URL {url!r} matches and the page shows the expected text"


async def run_task(
    task: TaskSpec,
    sandbox_url: str,
    token: str,
    *,
    audit_dir: str | Path = "deskpod-audit",
    connect_timeout_s: float = 60.0,
) -> RunResult:
    """Run ``task`` against the sandbox at ``sandbox_url``.

    Args:
        task: the validated task.
        sandbox_url: the daemon's websocket URL, e.g. ``ws://sandbox:8765/v1/ws``.
        token: the sandbox's control token.
        audit_dir: folder for ``<run_id>.jsonl``.
        connect_timeout_s: how long to wait for the sandbox to accept a connection.

    Returns:
        The :class:`RunResult`; limits, sandbox errors and failed checks end the run
        as ``"failed"`` with the reason, they are not raised.
    """
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    audit = AuditLog(Path(audit_dir) / f"{run_id}.jsonl", run_id)
    started = time.monotonic()
    state: dict[str, Any] = {"steps": 0, "url": None}
    audit.write("run_started", task=task.name, start_url=task.start_url, limits=task.limits.model_dump())
    status: Literal["succeeded", "failed"] = "failed"
    try:
        ok, reason = await asyncio.wait_for(
            _play(task, sandbox_url, token, audit, state, connect_timeout_s), task.limits.max_wall_time_s
        )
        status = "succeeded" if ok else "failed"
    except asyncio.TimeoutError:
        reason = f"limit reached: max_wall_time_s={task.limits.max_wall_time_s:g}"
    except DeskpodError as exc:
        reason = f"{exc.code}: {exc.message}"
    duration = time.monotonic() - started
    audit.write("run_finished", status=status, reason=reason, steps=state["steps"], duration_s=round(duration, 3))
    audit.close()
    log.info("%s %s: %s", run_id, status, reason)
    return RunResult(run_id, status, reason, int(state["steps"]), duration, state["url"], audit.path)


async def _play(
    task: TaskSpec,
    url: str,
    token: str,
    audit: AuditLog,
    state: dict[str, Any],
    connect_timeout_s: float,
) -> tuple[bool, str]:
    client = await SandboxClient.connect(url, token, timeout_s=connect_timeout_s)
    try:
        if task.model_size is not None:
            await client.configure(task.model_size)
        _enforce_urls(task, [task.start_url], audit, "start_url")
        loops = LoopDetector(threshold=task.limits.max_repeats)
        t0 = utc_now()
        obs = await client.navigate(task.start_url)
        state["url"] = obs.url
        flags = _enforce_urls(task, _observed_urls(obs), audit, "navigate")
        audit.write("navigate", url=redact_url(obs.url), title=obs.title, started_at=t0, finished_at=utc_now(),
                    decision="allowed", url_flags=flags)
        for index, step in enumerate(task.steps, start=1):
            if index > task.limits.max_steps:
                raise LimitExceededError(
                    f"limit reached: max_steps={task.limits.max_steps}", detail={"limit": "max_steps"}
                )
            t0 = utc_now()
            tick = time.perf_counter()
            record = {"step": index, "actions": redact_actions(list(step.actions), step.sensitive), "started_at": t0}
            try:
                obs = await client.act(list(step.actions))
            except DeskpodError as exc:
                audit.write("step", **record, finished_at=utc_now(), decision="allowed", outcome="error",
                            error={"code": exc.code, "message": exc.message})
                raise
            state["steps"] = index
            state["url"] = obs.url
            flags = _enforce_urls(task, _observed_urls(obs), audit, f"step {index}")
            shot = obs.screenshot
            audit.write(
                "step",
                **record,
                finished_at=utc_now(),
                decision="allowed",
                outcome="ok",
                timings=[t.model_dump() for t in obs.timings],
                url=redact_url(obs.url),
                url_flags=flags,
                title=obs.title,
                screen=None if shot is None else {"width": shot.screen_width, "height": shot.screen_height},
                screenshot_sha256=None if shot is None else shot.sha256,
            )
            log.info("step %d: %s allowed (%.3f s)", index, ",".join(a.type for a in step.actions),
                     time.perf_counter() - tick)
            if loops.step(list(step.actions), obs.url, None if shot is None else shot.perceptual_hash):
                audit.write("loop", step=index, repeats=loops.repeats)
                raise LimitExceededError(
                    f"loop detected: the same actions on the same screen and URL {loops.repeats} times in a row",
                    detail={"limit": "max_repeats"},
                )
        return await _verify(task.success, client, audit, state)
    finally:
        await client.close()


def _observed_urls(obs: Observation) -> list[str]:
    """Every URL the browser is at: the active tab's and every other tab's (popups included)."""
    urls = [t.url for t in obs.tabs or []]
    if obs.url and obs.url not in urls:
        urls.append(obs.url)
    return urls


def _enforce_urls(task: TaskSpec, urls: list[str], audit: AuditLog, where: str) -> list[str]:
    """Apply the task's URL policy to ``urls``; return the warning flags.

    Raises:
        PolicyDeniedError: a URL has a refused scheme or leaves ``allowed_domains``
            (``detail["rule"]`` names the rule); the refusal is written to the audit log.
    """
    flags: list[str] = []
    for url in urls:
        decision = check_url(url, task.allowed_domains)
        flags += [f for f in decision.flags if f not in flags]
        if not decision.allowed:
            shown = redact_url(url)
            audit.write("policy", decision="denied", rule=decision.rule, url=shown, where=where)
            raise PolicyDeniedError(
                f"{where}: the browser is at {shown}, which the task's policy refuses ({decision.rule})",
                detail={"rule": decision.rule, "url": shown},
            )
    return flags


async def _verify(check: SuccessCheck, client: SandboxClient, audit: AuditLog, state: dict[str, Any]) -> tuple[bool, str]:
    deadline = time.monotonic() + check.timeout_s
    options = ObserveOptions(screenshot=False, page_text=True)
    while True:
        obs = await client.act([], options)
        state["url"] = obs.url
        ok, why = check_success(check, obs)
        if ok or time.monotonic() >= deadline:
            audit.write("verify", ok=ok, evidence=why, url=redact_url(obs.url), title=obs.title)
            return ok, ("verified: " if ok else "not verified: ") + why
        await asyncio.sleep(VERIFY_INTERVAL_S)
