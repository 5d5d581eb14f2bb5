"""A display grant, tried as an attacker would, from the agent's code (security review, third round,
findings 2 and 8).

Every attack runs as an agent's command through the daemon's ``exec`` (workspace container, uid 1001),
with ``display: true``: the X server is reached through the daemon's X gate with an untrusted cookie
(``deskpod.agentd.display.xgate``). On main at 8939088 the grant handed over the X server's own cookie:
the same command had XTEST (the review typed a URL into Chromium with it), read the browser's window
and its clipboard, grabbed the keyboard and the pointer, warped the pointer and grabbed the server; its
window over the browser passed for the page under it; and 400 idle connections from the workspace,
without a grant, filled the X server's client slots.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import secrets
import time
from typing import Any

import pytest
from PIL import Image

from deskpod.client import SandboxClient
from deskpod.client.live import LiveClient, LiveImage
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.errors import ScreenChangedError
from deskpod.protocol import AgentWindow, ExecOutput, ExecRequest, ObserveOptions, ScreenExpectation, parse_action
from deskpod_stack import Stack, start_stack, storage_state, with_client
from x_attacks import X_ATTACKS

pytestmark = pytest.mark.integration

STORAGE = "http://demo.test/fixtures/storage"
FIELD = (640, 400)  # screen pixels inside the storage fixture's text field
PLACE = (500, 350, 300, 200)
"""Where the agent's command puts a window of its own: x, y, width, height in screen pixels (over
the storage fixture's text field)."""
INSIDE = FIELD
"""A screen point inside :data:`PLACE`: the field under the agent's window."""

# Opens sys.argv[1] TCP connections to the display's port, sends nothing, holds them for
# sys.argv[2] seconds, and further until the file sys.argv[3] exists, then prints how many
# connected and how many the other end had closed.
XLIB_PYTHON = "/opt/deskpod/venv/bin/python3"
"""A Python with python-xlib in the image (the daemon's venv: readable by the agent, like any
library an agent might install; the exec's own ``python3`` has none)."""

FLOOD = r"""
import json, os, socket, sys, time
held = []
for _ in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection(("sandbox", 6099), timeout=5))
    except OSError:
        pass
time.sleep(float(sys.argv[2]))
while not os.path.exists(sys.argv[3]):
    time.sleep(0.1)
closed = 0
for sock in held:
    sock.setblocking(False)
    try:
        closed += sock.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(json.dumps({"connected": len(held), "closed": closed}))
"""


@pytest.fixture(scope="module")
def stack() -> Any:
    yield from start_stack("xgrant", "1280x800")


def stop_file() -> str:
    """A new path in the workspace container for :func:`tell_done` to create."""
    return f"/tmp/deskpod-test-done-{secrets.token_hex(6)}"


async def tell_done(stack: Stack, path: str) -> None:
    """Create ``path`` in the workspace container (through Docker, as its agent's uid): the
    agent's command waiting for it may end (the test has seen what it looked for)."""
    result = await asyncio.to_thread(stack.container("workspace").exec_run, ["touch", path], user="1001")
    assert result.exit_code == 0, result.output


def is_red(obs_screenshot: Any, point: tuple[int, int]) -> bool:
    image = Image.open(io.BytesIO(base64.b64decode(obs_screenshot.data))).convert("RGB")
    return bool(image.getpixel(point) == (255, 0, 0))


async def exec_output(client: SandboxClient, argv: list[str], display: bool, timeout_s: float) -> ExecOutput:
    result = await client.request(ExecRequest(type="exec", id=client.next_id(), argv=argv, display=display,
                                              timeout_s=timeout_s))
    assert isinstance(result.workspace, ExecOutput), result
    return result.workspace


