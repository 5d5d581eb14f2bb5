"""Record what both wires answer to a fixed corpus of inbound messages: the replay proof
that a refactoring left them unchanged (both wires accept exactly what e28e94d accepted and
answer the same).

Usage (from the repository's root, ``PYTHONPATH`` pointing at the code to record)::

    PYTHONPATH=runtime python tests/support/record_wire_corpus.py tests/unit/fixtures/wire_corpus.json

Five parts, each a list of named cases whose inputs are written out as literals in
:mod:`wire_corpus_daemon` and :mod:`wire_corpus_service` (nothing there imports
``deskpod``, so the inputs do not move with the code):

- ``handshake/...``: the headers of an upgrade to the daemon; the outcome is whether
  ``agentd/app.py``'s ``authorized`` lets it in (before and after a token rotation) and the
  reply size ``declared_message_bytes`` reads.
- ``daemon/...``: a raw client frame handled by the daemon's connection
  (``agentd/connection.py``'s ``Connection``) while another request holds the sandbox, so
  that nothing runs; the outcome is its reply (the error for bad input, ``busy`` with the
  id for a good request), its ``rate_limited`` reply, and the request model's JSON
  (:func:`deskpod.protocol.parse_request`) when the frame decodes.
- ``server/...``: a raw daemon frame fed to the controller's decoder
  (:func:`deskpod.protocol.parse_server_message`); the outcome is the message model's
  JSON or the :class:`~deskpod.errors.BadReplyError`.
- ``client/...``: a request sent through :meth:`deskpod.client.SandboxClient.request` to a
  scripted (possibly hostile) daemon reply; the outcome is the reply model's JSON or the
  exception, whether the client closed the connection, and what a second request gets.
- ``service/...``: scripted client messages sent to ``deskpod serve`` over a real
  in-process websocket (starlette's ``TestClient``) whose sessions drive the test suite's
  fake sandbox; the outcome is every message the service sends back, volatile fields
  (session and run ids, times, paths, signatures) normalised. A session's audit events
  are recorded apart from the other messages, in their own order (the two streams are
  sent from different tasks).

Each case is stored with the SHA-256 of its input, so that a changed input is told apart
from a changed answer. ``tests/unit/test_wire_replay.py`` runs :func:`record` on the
current code and compares it with the recording made from e28e94d. After a change of the
corpus, record again from e28e94d, never from the code under test: check it out
(``git worktree add /tmp/old e28e94d --detach``), copy this file, ``wire_corpus_*.py``
and ``fake_sandbox.py`` into one folder, give the import block below e28e94d's module
names (there ``ControllerService`` and ``create_app`` were in ``deskpod.controller.serve``,
``Connection`` was ``_Connection`` and ``declared_message_bytes`` lived in
``deskpod.agentd.app``) and run the copy with ``PYTHONPATH=/tmp/old/runtime``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import importlib.util
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient, WebSocketDenialResponse

# The code under record: every deskpod import of the recorder, in this one block. A change
# that moves one of these names updates this block only; the corpus and the outcomes stay.
import deskpod.client
from deskpod.agentd.app import authorized
from deskpod.agentd.connection import Connection, declared_message_bytes
from deskpod.agentd.config import AgentdConfig
from deskpod.controller.audit_sign import AuditSigner
from deskpod.service.server.app import create_app
from deskpod.service.server.service_state import ControllerService
from deskpod.errors import DeskpodError
from deskpod.protocol import Size, encode_message, parse_request, parse_server_message

from fake_sandbox import Button, FakeSandbox, Page
from wire_corpus_daemon import (
    DAEMON_ORIGIN,
    DAEMON_TOKEN,
    HELLO,
    ROTATED_TOKEN,
    Case,
    client_cases,
    daemon_cases,
    handshake_cases,
    j,
    server_cases,
)
from wire_corpus_service import AGENT_TOKEN, APPROVER_TOKEN, HANDSHAKES, Conversation, Normaliser, service_cases

__all__ = ["RECORDED_FROM", "main", "record"]

RECORDED_FROM = "e28e94d"
"""The commit whose answers the fixture holds."""


class _Held:
    """A lock someone holds."""

    def locked(self) -> bool:
        """Always held."""
        return True


class _BusyDaemon:
    """A daemon whose every lock is held: its connection answers a well-formed request
    ``busy`` (after decoding it, with its id) and a bad one with its error, running nothing."""

    def __init__(self) -> None:
        self.screen = Size(width=1280, height=800)
        self.workspace_lock = _Held()
        self.executor = _BusyExecutor()
        self.recovering = False


class _BusyExecutor:
    """The X11 executor of :class:`_BusyDaemon`: its lock is held."""

    def __init__(self) -> None:
        self.lock = _Held()


def record_daemons(frames: list[Case]) -> dict[str, Any]:
    """What the daemon's connection answers each client frame (its reply while a request
    runs, and its ``rate_limited`` reply), with the request model's JSON when it decodes.

    Returns:
        Case name → outcome.
    """
    connection = Connection(_BusyDaemon(), "0" * 64)  # type: ignore[arg-type]

    async def answers() -> dict[str, Any]:
        outcomes: dict[str, Any] = {}
        for name, raw in frames:
            outcome: dict[str, Any] = {"reply": json.loads(await connection.handle(raw)),
                                       "rate_limited": json.loads(connection.limited(raw, 0.25))}
            try:
                outcome["request"] = json.loads(encode_message(parse_request(raw)))
            except DeskpodError:
                pass
            outcomes[name] = outcome
        return outcomes

    return asyncio.run(answers())


def record_handshake(headers: dict[str, str]) -> dict[str, Any]:
    """Whether the daemon lets an upgrade with ``headers`` in, before and after a reset
    rotated its token, and the reply size the client declared (``None``: refused)."""
    config = AgentdConfig.from_env({"DESKPOD_TOKEN_SHA256": hashlib.sha256(DAEMON_TOKEN.encode()).hexdigest(),
                                    "DESKPOD_ALLOWED_ORIGINS": DAEMON_ORIGIN})
    rotated = hashlib.sha256(ROTATED_TOKEN.encode()).hexdigest()
    return {"authorized": list(authorized(headers, config)),
            "after_rotation": list(authorized(headers, config, rotated)),
            "max_message_bytes": declared_message_bytes(headers)}


class _ScriptedWs:
    """A websocket that answers the one frame sent with ``reply`` (``None``: no reply in time)."""

    def __init__(self, reply: str | bytes | None) -> None:
        self.reply = reply
        self.sent: list[str | bytes] = []
        self.closed = False

    async def send(self, text: str | bytes) -> None:
        self.sent.append(text)

    async def recv(self) -> str | bytes:
        if self.reply is None:
            raise TimeoutError
        return self.reply

    async def close(self) -> None:
        self.closed = True


def _exception(exc: BaseException) -> dict[str, Any]:
    """An exception as data: its class, and the envelope of a deskpod error."""
    if isinstance(exc, DeskpodError):
        return {"raised": type(exc).__name__, "code": exc.code, "message": exc.message, "detail": exc.detail}
    return {"raised": type(exc).__name__, "message": str(exc)}


def record_server(raw: str | bytes) -> dict[str, Any]:
    """What the controller makes of one daemon frame: the message's JSON or the exception."""
    try:
        message = parse_server_message(raw)
    except DeskpodError as exc:
        return _exception(exc)
    return {"message": json.loads(encode_message(message))}


