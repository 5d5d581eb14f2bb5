"""The ``deskpod serve`` wire's corpus for :mod:`record_wire_corpus`: handshakes, scripted
client messages (an agent's refused ones, a session over the fake sandbox, an approver's
refused ones, sessions whose confirmations and takeover an approver connection answers),
and the conversation that sends them over an in-process websocket and reads the answers.

Nothing here imports ``deskpod``: the inputs do not move with the code they check.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import anyio
from starlette.testclient import WebSocketTestSession

from wire_corpus_daemon import Case, j

__all__ = ["AGENT_TOKEN", "APPROVER_TOKEN", "Conversation", "HANDSHAKES", "Normaliser", "SERVICE_REPLY_TIMEOUT_S",
           "service_cases"]

SERVICE_REPLY_TIMEOUT_S = 10.0
"""Seconds a conversation waits for one message before it records that none came."""

AGENT_TOKEN = "agent-token-" + "a" * 31
APPROVER_TOKEN = "approver-token-" + "b" * 28
_SANDBOX = {"url": "ws://sandbox.test:8765/v1/ws", "token": "t" * 43}
_TASK = {"name": "demo", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
         "success": {"url_matches": "/done$", "timeout_s": 0.2}}
_OPEN = {"type": "open", "id": "o1", "sandbox": _SANDBOX, "task": _TASK}
_DIGEST = "ab" * 32

Step = tuple[str, Any, tuple[str, ...]]
"""A step of a scenario: its name, the frame sent (text, bytes, or a JSON object), and the
message types that end it (the service's messages are read until one of them; empty: one
message)."""


def _agent_refusals() -> list[Step]:
    """Messages an agent connection without a session sends: each answered by one message."""
    s = "session-none"
    messages: dict[str, Any] = {
        "not_json": "{open",
        "empty": "",
        "bytes_frame": j({"type": "pause", "id": "p", "session": s}).encode(),
        "bad_utf8_bytes": b'{"type":"pause","id":"\xff"}',
        "array": "[]",
        "number": "7",
        "nested_too_deeply": "[" * 100_000 + "]" * 100_000,
        "no_type": {"id": "x"},
        "type_unknown": {"type": "run", "id": "x"},
        "type_int": {"type": 3, "id": "x"},
        "id_lone_surrogate": '{"type":"pause","id":"p\\ud800","session":"s"}',
        "lone_surrogate_deep": '{"type":"submit","id":"x","session":"s","actions":[{"type":"type","text":"\\udc00"}]}',
        "id_long_unknown_type": {"type": "nope", "id": "i" * 300},
        "id_int": {"type": "pause", "id": 1, "session": s},
        "pause_no_session": {"type": "pause", "id": "p1", "session": s},
        "resume_no_session": {"type": "resume", "id": "p2", "session": s},
        "cancel_no_session": {"type": "cancel", "id": "p3", "session": s},
        "pause_extra": {"type": "pause", "id": "p4", "session": s, "why": "x"},
        "pause_empty_session": {"type": "pause", "id": "p5", "session": ""},
        "pause_id_129": {"type": "pause", "id": "i" * 129, "session": s},
        "submit_no_session": {"type": "submit", "id": "s1", "session": s, "actions": [{"type": "click", "x": 1, "y": 1}]},
        "submit_no_actions": {"type": "submit", "id": "s2", "session": s, "actions": []},
        "submit_101_actions": {"type": "submit", "id": "s3", "session": s, "actions": [{"type": "wait"}] * 101},
        "submit_bad_action": {"type": "submit", "id": "s4", "session": s, "actions": [{"type": "click", "x": 1}]},
        "submit_unknown_action": {"type": "submit", "id": "s5", "session": s, "actions": [{"type": "tap"}]},
        "submit_secret_action": {"type": "submit", "id": "s6", "session": s,
                                 "actions": [{"type": "type_secret", "name": "pw"}]},
        "submit_bad_risk": {"type": "submit", "id": "s7", "session": s, "actions": [{"type": "wait"}], "risk": "L9"},
        "submit_intent_long": {"type": "submit", "id": "s8", "session": s, "actions": [{"type": "wait"}],
                               "intent": "i" * 2001},
        "submit_sensitive_string": {"type": "submit", "id": "s9", "session": s, "actions": [{"type": "wait"}],
                                    "sensitive": "yes"},
        "finish_no_session": {"type": "finish", "id": "f1", "session": s},
        "finish_claim_long": {"type": "finish", "id": "f2", "session": s, "claim": "c" * 20_001},
        "confirm_no_pending": {"type": "confirm", "id": "c1", "request_id": "q1", "approve": True, "digest": _DIGEST},
        "confirm_bad_digest": {"type": "confirm", "id": "c2", "request_id": "q1", "approve": True, "digest": "x"},
        "confirm_approve_string": {"type": "confirm", "id": "c3", "request_id": "q1", "approve": "yes",
                                   "digest": _DIGEST},
        "review_no_pending": {"type": "review", "id": "v1", "pause_id": "p1", "answer": "resume"},
        "review_bad_answer": {"type": "review", "id": "v2", "pause_id": "p1", "answer": "ignore"},
        "reset_no_session": {"type": "reset", "id": "r1", "session": s},
        "reset_bad_url": {"type": "reset", "id": "r2", "session": s, "start_url": "file:///x"},
        "takeover_from_agent": {"type": "takeover", "id": "t1", "session": s},
        "human_input_from_agent": {"type": "human_input", "id": "h1", "session": s, "action": {"type": "wait"}},
        "human_input_bad_action": {"type": "human_input", "id": "h2", "session": s, "action": {"type": "fly"}},
        "handback_from_agent": {"type": "handback", "id": "b1", "session": s},
        "credential_from_agent": {"type": "credential", "id": "k1", "request_id": "q", "secret": "hunter2"},
        "credential_neither": {"type": "credential", "id": "k2", "request_id": "q"},
        "credential_both": {"type": "credential", "id": "k3", "request_id": "q", "secret": "x", "cancel": True},
        "open_missing_task": {"type": "open", "id": "o", "sandbox": _SANDBOX},
        "open_sandbox_http": {"type": "open", "id": "o", "sandbox": {"url": "http://x.test/", "token": "t" * 43},
                              "task": _TASK},
        "open_short_token": _OPEN | {"sandbox": {"url": _SANDBOX["url"], "token": "short"}},
        "open_egress_control_bad": _OPEN | {"sandbox": _SANDBOX | {"egress_control": {
            "url": "http://10.0.0.1:80", "token": "e" * 32}}},
        "open_task_no_success": _OPEN | {"task": {k: v for k, v in _TASK.items() if k != "success"}},
        "open_success_empty": _OPEN | {"task": _TASK | {"success": {}}},
        "open_success_bad_regex": _OPEN | {"task": _TASK | {"success": {"url_matches": "(("}}},
        "open_start_url_ftp": _OPEN | {"task": _TASK | {"start_url": "ftp://demo.test/"}},
        "open_name_empty": _OPEN | {"task": _TASK | {"name": ""}},
        "open_limits_bad": _OPEN | {"task": _TASK | {"limits": {"max_steps": 0}}},
        "open_limits_extra": _OPEN | {"task": _TASK | {"limits": {"max_naps": 1}}},
        "open_policy_extra": _OPEN | {"policy": {"allow_everything": True}},
        "open_domains_twice": _OPEN | {"policy": {"allowed_domains": ["demo.test"]}},
        "open_self_approval_refused": _OPEN | {"approver": "self"},
        "open_approver_bad": _OPEN | {"approver": "nobody"},
        "open_model_size_bad": _OPEN | {"task": _TASK | {"model_size": {"width": 0, "height": 1}}},
    }
    return [(name, message, ()) for name, message in messages.items()]


def _session_steps() -> list[Step]:
    """A session driven over the fake sandbox: open, steps, control messages, the end."""
    return [
        ("open", _OPEN, ("observation", "error")),
        ("open_second_session_same_sandbox", _OPEN | {"id": "o2"}, ()),
        ("submit_click_next", {"type": "submit", "id": "s1", "session": "$session",
                               "actions": [{"type": "click", "x": 20, "y": 20}], "intent": "go on"},
         ("observation", "finished", "error")),
        ("submit_failing_scroll", {"type": "submit", "id": "s2", "session": "$session",
                                   "actions": [{"type": "scroll", "x": 1, "y": 1, "scroll_y": 3}]},
         ("observation", "finished", "error")),
        ("submit_blocked_domain", {"type": "submit", "id": "s3", "session": "$session",
                                   "actions": [{"type": "click", "x": 120, "y": 20}]},
         ("observation", "finished", "error")),
        ("submit_wait_and_text", {"type": "submit", "id": "s4", "session": "$session", "risk": "L1",
                                  "actions": [{"type": "wait", "seconds": 0}, {"type": "type", "text": "penguin"}]},
         ("observation", "finished", "error")),
        ("reset_while_running", {"type": "reset", "id": "r1", "session": "$session"}, ()),
        ("confirm_unknown", {"type": "confirm", "id": "c1", "request_id": "q-1", "approve": True,
                             "digest": _DIGEST}, ()),
        ("takeover_from_agent", {"type": "takeover", "id": "t1", "session": "$session"}, ()),
        ("resume", {"type": "resume", "id": "p2", "session": "$session"}, ()),
        ("finish_unverified", {"type": "finish", "id": "f1", "session": "$session", "claim": "done, trust me"},
         ("finished", "error")),
        ("submit_after_end", {"type": "submit", "id": "s5", "session": "$session",
                              "actions": [{"type": "wait"}]}, ()),
        ("open_again", _OPEN | {"id": "o3"}, ("observation", "error")),
        ("cancel", {"type": "cancel", "id": "x1", "session": "$session"}, ("finished", "error")),
    ]


def _approver_steps() -> list[Step]:
    """An approver connection: it only answers; the agent's messages are refused."""
    s = "session-none"
    return [(name, message, ()) for name, message in [
        ("open", _OPEN),
        ("submit", {"type": "submit", "id": "s", "session": s, "actions": [{"type": "wait"}]}),
        ("finish", {"type": "finish", "id": "f", "session": s}),
        ("pause", {"type": "pause", "id": "p", "session": s}),
        ("reset", {"type": "reset", "id": "r", "session": s}),
        ("confirm_no_pending", {"type": "confirm", "id": "c", "request_id": "q", "approve": False, "digest": _DIGEST}),
        ("review_no_pending", {"type": "review", "id": "v", "pause_id": "p", "answer": "takeover"}),
        ("takeover_unknown_session", {"type": "takeover", "id": "t", "session": s}),
        ("human_input_unknown_session", {"type": "human_input", "id": "h", "session": s,
                                         "action": {"type": "click", "x": 1, "y": 1}}),
        ("handback_unknown_session", {"type": "handback", "id": "b", "session": s}),
        ("credential_cancel_no_pending", {"type": "credential", "id": "k", "request_id": "q", "cancel": True}),
        ("credential_no_pending", {"type": "credential", "id": "k", "request_id": "q", "secret": "s3cret"}),
        ("not_json", "nope"),
    ]]


