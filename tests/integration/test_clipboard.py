"""The clipboard and the file chooser on a real sandbox: the X ``CLIPBOARD`` selection read and
written by the agent's actions, masked like every text, emptied by a reset; a file chooser
that Escape closes; a read judged ``L2`` by the controller.

The fixture (``images/demo/fixtures/clipboard.html``) has a copy button (it copies the code
field's value with ``document.execCommand("copy")``), a paste target, a drop zone and a file
input, and shows what reached it on its ``STATE`` line.
"""

from __future__ import annotations

from pathlib import Path

from deskpod.client import SandboxClient
from deskpod.protocol import ErrorReply, ObserveOptions, Point

from deskpod_stack import Stack, ok, page_state, send, with_client
from test_enforcement import Human, approve, play, task_file
from test_reset import do_reset

import pytest

pytestmark = pytest.mark.integration

FIXTURE = "http://demo.test/fixtures/clipboard"
CODE = "clip-secret-4242-abcd"
"""The fixture's code field's value, which its copy button copies."""
QUIET = ObserveOptions(screenshot=False)
TEXT = ObserveOptions(screenshot=False, page_text=True)


async def point_of(client: SandboxClient, *labels: str) -> tuple[int, int]:
    """A model-space point on the fixture's element named or showing one of ``labels`` (scanning down x=640)."""
    for y in range(40, 800, 20):
        obs = await client.act([], ObserveOptions(screenshot=False, element_at=Point(x=640, y=y)))
        el = obs.element_at
        if el is not None and {el.name, el.text} & set(labels):
            return 640, y + 15
    raise AssertionError(f"nothing named {labels} on the fixture")


async def read(client: SandboxClient, mask: list[str] | None = None) -> str | None:
    obs = await client.act([{"type": "clipboard_read"}], QUIET, mask=mask or ())
    return obs.clipboard


def test_the_clipboard_round_trips_between_agent_and_page_is_masked_and_a_reset_empties_it(stack: Stack) -> None:
    """An agent's write is what a paste on the page gets; a page's copy is what the agent reads;
    a secret the controller masks never comes back through a read; a reset empties it."""
    written = "from the agent ✓ 中文"

    async def body(client: SandboxClient) -> dict[str, object]:
        await client.navigate(FIXTURE, QUIET)
        paste = await point_of(client, "paste here")
        copy = await point_of(client, "copy the code")
        await client.act([{"type": "clipboard_write", "text": written}, {"type": "click", "x": paste[0], "y": paste[1]},
                          {"type": "keypress", "keys": ["ctrl", "v"]}], QUIET)
        pasted = page_state((await client.act([{"type": "wait", "seconds": 0.2}], TEXT)).page_text)["pasted"]
        agent_read = await read(client)
        await client.act([{"type": "click", "x": copy[0], "y": copy[1]}], QUIET)
        page_copy = await read(client)
        masked = await read(client, [CODE])
        await do_reset(stack, client, None)  # rotates the token: this connection ends
        return {"pasted": pasted, "agent_read": agent_read, "page_copy": page_copy, "masked": masked}

    got = with_client(stack, body)
    got["after_reset"] = with_client(stack, read)
    assert got["pasted"] == written and got["agent_read"] == written, got
    assert got["page_copy"] == CODE, got
    assert CODE not in str(got["masked"]) and got["masked"], got
    assert got["after_reset"] == "", got


