"""The main job: the demo task runs end to end and success is verified from the environment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from deskpod_stack import ROOT, Stack
from deskpod.controller import load_task, run_task

pytestmark = pytest.mark.integration


def test_demo_task_runs_in_the_controller_container_and_is_verified(stack: Stack) -> None:
    """What ``docker compose up`` does: the controller service plays the demo task and exits 0."""
    try:
        result = stack.run_compose("run", "--rm", "controller", check=False, timeout=300)
    finally:
        stack.sync_token()  # the session's reset rotated it
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VERIFIED SUCCESS" in result.stdout
    assert "http://demo.test/search?q=penguin" in result.stdout
    log_path = next(line.split(": ", 1)[1] for line in result.stdout.splitlines() if "audit log:" in line)
    assert log_path.startswith("/var/lib/deskpod/audit/")
    kept = stack.run_compose("run", "--rm", "controller", "cat", log_path.strip(), check=False, timeout=120)
    assert kept.returncode == 0 and '"event":"run_finished"' in kept.stdout, "the audit log outlives the container"


def test_the_demo_passes_with_every_confirmation_denied(stack: Stack) -> None:
    """The guard of the third security review: what the fixes judge riskier must not break
    ordinary use. The demo (a click into a search field, typing, Enter) runs under
    ``deskpod run --confirm deny``, in the controller container as compose ships it: a step
    judged L2 or L3 would be denied and the run would end unverified."""
    try:
        result = stack.run_compose("run", "--rm", "controller", "deskpod", "run", "/opt/deskpod/tasks/demo.yaml",
                                   "--sandbox", "ws://sandbox:8765/v1/ws", "--confirm", "deny",
                                   check=False, timeout=300)
    finally:
        stack.sync_token()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VERIFIED SUCCESS" in result.stdout, result.stdout


def test_demo_task_from_the_host_writes_an_audit_log(stack: Stack, tmp_path: Path) -> None:
    task = load_task(ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml")
    result = asyncio.run(run_task(task, stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "succeeded", result.reason
    assert result.url == "http://demo.test/search?q=penguin"
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] != "state"] == [
        "run_started", "egress", "navigate", "step", "step", "step", "verify", "recording", "run_finished"]
    # The run was recorded; a successful run's recording is not kept (the default retention,
    # "failures"), its hash is.
    recording = events[-2]
    assert recording["recorded"] is True and recording["kept"] is False and recording["frames"] >= 2, recording
    assert len(recording["sha256"]) == 64 and not (tmp_path / "recordings" / f"{result.run_id}.mp4").exists()
    assert [e["dst"] for e in events if e["event"] == "state"][-3:] == ["observing", "verifying", "succeeded"]
    steps = [e for e in events if e["event"] == "step"]
    assert all(len(e["screenshot_sha256"]) == 64 and e["timings"] and e["url"] for e in steps)
    assert steps[1]["actions"] == [{"type": "type", "text": "penguin"}]
    assert events[-1]["status"] == "succeeded"


def test_a_claimed_but_unverified_task_fails(stack: Stack, tmp_path: Path) -> None:
    """Success comes from the page, not from the steps having run: a task that never submits fails."""
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text()
    body = body.replace("keys: [ENTER]", "keys: [Tab]").replace("timeout_s: 15", "timeout_s: 2")
    path = tmp_path / "no-submit.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "failed"
    assert result.reason.startswith("not_verified:") and "does not match" in result.reason


def test_sensitive_steps_are_redacted_in_the_audit_log(stack: Stack, tmp_path: Path) -> None:
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text()
    body = body.replace("- {type: type, text: penguin}", "- {type: type, text: penguin}\n    sensitive: true")
    path = tmp_path / "sensitive.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "succeeded", result.reason
    text = result.audit_log.read_text()
    assert '"[redacted 7 chars]"' in text
    assert '"text":"penguin"' not in text


def test_step_limit_stops_the_run(stack: Stack, tmp_path: Path) -> None:
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text().replace("max_steps: 10", "max_steps: 2")
    path = tmp_path / "limited.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "failed" and "max_steps=2" in result.reason
    assert result.steps == 2


def test_daemon_fails_fast_with_a_clear_message_without_a_display(stack: Stack) -> None:
    """With no X server to capture from, startup fails at once and says why."""
    result = stack.run_compose(
        "run", "--rm", "-e", "DESKPOD_MANAGE_SESSION=0", "-e", "DESKPOD_DISPLAY=:42", "sandbox",
        check=False, timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "startup health check failed" in output, output[-3000:]


def test_the_desktop_starts_while_the_server_loads_and_its_failure_stops_the_daemon(stack: Stack) -> None:
    """Cold start: Xvfb, the window manager and Chromium start while the daemon's server
    modules load and its app is built (Chromium's start is most of a cold start), not
    after; a Chromium that cannot start still stops the daemon at startup, with the reason."""
    result = stack.run_compose("run", "--rm", "-e", "DESKPOD_CHROMIUM=/bin/false", "sandbox", check=False, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    log = next((stream for stream in (result.stderr, result.stdout) if "Waiting for application startup" in stream), "")
    assert "startup health check failed: chromium exited with status 1 during start" in log, output[-3000:]
    assert log.index("starting chromium") < log.index("Waiting for application startup"), log[-3000:]


def test_the_images_font_cache_is_valid_in_a_fresh_container(stack: Stack) -> None:
    """Chromium's first start in a container reads fontconfig's cache from the image; with
    a cache the image's layers had made stale, the first fontconfig client rescanned every
    font into a user cache (0.26 s of each cold start)."""
    probe = ("import os, subprocess; subprocess.run(['fc-list'], check=True, stdout=subprocess.DEVNULL); "
             "cache = os.path.expanduser('~/.cache/fontconfig'); "
             "print('user cache:', sorted(os.listdir(cache)) if os.path.isdir(cache) else None)")
    result = stack.run_compose("run", "--rm", "--no-deps", "--entrypoint", "python3", "sandbox", "-c", probe,
                               check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "user cache: None" in result.stdout, result.stdout + result.stderr


def test_leaving_the_tasks_domains_stops_the_run(stack: Stack, tmp_path: Path) -> None:
    """Typing another (proxy-allowed) site into the address bar ends the run as policy_denied
    before Enter is pressed (the address bar is judged like a link), and the audit log
    records the refusal."""
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text()
    body = body.replace(
        "  - actions:\n      - {type: click, x: 640, y: 400}",
        "  - actions:\n      - {type: keypress, keys: [ctrl, l]}\n      - {type: wait, seconds: 0.3}"
        "\n  - actions:\n      - {type: type, text: \"http://allowed.test/\"}"
        "\n      - {type: keypress, keys: [Return]}\n      - {type: wait_for, url_matches: allowed, timeout_s: 10}",
    )
    path = tmp_path / "leave.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "failed" and result.reason.startswith("policy_denied:"), result.reason
    assert "domain_not_allowed" in result.reason and "allowed.test" in result.reason
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    policy = [e for e in events if e["event"] == "policy"]
    assert policy and policy[0]["rule"] == "domain_not_allowed" and policy[0]["where"] == "omnibox"


def test_repeating_the_same_action_on_the_same_screen_is_a_loop(stack: Stack, tmp_path: Path) -> None:
    """A click on blank space, four times, leaves screen and URL unchanged: the third
    identical step stops the run (max_repeats: 3) instead of retrying blindly."""
    body = (ROOT / "runtime" / "deskpod" / "tasks" / "demo.yaml").read_text()
    body = body.replace("  - actions:\n      - {type: click, x: 640, y: 400}",
                        "\n".join(["  - actions:\n      - {type: click, x: 640, y: 700}"] * 4))
    path = tmp_path / "loop.yaml"
    path.write_text(body)
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path))
    assert result.status == "failed" and "loop detected" in result.reason, result.reason
    assert result.steps == 3
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [e["repeats"] for e in events if e["event"] == "loop"] == [3]
    assert all(len(e["screenshot_sha256"]) == 64 for e in events if e["event"] == "step")
