"""``deskpod mcp`` driven by the MCP SDK's own clients (stdio and streamable HTTP) on the stack's real sandbox.

Each test starts ``deskpod mcp`` as a subprocess, as an assistant would, with its embedded
controller service on a loopback port where the test's approver connects. The tool calls
go through the real controller (risk levels, confirmations, the allowlist, the audit log)
to the real sandbox; each session resets the sandbox when it ends (``--reset-on-end``), and
the tests follow the rotated token through the token file.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from deskpod import ControllerClient, Sandbox
from deskpod.errors import UnauthorizedError
from deskpod.mcp_server.server import BROWSER_TOOLS, CODE_TOOLS, COMPUTER_TOOLS, WINDOW_TOOLS
from deskpod.service.messages import ServiceConfirmationRequired
from deskpod_stack import Stack
from running_service import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
APPROVER = secrets.token_urlsafe(32)
CALL_TIMEOUT_S = 120


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKPOD_") or k.endswith("_IMAGE")}
    env.update(DESKPOD_SERVE_APPROVER_TOKEN=APPROVER, DESKPOD_AUDIT_KEY=str(tmp_path / "key" / "signing.key"),
               DESKPOD_STATE_DIR=str(tmp_path / "state"), **extra)
    return env


def _token_file(stack: Stack, tmp_path: Path) -> Path:
    path = tmp_path / "sandbox.token"
    path.write_text(stack.token + "\n")
    path.chmod(0o600)
    return path


def _args(stack: Stack, tmp_path: Path, token_file: Path, approver_port: int, *task: str) -> list[str]:
    return ["-m", "deskpod", "mcp", "--sandbox", stack.ws_url, "--token-file", str(token_file), "--reset-on-end",
            "--approver-port", str(approver_port), "--audit-dir", str(tmp_path / "audit"), *task]


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def _rotated(stack: Stack, token_file: Path) -> str:
    """The sandbox's token after the session's reset, which a helper of ``deskpod mcp`` does
    after the session (the stack's fixture follows it)."""
    deadline = time.monotonic() + 120
    while token_file.read_text().strip() == stack.token and time.monotonic() < deadline:
        time.sleep(0.2)
    new = token_file.read_text().strip()
    assert new and new != stack.token, "the session's end did not reset the sandbox"
    old, stack.token = stack.token, new
    return old


async def _deny_first(port: int, asked: list[dict[str, Any]]) -> None:
    """An approver's console: deny the first confirmation any session asks."""
    async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", APPROVER,
                                              role="approver") as human:
        async for notice in human.events():
            if isinstance(notice, ServiceConfirmationRequired):
                asked.append(notice.request)
                await human.confirm(notice.request["id"], False, notice.request["digest"])
                return