def _approval_steps() -> list[tuple[str, str, Any, tuple[str, ...]]]:
    """Sessions whose questions an approver connection answers, and a person's takeover:
    (name, the connection that sends, the message, the types the agent's messages are then
    read until). ``$request_id`` and ``$digest`` are the last question's."""
    session = "$session"
    delete = {"type": "submit", "id": "s1", "session": session, "actions": [{"type": "click", "x": 20, "y": 60}]}
    after = ("observation", "confirmation_required", "finished", "error")
    return [
        ("open", "agent", _OPEN | {"id": "o4"}, ("observation", "error")),
        ("submit_delete", "agent", delete, ("confirmation_required", "observation", "finished", "error")),
        ("agent_confirms_itself", "agent", {"type": "confirm", "id": "c1", "request_id": "$request_id",
                                            "approve": True, "digest": "$digest"}, ()),
        ("review_answers_no_pause", "approver", {"type": "review", "id": "v1", "pause_id": "$request_id",
                                                 "answer": "resume"}, ()),
        ("approver_confirms", "approver", {"type": "confirm", "id": "c3", "request_id": "$request_id",
                                           "approve": True, "digest": "$digest"}, after),
        ("approver_takes_over", "approver", {"type": "takeover", "id": "t1", "session": session},
         ("takeover_state", "error")),
        ("approver_human_input", "approver", {"type": "human_input", "id": "h1", "session": session,
                                              "action": {"type": "click", "x": 150, "y": 60}}, ()),
        ("approver_human_input_out_of_bounds", "approver", {"type": "human_input", "id": "h2", "session": session,
                                                            "action": {"type": "move", "x": 5000, "y": 5000}}, ()),
        ("agent_takes_over", "agent", {"type": "takeover", "id": "t2", "session": session}, ()),
        ("agent_hands_back", "agent", {"type": "handback", "id": "b0", "session": session}, ()),
        ("approver_hands_back", "approver", {"type": "handback", "id": "b1", "session": session},
         ("takeover_state", "error")),
        ("submit_after_handback", "agent", delete | {"id": "s2"}, after),
        ("submit_delete_again", "agent", delete | {"id": "s4"}, after),
        ("approver_denies", "approver", {"type": "confirm", "id": "c4", "request_id": "$request_id",
                                         "approve": False, "digest": "$digest"}, after),
        ("cancel_after_the_end", "agent", {"type": "cancel", "id": "x1", "session": session}, ()),
        ("open_another", "agent", _OPEN | {"id": "o5"}, ("observation", "error")),
        ("submit_delete_in_another", "agent", delete | {"id": "s3"}, after),
        ("approver_confirms_wrong_digest", "approver", {"type": "confirm", "id": "c2", "request_id": "$request_id",
                                                        "approve": True, "digest": _DIGEST}, after),
    ]


