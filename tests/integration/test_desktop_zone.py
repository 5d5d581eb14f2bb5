"""The desktop applications' zone (compose profile ``desktop``), tried from the agent's side: a
terminal opened with ``open_app`` runs as the applications' uid in a container of its own, and
from it the agent cannot authenticate to the daemon, see the daemon's or the browser's
processes, read or drive the browser's window, or reach the network; a reset kills it.

Every check runs as the agent would: a script written to the workspace (``write_file``), run by
typing into the terminal's window (GUI actions only), its output read back from the workspace.
On main before the zone, ``open_app`` did not exist.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator

import pytest

from deskpod.client import SandboxClient
from deskpod.errors import ExecutionError
from deskpod.protocol import ObserveOptions, ReadFileRequest, Window, WriteFileRequest
from deskpod.tokens import new_token
from deskpod_stack import Stack, with_client
from x_attacks import X_ATTACKS

pytestmark = pytest.mark.integration

PROBE = r"""
exec > /workspace/zone.txt 2>&1
echo "uid=$(id -u) groups=$(id -G)"
echo "comms=$(cat /proc/[0-9]*/comm | sort -u | tr '\n' ' ')"
echo "token_vars=$(env | grep -c '^DESKPOD_TOKEN')"
/opt/deskpod/venv/bin/python3 - <<'PY'
import asyncio, json, urllib.error, urllib.request
from deskpod.client import SandboxClient
out = {}
try:
    urllib.request.urlopen("http://demo.test/", timeout=3)
    out["direct"] = "ok"
except Exception as exc:
    out["direct"] = type(exc).__name__
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://egress:3128"}))
try:
    opener.open("http://demo.test/", timeout=5)
    out["proxy"] = "ok"
except urllib.error.HTTPError as exc:
    out["proxy"] = exc.code
except Exception as exc:
    out["proxy"] = type(exc).__name__
try:
    asyncio.run(SandboxClient.connect("ws://sandbox:8765/v1/ws", "g" * 43, timeout_s=5))
    out["daemon"] = "connected"
except Exception as exc:
    out["daemon"] = type(exc).__name__
import socket
from deskpod.agentd.runner_wire import RunnerPingRequest, encode_frame
try:
    with socket.create_connection(("desktop", 8771), timeout=5) as runner:
        runner.sendall(encode_frame(RunnerPingRequest()))
        out["apps_runner"] = runner.recv(64)[4:].decode(errors="replace") or "closed"
except Exception as exc:
    out["apps_runner"] = type(exc).__name__
