"""Downloads, file choosers and websockets, on a real sandbox, egress proxy and demo site.

A download begins only when the request that caused it carries the controller's
permission (``allow_downloads``); every download, refused or not, is reported in
the observation (name, size, progress, state). A file chooser is an event, not a
native dialog. Websockets reach allowlisted hosts through the proxy, on port 80
and on the allowlist's ``host:port`` entries only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from deskpod.client import SandboxClient
from deskpod.errors import NavigationError
from deskpod.protocol import Download, ErrorReply, Observation, ObserveOptions, Point

from deskpod_stack import Stack, ok, send, start_stack, with_client

pytestmark = pytest.mark.integration

FIXTURE = "http://demo.test/fixtures/downloads-files"
WS_FIXTURE = "http://demo.test/fixtures/downloads-ws"
LATE_FIXTURE = "http://demo.test/fixtures/downloads-late"
QUIET = ObserveOptions(screenshot=False)


@pytest.fixture(scope="module")
def dl_stack() -> Iterator[Stack]:
    """A stack whose allowlist also names ``blocked.test:8081`` (that host on that port only)."""
    yield from start_stack("dl", "1280x800", DESKPOD_EGRESS_ALLOWLIST="demo.test allowed.test blocked.test:8081")


def sandbox_files(stack: Stack) -> dict[str, int]:
    """Every file in the sandbox's downloads folder, with its size in bytes."""
    return stack.exec_python("sandbox", "import json, os; d = '/tmp/downloads'; print(json.dumps("
                                        "{n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)}))")


def sandbox_read(stack: Stack, path: str) -> str:
    return stack.exec_python("sandbox", f"import json; print(json.dumps(open({path!r}).read()))")


async def load(client: SandboxClient, url: str, allow: bool = False) -> None:
    """Navigate; a download URL aborts the navigation (reported as a failure), which is fine here."""
    try:
        await client.navigate(url, QUIET, allow_downloads=allow)
    except NavigationError:
        pass


async def until(client: SandboxClient, name: str, states: set[str], timeout_s: float = 20.0,
                first: Observation | None = None) -> tuple[Download, list[Download]]:
    """Observe (from ``first``, the reply of the request that started it, if any) until the
    download ``name`` is in one of ``states``; return it and every report of it seen on the way."""
    seen: list[Download] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        obs, first = first or await client.act([], QUIET), None
        mine = [d for d in obs.downloads if d.name == name]
        seen += mine
        if mine and mine[-1].state in states:
            return mine[-1], seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"download {name} never reached {states}: {seen}")


async def point_of(client: SandboxClient, text: str) -> tuple[int, int]:
    """A screen point on the fixture's row whose text starts with ``text`` (scanning down x=640)."""
    for y in range(60, 800, 20):
        obs = await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=640, y=y)))
        el = obs.element_at
        if el is not None and (el.text or el.name or "").startswith(text):
            return 640, y + 20
    raise AssertionError(f"no row {text!r} on the fixture")


def test_a_download_without_permission_is_blocked_and_leaves_no_file(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Download, Download]:
        await load(client, "http://demo.test/download?name=unasked.txt")
        by_url, _ = await until(client, "unasked.txt", {"blocked", "complete", "failed"})
        # Typed into the address bar, as an agent would (an L1 keyboard action).
        obs = await client.act([{"type": "keypress", "keys": ["ctrl", "l"]},
                                {"type": "type", "text": "http://demo.test/download?name=typed.txt\n"}], QUIET)
        typed, _ = await until(client, "typed.txt", {"blocked", "complete", "failed"}, first=obs)
        return by_url, typed

    by_url, typed = with_client(dl_stack, body)
    for d in (by_url, typed):
        assert d.state == "blocked" and d.reason == "not_permitted" and d.path is None, d
        assert d.url.startswith("http://demo.test/download?name="), d
    files = sandbox_files(dl_stack)
    assert not [n for n in files if "unasked" in n or "typed" in n or n.endswith(".crdownload")], files


def test_a_permitted_attachment_completes_into_the_downloads_folder(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Download, object, object]:
        await load(client, "http://demo.test/download?name=asked.txt", allow=True)
        done, _ = await until(client, "asked.txt", {"complete", "failed", "blocked"})
        # The agent's file tools read the folder; writing there is refused (not the workspace).
        read = await ok(client, type="read_file", path="/tmp/downloads/asked.txt")
        write = await send(client, type="write_file", path="/tmp/downloads/asked.txt", content="changed")
        return done, read, write

    done, read, write = with_client(dl_stack, body)
    want = "deskpod demo download asked.txt\n"
    assert read.content == want, read
    assert isinstance(write, ErrorReply), write
    assert done.state == "complete" and done.reason is None, done
    assert done.path == "/tmp/downloads/asked.txt" and done.received_bytes == len(want), done
    assert done.total_bytes == len(want) and done.progress == 1.0, done
    assert sandbox_read(dl_stack, done.path) == want


