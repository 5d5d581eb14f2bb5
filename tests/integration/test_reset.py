"""In-place reset through the daemon, in the real hardened sandbox: nothing of one task
reaches the next, and the control token is rotated.

Task A leaves every kind of trace a browser or code agent can leave (cookies, Local
Storage, Session Storage, IndexedDB, history, a download, files in /tmp, /dev/shm,
the home folder and the workspace, the clipboard, a background process that left its
process group, an extra browser window); after the reset task B finds none of them.
A hostile page served over https (a secure context) leaves what only such a page can:
a service worker with a background sync tag, Cache API entries, the origin private file
system, a storage bucket, a shared worker, an HSTS pin, an HTTP cache entry and a TLS
session; the next task on the same origin finds none of them either.
Traces are looked for from outside the daemon too (``docker exec``), so a check never
depends on the daemon reporting honestly about itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deskpod_stack import Stack, page_state, storage_state, with_client
from tls_sites import start_ca_stack
from deskpod.client import SandboxClient, Sandbox
from deskpod.client.live import LiveClient, LiveImage
from deskpod.tokens import new_token
from deskpod.errors import InvalidRequestError, NavigationError, SandboxError, UnauthorizedError
from deskpod.protocol import ErrorReply, ExecRequest, Observation, ObserveOptions

pytestmark = pytest.mark.integration

STORAGE = "http://demo.test/fixtures/storage"
FIELD = (640, 400)  # screen pixels inside the storage fixture's text field
TEXT = ObserveOptions(screenshot=False, page_text=True)
SECURE = "secure.test"
"""``ca_stack``'s https site (the demo server, with a certificate of the operator's CA)."""
PERSIST = f"https://{SECURE}/fixtures/reset-persist"
PERSISTENT_STORES = ("cookie", "local", "idb", "cache", "opfs", "bucket", "sync", "sw_fetch")
"""The reset-persist fixture's stores that outlive the page in a browser that is not reset."""

# Runs in a container through `docker exec` (not through the daemon): every file under
# the writable folders (argv[2:]) whose name or content holds the marker, and every
# process whose command line does.
TRACES = r"""
import json, os, sys
marker = sys.argv[1].encode()
files, procs = [], []
for top in sys.argv[2:]:
    for folder, dirs, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            if marker in name.encode():
                files.append(path)
                continue
            try:
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < 64 << 20:
                    with open(path, "rb") as f:
                        if marker in f.read():
                            files.append(path)
            except OSError:
                pass
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    procs.append(int(pid))
        except OSError:
            pass
print(json.dumps({"files": sorted(files), "procs": procs}))
"""


WRITABLE = {
    "sandbox": ("/tmp", "/dev/shm", "/home/deskpod"),
    "workspace": ("/tmp", "/dev/shm", "/home/agent", "/workspace"),
}
"""Each container's writable mounts (compose.yaml)."""


@pytest.fixture(scope="module")
def standby_stack() -> Iterator[Stack]:
    """A stack whose daemon keeps a standby desktop (``DESKPOD_STANDBY_BROWSER=on``): each
    reset swaps it in, on another display, and starts the next one. It trusts an operator CA
    and has ``ca_stack``'s https sites (:func:`tls_sites.start_ca_stack`)."""
    yield from start_ca_stack("sb", DESKPOD_STANDBY_BROWSER="on")


@pytest.fixture(params=["new desktop", "standby desktop"])
def reset_stack(request: pytest.FixtureRequest) -> Stack:
    """The stack a reset test runs on: a reset that starts a new desktop, or one that swaps the standby in."""
    return request.getfixturevalue("stack" if request.param == "new desktop" else "standby_stack")


def traces(stack: Stack, marker: str) -> dict[str, list[Any]]:
    """Files and processes that carry ``marker`` in the sandbox and the workspace container,
    seen through ``docker exec``; files as ``service:path``."""
    found: dict[str, list[Any]] = {"files": [], "procs": []}
    for service, tops in WRITABLE.items():
        result = stack.container(service).exec_run(["python3", "-c", TRACES, marker, *tops], demux=True)
        out, err = result.output
        assert result.exit_code == 0, (err or b"").decode()[-2000:]
        seen = json.loads(out)
        found["files"] += [f"{service}:{path}" for path in seen["files"]]
        found["procs"] += [f"{service}:{pid}" for pid in seen["procs"]]
    return found


