"""``deskpod eval`` runs the shipped regression suite over a Docker pool, as CI runs it.

The images are built with compose (cached); the demo site runs as ``demo.test`` on a
network of this module's own, which every pool slot's egress proxy joins. The command
runs as a subprocess with ``--parallel 4``; its report is printed, every task's
outcome asserted (the refusals pass only when refused the expected way), every audit
log verified, and the HTML report opened in a real browser. Teardown removes every
container and network with this module's name prefix, and the site, also when a
test fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from playwright.async_api import async_playwright, expect

from deskpod.backend.config import LABEL_POOL
from deskpod_stack import DEMO_IMAGE, ROOT, build_images

pytestmark = pytest.mark.integration

DESKPOD = str(Path(sys.executable).parent / "deskpod")
SUITE = ROOT / "runtime" / "deskpod" / "tasks" / "regression" / "suite.yaml"
PREFIX = f"deskpodev{os.getpid()}"
"""The name prefix of every container and network the eval's pool makes."""
NETWORK = f"{PREFIX}_outside"
EXPECTED = {
    "search": ["succeeded"], "form-validation": ["succeeded"], "login-snapshot": ["succeeded"],
    "login-without-snapshot": ["failed", "not_verified"], "multi-tab": ["succeeded"], "download": ["succeeded"],
    "pay-denied": ["cancelled"], "allowlist-refusal": ["failed", "policy_denied"], "injection-pause": ["cancelled"],
    "mini-billing": ["succeeded"], "mini-billing-claim-only": ["failed", "not_verified"],
}
"""Each shipped task's outcomes: its status first, then its reason's code or the refused claim."""


def _ours(client: Any) -> list[str]:
    """Names of the pool containers this module's prefix names (listed without inspecting
    each, as other engineers' containers come and go meanwhile)."""
    rows = client.api.containers(all=True, filters={"label": LABEL_POOL, "name": PREFIX})
    return [name.lstrip("/") for row in rows for name in row["Names"] if name.lstrip("/").startswith(PREFIX)]


def _remove_ours(client: Any) -> None:
    for name in _ours(client):
        try:
            client.api.remove_container(name, force=True, v=True)
        except docker.errors.NotFound:
            pass
    for row in client.api.networks(names=[PREFIX]):
        if row["Name"].startswith(PREFIX) and row["Name"] != NETWORK:
            client.api.remove_network(row["Id"])


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """Builds the images and starts the demo site as ``demo.test``; yields its network's name."""
    client = docker.from_env()
    client.ping()
    build_images()
    container = None
    try:
        client.networks.create(NETWORK, driver="bridge", labels={"deskpod.test": "eval"})
        endpoint = client.api.create_endpoint_config(aliases=["demo.test"])
        container = client.containers.create(DEMO_IMAGE, name=f"{PREFIX}_demo", network=NETWORK,
                                             networking_config={NETWORK: endpoint}, read_only=True,
                                             cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
                                             labels={"deskpod.test": "eval"})
        container.start()
        yield NETWORK
    finally:
        _remove_ours(client)
        if container is not None:
            container.remove(force=True, v=True)
        for net in client.networks.list(names=[NETWORK]):
            net.remove()


