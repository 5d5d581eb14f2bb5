"""The daemon's download permission across requests (:class:`DownloadGate`), on a
stand-in for the browser that records when it was told what (the browser's part is
``tests/integration/test_downloads.py``). The grace is shortened to 0.2 s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import deskpod.agentd.browser.download_gate
from deskpod.agentd.browser.download_gate import DownloadGate
from deskpod.agentd.browser.downloads import Downloads

GRACE_S = 0.2


class FakeBrowser:
    """Records each change of the download permission as ``(seconds since start, permitted)``."""

    def __init__(self, tmp_path: Path) -> None:
        self.downloads = Downloads(tmp_path / "downloads")
        self.started = time.monotonic()
        self.told: list[tuple[float, bool]] = []

    async def permit_downloads(self, permitted: bool) -> None:
        if permitted != self.downloads.permitted:
            self.downloads.permitted = permitted
            self.told.append((time.monotonic() - self.started, permitted))


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBrowser:
    monkeypatch.setattr(deskpod.agentd.browser.download_gate, "GRACE_S", GRACE_S)
    return FakeBrowser(tmp_path)


async def serve(gate: DownloadGate, permitted: bool, sends_input: bool = True) -> tuple[float, bool]:
    """Serve one request; return when it ran (seconds since the browser's start) and the
    permission it ran under."""
    async with gate.serving(permitted, sends_input):
        return time.monotonic() - gate.browser.started, gate.browser.downloads.permitted  # type: ignore[attr-defined]


def test_an_unpermitted_input_request_waits_out_the_grace_then_runs_refused(browser: FakeBrowser) -> None:
    async def run() -> tuple[float, bool]:
        gate = DownloadGate(browser)  # type: ignore[arg-type]
        await serve(gate, True)
        return await serve(gate, False)

    ran_at, permitted = asyncio.run(run())
    assert permitted is False
    assert ran_at >= GRACE_S
    assert [p for _, p in browser.told] == [True, False]


def test_an_observation_runs_at_once_and_leaves_the_grace_running(browser: FakeBrowser) -> None:
    async def run() -> tuple[tuple[float, bool], float]:
        gate = DownloadGate(browser)  # type: ignore[arg-type]
        await serve(gate, True)
        looked = await serve(gate, False, sends_input=False)
        await asyncio.sleep(GRACE_S * 2)
        return looked, time.monotonic() - browser.started

    (ran_at, permitted), _ = asyncio.run(run())
    assert permitted is True and ran_at < GRACE_S
    # The grace ended on its own, at its time.
    assert [p for _, p in browser.told] == [True, False]
    assert browser.told[1][0] >= GRACE_S


def test_a_permitted_request_ends_the_grace_without_a_refusal_in_between(browser: FakeBrowser) -> None:
    async def run() -> None:
        gate = DownloadGate(browser)  # type: ignore[arg-type]
        await serve(gate, True)
        assert (await serve(gate, True))[1] is True
        await asyncio.sleep(GRACE_S / 2)
        # The first grace was cancelled: only the second one's refusal comes.
        assert [p for _, p in browser.told] == [True]
        await asyncio.sleep(GRACE_S)

    asyncio.run(run())
    assert [p for _, p in browser.told] == [True, False]


def test_a_request_cancelled_while_it_waits_leaves_the_grace_for_the_next(browser: FakeBrowser) -> None:
    async def run() -> bool:
        gate = DownloadGate(browser)  # type: ignore[arg-type]
        await serve(gate, True)
        waiting = asyncio.create_task(serve(gate, False))
        await asyncio.sleep(GRACE_S / 4)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # A permitted request now: the old grace must not refuse downloads during it.
        async with gate.serving(True):
            await asyncio.sleep(GRACE_S)
            return browser.downloads.permitted

    assert asyncio.run(run()) is True
    assert [p for _, p in browser.told] == [True]


def test_a_refusal_the_browser_did_not_take_is_asked_again(tmp_path: Path) -> None:
    """The browser's own setting: a failed ``deny`` leaves downloads permitted in the
    browser, so the daemon must not believe it refused them (it asks again next time)."""
    from deskpod.agentd.browser.cdp import Browser
    from deskpod.errors import BrowserError

    sent: list[str] = []
    failing = [True]

    async def call(method: str, params: dict[str, object] | None = None, *args: object, **kwargs: object) -> dict:
        sent.append(str((params or {}).get("behavior")))
        if params and params.get("behavior") == "deny" and failing[0]:
            raise BrowserError("the browser did not answer")
        return {}

    async def run() -> None:
        browser = Browser()
        browser.downloads = Downloads(tmp_path / "downloads")
        browser._call = call  # type: ignore[method-assign]
        await browser.permit_downloads(True)
        with pytest.raises(BrowserError):
            await browser.permit_downloads(False)
        assert browser.downloads.permitted is True
        failing[0] = False
        await browser.permit_downloads(False)
        assert browser.downloads.permitted is False

    asyncio.run(run())
    assert sent == ["allowAndName", "deny", "deny"]