def test_a_stdio_session_searches_by_refs_and_pixels_is_refused_off_the_allowlist_and_resets(
    stack: Stack, tmp_path: Path
) -> None:
    token_file = _token_file(stack, tmp_path)
    port = free_port()
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(tmp_path), args=_args(
        stack, tmp_path, token_file, port, "--start-url", "http://demo.test/", "--allow-domain", "demo.test"))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            out["tools"] = {t.name: t for t in (await mcp.list_tools()).tools}
            out["shot"] = await mcp.call_tool("screenshot", {})
            # The desktop's windows: the real window manager's list, and a window focused by its id.
            out["windows"] = await mcp.call_tool("desktop_windows", {})
            browser = re.search(r'^window (\S+): app "Chromium"', _text(out["windows"]), re.M)
            if browser:
                out["focused"] = await mcp.call_tool("window_focus", {"window_id": browser.group(1)})
            # By element refs (contract C5): the snapshot's search box, typed into with submit.
            out["snapshot"] = await mcp.call_tool("browser_snapshot", {})
            found = re.search(r"textbox[^\n]*\[ref=(e\d+)\]", _text(out["snapshot"]))
            if found:
                out["typed"] = await mcp.call_tool("browser_type", {"element": "search box", "ref": found.group(1),
                                                                    "text": "walrus", "submit": True})
                out["walrus"] = await mcp.call_tool("browser_wait_for", {"text": "walrus", "time": 10})
                await mcp.call_tool("key", {"text": "alt+Left"})  # back to the search page
                await mcp.call_tool("browser_wait_for", {"text": "deskpod demo search", "time": 10})
            # By pixels, in one batch.
            out["search"] = await mcp.call_tool("computer_batch", {"actions": [
                {"action": "left_click", "coordinate": [640, 400]}, {"action": "type", "text": "penguin"},
                {"action": "key", "text": "Return"}]})
            out["where"] = await mcp.call_tool("browser_wait_for", {"text": "penguin", "time": 10})
            out["blocked"] = await mcp.call_tool("browser_navigate", {"url": "http://blocked.test/"})
        return out

    try:
        out = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        old = _rotated(stack, token_file)
    tools = out["tools"]
    assert set(COMPUTER_TOOLS) | set(BROWSER_TOOLS) | set(WINDOW_TOOLS) | {"finish"} == set(tools)
    assert all(t.description and t.input_schema["type"] == "object" for t in tools.values())
    shot = out["shot"]
    assert not shot.is_error and shot.content[0].type == "image" and shot.content[0].mime_type == "image/png"
    assert base64.b64decode(shot.content[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "untrusted" in _text(shot)
    assert "focused" in out, _text(out["windows"])  # the browser's window was listed, by its id
    line = re.search(r'^window \S+: app "Chromium".*$', _text(out["focused"]), re.M)
    assert not out["focused"].is_error and line and line.group(0).endswith(", focused"), _text(out["focused"])
    assert not out["search"].is_error, _text(out["search"])
    assert "http://demo.test/search?q=penguin" in _text(out["where"]), _text(out["where"])
    assert "typed" in out, _text(out["snapshot"])
    assert "untrusted-content" in _text(out["snapshot"])
    assert not out["typed"].is_error, _text(out["typed"])
    assert "http://demo.test/search?q=walrus" in _text(out["walrus"]), _text(out["walrus"])
    # The allowlist: a tool error saying why, nothing opened, the run goes on.
    assert out["blocked"].is_error and "allowlist" in _text(out["blocked"]), _text(out["blocked"])

    async def check() -> str | None:
        with pytest.raises(UnauthorizedError):
            await Sandbox.open(stack.ws_url, old)
        async with await Sandbox.open(stack.ws_url, stack.token) as sandbox:
            return (await sandbox.observe()).url

    assert asyncio.run(check()) == "http://demo.test/"


def test_a_code_task_through_the_code_tools_ends_verified(stack: Stack, tmp_path: Path) -> None:
    token_file = _token_file(stack, tmp_path)
    task = ROOT / "runtime/deskpod/tasks/code_mini_billing.yaml"
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(tmp_path), args=_args(
        stack, tmp_path, token_file, free_port(), "--task", str(task)))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            out["tools"] = {t.name for t in (await mcp.list_tools()).tools}
            out["ls"] = await mcp.call_tool("list_dir", {"path": "."})
            out["read"] = await mcp.call_tool("read_file", {"path": "billing.py"})
            out["edit"] = await mcp.call_tool("edit_file", {"path": "billing.py", "old_text": "tax = discount * tax_rate",
                                                            "new_text": "tax = taxable * tax_rate"})
            out["exec"] = await mcp.call_tool("exec", {"cmd": "grep -n 'tax =' billing.py"})
            out["green"] = await mcp.call_tool("run_tests", {})
            out["finish"] = await asyncio.wait_for(mcp.call_tool("finish", {"claim": "fixed the tax"}), CALL_TIMEOUT_S)
        return out

    try:
        out = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        _rotated(stack, token_file)
    assert set(CODE_TOOLS) | {"finish"} == out["tools"]
    assert "billing.py" in _text(out["ls"])
    read = _text(out["read"])
    assert "untrusted-content" in read and "tax = discount * tax_rate" in read
    assert not out["edit"].is_error, _text(out["edit"])
    assert "taxable * tax_rate" in _text(out["exec"])
    assert '"passed":true' in _text(out["green"]).replace(" ", ""), _text(out["green"])
    assert not out["finish"].is_error and "succeeded" in _text(out["finish"]), _text(out["finish"])


def _wait_listening(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "deskpod mcp exited"
        try:
            urllib.request.urlopen(url, timeout=2)
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(url)


def _status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_http_refuses_a_missing_or_wrong_token_and_an_l3_call_waits_for_the_approver_who_denies(stack: Stack, tmp_path: Path) -> None:
    token_file = _token_file(stack, tmp_path)
    http_token = secrets.token_urlsafe(32)
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}/mcp"
    # No --reset-on-end here: the stdio test checks the reset; this one the transport and its token.
    approver_port = free_port()
    args = [a for a in _args(stack, tmp_path, token_file, approver_port, "--start-url", "http://demo.test/fixtures/pay",
                             "--allow-domain", "demo.test", "--transport", "http", "--listen", f"127.0.0.1:{http_port}")
            if a != "--reset-on-end"]
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(tmp_path, DESKPOD_MCP_TOKEN=http_token))
    try:
        _wait_listening(url, process)
        assert _status(url, {}) == 401
        assert _status(url, {"Authorization": "Bearer " + "x" * 43}) == 401

        async def main() -> Any:
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {http_token}"})
            async with client, streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as mcp:
                await mcp.initialize()
                names = {t.name for t in (await mcp.list_tools()).tools}
                shot = await mcp.call_tool("screenshot", {})
                asked: list[dict[str, Any]] = []
                approver = asyncio.create_task(_deny_first(approver_port, asked))
                pay = await asyncio.wait_for(mcp.call_tool("left_click", {"coordinate": [640, 380]}), CALL_TIMEOUT_S)
                await asyncio.wait([approver], timeout=10)
                approver.cancel()
                after = await mcp.call_tool("screenshot", {})
                return names, shot, asked, pay, after

        names, shot, asked, pay, after = asyncio.run(asyncio.wait_for(main(), 180))
        # L3: the call waited for the approver, who denied; the run ended, the tool says so.
        assert asked and asked[0]["level"] == "L3" and "Pay now" in asked[0]["summary"], _text(pay)
        assert pay.is_error and "cancelled" in _text(pay) and "new session" in _text(pay)
        assert after.is_error and "has ended" in _text(after)
        assert "left_click" in names and "browser_navigate" in names
        assert not shot.is_error and shot.content[0].type == "image"
    finally:
        process.terminate()
        process.wait(30)


