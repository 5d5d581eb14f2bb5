"""Pages that stop answering, the pure parts and the DevTools channel against a fake
Chromium over a socket pair (no Docker, no X): a page stuck in an endless script is
marked unresponsive after one probe, its commands fail fast from then on, the browser
target still answers, and a page that answers again is cleared
(agentd/browser/devtools.py, agentd/browser/unresponsive.py). The real thing runs in
tests/integration/test_tabs.py."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from deskpod.agentd.browser import devtools
from deskpod.agentd.browser.devtools import DevTools
from deskpod.agentd.browser.dialogs import DialogTracker
from deskpod.agentd.browser.unresponsive import UnresponsivePages
from deskpod.errors import DeskpodError, PageUnresponsiveError

PAGE, SESSION = "T1", "S1"


class FakeChromium:
    """Answers every command at once, but none of session :data:`SESSION`'s while ``frozen``
    (a renderer stuck in a script); ``Slow.command`` is answered after ``slow_s``, the other
    commands meanwhile (a page awaiting a promise: its main thread is free)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frozen = False
        self.slow_s = 0.3
        self.held: list[dict[str, Any]] = []

    async def serve(self) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=self.sock)
        while True:
            try:
                message = json.loads((await reader.readuntil(b"\0"))[:-1])
            except asyncio.IncompleteReadError:
                return
            if message.get("sessionId") == SESSION and self.frozen:
                self.held.append(message)
                continue
            if message["method"] == "Slow.command":
                asyncio.get_running_loop().call_later(self.slow_s, self._answer, writer, message)
                continue
            self._answer(writer, message)

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        writer.write(json.dumps({"id": message["id"], "result": {}}).encode() + b"\0")


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel's waits cut to a fraction, so each case takes well under a second."""
    monkeypatch.setattr(devtools, "WATCH_AFTER_S", 0.05)
    monkeypatch.setattr(devtools, "PROBE_TIMEOUT_S", 0.1)
    monkeypatch.setattr(devtools, "RETRY_PROBE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(devtools, "BESIDE_DIALOG_TIMEOUT_S", 0.1)


async def _channel() -> tuple[DevTools, FakeChromium, asyncio.Task[None]]:
    ours, theirs = socket.socketpair()
    fake = FakeChromium(theirs)
    task = asyncio.create_task(fake.serve())
    channel = DevTools(DialogTracker(), lambda *_: None, lambda: None)
    await channel.open(ours)
    return channel, fake, task


def test_a_page_stuck_in_a_script_is_marked_and_its_commands_fail_fast() -> None:
    async def scenario() -> None:
        channel, fake, task = await _channel()
        fake.frozen = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PageUnresponsiveError) as caught:
            await channel.call("Runtime.evaluate", {"expression": "1"}, SESSION, timeout_s=5.0, page=PAGE)
        assert loop.time() - started < 1.0  # the probe decided, not the command's 5 s
        assert caught.value.code == "execution_failed" and caught.value.detail["tab_id"] == PAGE
        assert [tab for tab, _ in channel.unresponsive.report()] == [PAGE]
        started = loop.time()
        with pytest.raises(PageUnresponsiveError):
            await channel.call("DOM.getDocument", {}, SESSION, timeout_s=5.0, page=PAGE)
        assert loop.time() - started < 0.5
        assert await channel.call("Target.getTargets") == {}  # the browser target still answers
        fake.frozen = False
        assert await channel.call("DOM.getDocument", {}, SESSION, page=PAGE) == {}
        assert channel.unresponsive.report() == []
        channel.close()
        task.cancel()

    asyncio.run(scenario())


def test_a_slow_command_of_a_page_that_answers_the_probe_is_waited_for() -> None:
    async def scenario() -> None:
        channel, fake, task = await _channel()
        assert await channel.call("Slow.command", {}, SESSION, timeout_s=5.0, page=PAGE) == {}
        assert channel.unresponsive.report() == []
        channel.close()
        task.cancel()

    asyncio.run(scenario())


def test_an_open_dialog_blocks_by_design_and_marks_nothing() -> None:
    async def scenario() -> None:
        channel, fake, task = await _channel()
        channel.dialogs.opened("T2", "S2", {"type": "alert", "message": "hi", "url": "http://x.test/"})
        fake.frozen = True
        with pytest.raises(DeskpodError) as caught:
            await channel.call("Runtime.evaluate", {"expression": "1"}, SESSION, timeout_s=5.0, page=PAGE)
        assert not isinstance(caught.value, PageUnresponsiveError)
        assert channel.unresponsive.report() == []
        channel.close()
        task.cancel()

    asyncio.run(scenario())


def test_the_tracker_keeps_the_first_time_and_reports_the_longest_first() -> None:
    pages = UnresponsivePages()
    pages.mark("a", 10.0)
    pages.mark("a", 12.0)
    pages.mark("b", 11.0)
    assert pages.since("a") == 10.0
    assert pages.report(now=15.0) == [("a", 5.0), ("b", 4.0)]
    pages.answered("a")
    assert pages.report(now=15.0) == [("b", 4.0)]
    [page] = pages.pages({"b": "http://x.test/\x07frozen", "c": "http://x.test/"})
    assert page.tab_id == "b" and page.url == "http://x.test/%07frozen" and page.unresponsive_s > 0
    pages.clear()
    assert pages.report() == []