def sandbox_ls(stack: Stack, folder: str) -> str:
    """``ls`` of a folder in the sandbox container (agent commands no longer see it)."""
    return stack.container("sandbox").exec_run(["ls", "-A", folder]).output.decode(errors="replace")


async def exec_cmd(client: SandboxClient, cmd: str) -> str:
    result = await client.request(ExecRequest(type="exec", id=client.next_id(), cmd=cmd, timeout_s=30))
    output = result.workspace
    assert output is not None and output.type == "exec_output"
    assert output.exit_code == 0, output.stderr
    return output.stdout


async def paste_into_field(client: SandboxClient) -> str:
    """Open the storage fixture without setting anything, paste the clipboard into its field
    and return the field's value."""
    await client.navigate(STORAGE)
    await storage_state(client)
    await client.act([
        {"type": "click", "x": FIELD[0], "y": FIELD[1]},
        {"type": "keypress", "keys": ["ctrl", "v"]},
    ])
    return str((await storage_state(client))["value"])


async def do_reset(stack: Stack, client: SandboxClient, start_url: str | None) -> tuple[Observation, float]:
    """Reset through ``client`` with a new token; the stack's token becomes the new one.

    Returns:
        The fresh observation and the reset's duration in seconds (client side).
    """
    token = new_token()
    started = time.perf_counter()
    obs = await client.reset(start_url, token_sha256=hashlib.sha256(token.encode()).hexdigest())
    elapsed = time.perf_counter() - started
    stack.token = token
    return obs, elapsed


def test_reset_leaves_nothing_of_the_previous_task_and_rotates_the_token(reset_stack: Stack) -> None:
    stack = reset_stack
    marker = "leak" + secrets.token_hex(6)
    old_token = stack.token

    async def task_a() -> None:
        client = await SandboxClient.connect(stack.ws_url, old_token, timeout_s=30)
        bystander = await SandboxClient.connect(stack.ws_url, old_token, timeout_s=30)
        # Browser storage of every kind, and history.
        await client.navigate(f"{STORAGE}?set={marker}")
        state = await storage_state(client)
        assert state["cookie"] == state["local"] == state["session"] == state["idb"] == marker, state
        await client.navigate(f"http://demo.test/search?q={marker}")
        # The clipboard: copy the marker from the fixture's field, check that it pastes.
        await client.navigate(f"{STORAGE}?set={marker}")
        await storage_state(client)
        await client.act([
            {"type": "click", "x": FIELD[0], "y": FIELD[1]},
            {"type": "keypress", "keys": ["ctrl", "a"]},
            {"type": "keypress", "keys": ["ctrl", "c"]},
        ])
        assert await paste_into_field(client) == marker
        # A download (the browser saves it to /tmp/downloads; permitted, as the controller does at L2).
        try:
            await client.navigate(f"http://demo.test/download?name={marker}.txt", ObserveOptions(screenshot=False),
                                  allow_downloads=True)
        except NavigationError:
            pass  # a download aborts the navigation; the file is saved anyway
        for _ in range(100):
            if f"{marker}.txt" in sandbox_ls(stack, "/tmp/downloads"):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the download never arrived")
        # Files in every writable folder of the workspace container, then a process
        # that leaves its group: the runner kills it as soon as its command has answered.
        await exec_cmd(client, f"for d in /tmp /dev/shm $HOME /workspace; do echo {marker} > $d/{marker}; done")
        # (The command waits a little: its group is killed when it exits, and setsid must have run by then.)
        await exec_cmd(client, f"setsid bash -c 'exec -a {marker}-bg sleep 3600' </dev/null >/dev/null 2>&1 & sleep 1")
        # An extra browser window.
        obs = await client.act([{"type": "keypress", "keys": ["ctrl", "n"]}, {"type": "wait", "seconds": 1.0}])
        assert obs.tabs is not None and len(obs.tabs) >= 2, obs.tabs

        found = traces(stack, marker)
        assert {f"workspace:/tmp/{marker}", f"workspace:/dev/shm/{marker}", f"workspace:/home/agent/{marker}",
                f"workspace:/workspace/{marker}", f"sandbox:/tmp/downloads/{marker}.txt"} <= set(found["files"]), found
        assert not found["procs"], "the background process outlived its command's reply"

        obs, elapsed = await do_reset(stack, client, STORAGE)
        print(f"reset took {elapsed:.3f} s")
        assert obs.screenshot is not None and obs.url == STORAGE, obs.url
        assert obs.tabs is not None and len(obs.tabs) == 1, obs.tabs
        # Every connection made with the old token is closed.
        for conn in (client, bystander):
            with pytest.raises(SandboxError):
                await conn.act([])
            await conn.close()

    asyncio.run(task_a())

    found = traces(stack, marker)
    assert found == {"files": [], "procs": []}, found
    with pytest.raises(UnauthorizedError):
        asyncio.run(SandboxClient.connect(stack.ws_url, old_token, timeout_s=10))

    async def task_b(client: SandboxClient) -> None:
        await client.navigate(STORAGE)
        state = await storage_state(client)
        assert state == {"cookie": None, "local": None, "session": None, "idb": None, "history": 1, "value": ""}, state
        assert await paste_into_field(client) == "", "the clipboard survived the reset"
        obs = await client.act([], TEXT)
        assert obs.tabs is not None and len(obs.tabs) == 1, obs.tabs
        assert (await exec_cmd(client, "ls -A /workspace")).split() == []
        # The desktop in force is the one watched: a click settles on its damage, and a
        # live stream sends its screen (a stream on a display gone with the reset cannot).
        clicked = await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}])
        assert clicked.screenshot is not None and clicked.settle_signal != "timeout", clicked.settle_signal
        live = await LiveClient.connect(stack.ws_url, stack.token)
        try:
            first = await live.next(15)
        finally:
            await live.close()
        assert isinstance(first, LiveImage) and (first.header.width, first.header.height) == (1280, 800), first

    with_client(stack, task_b)