def test_playwright_tools_hover_drag_select_by_value_upload_and_go_back_on_a_real_page(
        stack: Stack, tmp_path: Path) -> None:
    """playwright-mcp's tools by ref on a real page (``fixtures/mcp-tools``): the page's console
    and its fetch (a token in its query redacted), a hover fires mouseenter, a drag drops the
    card on the bin (HTML5 drag and drop), an option is chosen by its value, a workspace file is
    uploaded to the file input, and back returns to page 1, where page 2's text is gone."""
    async def seed() -> None:
        async with await Sandbox.open(stack.ws_url, stack.token) as sandbox:
            await sandbox.write_file("upload/hello.txt", "hello from the workspace\n")

    asyncio.run(seed())
    policy = tmp_path / "policy.yaml"
    policy.write_text("confirm_levels: [L3]\n")  # the upload (L2) runs without an approver
    token_file = _token_file(stack, tmp_path)
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(tmp_path), args=_args(
        stack, tmp_path, token_file, free_port(), "--policy", str(policy),
        "--start-url", "http://demo.test/fixtures/mcp-tools", "--allow-domain", "demo.test"))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()

            async def refs(*patterns: str) -> list[str]:
                """The refs of the lines matching ``patterns`` in one new snapshot."""
                snapshot = _text(await mcp.call_tool("browser_snapshot", {}))
                found = [re.search(pattern + r"[^\n]*\[ref=(e\d+)\]", snapshot) for pattern in patterns]
                assert all(found), snapshot
                return [f.group(1) for f in found if f]

            async def ref(pattern: str) -> str:
                return (await refs(pattern))[0]

            async def then(name: str, tool: str, args: dict[str, Any], wait_for: str) -> None:
                out[name] = await mcp.call_tool(tool, args)
                out[f"{name} seen"] = await mcp.call_tool("browser_wait_for", {"text": wait_for, "time": 10})

            out["console"] = await mcp.call_tool("browser_console_messages", {})
            out["requests"] = await mcp.call_tool("browser_network_requests", {})
            await then("hover", "browser_hover", {"ref": await ref(r'"Hover target"')}, "DID hover")
            card, bin_ = await refs(r'"Card"', r'"Bin"')
            await then("drag", "browser_drag", {"startRef": card, "endRef": bin_, "startElement": "card",
                                                "endElement": "bin"}, "DID drop card")
            await then("select", "browser_select_option", {"ref": await ref(r'combobox "Shipping"'),
                                                           "values": ["exp"]}, "DID ship exp")
            out["chooser"] = await mcp.call_tool("browser_click", {"ref": await ref(r'"Upload"')})
            await then("upload", "browser_file_upload", {"paths": ["upload/hello.txt"]}, "DID upload hello.txt 25")
            await then("next", "browser_click", {"ref": await ref(r'link "Next page"')}, "PAGE 2")
            await then("back", "browser_navigate_back", {}, "PAGE 1")
            out["page 2 gone"] = await mcp.call_tool("browser_wait_for", {"textGone": "PAGE 2", "time": 10})
        return out

    try:
        out = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        _rotated(stack, token_file)
    for name, result in out.items():
        assert not result.is_error, (name, _text(result))
    assert "mcp-tools?page=2" not in _text(out["back seen"]) and "fixtures/mcp-tools" in _text(out["back seen"])
    console, requests = _text(out["console"]), _text(out["requests"])
    assert re.search(r"\[INFO\] mcp-tools ready @ http://demo\.test/fixtures/mcp-tools:\d+", console), console
    assert "[ERROR] mcp-tools fetched" in console, console
    assert "[GET] http://demo.test/fixtures/mcp-tools => [200]" in requests, requests
    assert "[GET] http://demo.test/search?q=fetched&token=%5Bredacted%5D => [200]" in requests, requests
    assert "s3cr3t" not in requests and "untrusted-content" in requests


