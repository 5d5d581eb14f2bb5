"""The active tab's console and network logs (deskpod.agentd.browser.page_logs) on a real
Chromium and Xvfb, read through the daemon's own DevTools client over its pipe: what a page
logs and fetches appears, a new page starts both logs again, and a page spamming thousands
of messages, a 100,000-character one and hundreds of requests stays within the caps."""

from __future__ import annotations

import asyncio
import functools
import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import FIXTURES_DIR, PrivateXvfb, _chromium_binary, _stop

from deskpod.agentd.browser.cdp import Browser
from deskpod.protocol import ConsoleLog, NetworkLog
from deskpod.protocol.limits import MAX_CONSOLE_MESSAGES, MAX_CONSOLE_TEXT_CHARS, MAX_NETWORK_REQUESTS

_T = TypeVar("_T")

BUDGET = 1 << 20
"""Bytes each log may take in these reads (more than the caps make)."""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def base_url() -> Iterator[str]:
    """The display fixtures served on a loopback port of their own."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(FIXTURES_DIR)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def chromium(private_xvfb: PrivateXvfb, tmp_path: Path) -> Iterator[socket.socket]:
    """Chromium on the test's own Xvfb with DevTools on a socket pair, as the daemon starts it
    (``--no-sandbox`` only because these host tests run as root); yields the daemon's end."""
    ours, theirs = socket.socketpair()
    argv = [_chromium_binary(), "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}", "--remote-debugging-pipe",
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--password-store=basic", "--ozone-platform=x11",
            "--window-size=640,480", "about:blank"]
    env = {"DISPLAY": private_xvfb.display_name, "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(["/bin/sh", "-c", 'exec "$0" "$@" 3<&0 4<&0 0</dev/null', *argv], stdin=theirs.fileno(),
                               env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "chromium.log").open("wb"),
                               start_new_session=True)
    theirs.close()
    try:
        yield ours
    finally:
        _stop(process)


def _run(pipe: socket.socket, body: Callable[[Browser], Awaitable[_T]]) -> _T:
    """Attach the daemon's :class:`Browser` to ``pipe`` and run ``body`` with it."""
    async def main() -> _T:
        browser = Browser()
        await browser.attach(pipe)
        try:
            return await body(browser)
        finally:
            await browser.close()

    return asyncio.run(main())


async def _until(read: Callable[[], Awaitable[_T]], done: Callable[[_T], bool], timeout_s: float = 10.0) -> _T:
    """``read()`` again until ``done`` holds of it (its last value after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await read()
        if done(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.1)


def test_what_a_page_logs_and_fetches_appears_and_a_new_page_starts_both_logs_again(
        chromium: socket.socket, base_url: str) -> None:
    page = f"{base_url}/page_logs.html"

    async def body(browser: Browser) -> tuple[ConsoleLog, NetworkLog, ConsoleLog, NetworkLog]:
        await browser.navigate(page, 20)
        console = await _until(lambda: browser.read_console(BUDGET),
                               lambda log: sum(m.source == "exception" for m in log.messages) >= 1
                               and any("404" in m.text for m in log.messages))
        network = await _until(lambda: browser.read_network(BUDGET),
                               lambda log: any(r.url.endswith("/missing.json") and r.state != "pending"
                                               for r in log.requests))
        await browser.navigate(f"{base_url}/settle.html", 20)
        return console, network, await browser.read_console(BUDGET), await browser.read_network(BUDGET)

    console, network, console_after, network_after = _run(chromium, body)
    by_text = {m.text: m for m in console.messages}
    hello = by_text["hello from the page 42 Object"]
    assert (hello.level, hello.source, hello.url, hello.line) == ("info", "console", page, 8), hello
    assert by_text["careful"].level == "warning" and by_text["bad thing happened"].level == "error"
    boom = next(m for m in console.messages if m.source == "exception")
    assert boom.level == "error" and boom.text.startswith("Uncaught Error: boom"), boom
    failed = [m for m in console.messages if m.source == "browser"]
    assert failed and failed[0].level == "error" and "404" in failed[0].text, console.messages
    assert len([m for m in console.messages if m.text == "careful"]) == 1, "each message once"
    assert console.dropped == 0
    shown = [(r.method, r.url.removeprefix(base_url), r.resource_type, r.state, r.status) for r in network.requests]
    assert shown[0] == ("GET", "/page_logs.html", "Document", "done", 200), shown
    assert ("GET", "/page_logs.html?api=1", "Fetch", "done", 200) in shown, shown
    assert ("GET", "/missing.json", "Fetch", "done", 404) in shown, shown
    # A new page: its own document's request first, and nothing of the page before.
    assert network_after.requests[0].url == f"{base_url}/settle.html", network_after
    assert not any("page_logs" in r.url or "missing" in r.url for r in network_after.requests)
    assert not any("hello" in m.text for m in console_after.messages), console_after


def test_a_page_spamming_its_console_and_the_network_stays_within_the_caps(
        chromium: socket.socket, base_url: str) -> None:
    async def body(browser: Browser) -> tuple[ConsoleLog, ConsoleLog, NetworkLog, int, int]:
        await browser.navigate(f"{base_url}/page_logs.html", 20)
        # The console is listened to from now on; the page's own 404 is logged before the spam.
        await _until(lambda: browser.read_console(BUDGET), lambda log: any("404" in m.text for m in log.messages))
        await browser.evaluate("spamConsole(5000)")
        console = await _until(lambda: browser.read_console(BUDGET),
                               lambda log: bool(log.messages) and log.messages[-1].text.startswith("xxx"))
        small = await browser.read_console(4096)
        await browser.evaluate("spamNetwork(300)")
        network = await _until(lambda: browser.read_network(BUDGET),
                               lambda log: log.dropped >= 100 and all(r.state != "pending" for r in log.requests))
        return console, small, network, len(browser.console_messages._kept), len(browser.network_requests._kept)

    console, small, network, kept_messages, kept_requests = _run(chromium, body)
    assert kept_messages <= MAX_CONSOLE_MESSAGES and kept_requests <= MAX_NETWORK_REQUESTS
    assert len(console.messages) == MAX_CONSOLE_MESSAGES and console.dropped >= 5000 - MAX_CONSOLE_MESSAGES
    assert console.messages[-1].text == "x" * MAX_CONSOLE_TEXT_CHARS, [(m.text[:60], m.url) for m in console.messages[-3:]]
    assert [m.text for m in console.messages[-3:-1]] == ["spam 4998", "spam 4999"], "the newest, in order"
    assert len(network.requests) == MAX_NETWORK_REQUESTS and network.dropped >= 300 + 3 - MAX_NETWORK_REQUESTS
    assert network.requests[-1].url.endswith("/settle.html?n=299"), network.requests[-1]
    # A reply's budget: the newest messages that fit, the rest counted.
    assert len(small.model_dump_json().encode()) <= 4096
    assert small.messages[-1] == console.messages[-1]
    assert small.dropped == console.dropped + len(console.messages) - len(small.messages)
