"""A download still in progress when a GUI run ends: the run waits for it (bounded) and
its audit log records how it ended, so a suite that requires the file finds it there.

The failures this pins: a run verified on the step that started a download ended at once;
its only record of the file was the step's ``in_progress``, and an eval that requires
the download whole failed although the file arrived a moment later. And the same class one
observation later: a page that says "downloaded" at the click is verified on the click's
observation, before the browser reported the download's start (its server answers after
the reply); the run waited only for downloads its last observation showed in progress, so
it waited for none and its audit log had no record of the file at all. Its twin, seen in
the eval suite: the click's reply shows the download in progress, the agent's ``wait`` (a
look, whose record has no downloads) shows it complete, and the run, verified then, found
nothing in progress in its last observation and wrote nothing. The run now looks for a
download to begin after an action permitted to start one (``DOWNLOAD_BEGIN_WAIT_S``), and
reads the downloads every observation reported, not only the last one's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import pytest
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.download_watch import MAX_WATCHED_DOWNLOADS, DownloadWatch
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


SHARE = Button((100, 100, 300, 200), "Share the report", goes_to=USED)  # "share": L2, so the click may download


class Approver:
    """Approves every confirmation; cancels every pause."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        return ConfirmationAnswer(True, request.digest, "test")

    async def review(self, notice: PauseNotice) -> PauseAnswer:
        return "cancel"


class LateDownload(FakeSandbox):
    """A sandbox whose click on SHARE, when it carries the download permission, starts a
    download its reply does not show yet: the next observations report it ``in_progress``
    ``late`` times, then ``complete`` (once: the daemon reports a finished download only in
    the first observation after it ended); ``late=None``: none begins."""

    def __init__(self, late: int | None = 1, button: Button = SHARE) -> None:
        super().__init__({START: Page("Files", "", [button]), USED: Page("Files", "Report link used")})
        self.reports: list[str] | None = None
        self.late = late
        self.clicked = False
        self.looks_after = 0
        """Observations after the click's reply."""

    async def act(self, actions: Any, observe: ObserveOptions | None = None, timeout_s: float = 60.0,
                  expect: Any = None, *, allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        if actions:
            self.clicked = True
            if allow_downloads and self.url == USED and self.reports is None:
                self.reports = [] if self.late is None else ["in_progress"] * self.late + ["complete"]
            return obs  # the click's reply: the download has not begun yet
        self.looks_after += self.clicked
        if not self.reports:
            return obs
        state = self.reports.pop(0)
        download = Download(id="g7", url="http://files.test/report.txt", name="report.txt", state=state,
                            received_bytes=10 if state == "complete" else 0, total_bytes=10,
                            path="/tmp/downloads/report.txt" if state == "complete" else None)
        return obs.model_copy(update={"downloads": [download]})


def share_spec() -> TaskSpec:
    return TaskSpec.model_validate({"name": "download", "start_url": START, "allowed_domains": [],
                                    "success": {"page_text_contains": "Report link used"},
                                    "steps": [{"actions": [CLICK_GET]}]})


@pytest.mark.parametrize("late", [0, 2])
def test_a_download_that_begins_after_the_verified_click_is_looked_for_and_recorded_complete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: int) -> None:
    monkeypatch.setattr(endings, "DOWNLOAD_BEGIN_WAIT_S", 5.0)
    sandbox = LateDownload(late)
    result = asyncio.run(run_task(share_spec(), sandbox, audit_dir=tmp_path, channel=Approver()))
    assert result.status == "succeeded" and result.steps == 1
    assert sandbox.download_permissions == [True]
    [step] = records(result.audit_log, "step")
    assert step["downloads"] == []  # the click's observation: nothing had begun
    [ended] = records(result.audit_log, "downloads")
    assert [(d["name"], d["state"]) for d in ended["downloads"]] == [("report.txt", "complete")]
    assert sandbox.looks_after == late + 1  # it looked until the download began and ended, no longer


def test_the_look_for_a_late_download_is_bounded_and_only_after_an_action_that_may_start_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endings, "DOWNLOAD_BEGIN_WAIT_S", 0.5)
    permitted = LateDownload(None)  # no download begins: the look ends after DOWNLOAD_BEGIN_WAIT_S
    result = asyncio.run(run_task(share_spec(), permitted, audit_dir=tmp_path / "a", channel=Approver()))
    assert result.status == "succeeded" and records(result.audit_log, "downloads") == []
    assert 1 <= permitted.looks_after <= 0.5 / endings.VERIFY_INTERVAL_S + 1
    # The same page with GET, no L2 word: the click may start no download (L1), so no look.
    plain = LateDownload(1, button=GET)
    result = asyncio.run(run_task(share_spec(), plain, audit_dir=tmp_path / "b", channel=Approver()))
    assert result.status == "succeeded" and plain.download_permissions == [False]
    assert records(result.audit_log, "downloads") == [] and plain.looks_after == 0


