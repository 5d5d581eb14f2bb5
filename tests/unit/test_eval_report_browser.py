"""``deskpod eval``'s HTML report opened in a real Chromium, with every string a sandbox, a page or
an agent supplies set to markup that would run, load or redirect if it were not text: no dialog
opens, nothing is requested but the page itself and its ``data:`` image, no element the strings
name exists, and each string is shown as the text it is."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from deskpod.eval.harness import AuditVerdict, EvalResult, RunRecord
from deskpod.eval.report import write_report

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]  # Chromium

PAYLOADS = (
    '<script>alert("script")</script>',
    '"><img src=x onerror=alert("img")>',
    "'><svg onload=alert('svg')>",
    '</style><style>body{display:none}</style>',
    '</title><meta http-equiv="refresh" content="0;url=http://evil.test/">',
    '<iframe src="http://evil.test/"></iframe>',
    '<a href="javascript:alert(\'a\')">click</a>',
    '<base href="http://evil.test/">',
    '<link rel=stylesheet href="http://evil.test/x.css">',
    '{{ 7*7 }}{% raw %}',
)
HOSTILE = "".join(PAYLOADS)


def _records(tmp_path: Path) -> list[RunRecord]:
    scene = tmp_path / "scene"
    scene.mkdir()
    (scene / "screenshot.png").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(\'png\')"/>')
    base = RunRecord(HOSTILE, 0, "gui", "failed", "failed", ("failed", HOSTILE), (HOSTILE,), HOSTILE, 3, 1.5, None,
                     HOSTILE, "javascript:alert('log')//" + HOSTILE, AuditVerdict(False, error=HOSTILE),
                     scene=str(scene), scene_reason=HOSTILE + " scene", scene_image=str(scene / "screenshot.png"),
                     infrastructure=(HOSTILE,), mismatch=HOSTILE, sandbox_id=HOSTILE)
    return [base, replace(base, index=1, audit=AuditVerdict(True, 5, "ab" * 32, HOSTILE), scene=None,
                          scene_image=None)]


def test_a_report_full_of_hostile_strings_runs_and_loads_nothing_in_chromium(tmp_path: Path) -> None:
    result = EvalResult(HOSTILE, _records(tmp_path), 2.0, 4, 2, HOSTILE, [HOSTILE])
    _, html_path, _ = write_report(result, tmp_path / "report", 0.9)
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html_path.as_uri())
            page.wait_for_timeout(500)
            assert page.url == html_path.as_uri()
            assert page.title() == "deskpod eval: " + HOSTILE
            assert page.locator("#suite").inner_text() == HOSTILE
            for element in ("script", "iframe", "svg", "base", "link", "meta[http-equiv=refresh]", "a[href^=javascript]",
                            "img:not(.scene)"):
                assert page.locator(element).count() == 0, element
            assert page.locator("style").count() == 1 and page.locator("body").is_visible()
            assert page.locator("tr.run").count() == 2
            assert page.locator("tr.run").first.get_attribute("data-task") == HOSTILE
            reason = page.locator("tr.run td.reason").first.inner_text()
            assert HOSTILE in reason and "{{ 7*7 }}" in reason
            links = [a.get_attribute("href") or "" for a in page.locator("a").all()]
            assert links and all(link.startswith("file://") for link in links), links
            scene = page.locator("img.scene")
            assert scene.count() == 1 and (scene.get_attribute("src") or "").startswith("data:image/png;base64,")
        finally:
            browser.close()
    assert dialogs == []
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    assert json.loads((tmp_path / "report" / "report.json").read_text())["suite"] == HOSTILE