HANDSHAKES: dict[str, dict[str, str]] = {
    "no_token": {},
    "wrong_token": {"Authorization": "Bearer wrong"},
    "basic_auth": {"Authorization": "Basic " + base64.b64encode(b"a:b").decode()},
    "browser_origin": {"Authorization": f"Bearer {AGENT_TOKEN}", "Origin": "http://evil.test"},
    "agent_role_header_approver": {"Authorization": f"Bearer {AGENT_TOKEN}", "deskpod-role": "approver"},
    "approver_role_header_agent": {"Authorization": f"Bearer {APPROVER_TOKEN}", "deskpod-role": "agent"},
    "agent": {"Authorization": f"Bearer {AGENT_TOKEN}"},
    "agent_role_header_agent": {"Authorization": f"Bearer {AGENT_TOKEN}", "deskpod-role": "agent"},
    "approver": {"Authorization": f"Bearer {APPROVER_TOKEN}", "deskpod-role": "approver"},
}


def service_cases() -> list[Case]:
    """The service's scenarios: handshakes, an agent's refused messages, a session, an approver."""
    cases: list[Case] = [(f"service/handshake/{name}", headers) for name, headers in HANDSHAKES.items()]
    cases.append(("service/healthz", "GET /healthz"))
    cases += [(f"service/agent/{name}", [message, until]) for name, message, until in _agent_refusals()]
    cases += [(f"service/session/{name}", [message, until]) for name, message, until in _session_steps()]
    cases.append(("service/session/events", "the session's audit events, in order"))
    cases += [(f"service/approver/{name}", [message, until]) for name, message, until in _approver_steps()]
    cases += [(f"service/approval/{name}", [sender, message, until])
              for name, sender, message, until in _approval_steps()]
    cases.append(("service/approval/events", "the session's audit events, in order"))
    cases.append(("service/approval/approver_stream", "what the approver connection was sent unasked, in order"))
    return cases


