"""Run history and replay (``deskpod.service.console.history``, ``.timeline``, ``.replay_html``, ``deskpod replay``).

The runs are made by the real run loop (``run_task``) on the in-memory sandbox, so the
logs, screenshots and scenes are the controller's own formats; the router is driven as
an ASGI app, in process. What is checked: the timeline shows the steps with their risk
and approval, the confirmations and the screenshots in order; the verdict is the
verifier's (a tampered log shows as broken); strings from the page are text, never
markup; names from the URL cannot leave the audit folder; pages and exports are bounded.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fake_sandbox import SCREEN, Button, FakeSandbox, Page
from PIL import Image

from deskpod.cli.app import main
from deskpod.console.history import history_router
from deskpod.service.console.replay_html import EXPORT_CSP, render_run
from deskpod.service.console.timeline import list_runs, load_run
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, PauseAnswer, PauseNotice
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.gui import run_task
from deskpod.controller.run_api import RunResult
from deskpod.controller.task import TaskSpec
from deskpod.settings import get_settings

SIGNER = AuditSigner.generate()
KEY = SIGNER.public_key
HOSTILE_TITLE = "<script>document.title='pwned'</script>Shop"
HOSTILE_TEXT = "<img src=x onerror=alert(1)>"
START = "http://shop.test/?q=%3Cscript%3Ealert(2)%3C/script%3E"
PAID = "http://shop.test/paid"
PAY = Button((100, 200, 300, 240), "Pay now", goes_to=PAID)


class Human:
    """Approves every confirmation (``approve``) or denies it; cancels every pause."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer:
        return ConfirmationAnswer(self.approve, request.digest, "alice")

    async def review(self, notice: PauseNotice) -> PauseAnswer:
        return "cancel"


class PngShop(FakeSandbox):
    """The in-memory sandbox with real PNG screenshots (one colour per screen state)."""

    def _screen(self) -> bytes:
        out = io.BytesIO()
        colour = tuple(hashlib.sha256(super()._screen()).digest()[:3])
        Image.new("RGB", (SCREEN.width, SCREEN.height), colour).save(out, "PNG")
        return out.getvalue()


def play(audit_dir: Path, *, approve: bool = True, steps: int = 1) -> RunResult:
    """A run on the fake shop: type hostile text, then press "Pay now" (L3, asks a human)."""
    task = TaskSpec.model_validate({
        "name": "pay <b>now</b>", "start_url": START, "success": {"page_text_contains": "Payment sent"},
        "steps": [{"actions": [{"type": "type", "text": HOSTILE_TEXT}]}] * steps
        + [{"actions": [{"type": "click", "x": 150, "y": 220}]}],
    })
    sandbox = PngShop({START: Page(HOSTILE_TITLE, "Total: 10 EUR", [PAY]), PAID: Page("Paid", "Payment sent")})
    return asyncio.run(run_task(task, sandbox, audit_dir=audit_dir, channel=Human(approve),
                                policy=Policy(screenshots="all", pause_on_injection=False), signer=SIGNER))