def record_client(case: dict[str, Any]) -> dict[str, Any]:
    """What :meth:`SandboxClient.request` returns or raises for ``case``'s request and reply,
    whether it closed the connection, and what a second request on it gets."""
    request = parse_request(j(case["request"]))
    hello = parse_server_message(j(HELLO))
    ws = _ScriptedWs(case["reply"])
    client = deskpod.client.SandboxClient(ws, hello)  # type: ignore[arg-type]

    async def exchange() -> tuple[dict[str, Any], dict[str, Any]]:
        outcomes: list[dict[str, Any]] = []
        for _ in range(2):
            try:
                reply = await client.request(request)
            except DeskpodError as exc:
                outcomes.append(_exception(exc))
            else:
                outcomes.append({"reply": type(reply).__name__, "json": reply.model_dump(mode="json")})
        return outcomes[0], outcomes[1]

    first, second = asyncio.run(exchange())
    return {"outcome": first, "closed": ws.closed, "sent": [json.loads(s) for s in ws.sent[:1]],
            "then": "same" if second == first else second}


_PAGES = {
    "http://demo.test/": Page(title="Demo", text="Start here", buttons=[
        Button((10, 10, 100, 40), "Next", "http://demo.test/next"),
        Button((110, 10, 200, 40), "Elsewhere", "http://evil.test/"), Button((10, 50, 100, 80), "Delete account")]),
    "http://demo.test/next": Page(title="Next", text="Almost", buttons=[
        Button((10, 10, 100, 40), "Next"), Button((110, 10, 200, 40), "Elsewhere", "http://evil.test/")]),
}


