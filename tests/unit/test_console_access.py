"""The console's access rules, tried as a stranger, another site's page or a viewer would.

The real service (uvicorn on loopback) with the console mounted; plain HTTP and
websocket clients stand in for browsers (they send the ``Origin`` and ``Cookie`` a
browser would, or a forged one). The page itself is tested in a real browser in
``tests/integration/test_console.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from running_service import running_service
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deskpod.service.console.app import CONTENT_SECURITY_POLICY
from deskpod.service.console.auth import ConsoleAuth, ConsoleSettings, ConsoleUser, load_users
from deskpod.errors import SettingsError

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43
APPROVER = "a" * 43
VIEWER = "v" * 43
USERS = (ConsoleUser("ada", "approver", hashlib.sha256(APPROVER.encode()).hexdigest()),
         ConsoleUser("vic", "viewer", hashlib.sha256(VIEWER.encode()).hexdigest()))


def _with_console(tmp_path: Path, body: Callable[[int], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with running_service(TOKEN, tmp_path / "audit", console_users=USERS) as port:
            return await body(port)

    return asyncio.run(main())


def _request(port: int, method: str, path: str, *, body: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], list[str], str]:
    """One HTTP request; returns the status, headers (lower-case names), Set-Cookie lines and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        cookies = response.headers.get_all("set-cookie") or []
        return (response.status, {k.lower(): v for k, v in response.getheaders()}, cookies,
                response.read().decode("utf-8", "replace"))
    finally:
        connection.close()


