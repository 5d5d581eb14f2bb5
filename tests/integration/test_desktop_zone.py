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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod.client import SandboxClient
from deskpod.controller import load_task, run_task
from deskpod.controller.confirm import ConfirmationAnswer, ConfirmationRequest, DenyChannel, PauseAnswer, PauseNotice
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.policy.risk import ActionClassifier, ActionContext
from deskpod.errors import ExecutionError
from deskpod.protocol import ObserveOptions, Point, ReadFileRequest, Window, WriteFileRequest, parse_action
from deskpod.tokens import new_token
from deskpod_stack import Stack, page_state, with_client
from test_clipboard import point_of
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
for name, host, port in (("apps_runner", "desktop", 8771), ("workspace_runner", "workspace", 8770)):
    try:
        with socket.create_connection((host, port), timeout=5) as runner:
            runner.sendall(encode_frame(RunnerPingRequest()))
            out[name] = runner.recv(64)[4:].decode(errors="replace") or "closed"
    except Exception as exc:
        out[name] = type(exc).__name__
print("NET " + json.dumps(out))
PY
/opt/deskpod/venv/bin/python3 /workspace/attack.py chromium 0,0,40,40 0 | head -1 | sed 's/^/X /'
mkdir -p /workspace/keep/inner && echo left > /workspace/keep/inner/f && chmod 0 /workspace/keep/inner /workspace/keep
(while :; do echo left > /workspace/race; done) </dev/null >/dev/null 2>&1 &
echo done
"""
"""The agent's probe, run in the terminal: who it is, which processes it sees, whether it holds
a token, the network directly and through the proxy, the daemon with a guessed token, the
applications runner and the workspace runner (each once answered the zone's ping and would start,
run or reset: the applications runner before its address check, the workspace runner until
``DESKPOD_RUNNER_CLIENT``), and the X
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
    return await _agent_window(client, lambda w: w.app == "XTerm", deadline)


async def _agent_window(client: SandboxClient, wanted: Callable[[Window], bool], deadline: float) -> Window:
    """The first agent's window ``wanted`` picks once the window manager lists it (by ``deadline``,
    a ``time.monotonic()`` value)."""
    while time.monotonic() < deadline:
        obs = await client.act([], ObserveOptions(screenshot=False, settle=False, windows=True))
        found = [w for w in obs.windows or [] if w.zone == "agent" and wanted(w)]
        if found:
            return found[0]
        await asyncio.sleep(0.3)
    raise AssertionError("the window never appeared")


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
    # Nor the workspace runner (on main it answered, and would run a command or reset the workspace).
    assert net["workspace_runner"] in ("closed", "ConnectionResetError"), net
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


CONFIRM_PY = r"""
import gi
gi.require_version("Gtk", "3.0")
from gi.repository import Gtk
dialog = Gtk.MessageDialog(message_type=Gtk.MessageType.QUESTION, text="Delete every file in the workspace?")
dialog.set_title("Clean up")
dialog.add_button("Keep", Gtk.ResponseType.CANCEL)
dialog.add_button("Delete", Gtk.ResponseType.OK)
dialog.set_default_response(Gtk.ResponseType.OK)
dialog.get_widget_for_response(Gtk.ResponseType.OK).grab_focus()
answer = dialog.run()
with open("/workspace/answer.txt", "w") as out:
    out.write("deleted" if answer == Gtk.ResponseType.OK else "kept")
"""
"""A program of the agent's with a native dialog (GTK, as any desktop application's): a "Delete"
button with the focus and a "Keep" one; the answer pressed lands in ``answer.txt``."""

RUN_CONFIRM = [{"type": "type", "text": "/usr/bin/python3 /workspace/confirm.py"}, {"type": "keypress", "keys": ["ctrl+j"]}]