def test_high_level_reset_rotates_and_reconnects(stack: Stack) -> None:
    async def body() -> list[float]:
        sandbox = await Sandbox.open(stack.ws_url, stack.token, timeout_s=30)
        first = sandbox.token
        times = []
        try:
            for _ in range(3):
                await sandbox.navigate("http://demo.test/login?user=bob")
                started = time.perf_counter()
                obs = await sandbox.reset("http://demo.test/account")
                times.append(time.perf_counter() - started)
                stack.token = sandbox.token
                assert obs.screenshot is not None
                assert "not logged in" in ((await sandbox.client.act([], TEXT)).page_text or "")
            assert sandbox.token != first
        finally:
            await sandbox.close()
        return times

    times = asyncio.run(body())
    print("Sandbox.reset (s):", ", ".join(f"{t:.3f}" for t in times))


def test_bad_reset_requests_get_typed_errors_and_change_nothing(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        cases = [
            '{"type": "reset", "id": "x1", "token_sha256": "abc"}',
            '{"type": "reset", "id": "x2", "token_sha256": "' + "A" * 64 + '"}',
            '{"type": "reset", "id": "x3", "token_sha256": "' + "a" * 64 + '", "start_url": "file:///etc/passwd"}',
            '{"type": "reset", "id": "x4"}',
            '{"type": "reset", "id": "x5", "token_sha256": "' + "a" * 64 + '", "wipe": false}',
        ]
        for raw in cases:
            reply = await client.send_raw(raw)
            assert isinstance(reply, ErrorReply) and reply.error.code == "invalid_request", (raw, reply)
        with pytest.raises(InvalidRequestError):
            await client.reset("javascript:alert(1)", token_sha256="a" * 64)
        obs = await client.act([], TEXT)
        assert obs.url is not None

    with_client(stack, body)
    # The token did not change: the stack's token still connects.
    with_client(stack, lambda c: c.act([]))


def test_reset_survives_a_busy_workspace_command(stack: Stack) -> None:
    """A long exec running on another connection is killed by the reset, which still answers."""

    async def body() -> None:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        coder = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        long_exec = asyncio.create_task(
            coder.request(ExecRequest(type="exec", id="long", cmd="sleep 300", timeout_s=300))
        )
        await asyncio.sleep(1.0)
        obs, _ = await do_reset(stack, client, None)
        assert obs.screenshot is not None
        try:
            result = await asyncio.wait_for(long_exec, 30)
        except SandboxError:
            pass  # its connection (old token) was closed before the killed command's reply
        else:
            assert result.workspace is not None and result.workspace.type == "exec_output"
            assert result.workspace.signal == 9 or result.workspace.exit_code != 0, result.workspace
        await client.close()
        await coder.close()

    asyncio.run(body())
    with_client(stack, lambda c: c.act([]))


async def fixture_state(client: SandboxClient, url: str, timeout_s: float = 45.0) -> tuple[str | None, dict]:
    """Load ``url`` (a page that shows ``STATE {json}`` when done) and return the address it
    ended at and its state."""
    obs = await client.navigate(url, TEXT)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return obs.url, page_state(obs.page_text)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)
        obs = await client.act([], TEXT)