def _approval(http: TestClient, normalise: Normaliser, cases: list[Case]) -> dict[str, Any]:
    """Play the ``service/approval/`` cases on an agent's and an approver's connection."""
    outcomes: dict[str, Any] = {}
    with (http.websocket_connect("/v1/controller", headers=dict(HANDSHAKES["agent"])) as agent_ws,
          http.websocket_connect("/v1/controller", headers=dict(HANDSHAKES["approver"])) as approver_ws):
        agent = Conversation(agent_ws, normalise)
        approver = Conversation(approver_ws, normalise, agent.found)
        for name, (sender, message, until) in ((n, c) for n, c in cases
                                               if n.startswith("service/approval/") and isinstance(c, list)):
            if sender == "agent":
                outcomes[name] = agent.step(message, tuple(until))
            else:
                outcomes[name] = {"answers": approver.answer(message),
                                  "agent": agent.step(None, tuple(until)) if until else []}
        approver.watch_until_ended(agent.found["session"])
        outcomes["service/approval/events"] = agent.events
        outcomes["service/approval/approver_stream"] = approver.stream
    return outcomes


def _record_service(cases: list[Case]) -> dict[str, Any]:
    """Play the service's cases (:func:`wire_corpus_service.service_cases`) against one
    service whose sessions all drive one fake sandbox; return case name → outcome."""
    sandbox = FakeSandbox(dict(_PAGES), fail_actions=frozenset({"scroll"}))

    async def connect(url: str, token: str, **_: Any) -> FakeSandbox:
        return sandbox

    async def addresses_of(host: str, port: int) -> frozenset[str]:
        return frozenset({"192.0.2.1"})  # the fake sandbox's one address, whatever its name

    outcomes: dict[str, Any] = {}
    original = deskpod.client.SandboxClient.__dict__["connect"]
    deskpod.client.SandboxClient.connect = staticmethod(connect)  # type: ignore[assignment,method-assign]
    # Code after e28e94d recognises a sandbox by the addresses its URL resolves to; the fake's name resolves too.
    endpoints = importlib.import_module("deskpod.service.server.endpoints") if importlib.util.find_spec(
        "deskpod.service.server.endpoints") else None
    original_addresses = getattr(endpoints, "addresses_of", None)
    if endpoints is not None:
        endpoints.addresses_of = addresses_of  # type: ignore[attr-defined]
    try:
        with tempfile.TemporaryDirectory() as audit_dir:
            service = ControllerService(hashlib.sha256(AGENT_TOKEN.encode()).hexdigest(), audit_dir=audit_dir,
                                        signer=AuditSigner.generate(),
                                        approver_token_sha256=hashlib.sha256(APPROVER_TOKEN.encode()).hexdigest())
            normalise = Normaliser(audit_dir)
            with TestClient(create_app(service)) as http:
                for name, headers in ((n, c) for n, c in cases if n.startswith("service/handshake/")):
                    try:
                        with http.websocket_connect("/v1/controller", headers=dict(headers)) as ws:
                            ws.close()
                            outcomes[name] = {"accepted": True}
                    except WebSocketDenialResponse as exc:
                        outcomes[name] = {"status": exc.status_code, "body": exc.text}
                health = http.get("/healthz")
                outcomes["service/healthz"] = {"status": health.status_code, "json": health.json()}
                for prefix, headers in (("service/agent/", HANDSHAKES["agent"]),
                                        ("service/session/", HANDSHAKES["agent"]),
                                        ("service/approver/", HANDSHAKES["approver"])):
                    with http.websocket_connect("/v1/controller", headers=dict(headers)) as ws:
                        talk = Conversation(ws, normalise)
                        for name, (message, until) in ((n, c) for n, c in cases
                                                       if n.startswith(prefix) and isinstance(c, list)):
                            outcomes[name] = talk.step(message, tuple(until))
                        if prefix == "service/session/":
                            outcomes["service/session/events"] = talk.events
                outcomes.update(_approval(http, normalise, cases))
    finally:
        deskpod.client.SandboxClient.connect = original  # type: ignore[method-assign]
        if endpoints is not None:
            endpoints.addresses_of = original_addresses  # type: ignore[attr-defined]
    return outcomes


