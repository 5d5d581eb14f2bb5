"""The pure tier: every test in ``tests/unit`` runs without processes, X displays or Docker.

``scripts/test.sh unit`` runs this folder without the tests marked ``process``
(``-m "not process"``) and must stay fast; the whole suite (``scripts/test.sh``) runs
them all. Each phase of an unmarked test (setup, call, teardown, so also the module- and
session-scoped fixtures it sets up) runs under :func:`purity.pure`: a subprocess, a fork,
an X display or the Docker engine is refused with a message that says where the test
belongs. A test that needs one is marked ``@pytest.mark.process`` or moves to
``tests/display`` or ``tests/integration``.

A GUI run that ends right after an action permitted to start downloads looks for one to
begin for :data:`~deskpod.controller.gui.endings.DOWNLOAD_BEGIN_WAIT_S` (3 s); no fake
sandbox of this tier starts a download late, so that look is off here
(:func:`no_late_download_look`) except in the tests about it, which set their own.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from purity import guard, prime

from deskpod.controller.gui import endings

prime()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    return (yield from guard(item))


@pytest.fixture(autouse=True)
def no_late_download_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's end does not look for a download to begin (see the module)."""
    monkeypatch.setattr(endings, "DOWNLOAD_BEGIN_WAIT_S", 0.0)
