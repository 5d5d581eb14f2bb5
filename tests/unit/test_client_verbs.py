"""The Python client's verbs against a scripted daemon on loopback (tests/support/hostile_daemon.py):
``configure``'s two forms, what every :class:`Sandbox` verb puts on the wire, that the verbs cover
every action and request of the protocol, and that :class:`SyncSandbox` mirrors them all."""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hostile_daemon import HostileDaemon, screenshot
from PIL import Image

from deskpod.client import Sandbox, SyncSandbox
from deskpod.errors import InvalidActionError, InvalidRequestError
from deskpod.protocol import ACTION_TYPES, REQUEST_TYPES, Point, Size

TOKEN = "t" * 43


def run_with(daemon: HostileDaemon, body: Callable[[Sandbox], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await Sandbox.open(daemon.url, TOKEN, timeout_s=5) as sb:
            return await body(sb)

    return asyncio.run(main())


@pytest.mark.parametrize(("kwargs", "sent"), [
    ({"model_size": Size(width=32, height=20)}, {"model_size": {"width": 32, "height": 20}, "max_dimension": None}),
    ({"model_size": (32, 20)}, {"model_size": {"width": 32, "height": 20}, "max_dimension": None}),
    ({"max_dimension": 1280}, {"model_size": None, "max_dimension": 1280}),
    ({}, {"model_size": None, "max_dimension": None}),
])
def test_configure_sends_either_form(kwargs: dict[str, Any], sent: dict[str, Any]) -> None:
    """model_size (a Size or a tuple), max_dimension, or neither (the screen) go out as
    ConfigureRequest's fields; the reply's model space is returned."""
    with HostileDaemon() as daemon:
        got = run_with(daemon, lambda sb: sb.configure(**kwargs))
    assert got == Size(width=64, height=40)
    (request,) = daemon.requests
    assert request["type"] == "configure"
    assert {k: request[k] for k in sent} == sent


@pytest.mark.parametrize("kwargs", [
    {"model_size": (32, 20), "max_dimension": 1280},
    {"max_dimension": 8},
    {"model_size": (0, 20)},
    {"max_dimension": 100_000},
])
def test_configure_refuses_bad_forms_before_sending(kwargs: dict[str, Any]) -> None:
    """Both forms at once, or a size out of range, is the caller's InvalidRequestError; nothing is sent."""
    with HostileDaemon() as daemon:
        with pytest.raises(InvalidRequestError, match="configure|width|height"):
            run_with(daemon, lambda sb: sb.configure(**kwargs))
    assert daemon.requests == []


ARCHIVE = b"\x1f\x8b not really a tarball"

GUI_VERBS: list[tuple[str, Callable[[Sandbox], Awaitable[Any]], dict[str, Any]]] = [
    ("click", lambda sb: sb.click(3, 4, "right", hold_keys=["shift"]),
     {"type": "click", "x": 3, "y": 4, "button": "right", "hold_keys": ["shift"]}),
    ("click here", lambda sb: sb.click(), {"type": "click", "button": "left"}),
    ("double_click", lambda sb: sb.double_click(5, 6), {"type": "double_click", "x": 5, "y": 6}),
    ("triple_click", lambda sb: sb.triple_click(5, 6), {"type": "triple_click", "x": 5, "y": 6}),
    ("mouse_down", lambda sb: sb.mouse_down(1, 2, "middle"), {"type": "mouse_down", "x": 1, "y": 2,
                                                                "button": "middle"}),
    ("mouse_up", lambda sb: sb.mouse_up(), {"type": "mouse_up", "button": "left"}),
    ("move", lambda sb: sb.move(7, 8), {"type": "move", "x": 7, "y": 8}),
    ("drag", lambda sb: sb.drag([(1, 1), Point(x=9, y=9)]), {"type": "drag", "path": [{"x": 1, "y": 1},
                                                                                       {"x": 9, "y": 9}]}),
    ("scroll", lambda sb: sb.scroll(10, 11, scroll_y=-3, scroll_x=2, hold_keys=["ctrl"]),
     {"type": "scroll", "x": 10, "y": 11, "scroll_x": 2, "scroll_y": -3, "hold_keys": ["ctrl"]}),
    ("keypress", lambda sb: sb.keypress("CTRL", "a"), {"type": "keypress", "keys": ["CTRL", "a"]}),
    ("hold_key", lambda sb: sb.hold_key("shift", seconds=0.5), {"type": "hold_key", "keys": ["shift"],
                                                                 "seconds": 0.5}),
    ("type_text", lambda sb: sb.type_text("penguin"), {"type": "type", "text": "penguin"}),
    ("wait", lambda sb: sb.wait(0.25), {"type": "wait", "seconds": 0.25}),
    ("wait_for", lambda sb: sb.wait_for(url_matches="done$", timeout_s=2),
     {"type": "wait_for", "url_matches": "done$", "timeout_s": 2}),
    ("wait_for text", lambda sb: sb.wait_for(text_present="hi"), {"type": "wait_for", "text_present": "hi"}),
    ("wait_for gone", lambda sb: sb.wait_for(text_absent="Loading"), {"type": "wait_for", "text_absent": "Loading"}),
    ("wait_for screen", lambda sb: sb.wait_for(screen_changed=True), {"type": "wait_for", "screen_changed": True}),
    ("screenshot", lambda sb: sb.screenshot("jpeg", quality=50), {"type": "screenshot"}),
    ("cursor_position", lambda sb: sb.cursor_position(), {"type": "cursor_position"}),
    ("zoom", lambda sb: sb.zoom(0, 0, 10, 10), {"type": "zoom", "region": [0, 0, 10, 10]}),
    ("drop_files", lambda sb: sb.drop_files(5, 6, "a.txt"), {"type": "drop_files", "x": 5, "y": 6, "paths": ["a.txt"]}),
    ("read_clipboard", lambda sb: sb.read_clipboard(), {"type": "clipboard_read"}),
    ("write_clipboard", lambda sb: sb.write_clipboard("hi"), {"type": "clipboard_write", "text": "hi"}),
    ("set_files", lambda sb: sb.set_files("a.txt", "b/c.pdf"), {"type": "set_files", "paths": ["a.txt", "b/c.pdf"]}),
    ("accept_dialog", lambda sb: sb.accept_dialog("Ada", tab_id="T1"),
     {"type": "dialog_accept", "text": "Ada", "tab_id": "T1"}),
    ("dismiss_dialog", lambda sb: sb.dismiss_dialog(), {"type": "dialog_dismiss"}),
    ("recover_tab", lambda sb: sb.recover_tab(tab_id="T2"), {"type": "recover_tab", "tab_id": "T2"}),
    ("open_app", lambda sb: sb.open_app("editor", "notes.txt"), {"type": "open_app", "app": "editor", "path": "notes.txt"}),
    ("focus_window", lambda sb: sb.focus_window("0x1a00007"), {"type": "window_focus", "window_id": "0x1a00007"}),
    ("close_window", lambda sb: sb.close_window("0x1a00007"), {"type": "window_close", "window_id": "0x1a00007"}),
    ("move_window", lambda sb: sb.move_window("0x1a00007", 40, 50),
     {"type": "window_move", "window_id": "0x1a00007", "x": 40, "y": 50}),
    ("resize_window", lambda sb: sb.resize_window("0x1a00007", 300, 200),
     {"type": "window_resize", "window_id": "0x1a00007", "width": 300, "height": 200}),
    ("click_element", lambda sb: sb.click_element("e4", count=2), {"type": "click_element", "ref": "e4", "count": 2}),
    ("type_element", lambda sb: sb.type_element("e5", "hi", submit=True),
     {"type": "type_element", "ref": "e5", "text": "hi", "submit": True}),
    ("select_option", lambda sb: sb.select_option("e6", ["Blue"]),
     {"type": "select_option", "ref": "e6", "values": ["Blue"]}),
    ("hover_element", lambda sb: sb.hover_element("e7"), {"type": "hover_element", "ref": "e7"}),
    ("drag_element", lambda sb: sb.drag_element("e7", "e8"), {"type": "drag_element", "ref": "e7", "to_ref": "e8"}),
    ("fill_form", lambda sb: sb.fill_form({"e8": "Ada", "e9": "true"}),
     {"type": "fill_form", "fields": [{"ref": "e8", "value": "Ada"}, {"ref": "e9", "value": "true"}]}),
    # The navigate action is the navigate request's load inside a batch: its verb is act.
    ("navigate action", lambda sb: sb.act([{"type": "navigate", "url": "http://demo.test/page"}]),
     {"type": "navigate", "url": "http://demo.test/page"}),
]

REQUEST_VERBS: list[tuple[str, Callable[[Sandbox], Awaitable[Any]], dict[str, Any]]] = [
    ("navigate", lambda sb: sb.navigate("http://demo.test/"), {"type": "navigate", "url": "http://demo.test/"}),
    ("observe", lambda sb: sb.observe(), {"type": "act", "actions": []}),
    ("allow_hosts", lambda sb: sb.allow_hosts(["demo.test"]), {"type": "egress", "allowed_domains": ["demo.test"]}),
    ("grant_permissions", lambda sb: sb.grant_permissions({"granted": ["midi"]}),
     {"type": "permissions", "grants": {"granted": ["midi"], "position": None}}),
    ("seed", lambda sb: sb.seed(ARCHIVE, git_init=False),
     {"type": "seed_workspace", "archive": base64.b64encode(ARCHIVE).decode(), "clear": True, "git_init": False}),
    ("list_dir", lambda sb: sb.list_dir("src", max_entries=5), {"type": "list_dir", "path": "src",
                                                                 "max_entries": 5}),
    ("read_file", lambda sb: sb.read_file("a.py", start_line=2, max_lines=3),
     {"type": "read_file", "path": "a.py", "start_line": 2, "max_lines": 3}),
    ("write_file", lambda sb: sb.write_file("a.py", "x = 1\n"), {"type": "write_file", "path": "a.py",
                                                                  "content": "x = 1\n", "create_dirs": True}),
    ("edit_file", lambda sb: sb.edit_file("a.py", "1", "2"), {"type": "edit_file", "path": "a.py",
                                                               "old_text": "1", "new_text": "2"}),
    ("apply_patch", lambda sb: sb.apply_patch("--- a/x\n+++ b/x\n"), {"type": "apply_patch",
                                                                       "patch": "--- a/x\n+++ b/x\n"}),
    ("exec argv", lambda sb: sb.exec(["ls", "-la"], timeout_s=5),
     {"type": "exec", "argv": ["ls", "-la"], "cmd": None, "timeout_s": 5}),
    ("exec shell", lambda sb: sb.exec("echo hi | wc -c", network=True),
     {"type": "exec", "argv": None, "cmd": "echo hi | wc -c", "network": True}),
    ("exec caps and domains", lambda sb: sb.exec(["pip", "download", "x"], max_output_lines=20, network=True,
                                                 allowed_domains=["pypi.org"]),
     {"type": "exec", "max_output_bytes": 10_240, "max_output_lines": 20, "allowed_domains": ["pypi.org"]}),
    ("run_tests", lambda sb: sb.run_tests(["pytest", "-q"]), {"type": "run_tests", "argv": ["pytest", "-q"]}),
    ("diff", lambda sb: sb.diff("abcdef1"), {"type": "workspace_diff", "base": "abcdef1"}),
]


def _zoom_too(n: int, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """The scripted daemon's reply, with the cursor and zoom a reading verb asks for."""
    obs = reply.get("observation")
    if obs is not None:
        obs["cursor"] = {"x": 1, "y": 2}
        obs["zoom"] = screenshot(id="z-1", perceptual_hash=None)
        obs["clipboard"] = "copied"
        if request.get("observe", {}).get("format") == "jpeg":
            out = io.BytesIO()
            Image.new("RGB", (64, 40)).save(out, format="JPEG")
            obs["screenshot"] = screenshot(out.getvalue(), format="jpeg")
    return reply


@pytest.mark.parametrize(("name", "verb", "action"), GUI_VERBS, ids=[v[0] for v in GUI_VERBS])
def test_each_gui_verb_sends_one_act_with_its_action(name: str, verb: Callable[[Sandbox], Awaitable[Any]],
                                                     action: dict[str, Any]) -> None:
    with HostileDaemon(_zoom_too) as daemon:
        run_with(daemon, verb)
    (request,) = daemon.requests
    assert request["type"] == "act" and len(request["actions"]) == 1, request
    sent = request["actions"][0]
    assert {k: sent.get(k) for k in action} == action, sent


@pytest.mark.parametrize(("name", "verb", "fields"), REQUEST_VERBS, ids=[v[0] for v in REQUEST_VERBS])
def test_each_request_verb_sends_its_request(name: str, verb: Callable[[Sandbox], Awaitable[Any]],
                                             fields: dict[str, Any]) -> None:
    with HostileDaemon() as daemon:
        result = run_with(daemon, verb)
    (request,) = daemon.requests
    assert {k: request.get(k) for k in fields} == fields, request
    assert result is not None


def test_the_verbs_cover_every_action_and_request_of_the_protocol() -> None:
    """A verb for each of the protocol's action types and request types (reset, configure,
    snapshot and restore are tested against real sandboxes). The clean-room verdict's own
    requests (``workspace_manifest``, ``clean_room``: controller/verdict.py) have none;
    ``SandboxClient.request`` sends them."""
    actions = {a["type"] for _, _, a in GUI_VERBS}
    assert actions == set(ACTION_TYPES)
    requests = {f["type"] for _, _, f in REQUEST_VERBS} | {"configure", "reset", "workspace_manifest", "clean_room"}
    assert requests == set(REQUEST_TYPES)


def test_readings_come_back_decoded() -> None:
    """screenshot, cursor_position and zoom return the image bytes and the point themselves."""
    async def body(sb: Sandbox) -> tuple[bytes, Point, bytes]:
        return await sb.screenshot(), await sb.cursor_position(), await sb.zoom(0, 0, 10, 10)

    with HostileDaemon(_zoom_too) as daemon:
        png, cursor, zoom = run_with(daemon, body)
    assert png.startswith(b"\x89PNG") and zoom.startswith(b"\x89PNG")
    assert cursor == Point(x=1, y=2)


@pytest.mark.parametrize(("verb", "error"), [
    (lambda sb: sb.drag([(1, 1)]), InvalidActionError),
    (lambda sb: sb.wait_for(), InvalidActionError),
    (lambda sb: sb.click(1), InvalidActionError),
    (lambda sb: sb.exec([]), InvalidRequestError),
    (lambda sb: sb.read_file("a", max_bytes=0), InvalidRequestError),
    (lambda sb: sb.screenshot("gif"), InvalidRequestError),  # type: ignore[arg-type]
])
def test_bad_arguments_are_refused_before_sending(verb: Callable[[Sandbox], Awaitable[Any]],
                                                  error: type[Exception]) -> None:
    with HostileDaemon() as daemon:
        with pytest.raises(error):
            run_with(daemon, verb)
    assert daemon.requests == []


def _verbs(cls: type) -> set[str]:
    """The public verbs of ``cls`` and its bases: coroutine functions, or the facade's blocking ones."""
    return {name for base in cls.__mro__ for name, member in vars(base).items() if not name.startswith("_")
            and (inspect.iscoroutinefunction(member) or hasattr(member, "_method"))}


def test_the_sync_facade_mirrors_every_verb_with_its_docstring() -> None:
    """Every public coroutine of Sandbox (but ``open`` and ``close``, which the facade has as its own)
    is a blocking verb of SyncSandbox with the same signature and docstring."""
    mirrored = _verbs(Sandbox) - {"close"}
    assert {"click", "seed", "exec", "diff", "configure"} <= mirrored
    assert mirrored <= _verbs(SyncSandbox), mirrored - _verbs(SyncSandbox)
    for name in mirrored:
        assert getattr(SyncSandbox, name).__doc__ == getattr(Sandbox, name).__doc__, name


def test_the_sync_facade_blocks_and_returns_what_the_verb_returns() -> None:
    with HostileDaemon(_zoom_too) as daemon:
        with SyncSandbox.open(daemon.url, TOKEN, timeout_s=5) as sb:
            assert sb.configure(max_dimension=1280) == Size(width=64, height=40)
            assert sb.click(1, 2).url == "about:blank"
            assert sb.read_file("a.py").content == "x = 1\n"
            assert sb.cursor_position() == Point(x=1, y=2)
            assert sb.exec("true").exit_code == 0
            with pytest.raises(InvalidRequestError):
                sb.configure((1, 1), max_dimension=20)
            assert sb.token == TOKEN
    assert [r["type"] for r in daemon.requests] == ["configure", "act", "read_file", "act", "exec"]


@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:8765/v1/ws", "ws://"])
def test_a_url_that_is_not_a_websocket_url_is_refused_at_once(url: str) -> None:
    """`deskpod run --sandbox notaurl` retried the invalid URI until its timeout and ended
    `internal:`; the client refuses it before any attempt, whatever the timeout."""
    from deskpod.client import SandboxClient

    async def connect() -> None:
        await asyncio.wait_for(SandboxClient.connect(url, "t" * 20, timeout_s=600), 5)

    with pytest.raises(InvalidRequestError, match="not a ws:// or wss:// URL"):
        asyncio.run(connect())


def test_what_to_observe_is_given_by_keyword_or_mapping_and_the_names_import_from_deskpod() -> None:
    """``observe()`` took its options only as a positional ObserveOptions, which did not even import
    from ``deskpod``: its fields are keywords now, every verb's ``observe=`` takes the model or a
    mapping of its fields, and a bad field is refused before anything is sent."""
    from deskpod import Observation, ObserveOptions
    from deskpod import Sandbox as TopLevel

    assert TopLevel is Sandbox

    async def body(sb: Sandbox) -> list[Observation]:
        return [await sb.observe(page_text=True, screenshot=False),
                await sb.observe(ObserveOptions(page_text=True)),
                await sb.observe({"page_text": True, "format": "jpeg"}),
                await sb.click(1, 2, observe={"page_text": True}),
                await sb.navigate("http://demo.test/", observe={"screenshot": False})]

    with HostileDaemon() as daemon:
        seen = run_with(daemon, body)
    sent = [r["observe"] for r in daemon.requests]
    assert [o["page_text"] for o in sent] == [True, True, True, True, False]
    assert [o["screenshot"] for o in sent] == [False, True, True, True, False]
    assert sent[2]["format"] == "jpeg"
    assert seen[0].page_text == "hello" and seen[0].screenshot is None

    for verb in (lambda sb: sb.observe(page_txt=True), lambda sb: sb.click(1, 2, observe={"quality": 0}),
                 lambda sb: sb.observe(ObserveOptions(), page_text=True)):
        with HostileDaemon() as daemon:
            with pytest.raises(InvalidRequestError):
                run_with(daemon, verb)
        assert daemon.requests == []