# ---------------------------------------------------------------------------------------------

def _digest(value: Any) -> str:
    """SHA-256 of a case's input (bytes, text and JSON data told apart)."""
    if isinstance(value, bytes):
        return hashlib.sha256(b"bytes:" + value).hexdigest()
    if isinstance(value, str):
        return hashlib.sha256(b"text:" + value.encode("utf-8", "surrogatepass")).hexdigest()
    text = json.dumps(value, sort_keys=True, default=lambda b: {"bytes": base64.b64encode(b).decode()})
    return hashlib.sha256(b"json:" + text.encode("utf-8", "surrogatepass")).hexdigest()


def _all_cases() -> Iterator[tuple[str, Any, Callable[[Any], Any] | None]]:
    """Every case with the function that records it alone (``None``: recorded with the others
    of its part, on one connection: :func:`record_daemons`, :func:`_record_service`)."""
    for name, raw in daemon_cases():
        yield name, raw, None
    for name, headers in handshake_cases():
        yield name, headers, record_handshake
    for name, raw in server_cases():
        yield name, raw, record_server
    for name, case in client_cases():
        yield name, case, record_client
    for name, case in service_cases():
        yield name, case, None


def corpus_digest() -> dict[str, str]:
    """Each case's name → the SHA-256 of its input."""
    return {name: _digest(value) for name, value, _ in _all_cases()}


def record(part: str | None = None) -> dict[str, dict[str, Any]]:
    """Run every case (or those of one part: ``"daemon"``, ``"service"``...) through the code
    on ``sys.path``.

    Returns:
        Case name → ``{"input_sha256", "outcome"}`` (the outcome as canonical JSON data).
    """
    digests: dict[str, str] = {}
    entries: dict[str, dict[str, Any]] = {}
    played: dict[str, list[Case]] = {"daemon": [], "service": []}
    for name, value, recorder in _all_cases():
        if part is not None and name.split("/")[0] != part:
            continue
        digests[name] = _digest(value)
        if recorder is None:
            played[name.split("/")[0]].append((name, value))
        else:
            entries[name] = {"input_sha256": digests[name], "outcome": recorder(value)}
    outcomes = {**(record_daemons(played["daemon"]) if played["daemon"] else {}),
                **(_record_service(played["service"]) if played["service"] else {})}
    for name, outcome in outcomes.items():
        entries[name] = {"input_sha256": digests[name], "outcome": outcome}
    return {name: json.loads(json.dumps(entry, sort_keys=True)) for name, entry in entries.items()}


def main(argv: list[str]) -> int:
    """Write the recording to ``argv[1]``."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = {"recorded_from": RECORDED_FROM, "entries": record()}
    Path(argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
    print(f"{len(out['entries'])} cases written to {argv[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