print("NET " + json.dumps(out))
PY
/opt/deskpod/venv/bin/python3 /workspace/attack.py chromium 0,0,40,40 0 | head -1 | sed 's/^/X /'
mkdir -p /workspace/keep/inner && echo left > /workspace/keep/inner/f && chmod 0 /workspace/keep/inner /workspace/keep
(while :; do echo left > /workspace/race; done) </dev/null >/dev/null 2>&1 &
echo done
"""
"""The agent's probe, run in the terminal: who it is, which processes it sees, whether it holds
a token, the network directly and through the proxy, the daemon with a guessed token, the
applications runner (on main it answered the zone's own ping, and would start or reset), and the X
attacks of ``x_attacks`` on the browser's window; then what would outlive the reset: a folder
locked by its owner (``chmod 0``: on main, made by the zone's uid 1002, it made the reset fail
and stayed) and a loop writing to the workspace (on main it wrote again after the workspace was
emptied, before the zone was killed)."""


def test_open_app_without_the_desktop_zone_is_a_typed_error_and_the_sandbox_stays_usable(stack: Stack) -> None:
    """Without the ``desktop`` service the name ``desktop`` resolves to nothing: ``no_desktop``."""

    async def body(client: SandboxClient) -> tuple[str | None, str | None]:
        try:
            await client.act([{"type": "open_app", "app": "editor", "path": "notes.txt"}],
                             ObserveOptions(screenshot=False))
        except ExecutionError as exc:
            reason = exc.detail.get("reason")
        else:
            reason = None
        return reason, (await client.act([], ObserveOptions(screenshot=False))).url

    reason, url = with_client(stack, body)
    assert reason == "no_desktop" and url is not None


@pytest.fixture(scope="module")
def desktop_stack(stack: Stack) -> Iterator[Stack]:
    """The shared stack with the ``desktop`` service (the applications' zone) started beside it,
    removed again at the end."""
    stack.run_compose("--profile", "desktop", "up", "-d", "--no-deps", "desktop")
    try:
        yield stack
    finally:
        stack.run_compose("--profile", "desktop", "rm", "-s", "-f", "desktop", check=False)


async def _open_terminal(client: SandboxClient) -> Window:
    """``open_app`` the terminal (retried while the zone's runner is still starting) and return
    its window once the window manager lists it."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await client.act([{"type": "open_app", "app": "terminal"}], ObserveOptions(screenshot=False))
            break
        except ExecutionError as exc:
            if exc.detail.get("reason") != "no_desktop" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(1)
    while time.monotonic() < deadline:
        obs = await client.act([], ObserveOptions(screenshot=False, settle=False, windows=True))
        found = [w for w in obs.windows or [] if w.zone == "agent" and w.app == "XTerm"]
        if found:
            return found[0]
        await asyncio.sleep(0.3)
    raise AssertionError("the terminal's window never appeared")


async def _write(client: SandboxClient, path: str, content: str) -> None:
    await client.request(WriteFileRequest(type="write_file", id=client.next_id(), path=path, content=content))


async def _read_until_done(client: SandboxClient, path: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            reply = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path=path))
            text = reply.workspace.content
        except Exception:  # not written yet
            text = ""
        if text.rstrip().endswith("done"):
            return text
        await asyncio.sleep(0.5)
    raise AssertionError(f"the probe did not finish: {text!r}")


def _zone_comms(stack: Stack) -> list[str]:
    """The command names of the processes in the desktop container, as the host sees them."""
    container, = stack.docker.containers.list(filters={"label": [f"com.docker.compose.project={stack.project}",
                                                                 "com.docker.compose.service=desktop"]})
    listed = container.exec_run(["sh", "-c", "cat /proc/[0-9]*/comm"]).output.decode()
    return sorted(set(listed.split()) - {"sh", "cat"})


def test_a_terminal_runs_in_the_applications_zone_and_reaches_nothing_a_reset_kills_it(desktop_stack: Stack) -> None:
    stack = desktop_stack

    async def body(client: SandboxClient) -> tuple[Window, str, list[Window]]:
        await _write(client, "probe.sh", PROBE)
        await _write(client, "attack.py", X_ATTACKS)
        terminal = await _open_terminal(client)
        await client.act([{"type": "window_focus", "window_id": terminal.id},
                          {"type": "type", "text": "bash /workspace/probe.sh"},
                          # Ctrl+J ends the line as Return does (the policy rates both L2).
                          {"type": "keypress", "keys": ["ctrl+j"]}], ObserveOptions(screenshot=False))
        text = await _read_until_done(client, "zone.txt")
        token = new_token()
        fresh = await client.reset(None, token_sha256=hashlib.sha256(token.encode()).hexdigest(),
                                   observe=ObserveOptions(screenshot=False, windows=True))
        stack.token = token
        return terminal, text, list(fresh.windows or [])

    terminal, text, after = with_client(stack, body)
    lines = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith(("NET ", "X ")))
    assert "uid=1001 groups=1001" in text, text  # the workspace's uid: its runner empties what the zone made
    comms = next(line for line in text.splitlines() if line.startswith("comms="))
    # Only the zone's own processes: no agentd, Xvfb, openbox, Chromium, no workspace runner's commands.
    assert not {"Xvfb", "openbox", "chromium", "tini"} & set(comms[6:].split()), comms
    assert "token_vars=0" in text, text
    net = json.loads(lines["NET"])
    assert net["direct"] == "URLError", net  # no route out, no DNS for the outside
    assert net["proxy"] in (403, 407), net  # the proxy refuses a client without an egress grant
    assert net["daemon"] not in ("connected",), net
    # Its own runner closes the connection unread: only agentd's address may start or reset.
    assert net["apps_runner"] in ("closed", "ConnectionResetError"), net
    x = json.loads(lines["X"])
    assert x["target"] is True and x["get_image"] == "BadAccess", x  # the browser's pixels
    assert x["xtest"] is False and x["extensions"] == ["BIG-REQUESTS", "XC-MISC"], x  # no input into it
    assert x["grab_keyboard"] != 0 and x["clipboard"] is None, x
    assert terminal.zone == "agent" and terminal.app == "XTerm"
    # The reset killed the terminal (and every process of the zone but its runner).
    assert not [w for w in after if w.zone == "agent"], after
    assert _zone_comms(stack) == ["python"], _zone_comms(stack)  # the runner alone
    # The reset succeeded (it raises otherwise) and emptied the workspace the zone shares.
    listed = stack.container("workspace").exec_run(["ls", "-A", "/workspace"], user="1001")
    assert listed.exit_code == 0 and listed.output.decode() == "", listed.output
