"""Integration fixtures: real deskpod stacks, built and started with compose (see deskpod_stack.py)."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator

import docker
import pytest

from deskpod_stack import Stack, wait_healthy, compose_command


def _start_stack(name: str, screen: str) -> Iterator[Stack]:
    client = docker.from_env()
    client.ping()
    token = secrets.token_urlsafe(32)
    env = dict(
        os.environ,
        DESKPOD_TOKEN=token,
        DESKPOD_TOKEN_SHA256=hashlib.sha256(token.encode()).hexdigest(),
        DESKPOD_EGRESS_ALLOWLIST="demo.test allowed.test",
        DESKPOD_SCREEN_SIZE=screen,
    )
    s = Stack(f"deskpod{name}{os.getpid()}", env["DESKPOD_TOKEN"], env, compose_command(), client)
    s.run_compose("build", timeout=1800)
    try:
        s.run_compose("up", "-d", "egress", "demo", "sandbox", "allowed", "blocked")
        wait_healthy(s)
        yield s
    finally:
        s.run_compose("down", "-v", "--remove-orphans", "-t", "5", check=False)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Build the images and start egress, demo, sandbox (1280x800) and two test sites."""
    yield from _start_stack("it", "1280x800")


@pytest.fixture(scope="session")
def hd_stack() -> Iterator[Stack]:
    """A second stack whose sandbox screen is 1920x1080, for the coordinate-mapping cases."""
    yield from _start_stack("hd", "1920x1080")
