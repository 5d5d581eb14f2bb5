"""Egress grants without Docker: agentd's registry, the runner's proxy variables, the
proxy's helper (``images/egress/grant_check.py``) against a daemon stand-in, and the
controller's task allowlist for network commands."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deskpod.agentd.workspace.egress_grants import (
    EgressCheck,
    EgressGrants,
    host_allowed,
    proxy_url_with,
)
from deskpod.agentd.workspace.runner_client import RunnerClient
from deskpod.agentd.runner_wire import RunnerOutput, RunnerWorkspaceRequest, encode_frame
from deskpod.controller.code_task import ToolCall, tool_request
from deskpod.errors import PolicyDeniedError
from deskpod.protocol import ExecOutput, ExecRequest
from egress_stand_ins import EGRESS_IMAGE, daemon_stand_in, load_egress_module, proxy_authorization

HELPER = EGRESS_IMAGE / "grant_check.py"


def check(credential: str, host: str) -> EgressCheck:
    return EgressCheck(credential_sha256=hashlib.sha256(credential.encode()).hexdigest(), host=host)


def test_a_grant_is_live_until_revoked_and_only_for_its_hosts() -> None:
    grants = EgressGrants()
    with grants.grant(["demo.test"], 60.0) as credential:
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", credential)
        assert grants.allows(check(credential, "demo.test"))
        assert grants.allows(check(credential, "www.demo.test"))
        assert not grants.allows(check(credential, "allowed.test"))
        assert not grants.allows(check(credential, "evildemo.test"))
        assert not grants.allows(check("x" * 43, "demo.test"))
    assert not grants.allows(check(credential, "demo.test"))
    assert len(grants) == 0


def test_a_grant_without_a_list_covers_any_host_and_expires() -> None:
    grants = EgressGrants()
    credential = grants.issue(None, 0.2)
    assert grants.allows(check(credential, "anything.test"))
    time.sleep(0.3)
    assert not grants.allows(check(credential, "anything.test"))
    other = grants.issue(None, 60.0)
    grants.revoke_all()
    assert not grants.allows(check(other, "anything.test"))


def test_host_matching_is_the_browser_checks() -> None:
    assert host_allowed("A.Demo.Test.", [".demo.test"])
    assert not host_allowed("demo.test.evil", ["demo.test"])
    assert not host_allowed("demo.test", [])


def test_the_proxy_url_carries_the_credential_as_user_info() -> None:
    assert proxy_url_with("http://egress:3128", "abc") == "http://deskpod:abc@egress:3128"
    with pytest.raises(ValueError):
        proxy_url_with("socks5://egress:1080", "abc")


def test_the_runner_wire_refuses_a_credential_of_the_wrong_shape() -> None:
    request = ExecRequest(type="exec", id="e", argv=["true"], network=True)
    with pytest.raises(ValueError):
        RunnerWorkspaceRequest(request=request, egress_credential="short")
    assert "egress_credential" not in repr(RunnerWorkspaceRequest(request=request, egress_credential="A" * 43))


# ---- the runner: a network command gets the proxy only with its grant


@pytest.fixture()
def runner(tmp_path: Path) -> Iterator[str]:
    """A local runner (not PID 1) whose egress proxy is ``http://egress:3128``."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("ws", "home", "state"):
        (tmp_path / name).mkdir()
    env = dict(os.environ, DESKPOD_WORKSPACE=str(tmp_path / "ws"), HOME=str(tmp_path / "home"),
               DESKPOD_RUNNER_STATE=str(tmp_path / "state"), DESKPOD_RUNNER_HOST="127.0.0.1",
               DESKPOD_RUNNER_PORT=str(port), HTTPS_PROXY="http://egress:3128", HTTP_PROXY="http://egress:3128")
    proc = subprocess.Popen([sys.executable, "-m", "deskpod.agentd.runner"], env=env)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([sys.executable, "-m", "deskpod.agentd.runner_health"], env=env).returncode:
            assert time.monotonic() < deadline and proc.poll() is None, "the runner did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.process
def test_a_network_command_gets_a_live_grant_and_it_is_revoked_after(runner: str) -> None:
    grants = EgressGrants()

    async def body() -> tuple[str, str, str]:
        client = RunnerClient(runner, egress=grants)
        request = ExecRequest(type="exec", id="n", cmd='echo "$HTTP_PROXY"', network=True, allowed_domains=["demo.test"])
        networked = await client.workspace(request, threading.Event())
        plain = await client.workspace(ExecRequest(type="exec", id="p", cmd='echo "[$HTTP_PROXY]"'), threading.Event())
        ungranted = await RunnerClient(runner).workspace(
            ExecRequest(type="exec", id="u", cmd='echo "[$HTTP_PROXY]"', network=True), threading.Event())
        assert isinstance(networked, ExecOutput) and isinstance(plain, ExecOutput)
        assert isinstance(ungranted, ExecOutput)
        return networked.stdout.strip(), plain.stdout.strip(), ungranted.stdout.strip()

    networked, plain, ungranted = asyncio.run(body())
    m = re.fullmatch(r"http://deskpod:([A-Za-z0-9_-]{43})@egress:3128", networked)
    assert m, networked
    assert not grants.allows(check(m.group(1), "demo.test")), "the grant outlived its command"
    assert plain == "[]" and ungranted == "[]"


