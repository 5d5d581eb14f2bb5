"""Integration fixtures: real deskpod stacks, built and started with compose (see deskpod_stack.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from deskpod_stack import Stack, start_stack, wait_for_takedowns
from tls_sites import start_ca_stack


@pytest.fixture(scope="session", autouse=True)
def _stacks_taken_down() -> Iterator[None]:
    """Stacks go down in the background (``deskpod_stack._take_down``); at the session's end,
    after every stack fixture, wait for all of them. A ``down`` that failed is a warning, as
    it was when each ran in the foreground: the containers are the host's to clean."""
    yield
    for failure in wait_for_takedowns():
        warnings.warn(f"compose down failed: {failure}", stacklevel=1)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Build the images and start egress, demo, sandbox (1280x800) and two test sites."""
    yield from start_stack("it", "1280x800")


@pytest.fixture(scope="session")
def ca_stack() -> Iterator[Stack]:
    """A stack that trusts an operator CA, with TLS sites (:func:`tls_sites.start_ca_stack`)."""
    yield from start_ca_stack("eca")


@pytest.fixture(scope="session")
def hd_stack() -> Iterator[Stack]:
    """A second stack whose sandbox screen is 1920x1080, for the coordinate-mapping cases."""
    yield from start_stack("hd", "1920x1080")


DEVICE_SCALE_FACTORS = (1.0, 1.5, 2.0)
"""Chromium's device scale factors the coordinate contract is checked at."""


@pytest.fixture(scope="session", params=DEVICE_SCALE_FACTORS, ids=lambda f: f"dsf{f:g}")
def scaled_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """A 1920x1080 sandbox whose browser runs at each of :data:`DEVICE_SCALE_FACTORS`
    (``DESKPOD_DEVICE_SCALE_FACTOR``); at 1.0 it is ``hd_stack``. One runs at a time:
    pytest takes a parametrized session fixture down before its next parameter."""
    if request.param == 1.0:
        yield request.getfixturevalue("hd_stack")
        return
    yield from start_stack(f"dsf{int(request.param * 10)}", "1920x1080",
                           DESKPOD_DEVICE_SCALE_FACTOR=f"{request.param:g}")


@pytest.fixture(scope="module")
def desktop_stack(stack: Stack) -> Iterator[Stack]:
    """The shared stack with the ``desktop`` service (the applications' zone) started beside it,
    removed again at the end of the module."""
    stack.run_compose("--profile", "desktop", "up", "-d", "--no-deps", "desktop")
    try:
        yield stack
    finally:
        stack.run_compose("--profile", "desktop", "rm", "-s", "-f", "desktop", check=False)
