"""Crash recovery in the real sandbox: Chromium or the X server is killed from outside
the daemon (``docker exec``) in the middle of a task; the daemon's heartbeat notices,
restarts what died, reports ``browser_restarted`` / ``display_restarted`` in the next
observation, and the session works again.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from deskpod_stack import Stack, wait_healthy, with_client
from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError
from deskpod.protocol import Observation, ObserveOptions

pytestmark = pytest.mark.integration

RECOVERY_TIMEOUT_S = 60.0

# Runs in the sandbox through `docker exec`: SIGKILL the Chromium browser process (the
# daemon's child, not a renderer) or the X server; prints the pids killed.
KILL = r"""
import json, os, signal, sys
what = sys.argv[1]
daemon = None
procs = {}
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        # Not /proc/<pid>/exe: the daemon and Xvfb are non-dumpable, their exe link unreadable.
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        continue
    procs[int(pid)] = (status["Name"].strip(), int(status["PPid"]), cmdline)
    if b"deskpod.agentd" in cmdline:
        daemon = int(pid)
targets = [
    pid for pid, (name, ppid, cmdline) in procs.items()
    if ppid == daemon
    and ((what == "chromium" and cmdline[0].endswith(b"/chromium")) or (what == "xvfb" and name == "Xvfb"))
]
for pid in targets:
    os.kill(pid, signal.SIGKILL)
print(json.dumps(targets))
"""


def kill(stack: Stack, what: str) -> list[int]:
    result = stack.container("sandbox").exec_run(["python3", "-c", KILL, what], demux=True)
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    killed: list[int] = json.loads(out)
    assert len(killed) == 1, f"expected one {what} process, killed {killed}"
    return killed


async def until_event(client: SandboxClient, event: str) -> Observation:
    """Observe until ``event`` is reported; requests may fail or find the sandbox busy meanwhile."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    seen: list[str] = []
    while time.monotonic() < deadline:
        try:
            obs = await client.act([], ObserveOptions(screenshot=False))
        except DeskpodError as exc:
            seen.append(exc.code)
        else:
            if event in obs.events:
                return obs
            seen.extend(obs.events)
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {event} within {RECOVERY_TIMEOUT_S:.0f} s; saw {seen}")


def test_killed_browser_is_detected_reported_and_restarted(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/search?q=before")
        kill(stack, "chromium")
        await until_event(client, "browser_restarted")
        obs = await client.navigate("http://demo.test/search?q=after", ObserveOptions(page_text=True))
        assert obs.screenshot is not None and "Results for" in (obs.title or ""), obs.title
        later = await client.act([], ObserveOptions(screenshot=False))
        assert "browser_restarted" not in later.events, "an event is reported once"

    with_client(stack, body)
    wait_healthy(stack, timeout_s=30)


def test_killed_x_server_is_detected_reported_and_the_display_restarted(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/search?q=before")
        kill(stack, "xvfb")
        await until_event(client, "display_restarted")
        obs = await client.navigate("http://demo.test/search?q=after", ObserveOptions(page_text=True))
        assert obs.screenshot is not None and obs.screenshot.width == obs.screenshot.screen_width
        assert "Results for" in (obs.title or ""), obs.title
        # Input reaches the new display: typing into the demo search page works.
        await client.navigate("http://demo.test/")
        obs = await client.act(
            [{"type": "click", "x": 640, "y": 400}, {"type": "type", "text": "penguin"},
             {"type": "keypress", "keys": ["Return"]}],
            ObserveOptions(screenshot=False),
        )
        assert obs.url is not None and "q=penguin" in obs.url, obs.url

    with_client(stack, body)
    wait_healthy(stack, timeout_s=30)
    assert stack.container("sandbox").attrs["RestartCount"] == 0