@pytest.mark.parametrize("desktop", ["new desktop", "standby desktop"])
def test_a_hostile_https_page_leaves_nothing_for_the_next_task_on_its_origin(desktop: str,
                                                                            request: pytest.FixtureRequest) -> None:
    """Task 1's page, over https, writes a marker into every store it can reach (service
    worker, sync tag, Cache API, OPFS, storage bucket, shared worker, cookies, Local
    Storage, IndexedDB), pins HSTS and fills the HTTP cache and the TLS session cache;
    before the reset each is shown to last, after it task 2 on the same origin finds none."""
    stack: Stack = request.getfixturevalue("ca_stack" if desktop == "new desktop" else "standby_stack")
    marker = "persist" + secrets.token_hex(6)

    async def task_1(client: SandboxClient) -> str:
        _, written = await fixture_state(client, f"{PERSIST}?set={marker}")
        refused = {k: v for k, v in written.items() if k.startswith("write_") and v not in ("ok", 200)}
        # Periodic sync is for installed web apps: Chromium refuses it to a page.
        assert refused == {"write_periodic_sync": "error: NotAllowedError"}, written
        assert all(written[k] == marker for k in ("cookie", "local", "idb", "cache", "opfs", "bucket", "shared")), written
        assert written["sw"] == [marker] and written["sync"] == [f"deskpod-{marker}"], written
        assert written["broadcast"] == [f"shared {marker}", f"sw {marker}"], written
        # The http address is upgraded by the pin (a new connection resumes a TLS session);
        # on a fresh page the stores are all there, the worker answers the page's request,
        # and /cached comes from the HTTP cache.
        url, tls = await fixture_state(client, f"http://{SECURE}/tls-session")
        assert url == f"https://{SECURE}/tls-session" and tls == {"tls": True, "resumed": True}, (url, tls)
        url, again = await fixture_state(client, PERSIST.replace("https:", "http:"))
        assert url == PERSIST, url
        assert all(again[k] == written[k] for k in PERSISTENT_STORES), (written, again)
        assert again["sw_fetch"] == f"sw {marker}" and again["http_cache"] == written["http_cache"], again
        found = traces(stack, marker)
        assert found["files"], "the profile holds no trace of the page"
        print("task 1's files with the marker:", *found["files"], sep="\n  ")
        await do_reset(stack, client, None)
        return str(written["http_cache"])

    cached = with_client(stack, task_1)
    assert traces(stack, marker) == {"files": [], "procs": []}

    async def task_2(client: SandboxClient) -> None:
        # No HSTS pin: the http address stays http. The first TLS connection is a new session.
        url, plain = await fixture_state(client, f"http://{SECURE}/tls-session")
        assert url == f"http://{SECURE}/tls-session" and plain == {"tls": False}, (url, plain)
        _, tls = await fixture_state(client, f"https://{SECURE}/tls-session")
        assert tls == {"tls": True, "resumed": False}, tls
        _, state = await fixture_state(client, PERSIST)
        assert {k: state[k] for k in (*PERSISTENT_STORES, "sw", "shared", "broadcast")} == dict.fromkeys(
            (*PERSISTENT_STORES, "sw", "shared", "broadcast")), state
        assert state["http_cache"] != cached, "the HTTP cache answered with task 1's response"

    with_client(stack, task_2)