def test_a_blob_download_from_an_http_page_completes(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Download, Download]:
        await client.navigate(FIXTURE, QUIET)
        x, y = await point_of(client, "blob:")
        obs = await client.act([{"type": "click", "x": x, "y": y}], QUIET)
        refused, _ = await until(client, "notes.txt", {"blocked", "complete", "failed"}, first=obs)
        obs = await client.act([{"type": "click", "x": x, "y": y}], QUIET, allow_downloads=True)
        done, _ = await until(client, "notes.txt", {"complete", "failed"}, first=obs)
        return refused, done

    refused, done = with_client(dl_stack, body)
    assert refused.state == "blocked" and refused.reason == "not_permitted", refused
    assert done.state == "complete" and done.url.startswith("blob:http://demo.test/"), done
    assert sandbox_read(dl_stack, done.path or "") == "deskpod blob download\n"
    assert not [n for n in sandbox_files(dl_stack) if n.endswith(".crdownload") or n.startswith("Unconfirmed")]


def test_a_slow_download_is_reported_in_progress_and_complete_only_when_whole(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Download, list[Download]]:
        await client.navigate(FIXTURE, QUIET)
        x, y = await point_of(client, "slow:")
        obs = await client.act([{"type": "click", "x": x, "y": y}], QUIET, allow_downloads=True)
        return await until(client, "slow.bin", {"complete", "failed"}, timeout_s=40, first=obs)

    done, seen = with_client(dl_stack, body)
    partial = [d for d in seen if d.state == "in_progress" and d.total_bytes and 0 < d.received_bytes < d.total_bytes]
    assert partial, seen
    assert all(d.progress is not None and 0.0 <= d.progress < 1.0 and d.path is None for d in partial), partial
    assert done.state == "complete" and done.received_bytes == done.total_bytes == 65536, done
    assert sandbox_files(dl_stack)["slow.bin"] == 65536


def test_a_permitted_download_that_begins_after_the_reply_survives_the_next_request(dl_stack: Stack) -> None:
    """The link's server answers 600 ms after the click, long after the page settled; the
    agent's next action (input, without permission) comes at once. The permitted
    download completes; the same link clicked by that unpermitted action is refused."""
    async def body(client: SandboxClient) -> tuple[Observation, Observation, Download, Download]:
        await client.navigate(LATE_FIXTURE, QUIET)
        clicked = await client.act([{"type": "click", "x": 640, "y": 380}], QUIET, allow_downloads=True)
        at_once = await client.act([{"type": "move", "x": 100, "y": 700}], QUIET)
        permitted, _ = await until(client, "late.txt", {"complete", "failed", "blocked"}, first=at_once)
        again = await client.act([{"type": "click", "x": 640, "y": 380}], QUIET)
        _, seen = await until(client, "late.txt", {"complete", "failed", "blocked"}, first=again)
        refused = [d for d in seen if d.id != permitted.id][-1]
        return clicked, at_once, permitted, refused

    clicked, at_once, permitted, refused = with_client(dl_stack, body)
    # The reply came before the download began: nothing of it was known yet.
    assert not [d for d in clicked.downloads if d.name == "late.txt"], clicked.downloads
    assert permitted.state == "complete" and permitted.path == "/tmp/downloads/late.txt", permitted
    assert refused.state == "blocked" and refused.reason == "not_permitted", refused
    assert [n for n in sandbox_files(dl_stack) if n.startswith("late")] == ["late.txt"]


def test_a_download_an_unpermitted_click_started_stays_refused_in_a_permitted_window(dl_stack: Stack) -> None:
    """A review's attack: the agent clicks a download link without permission (its server
    answers 600 ms later), then gets one action permitted that downloads nothing, then
    only looks. The download begins inside the permitted window; its request was sent
    without permission, so it is refused and no file is left. (With the run's allowlist
    in force, as in every controller run: the browser's interception marks the request.)"""
    before = set(sandbox_files(dl_stack))

    async def body(client: SandboxClient) -> tuple[Observation, Download]:
        await client.set_egress(["demo.test"])
        try:
            await client.navigate(LATE_FIXTURE, QUIET)
            await client.act([{"type": "click", "x": 640, "y": 380}], QUIET)
            permitted = await client.act([{"type": "move", "x": 100, "y": 700}], QUIET, allow_downloads=True)
            late, _ = await until(client, "late.txt", {"complete", "failed", "blocked"}, first=permitted)
            return permitted, late
        finally:
            await client.set_egress(None)

    permitted, late = with_client(dl_stack, body)
    assert not [d for d in permitted.downloads if d.name == "late.txt"], permitted.downloads
    assert late.state == "blocked" and late.reason == "not_permitted" and late.path is None, late
    assert set(sandbox_files(dl_stack)) == before


