"""Preventive egress, per task, against a real stack: the browser's interception and the proxy's run list.

The stack's proxy allows ``demo.test`` and ``allowed.test``; each task here allows only
``demo.test``. ``allowed.test`` is a second demo server and the witness: its request log
(the container's output) shows whether anything reached it. Each bypass the detective
URL check missed (a meta-refresh bounce, a form posted into a hidden iframe, image /
fetch / sendBeacon / worker beacons, an omnibox URL that bounces through the demo site's
open redirect) must leave nothing in the witness's log, and every refusal must be a
``policy`` record with the host in the run's audit log. Then the second line: with the
run's list at the proxy, a request straight from the sandbox container (an attacker in
the daemon's zone, bypassing Chromium) to ``allowed.test`` is refused, and the control
endpoint refuses the sandbox's own attempts to change the list.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod_stack import Stack, with_client
from deskpod.controller import load_task, run_task
from deskpod.controller.egress import EgressControl
from deskpod.controller.run_api import RunResult
from deskpod.errors import EgressControlError
from deskpod.protocol import ObserveOptions

pytestmark = pytest.mark.integration

WAIT = {"type": "wait", "seconds": 1.5}


def witness_log(stack: Stack) -> str:
    """What the ``allowed.test`` server logged (one line per request it received)."""
    return stack.container("allowed").logs().decode(errors="replace")


def control(stack: Stack) -> EgressControl:
    return EgressControl(stack.egress_control_url, stack.env["DESKPOD_EGRESS_CONTROL_TOKEN"])


def play(stack: Stack, tmp_path: Path, start: str, steps: list[list[dict[str, Any]]],
         egress: EgressControl | None = None) -> tuple[RunResult, list[dict[str, Any]]]:
    body = {"name": "egress-test", "start_url": start, "allowed_domains": ["demo.test"],
            "limits": {"max_steps": 10, "max_wall_time_s": 90}, "steps": [{"actions": a} for a in steps],
            "success": {"timeout_s": 1, "page_text_contains": "never shown"}}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(body))
    result = asyncio.run(run_task(load_task(path), stack.ws_url, stack.token, audit_dir=tmp_path / "audit",
                                  egress_control=egress))
    time.sleep(0.5)  # the witness's log line, if any, is written
    return result, [json.loads(line) for line in result.audit_log.read_text().splitlines()]


def blocked(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "policy" and e.get("decision") == "blocked"]


@pytest.mark.parametrize(("fixture", "marker", "types"), [
    ("egress-meta-bounce", "egress-meta", {"Document"}),
    ("egress-iframe-post", "egress-iframe", {"Document"}),
    # DevTools reports a fetch() as "XHR" on the browser target.
    ("egress-beacons", "egress-beacon", {"Image", "XHR", "Ping"}),
])
def test_a_page_carries_nothing_to_a_host_off_the_task(stack: Stack, tmp_path: Path, fixture: str, marker: str,
                                                        types: set[str]) -> None:
    tag = secrets.token_hex(8)
    result, events = play(stack, tmp_path, f"http://demo.test/fixtures/{fixture}?tag={tag}", [[WAIT]])
    if fixture == "egress-beacons":
        marker = f"tag={tag}"  # the control test below makes this page's requests reach the witness
    assert marker not in witness_log(stack), f"{fixture}: a request reached allowed.test"
    refused = [e for e in blocked(events) if e["host"] == "allowed.test"]
    assert refused and all(e["rule"] == "task_allowlist" for e in refused), events
    assert types <= {e["resource_type"] for e in refused}, refused
    if fixture != "egress-iframe-post":  # a POST carries its secret in the body, not the URL
        assert "SECRET" in " ".join(e["url"] for e in refused), "the record names what was stopped"
    assert result.status == "failed"


def test_without_a_run_list_the_same_beacons_do_reach_the_witness(stack: Stack) -> None:
    """The control for the tests above: with no run list in the browser (the detective
    check alone, as on 27f402b) every beacon of the page reaches allowed.test."""
    tag = secrets.token_hex(8)

    async def body(client: Any) -> None:
        assert await client.set_egress(None) is None
        await client.navigate(f"http://demo.test/fixtures/egress-beacons?tag={tag}")
        await asyncio.sleep(1.5)

    with_client(stack, body)
    time.sleep(0.5)
    reached = [line for line in witness_log(stack).splitlines() if f"tag={tag}" in line]
    assert {via for via in ("image", "fetch", "beacon", "worker") if any(f"via={via}" in r for r in reached)} \
        == {"image", "fetch", "beacon", "worker"}, reached


def test_an_omnibox_url_bouncing_through_an_open_redirect_never_reaches_the_other_host(
    stack: Stack, tmp_path: Path
) -> None:
    """Typing into the address bar a URL of the allowed site that 302s off the task's
    domains: the hop is refused in the browser, which shows deskpod's blocked page, and the
    run stops on the tab's URL."""
    bounce = "http://demo.test/redirect?to=http://allowed.test/egress-omnibox%3Fd%3DSECRET-omnibox"
    result, events = play(stack, tmp_path, "http://demo.test/", [
        [{"type": "keypress", "keys": ["ctrl", "l"]}],
        [{"type": "type", "text": bounce}],
        [{"type": "keypress", "keys": ["Return"]}, WAIT],
    ])
    assert "egress-omnibox" not in witness_log(stack)
    assert any(e["host"] == "allowed.test" and e["document"] for e in blocked(events)), events
    assert result.status == "failed" and result.reason.startswith("policy_denied:"), result.reason


