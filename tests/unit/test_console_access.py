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
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from running_service import running_service
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from deskpod.service.console.app import CONTENT_SECURITY_POLICY
from deskpod.service.console.auth import ConsoleAuth, ConsoleSettings, ConsoleUser, load_users
from deskpod.errors import SettingsError

pytestmark = pytest.mark.timeout(60)

TOKEN = "s" * 43
APPROVER = "a" * 43
VIEWER = "v" * 43
PROTOCOL = "deskpod-console"
SECRET_PROTOCOL = "deskpod-page-secret."
"""The subprotocols a console page offers: the console's, and its page secret after this prefix
(spelled here as a client of the wire spells them)."""
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


def _page_secret(body: str) -> str | None:
    """The page secret in the answer to the sign-in form (``None``: it has none)."""
    found = re.search(r'<meta name="deskpod-page-secret" content="([A-Za-z0-9_-]{43})">', body)
    return found.group(1) if found is not None else None


def _signed_in(port: int, token: str) -> tuple[str, str]:
    """The ``Cookie`` header of a signed-in browser and the page secret its page holds (from
    the answer to the sign-in form, the only one that has it; ``""`` when there is none)."""
    status, _, cookies, body = _request(port, "POST", "/console/signin", body=urlencode({"token": token}),
                                        headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status in (200, 303) and cookies, (status, body)
    return cookies[0].split(";", 1)[0], _page_secret(body) or ""


def _sign_in(port: int, token: str) -> str:
    """The ``Cookie`` header of a signed-in browser."""
    return _signed_in(port, token)[0]


async def _ws_status(port: int, headers: dict[str, str], path: str = "/console/ws", host: str = "127.0.0.1",
                     secret: str | None = None) -> int:
    """The handshake's status for a websocket to ``ws://HOST:PORT/PATH`` (connecting to loopback whatever
    ``host``), offering the subprotocols of a page that holds ``secret`` (``None``: none);
    0 when the handshake failed otherwise."""
    protocols = [PROTOCOL, SECRET_PROTOCOL + secret] if secret is not None else None
    try:
        async with connect(f"ws://{host}:{port}{path}", additional_headers=headers, proxy=None,
                           host="127.0.0.1", port=port, subprotocols=protocols):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code
    except InvalidHandshake:
        return 0


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
        return {"wrong": wrong[:3], "good": good[2], "me": json.loads(me[3]), "page": page[:2], "port": port,
                "answer": (good[0], good[1]["cache-control"], _page_secret(good[3]))}

    seen = _with_console(tmp_path, body)
    assert seen["wrong"][0] == 303 and seen["wrong"][1]["location"] == "/console/signin#failed"
    assert seen["wrong"][2] == []
    attributes = [a.strip().lower() for a in seen["good"][0].split(";")]
    assert attributes[0].startswith(f"deskpod-console-{seen['port']}=") and len(attributes[0]) > 40
    assert "httponly" in attributes and "samesite=strict" in attributes and "path=/" in attributes
    assert "secure" not in attributes  # plain http on loopback; behind TLS it is (next test)
    assert seen["me"] == {"name": "ada", "role": "approver"}
    status, cache, secret = seen["answer"]
    assert status == 200 and cache == "no-store" and secret is not None and secret not in seen["good"][0], \
        "the answer holds the page secret, apart from the cookie, and is not kept"
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
        cookie, secret = await asyncio.to_thread(_signed_in, port, APPROVER)
        form = urlencode({"token": APPROVER})
        return {
            "signin_evil": (await asyncio.to_thread(_request, port, "POST", "/console/signin", body=form,
                                                    headers={"Origin": "http://evil.test"}))[::2],
            "signin_none": (await asyncio.to_thread(_request, port, "POST", "/console/signin", body=form))[0],
            "signout_evil": (await asyncio.to_thread(_request, port, "POST", "/console/signout", body="",
                                                     headers={"Origin": "http://evil.test", "Cookie": cookie}))[0],
            "ws_evil": await _ws_status(port, {"Origin": "http://evil.test", "Cookie": cookie}, secret=secret),
            "ws_none": await _ws_status(port, {"Cookie": cookie}, secret=secret),
            "ws_same_host_other_port": await _ws_status(port, {"Origin": "http://127.0.0.1:1", "Cookie": cookie},
                                                        secret=secret),
            "ws_good": await _ws_status(port, {"Origin": f"http://127.0.0.1:{port}", "Cookie": cookie}, secret=secret),
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
        cookie, secret = await asyncio.to_thread(_signed_in, port, VIEWER)
        replies = []
        async with connect(f"ws://127.0.0.1:{port}/console/ws", proxy=None,
                           subprotocols=[PROTOCOL, SECRET_PROTOCOL + secret],
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


def test_a_stolen_cookie_with_a_forged_origin_opens_no_websocket_and_changes_nothing(tmp_path: Path) -> None:
    """A browser sends the console's cookie to every port of its host name (RFC 6265, 8.5),
    so a server on another port has it. Replayed by a client that is no browser, with the
    console's own Origin forged, the cookie alone opened an approver's websocket. Now the
    thief, who can also read every page the cookie opens, finds no page secret there, and
    without it opens no websocket, signs nobody out and posts nothing; the page that holds
    the secret still connects."""

    async def body(port: int) -> dict[str, Any]:
        cookie, secret = await asyncio.to_thread(_signed_in, port, APPROVER)
        forged = {"Origin": f"http://127.0.0.1:{port}", "Cookie": cookie}
        harvested = [(await asyncio.to_thread(_request, port, "GET", path, headers={"Cookie": cookie}))[3]
                     for path in ("/console/", "/console/me", "/console/signin", "/console/runs",
                                  "/console/static/secret.js", "/console/static/console.js")]
        stolen = cookie.split("=", 1)[1]
        seen = {
            "harvested": [secret in page for page in harvested],
            "ws_cookie_alone": await _ws_status(port, forged),
            "ws_cookie_as_secret": await _ws_status(port, forged, secret=stolen),
            "ws_guessed_secret": await _ws_status(port, forged, secret="x" * 43),
            "ws_empty_secret": await _ws_status(port, forged, secret=""),
            "signout": (await asyncio.to_thread(_request, port, "POST", "/console/signout", body="", headers=forged))[0],
            "signout_guessed": (await asyncio.to_thread(
                _request, port, "POST", "/console/signout", body=urlencode({"page_secret": stolen}),
                headers=forged))[0],
            "me_after": (await asyncio.to_thread(_request, port, "GET", "/console/me", headers=forged))[0],
            "ws_page": await _ws_status(port, forged, secret=secret),
        }
        seen["signout_page"] = (await asyncio.to_thread(
            _request, port, "POST", "/console/signout", body=urlencode({"page_secret": secret}), headers=forged))[0]
        seen["me_signed_out"] = (await asyncio.to_thread(_request, port, "GET", "/console/me", headers=forged))[0]
        return seen

    seen = _with_console(tmp_path, body)
    assert seen["ws_cookie_alone"] == seen["ws_cookie_as_secret"] == 403
    assert seen["harvested"] == [False] * 6, "no page the cookie opens holds the secret"
    assert seen["ws_guessed_secret"] == seen["ws_empty_secret"] == 403
    assert seen["signout"] == seen["signout_guessed"] == 403 and seen["me_after"] == 200, "still signed in"
    assert seen["ws_page"] == 101
    assert seen["signout_page"] == 303 and seen["me_signed_out"] == 401


def test_a_state_changing_request_needs_the_page_secret_as_well_as_the_origin() -> None:
    """The check the console's other routers get (``authorize_request``): a ``GET`` reads with
    the cookie; a ``POST`` needs the console's Origin and the session's page secret."""
    from starlette.requests import Request

    auth = ConsoleAuth(ConsoleSettings(USERS, ("http://127.0.0.1:8766",)))
    signed = auth.sign_in(APPROVER)
    assert signed is not None
    cookie = f"{auth.cookie}={signed.session}"

    def request(method: str, **headers: str) -> Request:
        raw = [(b"host", b"127.0.0.1:8766"), (b"cookie", cookie.encode()),
               *((k.replace("_", "-").encode(), v.encode()) for k, v in headers.items())]
        return Request({"type": "http", "method": method, "path": "/console/x", "headers": raw, "query_string": b""})

    origin = "http://127.0.0.1:8766"
    assert asyncio.run(auth.authorize_request(request("GET"))) == signed.user
    assert asyncio.run(auth.authorize_request(request("POST", origin=origin))) is None
    assert asyncio.run(auth.authorize_request(request("POST", origin=origin, x_deskpod_page_secret="x" * 43))) is None
    assert asyncio.run(auth.authorize_request(request("POST", origin=origin,
                                                      x_deskpod_page_secret=signed.page_secret))) == signed.user
    assert asyncio.run(auth.authorize_request(request("POST", x_deskpod_page_secret=signed.page_secret))) is None
