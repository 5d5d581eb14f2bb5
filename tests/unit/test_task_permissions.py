"""Browser permissions: the task's setting refused at load when it cannot hold, the grants it
makes, their wire model, the daemon's reading of a page's record, and the run's audit events."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from deskpod.agentd.browser.permissions import permission_hook_script, requests_seen
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec, load_task
from deskpod.errors import TaskFileError
from deskpod.protocol import GeoPosition, PermissionGrants, PermissionRequest, PermissionsRequest
from fake_sandbox import FakeSandbox, Page

START = "https://maps.test/"


def task(permissions: object) -> dict[str, object]:
    return {"name": "p", "start_url": START, "permissions": permissions, "success": {"page_text_contains": "Welcome"},
            "steps": [{"actions": [{"type": "wait", "seconds": 0}]}]}


@pytest.mark.parametrize(("permissions", "message"), [
    ({"geolocation": "allow"}, "an allowed location needs a position"),
    ({"geolocation": {"allow": True}}, "an allowed location needs a position"),
    ({"notifications": {"allow": True, "position": {"lat": 1, "lon": 2}}}, "a position is only for an allowed"),
    ({"geolocation": {"allow": False, "position": {"lat": 1, "lon": 2}}}, "a position is only for an allowed"),
    ({"geolocation": {"allow": True, "position": {"lat": 91, "lon": 0}}}, "permissions.geolocation"),
    ({"geolocation": {"allow": True, "position": {"lat": 1}}}, "permissions.geolocation"),
    ({"webcam": "allow"}, "permissions.webcam"),
    ({"notifications": "ask"}, "permissions.notifications"),
    ({"notifications": True}, "permissions.notifications"),
])
def test_a_setting_that_cannot_hold_is_refused_when_the_task_is_loaded(tmp_path: Path, permissions: object,
                                                                       message: str) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task(permissions)))
    with pytest.raises(TaskFileError, match=message):
        load_task(path)


def test_the_setting_grants_what_it_allows_and_nothing_else() -> None:
    spec = TaskSpec.model_validate(task({
        "geolocation": {"allow": True, "position": {"lat": 48.8584, "lon": 2.2945}},
        "notifications": "deny", "midi": "allow", "camera": {"allow": False}}))
    grants = spec.permission_grants()
    assert grants.granted == ["geolocation", "midi"]
    assert grants.position == GeoPosition(lat=48.8584, lon=2.2945, accuracy_m=50.0)
    assert TaskSpec.model_validate(task({})).permission_grants() == PermissionGrants()


def test_the_wire_grants_need_a_position_exactly_with_geolocation() -> None:
    with pytest.raises(ValidationError, match="needs a position"):
        PermissionGrants(granted=["geolocation"])
    with pytest.raises(ValidationError, match="needs a position"):
        PermissionGrants(position=GeoPosition(lat=0, lon=0))
    with pytest.raises(ValidationError, match="granted twice"):
        PermissionGrants(granted=["midi", "midi"])
    with pytest.raises(ValidationError):
        PermissionsRequest.model_validate({"type": "permissions", "id": "1", "grants": {"granted": ["usb"]}})


def test_a_pages_record_is_read_as_known_names_counted_with_the_answer_in_force() -> None:
    grants = PermissionGrants(granted=["geolocation"], position=GeoPosition(lat=0, lon=0))
    taken = ["midi", "geolocation", "midi", "usb", 7, {"name": "camera"}, "geolocation"]
    seen = requests_seen(taken, "T1", "https://user:pw@maps.test:8443/a?b#c", grants)
    assert seen == [
        PermissionRequest(name="midi", tab="T1", origin="https://maps.test:8443", granted=False, count=2),
        PermissionRequest(name="geolocation", tab="T1", origin="https://maps.test:8443", granted=True, count=2),
    ]
    assert requests_seen({"geolocation": 1}, "T1", "https://maps.test/", grants) == []
    assert requests_seen(None, "T1", "about:blank", grants) == []


def test_the_hook_script_names_its_key_and_every_request_it_wraps() -> None:
    script = permission_hook_script("__k")
    assert '"__k"' in script
    for call in ("getCurrentPosition", "watchPosition", "requestPermission", "getUserMedia", "readText",
                 "requestMIDIAccess"):
        assert call in script


def test_a_run_sends_its_grants_audits_each_request_by_its_own_grants_and_denies_again_after(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Maps", "Welcome")})
    # The daemon's flag is page data the controller does not trust: it decides from the task.
    sandbox.permission_requests = [
        PermissionRequest(name="geolocation", tab="t1", origin="https://maps.test", granted=False),
        PermissionRequest(name="notifications", tab="t1", origin="https://maps.test", granted=True, count=3),
    ]
    spec = TaskSpec.model_validate(task({"geolocation": {"allow": True, "position": {"lat": 1.5, "lon": 2.5}}}))
    result = asyncio.run(run_task(spec, sandbox, audit_dir=tmp_path))
    assert result.status == "succeeded", result.reason
    assert sandbox.permission_calls == [spec.permission_grants(), PermissionGrants()], "granted, then denied again"
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    (setting,) = [e for e in events if e["event"] == "permissions"]
    assert setting["granted"] == ["geolocation"] and setting["position"]["lat"] == 1.5
    asked = [(e["name"], e["decision"], e["rule"], e["count"]) for e in events if e["event"] == "permission"]
    assert asked == [("geolocation", "granted", "task_permissions", 1),
                     ("notifications", "denied", "deny_by_default", 3)]


def test_a_run_that_grants_nothing_sends_nothing(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Maps", "Welcome")})
    result = asyncio.run(run_task(TaskSpec.model_validate(task({"notifications": "deny"})), sandbox,
                                  audit_dir=tmp_path))
    assert result.status == "succeeded", result.reason
    assert sandbox.permission_calls == []
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert not [e for e in events if e["event"] == "permissions"]
