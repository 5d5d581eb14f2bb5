"""``deskpod mcp`` as a process, reached by the MCP SDK's own stdio and streamable HTTP clients.

The sandbox is the fake daemon (:class:`hostile_daemon.HostileDaemon`), so these run
without Docker; ``tests/integration/test_mcp.py`` does the same against a real sandbox.
They check the transports, the HTTP token, and that a session's end resets its sandbox
(stdio: by the detached helper, after the client has killed the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hostile_daemon import HostileDaemon
from mcp_support import check_listing
from running_service import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s" * 32

pytestmark = pytest.mark.process  # `deskpod mcp` runs as a child process


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKPOD_")}
    env.update(DESKPOD_AUDIT_KEY=str(tmp_path / "key"), DESKPOD_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=str(ROOT / "runtime"), **extra)
    return env


def _args(daemon: HostileDaemon, tmp_path: Path, token_file: Path) -> list[str]:
    return ["-m", "deskpod", "mcp", "--sandbox", daemon.url, "--token-file", str(token_file), "--reset-on-end",
            "--start-url", "http://demo.test/", "--allow-domain", "demo.test", "--approver-port", str(free_port()),
            "--audit-dir", str(tmp_path / "audit")]


def _token_file(tmp_path: Path) -> Path:
    path = tmp_path / "sandbox.token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    return path


def _rotated(token_file: Path, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while token_file.read_text().strip() == TOKEN and time.monotonic() < deadline:
        time.sleep(0.1)
    return token_file.read_text().strip()


def test_stdio_lists_tools_answers_a_screenshot_and_the_sandbox_is_reset_after_the_session(tmp_path: Path) -> None:
    token_file = _token_file(tmp_path)
    with HostileDaemon() as daemon:
        params = StdioServerParameters(command=sys.executable, args=_args(daemon, tmp_path, token_file),
                                       env=_env(tmp_path), cwd=str(ROOT))

        async def main() -> Any:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
                init = await mcp.initialize()
                tools = (await mcp.list_tools()).tools
                check_listing(tools, init.server_info.version)
                return {t.name for t in tools}, await mcp.call_tool("screenshot", {})

        names, shot = asyncio.run(asyncio.wait_for(main(), 60))
        new = _rotated(token_file)
        kinds = [r.get("type") for r in daemon.requests]
    assert "left_click" in names and "browser_navigate" in names
    assert not shot.is_error and shot.content[0].type == "image"
    assert "reset" in kinds, kinds
    assert new != TOKEN and token_file.stat().st_mode & 0o777 == 0o600


def _status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def _http_mcp(daemon: HostileDaemon, tmp_path: Path, token_file: Path, **env: str) -> Iterator[tuple[str, str]]:
    """``deskpod mcp --transport http`` on a free port (``env`` added to its environment) until
    the block ends; yields its URL and bearer token once it listens."""
    http_token = secrets.token_urlsafe(32)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = subprocess.Popen([sys.executable, *_args(daemon, tmp_path, token_file), "--transport", "http",
                                "--listen", f"127.0.0.1:{port}"], cwd=ROOT,
                               env=_env(tmp_path, DESKPOD_MCP_TOKEN=http_token, **env))
    try:
        deadline = time.monotonic() + 30
        while _status_or_none(url) is None:
            assert process.poll() is None and time.monotonic() < deadline, "deskpod mcp did not listen"
            time.sleep(0.1)
        yield url, http_token
        assert process.poll() is None, "deskpod mcp stopped"
    finally:
        process.terminate()
        process.wait(20)


async def _screenshot_session(url: str, http_token: str, *, terminate_on_close: bool = True) -> Any:
    """One MCP session over HTTP: initialize, check the listing, take a screenshot; then leave
    (with the session's ``DELETE`` unless ``terminate_on_close`` is false: a client that vanished)."""
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {http_token}"})
    async with client, streamable_http_client(url, http_client=client, terminate_on_close=terminate_on_close) as \
            (read, write), ClientSession(read, write) as mcp:
        init = await mcp.initialize()
        check_listing((await mcp.list_tools()).tools, init.server_info.version)
        return await mcp.call_tool("screenshot", {})


def test_http_needs_the_token_serves_a_session_and_its_delete_resets_the_sandbox(tmp_path: Path) -> None:
    token_file = _token_file(tmp_path)
    with HostileDaemon() as daemon, _http_mcp(daemon, tmp_path, token_file) as (url, http_token):
        assert _status(url, {}) == 401
        assert _status(url, {"Authorization": "Bearer " + "x" * 43}) == 401
        shot = asyncio.run(asyncio.wait_for(_screenshot_session(url, http_token), 60))
        new = _rotated(token_file)
        kinds = [r.get("type") for r in daemon.requests]
    assert not shot.is_error and shot.content[0].type == "image"
    assert "reset" in kinds and new != TOKEN


def test_an_http_session_whose_client_vanished_ends_once_idle_and_its_sandbox_is_reset(tmp_path: Path) -> None:
    """A client that goes away without its session's ``DELETE`` (killed, a dropped network)
    held its run and its sandbox until the server stopped; now the session ends once idle
    for ``DESKPOD_MCP_SESSION_IDLE_S``, as a ``DELETE`` ends it, while the server runs on."""
    token_file = _token_file(tmp_path)
    with HostileDaemon() as daemon, _http_mcp(daemon, tmp_path, token_file, DESKPOD_MCP_SESSION_IDLE_S="8") as \
            (url, http_token):
        shot = asyncio.run(asyncio.wait_for(_screenshot_session(url, http_token, terminate_on_close=False), 60))
        left = time.monotonic()
        assert "reset" not in [r.get("type") for r in daemon.requests]  # nothing ended it yet
        new = _rotated(token_file, timeout_s=45)
        waited = time.monotonic() - left
        kinds = [r.get("type") for r in daemon.requests]
    assert not shot.is_error
    assert "reset" in kinds and new != TOKEN, kinds
    assert waited >= 6, waited  # not before it was idle


def _status_or_none(url: str) -> int | None:
    try:
        return _status(url, {})
    except OSError:
        return None