def test_the_grant_is_live_while_the_command_runs() -> None:
    """A runner stand-in asks the registry mid-request: live then, dead once answered."""
    grants = EgressGrants()
    seen: dict[str, Any] = {}

    async def fake_runner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        length = int.from_bytes(await reader.readexactly(4), "big")
        message = json.loads(await reader.readexactly(length))
        credential = message["egress_credential"]
        seen["live"] = grants.allows(check(credential, "demo.test"))
        seen["credential"] = credential
        output = ExecOutput(exit_code=0, duration_s=0.0, stdout="", stderr="", stdout_bytes=0, stderr_bytes=0)
        writer.write(encode_frame(RunnerOutput(output=output)))
        await writer.drain()
        writer.close()

    async def body() -> None:
        server = await asyncio.start_server(fake_runner, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = RunnerClient(f"127.0.0.1:{port}", egress=grants)
            await client.workspace(ExecRequest(type="exec", id="n", argv=["true"], network=True), threading.Event())

    asyncio.run(body())
    assert seen["live"] is True
    assert not grants.allows(check(seen["credential"], "demo.test"))


# ---- the proxy's helper


@pytest.fixture()
def daemon() -> Iterator[tuple[str, EgressGrants]]:
    """A stand-in for agentd's check endpoint, answering from a real registry."""
    with daemon_stand_in("localhost") as stand_in:
        yield stand_in.address, stand_in.grants


def test_the_helper_admits_the_daemons_own_address_and_live_grants_only(daemon: tuple[str, EgressGrants]) -> None:
    address, grants = daemon
    checker = load_egress_module("grant_check").GrantChecker(address)
    # The daemon's own container (here: loopback, what "localhost" resolves to) is Chromium's egress.
    assert checker.answer("127.0.0.1 blocked.test -\n") == "OK"
    credential = grants.issue(["demo.test"], 60.0)
    assert checker.answer(f"172.30.0.9 demo.test {proxy_authorization(credential)}") == "OK"
    assert checker.answer(f"172.30.0.9 allowed.test {proxy_authorization(credential)}").startswith("ERR")
    assert checker.answer(f"172.30.0.9 demo.test {proxy_authorization('B' * 43)}").startswith("ERR")
    assert checker.answer("172.30.0.9 demo.test -").startswith("ERR")
    assert checker.answer("172.30.0.9 demo.test Bearer%20abc").startswith("ERR")
    assert checker.answer("garbage").startswith("ERR")
    grants.revoke(credential)
    assert checker.answer(f"172.30.0.9 demo.test {proxy_authorization(credential)}").startswith("ERR")


@pytest.mark.process
def test_the_sandbox_helper_answers_by_address_alone(daemon: tuple[str, EgressGrants]) -> None:
    address, _ = daemon
    result = subprocess.run([sys.executable, str(HELPER), "--sandbox"], input="127.0.0.1 -\n172.30.0.9 -\n",
                            capture_output=True, text=True, timeout=30, env=dict(os.environ, DESKPOD_EGRESS_DAEMON=address))
    assert result.stdout.splitlines() == ["OK", "ERR"], result


def test_the_helper_refuses_when_the_daemon_cannot_be_asked() -> None:
    checker = load_egress_module("grant_check").GrantChecker("nothing.invalid:8765")
    assert checker.answer(f"172.30.0.9 demo.test {proxy_authorization('A' * 43)}").startswith("ERR")


@pytest.mark.process
def test_the_helper_speaks_squids_line_protocol(daemon: tuple[str, EgressGrants]) -> None:
    address, grants = daemon
    credential = grants.issue(None, 60.0)
    # As squid 5.7 sends them: the acl line's arguments ("-": none) come last.
    lines = f"172.30.0.9 demo.test {proxy_authorization(credential)} -\n172.30.0.9 demo.test - -\n"
    result = subprocess.run([sys.executable, str(HELPER)], input=lines, capture_output=True, text=True, timeout=30,
                            env=dict(os.environ, DESKPOD_EGRESS_DAEMON=address))
    assert result.stdout.splitlines()[0] == "OK" and result.stdout.splitlines()[1].startswith("ERR"), result


# ---- the controller: the task's allowlist for network commands


def test_a_network_exec_gets_the_tasks_allowlist_and_is_refused_without_one() -> None:
    call = ToolCall.model_validate({"tool": "exec", "argv": ["pip", "download", "x"], "network": True,
                                    "allowed_domains": ["everything.test"]})
    request = tool_request(call, "r1", ["pytest"], allowed_domains=["demo.test"])
    assert isinstance(request, ExecRequest) and request.allowed_domains == ["demo.test"]
    with pytest.raises(PolicyDeniedError) as err:
        tool_request(call, "r2", ["pytest"], allowed_domains=[])
    assert err.value.detail["rule"] == "network_not_granted"
    plain = tool_request(ToolCall.model_validate({"tool": "exec", "argv": ["true"]}), "r3", ["pytest"],
                         allowed_domains=[])
    assert isinstance(plain, ExecRequest) and not plain.network


# ---- deskpod audit's judgement


def test_the_audit_passes_only_refusals_without_a_grant() -> None:
    from deskpod.audit.zone import grant_check

    assert grant_check("demo.test", {"none": 407, "guessed": 403}).status == "pass"
    assert grant_check("demo.test", {"none": 200, "guessed": 403}).status == "fail"
    assert grant_check("demo.test", {"none": 407, "guessed": 200}).status == "fail"
    assert grant_check(None, {}).status == "fail"