async def get(app: FastAPI, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET through the ASGI app: status, headers (lower-case names), body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def app_for(audit_dir: Path, allow: bool = True, *, pinned: bool = True) -> FastAPI:
    async def authorize(request: Request) -> object | None:
        return "alice" if allow else None

    app = FastAPI()
    app.include_router(history_router(audit_dir, authorize, public_key=KEY if pinned else None))
    return app


def fetch(app: FastAPI, path: str) -> tuple[int, dict[str, str], bytes]:
    return asyncio.run(get(app, path))


def test_the_timeline_shows_states_steps_risks_confirmations_and_screenshots_in_order(tmp_path: Path) -> None:
    result = play(tmp_path)
    assert result.status == "succeeded", result.reason
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None
    assert run.summary.status == "succeeded" and run.summary.steps == 2 and run.summary.task == "pay <b>now</b>"
    assert run.summary.verdict.state == "sealed" and run.summary.verdict.key_id == KEY.key_id
    events = [e.event for e in run.entries]
    assert events[0] == "run_started" and events[-1] == "run_finished" and "state" in events
    assert events.index("confirmation_requested") < events.index("confirmation_answer")
    steps = [e for e in run.entries if e.kind == "step"]
    assert [s.level for s in steps] == ["L1", "L3"]
    assert any("approval approved" in text for _, text in steps[1].details)
    assert any(HOSTILE_TEXT in text for _, text in steps[0].details)
    answer = next(e for e in run.entries if e.event == "confirmation_answer")
    assert answer.outcome == "approved" and ("by", "alice") in answer.details
    named = [e.shot.sha256 for e in run.entries if e.shot is not None]
    assert [s.sha256 for s in run.screenshots] == list(dict.fromkeys(named)) and len(run.screenshots) >= 2
    assert all(s.name is not None for s in run.screenshots), "retention 'all' keeps every screenshot"


def test_a_tampered_log_shows_a_broken_chain_in_the_list_the_page_and_the_export(tmp_path: Path) -> None:
    result = play(tmp_path)
    assert list_runs(tmp_path, public_key=KEY)[0][0].verdict.state == "sealed"
    before = result.audit_log.stat()
    lines = result.audit_log.read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b'"event":"step"' in line)
    lines[index] = lines[index].replace(b'"L3"', b'"L1"').replace(b'"L1"', b'"L0"', 1)
    result.audit_log.write_bytes(b"".join(lines))
    os.utime(result.audit_log, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert result.audit_log.stat().st_size == before.st_size, "same size, same mtime: only the change time differs"
    runs, total = list_runs(tmp_path, public_key=KEY)
    assert total == 1 and runs[0].verdict.state == "broken"
    assert f"line {index + 2}: prev does not match" in runs[0].verdict.text
    app = app_for(tmp_path)
    status, _, body = fetch(app, f"/console/runs/{result.run_id}")
    assert status == 200 and b'data-verdict="broken"' in body and b"prev does not match" in body
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None and 'data-verdict="broken"' in render_run(run, tmp_path)


def test_a_log_sealed_by_another_key_or_cut_short_is_not_shown_as_intact(tmp_path: Path) -> None:
    result = play(tmp_path)
    other = AuditSigner.generate().public_key
    run = load_run(tmp_path, result.run_id, public_key=other)
    assert run is not None and run.summary.verdict.state == "broken" and "not by the key given" in run.summary.verdict.text
    result.audit_log.write_bytes(b"".join(result.audit_log.read_bytes().splitlines(keepends=True)[:-1]))
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None and run.summary.status == "unfinished" and run.summary.verdict.state == "unfinished"
    assert not run.summary.verdict.ok and "no run_finished record" in run.summary.verdict.text


def test_without_a_public_key_the_chain_is_checked_and_the_seal_said_not_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "absent" / "signing.key"))
    get_settings.cache_clear()  # read the variable now, whatever an earlier test read
    try:
        result = play(tmp_path / "audit")
        run = load_run(tmp_path / "audit", result.run_id)
        assert run is not None and run.summary.verdict.state == "intact"
        assert "chain intact, seal NOT verified (no pinned key)" in run.summary.verdict.text, "as verify-log says"
        status, _, body = fetch(app_for(tmp_path / "audit", pinned=False), "/console/runs")
        assert status == 200 and b"intact, seal NOT verified" in body, "the run list says so too, not a bare 'intact'"
        status, _, body = fetch(app_for(tmp_path / "audit", pinned=False), f"/console/runs/{result.run_id}")
        assert status == 200 and b"chain intact, seal NOT verified (no pinned key)" in body
        result.audit_log.write_bytes(result.audit_log.read_bytes().replace(b'"by":"alice"', b'"by":"mallory"'))
        run = load_run(tmp_path / "audit", result.run_id)
        assert run is not None and run.summary.verdict.state == "broken"
    finally:
        get_settings.cache_clear()  # the next test's settings are its own


