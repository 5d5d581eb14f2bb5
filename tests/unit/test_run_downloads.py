"""A download still in progress when a GUI run ends: the run waits for it (bounded) and
its audit log records how it ended, so a suite that requires the file finds it there.

The failure this pins: a run verified on the step that started a download ended at once;
its only record of the file was the step's ``in_progress``, and an eval that requires
the download whole failed although the file arrived a moment later.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import pytest
from deskpod.controller.gui import endings, run_task
from deskpod.controller.task import TaskSpec
from deskpod.protocol import Download, Observation, ObserveOptions
from fake_sandbox import Button, FakeSandbox, Page

START = "http://files.test/"
USED = "http://files.test/used"
GET = Button((100, 100, 300, 200), "Get the report", goes_to=USED)
PAGES = {START: Page("Files", "", [GET]), USED: Page("Files", "Report link used")}
CLICK_GET = {"type": "click", "x": 150, "y": 150}


class Downloading(FakeSandbox):
    """A sandbox whose click on GET starts one download; each observation after it reports
    the next of ``states`` (the last repeats), as the daemon reports in-progress downloads."""

    def __init__(self, states: list[str]) -> None:
        super().__init__(dict(PAGES))
        self.states = states

    async def act(self, actions: Any, observe: ObserveOptions | None = None, timeout_s: float = 60.0,
                  expect: Any = None, *, allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        if self.url != USED:
            return obs
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        download = Download(id="g1", url="http://files.test/report?token=s3cret", name="report.txt", state=state,
                            received_bytes=10 if state == "complete" else 3, total_bytes=10,
                            path="/tmp/downloads/report.txt" if state == "complete" else None)
        return obs.model_copy(update={"downloads": [download]})


def spec(success: dict[str, Any]) -> TaskSpec:
    return TaskSpec.model_validate({"name": "download", "start_url": START, "allowed_domains": [],
                                    "success": success, "steps": [{"actions": [CLICK_GET]}]})


def records(log: Path, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in lines if r["event"] == event]


def test_a_run_verified_while_its_download_runs_waits_and_records_the_file_complete(tmp_path: Path) -> None:
    sandbox = Downloading(["in_progress", "in_progress", "in_progress", "complete"])
    result = asyncio.run(run_task(spec({"page_text_contains": "Report link used"}), sandbox, audit_dir=tmp_path))
    assert result.status == "succeeded" and result.steps == 1
    [step] = records(result.audit_log, "step")
    assert [d["state"] for d in step["downloads"]] == ["in_progress"]
    [ended] = records(result.audit_log, "downloads")
    assert ended["downloads"] == [{
        "id": "g1", "url": "http://files.test/report?token=%5Bredacted%5D", "name": "report.txt", "state": "complete", "reason": None,
        "received_bytes": 10, "total_bytes": 10, "progress": None, "path": "/tmp/downloads/report.txt"}]
    assert not sandbox.states[1:]  # it looked until the download ended, no longer


def test_a_download_that_never_ends_is_recorded_in_progress_after_the_bounded_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endings, "DOWNLOAD_WAIT_S", 0.5)
    sandbox = Downloading(["in_progress"])
    result = asyncio.run(run_task(spec({"page_text_contains": "Report link used"}), sandbox, audit_dir=tmp_path))
    assert result.status == "succeeded"
    [ended] = records(result.audit_log, "downloads")
    assert [d["state"] for d in ended["downloads"]] == ["in_progress"]


def test_a_failed_run_records_its_download_too_and_a_run_without_one_writes_nothing(tmp_path: Path) -> None:
    sandbox = Downloading(["in_progress", "failed"])
    failed = asyncio.run(run_task(spec({"page_text_contains": "never", "timeout_s": 0.2}), sandbox,
                                  audit_dir=tmp_path / "a"))
    assert failed.status == "failed"
    assert [d["state"] for r in records(failed.audit_log, "downloads") for d in r["downloads"]] == ["failed"]
    plain = asyncio.run(run_task(spec({"page_text_contains": "Report link used"}),
                                 FakeSandbox(dict(PAGES)),
                                 audit_dir=tmp_path / "b"))
    assert plain.status == "succeeded" and records(plain.audit_log, "downloads") == []
