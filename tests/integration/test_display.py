"""The desktop zone in the real sandbox (the X half of the cleanup between tasks, and
the display's access control): an X client that leaves a retained window, a root-window property and a
selection behind leaves nothing after a reset; IPC objects do not survive a reset; the X
server admits only clients with its cookie, on its Unix socket only, and the cookie changes
at every reset; the display's TCP port (6099, the daemon's X gate) refuses even that cookie.

The leftovers are made by an X client that does not go through deskpod at all: a
``docker exec`` as uid 1000 in the sandbox container with the cookie, as any process of
the daemon's uid could. Every check after the reset is made from outside the daemon:
``docker exec`` with the new cookie, X connection setups on the X server's socket
(``docker exec``) and from the Docker host over TCP (port 6099).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import secrets
import socket
import struct
from typing import Any

import pytest
from PIL import Image

from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions
from deskpod_stack import Stack
from test_reset import do_reset

pytestmark = pytest.mark.integration

XAUTHORITY = "/tmp/deskpod/Xauthority"
X_TCP_PORT = 6099
BANNER = (100, 100, 600, 120)  # x, y, width, height in screen pixels
MAGENTA = (255, 0, 255)

# An X client as a hostile process of the daemon's uid would write it: a magenta
# override-redirect "banner" kept with RetainPermanent after the client leaves, a
# root-window property and a selection owned by that window.
LEAVE = r"""
import json, sys
from Xlib import X, display
marker = sys.argv[1]
x, y, w, h = (int(v) for v in sys.argv[2:6])
d = display.Display()
root = d.screen().root
win = root.create_window(x, y, w, h, 0, d.screen().root_depth, X.InputOutput, X.CopyFromParent,
                         background_pixel=0xFF00FF, override_redirect=True)
win.map()
win.configure(stack_mode=X.Above)
root.change_property(d.intern_atom("DESKPOD_LEFT_" + marker), d.intern_atom("STRING"), 8, marker.encode())
win.set_selection_owner(d.intern_atom("DESKPOD_SEL_" + marker), X.CurrentTime)
d.set_close_down_mode(X.RetainPermanent)
d.sync()
print(json.dumps({"window": win.id}))
d.close()
"""

# What an X client finds on the display now: top-level windows (geometry, override-
# redirect, mapped), whether the marker's atoms exist, the property and the selection owner.
INSPECT = r"""
import json, sys
from Xlib import X, display
marker = sys.argv[1]
d = display.Display()
root = d.screen().root
windows = []
for child in root.query_tree().children:
    try:
        attrs, geo = child.get_attributes(), child.get_geometry()
    except Exception:
        continue
    windows.append({"id": child.id, "override_redirect": bool(attrs.override_redirect),
                    "mapped": attrs.map_state == X.IsViewable, "geometry": [geo.x, geo.y, geo.width, geo.height]})
prop_atom = d.intern_atom("DESKPOD_LEFT_" + marker, only_if_exists=True)
sel_atom = d.intern_atom("DESKPOD_SEL_" + marker, only_if_exists=True)
prop = root.get_property(prop_atom, X.AnyPropertyType, 0, 1024) if prop_atom else None
owner = d.get_selection_owner(sel_atom) if sel_atom else X.NONE
print(json.dumps({
    "windows": windows,
    "atoms": [prop_atom != 0, sel_atom != 0],
    "property": prop.value.decode() if prop is not None else None,
    "selection_owner": owner.id if hasattr(owner, "id") else int(owner),
}))
"""

# SysV shared memory, a message queue and a semaphore set with the test's keys, and a
# POSIX message queue, made with the C library as any process could.
MAKE_IPC = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
key = int(sys.argv[1])
IPC_CREAT = 0o1000
ids = {"shm": libc.shmget(key, 4096, IPC_CREAT | 0o600), "msg": libc.msgget(key + 1, IPC_CREAT | 0o600),
       "sem": libc.semget(key + 2, 1, IPC_CREAT | 0o600)}
assert all(v >= 0 for v in ids.values()), (ids, ctypes.get_errno())
libc.mq_open.restype = ctypes.c_int
mq = libc.mq_open(("/" + sys.argv[2]).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
assert mq >= 0, ctypes.get_errno()
print(json.dumps(ids))
"""