def test_page_strings_are_rendered_as_text_never_as_markup(tmp_path: Path) -> None:
    result = play(tmp_path)
    app = app_for(tmp_path)
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None
    pages = {"list": fetch(app, "/console/runs")[2].decode(), "page": fetch(app, f"/console/runs/{result.run_id}")[2]
             .decode(), "export": render_run(run, tmp_path)}
    for where, html in pages.items():
        assert "<script" not in html.lower(), where
        assert "<img src=x" not in html and "<b>now" not in html, where
        assert "onerror=alert(1)" not in html or "&lt;img src=x onerror=alert(1)&gt;" in html, where
    assert "&lt;b&gt;now&lt;/b&gt;" in pages["list"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages["page"]
    assert "&lt;script&gt;document.title=" in pages["export"]


def test_the_export_is_self_contained_and_allows_no_script(tmp_path: Path) -> None:
    result = play(tmp_path)
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None
    html = render_run(run, tmp_path)
    assert f'<meta http-equiv="Content-Security-Policy" content="{EXPORT_CSP}">' in html.replace("&#39;", "'")
    assert "script-src" not in EXPORT_CSP and "default-src 'none'" in EXPORT_CSP
    sources = re.findall(r'<img src="([^"]+)"', html)
    assert len(set(sources)) == len(run.screenshots) and all(s.startswith("data:image/png;base64,") for s in sources)
    assert len(sources) == len(run.screenshots) + 1, "the confirmation's screen again, with its point marked"
    first = base64.b64decode(sources[0].split(",", 1)[1])
    assert first == (tmp_path / "screenshots" / f"{run.screenshots[0].sha256}.png").read_bytes()
    assert "<link" not in html and 'href="/' not in html and "http://127" not in html, "nothing fetched from a server"
    assert "<style>" in html and "ol.timeline" in html
    confirmation = html[html.index('data-event="confirmation_requested"'):]
    assert confirmation.index('<svg class="mark" viewBox="0 0 1280 800"') < confirmation.index("</li>")
    assert '<circle cx="150" cy="220" r="22"/>' in confirmation, "the action's point marked on the judged screen"


def test_routes_refuse_without_a_principal_and_send_a_strict_policy(tmp_path: Path) -> None:
    result = play(tmp_path)
    name = next(p.name for p in (tmp_path / "screenshots").iterdir())
    refused = app_for(tmp_path, allow=False)
    for path in ("/console/runs", f"/console/runs/{result.run_id}", f"/console/runs/{result.run_id}/export",
                 f"/console/screenshots/{name}", "/console/history.css"):
        assert fetch(refused, path)[0] == 401, path
    app = app_for(tmp_path)
    status, headers, _ = fetch(app, f"/console/runs/{result.run_id}")
    assert status == 200 and "script-src" not in headers["content-security-policy"]
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    status, headers, body = fetch(app, f"/console/runs/{result.run_id}/export")
    assert status == 200 and headers["content-disposition"] == f'attachment; filename="deskpod-{result.run_id}.html"'
    assert headers["content-security-policy"] == EXPORT_CSP and b"data:image/png;base64," in body
    status, headers, body = fetch(app, f"/console/screenshots/{name}")
    assert status == 200 and headers["content-type"] == "image/png"
    assert body == (tmp_path / "screenshots" / name).read_bytes()


def test_names_from_the_url_cannot_leave_the_audit_folder(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    result = play(audit)
    secret = tmp_path / ("a" * 64 + ".png")
    secret.write_bytes(b"outside the audit folder")
    (audit / "screenshots" / ("b" * 64 + ".png")).symlink_to(secret)
    (audit / "run-linked.jsonl").symlink_to(result.audit_log)
    app = app_for(audit)
    for path in ("/console/screenshots/..%2F..%2F" + "a" * 64 + ".png", "/console/screenshots/" + "b" * 64 + ".png",
                 "/console/screenshots/" + "A" * 64 + ".png", "/console/screenshots/" + "a" * 64 + ".svg",
                 "/console/screenshots/" + "a" * 64 + ".png%00", "/console/runs/..%2F" + result.run_id,
                 "/console/runs/run-linked", "/console/runs/.." , "/console/runs/%2e%2e/export",
                 "/console/runs/run-linked/scene-screenshot"):
        status, _, body = fetch(app, path)
        assert status == 404 and b"outside the audit folder" not in body, path
    assert [r.run_id for r in list_runs(audit, public_key=KEY)[0]] == [result.run_id], "a linked log is not listed"


def test_linked_folders_inside_the_audit_folder_lead_nowhere_else(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    result = play(audit, approve=False)
    outside = tmp_path / "outside"
    (audit / "screenshots").rename(outside)
    (audit / "screenshots").symlink_to(outside)
    scene = audit / "scenes" / result.run_id
    scene.rename(tmp_path / "scene-outside")
    scene.symlink_to(tmp_path / "scene-outside")
    app = app_for(audit)
    name = next(p.name for p in outside.iterdir())
    assert fetch(app, f"/console/screenshots/{name}")[0] == 404
    assert fetch(app, f"/console/runs/{result.run_id}/scene-screenshot")[0] == 404
    run = load_run(audit, result.run_id, public_key=KEY)
    assert run is not None and run.scene is None and all(s.name is None for s in run.screenshots)


def test_a_cancelled_run_shows_its_failure_scene(tmp_path: Path) -> None:
    result = play(tmp_path, approve=False)
    assert result.status == "cancelled" and result.scene is not None
    run = load_run(tmp_path, result.run_id, public_key=KEY)
    assert run is not None and run.scene is not None and "confirmation denied" in run.scene.reason
    assert run.scene.screenshot_file is not None
    app = app_for(tmp_path)
    status, _, body = fetch(app, f"/console/runs/{result.run_id}")
    assert status == 200 and b"Failure scene" in body and f"/console/runs/{result.run_id}/scene-screenshot".encode() in body
    status, headers, shot = fetch(app, f"/console/runs/{result.run_id}/scene-screenshot")
    assert status == 200 and headers["content-type"] == "image/png" and shot == run.scene.screenshot_file.read_bytes()
    assert "data:image/png;base64," + base64.b64encode(shot).decode() in render_run(run, tmp_path)


def test_a_huge_log_and_many_screenshots_make_a_bounded_page_that_says_so(tmp_path: Path) -> None:
    result = play(tmp_path, steps=6)
    run = load_run(tmp_path, result.run_id, public_key=KEY, max_entries=20)
    assert run is not None and len(run.entries) == 20 and run.records > 20
    assert "only the first 20 are shown" in run.notes[0]
    html = render_run(run, tmp_path, max_images=2)
    assert len(re.findall(r'<img src="data:', html)) == 2
    assert "are not shown as images: at most 2 images" in html and "only the first 20 are shown" in html
    assert "not shown: this page&#39;s image limit was reached" in html


def test_runs_are_listed_newest_first_with_task_status_steps_and_verdict(tmp_path: Path) -> None:
    first = play(tmp_path)
    second = play(tmp_path, approve=False)
    os.utime(first.audit_log, (1, 1))
    runs, total = list_runs(tmp_path, public_key=KEY)
    assert total == 2 and [r.run_id for r in runs] == [second.run_id, first.run_id]
    assert [(r.status, r.steps, r.verdict.state) for r in runs] == [("cancelled", 2, "sealed"),
                                                                       ("succeeded", 2, "sealed")]
    status, _, body = fetch(app_for(tmp_path), "/console/runs")
    assert status == 200 and body.index(second.run_id.encode()) < body.index(first.run_id.encode())
    assert list_runs(tmp_path / "missing") == ([], 0)


def test_deskpod_replay_writes_the_export_and_exits_by_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                   ) -> None:
    result = play(tmp_path / "audit")
    key = tmp_path / "signing.pub"
    key.write_text(KEY.pem())
    out = tmp_path / "replay.html"
    for source in (result.audit_log, tmp_path / "audit"):
        with pytest.raises(SystemExit) as exit_info:
            main(["replay", str(source), "--html", str(out), "--public-key", str(key), "--json"])
        assert exit_info.value.code == 0
        document = json.loads(capsys.readouterr().out)
        assert document["run_id"] == result.run_id and document["verdict"] == "sealed"
        assert "data:image/png;base64," in out.read_text()
    result.audit_log.write_bytes(result.audit_log.read_bytes().replace(b'"by":"alice"', b'"by":"mallory"'))
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(result.audit_log), "--html", str(out), "--public-key", str(key)])
    assert exit_info.value.code == 1 and "broken" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(tmp_path / "nothing.jsonl"), "--html", str(out)])
    assert exit_info.value.code == 2