def test_granted_code_cannot_drive_or_read_the_browser_and_its_window_on_top_is_named(stack: Stack) -> None:
    marker = "clip" + secrets.token_hex(6)
    point = {"x": INSIDE[0], "y": INSIDE[1]}

    async def body(client: SandboxClient) -> tuple[ExecOutput, bool, Any, Any, str | None]:
        # The browser owns the clipboard: the marker, copied from the storage fixture's field.
        await client.navigate(f"{STORAGE}?set={marker}", ObserveOptions(screenshot=False))
        await storage_state(client)
        await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]},
                          {"type": "keypress", "keys": ["ctrl", "a"]}, {"type": "keypress", "keys": ["ctrl", "c"]}],
                         ObserveOptions(screenshot=False))
        judged = await client.act([], ObserveOptions(screenshot=False, element_at=point))
        assert judged.element_at is not None and judged.element_at.tag == "input", judged.element_at
        done = stop_file()
        attack = asyncio.create_task(exec_output(
            client, [XLIB_PYTHON, "-c", X_ATTACKS, "chromium", ",".join(map(str, PLACE)), "10", done], True, 90))
        # Meanwhile the agent's screenshots (another connection) show its window.
        watcher = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        seen, refused = False, None
        try:
            deadline = time.monotonic() + 60
            while not seen and not attack.done() and time.monotonic() < deadline:
                obs = await watcher.act([], ObserveOptions(settle=False))
                seen = obs.screenshot is not None and is_red(obs.screenshot, INSIDE)
                await asyncio.sleep(0.3)
            # The controller is told whose window is on top there, and the daemon refuses a click
            # judged on the page's control under it.
            covered = await watcher.act([], ObserveOptions(screenshot=False, element_at=point, windows=True))
            try:
                await watcher.act([{"type": "click", **point}], ObserveOptions(screenshot=False),
                                  expect=ScreenExpectation(element=judged.element_at))
            except ScreenChangedError as exc:
                refused = exc.detail.get("reason")
        finally:
            await watcher.close()
            await tell_done(stack, done)
        output = await attack
        after = await client.act([], ObserveOptions(screenshot=False, page_text=True))
        return output, seen, covered, after, refused

    output, seen, covered, after, refused = with_client(stack, body)
    assert output.exit_code == 0, output.stderr
    first = json.loads(output.stdout.splitlines()[0])
    assert first["target"] is True, first  # it found the browser's window
    # Neither XTEST nor any extension but these two: no input into the browser.
    assert first["xtest"] is False and first["extensions"] == ["BIG-REQUESTS", "XC-MISC"], first
    assert first["get_image"] == "BadAccess", first  # the browser's pixels
    assert first["grab_keyboard"] != 0 and first["grab_pointer"] != 0, first  # what the daemon types
    assert first["warped"] is False and first["server_grab_blocks"] is False, first
    assert first["clipboard"] is None, first  # the browser's clipboard
    # Its own window works, and the agent's screenshots show it.
    assert first["own_image"] == "0000ff00" and seen
    # Over the browser, it is named for what it is: a click there is L2 and the card names it.
    assert covered.window_at == AgentWindow(app="DeskpodProbe", title="probe window", box=[500, 350, 800, 550])
    risk = classify_action(parse_action({"type": "click", **point}, 0), ActionContext(
        url=covered.url, element=covered.element_at, window=covered.window_at))
    assert risk.level == "L2" and risk.target == "window of the agent's program 'DeskpodProbe': 'probe window'"
    # The window manager's list holds the browser's window, the sandbox's own; the probe's window
    # bypasses the window manager (override-redirect), so only window_at names it.
    assert [(w.app, w.zone, w.focused) for w in covered.windows or []] == [("Chromium", "sandbox", True)], covered
    assert refused == "element"
    # The browser is where it was, on the page it showed, with its page intact.
    assert after.url is not None and after.url.startswith(STORAGE), after.url
    assert "browser_restarted" not in after.events, after.events


def test_code_without_a_grant_cannot_fill_the_x_servers_client_slots(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[ExecOutput, Any, Any]:
        done = stop_file()
        # Held at least 8 s after the last one opened: beyond the gate's setup timeout (5 s).
        flood = asyncio.create_task(exec_output(client, ["python3", "-c", FLOOD, "400", "8", done], False, 90))
        try:
            await asyncio.sleep(10)  # the connections are open and idle
            assert not flood.done(), flood.result()
            live = await LiveClient.connect(stack.ws_url, stack.token)
            try:
                frame = await live.next(15)
            finally:
                await live.close()
        finally:
            await tell_done(stack, done)
        output = await flood
        # This connection answers in order: the screenshot after the command's reply.
        return output, frame, await client.act([], ObserveOptions(settle=False))

    output, frame, shot = with_client(stack, body)
    counts = json.loads(output.stdout)
    # The gate held a few, closed the others at once and the held ones after the setup's timeout.
    assert counts["connected"] == 400 and counts["closed"] == 400, counts
    assert isinstance(frame, LiveImage), frame  # not capture_failed: the X server took a new client
    assert shot.screenshot is not None
