"""``deskpod mcp`` without ``--controller``, as processes reached by the MCP SDK's own clients.

Found trying ``deskpod mcp`` as a new user would: every ``deskpod mcp`` bound 127.0.0.1:8767,
so a second one (a second assistant window) died at start and its MCP client saw only
"Connection closed"; the embedded service had no console, so nobody could approve; a call
waiting for an approver sent no progress notification over either transport; and every
session was named ``mcp-session`` and, once its client closed it, recorded as cancelled. The
sandbox is the fake daemon (:class:`hostile_daemon.HostileDaemon`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, Implementation, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from deskpod import ControllerClient
from deskpod.service.messages import ServiceConfirmationRequired
from hostile_daemon import HostileDaemon
from running_service import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s" * 32
APPROVER = "a" * 43

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]  # `deskpod mcp` runs as a child process

_CONSOLE = re.compile(r"approve this assistant's actions at (http://127\.0\.0\.1:(\d+)/console/)")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKPOD_")}
    env.update(DESKPOD_AUDIT_KEY=str(tmp_path / "key"), DESKPOD_STATE_DIR=str(tmp_path / "state"),
               DESKPOD_SERVE_APPROVER_TOKEN=APPROVER, PYTHONPATH=str(ROOT / "runtime"), **extra)
    return env


def _args(daemon: HostileDaemon, tmp_path: Path, *extra: str) -> list[str]:
    token_file = tmp_path / "sandbox.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    return ["-m", "deskpod", "mcp", "--sandbox", daemon.url, "--token-file", str(token_file),
            "--start-url", "http://demo.test/", "--allow-domain", "demo.test", "--audit-dir", str(tmp_path / "audit"),
            *extra]


async def _stdio(stack: AsyncExitStack, daemon: HostileDaemon, tmp_path: Path, errlog: Any,
                 *extra: str, client: str = "mcp") -> ClientSession:
    params = StdioServerParameters(command=sys.executable, args=_args(daemon, tmp_path, *extra), env=_env(tmp_path),
                                   cwd=str(ROOT))
    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    session = await stack.enter_async_context(ClientSession(read, write, client_info=Implementation(
        name=client, version="1.0")))
    await session.initialize()
    return session


def _run_records(audit_dir: Path, timeout_s: float = 20) -> dict[str, Any]:
    """The first and last records of the one run in ``audit_dir``, once its log is sealed."""
    deadline = time.monotonic() + timeout_s
    while True:
        logs = list(audit_dir.glob("run-*.jsonl"))
        lines = logs[0].read_text().splitlines() if len(logs) == 1 else []
        if lines and json.loads(lines[-1])["event"] == "run_finished":
            return {"run_started": json.loads(lines[0]), "run_finished": json.loads(lines[-1])}
        assert time.monotonic() < deadline, f"no sealed run log in {audit_dir}: {logs}"
        time.sleep(0.1)


def _console_of(errlog: Path, timeout_s: float = 20) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _CONSOLE.search(errlog.read_text())
        if found:
            return found.group(1), int(found.group(2))
        time.sleep(0.1)
    raise AssertionError(f"no console address on standard error: {errlog.read_text()[-2000:]}")


def _listening(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on 127.0.0.1:{port}"
            time.sleep(0.1)


def test_two_side_by_side_both_answer_and_each_prints_its_own_console(tmp_path: Path) -> None:
    logs = [tmp_path / "one.err", tmp_path / "two.err"]
    with HostileDaemon() as first, HostileDaemon() as second:

        async def main() -> Any:
            async with AsyncExitStack() as stack:
                errlogs = [stack.enter_context(log.open("w")) for log in logs]
                sessions = [await _stdio(stack, first, tmp_path / "one", errlogs[0], client="my-assistant"),
                            await _stdio(stack, second, tmp_path / "two", errlogs[1], "--name", "nightly check")]
                tools = [len((await s.list_tools()).tools) for s in sessions]
                shots = [await s.call_tool("screenshot", {}) for s in sessions]
                consoles = [_console_of(log) for log in logs]
                pages = [urllib.request.urlopen(f"{url}signin", timeout=10).status  # noqa: S310
                         for url, _ in consoles]
                return tools, shots, consoles, pages

        for folder in ("one", "two"):
            (tmp_path / folder).mkdir()
        tools, shots, consoles, pages = asyncio.run(asyncio.wait_for(main(), 90))
    runs = [_run_records(tmp_path / name / "audit") for name in ("one", "two")]
    assert [r["run_started"]["task"] for r in runs] == ["my-assistant", "nightly check"]  # not "mcp-session"
    assert [r["run_finished"]["status"] for r in runs] == ["ended", "ended"]  # the sessions ended: no failure
    assert all(n > 10 for n in tools)
    assert all(not shot.is_error for shot in shots)
    assert consoles[0][1] != consoles[1][1] and 8767 not in (consoles[0][1], consoles[1][1])
    assert pages == [200, 200]


def test_a_controller_that_cannot_start_is_told_to_the_client_and_on_stderr(tmp_path: Path) -> None:
    errlog_path = tmp_path / "mcp.err"
    with HostileDaemon() as daemon, socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

        async def main() -> Any:
            async with AsyncExitStack() as stack:
                errlog = stack.enter_context(errlog_path.open("w"))
                session = await _stdio(stack, daemon, tmp_path, errlog, "--approver-port", str(port))
                return len((await session.list_tools()).tools), await session.call_tool("screenshot", {})

        tools, shot = asyncio.run(asyncio.wait_for(main(), 60))
    text = "\n".join(getattr(c, "text", "") for c in shot.content)
    assert tools > 10  # the server answers: not "Connection closed"
    assert shot.is_error and f"could not start its controller service on 127.0.0.1:{port}" in text, text
    assert "in use" in text.lower()
    assert f"could not start its controller service on 127.0.0.1:{port}" in errlog_path.read_text()


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_call_waiting_for_an_approver_gets_progress_notifications(tmp_path: Path, transport: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("confirm_actions: [click]\n")
    errlog_path = tmp_path / "mcp.err"
    seen: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async def approve(port: int) -> None:
        async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", APPROVER,
                                                  role="approver") as human:
            async for notice in human.events():
                if isinstance(notice, ServiceConfirmationRequired):
                    await asyncio.sleep(1.0)
                    await human.confirm(notice.request["id"], True, notice.request["digest"])
                    return

    async def click(session: ClientSession) -> Any:
        await session.call_tool("screenshot", {})
        _, port = await asyncio.to_thread(_console_of, errlog_path)
        person = asyncio.create_task(approve(port))
        result = await session.call_tool("left_click", {"coordinate": [10, 10]}, progress_callback=progress)
        await person
        return result

    with HostileDaemon() as daemon:
        if transport == "stdio":

            async def main() -> Any:
                async with AsyncExitStack() as stack:
                    errlog = stack.enter_context(errlog_path.open("w"))
                    return await click(await _stdio(stack, daemon, tmp_path, errlog, "--policy", str(policy)))

            result = asyncio.run(asyncio.wait_for(main(), 90))
        else:
            port, http_token = free_port(), "h" * 43
            with errlog_path.open("w") as errlog:
                process = subprocess.Popen(
                    [sys.executable, *_args(daemon, tmp_path, "--policy", str(policy)), "--transport", "http",
                     "--listen", f"127.0.0.1:{port}"], cwd=ROOT, stderr=errlog,
                    env=_env(tmp_path, DESKPOD_MCP_TOKEN=http_token))
            try:
                _console_of(errlog_path)
                _listening(port)

                async def main() -> Any:
                    client = create_mcp_http_client(headers={"Authorization": f"Bearer {http_token}"})
                    async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) \
                            as (read, write), ClientSession(read, write) as session:
                        await session.initialize()
                        return await click(session)

                result = asyncio.run(asyncio.wait_for(main(), 90))
            finally:
                process.terminate()
                process.wait(20)
        clicks = sum(1 for r in daemon.requests for a in r.get("actions", []) if a.get("type") == "click")
    assert not result.is_error and clicks == 1
    assert seen and all("waiting for a person to approve this call's action (L2)" in message for message in seen), seen
