"""``deskpod serve`` gives a session's run the egress proxy of the sandbox it drives, and no other.

The stack's proxy control (``DESKPOD_EGRESS_CONTROL``) only for the stack's sandbox
(``DESKPOD_SANDBOX_URL``), whatever the opener claims, and however the opener spells its URL
(the sandbox is recognised by the endpoint its URL reaches: a query, another path, a port
written ``08765``, an upper-case host or its IP address is still the stack's sandbox); a
leased pool slot's own proxy when the opener names it; none for any other sandbox; and no
session at all when the stack sandbox's own name does not resolve (it might be that one).
``run_task`` and the daemon connection are replaced by recorders, and host names by a fixed
table: what is checked is what the service hands the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import deskpod.client
import deskpod.service.server.endpoints as endpoints
import deskpod.service.server.runs as serve_module
from deskpod.errors import SandboxError
from deskpod.controller.egress import EgressControl
from deskpod.service.server.connection import Connection
from deskpod.service.server.runs import open_session
from deskpod.service.server.service_state import ControllerService
from deskpod.service.messages import OpenMessage
from deskpod.protocol import Size

pytestmark = pytest.mark.timeout(30)

STACK_URL = "ws://sandbox:8765/v1/ws"
SLOT_URL = "ws://172.30.0.3:8765/v1/ws"
STACK_CONTROL = EgressControl("http://egress:3129", "stack-egress-token-0123456789")
NAMES = {"sandbox": frozenset({"172.30.0.2"}), "stack-alias.test": frozenset({"172.30.0.9", "172.30.0.2"})}
"""The host names the tests' network knows (an IP literal resolves to itself; any other name fails)."""


@pytest.fixture(autouse=True)
def network(monkeypatch: pytest.MonkeyPatch) -> dict[str, frozenset[str]]:
    """Resolve host names from :data:`NAMES` (a copy the test may change)."""
    names = dict(NAMES)

    async def addresses_of(host: str, port: int) -> frozenset[str]:
        if host.lower() in names:
            return names[host.lower()]
        if host.replace(".", "").isdigit():
            return frozenset({host})
        raise OSError(f"{host}: Name or service not known")

    monkeypatch.setattr(endpoints, "addresses_of", addresses_of)
    return names


class _Hello:
    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.screen = Size(width=1280, height=800)


class _Client:
    def __init__(self, url: str) -> None:
        self.hello = _Hello(url.replace(":", "_").replace("/", "_"))

    async def close(self) -> None:
        return None


class _Ws:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, text: str) -> None:
        self.sent.append(text)


def _given(monkeypatch: pytest.MonkeyPatch, sandbox: dict[str, Any]) -> Any:
    """Open one session on ``sandbox`` and return the ``egress_control`` its run got."""
    got: list[Any] = []

    async def connect(url: str, token: str, **_: Any) -> _Client:
        return _Client(url)

    async def run_task(*_: Any, egress_control: Any = None, **__: Any) -> Any:
        got.append(egress_control)
        raise RuntimeError("recorded")

    monkeypatch.setattr(deskpod.client.SandboxClient, "connect", staticmethod(connect))
    monkeypatch.setattr(serve_module, "run_task", run_task)
    service = ControllerService("ab" * 32, signer=None, egress_control=STACK_CONTROL,  # type: ignore[arg-type]
                                egress_sandbox_url=STACK_URL)
    connection = Connection(service, _Ws())  # type: ignore[arg-type]
    message = OpenMessage.model_validate({
        "type": "open", "id": "o", "sandbox": sandbox,
        "task": {"name": "t", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
                 "success": {"url_matches": "^x$", "timeout_s": 1}}})

    async def main() -> None:
        await open_session(service, connection, message)
        runner = next(iter(connection.sessions.values())).runner
        assert runner is not None
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(main())
    assert len(got) == 1
    return got[0]


def test_the_stacks_sandbox_gets_the_stacks_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _given(monkeypatch, {"url": STACK_URL, "token": "t" * 43}) is STACK_CONTROL


