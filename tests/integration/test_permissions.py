"""Browser permission requests against a real stack: denied at once by default, granted by
the task's setting, named in the observation and written to the audit log.

The fixture page (``images/demo/fixtures/permissions.html``) asks, on a click, for the
location, notifications, camera, microphone, clipboard and MIDI, and writes each outcome
to its ``STATE`` line ("pending" until answered). Those APIs exist only in a secure
context, and the demo site is plain http (the sandbox's managed policy blocks
``localhost``), so the page is served over HTTPS by the operator-CA stack's demo site
``trusted.test`` (``tls_sites.py``). On e28e94d every request but the camera's and the
microphone's (the sandbox has no such device) stays pending behind a prompt.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod.client import SandboxClient
from deskpod.controller import load_task, run_task
import deskpod.protocol as protocol
from deskpod_stack import Stack, page_state, with_client

pytestmark = pytest.mark.integration

ASK = {"type": "click", "x": 640, "y": 250}
"""A click on the fixture's button (page y 0-300, below the browser's toolbar)."""

ASKED = {"geolocation", "notifications", "camera", "microphone", "clipboard_read", "midi"}

PARIS = {"lat": 48.8584, "lon": 2.2945}

OBSERVE = protocol.ObserveOptions(screenshot=False, page_text=True)

URL = "https://trusted.test/fixtures/permissions"
ORIGIN = "https://trusted.test"


async def ask_all(client: SandboxClient, url: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], list[Any], float]:
    """Open the fixture, click its button and observe until no request is pending (or the
    timeout). Returns the page's state, the observations from the click's reply on, and the
    seconds from the click's reply to the last answer."""
    await client.navigate(url, OBSERVE)
    seen = [await client.act([ASK], OBSERVE)]
    clicked = time.monotonic()
    while True:
        state = page_state(seen[-1].page_text)
        if "pending" not in state.values() or time.monotonic() - clicked > timeout_s:
            return state, seen, time.monotonic() - clicked
        await asyncio.sleep(0.2)
        seen.append(await client.act([], OBSERVE))


def asked(seen: list[Any]) -> set[tuple[str, bool, str]]:
    """Every permission request the observations named, as ``(name, granted, origin)``."""
    return {(r.name, r.granted, r.origin) for obs in seen for r in obs.permission_requests}


def test_every_request_is_denied_at_once_and_named_in_the_observation(ca_stack: Stack) -> None:
    async def by_default(client: SandboxClient) -> Any:
        return await ask_all(client, URL)

    state, seen, answered_s = with_client(ca_stack, by_default)
    assert state.get("secure") is None, "the fixture is not in a secure context"
    assert "pending" not in state.values(), state
    assert answered_s < 5, f"requests answered only after {answered_s:.1f} s"
    assert state["geolocation"].startswith("denied 1"), state
    assert state["notifications"] == "denied", state
    assert state["clipboard_read"] == "denied NotAllowedError", state
    assert state["midi"] == "denied NotAllowedError", state
    assert not state["camera"].startswith("granted") and not state["microphone"].startswith("granted"), state
    assert asked(seen) == {(name, False, ORIGIN) for name in ASKED}, asked(seen)


def test_a_granted_location_answers_the_configured_position(ca_stack: Stack) -> None:
    grants = protocol.PermissionGrants.model_validate({"granted": ["geolocation"], "position": PARIS})

    async def granted(client: SandboxClient) -> Any:
        held = await client.set_permissions(grants)
        try:
            return held, await ask_all(client, URL)
        finally:
            await client.set_permissions(protocol.PermissionGrants())

    held, (state, seen, _) = with_client(ca_stack, granted)
    assert held == grants
    assert state["geolocation"] == "granted 48.8584,2.2945", state
    assert state["notifications"] == "denied", state
    assert {("geolocation", True, ORIGIN), ("midi", False, ORIGIN)} <= asked(seen), asked(seen)


def test_a_run_grants_the_tasks_permissions_audits_each_request_and_denies_again_after(
    ca_stack: Stack, tmp_path: Path
) -> None:
    task = {"name": "permissions", "start_url": URL,
            "permissions": {"geolocation": {"allow": True, "position": PARIS},
                            "notifications": "deny"},
            "limits": {"max_steps": 5, "max_wall_time_s": 90},
            "steps": [{"actions": [ASK]}, {"actions": [{"type": "wait", "seconds": 1}]}],
            "success": {"timeout_s": 5, "page_text_contains": "granted 48.8584,2.2945"}}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    result = asyncio.run(run_task(load_task(path), ca_stack.ws_url, ca_stack.token, audit_dir=tmp_path / "audit"))
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert result.status == "succeeded", result.reason
    setting = next(e for e in events if e["event"] == "permissions")
    assert setting["granted"] == ["geolocation"] and setting["default"] == "deny", setting
    decided = {e["name"]: (e["decision"], e["rule"]) for e in events if e["event"] == "permission"}
    assert decided["geolocation"] == ("granted", "task_permissions"), decided
    assert {decided[name] for name in ASKED - {"geolocation"}} == {("denied", "deny_by_default")}, decided

    async def after(client: SandboxClient) -> Any:
        return await ask_all(client, URL)

    state, _, _ = with_client(ca_stack, after)
    assert state["geolocation"].startswith("denied 1"), "the run's grant outlived the run"