class QuickDownload(FakeSandbox):
    """A sandbox whose permitted click on SHARE starts a download that is complete by its reply:
    only that reply reports it (the daemon reports a finished download once)."""

    def __init__(self) -> None:
        super().__init__({START: Page("Files", "", [SHARE]), USED: Page("Files", "Report link used")})

    async def act(self, actions: Any, observe: ObserveOptions | None = None, timeout_s: float = 60.0,
                  expect: Any = None, *, allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        before = self.url
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        if not (allow_downloads and before == START and self.url == USED):
            return obs
        download = Download(id="g8", url="http://files.test/report.txt", name="report.txt", state="complete",
                            received_bytes=10, total_bytes=10, path="/tmp/downloads/report.txt")
        return obs.model_copy(update={"downloads": [download]})


def test_a_download_only_an_earlier_observation_of_the_step_reported_is_in_the_run_s_record(tmp_path: Path) -> None:
    task = TaskSpec.model_validate({"name": "download", "start_url": START, "allowed_domains": [],
                                    "success": {"page_text_contains": "Report link used"},
                                    "steps": [{"actions": [CLICK_GET, {"type": "wait", "seconds": 0.1}]}]})
    sandbox = QuickDownload()
    result = asyncio.run(run_task(task, sandbox, audit_dir=tmp_path, channel=Approver()))
    assert result.status == "succeeded" and sandbox.download_permissions == [True, False]
    [step] = records(result.audit_log, "step")
    assert step["downloads"] == []  # the step's last observation no longer shows it
    [ended] = records(result.audit_log, "downloads")
    assert [(d["name"], d["state"]) for d in ended["downloads"]] == [("report.txt", "complete")]


def test_the_watch_keeps_a_bounded_number_of_downloads_in_progress_first_and_a_reset_forgets_them() -> None:
    watch = DownloadWatch()
    base = Observation(settled=True, url=START, title="")
    for batch in range(10):  # a hostile daemon: 320 downloads, one in progress per batch
        downloads = [Download(id=f"d{batch}-{i}", url="", name="x", state="in_progress" if i == 0 else "complete")
                     for i in range(32)]
        watch.seen(base.model_copy(update={"downloads": downloads}))
    kept = watch.downloads
    assert len(kept) == MAX_WATCHED_DOWNLOADS and sum(d.state == "in_progress" for d in kept) == 10
    watch.answered(True)
    assert watch.in_progress and watch.may_begin(60.0)
    watch.forget()
    assert watch.downloads == [] and not watch.in_progress and not watch.may_begin(60.0)


class SlowPage(FakeSandbox):
    """The eval's download page as it often behaves: the permitted click's reply shows the
    download in progress and not yet the success text; the next observation (the agent's
    ``wait``, a look) shows both, the download ``complete`` (once)."""

    def __init__(self) -> None:
        super().__init__({START: Page("Files", "", [SHARE]), USED: Page("Files", "Report link used")})
        self.after_click = 0

    async def act(self, actions: Any, observe: ObserveOptions | None = None, timeout_s: float = 60.0,
                  expect: Any = None, *, allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        obs = await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads, mask=mask)
        if self.url != USED:
            return obs
        self.after_click += 1
        state = {1: "in_progress", 2: "complete"}.get(self.after_click)
        downloads = [] if state is None else [
            Download(id="g9", url="http://files.test/report.txt", name="report.txt", state=state,
                     received_bytes=10 if state == "complete" else 0, total_bytes=10,
                     path="/tmp/downloads/report.txt" if state == "complete" else None)]
        text = None if self.after_click == 1 or obs.page_text is None else obs.page_text
        return obs.model_copy(update={"downloads": downloads, "page_text": text})


def test_a_download_that_ends_in_a_look_before_the_verification_is_in_the_run_s_record(tmp_path: Path) -> None:
    task = TaskSpec.model_validate({"name": "download", "start_url": START, "allowed_domains": [],
                                    "success": {"page_text_contains": "Report link used"},
                                    "steps": [{"actions": [CLICK_GET]}, {"actions": [{"type": "wait", "seconds": 0.1}]}]})
    result = asyncio.run(run_task(task, SlowPage(), audit_dir=tmp_path, channel=Approver()))
    assert result.status == "succeeded" and result.steps == 1
    [step] = records(result.audit_log, "step")
    assert [d["state"] for d in step["downloads"]] == ["in_progress"]
    assert "downloads" not in records(result.audit_log, "look")[0]  # a look's record has none
    [ended] = records(result.audit_log, "downloads")
    assert [(d["name"], d["state"]) for d in ended["downloads"]] == [("report.txt", "complete")]