def test_native_controls_are_read_from_the_application_and_a_delete_button_is_l3(desktop_stack: Stack) -> None:
    """The observation carries the application's controls from AT-SPI: the tree of the focused
    window (its text scanned too), the control with the focus and the one under a point, in the
    model space, each with its ref: ``click_element`` on the "Keep" ref presses Keep. The policy rates a click on the
    "Delete" button, and Enter while it has the focus, ``L3``; on main neither was read and both
    were ``L1`` (any click in an application's window)."""
    stack = desktop_stack

    async def body(client: SandboxClient) -> tuple[Any, Any, Any, str]:
        await _write(client, "confirm.py", CONFIRM_PY)
        terminal = await _open_terminal(client)
        await client.act([{"type": "window_focus", "window_id": terminal.id}, *RUN_CONFIRM],
                         ObserveOptions(screenshot=False))
        dialog = await _agent_window(client, lambda w: w.title == "Clean up", time.monotonic() + 30)
        await client.act([{"type": "window_focus", "window_id": dialog.id}], ObserveOptions(screenshot=False))
        whole = await client.act([], ObserveOptions(screenshot=False, accessibility=True, text_sources=True))
        delete = next(n for n in whole.native_accessibility or [] if n.name == "Delete")
        keep = next(n for n in whole.native_accessibility or [] if n.name == "Keep")
        assert delete.box is not None and keep.box is not None
        centre = Point(x=(delete.box[0] + delete.box[2]) // 2, y=(delete.box[1] + delete.box[3]) // 2)
        at = await client.act([], ObserveOptions(screenshot=False, element_at=centre))
        assert keep.ref is not None and keep.ref.startswith("n")
        await client.act([{"type": "click_element", "ref": keep.ref}], ObserveOptions(screenshot=False))
        deadline = time.monotonic() + 20
        answer = ""
        while not answer and time.monotonic() < deadline:
            try:
                reply = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path="answer.txt"))
                answer = reply.workspace.content
            except Exception:  # not written yet
                await asyncio.sleep(0.3)
        return whole, at, centre, answer

    whole, at, centre, answer = with_client(stack, body)
    assert whole.focus_window is not None and whole.focus_window.title == "Clean up"
    assert whole.native_focused is not None and whole.native_focused.name == "Delete", whole.native_focused
    assert whole.native_focused.role == "push button" and "focused" in whole.native_focused.states
    native_text = [s.text for s in whole.text_sources or [] if s.source == "native"]
    assert native_text and "Delete every file in the workspace?" in native_text[0], whole.text_sources
    assert at.window_at is not None and at.native_at is not None, at
    assert (at.native_at.role, at.native_at.name) == ("push button", "Delete"), at.native_at
    classifier = ActionClassifier()
    click = classifier.classify(parse_action({"type": "click", "x": centre.x, "y": centre.y}, 0),
                                ActionContext(window=at.window_at, native_at=at.native_at))
    enter = classifier.classify(parse_action({"type": "keypress", "keys": ["Return"]}, 0),
                                ActionContext(focus_window=whole.focus_window, native_focused=whole.native_focused))
    assert click.level == "L3" and "Delete" in click.target, click
    assert enter.level == "L3" and "Delete" in enter.target, enter
    assert answer == "kept"  # the element action on the tree's ref pressed "Keep"


class Approver:
    """Approves every confirmation."""

    async def confirm(self, request: ConfirmationRequest) -> ConfirmationAnswer | None:
        return ConfirmationAnswer(True, request.digest, "test")

    async def review(self, notice: PauseNotice) -> PauseAnswer | None:
        return "cancel"


def _reset(stack: Stack) -> None:
    """Reset the sandbox (the zone and the workspace emptied) under a new token."""
    token = new_token()

    async def body(client: SandboxClient) -> None:
        await client.reset(None, token_sha256=hashlib.sha256(token.encode()).hexdigest())

    with_client(stack, body)
    stack.token = token


