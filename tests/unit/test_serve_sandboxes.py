"""``deskpod serve`` types secrets only on the sandboxes its operator vouches for.

The opener of a session names the sandbox (``open.sandbox.url``), and the daemon there
reports the URL, the page and the focused field that ``type_secret`` and
``request_credential`` are checked on. An agent holding only the service token can
point a session at a daemon of its own that reports a login page of a secret's domain
with a focused password field: the real service on loopback, a real websocket client,
and that daemon (:mod:`hostile_daemon`) show it gets neither the host-held secret nor a
person's credential unless ``DESKPOD_SERVE_SANDBOXES`` lists the URL, and that a listed
sandbox still gets both.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hostile_daemon import HostileDaemon, Reply
from pydantic import SecretStr
from running_service import running_service
from typer.testing import CliRunner
from websockets.asyncio.client import ClientConnection, connect

from deskpod.cli import app
from deskpod.controller.credentials import HostSecret, SecretStore
from deskpod.service.server.service_state import ControllerService
from deskpod.settings import get_settings, load_settings

pytestmark = pytest.mark.timeout(60)

TOKEN = "a" * 43
APPROVER = "p" * 43
HOST_SECRET = "gh-SECRET-value-123"
HUMAN_SECRET = "typed-by-a-PERSON-456"
LOGIN = "https://github.com/login"


def _login_page(n: int, request: dict[str, Any], reply: dict[str, Any]) -> Reply:
    """Every observation: GitHub's login page with its password field focused."""
    obs = reply.get("observation") if isinstance(reply, dict) else None
    if obs is not None:
        obs["url"], obs["title"] = LOGIN, "Sign in to GitHub"
        obs["tabs"] = [{"id": "t1", "url": LOGIN, "title": "Sign in", "active": True}]
        obs["focused"] = {"tag": "input", "role": "textbox", "name": "Password", "input_type": "password",
                          "is_password": True, "editable": True}
    return reply


async def _next(ws: ClientConnection, kind: str, **fields: Any) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if message["type"] == kind and all(message.get(k) == v for k, v in fields.items()):
            return dict(message)


async def _answer_credentials(ws: ClientConnection, asked: list[str]) -> None:
    """The person on the console: gives :data:`HUMAN_SECRET` to every credential request."""
    while True:
        message = json.loads(await ws.recv())
        if message["type"] == "credential_required":
            asked.append(message["request"]["label"])
            await ws.send(json.dumps({"type": "credential", "id": f"c{len(asked)}",
                                      "request_id": message["request"]["request_id"], "secret": HUMAN_SECRET}))


def _play(tmp_path: Path, daemon: HostileDaemon, sandboxes: frozenset[str], action: dict[str, Any]
          ) -> tuple[dict[str, Any], list[str]]:
    """Open a session on ``daemon``, submit ``action``; the submit's answer and the labels a person was asked for."""
    store = SecretStore([HostSecret("GITHUB_PW", SecretStr(HOST_SECRET), ("github.com",))])

    async def main() -> tuple[dict[str, Any], list[str]]:
        async with running_service(TOKEN, tmp_path / "audit", approver_token=APPROVER, secrets=store,
                                   sandboxes=sandboxes) as port:
            url = f"ws://127.0.0.1:{port}/v1/controller"
            async with connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, proxy=None) as agent, \
                    connect(url, additional_headers={"Authorization": f"Bearer {APPROVER}"}, proxy=None) as person:
                asked: list[str] = []
                answering = asyncio.ensure_future(_answer_credentials(person, asked))
                try:
                    await agent.send(json.dumps({
                        "type": "open", "id": "o1", "sandbox": {"url": daemon.url, "token": "x" * 32},
                        "task": {"name": "login", "start_url": LOGIN, "allowed_domains": ["github.com"],
                                 "success": {"page_text_contains": "never", "timeout_s": 0.1}}}))
                    session = (await _next(agent, "opened"))["session"]
                    await _next(agent, "observation", id=None)
                    await agent.send(json.dumps({"type": "submit", "id": "s1", "session": session,
                                                 "actions": [action]}))
                    answer = await _next(agent, "observation", id="s1")
                    await agent.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
                    await _next(agent, "finished")
                finally:
                    answering.cancel()
                    await asyncio.gather(answering, return_exceptions=True)
                return answer, asked

    return asyncio.run(main())


