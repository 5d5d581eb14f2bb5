"""Run history and replay in a real browser, on a run played through the real stack.

One run of the demo search types hostile text (a ``<script>`` and an ``<img onerror>``)
into the demo site, so the page's title, its URL and the typed text all carry markup.
The history routes are served on loopback by a small FastAPI app whose ``authorize``
accepts; Debian's Chromium (through Playwright) opens the runs list, the run's timeline
and the exported HTML file (from ``file://``, offline), and checks that the steps and
screenshots show, that the hostile strings are shown as text, and that no script ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from PIL import Image
from playwright.sync_api import Page, sync_playwright

from deskpod_stack import ROOT, Stack, free_loopback_port
from fake_sandbox import SCREEN, Button, FakeSandbox, Page as ShopPage
from deskpod.console.history import history_router
from deskpod.controller import load_task, run_task
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import RunResult
from deskpod.controller.task import TaskSpec

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
HOSTILE = '<img src=x onerror="window.__pwned=2">penguin'
"""Typed into a page (the in-memory run)."""
TYPED = "<script>window.__pwned=1</script>penguin"
"""Typed into the demo site's search box (the real run): the results page's title holds it too."""
SIGNER = AuditSigner.generate()


@pytest.fixture(scope="module")
def hostile_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    """The demo task with hostile text typed into the search box, every screenshot kept."""
    audit_dir = tmp_path_factory.mktemp("replay-audit")
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text()
    body = body.replace("- {type: type, text: penguin}", "- {type: type, text: '" + TYPED + "'}")
    body = body.replace("url_matches: '^http://demo\\.test/search\\?q=penguin$'", "url_matches: '/search\\?q='")
    path = audit_dir / "hostile.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=audit_dir, signer=SIGNER,
                                  policy=Policy(screenshots="all")))
    path.unlink()
    assert result.status == "succeeded", result.reason
    return audit_dir, result


@contextlib.contextmanager
def serving(audit_dir: Path) -> Iterator[str]:
    """The history routes over ``audit_dir`` (seals checked with :data:`SIGNER`'s key), served on
    loopback by a FastAPI app whose ``authorize`` accepts; yields the base URL."""
    async def authorize(request: Request) -> object | None:
        return "reviewer"

    app = FastAPI()
    app.include_router(history_router(audit_dir, authorize, public_key=SIGNER.public_key))
    port = free_loopback_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    try:
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the history app did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def history_url(hostile_run: tuple[Path, RunResult]) -> Iterator[str]:
    """The history routes over the real run's audit folder."""
    with serving(hostile_run[0]) as url:
        yield url


def watch(page: Page) -> list[str]:
    """Record every dialog (and dismiss it) and every request that is neither file: nor data:."""
    seen: list[str] = []
    page.on("dialog", lambda dialog: (seen.append(f"dialog {dialog.message}"), dialog.dismiss()))
    page.on("request", lambda request: seen.append(f"request {request.url}")
            if not request.url.startswith(("data:", "file:")) else None)
    return seen


def images_loaded(page: Page) -> list[Any]:
    """``naturalWidth`` of every image of the page, once each has loaded or failed."""
    return page.eval_on_selector_all(
        "img", "imgs => Promise.all(imgs.map(i => i.decode().then(() => i.naturalWidth, () => 0)))")


def check_in_browser(base_url: str, run_id: str, steps: int, typed: tuple[int, str], title: str, width_px: int,
                     tmp_path: Path) -> None:
    """Open the runs list, the run's timeline and its export (from file://, offline) in Chromium:
    the run, its verdict (sealed), its ``steps`` and its screenshots (each ``width_px`` wide)
    show, the text ``typed`` at a step (its index, the text) and the page's ``title`` are
    shown as text, and no script runs."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            context = browser.new_context(accept_downloads=True)
            page = context.new_page()
            events = watch(page)
            page.goto(f"{base_url}/console/runs")
            row = page.locator(f'tr[data-run="{run_id}"]')
            assert "succeeded" in row.inner_text() and "sealed" in row.inner_text()
            row.locator("a").click()
            page.wait_for_url(f"**/console/runs/{run_id}")
            assert page.locator('[data-verdict="sealed"]').count() == 1
            assert page.locator("li.kind-step").count() == steps
            assert typed[1] in page.locator("li.kind-step").nth(typed[0]).inner_text(), "typed text shown as text"
            assert page.get_by_text(title).count() >= 1, "the page's title is shown as text"
            widths = images_loaded(page)
            assert len(widths) >= steps and all(w == width_px for w in widths), widths
            assert page.evaluate("window.__pwned") is None
            with page.expect_download() as download:
                page.get_by_text("export as one HTML file").click()
            exported = tmp_path / "replay.html"
            download.value.save_as(exported)
            assert not [e for e in events if e.startswith("dialog")], events

            offline = browser.new_context(offline=True)
            replay = offline.new_page()
            replay_events = watch(replay)
            replay.goto(exported.as_uri())
            assert replay.locator('[data-verdict="sealed"]').count() == 1
            assert replay.locator("li.kind-step").count() == steps
            assert typed[1] in replay.locator("li.kind-step").nth(typed[0]).inner_text()
            assert replay.get_by_text(title).count() >= 1
            widths = images_loaded(replay)
            assert len(widths) >= steps and all(w == width_px for w in widths), widths
            assert replay.evaluate("window.__pwned") is None
            assert replay_events == [], "the export loads nothing and opens no dialog"
        finally:
            browser.close()


def test_a_real_runs_timeline_and_export_show_its_steps_and_screenshots_and_run_no_script(
        hostile_run: tuple[Path, RunResult], history_url: str, tmp_path: Path) -> None:
    check_in_browser(history_url, hostile_run[1].run_id, 3, (1, TYPED), "Results for <script>window.__pwned=1</script>",
                     1280, tmp_path)


class PngShop(FakeSandbox):
    """The in-memory sandbox with real PNG screenshots (Pillow; one colour per screen state)."""

    def _screen(self) -> bytes:
        state = super()._screen()
        out = io.BytesIO()
        Image.new("RGB", (SCREEN.width, SCREEN.height), tuple(hashlib.sha256(state).digest()[:3])).save(out, "PNG")
        return out.getvalue()


def test_the_timeline_and_export_of_a_run_loop_run_show_in_a_browser_inertly(tmp_path: Path) -> None:
    """The same checks on a run the real run loop plays on the in-memory sandbox (no Docker):
    its page title, its URL and its typed text carry markup."""
    title = "<script>window.__pwned=3</script>Shop"
    start, paid = "http://shop.test/?q=%3Cscript%3Ewindow.__pwned=4%3C/script%3E", "http://shop.test/paid"
    pay = Button((100, 200, 300, 240), "Go", goes_to=paid)
    sandbox = PngShop({start: ShopPage(title, "Total", [pay]), paid: ShopPage("Paid", "Payment sent")})
    task = TaskSpec.model_validate({
        "name": "shop", "start_url": start, "success": {"page_text_contains": "Payment sent"},
        "steps": [{"actions": [{"type": "type", "text": HOSTILE}]}, {"actions": [{"type": "click", "x": 150, "y": 220}]}],
    })
    audit_dir = tmp_path / "audit"
    result = asyncio.run(run_task(task, sandbox, audit_dir=audit_dir, signer=SIGNER,
                                  policy=Policy(screenshots="all", pause_on_injection=False)))
    assert result.status == "succeeded", result.reason
    with serving(audit_dir) as url:
        check_in_browser(url, result.run_id, 2, (0, HOSTILE), title, SCREEN.width, tmp_path)