def _native_task(tmp_path: Path) -> Path:
    body = {"name": "native-delete", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
            "setup": {"files": {"confirm.py": CONFIRM_PY, "answer.txt": "unanswered"}, "apps": [{"app": "terminal"}]},
            "limits": {"max_steps": 4, "max_wall_time_s": 90},
            "steps": [{"actions": [*RUN_CONFIRM, {"type": "wait", "seconds": 4}]},
                      {"actions": [{"type": "keypress", "keys": ["Return"]}]}],
            "success": {"files": [{"path": "answer.txt", "equals": "deleted"}], "timeout_s": 5}}
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.mark.parametrize("answer", ["deny", "approve"])
def test_an_l3_native_button_waits_for_a_confirmation_and_a_denial_presses_nothing(
        desktop_stack: Stack, tmp_path: Path, answer: str) -> None:
    """A GUI run presses Enter on the dialog's focused "Delete" button: ``L3``, asked for with the
    control and the application named; denied (``--confirm deny``'s channel), nothing is pressed
    and the run ends cancelled; approved, the same key presses it. On main the key was ``L2`` by
    the terminal's rule alone (the dialog's program came in through the terminal's grant) and,
    with only ``L3`` asked for, pressed "Delete" unasked."""
    stack = desktop_stack
    _reset(stack)  # no window or file of an earlier test left
    channel = DenyChannel() if answer == "deny" else Approver()
    result = asyncio.run(run_task(load_task(_native_task(tmp_path)), stack.ws_url, stack.token,
                                  audit_dir=tmp_path / "audit", channel=channel,
                                  policy=Policy(confirm_levels=["L3"], allowed_domains=["demo.test"])))
    records = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    [asked] = [r for r in records if r["event"] == "confirmation_requested"]
    assert asked["level"] == "L3", asked
    assert "push button 'Delete'" in asked["summary"] and "desktop application 'terminal'" in asked["summary"], asked
    if answer == "deny":
        assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
        listed = stack.container("workspace").exec_run(["cat", "/workspace/answer.txt"], user="1001")
        assert listed.output == b"unanswered", listed.output  # the dialog was never answered
    else:
        assert result.status == "succeeded", result.reason


SAMPLES = r"""
import os, struct, zlib
os.makedirs("/workspace/shared", exist_ok=True)
open("/workspace/shared/readme.txt", "w").write("shared\n")
open("/workspace/letter.txt", "w").write("Dear reader,\n")
open("/workspace/report.csv", "w").write("item,amount\nrent,1200\nfood,300\n")
objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
           b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents 4 0 R "
           b"/Resources << /Font << /F1 5 0 R >> >> >>",
           b"<< /Length 44 >>\nstream\nBT /F1 24 Tf 40 100 Td (Quarterly) Tj ET\nendstream",
           b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
pdf, offsets = b"%PDF-1.4\n", []
for number, body in enumerate(objects, 1):
    offsets.append(len(pdf))
    pdf += b"%d 0 obj\n" % number + body + b"\nendobj\n"
xref = len(pdf)
pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
pdf += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
open("/workspace/paper.pdf", "wb").write(pdf)
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
rows = b"".join(b"\x00" + bytes([200, 40, 40]) * 64 for _ in range(48))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 48, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
open("/workspace/photo.png", "wb").write(png)
"""
"""A folder, a text document, a CSV sheet, a one-page PDF and a PNG, written in the workspace as
its uid (the workspace container's Python)."""

OPENED = [("file_manager", "shared"), ("document", "letter.txt"), ("spreadsheet", "report.csv"),
          ("pdf_viewer", "paper.pdf"), ("image_viewer", "photo.png")]


