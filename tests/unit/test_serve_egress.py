"""``deskpod serve`` gives a session's run the egress proxy of the sandbox it drives, and no other.

The stack's proxy control (``DESKPOD_EGRESS_CONTROL``) only for the stack's sandbox
(``DESKPOD_SANDBOX_URL``), whatever the opener claims; a leased pool slot's own proxy when
the opener names it; none for any other sandbox. ``run_task`` and the daemon connection are
replaced by recorders: what is checked is what the service hands the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import deskpod.client
import deskpod.service.server.runs as serve_module
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


@pytest.mark.parametrize("url", ["http://10.0.0.1:80", "https://10.0.0.1:3129", "http://10.0.0.1:3129/x"])
def test_an_opener_names_only_a_proxys_control_port(url: str) -> None:
    with pytest.raises(ValueError):
        OpenMessage.model_validate({
            "type": "open", "id": "o", "sandbox": {"url": SLOT_URL, "token": "t" * 43,
                                                   "egress_control": {"url": url, "token": "s" * 32}},
            "task": {"name": "t", "start_url": "http://demo.test/",
                     "success": {"url_matches": "^x$", "timeout_s": 1}}})