async def _approve_all(port: int, asked: list[dict[str, Any]]) -> None:
    """An approver's console: approve every confirmation any session asks, keeping each card."""
    async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", APPROVER,
                                              role="approver") as human:
        async for notice in human.events():
            if isinstance(notice, ServiceConfirmationRequired):
                asked.append(notice.request.model_dump(mode="json"))
                await human.confirm(notice.request["id"], True, notice.request["digest"])


def test_browser_navigate_opens_exactly_the_url_and_its_card_says_so_after_a_payment(
    stack: Stack, tmp_path: Path
) -> None:
    """Two findings on a real Chromium: ``browser_navigate`` typed the URL into the address
    bar, whose inline autocompletion opened ``/pagelong`` when ``/page`` was asked after a
    visit to ``/pagelong``; and after an approved payment the page's focus stayed on "Pay
    now", so the card of the next navigation asked to approve "press Return on button 'Pay
    now'" at L3. A navigate action loads exactly the URL, and its card (a host the run has
    not visited: L2) says what opens."""
    token_file = _token_file(stack, tmp_path)
    port = free_port()
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(tmp_path), args=_args(
        stack, tmp_path, token_file, port, "--start-url", "http://demo.test/fixtures/pay",
        "--allow-domain", "demo.test", "--allow-domain", "allowed.test"))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {"asked": []}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            await mcp.call_tool("screenshot", {})  # the session's service is up: the approver connects
            approver = asyncio.create_task(_approve_all(port, out["asked"]))
            out["pay"] = await asyncio.wait_for(mcp.call_tool("left_click", {"coordinate": [640, 380]}),
                                                CALL_TIMEOUT_S)
            out["long"] = await asyncio.wait_for(
                mcp.call_tool("browser_navigate", {"url": "http://allowed.test/pagelong"}), CALL_TIMEOUT_S)
            out["short"] = await asyncio.wait_for(
                mcp.call_tool("browser_navigate", {"url": "http://allowed.test/page"}), CALL_TIMEOUT_S)
            out["where"] = await mcp.call_tool("browser_wait_for", {"time": 1})
        approver.cancel()
        return out

    try:
        out = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        _rotated(stack, token_file)
    assert not out["pay"].is_error, _text(out["pay"])
    paid, opened, *more = out["asked"]
    assert paid["level"] == "L3" and "Pay now" in paid["summary"], paid
    assert opened["summary"] == "open http://allowed.test/pagelong", opened
    assert opened["level"] == "L2" and "Pay now" not in str(opened["reasons"]), opened
    assert more == [], "a host the run has visited is not asked about again"
    assert not out["long"].is_error and not out["short"].is_error, _text(out["short"])
    assert re.search(r"^url: http://allowed\.test/page$", _text(out["where"]), re.MULTILINE), _text(out["where"])