def test_each_desktop_application_opens_its_workspace_file_and_shows_its_controls(desktop_stack: Stack) -> None:
    """The file manager, the word processor, the spreadsheet and the PDF and image viewers each
    open the workspace file ``open_app`` names, in a window of their own listed with its source,
    and their native controls are read from their accessibility trees; the settings and recent
    documents they keep in the zone's home are gone after a reset. On main ``open_app`` knew the
    terminal and the editor alone."""
    stack = desktop_stack
    _reset(stack)
    made = stack.container("workspace").exec_run(["python3", "-c", SAMPLES], user="1001")
    assert made.exit_code == 0, made.output

    async def body(client: SandboxClient) -> dict[str, tuple[Window, Any]]:
        seen: dict[str, tuple[Window, Any]] = {}
        for app, path in OPENED:
            await client.act([{"type": "open_app", "app": app, "path": path}], ObserveOptions(screenshot=False))
            stem = path.split(".")[0]
            window = await _agent_window(client, lambda w, stem=stem: stem in (w.title or ""), time.monotonic() + 30)
            await client.act([{"type": "window_focus", "window_id": window.id}], ObserveOptions(screenshot=False))
            await asyncio.sleep(1)
            seen[app] = window, await client.act([], ObserveOptions(screenshot=False, accessibility=True))
        return seen

    seen = with_client(stack, body)
    for app, (window, obs) in seen.items():
        assert obs.focus_window is not None and obs.focus_window.source == app, (app, obs.focus_window)
        assert obs.native_accessibility, (app, window)  # the application's tree was read
    zone = stack.container("desktop")
    kept = zone.exec_run(["ls", "-A", "/home/apps"], user="1001").output.decode().split()
    assert kept, kept  # the applications wrote their settings and recent documents there
    _reset(stack)
    # Their settings, recent documents and caches went with the reset: the zone's home is empty.
    assert zone.exec_run(["ls", "-A", "/home/apps"], user="1001").output == b""


def test_the_clipboard_crosses_between_an_application_and_the_browser_through_the_agent_s_actions(
        desktop_stack: Stack) -> None:
    """Copy in the word processor, ``clipboard_read`` (from the zone), ``clipboard_write`` with the
    browser focused, paste on a page: the page gets the document's text. The other way: with the
    editor focused, ``clipboard_write`` puts the text in the zone, and the editor's paste saves
    it. On main an application's copy could not be read (the X gate kept its answer from the
    daemon: ``clipboard_unreadable``) and an agent's write was the browser's alone (the editor
    pasted nothing)."""
    stack = desktop_stack
    _reset(stack)
    quote, back = "invoice 4711 approved", "from the web page ✓"

    async def body(client: SandboxClient) -> dict[str, Any]:
        await _write(client, "quote.txt", quote + "\n")
        await _write(client, "target.txt", "placeholder\n")
        await client.act([{"type": "open_app", "app": "document", "path": "quote.txt"}], ObserveOptions(screenshot=False))
        document = await _agent_window(client, lambda w: "quote" in (w.title or ""), time.monotonic() + 30)
        await client.act([{"type": "window_focus", "window_id": document.id}, {"type": "wait", "seconds": 1},
                          {"type": "keypress", "keys": ["ctrl", "a"]}, {"type": "keypress", "keys": ["ctrl", "c"]}],
                         ObserveOptions(screenshot=False))
        from_document = (await client.act([{"type": "clipboard_read"}], ObserveOptions(screenshot=False))).clipboard
        listed = await client.act([], ObserveOptions(screenshot=False, windows=True))
        chromium = next(w for w in listed.windows or [] if w.zone == "sandbox" and w.app == "Chromium")
        await client.navigate("http://demo.test/fixtures/clipboard", ObserveOptions(screenshot=False))
        await client.act([{"type": "window_focus", "window_id": chromium.id},
                          {"type": "clipboard_write", "text": from_document or ""}], ObserveOptions(screenshot=False))
        paste = await point_of(client, "paste here")
        await client.act([{"type": "click", "x": paste[0], "y": paste[1]}, {"type": "keypress", "keys": ["ctrl", "v"]},
                          {"type": "wait", "seconds": 0.2}], ObserveOptions(screenshot=False))
        pasted = page_state((await client.act([], ObserveOptions(screenshot=False, page_text=True))).page_text)["pasted"]
        await client.act([{"type": "open_app", "app": "editor", "path": "target.txt"}], ObserveOptions(screenshot=False))
        editor = await _agent_window(client, lambda w: "target.txt" in (w.title or ""), time.monotonic() + 30)
        # A paste is asynchronous in GTK: the editor saves what it holds once the paste landed.
        await client.act([{"type": "window_focus", "window_id": editor.id}, {"type": "clipboard_write", "text": back},
                          {"type": "keypress", "keys": ["ctrl", "a"]}, {"type": "keypress", "keys": ["ctrl", "v"]},
                          {"type": "wait", "seconds": 0.5}, {"type": "keypress", "keys": ["ctrl", "s"]},
                          {"type": "wait", "seconds": 1}], ObserveOptions(screenshot=False))
        saved = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path="target.txt"))
        return {"from_document": from_document, "pasted": pasted, "saved": saved.workspace.content}

    got = with_client(stack, body)
    assert (got["from_document"] or "").strip() == quote, got
    assert got["pasted"].strip() == quote, got
    assert got["saved"].strip() == back, got
    _reset(stack)