LIST_IPC = r"""
import json, os
out = {}
for kind in ("shm", "msg", "sem"):
    lines = open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
    out[kind] = [int(l.split()[0]) for l in lines]
out["mqueue"] = sorted(os.listdir("/dev/mqueue"))
print(json.dumps(out))
"""


def run_in_sandbox(stack: Stack, code: str, *args: str) -> Any:
    """Run ``code`` as uid 1000 in the sandbox container with the current X cookie; it prints JSON."""
    result = stack.container("sandbox").exec_run(
        ["python3", "-c", code, *args], user="1000", demux=True,
        environment={"DISPLAY": ":99", "XAUTHORITY": XAUTHORITY},
    )
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode()[-2000:]
    return json.loads(out)


def cookie(stack: Stack) -> bytes:
    """The MIT-MAGIC-COOKIE-1 in the sandbox's authority file now (read as uid 1000)."""
    result = stack.container("sandbox").exec_run(["cat", XAUTHORITY], user="1000")
    assert result.exit_code == 0, result.output
    data, cookies = result.output, set()
    while data:
        fields = []
        data = data[2:]  # family
        for _ in range(4):
            (length,) = struct.unpack(">H", data[:2])
            fields.append(data[2:2 + length])
            data = data[2 + length:]
        assert fields[2] == b"MIT-MAGIC-COOKIE-1", fields
        cookies.add(fields[3])
    assert len(cookies) == 1, cookies
    return cookies.pop()


def x_setup_over_tcp(host: str, secret: bytes | None) -> int:
    """Open an X11 connection to ``host``:6099 from the Docker host, presenting ``secret`` as
    MIT-MAGIC-COOKIE-1 (``None``: no authorization). Returns the server's answer:
    0 refused, 1 accepted."""
    name = b"MIT-MAGIC-COOKIE-1" if secret is not None else b""
    data = secret or b""

    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    with socket.create_connection((host, X_TCP_PORT), timeout=10) as sock:
        sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(data)) + pad(name) + pad(data))
        answer = sock.recv(1)
    assert answer, "the X server closed the connection without answering"
    return answer[0]


# An X11 connection setup on the X server's own Unix socket with the cookie in argv[1] (hex;
# empty: no authorization); prints the server's answer: 0 refused, 1 accepted.
SOCKET_SETUP = r"""
import socket, struct, sys
cookie = bytes.fromhex(sys.argv[1])
name = b"MIT-MAGIC-COOKIE-1" if cookie else b""
with socket.socket(socket.AF_UNIX) as sock:
    sock.settimeout(10)
    sock.connect("/tmp/.X11-unix/X99")
    sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + name
                 + b"\0" * (-len(name) % 4) + cookie)
    print(sock.recv(1)[0])
"""


def x_setup_on_socket(stack: Stack, secret: bytes | None) -> int:
    """An X11 connection setup on the X server's Unix socket (``docker exec`` as uid 1000), with
    ``secret`` as MIT-MAGIC-COOKIE-1 (``None``: none). Returns 0 refused, 1 accepted."""
    return int(run_in_sandbox(stack, SOCKET_SETUP, (secret or b"").hex()))


def banner_pixels(png_b64: str) -> float:
    """The share of the banner's area that is magenta in a screenshot (screen pixels)."""
    image = Image.open(io.BytesIO(base64.b64decode(png_b64))).convert("RGB")
    x, y, w, h = BANNER
    region = image.crop((x + 5, y + 5, x + w - 5, y + h - 5))
    colors = dict((color, count) for count, color in region.getcolors(region.width * region.height) or [])
    return colors.get(MAGENTA, 0) / (region.width * region.height)


async def screenshot(client: SandboxClient) -> str:
    obs = await client.act([], ObserveOptions(format="png"))
    assert obs.screenshot is not None
    return obs.screenshot.data


