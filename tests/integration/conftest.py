"""Integration fixtures: real deskpod stacks, built and started with compose (see deskpod_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskpod_stack import Stack, start_stack


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Build the images and start egress, demo, sandbox (1280x800) and two test sites."""
    yield from start_stack("it", "1280x800")


@pytest.fixture(scope="session")
def hd_stack() -> Iterator[Stack]:
    """A second stack whose sandbox screen is 1920x1080, for the coordinate-mapping cases."""
    yield from start_stack("hd", "1920x1080")
