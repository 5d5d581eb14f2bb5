"""Every verb of the Python client's :class:`Sandbox` against the real hardened sandbox, each one's
effect read back from the environment (the events fixture's recorded DOM events, the workspace's
files and test runs, the demo site's login), and the same verbs through :class:`SyncSandbox`."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from PIL import Image

from deskpod_stack import Stack, page_state
from deskpod.client import Sandbox, SyncSandbox
from deskpod.errors import ActionTimeoutError, OutOfBoundsError, PathDeniedError
from deskpod.protocol import ObserveOptions, Point, Size

pytestmark = pytest.mark.integration

EVENTS = "http://demo.test/fixtures/events?tx=600&ty=100"
QUIET = ObserveOptions(screenshot=False)
STATE = ObserveOptions(screenshot=False, page_text=True)
ACCOUNT = "http://demo.test/account"

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TESTS = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
PATCH = "--- a/notes/readme.txt\n+++ b/notes/readme.txt\n@@ -1 +1 @@\n-hello\n+hello, world\n"


def project(tmp_path: Path) -> Path:
    """A two-file Python project whose one test fails (``add`` subtracts)."""
    src = tmp_path / "proj"
    src.mkdir()
    (src / "calc.py").write_text(CALC)
    (src / "test_calc.py").write_text(TEST_CALC)
    return src


async def fixture_state(sb: Sandbox) -> dict:
    return page_state((await sb.observe(STATE)).page_text)


def test_every_gui_verb_acts_on_the_real_desktop(stack: Stack) -> None:
    """configure (both forms and the screen), navigate, click, double/triple click, mouse down/move/up,
    drag, scroll both ways, type, keypress, hold_key, wait, wait_for, screenshot, cursor_position, zoom."""

    async def body() -> None:
        async with await Sandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
            assert await sb.configure(max_dimension=640) == Size(width=640, height=400)
            png = Image.open(io.BytesIO(await sb.screenshot()))
            assert (png.format, png.size) == ("PNG", (640, 400))
            assert await sb.configure((320, 200)) == Size(width=320, height=200)
            with pytest.raises(OutOfBoundsError):
                await sb.click(400, 100)
            assert await sb.configure() == Size(width=1280, height=800)

            assert (await sb.navigate(EVENTS, observe=QUIET)).url == EVENTS
            await sb.click(610, 110, observe=QUIET)
            assert (await fixture_state(sb))["clicks"].get("target") == 1
            await sb.double_click(130, 374, observe=QUIET)
            assert (await fixture_state(sb))["dblclicks"] == 1
            await sb.wait(1.0, observe=QUIET)  # past the multi-click interval: a fresh click count
            await sb.triple_click(130, 374, observe=QUIET)
            assert "Penguins waddle across icy shores." in (await fixture_state(sb))["selection"]
            await sb.drag([(200, 300), (600, 300)], observe=QUIET)
            assert 45 <= (await fixture_state(sb))["slider"] <= 55
            await sb.mouse_down(100, 100, observe=QUIET)
            await sb.move(200, 150, observe=QUIET)
            await sb.mouse_up(200, 150, observe=QUIET)
            item = (await fixture_state(sb))["item"]
            assert abs(item[0] - 180) <= 2 and abs(item[1] - 130) <= 2, item
            await sb.click(300, 440, observe=QUIET)
            await sb.type_text("penguin", observe=QUIET)
            await sb.keypress("ctrl+a", observe=QUIET)
            await sb.type_text("emperor", observe=QUIET)
            assert (await fixture_state(sb))["field"] == "emperor"
            await sb.scroll(500, 600, scroll_x=3, observe=QUIET)
            await sb.scroll(500, 600, scroll_y=2, observe=QUIET)
            state = await fixture_state(sb)
            assert state["scroll"][0] > 0 and state["wheel"]["dy"] > 0, state

            held = await sb.hold_key("shift", seconds=0.3, observe=QUIET)
            assert held.timings[0].type == "hold_key" and held.timings[0].duration_s >= 0.3
            waited = await sb.wait(0.2, observe=QUIET)
            assert waited.timings[0].duration_s >= 0.2
            assert "emperor" in ((await sb.wait_for(text_present="emperor", observe=STATE)).page_text or "")
            assert (await sb.wait_for(url_matches=r"fixtures/events", observe=QUIET)).url == EVENTS
            with pytest.raises(ActionTimeoutError):
                await sb.wait_for(text_present="no such text anywhere", timeout_s=0.5)

            jpeg = Image.open(io.BytesIO(await sb.screenshot("jpeg", quality=40, cursor=True)))
            assert (jpeg.format, jpeg.size) == ("JPEG", (1280, 800))
            assert await sb.cursor_position() == Point(x=500, y=600)
            zoomed = Image.open(io.BytesIO(await sb.zoom(0, 0, 100, 50)))
            assert zoomed.size == (100, 50)
            assert (await sb.act([{"type": "move", "x": 5, "y": 6}, {"type": "cursor_position"}],
                                 observe=QUIET)).cursor == Point(x=5, y=6)

    asyncio.run(body())


def test_every_workspace_verb_on_the_real_workspace(stack: Stack, tmp_path: Path) -> None:
    """seed a folder, list, read, run the failing test, edit, run it again (passes), write, patch,
    exec (argv and shell), diff against the seed; a path out of the workspace is refused."""

    async def body() -> None:
        async with await Sandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
            seeded = await sb.seed(project(tmp_path))
            assert seeded.files == 2 and seeded.git_head is not None
            names = {e.name for e in (await sb.list_dir()).entries}
            assert {"calc.py", "test_calc.py"} <= names
            assert (await sb.read_file("calc.py")).content == CALC
            assert (await sb.read_file("calc.py", start_line=2, max_lines=1)).content == "    return a - b\n"
            failing = await sb.run_tests(TESTS)
            assert not failing.passed and "1 failed" in failing.tail
            await sb.edit_file("calc.py", "a - b", "a + b")
            assert (await sb.run_tests(TESTS)).passed
            written = await sb.write_file("notes/readme.txt", "hello\n")
            assert written.created and written.path == "notes/readme.txt"
            assert (await sb.apply_patch(PATCH)).files == ["notes/readme.txt"]
            cat = await sb.exec(["cat", "notes/readme.txt"])
            assert (cat.exit_code, cat.stdout) == (0, "hello, world\n")
            shell = await sb.exec("echo $((6 * 7)) | tr -d '\\n'; exit 3")
            assert (shell.exit_code, shell.stdout) == (3, "42")
            diff = await sb.diff()
            changed = {f.path: f.status for f in diff.files}
            assert changed == {"calc.py": "modified", "notes/readme.txt": "added"}, changed
            assert "+    return a + b" in diff.diff
            with pytest.raises(PathDeniedError):
                await sb.read_file("../../etc/passwd")

    asyncio.run(body())


def test_snapshot_reset_and_restore_through_the_handle(stack: Stack) -> None:
    """Log in, snapshot, reset (new token, logged out), restore (logged in again)."""

    async def status(sb: Sandbox) -> str:
        text = (await sb.navigate(ACCOUNT, observe=STATE)).page_text or ""
        return "logged in as alice" if "logged in as alice" in text else "not logged in"

    async def body() -> None:
        async with await Sandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
            await sb.navigate("http://demo.test/login?user=alice", observe=QUIET)
            archive = await sb.snapshot()
            first = sb.token
            fresh = await sb.reset(ACCOUNT)
            stack.token = sb.token
            assert sb.token != first and fresh.url == ACCOUNT
            assert await status(sb) == "not logged in"
            restored = await sb.restore(archive, ACCOUNT)
            assert restored.url == ACCOUNT
            assert await status(sb) == "logged in as alice"

    asyncio.run(body())


def test_the_sync_facade_drives_the_same_verbs(stack: Stack, tmp_path: Path) -> None:
    """A plain script: GUI and workspace verbs through SyncSandbox, blocking, with the same results."""
    with SyncSandbox.open(stack.ws_url, stack.token, timeout_s=30) as sb:
        assert sb.configure(max_dimension=640) == Size(width=640, height=400)
        assert sb.configure() == Size(width=1280, height=800)
        sb.navigate(EVENTS, observe=QUIET)
        sb.double_click(130, 374, observe=QUIET)
        sb.drag([(200, 300), (600, 300)], observe=QUIET)
        sb.click(300, 440, observe=QUIET)
        sb.type_text("sync", observe=QUIET)
        sb.scroll(500, 600, scroll_y=1, observe=QUIET)
        state = page_state(sb.observe(STATE).page_text)
        assert state["dblclicks"] == 1 and state["field"] == "sync" and state["wheel"]["dy"] > 0, state
        assert 45 <= state["slider"] <= 55, state
        assert sb.cursor_position() == Point(x=500, y=600)
        assert sb.screenshot().startswith(b"\x89PNG")
        assert sb.seed(project(tmp_path)).files == 2
        assert not sb.run_tests(TESTS).passed
        sb.edit_file("calc.py", "a - b", "a + b")
        assert sb.run_tests(TESTS).passed
        assert sb.exec(["python3", "-c", "import calc; print(calc.add(2, 3))"]).stdout == "5\n"
        assert [f.path for f in sb.diff().files] == ["calc.py"]