def test_a_reset_leaves_no_x_resource_a_client_retained_and_rotates_the_cookie(stack: Stack) -> None:
    marker = "x" + secrets.token_hex(6)
    host = stack.ip("sandbox", "sandbox_net")
    old_cookie = cookie(stack)
    assert x_setup_on_socket(stack, None) == 0, "the X server admitted a client without the cookie"
    assert x_setup_on_socket(stack, secrets.token_bytes(16)) == 0, "the X server admitted a wrong cookie"
    assert x_setup_on_socket(stack, old_cookie) == 1, "the X server refused its own cookie"
    # Over TCP only the X gate answers: no grant is live, so nothing opens it, the server's own cookie neither.
    for secret in (None, secrets.token_bytes(16), old_cookie):
        assert x_setup_over_tcp(host, secret) == 0, secret

    window = run_in_sandbox(stack, LEAVE, marker, *(str(v) for v in BANNER))["window"]
    before = run_in_sandbox(stack, INSPECT, marker)
    # The client has disconnected; its window and property are still there (RetainPermanent).
    # (Its selection is not: the server drops a leaving client's selections itself.)
    assert any(w["id"] == window and w["override_redirect"] and w["mapped"] for w in before["windows"]), before
    assert before["property"] == marker and before["atoms"] == [True, True], before

    async def body() -> tuple[float, float]:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        shown_before = banner_pixels(await screenshot(client))
        obs, elapsed = await do_reset(stack, client, "http://demo.test/")
        print(f"reset took {elapsed:.3f} s")
        await client.close()
        assert obs.screenshot is not None
        return shown_before, banner_pixels(obs.screenshot.data)

    shown_before, shown_after = asyncio.run(body())
    assert shown_before > 0.9, f"the banner was not on the screen before the reset ({shown_before:.0%})"
    assert shown_after < 0.01, f"the first observation after the reset shows the banner ({shown_after:.0%})"

    new_cookie = cookie(stack)
    assert new_cookie != old_cookie
    assert x_setup_on_socket(stack, old_cookie) == 0, "the previous cookie still opens the display"
    assert x_setup_on_socket(stack, None) == 0
    assert x_setup_on_socket(stack, new_cookie) == 1
    assert x_setup_over_tcp(host, new_cookie) == 0
    after = run_in_sandbox(stack, INSPECT, marker)
    leftovers = [w for w in after["windows"] if w["override_redirect"] and w["mapped"]
                 and w["geometry"] == list(BANNER)]
    assert not leftovers, after
    assert after["atoms"] == [False, False] and after["property"] is None and after["selection_owner"] == 0, after


def test_ipc_objects_do_not_survive_a_reset(stack: Stack) -> None:
    key = 0x5EED0000 + secrets.randbelow(0x1000) * 4
    queue = "deskpod" + secrets.token_hex(4)
    made = run_in_sandbox(stack, MAKE_IPC, str(key), queue)
    listed = run_in_sandbox(stack, LIST_IPC)
    assert key in listed["shm"] and key + 1 in listed["msg"] and key + 2 in listed["sem"], (made, listed)
    assert queue in listed["mqueue"], listed

    async def body() -> None:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        await do_reset(stack, client, None)
        await client.close()

    asyncio.run(body())
    listed = run_in_sandbox(stack, LIST_IPC)
    assert key not in listed["shm"] and key + 1 not in listed["msg"] and key + 2 not in listed["sem"], listed
    assert listed["mqueue"] == [], listed


def test_the_display_has_no_abstract_socket(stack: Stack) -> None:
    """The abstract Unix namespace belongs to the network namespace (a Kubernetes pod's
    containers share it): the X server never listens there."""
    found = run_in_sandbox(stack, "import json; print(json.dumps([l.split()[-1] for l in "
                                  "open('/proc/net/unix').read().splitlines()[1:] if '.X11-unix' in l]))")
    assert found and all(not name.startswith("@") for name in found), found