def test_a_bell_leaves_the_application_open(desktop_stack: Stack) -> None:
    """The X server refuses an untrusted client's bell (``BadAccess``) and Xlib's and GDK's
    error handlers end the program on it: on main, the terminal's bell (``printf '\\a'``, as
    bash rings on a Tab completion that fails) and the error bell GTK rings for a key that
    cannot move the cursor (End at the end of the editor's Save As name field) closed the
    application. Now the gate drops the bell: both stay open, and the dialog still saves."""
    stack = desktop_stack
    _reset(stack)

    async def body(client: SandboxClient) -> dict[str, Any]:
        terminal = await _open_terminal(client)
        await client.act([{"type": "window_focus", "window_id": terminal.id},
                          {"type": "type", "text": "printf '\\a'; sleep 1; echo done > /workspace/bell.txt"},
                          {"type": "keypress", "keys": ["ctrl+j"]}], ObserveOptions(screenshot=False))
        rang = await _read_until_done(client, "bell.txt", 20)
        await client.act([{"type": "open_app", "app": "editor"}], ObserveOptions(screenshot=False))
        editor = await _agent_window(client, lambda w: (w.app or "").lower() == "mousepad", time.monotonic() + 30)
        await client.act([{"type": "window_focus", "window_id": editor.id}, {"type": "wait", "seconds": 0.5},
                          {"type": "type", "text": "kept"}, {"type": "keypress", "keys": ["ctrl", "s"]}],
                         ObserveOptions(screenshot=False))
        await _agent_window(client, lambda w: w.title == "Save As", time.monotonic() + 20)
        await client.act([{"type": "type", "text": "saved"}, {"type": "keypress", "keys": ["End"]},
                          {"type": "keypress", "keys": ["End"]}, {"type": "wait", "seconds": 0.5}],
                         ObserveOptions(screenshot=False))
        listed = await client.act([], ObserveOptions(screenshot=False, windows=True))
        await client.act([{"type": "type", "text": ".txt"}, {"type": "keypress", "keys": ["Return"]},
                          {"type": "wait", "seconds": 1}], ObserveOptions(screenshot=False))
        saved = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path="saved.txt"))
        return {"rang": rang, "windows": [(w.app, w.title) for w in listed.windows or [] if w.zone == "agent"],
                "saved": saved.workspace.content}

    got = with_client(stack, body)
    assert got["rang"].strip() == "done", got
    assert any(app == "XTerm" for app, _ in got["windows"]), got  # the terminal is still there
    assert any(title == "Save As" for _, title in got["windows"]), got  # and the dialog
    assert got["saved"].strip() == "kept", got
    _reset(stack)