def test_a_dropped_workspace_file_arrives_with_its_bytes_and_other_paths_are_refused(stack: Stack) -> None:
    content = "dropped from the workspace ✓\n"

    async def body(client: SandboxClient) -> tuple[dict, object, object]:
        await ok(client, type="write_file", path="drops/note.txt", content=content, create_dirs=True)
        await ok(client, type="exec", argv=["ln", "-sf", "/etc/passwd", "drops/passwd"])
        await client.navigate(FIXTURE, QUIET)
        x, y = await point_of(client, "drop zone", "drop files here")
        outside = await send(client, type="act",
                             actions=[{"type": "drop_files", "x": x, "y": y, "paths": ["../../etc/passwd"]}])
        link = await send(client, type="act", actions=[{"type": "drop_files", "x": x, "y": y, "paths": ["drops/passwd"]}])
        obs = await client.act([{"type": "drop_files", "x": x, "y": y, "paths": ["drops/note.txt"]},
                                {"type": "wait", "seconds": 0.3}], TEXT)
        return page_state(obs.page_text), outside, link

    state, outside, link = with_client(stack, body)
    assert state["dropped"] == [{"name": "note.txt", "size": len(content.encode()), "text": content}], state
    for refused in (outside, link):
        assert isinstance(refused, ErrorReply) and refused.error.detail.get("reason") == "not_a_workspace_file", refused


def test_escape_closes_the_file_chooser_and_a_bad_clipboard_write_is_refused(stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[object, object, object]:
        await client.navigate(FIXTURE, QUIET)
        x, y = await point_of(client, "file input")
        opened = await client.act([{"type": "click", "x": x, "y": y}, {"type": "wait", "seconds": 0.3}], QUIET)
        closed = await client.act([{"type": "keypress", "keys": ["Escape"]}], QUIET)
        bad = await send(client, type="act", actions=[{"type": "clipboard_write", "text": "x" * 20_000}])
        return opened.file_chooser, closed.file_chooser, bad

    opened, closed, bad = with_client(stack, body)
    assert opened is not None and closed is None, (opened, closed)
    assert isinstance(bad, ErrorReply) and bad.error.code == "invalid_action", bad


def test_a_clipboard_read_is_l2_and_a_denying_human_stops_it(stack: Stack, tmp_path: Path) -> None:
    human = Human()
    path = task_file(tmp_path, FIXTURE, [[{"type": "clipboard_write", "text": "harmless"}],
                                         [{"type": "clipboard_read"}]], {"page_text_contains": "never"})
    result = play(stack, tmp_path, path, human)
    assert result.status == "cancelled" and "confirmation denied" in result.reason, result.reason
    [request] = human.requests
    assert request.level == "L2" and "clipboard" in " ".join(request.reasons), request.reasons
    allowed = Human(on_confirm=approve)
    path = task_file(tmp_path, FIXTURE, [[{"type": "clipboard_read"}]], {"page_text_contains": "STATE"},
                     allow_clipboard_read=True)
    result = play(stack, tmp_path, path, allowed)
    assert result.status == "succeeded" and not allowed.requests, (result.reason, allowed.requests)


def test_a_typed_workspace_path_and_enter_answer_the_file_chooser_as_an_upload(stack: Stack, tmp_path: Path) -> None:
    """The vendor formats' way: with the chooser reported, the path typed and Enter become its
    ``set_files`` answer, judged an upload (nothing typed reaches the page or its address bar)."""

    async def prepare(client: SandboxClient) -> tuple[int, int]:
        await ok(client, type="write_file", path="upload/typed.txt", content="typed\n", create_dirs=True)
        await client.navigate(FIXTURE, QUIET)
        return await point_of(client, "file input")

    x, y = with_client(stack, prepare)
    human = Human(on_confirm=approve)
    path = task_file(tmp_path, FIXTURE, [[{"type": "click", "x": x, "y": y}, {"type": "wait", "seconds": 0.5}],
                                         [{"type": "type", "text": "/workspace/upload/typed.txt"}],
                                         [{"type": "keypress", "keys": ["Return"]}]],
                     {"page_text_contains": '"chosen":["typed.txt"]'})
    result = play(stack, tmp_path, path, human)
    assert result.status == "succeeded", result.reason
    assert any(r.level == "L2" and "uploads workspace files" in " ".join(r.reasons) for r in human.requests), \
        [r.reasons for r in human.requests]
