"""The controller trusts nothing the sandbox says.

``deskpod run`` and ``deskpod code`` (the real CLI functions) are driven against a
hostile daemon (:mod:`hostile_daemon`: a real websocket server speaking the
protocol) that sends traversal names, oversized fields, malformed images, wrong
hashes, non-JSON, replies for other requests, or nothing. Each run must end with
the typed ``bad_reply`` error (or, where the hostile string is harmless data, with
some other refusal), write nothing outside its ``--audit-dir``, and finish in
bounded time. On 55dbe26 the traversal hash made the controller write
``<outside>/x.png``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import SILENT, HostileDaemon, Reply, png, screenshot

import deskpod.client.wire
from deskpod import cli

pytestmark = pytest.mark.timeout(120)

TASKS = Path(deskpod.__file__).resolve().parent / "tasks"
RUN_BOUND_S = 30.0
"""No hostile run may take longer than this (the no-reply cases wait REPLY_GRACE_S,
set to 1 s here, beyond their request's timeout; the silent hello HELLO_TIMEOUT_S, 1 s here)."""


@functools.cache
def _bomb(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` × ``height`` pixels (1 bit each; a few kB
    compressed, gigabytes once decoded as RGB). Made once (over a second of encoding)."""
    return png(width, height, mode="1")


def _task(tmp_path: Path) -> Path:
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: hostile\nstart_url: http://demo.test/\nallowed_domains: [demo.test]\n"
        "limits: {max_steps: 3, max_wall_time_s: 60, action_timeout_s: 1, max_errors: 2}\n"
        "steps:\n  - actions: [{type: click, x: 10, y: 10}]\n"
        "success: {url_matches: '^http://demo\\.test/done$', timeout_s: 1}\n",
        encoding="utf-8",
    )
    return task


def _all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           tamper: Callable[[int, dict[str, Any], dict[str, Any]], Reply], command: str) -> str:
    """Run ``deskpod <command>`` against the hostile daemon; return its output after
    checking the run failed, in time, and wrote only inside its audit folder."""
    monkeypatch.setattr(deskpod.client.wire, "REPLY_GRACE_S", 1.0)
    monkeypatch.setattr(deskpod.client.wire, "REPLY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(deskpod.client.wire, "HELLO_TIMEOUT_S", 1.0)
    monkeypatch.setenv("DESKPOD_TOKEN", "t" * 43)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    audit = tmp_path / "audit"
    (tmp_path / "outside").mkdir()  # where the traversal names point: it exists, so a write would succeed
    task = _task(tmp_path) if command == "run" else TASKS / "code_mini_billing.yaml"
    before = _all_files(tmp_path)
    with HostileDaemon(tamper) as daemon:
        started = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            cli.main([command, str(task), "--sandbox", daemon.url, "--audit-dir", str(audit), "--confirm", "deny",
                      "--connect-timeout", "5"])
        elapsed = time.monotonic() - started
    out = capsys.readouterr().out
    assert exited.value.code == 1, out
    assert elapsed < RUN_BOUND_S, f"the run took {elapsed:.1f} s"
    written = _all_files(tmp_path) - before
    outside = [p for p in written if audit not in p.parents]
    assert not outside, f"written outside the audit folder: {outside}"
    assert not any((tmp_path / "outside").iterdir())
    return out


def _on(n: int, change: Callable[[dict[str, Any]], Reply]) -> Callable[[int, dict[str, Any], dict[str, Any]], Reply]:
    """A tamper function that rewrites the ``n``-th reply with ``change``."""
    def tamper(i: int, request: dict[str, Any], reply: dict[str, Any]) -> Reply:
        return change(reply) if i == n else reply
    return tamper


def _shot(**fields: Any) -> Callable[[dict[str, Any]], Reply]:
    def change(reply: dict[str, Any]) -> Reply:
        reply["observation"]["screenshot"] = screenshot(**fields)
        return reply
    return change


def _obs(**fields: Any) -> Callable[[dict[str, Any]], Reply]:
    def change(reply: dict[str, Any]) -> Reply:
        reply["observation"].update(fields)
        return reply
    return change


def _traversal(tmp_path: Path) -> str:
    return "../" * 12 + str(tmp_path / "outside" / "x").lstrip("/")


BAD_PNG = b"this is not a PNG"
TINY = png(32, 20)


@pytest.mark.parametrize("case", [
    "sha256_traversal", "format_traversal", "id_traversal", "wrong_sha256", "not_a_png", "png_of_another_size",
    "bomb_as_claimed", "bomb_in_a_small_claim", "jpeg_claimed_png", "data_not_base64", "title_10mb",
    "tabs_100k", "url_over_cap", "page_text_over_request", "surrogate_title", "unknown_event", "not_json",
    "binary_not_utf8", "reply_for_another_id", "error_for_another_id", "no_reply", "hello_not_json",
    "hello_silent", "wrong_kind", "snapshot_not_asked", "ref_point_not_asked",
])
def test_deskpod_run_stops_with_bad_reply_and_writes_only_in_its_audit_dir(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = _bomb(16_000, 16_000)
    cases: dict[str, Callable[[int, dict[str, Any], dict[str, Any]], Reply]] = {
        # 1 is the navigate to the start URL, whose screenshot the controller stores by hash.
        "sha256_traversal": _on(1, _shot(sha256=_traversal(tmp_path))),
        "format_traversal": _on(1, _shot(format="../" * 8 + "x")),
        "id_traversal": _on(1, _shot(id=_traversal(tmp_path))),
        "wrong_sha256": _on(1, _shot(sha256="0" * 64)),
        "not_a_png": _on(1, _shot(data=BAD_PNG)),
        "png_of_another_size": _on(1, _shot(data=TINY)),
        "bomb_as_claimed": _on(1, _shot(data=bomb, width=16_000, height=16_000)),
        "bomb_in_a_small_claim": _on(1, _shot(data=bomb)),
        "jpeg_claimed_png": _on(1, _shot(data=_jpeg())),
        "data_not_base64": _on(1, lambda r: (r["observation"]["screenshot"].update(data="%%%/../x"), r)[1]),
        "title_10mb": _on(1, _obs(title="T" * 10_000_000)),
        "tabs_100k": _on(1, _obs(tabs=[{"id": "t", "url": "http://demo.test/", "title": "x", "active": False}]
                                 * 100_000)),
        "url_over_cap": _on(1, _obs(url="http://demo.test/" + "a" * 20_000)),
        "page_text_over_request": _on(1, _obs(page_text="p" * 30_000)),
        "surrogate_title": _on(1, _obs(title="\ud800" + _traversal(tmp_path))),
        "unknown_event": _on(1, _obs(events=["../../x"])),
        "not_json": _on(1, lambda r: "{not json"),
        "binary_not_utf8": _on(1, lambda r: b"\xff\xfe\xfd{"),
        "reply_for_another_id": _on(1, lambda r: r | {"id": "r-999"}),
        "error_for_another_id": _on(1, lambda r: {"type": "error", "id": "r-999",
                                                  "error": {"code": "internal", "message": "x"}}),
        "no_reply": _on(2, lambda r: SILENT),  # 2: the act that looks under the click (1 s timeout)
        "hello_not_json": _on(0, lambda r: "hello?"),
        "hello_silent": _on(0, lambda r: SILENT),
        "wrong_kind": _on(1, lambda r: {"type": "result", "id": r["id"], "model_size": {"width": 1, "height": 1}}),
        # A snapshot with refs the controller never asked for (its refs would steer an agent).
        "snapshot_not_asked": _on(1, _obs(snapshot='- button "Pay now" [ref=e1]')),
        "ref_point_not_asked": _on(1, _obs(element_ref_point={"x": 1, "y": 1})),
    }
    out = _drive(tmp_path, monkeypatch, capsys, cases[case], "run")
    if case == "hello_silent":
        assert "sent no hello" in out
    else:
        assert "bad_reply: " in out, out


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 40)).save(buf, format="JPEG")
    return buf.getvalue()


def test_traversal_names_in_every_free_text_field_stay_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Strings that are only data (title, tabs, dialog, element names) may hold anything
    within their caps; none of them ever names a file."""
    evil = _traversal(tmp_path)

    def tamper(n: int, request: dict[str, Any], reply: dict[str, Any]) -> Reply:
        obs = reply.get("observation")
        if obs is not None:
            obs.update(title=evil, page_text=evil[:20] if obs.get("page_text") else None,
                       tabs=[{"id": evil[:128], "url": obs["url"], "title": evil, "active": True}],
                       dialog={"type": evil, "message": evil},
                       focused={"tag": evil, "role": evil, "name": evil, "input_type": evil},
                       element_at={"tag": evil, "role": evil, "name": evil, "text": evil, "href": evil,
                                   "form_action": evil})
        return reply

    out = _drive(tmp_path, monkeypatch, capsys, tamper, "run")
    assert "CANCELLED" in out, "the dialog raised the click to L2, and --confirm deny refused it"
    scenes = list((tmp_path / "audit" / "scenes").iterdir())
    assert len(scenes) == 1 and {p.name for p in scenes[0].iterdir()} == {"scene.json", "screenshot.png"}
    shots = list((tmp_path / "audit" / "screenshots").iterdir())
    assert all(p.name == f"{hashlib.sha256(p.read_bytes()).hexdigest()}.png" for p in shots)


def _workspace(**fields: Any) -> Callable[[dict[str, Any]], Reply]:
    def change(reply: dict[str, Any]) -> Reply:
        reply["workspace"].update(fields)
        return reply
    return change


@pytest.mark.parametrize("case", [
    "git_head_traversal", "entry_name_10mb", "entries_over_request", "path_over_cap", "content_over_request",
    "wrong_output_kind", "manifest_path_traversal", "manifest_content_unasked", "reply_for_another_id", "not_json",
    "no_reply", "surrogate_in_path", "test_tail_over_line_cap",
])
def test_deskpod_code_stops_with_bad_reply_and_writes_only_in_its_audit_dir(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = _traversal(tmp_path)
    # Requests of the scripted mini-billing agent: 1 seed_workspace, 2 clean_room (the seed's tests collected),
    # 3 list_dir, 4 read_file, ...
    cases: dict[str, Callable[[int, dict[str, Any], dict[str, Any]], Reply]] = {
        "git_head_traversal": _on(1, _workspace(git_head=evil)),
        "entry_name_10mb": _on(3, _workspace(entries=[{"name": "n" * 10_000_000, "kind": "file", "size": 1}])),
        "entries_over_request": _on(3, _workspace(entries=[{"name": "f", "kind": "file", "size": 1}] * 1001)),
        "path_over_cap": _on(3, _workspace(path="p/" * 5000)),
        "content_over_request": _on(4, _workspace(content="c" * 300_000)),
        "wrong_output_kind": _on(4, _workspace(type="patch_applied", files=[evil])),
        "manifest_path_traversal": lambda n, req, r: (
            _workspace(entries=[{"path": evil, "kind": "file", "size": 1}])(r)
            if req.get("type") == "workspace_manifest" else r),
        "manifest_content_unasked": lambda n, req, r: (
            _workspace(entries=[{"path": "billing.py", "kind": "file", "size": 1, "content": "eA=="}])(r)
            if req.get("type") == "workspace_manifest" else r),
        "reply_for_another_id": _on(3, lambda r: r | {"id": "r-1"}),
        "not_json": _on(3, lambda r: "]"),
        "no_reply": _on(3, lambda r: SILENT),
        "surrogate_in_path": _on(4, _workspace(path="\udcff" + evil)),
        "test_tail_over_line_cap": lambda n, req, r: (
            _workspace(tail="x\n" * 1000)(r) if req.get("type") == "run_tests" else r),
    }
    out = _drive(tmp_path, monkeypatch, capsys, cases[case], "code")
    assert "bad_reply: " in out, out


def test_a_screenshot_passes_the_checks_only_when_it_is_what_it_claims() -> None:
    """The unit under the runs above: a good PNG passes and its bytes come back."""
    from deskpod.protocol import Screenshot
    from deskpod.client.untrusted import screenshot_bytes

    good = png()
    assert screenshot_bytes(Screenshot.model_validate(screenshot(good))) == good
    shot = screenshot(good)
    assert base64.b64decode(shot["data"]) == good


@pytest.mark.parametrize("where", ["error_message", "url", "extra_key"])
def test_no_escape_sequence_from_the_sandbox_reaches_the_terminal(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``deskpod run`` prints the reason, which may quote the sandbox: a daemon's ESC
    sequences (clear screen, set the window title) are shown escaped, never sent raw."""
    escape = "\x1b[2J\x1b]0;owned\x07"
    changes: dict[str, Callable[[dict[str, Any]], Reply]] = {
        "error_message": lambda r: {"type": "error", "id": r["id"], "error": {"code": "internal", "message": escape}},
        "url": _obs(url="http://demo.test/" + escape),
        "extra_key": _obs(**{escape: 1}),
    }
    out = _drive(tmp_path, monkeypatch, capsys, _on(1, changes[where]), "run")
    assert "\x1b" not in out and "\x07" not in out, out
    if where != "url":  # (a URL with a control character is refused without being quoted)
        assert "\\x1b" in out, out