def test_the_stacks_sandbox_gets_the_stacks_proxy_whatever_the_opener_names(monkeypatch: pytest.MonkeyPatch) -> None:
    given = _given(monkeypatch, {"url": STACK_URL, "token": "t" * 43,
                                 "egress_control": {"url": "http://10.9.9.9:3129", "token": "x" * 32}})
    assert given is STACK_CONTROL


def test_a_leased_slot_gets_its_own_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    given = _given(monkeypatch, {"url": SLOT_URL, "token": "t" * 43,
                                 "egress_control": {"url": "http://172.30.0.2:3129", "token": "s" * 32}})
    assert isinstance(given, EgressControl) and (given.host, given.port) == ("172.30.0.2", 3129)


def test_another_sandbox_never_gets_the_stacks_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _given(monkeypatch, {"url": SLOT_URL, "token": "t" * 43}) is None


@pytest.mark.parametrize("url", ["ws://sandbox:8765/v1/ws?x=1", "ws://sandbox:8765/v1/ws#f", "ws://sandbox:08765/v1/ws",
                                 "ws://SANDBOX:8765/v1/ws", "ws://172.30.0.2:8765/v1/ws", "ws://sandbox:8765/other",
                                 "ws://stack-alias.test:8765/v1/ws"])
def test_every_spelling_of_the_stacks_sandbox_gets_the_stacks_proxy(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's reproduction: ``…/v1/ws?x=1`` skipped the proxy's list, and a page's
    WebSocket (not paused in the browser) reached a host off the task's list."""
    assert _given(monkeypatch, {"url": url, "token": "t" * 43}) is STACK_CONTROL


def test_the_same_host_on_another_port_is_another_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _given(monkeypatch, {"url": "ws://sandbox:9765/v1/ws", "token": "t" * 43}) is None


def test_no_session_runs_when_the_stacks_sandbox_cannot_be_recognised(
        monkeypatch: pytest.MonkeyPatch, network: dict[str, frozenset[str]]) -> None:
    del network["sandbox"]
    with pytest.raises(SandboxError, match="does not resolve") as refused:
        _given(monkeypatch, {"url": SLOT_URL, "token": "t" * 43})
    assert refused.value.detail["reason"] == "unresolvable"


@pytest.mark.parametrize("url", ["http://10.0.0.1:80", "https://10.0.0.1:3129", "http://10.0.0.1:3129/x"])
def test_an_opener_names_only_a_proxys_control_port(url: str) -> None:
    with pytest.raises(ValueError):
        OpenMessage.model_validate({
            "type": "open", "id": "o", "sandbox": {"url": SLOT_URL, "token": "t" * 43,
                                                   "egress_control": {"url": url, "token": "s" * 32}},
            "task": {"name": "t", "start_url": "http://demo.test/",
                     "success": {"url_matches": "^x$", "timeout_s": 1}}})


@pytest.mark.parametrize("url, vouched", [("ws://sandbox:8765/v1/ws", True), ("ws://SANDBOX:8765/v1/ws?x=1", True),
                                          ("ws://172.30.0.2:08765/v1/ws", True), ("ws://172.30.0.3:8765/v1/ws", False),
                                          ("ws://sandbox:8766/v1/ws", False), ("ws://nowhere.test:8765/v1/ws", None)])
def test_the_sandboxes_the_operator_vouches_for_are_recognised_by_endpoint(url: str, vouched: bool | None) -> None:
    """``DESKPOD_SERVE_SANDBOXES`` vouched by exact spelling too: now by the endpoint, so a
    spelling neither gains nor loses the host-held secrets."""
    service = ControllerService("ab" * 32, signer=None,  # type: ignore[arg-type]
                                sandboxes=frozenset({"ws://sandbox:8765/v1/ws"}))
    ref = OpenMessage.model_validate({
        "type": "open", "id": "o", "sandbox": {"url": url, "token": "t" * 43},
        "task": {"name": "t", "start_url": "http://demo.test/", "success": {"url_matches": "^x$"}}}).sandbox
    if vouched is None:
        with pytest.raises(SandboxError):
            asyncio.run(service.recognise(ref))
        return
    recognised = asyncio.run(service.recognise(ref))
    assert recognised.vouched is vouched and recognised.stack is False
    assert (service.credentials_refusal(recognised) is None) is vouched