def _sign_in(port: int, token: str) -> str:
    """The ``Cookie`` header of a signed-in browser."""
    status, headers, cookies, _ = _request(port, "POST", "/console/signin", body=urlencode({"token": token}),
                                           headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 303 and headers["location"] == "/console/", (status, headers)
    return cookies[0].split(";", 1)[0]


async def _ws_status(port: int, headers: dict[str, str], path: str = "/console/ws", host: str = "127.0.0.1") -> int:
    """The handshake's status for a websocket to ``ws://HOST:PORT/PATH`` (connecting to loopback whatever ``host``)."""
    try:
        async with connect(f"ws://{host}:{port}{path}", additional_headers=headers, proxy=None,
                           host="127.0.0.1", port=port):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_no_session_is_refused_everywhere_but_the_sign_in_form(tmp_path: Path) -> None:
    async def body(port: int) -> dict[str, Any]:
        origin = {"Origin": f"http://127.0.0.1:{port}"}
        return {
            "page": (await asyncio.to_thread(_request, port, "GET", "/console/"))[:2],
            "me": (await asyncio.to_thread(_request, port, "GET", "/console/me"))[0],
            "form": (await asyncio.to_thread(_request, port, "GET", "/console/signin"))[0],
            "ws": await _ws_status(port, origin),
            "forged_cookie": await _ws_status(port, {**origin, "Cookie": f"deskpod-console-{port}=" + "x" * 43}),
        }

    seen = _with_console(tmp_path, body)
    assert seen["page"][0] == 303 and seen["page"][1]["location"] == "/console/signin"
    assert seen["me"] == 401 and seen["form"] == 200
    assert seen["ws"] == 403 and seen["forged_cookie"] == 403


def test_a_sign_in_sets_a_strict_http_only_cookie_and_a_wrong_token_signs_nobody_in(tmp_path: Path) -> None:
    async def body(port: int) -> dict[str, Any]:
        origin = {"Origin": f"http://127.0.0.1:{port}"}
        wrong = await asyncio.to_thread(_request, port, "POST", "/console/signin",
                                        body=urlencode({"token": "nope" * 10}), headers=origin)
        good = await asyncio.to_thread(_request, port, "POST", "/console/signin",
                                       body=urlencode({"token": APPROVER}), headers=origin)
        cookie = good[2][0].split(";", 1)[0]
        me = await asyncio.to_thread(_request, port, "GET", "/console/me", headers={"Cookie": cookie})
        page = await asyncio.to_thread(_request, port, "GET", "/console/", headers={"Cookie": cookie})
        return {"wrong": wrong[:3], "good": good[2], "me": json.loads(me[3]), "page": page[:2], "port": port}

    seen = _with_console(tmp_path, body)
    assert seen["wrong"][0] == 303 and seen["wrong"][1]["location"] == "/console/signin#failed"
    assert seen["wrong"][2] == []
    attributes = [a.strip().lower() for a in seen["good"][0].split(";")]
    assert attributes[0].startswith(f"deskpod-console-{seen['port']}=") and len(attributes[0]) > 40
    assert "httponly" in attributes and "samesite=strict" in attributes and "path=/" in attributes
    assert "secure" not in attributes  # plain http on loopback; behind TLS it is (next test)
    assert seen["me"] == {"name": "ada", "role": "approver"}
    assert seen["page"][0] == 200
    headers = seen["page"][1]
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_behind_tls_the_cookie_is_secure_and_host_prefixed() -> None:
    settings = ConsoleSettings(USERS, ("https://console.example.org",))
    assert settings.secure_cookie is True and ConsoleAuth(settings).cookie == "__Host-deskpod-console-443"
    assert ConsoleSettings(USERS, ("http://127.0.0.1:8766",)).secure_cookie is False
    assert ConsoleSettings(USERS, ("http://127.0.0.1:8766",), secure_cookie=True).secure_cookie is True


def test_a_wrong_or_missing_origin_is_refused(tmp_path: Path) -> None:
    """Another site's page posting the sign-in form (login CSRF), or opening the websocket
    with the person's cookie (cross-site websocket hijacking), is refused."""

    async def body(port: int) -> dict[str, Any]:
        cookie = await asyncio.to_thread(_sign_in, port, APPROVER)
        form = urlencode({"token": APPROVER})
        return {
            "signin_evil": (await asyncio.to_thread(_request, port, "POST", "/console/signin", body=form,
                                                    headers={"Origin": "http://evil.test"}))[::2],
            "signin_none": (await asyncio.to_thread(_request, port, "POST", "/console/signin", body=form))[0],
            "signout_evil": (await asyncio.to_thread(_request, port, "POST", "/console/signout", body="",
                                                     headers={"Origin": "http://evil.test", "Cookie": cookie}))[0],
            "ws_evil": await _ws_status(port, {"Origin": "http://evil.test", "Cookie": cookie}),
            "ws_none": await _ws_status(port, {"Cookie": cookie}),
            "ws_same_host_other_port": await _ws_status(port, {"Origin": "http://127.0.0.1:1", "Cookie": cookie}),
            "ws_good": await _ws_status(port, {"Origin": f"http://127.0.0.1:{port}", "Cookie": cookie}),
        }

    seen = _with_console(tmp_path, body)
    assert seen["signin_evil"] == (403, [])
    assert seen["signin_none"] == 403 and seen["signout_evil"] == 403
    assert seen["ws_evil"] == seen["ws_none"] == seen["ws_same_host_other_port"] == 403
    assert seen["ws_good"] == 101


def test_a_token_in_a_query_string_is_refused_and_signs_nobody_in(tmp_path: Path) -> None:
    async def body(port: int) -> dict[str, Any]:
        origin = {"Origin": f"http://127.0.0.1:{port}"}
        return {
            "page": (await asyncio.to_thread(_request, port, "GET", f"/console/?token={APPROVER}"))[::2],
            "signin": (await asyncio.to_thread(_request, port, "POST", f"/console/signin?token={APPROVER}",
                                               body="", headers=origin))[::2],
            "empty": (await asyncio.to_thread(_request, port, "GET", "/console/signin?token="))[0],
            "ws": await _ws_status(port, origin, f"/console/ws?token={APPROVER}"),
        }

    seen = _with_console(tmp_path, body)
    assert seen["page"] == (400, []) and seen["signin"] == (400, [])
    assert seen["empty"] == 400 and seen["ws"] == 400


def test_a_request_for_another_host_name_is_refused(tmp_path: Path) -> None:
    """DNS rebinding: another site's name resolving to the loopback address reaches the
    service with its own name in ``Host`` (and as its own origin): refused."""

    async def body(port: int) -> tuple[int, int]:
        page = await asyncio.to_thread(_request, port, "GET", "/console/signin",
                                       headers={"Host": f"evil.test:{port}"})
        ws = await _ws_status(port, {"Origin": f"http://evil.test:{port}"}, host="evil.test")
        return page[0], ws

    assert _with_console(tmp_path, body) == (421, 421)


def test_a_viewer_answers_nothing(tmp_path: Path) -> None:
    """A viewer's connection may send no answer and no command (a forged message from the page's context)."""

    async def body(port: int) -> list[dict[str, Any]]:
        cookie = await asyncio.to_thread(_sign_in, port, VIEWER)
        replies = []
        async with connect(f"ws://127.0.0.1:{port}/console/ws", proxy=None,
                           additional_headers={"Origin": f"http://127.0.0.1:{port}", "Cookie": cookie}) as ws:
            for message in ({"type": "pause", "id": "p", "session": "session-x"},
                            {"type": "open", "id": "o", "sandbox": {"url": "ws://x", "token": "t" * 16},
                             "task": {"name": "n", "start_url": "http://demo.test/",
                                      "success": {"timeout_s": 3, "page_text_contains": "x"}}}):
                await ws.send(json.dumps(message))
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        return replies

    replies = _with_console(tmp_path, body)
    assert [r["error"]["code"] for r in replies] == ["unauthorized", "unauthorized"]


def test_the_tokens_file_is_parsed_strictly(tmp_path: Path) -> None:
    digest = "ab" * 32
    good = tmp_path / "tokens"
    good.write_text(f"# console users\nada approver {digest}\n\nvic viewer {'cd' * 32}  # read-only\n")
    users = load_users(good, "ef" * 32)
    assert [(u.name, u.role) for u in users] == [("ada", "approver"), ("vic", "viewer"), ("approver", "approver")]
    assert digest not in repr(users)
    for line in (f"ada admin {digest}", "ada approver nothex", f"a<b approver {digest}", "ada approver",
                 f"ada approver {digest}\nbob viewer {digest}"):
        bad = tmp_path / "bad"
        bad.write_text(line + "\n")
        with pytest.raises(SettingsError):
            load_users(bad, None)