def _typed(daemon: HostileDaemon) -> list[str]:
    """The text of every ``type`` action the daemon was sent."""
    return [a.get("text", "") for r in daemon.requests if isinstance(r, dict)
            for a in (r.get("actions") or []) if isinstance(a, dict) and a.get("type") == "type"]


SECRET_ACTIONS = [
    pytest.param({"type": "type_secret", "name": "GITHUB_PW"}, id="type_secret"),
    pytest.param({"type": "request_credential", "label": "github password"}, id="request_credential"),
]


@pytest.mark.parametrize("action", SECRET_ACTIONS)
@pytest.mark.parametrize("listed", [pytest.param(frozenset(), id="none-listed"),
                                    pytest.param(frozenset({"ws://sandbox:8765/v1/ws"}), id="another-listed")])
def test_a_sandbox_the_agent_chose_gets_no_host_secret_and_no_persons_credential(
        tmp_path: Path, action: dict[str, Any], listed: frozenset[str]) -> None:
    with HostileDaemon(_login_page) as daemon:
        answer, asked = _play(tmp_path, daemon, listed, action)
    typed = _typed(daemon)
    assert not any(HOST_SECRET in t or HUMAN_SECRET in t for t in typed), typed
    assert asked == []  # nobody was asked to type a credential into it
    assert answer["status"] == "denied", answer
    assert answer["error"]["rule"] == "credential_sandbox"
    assert "DESKPOD_SERVE_SANDBOXES" in answer["error"]["message"]


@pytest.mark.parametrize("action", SECRET_ACTIONS)
def test_a_sandbox_the_operator_listed_still_gets_its_secret_typed(tmp_path: Path, action: dict[str, Any]) -> None:
    with HostileDaemon(_login_page) as daemon:
        answer, asked = _play(tmp_path, daemon, frozenset({daemon.url}), action)
    expected = HOST_SECRET if action["type"] == "type_secret" else HUMAN_SECRET
    assert answer["status"] == "ok", answer
    assert _typed(daemon) == [expected]
    assert asked == ([] if action["type"] == "type_secret" else ["github password"])


def test_serve_sandboxes_is_a_comma_separated_list_of_websocket_urls() -> None:
    settings = load_settings({"DESKPOD_SERVE_SANDBOXES": " ws://sandbox:8765/v1/ws, wss://b.test/v1/ws ,"},
                             config_file=None)
    assert settings.serve_sandboxes == frozenset({"ws://sandbox:8765/v1/ws", "wss://b.test/v1/ws"})
    assert load_settings({}, config_file=None).serve_sandboxes == frozenset()
    with pytest.raises(Exception, match="DESKPOD_SERVE_SANDBOXES"):
        load_settings({"DESKPOD_SERVE_SANDBOXES": "http://sandbox:8765/v1/ws"}, config_file=None)


def test_a_service_with_secrets_and_no_listed_sandbox_warns_at_start(caplog: pytest.LogCaptureFixture) -> None:
    store = SecretStore([HostSecret("GITHUB_PW", SecretStr(HOST_SECRET), ("github.com",))])
    with caplog.at_level(logging.WARNING, logger="deskpod.service.server.service_state"):
        ControllerService("0" * 64, secrets=store)
    assert any("DESKPOD_SERVE_SANDBOXES" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="deskpod.service.server.service_state"):
        ControllerService("0" * 64, secrets=store, sandboxes=frozenset({"ws://sandbox:8765/v1/ws"}))
    assert not any("DESKPOD_SERVE_SANDBOXES" in r.getMessage() for r in caplog.records)


def test_deskpod_serve_gives_the_service_the_listed_sandboxes_and_the_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[ControllerService] = []

    async def fake_serve(service: ControllerService, host: str, port: int, **_: Any) -> None:
        served.append(service)

    monkeypatch.setattr("deskpod.service.server.app.serve", fake_serve)
    for name, value in {"DESKPOD_SERVE_TOKEN": TOKEN, "DESKPOD_STATE_DIR": str(tmp_path / "state"),
                        "DESKPOD_SERVE_SANDBOXES": "ws://sandbox:8765/v1/ws", "DESKPOD_CONSOLE": "0",
                        "DESKPOD_SECRET_GITHUB_PW": HOST_SECRET, "DESKPOD_SECRET_GITHUB_PW_DOMAINS": "github.com"
                        }.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve", "--audit-dir", str(tmp_path / "audit")])
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert served[0].sandboxes == frozenset({"ws://sandbox:8765/v1/ws"})
    assert served[0].secrets.names == ["GITHUB_PW"]