def test_the_shipped_suite_passes_at_parallel_4_and_its_report_opens_in_a_browser(site: str, tmp_path: Path) -> None:
    env = dict(os.environ, DESKPOD_OUTSIDE_NETWORK=site, DESKPOD_EGRESS_ALLOWLIST="demo.test",
               DESKPOD_NAME_PREFIX=PREFIX, DESKPOD_STATE_DIR=str(tmp_path / "state"),
               DESKPOD_AUDIT_KEY=str(tmp_path / "key" / "signing.key"))
    report = tmp_path / "report"
    started = time.monotonic()
    run = subprocess.run([DESKPOD, "eval", str(SUITE), "--parallel", "4", "--report", str(report),
                          "--audit-dir", str(tmp_path / "audit")],
                         env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    print(run.stdout)
    print(run.stderr[-4000:], file=sys.stderr)
    print(f"deskpod eval --parallel 4: {elapsed:.1f} s")
    document = json.loads((report / "report.json").read_text())
    outcomes = {r["task"]: r["outcomes"] for r in document["runs"]}
    assert outcomes == EXPECTED, [(r["task"], r["outcomes"], r["mismatch"], r["reason"]) for r in document["runs"]]
    assert all(r["status"] == "passed" and r["audit"]["verified"] for r in document["runs"])
    assert document["success_rate"] == 1.0 and document["infrastructure_errors"] == 0
    assert run.returncode == 0, run.stderr[-2000:]
    assert "11 of 11 runs passed" in run.stdout
    by_task = {r["task"]: r for r in document["runs"]}
    assert by_task["login-snapshot"]["steps"] == 0  # the restored session satisfied the check at once
    assert by_task["pay-denied"]["scene"] and by_task["injection-pause"]["steps"] == 0
    assert _remaining() == []

    async def look() -> None:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
            try:
                page = await browser.new_page()
                blocked: list[str] = []
                page.on("request", lambda r: blocked.append(r.url) if not r.url.startswith(("file:", "data:"))
                        else None)
                await page.goto((report / "report.html").as_uri())
                await expect(page.locator("#rate")).to_contain_text("Success rate: 100.0% (11 of 11 runs passed)")
                await expect(page.locator("tr.run")).to_have_count(len(EXPECTED))
                for task in EXPECTED:
                    row = page.locator(f'tr.run[data-task="{task}"]')
                    await expect(row.locator(".status")).to_have_text("passed")
                await expect(page.locator('tr.run[data-task="pay-denied"] img.scene')).to_be_visible()
                # The stylesheet applied under the page's own CSP (its hash admits it).
                colour = await page.locator('tr.run[data-task="search"] .status').evaluate(
                    "e => getComputedStyle(e).color")
                assert colour == "rgb(7, 94, 7)", colour
                assert blocked == [], blocked
            finally:
                await browser.close()

    asyncio.run(look())


def _remaining() -> list[str]:
    """Containers of the eval's pool still there after the command ended (it destroys its pool)."""
    return _ours(docker.from_env())


DESKTOP_CI = ROOT / "runtime" / "deskpod" / "tasks" / "desktop" / "ci.yaml"
DESKTOP_EXPECTED = {
    "terminal-command": ["succeeded"], "terminal-command-idle": ["failed", "not_verified"],
    "editor-save": ["succeeded"], "editor-save-idle": ["failed", "not_verified"],
    "save-dialog": ["succeeded"], "save-dialog-idle": ["failed", "not_verified"],
    "terminal-opens-editor": ["succeeded"], "terminal-opens-editor-idle": ["failed", "not_verified"],
    "copy-between-apps": ["succeeded"], "copy-between-apps-idle": ["failed", "not_verified"],
}
"""The desktop suite's CI subset: each task passes, and its idle twin (an agent that does
nothing) fails the same check."""


def test_the_desktop_suite_s_ci_subset_passes_on_desktop_slots_with_gui_actions_only(site: str, tmp_path: Path) -> None:
    """``deskpod eval`` over Docker slots with the desktop profile (``DESKPOD_DESKTOP=on``): a
    command typed into the terminal, a file edited and saved in the editor, a Save As dialog,
    the editor started from the terminal and text copied from the word processor into the editor,
    verified from the workspace's files; the same tasks
    with an agent that does nothing fail their checks; no run's audit log holds anything but GUI
    actions (no ``exec``)."""
    env = dict(os.environ, DESKPOD_OUTSIDE_NETWORK=site, DESKPOD_EGRESS_ALLOWLIST="demo.test",
               DESKPOD_NAME_PREFIX=PREFIX, DESKPOD_STATE_DIR=str(tmp_path / "state"),
               DESKPOD_AUDIT_KEY=str(tmp_path / "key" / "signing.key"), DESKPOD_DESKTOP="on")
    report, audit = tmp_path / "report", tmp_path / "audit"
    run = subprocess.run([DESKPOD, "eval", str(DESKTOP_CI), "--parallel", "2", "--report", str(report),
                          "--audit-dir", str(audit)], env=env, capture_output=True, text=True, timeout=600)
    print(run.stdout)
    print(run.stderr[-4000:], file=sys.stderr)
    document = json.loads((report / "report.json").read_text())
    outcomes = {r["task"]: r["outcomes"] for r in document["runs"]}
    assert outcomes == DESKTOP_EXPECTED, [(r["task"], r["outcomes"], r["reason"]) for r in document["runs"]]
    assert all(r["status"] == "passed" and r["audit"]["verified"] for r in document["runs"])
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for log in audit.rglob("*.jsonl") for line in log.read_text().splitlines()]
    steps = [r for r in records if r.get("event") == "step"]
    assert steps and not [r for r in records if r.get("event") in ("exec", "tool", "workspace")], \
        sorted({r.get("event") for r in records})
    assert {a["type"] for s in steps for a in s.get("actions", [])} <= {"type", "keypress", "wait", "window_focus"}
    assert _remaining() == []
