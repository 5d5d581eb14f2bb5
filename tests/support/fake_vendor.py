"""A fake model-vendor API for the agent tests: a real HTTP server on 127.0.0.1.

It answers every POST with the next queued reply and records what it got (path,
headers, JSON body), so a test drives an agent through the vendor's real SDK and real
HTTP and then reads the requests the agent sent. The builders below produce the
response shapes the vendors document:

- OpenAI Responses API (https://developers.openai.com/api/reference/resources/responses,
  https://developers.openai.com/api/docs/guides/tools-computer-use): a ``response``
  object whose ``output`` holds ``reasoning``, ``computer_call`` (``call_id``,
  ``action`` or ``actions``, ``pending_safety_checks``) and ``message`` items.
- Anthropic Messages API (https://platform.claude.com/docs/en/api/messages,
  https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool): a
  ``message`` whose ``content`` holds ``text`` and ``tool_use`` blocks, with a
  ``stop_reason``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeVendor",
    "Recorded",
    "openai_response",
    "computer_call",
    "openai_message",
    "anthropic_message",
    "tool_use",
]


@dataclass
class Recorded:
    """One request the fake got: ``headers`` with lower-case names, ``body`` parsed JSON."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class _Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class FakeVendor:
    """The server; use as a context manager. :attr:`url` is its base URL."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[_Reply] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def reply(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        """Queue a reply: ``body`` is sent as JSON unless it is ``bytes`` (sent as they are)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent_headers = {"content-type": "application/json", **(headers or {})}
        with self._lock:
            self._replies.append(_Reply(status, raw, sent_headers))

    def __enter__(self) -> FakeVendor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, recorded: Recorded) -> _Reply:
        with self._lock:
            self.requests.append(recorded)
            if self._replies:
                return self._replies.popleft()
        return _Reply(500, json.dumps({"error": {"message": "fake vendor: no reply queued"}}).encode(),
                      {"content-type": "application/json"})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = fake._next(Recorded(self.path, headers, body))
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


# --- OpenAI Responses API shapes ------------------------------------------------------------


def computer_call(call_id: str, actions: list[dict[str, Any]] | None = None, action: dict[str, Any] | None = None,
                  safety_checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``computer_call`` output item: GA tool (``actions``) or preview tool (``action``)."""
    item: dict[str, Any] = {"type": "computer_call", "id": f"cu_{call_id}", "call_id": call_id,
                            "pending_safety_checks": safety_checks or [], "status": "completed"}
    if actions is not None:
        item["actions"] = actions
    if action is not None:
        item["action"] = action
    return item


def openai_message(text: str) -> dict[str, Any]:
    """An assistant ``message`` output item with one ``output_text`` part."""
    return {"type": "message", "id": "msg_67cc", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def openai_response(response_id: str, *output: dict[str, Any], status: str = "completed",
                    model: str = "gpt-5.4") -> dict[str, Any]:
    """A ``response`` object (``POST /v1/responses``) with the given output items."""
    return {
        "id": response_id, "object": "response", "created_at": 1764460800, "status": status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None, "max_output_tokens": None, "model": model,
        "output": [{"type": "reasoning", "id": f"rs_{response_id}", "summary": []}, *output],
        "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
        "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
        "tools": [{"type": "computer"}], "top_p": 1.0, "truncation": "auto",
        "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40,
                  "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 1240},
        "user": None, "metadata": {},
    }


# --- Anthropic Messages API shapes ----------------------------------------------------------


def tool_use(tool_use_id: str, tool_input: dict[str, Any], name: str = "computer") -> dict[str, Any]:
    """A ``tool_use`` content block."""
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}


def anthropic_message(*content: dict[str, Any], stop_reason: str = "tool_use",
                      model: str = "claude-opus-4-7") -> dict[str, Any]:
    """A ``message`` (``POST /v1/messages``) with the given content blocks."""
    return {"id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": model,
            "content": list(content), "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": 2095, "output_tokens": 503}}
