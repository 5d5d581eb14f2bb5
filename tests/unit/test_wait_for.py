"""``wait_for``'s text conditions as the daemon checks them (deskpod.agentd.wait_for),
with a scripted page probe: ``text_absent`` holds once the page's text no longer has the text,
never while the page cannot be read, and times out as ``text_present`` does. No X server: the
text conditions read only the page."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from deskpod.agentd.wait_for import wait_for
from deskpod.errors import ActionTimeoutError
from deskpod.protocol import WaitFor


def _wait(action: WaitFor, texts: Iterator[str | None]) -> int:
    """Run ``action`` against a page whose text is the next of ``texts`` at each check (the
    last one for ever after); returns how many checks it took."""
    seen: list[str | None] = []
    last: list[str | None] = [None]

    async def probe(with_text: bool) -> tuple[str | None, str | None]:
        assert with_text, "a text condition reads the page's text"
        last[0] = next(texts, last[0])
        seen.append(last[0])
        return "http://demo.test/", last[0]

    async def digest() -> bytes:
        raise AssertionError("a text condition never reads the screen")

    assert asyncio.run(wait_for(action, threading.Event(), probe, digest))
    return len(seen)


def test_text_absent_holds_once_the_text_is_gone_from_the_page() -> None:
    action = WaitFor.model_validate({"type": "wait_for", "text_absent": "Loading", "timeout_s": 5})
    assert _wait(action, iter(["Loading the list", "still Loading", "12 results"])) == 3


@pytest.mark.parametrize("texts", [["Loading"], [None]], ids=["never gone", "page unreadable"])
def test_text_absent_times_out_while_the_text_stays_or_the_page_cannot_be_read(texts: list[str | None]) -> None:
    action = WaitFor.model_validate({"type": "wait_for", "text_absent": "Loading", "timeout_s": 0.2})
    with pytest.raises(ActionTimeoutError):
        _wait(action, iter(texts))
