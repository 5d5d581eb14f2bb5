"""The daemon's side of the desktop applications' zone (``open_app``): the action's checks, its
risk level, the executor's dispatch, and :class:`~deskpod.agentd.apps_client.AppsClient` against
a scripted applications runner on a loopback port, hostile replies included (the zone is
untrusted). The real zone: ``tests/integration/test_desktop_zone.py``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from deskpod.agentd.apps_client import MAX_OPEN_APPS, AppsClient
from deskpod.agentd.apps_runner import AppsConfig, AppsRunner
from deskpod.agentd.apps_wire import AppsOpened, AppsOpenRequest, parse_apps_reply, parse_apps_request
from deskpod.agentd.batch import Batch
from deskpod.agentd.runner import Runner, RunnerConfig
from deskpod.agentd.runner_wire import (
    FRAME_HEADER,
    RunnerError,
    RunnerPingRequest,
    RunnerPong,
    RunnerResetDone,
    RunnerResetRequest,
    X11Grant,
    encode_frame,
    parse_runner_reply,
)
from deskpod.controller.policy.risk import ActionContext, classify_action
from deskpod.protocol import AgentWindow
from deskpod.errors import DeskpodError, ExecutionError, InvalidActionError, WorkspaceUnavailableError
from deskpod.protocol import APPS, CoordinateMap, ErrorBody, OpenApp, Size, parse_action

GRANT = X11Grant(display="sandbox:99", cookie_hex="ab" * 16)


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", "a\nb", "x" * 256])
def test_open_app_takes_only_a_file_inside_the_workspace(path: str) -> None:
    with pytest.raises(InvalidActionError):
        parse_action({"type": "open_app", "app": "editor", "path": path})


def test_open_app_names_an_application_never_a_command() -> None:
    with pytest.raises(InvalidActionError):
        parse_action({"type": "open_app", "app": "bash -c id"})
    assert parse_action({"type": "open_app", "app": "terminal"}) == OpenApp(type="open_app", app="terminal")


def test_opening_an_application_is_l1_and_named() -> None:
    risk = classify_action(OpenApp(type="open_app", app="editor", path="notes.txt"), ActionContext())
    assert risk.level == "L1" and risk.target == "editor notes.txt"


def test_a_batch_without_an_application_starter_refuses_open_app() -> None:
    batch = Batch([], CoordinateMap(Size(width=1280, height=800)), threading.Event(), None)  # type: ignore[arg-type]
    with pytest.raises(ExecutionError, match="open applications"):
        batch.handler(OpenApp(type="open_app", app="terminal"))


class Grants:
    """A stand-in X gate: counts the grants made and the ones still live."""

    def __init__(self) -> None:
        self.live = 0
        self.made: list[str] = []

    @contextlib.asynccontextmanager
    async def __call__(self, lifetime_s: float, app: str) -> AsyncIterator[X11Grant]:
        self.made.append(app)
        self.live += 1
        try:
            yield GRANT
        finally:
            self.live -= 1


async def _runner(answer: Callable[[dict[str, Any]], bytes]) -> tuple[asyncio.Server, str, list[dict[str, Any]]]:
    """A scripted applications runner: records each request, answers ``answer(request)``'s raw frame."""
    seen: list[dict[str, Any]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (length,) = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
        payload = await reader.readexactly(length)
        parse_apps_request(payload)
        seen.append(json.loads(payload))
        writer.write(answer(seen[-1]))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


def _frame(raw: bytes) -> bytes:
    return FRAME_HEADER.pack(len(raw)) + raw


def test_each_application_gets_its_own_grant_held_until_the_reset_revokes_them() -> None:
    async def main() -> tuple[list[int], int, int, list[dict[str, Any]], RunnerResetDone | None, list[str]]:
        def answer(request: dict[str, Any]) -> bytes:
            if request["type"] == "open":
                return encode_frame(AppsOpened(pid=40 + len(seen)))
            return encode_frame(RunnerResetDone(killed=3, duration_s=0.1))

        server, address, seen = await _runner(answer)
        grants = Grants()
        client = AppsClient(address, grants)
        async with server:
            pids = [await client.open(OpenApp(type="open_app", app="terminal")),
                    await client.open(OpenApp(type="open_app", app="editor", path="a.txt"))]
            live = grants.live
            done = await client.reset()
        return pids, live, grants.live, seen, done, grants.made

    pids, live_before, live_after, seen, done, made = asyncio.run(main())
    assert pids == [41, 42] and live_before == 2 and live_after == 0
    assert made == ["terminal", "editor"]  # each grant names its application: its windows' source
    assert seen[1]["action"] == {"type": "open_app", "app": "editor", "path": "a.txt"}
    assert seen[1]["x11"] == {"display": "sandbox:99", "cookie_hex": "ab" * 16}
    assert seen[2] == {"type": "reset"} and done is not None and done.killed == 3


@pytest.mark.parametrize("raw", [b"{not json", json.dumps({"type": "opened", "pid": -1}).encode(),
                                 json.dumps({"type": "reset_done", "killed": 0, "duration_s": 0}).encode(),
                                 json.dumps({"type": "opened", "pid": 7, "extra": "x"}).encode()])
def test_a_hostile_reply_is_a_typed_error_and_its_grant_is_not_kept(raw: bytes) -> None:
    async def main() -> tuple[WorkspaceUnavailableError, int]:
        server, address, _ = await _runner(lambda _: _frame(raw))
        grants = Grants()
        async with server:
            with pytest.raises(WorkspaceUnavailableError) as caught:
                await AppsClient(address, grants).open(OpenApp(type="open_app", app="terminal"))
        return caught.value, grants.live

    error, live = asyncio.run(main())
    assert error.detail["reason"] == "bad_reply" and live == 0


def test_no_zone_is_no_desktop_and_a_reset_has_nothing_to_clear() -> None:
    async def main() -> tuple[list[str], RunnerResetDone | None, RunnerResetDone | None]:
        reasons = []
        for address in (None, "127.0.0.1:1"):
            with pytest.raises(ExecutionError) as caught:
                await AppsClient(address, Grants()).open(OpenApp(type="open_app", app="terminal"))
            reasons.append(caught.value.detail["reason"])
        return reasons, await AppsClient(None, Grants()).reset(), await AppsClient("127.0.0.1:1", Grants()).reset()

    reasons, none, unreachable = asyncio.run(main())
    assert reasons == ["no_desktop", "no_desktop"] and none is None and unreachable is None


def test_a_reset_asks_the_zone_only_after_an_application_was_asked_for() -> None:
    """On the browser-only compose stack the zone's name resolves only after the resolver's
    timeout: a reset that asked anyway waited 5 s every time (``python -m bench desktop``)."""

    async def main() -> tuple[int, int]:
        server, address, seen = await _runner(lambda _: encode_frame(RunnerResetDone(killed=0, duration_s=0)))
        async with server:
            client = AppsClient(address, Grants())
            await client.reset()
            asked_before = len(seen)
            with contextlib.suppress(WorkspaceUnavailableError):  # the runner answers a reset to the open
                await client.open(OpenApp(type="open_app", app="terminal"))
            await client.reset()
            await client.reset()
        return asked_before, len(seen)

    asked_before, asked = asyncio.run(main())
    assert asked_before == 0 and asked == 2  # the open, then one reset; the second had nothing to clear


TERMINAL = AgentWindow(app="XTerm", title="Terminal", box=[0, 0, 500, 300], source="terminal")
EDITOR = AgentWindow(app="Mousepad", title="notes.txt", box=[0, 0, 500, 300], source="editor")
COMMAND = AgentWindow(app="XTerm", title="Terminal", box=[0, 0, 500, 300])  # a display: true command's window


@pytest.mark.parametrize(("action", "window", "level"), [
    ({"type": "click", "x": 10, "y": 10}, EDITOR, "L1"),
    ({"type": "click", "x": 10, "y": 10}, COMMAND, "L2"),
    ({"type": "type", "text": "final version"}, EDITOR, "L1"),
    ({"type": "type", "text": "ls -l"}, TERMINAL, "L1"),
    ({"type": "type", "text": "rm -rf /workspace/*\n"}, TERMINAL, "L2"),
    ({"type": "keypress", "keys": ["Return"]}, TERMINAL, "L2"),
    ({"type": "keypress", "keys": ["Return"]}, EDITOR, "L1"),
    ({"type": "keypress", "keys": ["ctrl", "s"]}, EDITOR, "L1"),
    ({"type": "type", "text": "4111 1111 1111 1111"}, EDITOR, "L2"),
    ({"type": "type", "text": "hello"}, COMMAND, "L2"),
])
def test_input_to_a_desktop_application_is_judged_by_the_application_the_daemon_names(
        action: dict[str, Any], window: AgentWindow, level: str) -> None:
    """A desktop application's window (its source the daemon's X gate gives, not the program's
    own words) takes clicks, typing and keys at ``L1``, but Enter in the terminal runs what was
    typed there (``L2``); a command's window (``display: true``) stays ``L2`` as before."""
    pointer = action["type"] == "click"
    context = ActionContext(window=window if pointer else None, focus_window=None if pointer else window)
    risk = classify_action(parse_action(action), context)
    assert risk.level == level, risk
    owner = f"desktop application {window.source!r}" if window.source != "command" else "agent's program"
    assert owner in risk.target, risk.target


def test_applications_between_two_resets_are_capped_and_a_reset_frees_their_grants() -> None:
    """Each ``open_app`` holds a display grant (an X cookie and the daemon's trusted X connection
    that made it) until the reset: on main an agent could open applications until the X server
    had no client left for the daemon (Xvfb's limit, 256 clients)."""

    async def main() -> tuple[list[str | None], int, int, int]:
        def answer(request: dict[str, Any]) -> bytes:
            if request["type"] == "open":
                return encode_frame(AppsOpened(pid=len(seen) + 1))
            return encode_frame(RunnerResetDone(killed=0, duration_s=0.1))

        server, address, seen = await _runner(answer)
        grants = Grants()
        client = AppsClient(address, grants)
        reasons: list[str | None] = []
        async with server:
            for _ in range(MAX_OPEN_APPS + 1):
                try:
                    await client.open(OpenApp(type="open_app", app="terminal"))
                    reasons.append(None)
                except ExecutionError as exc:
                    reasons.append(exc.detail.get("reason"))
            live = grants.live
            await client.reset()
            await client.open(OpenApp(type="open_app", app="editor"))
        return reasons, live, grants.live, len([r for r in seen if r["type"] == "open"])

    reasons, live, live_after_reset, opens = asyncio.run(main())
    assert reasons == [None] * MAX_OPEN_APPS + ["too_many_apps"]
    assert live == MAX_OPEN_APPS and live_after_reset == 1 and opens == MAX_OPEN_APPS + 1


@pytest.mark.parametrize(("client", "answered"), [("192.0.2.7", False), ("127.0.0.1", True), (None, True)])
def test_the_applications_runner_answers_agentds_address_alone(client: str | None, answered: bool) -> None:
    """The runner listens on the sandbox network, where the workspace's commands and the zone's own
    applications could otherwise start an application (no judgement, no audit record) or reset the
    zone: with ``DESKPOD_APPS_CLIENT`` it closes any connection from another address unread.
    Here agentd's address is a documentation address (``192.0.2.7``) and the peer is loopback."""

    async def main() -> bytes:
        runner = AppsRunner(AppsConfig(client=client), is_init=False)
        server = await asyncio.start_server(runner.serve_connection, "127.0.0.1", 0)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(encode_frame(RunnerPingRequest()))
            await writer.drain()
            try:
                reply = await asyncio.wait_for(reader.read(), 10)
            except ConnectionResetError:  # closed with the request unread
                reply = b""
            writer.close()
        return reply

    reply = asyncio.run(main())
    if answered:
        assert isinstance(parse_apps_reply(reply[FRAME_HEADER.size:]), RunnerPong)
    else:
        assert reply == b""


def _ask_workspace_runner(client: str | None, request: Any) -> Any:
    """``request`` sent to a workspace runner whose agentd is ``client``, from its loopback."""

    async def main() -> bytes:
        runner = Runner(RunnerConfig(client=client), is_init=False)
        server = await asyncio.start_server(runner.serve_connection, "127.0.0.1", 0)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(encode_frame(request))
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(), 10)
            writer.close()
        return reply

    return parse_runner_reply(asyncio.run(main())[FRAME_HEADER.size:])