def test_a_file_chooser_is_an_event_not_a_dialog(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Observation, Observation, Observation]:
        await client.navigate(FIXTURE, QUIET)
        before = await client.act([], QUIET)
        x, y = await point_of(client, "scripted chooser")
        scripted = await client.act([{"type": "click", "x": x, "y": y}, {"type": "wait", "seconds": 0.5}], QUIET)
        await client.navigate(FIXTURE, QUIET)
        x, y = await point_of(client, "file input")
        clicked = await client.act([{"type": "click", "x": x, "y": y}, {"type": "wait", "seconds": 0.5}], QUIET)
        return before, scripted, clicked

    before, scripted, clicked = with_client(dl_stack, body)
    assert before.file_chooser is None
    for obs in (scripted, clicked):
        assert obs.file_chooser is not None and obs.file_chooser.multiple, obs.file_chooser
        assert obs.tabs and obs.file_chooser.tab == obs.tabs[0].id, (obs.file_chooser, obs.tabs)
        # Intercepted: no native chooser window, the page keeps answering.
        assert obs.dialog is None and obs.title == "downloads and file choosers", obs.title


def test_websockets_reach_allowlisted_hosts_through_the_proxy(dl_stack: Stack) -> None:
    async def title(client: SandboxClient, ws_url: str | None = None) -> str:
        url = WS_FIXTURE if ws_url is None else f"{WS_FIXTURE}?url={ws_url}"
        await client.navigate(url, QUIET)
        deadline = time.monotonic() + 15
        while True:
            obs = await client.act([], QUIET)
            if obs.title and obs.title != "websocket: connecting" or time.monotonic() > deadline:
                return obs.title or ""
            await asyncio.sleep(0.2)

    async def body(client: SandboxClient) -> dict[str, str]:
        return {
            "demo:80": await title(client),
            "blocked:8081": await title(client, "ws://blocked.test:8081/ws"),
            "allowed:8081": await title(client, "ws://allowed.test:8081/ws"),
            "blocked:80": await title(client, "ws://blocked.test/ws"),
        }

    got = with_client(dl_stack, body)
    assert got["demo:80"] == "websocket: echo: hello deskpod", got
    # A host:port entry: that host on that port.
    assert got["blocked:8081"] == "websocket: echo: hello deskpod", got
    # An allowlisted host on a port no entry names, and the entry's host on another port: refused.
    assert "echo" not in got["allowed:8081"] and "echo" not in got["blocked:80"], got


def test_set_files_answers_the_chooser_with_workspace_files_only(dl_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Observation, object, object, object]:
        await ok(client, type="write_file", path="upload/hello.txt", content="hello from the workspace\n",
                 create_dirs=True)
        await ok(client, type="exec", argv=["ln", "-sf", "/etc/passwd", "upload/passwd"])
        await client.navigate(FIXTURE, QUIET)
        none_open = await send(client, type="act", actions=[{"type": "set_files", "paths": ["upload/hello.txt"]}])
        x, y = await point_of(client, "file input")
        await client.act([{"type": "click", "x": x, "y": y}], QUIET)
        link = await send(client, type="act", actions=[{"type": "set_files", "paths": ["upload/passwd"]}])
        outside = await send(client, type="act", actions=[{"type": "set_files", "paths": ["../../etc/passwd"]}])
        obs = await client.act([{"type": "set_files", "paths": ["upload/hello.txt"]}, {"type": "wait", "seconds": 0.3}],
                               QUIET)
        return obs, none_open, link, outside

    obs, none_open, link, outside = with_client(dl_stack, body)
    assert isinstance(none_open, ErrorReply) and none_open.error.detail.get("reason") == "no_file_chooser", none_open
    for refused in (link, outside):
        assert isinstance(refused, ErrorReply), refused
        assert refused.error.detail.get("reason") in ("not_a_workspace_file", None), refused
    assert obs.title == "chosen: hello.txt 25", obs.title
    assert obs.file_chooser is None