def test_an_application_s_file_dialog_is_the_file_chooser_and_set_files_answers_it(desktop_stack: Stack) -> None:
    """The editor's Save As and Open dialogs (GTK's file chooser) are the observation's
    ``file_chooser`` (the application named, ``save`` told apart) and ``set_files`` answers them
    as it answers the page's: the document is saved under the workspace path given, and the
    file given is opened. A path outside the workspace is a typed error and the dialog stays
    usable. On main the dialog was only a ``native_dialog``: ``set_files`` answered
    ``no_file_chooser``."""
    stack = desktop_stack
    _reset(stack)

    async def observe_chooser(client: SandboxClient) -> Any:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            obs = await client.act([], ObserveOptions(screenshot=False, settle=False))
            if obs.file_chooser is not None:
                return obs.file_chooser
            await asyncio.sleep(0.3)
        raise AssertionError("no file chooser was reported")

    async def body(client: SandboxClient) -> dict[str, Any]:
        await _write(client, "other.txt", "opened through the dialog\n")
        await client.act([{"type": "open_app", "app": "editor"}], ObserveOptions(screenshot=False))
        editor = await _agent_window(client, lambda w: (w.app or "").lower() == "mousepad", time.monotonic() + 30)
        await client.act([{"type": "window_focus", "window_id": editor.id}, {"type": "wait", "seconds": 0.5},
                          {"type": "type", "text": "kept by set_files"}, {"type": "keypress", "keys": ["ctrl", "s"]}],
                         ObserveOptions(screenshot=False))
        save = await observe_chooser(client)
        await client.act([{"type": "set_files", "paths": ["saved.txt"]}, {"type": "wait", "seconds": 1}],
                         ObserveOptions(screenshot=False))
        saved = await client.request(ReadFileRequest(type="read_file", id=client.next_id(), path="saved.txt"))
        await client.act([{"type": "keypress", "keys": ["ctrl", "o"]}], ObserveOptions(screenshot=False))
        opening = await observe_chooser(client)
        try:
            await client.act([{"type": "set_files", "paths": ["../etc/passwd"]}], ObserveOptions(screenshot=False))
            outside = None
        except ExecutionError as exc:
            outside = exc.detail.get("reason")
        await client.act([{"type": "set_files", "paths": ["other.txt"]}, {"type": "wait", "seconds": 1}],
                         ObserveOptions(screenshot=False))
        opened = await _agent_window(client, lambda w: "other.txt" in (w.title or ""), time.monotonic() + 20)
        return {"save": save, "saved": saved.workspace.content, "opening": opening, "outside": outside,
                "opened": opened.title}

    got = with_client(stack, body)
    assert got["save"].application == "editor" and got["save"].save and got["save"].tab is None, got
    assert got["saved"].strip() == "kept by set_files", got
    assert got["opening"].application == "editor" and not got["opening"].save, got
    assert got["outside"] == "not_a_workspace_file", got
    assert "other.txt" in got["opened"], got
    _reset(stack)


def _zone_home(stack: Stack) -> dict[str, str]:
    """The zone's home's files but caches, with their SHA-256, as the host sees them."""
    listed = stack.container("desktop").exec_run(
        ["sh", "-c", "cd /home/apps && find . -type f -not -path './.cache/*' -exec sha256sum {} +"], user="1001")
    return {name: digest for digest, name in (line.split(None, 1) for line in listed.output.decode().splitlines())}


def test_a_snapshot_carries_the_applications_home_and_a_restore_after_a_reset_brings_it_back(
        desktop_stack: Stack) -> None:
    """The editor opened and saved a workspace file: its settings and recent documents are in the
    zone's home. A snapshot holds them beside the browser's profile; the reset empties the home;
    restoring the snapshot writes them back, byte for byte. On main a snapshot held the browser's
    profile alone: after the restore the home stayed empty."""
    stack = desktop_stack
    _reset(stack)

    async def use_the_editor(client: SandboxClient) -> bytes:
        await _write(client, "notes.txt", "first line\n")
        await client.act([{"type": "open_app", "app": "editor", "path": "notes.txt"}], ObserveOptions(screenshot=False))
        editor = await _agent_window(client, lambda w: "notes.txt" in (w.title or ""), time.monotonic() + 30)
        await client.act([{"type": "window_focus", "window_id": editor.id}, {"type": "wait", "seconds": 0.5},
                          {"type": "type", "text": "second line"}, {"type": "keypress", "keys": ["ctrl", "s"]},
                          {"type": "wait", "seconds": 1}], ObserveOptions(screenshot=False))
        return await client.snapshot()

    archive = with_client(stack, use_the_editor)
    kept = _zone_home(stack)
    assert kept, kept  # the editor wrote its settings or recent documents
    _reset(stack)
    assert _zone_home(stack) == {}

    async def restore(client: SandboxClient) -> None:
        await client.restore(archive)

    with_client(stack, restore)
    assert _zone_home(stack) == kept
    _reset(stack)
    assert _zone_home(stack) == {}  # and the next reset empties it again

