"""The console's cards in a real browser: a card never outlives its run, and a host name shared by ports is safe.

Found trying the console as a new user would: a card's countdown said "120 s left" while its run's own
limit ended at 60 s, and approving at 63 s did nothing while the card just vanished (the
reason was only in run history); and two consoles on 127.0.0.1 signed each other's user
out (one cookie name for both). Found by a security review: the browser hands the
console's cookie to every port of its host name, and that cookie alone opened an
approver's websocket from a client that is no browser. The real service with its console serves Debian's
Chromium (Playwright); an agent connection submits the action; the daemon is the fake of
:mod:`hostile_daemon`.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import re
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon
from running_service import running_service
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deskpod import ControllerClient
from deskpod.controller.policy.policy_file import Policy
from deskpod.service.console.auth import ConsoleUser
from deskpod.service.messages import ServiceConfirmationRequired, ServiceError, ServiceFinished, ServiceObservation

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]  # Chromium

TOKEN = "s" * 43
APPROVER = "a" * 43
USERS = (ConsoleUser("ada", "approver", hashlib.sha256(APPROVER.encode()).hexdigest()),)
RUN_LIMIT_S = 6


@contextmanager
def _services(tmp_path: Path, count: int, policy: Policy | None = None) -> Iterator[tuple[list[int], Any]]:
    """``count`` services with consoles on 127.0.0.1, served by a loop in a thread; yields their
    ports and a function that runs a coroutine on that loop."""
    loop = asyncio.new_event_loop()
    ports: list[int] = []
    ready = threading.Event()
    stop = asyncio.Event()

    @asynccontextmanager
    async def nested(n: int) -> AsyncIterator[None]:
        if n == count:
            yield
            return
        async with running_service(TOKEN, tmp_path / f"audit{n}", approver_token=APPROVER, policy=policy,
                                   console_users=USERS) as port:
            ports.append(port)
            async with nested(n + 1):
                yield

    async def serve() -> None:
        async with nested(0):
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        yield ports, lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(60)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def _sign_in(page: Any, port: int) -> None:
    page.goto(f"http://127.0.0.1:{port}/console/signin")
    page.fill("#token", APPROVER)
    page.click("button[type=submit]")
    page.locator("#status", has_text="connected as").wait_for(timeout=20_000)


def test_a_card_counts_down_to_its_runs_end_and_is_withdrawn_saying_why_when_the_run_ends(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    task = {"name": "short", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
            "limits": {"max_wall_time_s": RUN_LIMIT_S}, "success": {"url_matches": "^never$", "timeout_s": 0.2}}

    async def agent(port: int, daemon: HostileDaemon) -> tuple[str, dict[str, Any]]:
        client = await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", TOKEN)
        opened = await client.open(daemon.url, "t" * 32, task)
        await client.ready(opened.session)
        submitting = asyncio.ensure_future(client.submit(opened.session, [{"type": "click", "x": 10, "y": 10}]))
        return opened.session, {"client": client, "submitting": submitting}

    async def late_answer(port: int, request: Any) -> ServiceError:
        async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", APPROVER,
                                                  role="approver") as human:
            await human.confirm(request["id"], True, request["digest"])
            async for notice in human.events():
                if isinstance(notice, ServiceError):
                    return notice
        raise AssertionError("no answer")

    async def first_card(port: int) -> Any:
        async with await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", APPROVER,
                                                  role="approver") as human:
            async for notice in human.events():
                if isinstance(notice, ServiceConfirmationRequired):
                    return notice.request
        raise AssertionError("no card")

    async def ended(state: dict[str, Any]) -> Any:
        result = await asyncio.wait_for(state["submitting"], 30)
        await state["client"].close()
        return result

    with HostileDaemon() as daemon, _services(tmp_path, 1, Policy(confirm_actions=["click"])) as (ports, run), \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            page = browser.new_page()
            _sign_in(page, ports[0])
            _, state = run(agent(ports[0], daemon))
            card = page.locator("article.confirm")
            card.wait_for(timeout=20_000)
            shown = int(re.match(r"(\d+) s left", card.locator(".countdown").text_content() or "").group(1))
            request = run(first_card(ports[0]))
            note = card.locator(".withdrawn-reason")
            note.wait_for(timeout=(RUN_LIMIT_S + 10) * 1000)
            reason = note.text_content() or ""
            approve_disabled = card.locator("button.approve").is_disabled()
            late = run(late_answer(ports[0], request))
            finished = run(ended(state))
        finally:
            browser.close()
    assert shown <= RUN_LIMIT_S and request["timeout_s"] <= RUN_LIMIT_S  # not the card's own 120 s
    assert "the run's time limit ended (max_wall_time_s=6)" in reason and "not run" in reason, reason
    assert approve_disabled
    assert late.error.detail["rule"] == "withdrawn" and "time limit" in late.error.message
    assert isinstance(finished, ServiceFinished) and "max_wall_time_s" in finished.result.reason
    assert not any(a.get("type") == "click" for r in daemon.requests for a in r.get("actions", []))


def test_two_consoles_on_one_host_keep_their_sign_ins_apart(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with _services(tmp_path, 2) as (ports, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            page = browser.new_page()  # one browser: one cookie jar for 127.0.0.1
            _sign_in(page, ports[0])
            _sign_in(page, ports[1])
            statuses = [page.request.get(f"http://127.0.0.1:{port}/console/me").status for port in ports]
            names = sorted(c["name"] for c in page.context.cookies())
        finally:
            browser.close()
    assert statuses == [200, 200]
    assert names == sorted(f"deskpod-console-{port}" for port in ports)


class _OtherPort:
    """Another server on the console's host name (any local service the person's browser visits):
    it keeps the ``Cookie`` header of every request it gets."""

    def __init__(self) -> None:
        cookies: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                cookies.append(self.headers.get("Cookie") or "")
                body = b"<!doctype html><title>another service</title>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.cookies = cookies
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def _approver_socket(port: int, cookie: str) -> int:
    """What the thief gets from the console's websocket with the cookie and the console's Origin, forged."""
    try:
        async with connect(f"ws://127.0.0.1:{port}/console/ws", proxy=None,
                           additional_headers={"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_a_server_on_another_port_gets_the_cookie_and_opens_nothing_while_the_console_works(tmp_path: Path
                                                                                             ) -> None:
    """Chromium, signed in to the console, visits another port of 127.0.0.1: the browser sends it
    the console's cookie (RFC 6265, 8.5). Replayed from a client that is no browser, with the
    console's Origin, it opened an approver's websocket. Now it is refused, and the console in
    the browser still connects, shows the live view, approves a card and signs out."""
    from playwright.sync_api import sync_playwright

    task = {"name": "pay", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
            "success": {"url_matches": "^never$", "timeout_s": 0.2}}

    async def agent(port: int, daemon: HostileDaemon) -> dict[str, Any]:
        client = await ControllerClient.connect(f"ws://127.0.0.1:{port}/v1/controller", TOKEN)
        opened = await client.open(daemon.url, "t" * 32, task)
        await client.ready(opened.session)
        submitting = asyncio.ensure_future(client.submit(opened.session, [{"type": "click", "x": 10, "y": 10}]))
        return {"client": client, "submitting": submitting}

    async def answered(state: dict[str, Any]) -> Any:
        reply = await asyncio.wait_for(state["submitting"], 30)
        await state["client"].close()
        return reply

    other = _OtherPort()
    with HostileDaemon() as daemon, _services(tmp_path, 1, Policy(confirm_actions=["click"])) as (ports, run), \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            context = browser.new_context()
            page = context.new_page()
            _sign_in(page, ports[0])
            context.new_page().goto(f"http://127.0.0.1:{other.port}/")
            stolen = next(c for c in other.cookies if f"deskpod-console-{ports[0]}=" in c)
            thief = run(_approver_socket(ports[0], stolen))
            state = run(agent(ports[0], daemon))
            page.locator("article.session canvas.live[data-live-stream]").wait_for(timeout=20_000)
            page.locator("article.confirm button.approve").click(timeout=20_000)
            reply = run(answered(state))
            page.click('form[action="/console/signout"] button[type=submit]')
            page.wait_for_url(re.compile(r"/console/signin$"), timeout=20_000)
            kept = page.evaluate("window.localStorage.getItem('deskpod-console-page-secret')")
            after = page.request.get(f"http://127.0.0.1:{ports[0]}/console/me").status
        finally:
            browser.close()
            other.close()
    assert thief == 403, "the cookie alone, with a forged Origin, opens no approver's websocket"
    assert isinstance(reply, ServiceObservation) and reply.status == "ok", reply
    assert any(a.get("type") == "click" for r in daemon.requests for a in r.get("actions", [])), "approved, run"
    assert kept is None and after == 401, "signed out: the session and the page's secret are gone"