def test_the_workspace_runner_answers_its_loopback_a_ping_and_nothing_else() -> None:
    """The desktop zone's terminal reached the workspace runner on the sandbox network and could
    ask it to run a command or reset the workspace (it answered any address). With
    ``DESKPOD_RUNNER_CLIENT`` it answers agentd's address alone (the zone's probe in
    ``test_desktop_zone.py`` finds it closed); its own loopback (the health check, and the
    agent's commands in its container) gets a ping answered and nothing more."""
    assert isinstance(_ask_workspace_runner("192.0.2.7", RunnerPingRequest()), RunnerPong)
    refused = _ask_workspace_runner("192.0.2.7", RunnerResetRequest())
    assert isinstance(refused, RunnerError) and refused.error.code == "unauthorized", refused
    assert refused.error.detail == {"reason": "not_agentd"}


@pytest.mark.parametrize(("app", "last"), [("terminal", "Terminal"), *((app, "/workspace/notes.txt") for app in APPS
                                                                        if app != "terminal")])
def test_the_terminal_is_never_given_the_workspace_file_the_other_applications_open_it(
        tmp_path: Any, app: str, last: str) -> None:
    """xterm runs a trailing argument as its program: on main ``open_app`` of the terminal with the
    path of a symlink the agent put in ``/workspace`` (``noexec``) started the program it named
    (``link -> /usr/bin/top`` ran top). The terminal gets no path; every other application opens it."""
    started: list[list[str]] = []

    class Recording(AppsRunner):
        def _spawn(self, argv: list[str], env: dict[str, str]) -> Any:
            started.append(argv)
            return type("Started", (), {"pid": 7, "poll": lambda self: None})()

    runner = Recording(AppsConfig(workspace=Path("/workspace"), home=tmp_path, state_dir=tmp_path / "state"),
                       is_init=False)
    runner._bus = runner._spawn([], {})  # a bus already running
    reply = asyncio.run(runner.open(AppsOpenRequest(action=OpenApp(type="open_app", app=app, path="notes.txt"),
                                                    x11=GRANT)))
    assert isinstance(reply, AppsOpened) and started[-1][-1] == last, started