def test_clipboard_drop_and_recover_tools_act_on_a_real_page_judged_by_the_policy(
        stack: Stack, tmp_path: Path) -> None:
    """deskpod's own browser tools on the real sandbox (on main none existed): the agent's clipboard
    write is what a paste on the page gets, the page's copy is what ``browser_clipboard_read``
    gives (as untrusted content, after the approver confirmed the read at L2), a workspace file
    dropped on the drop zone arrives (L2, confirmed), and a page frozen by an endless script is
    named in a step's summary and recovered by ``browser_recover_tab`` (L1: no confirmation)."""
    written = "from the agent via MCP ✓"

    async def seed() -> None:
        async with await Sandbox.open(stack.ws_url, stack.token) as sandbox:
            await sandbox.write_file("drops/note.txt", "dropped through MCP\n")

    asyncio.run(seed())
    token_file = _token_file(stack, tmp_path)
    port = free_port()
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(tmp_path), args=_args(
        stack, tmp_path, token_file, port, "--start-url", "http://demo.test/fixtures/clipboard",
        "--allow-domain", "demo.test"))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {"asked": []}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            await mcp.call_tool("screenshot", {})  # the session's service is up: the approver connects
            approver = asyncio.create_task(_approve_all(port, out["asked"]))

            async def call(name: str, tool: str, args: dict[str, Any]) -> str:
                out[name] = await asyncio.wait_for(mcp.call_tool(tool, args), CALL_TIMEOUT_S)
                return _text(out[name])

            async def ref(pattern: str) -> str:
                """The ref of the line matching ``pattern`` in a new snapshot (refs are the latest one's)."""
                snapshot = _text(await mcp.call_tool("browser_snapshot", {}))
                found = re.search(pattern + r"[^\n]*\[ref=(e\d+)\]", snapshot)
                assert found, snapshot
                return found.group(1)

            await call("write", "browser_clipboard_write", {"text": written})
            await call("click paste", "browser_click", {"ref": await ref(r'textbox "paste here"'), "element": "paste box"})
            await call("paste", "key", {"text": "ctrl+v"})
            await call("pasted", "browser_wait_for", {"text": written, "time": 10})
            await call("copy", "browser_click", {"ref": await ref(r'button "copy the code"'), "element": "copy button"})
            await call("read", "browser_clipboard_read", {})
            # The drop zone is page y 240-350, under the browser's toolbar.
            await call("drop", "browser_drop_files", {"coordinate": [640, 390], "paths": ["drops/note.txt"],
                                                      "element": "drop zone"})
            await call("dropped", "browser_wait_for", {"text": "dropped through MCP", "time": 10})
            await call("frozen page", "browser_navigate", {"url": "http://demo.test/fixtures/frozen"})
            await call("freeze", "left_click", {"coordinate": [640, 380]})
            for _ in range(5):  # found 2.5 s after the first command the page left unanswered
                if "browser_recover_tab" in await call("stuck", "wait", {"duration": 1}):
                    break
            await call("recover", "browser_recover_tab", {})
            await call("answers", "browser_wait_for", {"text": "freeze this page", "time": 10})
        approver.cancel()
        return out

    try:
        out = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        _rotated(stack, token_file)
    asked = out.pop("asked")
    for name, result in out.items():
        assert not result.is_error, (name, _text(result))
    read = _text(out["read"])
    assert re.search(r'<untrusted-content source="clipboard">\nclip-secret-4242-abcd\n</untrusted-content>', read), read
    assert "browser_recover_tab" in _text(out["stuck"]) and "fixtures/frozen" in _text(out["stuck"]), _text(out["stuck"])
    assert "do not answer" not in _text(out["answers"]), _text(out["answers"])
    levels = {card["action"].get("type"): card["level"] for card in asked}
    assert levels.get("clipboard_read") == "L2" and levels.get("drop_files") == "L2", asked
    assert "recover_tab" not in levels and "clipboard_write" not in levels, asked
