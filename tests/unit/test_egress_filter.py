"""Preventive egress without Docker: the run's domain list (intersection of task and policy),
the daemon's answer to each paused request, the client's check of an egress reply, the
run loop giving the sandbox its list and logging every refused request as a policy event,
and the proxy control client against a local fake of the proxy's endpoint."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from deskpod.agentd.browser.request_filter import RequestFilter
from deskpod.controller.egress import EgressControl
from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.gui import run_task
from deskpod.controller.gui_agent import Done
from deskpod.controller.run_api import RunControl
from deskpod.controller.task import TaskSpec
from deskpod.errors import BadReplyError, EgressControlError
from deskpod.protocol import BlockedRequest, EgressRequest, Result, intersect_domains
from deskpod.client.untrusted import check_result
from fake_sandbox import FakeSandbox, Page

START = "http://shop.test/"


@pytest.mark.parametrize(("lists", "expected"), [
    (([], []), None),
    ((["demo.test"], []), ["demo.test"]),
    (([], [".Demo.Test"]), ["demo.test"]),
    ((["demo.test", "allowed.test"], ["demo.test"]), ["demo.test"]),
    ((["a.demo.test"], ["demo.test"]), ["a.demo.test"]),
    ((["demo.test"], ["a.demo.test", "b.other.test"]), ["a.demo.test"]),
    ((["demo.test"], ["other.test"]), []),
])
def test_the_run_list_is_what_every_non_empty_list_allows(lists: tuple[list[str], ...],
                                                          expected: list[str] | None) -> None:
    assert intersect_domains(*lists) == expected


def paused(url: str, kind: str = "Image", request_id: str = "r1") -> dict[str, Any]:
    return {"requestId": request_id, "request": {"url": url, "method": "GET"}, "resourceType": kind}


def test_a_request_to_an_allowed_host_or_subdomain_continues() -> None:
    f = RequestFilter()
    f.set(["demo.test"])
    for url in ("http://demo.test/x", "https://a.demo.test:8443/y", "http://DEMO.test./z"):
        assert f.answer(paused(url)) == ("Fetch.continueRequest", {"requestId": "r1"})
    assert f.take_blocked() == []


@pytest.mark.parametrize("kind", ["Image", "XHR", "Fetch", "Ping", "Script", "Other"])
def test_a_subresource_to_another_host_fails_before_it_is_sent_and_is_reported(kind: str) -> None:
    f = RequestFilter()
    f.set(["demo.test"])
    for n in range(3):
        method, params = f.answer(paused(f"http://allowed.test/beacon?d=secret{n}", kind, f"r{n}"))
        assert (method, params) == ("Fetch.failRequest", {"requestId": f"r{n}", "errorReason": "BlockedByClient"})
    (blocked,) = f.take_blocked()
    assert blocked == BlockedRequest(url="http://allowed.test/beacon?d=secret0", host="allowed.test",
                                     resource_type=kind, document=False, count=3)
    assert f.take_blocked() == []


def test_look_alike_hosts_are_not_subdomains() -> None:
    f = RequestFilter()
    f.set(["demo.test"])
    for url in ("http://evildemo.test/", "http://demo.test.evil.test/", "http://demo.test@evil.test/"):
        assert f.answer(paused(url))[0] == "Fetch.failRequest", url


def test_a_refused_navigation_gets_deskpods_page_naming_the_host_and_the_rule() -> None:
    f = RequestFilter()
    f.set(["demo.test"])
    method, params = f.answer(paused("http://allowed.test/<b>?x=1", "Document"))
    assert method == "Fetch.fulfillRequest" and params["responseCode"] == 403
    page = base64.b64decode(params["body"]).decode()
    assert "allowed.test" in page and "task_allowlist" in page and "demo.test" in page
    assert f.take_blocked()[0].document is True


def test_no_list_and_non_network_schemes_continue() -> None:
    f = RequestFilter()
    assert f.answer(paused("http://anything.test/"))[0] == "Fetch.continueRequest"
    f.set(["demo.test"])
    assert f.answer(paused("data:text/plain,hi"))[0] == "Fetch.continueRequest"
    f.set([])
    assert f.answer(paused("http://demo.test/"))[0] == "Fetch.failRequest", "an empty list refuses every host"


def test_the_reports_of_one_observation_are_bounded() -> None:
    f = RequestFilter()
    f.set(["demo.test"])
    for n in range(500):
        f.answer(paused(f"http://h{n}.test/", "Image", str(n)))
    assert len(f.take_blocked()) == 64


def test_an_egress_reply_naming_another_list_is_refused() -> None:
    request = EgressRequest(type="egress", id="r-1", allowed_domains=["demo.test"])
    ok = Result.model_validate({"id": "r-1", "egress": {"allowed_domains": ["demo.test"]}})
    assert check_result(request, ok).egress.allowed_domains == ["demo.test"]
    for bad in ({"id": "r-1", "egress": {"allowed_domains": None}}, {"id": "r-1", "model_size": {"width": 1,
                                                                                              "height": 1}}):
        with pytest.raises(BadReplyError):
            check_result(request, Result.model_validate(bad))


def spec(allowed: list[str]) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "fake", "start_url": START, "allowed_domains": allowed, "limits": Limits().model_dump(),
        "success": {"page_text_contains": "Welcome", "timeout_s": 0.5},
        "steps": [{"actions": [{"type": "wait", "seconds": 0}]}],
    })


def test_the_run_gives_the_sandbox_its_list_first_and_logs_each_refused_request(tmp_path: Path) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    sandbox.blocked = [BlockedRequest(url="http://allowed.test/b?token=s3cret", host="allowed.test",
                                      resource_type="Ping", document=False, count=2)]
    result = asyncio.run(run_task(spec(["shop.test", "allowed.test"]), sandbox, audit_dir=tmp_path,
                                  policy=Policy(allowed_domains=["shop.test"])))
    assert result.status == "succeeded", result.reason
    assert sandbox.egress_calls == [["shop.test"], None], "the run's list first, lifted at its end"
    events = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [e for e in events if e["event"] == "egress"][0]["allowed_domains"] == ["shop.test"]
    (blocked,) = [e for e in events if e["event"] == "policy"]
    assert blocked["decision"] == "blocked" and blocked["host"] == "allowed.test" and blocked["count"] == 2
    assert blocked["rule"] == "task_allowlist" and "s3cret" not in blocked["url"]


class _Ending:
    """An agent that ends the run one way: ``finish`` (its claim), ``error`` (it raises) or
    ``cancel`` (the run's control cancels it while it plans: the service's disconnect)."""

    def __init__(self, how: str, control: RunControl) -> None:
        self.how = how
        self.control = control

    async def propose(self, observation: Any, last: Any) -> Done:
        if self.how == "error":
            raise RuntimeError("the agent crashed")
        if self.how == "cancel":
            self.control.cancel("the service connection closed")
            await asyncio.sleep(30)
        return Done("done")

    async def close(self) -> None:
        """Nothing to release."""


@pytest.mark.parametrize("how", ["finish", "error", "cancel"])
def test_the_runs_allowlist_ends_with_the_run_however_it_ends(tmp_path: Path, how: str) -> None:
    """Found on e28e94d: after a run, the next client of the sandbox was still held to the run's
    hosts (its navigation to another host the stack allows showed "Blocked by deskpod")."""
    sandbox = FakeSandbox({START: Page("Shop", "Not yet")})
    control = RunControl()
    result = asyncio.run(run_task(spec(["shop.test"]), sandbox, audit_dir=tmp_path, agent=_Ending(how, control),
                                  control=control))
    assert result.status == ("cancelled" if how == "cancel" else "failed"), result.reason
    assert sandbox.egress_calls == [["shop.test"], None]
    assert sandbox.egress is None


class _Proxy(BaseHTTPRequestHandler):
    """A stand-in for the egress proxy's control endpoint: it holds what it is given."""

    held: Any = None
    status = 200

    def do_PUT(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer: dict[str, Any] = {"allowed_domains": body["allowed_domains"]}
        if self.headers.get("Authorization") != "Bearer " + "x" * 32:
            self.send_response(401)
            answer = {"error": "bad token"}
        elif _Proxy.status != 200:
            self.send_response(_Proxy.status)
            answer = {"error": "outside the stack's allowlist", "refused": ["evil.test"]}
        else:
            _Proxy.held = body["allowed_domains"]
            self.send_response(200)
        data = json.dumps(answer).encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Proxy.held, _Proxy.status = None, 200
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_run_sets_the_proxy_list_and_restores_it_after(tmp_path: Path, proxy: str) -> None:
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    seen: list[Any] = []
    control = EgressControl(proxy, "x" * 32)
    result = asyncio.run(run_task(spec(["shop.test"]), sandbox, audit_dir=tmp_path, egress_control=control,
                                  on_event=lambda e: seen.append(_Proxy.held) if e["event"] == "egress" else None))
    assert result.status == "succeeded", result.reason
    assert seen == [["shop.test"]] and _Proxy.held is None


def test_a_run_whose_list_the_proxy_refuses_does_not_start(tmp_path: Path, proxy: str) -> None:
    _Proxy.status = 422
    sandbox = FakeSandbox({START: Page("Shop", "Welcome")})
    result = asyncio.run(run_task(spec(["shop.test"]), sandbox, audit_dir=tmp_path,
                                  egress_control=EgressControl(proxy, "x" * 32)))
    assert result.status == "failed" and result.reason.startswith("egress_control: "), result.reason
    assert sandbox.url == "about:blank", "nothing was loaded"


def test_a_bad_token_or_no_proxy_is_a_typed_error() -> None:
    with pytest.raises(EgressControlError) as refused:
        asyncio.run(EgressControl("http://127.0.0.1:9", "t").set(["demo.test"]))
    assert refused.value.detail["status"] is None
    with pytest.raises(ValueError):
        EgressControl("https://egress:3129/x", "t")