def test_a_blocked_navigation_shows_deskpods_page_naming_the_host_and_the_rule(stack: Stack) -> None:
    async def body(client: Any) -> Any:
        assert await client.set_egress(["demo.test"]) == ["demo.test"]
        try:
            obs = await client.navigate("http://allowed.test/egress-page", ObserveOptions(page_text=True))
        finally:
            await client.set_egress(None)
        return obs

    obs = with_client(stack, body)
    assert "deskpod blocked this page" in (obs.page_text or "")
    assert "allowed.test" in (obs.page_text or "") and "task_allowlist" in (obs.page_text or "")
    assert ("allowed.test", True) in [(b.host, b.document) for b in obs.blocked]
    assert "egress-page" not in witness_log(stack)


def _through_proxy(stack: Stack, url: str) -> int:
    """The HTTP status of ``url`` fetched straight from the sandbox container through the
    egress proxy, as any process of the daemon's zone can (not through Chromium)."""
    code = (
        "import json, urllib.request, urllib.error\n"
        "opener = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://egress:3128'}))\n"
        "try:\n"
        f"    status = opener.open({url!r}, timeout=10).status\n"
        "except urllib.error.HTTPError as exc:\n"
        "    status = exc.code\n"
        "print(json.dumps(status))\n"
    )
    return int(stack.exec_python("sandbox", code))


def _control_from_sandbox(stack: Stack, token: str) -> int:
    """The status the proxy's control endpoint answers the sandbox container's PUT with."""
    code = (
        "import json, urllib.request, urllib.error\n"
        "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
        "req = urllib.request.Request('http://egress:3129/v1/allowlist', method='PUT',\n"
        "    data=json.dumps({'allowed_domains': None}).encode(),\n"
        f"    headers={{'Authorization': 'Bearer ' + {token!r}, 'Content-Type': 'application/json'}})\n"
        "try:\n"
        "    status = opener.open(req, timeout=10).status\n"
        "except urllib.error.HTTPError as exc:\n"
        "    status = exc.code\n"
        "print(json.dumps(status))\n"
    )
    return int(stack.exec_python("sandbox", code))


def test_the_proxy_refuses_a_stack_host_the_task_does_not_allow_even_from_inside_the_sandbox(stack: Stack) -> None:
    egress = control(stack)
    assert _through_proxy(stack, "http://allowed.test/egress-proxy-before") == 200
    asyncio.run(egress.set(["demo.test"]))
    try:
        assert _through_proxy(stack, "http://allowed.test/egress-proxy-during") == 403
        assert _through_proxy(stack, "http://demo.test/healthz") == 200
        # The sandbox can reach the endpoint but holds no token: a guess, or the sandbox's
        # own control token, is refused, and the run's list stays.
        assert _control_from_sandbox(stack, secrets.token_urlsafe(32)) == 401
        assert _control_from_sandbox(stack, stack.token) == 401
        assert _through_proxy(stack, "http://allowed.test/egress-proxy-still") == 403
    finally:
        asyncio.run(egress.set(None))
    assert _through_proxy(stack, "http://allowed.test/egress-proxy-after") == 200
    log = witness_log(stack)
    assert "egress-proxy-before" in log and "egress-proxy-after" in log
    assert "egress-proxy-during" not in log and "egress-proxy-still" not in log


def test_the_proxy_refuses_a_run_list_wider_than_the_stacks(stack: Stack) -> None:
    with pytest.raises(EgressControlError) as refused:
        asyncio.run(control(stack).set(["demo.test", "blocked.test"]))
    assert refused.value.detail == {"status": 422, "refused": ["blocked.test"]}
    bad = EgressControl(stack.egress_control_url, hashlib.sha256(b"x").hexdigest())
    with pytest.raises(EgressControlError) as unauthorized:
        asyncio.run(bad.set(["demo.test"]))
    assert unauthorized.value.detail["status"] == 401


def test_a_run_with_the_proxy_control_holds_its_list_there_and_restores_the_stacks(
    stack: Stack, tmp_path: Path
) -> None:
    tag = secrets.token_hex(8)
    result, events = play(stack, tmp_path, f"http://demo.test/fixtures/egress-beacons?tag={tag}", [[WAIT]],
                          control(stack))
    assert [e["proxy"] for e in events if e["event"] == "egress"] == ["set"]
    assert f"tag={tag}" not in witness_log(stack)
    assert result.status == "failed"
    assert _through_proxy(stack, "http://allowed.test/egress-proxy-restored") == 200