def test_after_a_failed_reset_the_next_one_still_clears_the_zone() -> None:
    """A reset the zone did not answer with ``reset_done`` (an error, a timeout, nonsense) may
    have left its applications running: on main the next resets skipped the zone (nothing had
    been asked for since the last reset), so what survived one reset survived every later one."""

    async def main() -> tuple[list[str], RunnerResetDone | None]:
        resets = iter([encode_frame(RunnerError(error=ErrorBody(code="timeout", message="processes outlived the kill"))),
                       encode_frame(RunnerResetDone(killed=2, duration_s=0.1))])

        def answer(request: dict[str, Any]) -> bytes:
            return encode_frame(AppsOpened(pid=9)) if request["type"] == "open" else next(resets)

        server, address, seen = await _runner(answer)
        client = AppsClient(address, Grants())
        async with server:
            await client.open(OpenApp(type="open_app", app="terminal"))
            with pytest.raises(DeskpodError):
                await client.reset()
            done = await client.reset()
        return [r["type"] for r in seen], done

    asked, done = asyncio.run(main())
    assert asked == ["open", "reset", "reset"] and done is not None and done.killed == 2


@pytest.mark.parametrize(("keys", "level"), [
    (["ctrl+j"], "L2"), (["ctrl", "m"], "L2"), (["ctrl+o"], "L2"), (["Linefeed"], "L2"), (["KP_Enter"], "L2"),
    (["alt+Return"], "L2"), (["ctrl+c"], "L2"), (["F1"], "L2"),
    (["a"], "L1"), (["shift+a"], "L1"), (["-"], "L1"), (["BackSpace"], "L1"), (["Up"], "L1"), (["Tab"], "L1"),
])
def test_every_key_that_may_run_the_terminals_line_is_l2(keys: list[str], level: str) -> None:
    """Return is not the only key that runs what was typed in the terminal: xterm sends Ctrl+J
    and Ctrl+M as a line's end, and bash runs the line on Ctrl+O too. On main only Return,
    KP_Enter and Enter were ``L2``, so ``keypress ctrl+j`` ran the typed command at ``L1``,
    unconfirmed. Now only characters, deletions and moves in the line stay ``L1``."""
    risk = classify_action(parse_action({"type": "keypress", "keys": keys}), ActionContext(focus_window=TERMINAL))
    assert risk.level == level, (keys, risk)