class Normaliser:
    """Replaces what differs from run to run (ids, times, paths, signatures) by stable marks;
    ids are numbered by first appearance, so that two different ids stay different. The fake
    sandbox's screenshot ids count its observations, and a claim's verification observes
    until its timeout: how many times depends on the machine's speed, so they are marks too."""

    _IDS = re.compile(r"\b(session|run|confirm|pause|credential)-[0-9a-f]{12}\b|\b(shot)-\d+\b")
    _TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
    _VOLATILE_KEYS = frozenset({"duration_s", "audit_head", "signature", "seal", "elapsed_s", "token"})

    def __init__(self, audit_dir: str) -> None:
        self.audit_dir = audit_dir
        self.seen: dict[str, str] = {}

    def _id(self, match: re.Match[str]) -> str:
        return self.seen.setdefault(match.group(0), f"{match.group(1) or match.group(2)}-<{len(self.seen) + 1}>")

    def __call__(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: "<volatile>" if k in self._VOLATILE_KEYS else self(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self(v) for v in data]
        if isinstance(data, str):
            text = data.replace(self.audit_dir, "<audit_dir>")
            return self._TIME.sub("<time>", self._IDS.sub(self._id, text))
        return data


def _receive(ws: WebSocketTestSession) -> dict[str, Any]:
    """The service's next message, or ``{"no_message": ...}`` when none comes in time."""

    # The test client's own receive() waits without a limit: read its queue with one, so that a
    # message that never comes is recorded (and fails the replay) instead of hanging the test.
    async def receive() -> Any:
        with anyio.fail_after(SERVICE_REPLY_TIMEOUT_S):
            return await ws._send_rx.receive()

    try:
        message = ws.portal.call(receive)
    except TimeoutError:
        return {"no_message": f"within {SERVICE_REPLY_TIMEOUT_S:g} s"}
    if message["type"] != "websocket.send":
        return {"closed": message.get("code")}
    return json.loads(message["text"] if message.get("text") is not None else message["bytes"])


_END_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""The states a run ends in."""


class Conversation:
    """One connection to the service: sends steps and records what comes back.

    ``found`` (shared by the connections of one scenario) holds what later messages refer
    to as ``"$name"``: the ``session`` of the last observation, the ``request_id`` and
    ``digest`` of the last confirmation request, the ``pause_id`` of the last pause.
    """

    def __init__(self, ws: WebSocketTestSession, normalise: Normaliser, found: dict[str, str] | None = None) -> None:
        self.ws = ws
        self.normalise = normalise
        self.found = {"session": "session-none"} if found is None else found
        self.events: list[Any] = []
        """The audit events this connection was sent (normalised), in order."""
        self.stream: list[Any] = []
        """What :meth:`answer` read that answers no message (normalised), in order."""
        self._sentinels = 0

    def _send(self, message: Any) -> None:
        if isinstance(message, bytes):
            self.ws.send_bytes(message)
            return
        if not isinstance(message, str):
            message = j(message)
            for name, value in self.found.items():
                message = message.replace(j(f"${name}"), j(value))
        self.ws.send_text(message)

    def _next(self) -> dict[str, Any]:
        while True:
            message = _receive(self.ws)
            kind = message.get("type")
            if kind == "event":
                self.events.append(self.normalise(message))
                continue
            if kind == "observation" and isinstance(message.get("session"), str):
                self.found["session"] = message["session"]
            elif kind == "confirmation_required":
                self.found.update(request_id=str(message["request"].get("id")),
                                  digest=str(message["request"].get("digest")))
            elif kind == "pause_required":
                self.found["pause_id"] = str(message["notice"].get("id"))
            return message

    def _sentinel(self) -> str:
        """Send a message that is answered by an error naming its id; return that id. Every
        message sent on this connection's own behalf before it is sent before that error."""
        self._sentinels += 1
        sentinel = f"sentinel-{self._sentinels}"
        self._send({"type": "pause", "id": sentinel, "session": "session-none"})
        return sentinel

    def step(self, message: Any, until: tuple[str, ...]) -> list[Any]:
        """Send ``message`` (``None``: nothing, only read); return the service's messages
        (events apart) until one of type in ``until`` (or the first one), then those a
        sentinel message shows were sent before it."""
        got = []
        if message is not None:
            self._send(message)
            got.append(self._next())
        while until and (not got or (got[-1].get("type") not in until and "type" in got[-1])):
            got.append(self._next())
        sentinel = self._sentinel()
        while True:
            answer = self._next()
            if answer.get("id") == sentinel or "type" not in answer:
                break
            got.append(answer)
        return [self.normalise(m) for m in got]

    def watch_until_ended(self, session: str) -> None:
        """Read into :attr:`stream` until it holds the view of ``session`` in an end state
        (what an approver is sent last about a session)."""
        mark = self.normalise(session)
        ended = {"type": "session", "session": mark}

        def seen() -> bool:
            return any(m.items() >= ended.items() and m.get("state") in _END_STATES for m in self.stream)

        while not seen():
            message = self._next()
            self.stream.append(self.normalise(message))
            if "type" not in message:
                break

    def answer(self, message: Any) -> list[Any]:
        """Send ``message`` on an approver's connection; return what answers it (the messages
        with an ``id``), up to a sentinel's answer. What it was sent unasked (session views,
        questions, takeover states: they come from a queue of their own, in their own order)
        goes to :attr:`stream`."""
        self._send(message)
        sentinel = self._sentinel()
        got = []
        while True:
            answer = self._next()
            if answer.get("id") == sentinel or "type" not in answer:
                break
            if "id" in answer:
                got.append(self.normalise(answer))
            else:
                self.stream.append(self.normalise(answer))
        return got
