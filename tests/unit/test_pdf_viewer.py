"""Waiting for the browser's PDF viewer to have its document (agentd/browser/pdf_viewer.py),
against a stand-in for the viewer's frames; the real viewer is tests/integration/test_pdf_and_huge_pages.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from deskpod.agentd.browser.pdf_viewer import VIEWER_EXTENSION, VIEWER_SCRIPT, wait_loaded
from deskpod.errors import BrowserError
from virtual_time import virtual_time


@pytest.fixture(autouse=True)
def _on_virtual_time() -> Iterator[None]:
    with virtual_time():
        yield


class Frames:
    """Out-of-process frames that answer the viewer script from a script of answers per
    session (an exception is raised; the last answer repeats)."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str]] = []

    def sessions(self) -> list[str]:
        return list(self.answers)

    async def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                   timeout_s: float = 1.0) -> dict[str, Any]:
        assert method == "Runtime.evaluate" and params is not None and session is not None
        self.asked.append((session, params["expression"]))
        script = self.answers[session]
        answer = script.pop(0) if len(script) > 1 else script[0]
        await asyncio.sleep(0.005)
        if isinstance(answer, Exception):
            raise answer
        return {"result": {"value": answer}}


def run(frames: Frames, timeout_s: float = 1.0) -> tuple[bool, float]:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        done = await wait_loaded(frames.call, frames.sessions, timeout_s)
        return done, loop.time() - started
    return asyncio.run(main())


def test_the_viewer_is_asked_until_its_frame_has_made_it_then_its_load_ends_the_wait() -> None:
    """The frame's first document is not the viewer's, or its context is gone (an error):
    it is asked again until the viewer answers, in its main world with the budget left."""
    frames = Frames({"other": ["absent"], "viewer": [BrowserError("no context"), "absent", "success"]})
    done, waited = run(frames)
    assert done and waited < 0.1
    assert all(expression.startswith(VIEWER_SCRIPT + "(") for _, expression in frames.asked)
    assert frames.asked[-1][0] == "viewer"


@pytest.mark.parametrize("state", ["failed", "password"])
def test_a_viewer_that_failed_or_asks_for_a_password_ends_the_wait(state: str) -> None:
    done, _ = run(Frames({"viewer": [state]}))
    assert done


def test_a_viewer_still_loading_at_the_end_of_its_budget_or_none_at_all_is_not_done_in_time() -> None:
    assert run(Frames({"viewer": ["loading"]}), 0.5) == (False, pytest.approx(0.005))
    done, waited = run(Frames({"other": ["absent"]}), 0.5)
    assert not done and 0.5 <= waited < 0.52
    done, waited = run(Frames({}), 0.5)
    assert not done and 0.5 <= waited < 0.52


def test_the_script_looks_only_at_the_pdf_viewers_own_frames() -> None:
    assert f'location.origin !== "chrome-extension://{VIEWER_EXTENSION}"' in VIEWER_SCRIPT
