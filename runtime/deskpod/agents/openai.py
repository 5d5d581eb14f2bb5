"""The OpenAI agent: the Responses API computer-use loop, one ``computer_call`` per proposal.

Request and response shapes follow OpenAI's computer-use guide
(https://developers.openai.com/api/docs/guides/tools-computer-use) and the Responses
API reference (https://developers.openai.com/api/reference/resources/responses):

- Every request sends ``model``, ``instructions`` (:data:`~deskpod.agents._common.SYSTEM_PROMPT`;
  instructions are not carried over by ``previous_response_id``), ``tools`` with the
  computer tool, ``truncation: "auto"`` (the API drops the oldest items instead of
  failing when the context is full), ``max_output_tokens`` and ``store: true``.
- The first request's ``input`` is one user message: the task (``spec.instructions``)
  and the first screenshot. Later requests send ``previous_response_id`` and, as
  ``input``, one ``computer_call_output`` per answered call (the screenshot after it,
  ``acknowledged_safety_checks`` only when the call was executed, i.e. a human
  confirmed its checks) plus a user message for each call that was not executed as
  proposed.
- The tool: models whose name starts with ``computer-use-preview`` get the preview
  tool (``computer_use_preview`` with ``display_width`` / ``display_height`` = the size
  of the newest screenshot sent and ``environment: "browser"``; one ``action`` per
  call); every other model gets the GA ``computer`` tool (batched ``actions``,
  screenshots sent at ``detail: "original"`` so coordinates are screenshot pixels).
- Coordinates: the model's are the pixels of the newest screenshot it was sent. That is
  the model space, unless the daemon scaled the image down to fit the vendors' limits
  (:attr:`~deskpod.protocol.Screenshot.fitted` ``"downscaled"``): the preview tool then
  declares the smaller size, and every point of a call is mapped back to the model
  space before it becomes a proposal (:class:`deskpod.adapters._common.ShownScreen`,
  as the adapters do).
- Each ``computer_call`` becomes one :class:`~deskpod.controller.gui_agent.Proposal`: its
  actions converted by :func:`deskpod.adapters.openai.call_actions` (mapped to the model space),
  its ``pending_safety_checks`` messages in ``safety_checks``, the response's text
  (message or reasoning summary) as ``intent``. A response without a
  ``computer_call`` ends the loop with :class:`~deskpod.controller.gui_agent.Done`
  carrying the model's message text as the claim.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

import openai

from deskpod.adapters import openai as adapter
from deskpod.adapters._common import ShownScreen, state_note
from deskpod.agents._common import (
    MAX_REJECTED_CALLS,
    MAX_RETRIES,
    REQUEST_TIMEOUT_S,
    SYSTEM_PROMPT,
    api_key,
    bad_response,
    MAX_NOTE_CHARS,
    MAX_VENDOR_MESSAGE_CHARS,
    outcome_note,
    screenshot_of,
    scrubbed,
    usage_tokens,
    vendor_failure,
)
from deskpod.controller.gui_agent import Done, Proposal, StepOutcome
from deskpod.controller.task import ModelAgentSpec
from deskpod.errors import AgentError, DeskpodError
from deskpod.protocol import Observation, Size

__all__ = ["DEFAULT_API_KEY_ENV", "OpenAIAgent", "PREVIEW_MODEL_PREFIX"]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable holding the key when the spec names none."""

PREVIEW_MODEL_PREFIX = "computer-use-preview"
"""Models named with this prefix get the preview tool; all others the GA ``computer`` tool."""

_VENDOR = "openai"


@dataclass
class _Pending:
    """A ``computer_call`` proposed to the controller, awaiting its outcome."""

    call: dict[str, Any]
    checks: list[dict[str, Any]]


class OpenAIAgent:
    """The Responses API computer-use loop (see the module docstring for the wire shapes).

    Args:
        spec: the task file's ``agent:`` block (``type: openai``).
        display: the model space, pixels: the space of every coordinate this agent
            proposes, and the size of every screenshot it is given unless the daemon
            scaled one down (the preview tool declares the size actually sent, and the
            model's points are mapped back; see the module).
        max_retries: retries of the SDK after a connection error, 408, 409, 429 or 5xx.
        timeout_s: seconds one HTTP request may take.

    Raises:
        AgentError: the API key's environment variable is unset or empty.
    """

    def __init__(self, spec: ModelAgentSpec, display: Size, *, max_retries: int = MAX_RETRIES,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._spec = spec
        self._display = display
        self._key = api_key(spec, DEFAULT_API_KEY_ENV)
        self._preview = spec.model.startswith(PREVIEW_MODEL_PREFIX)
        self._client = openai.AsyncOpenAI(api_key=self._key, base_url=spec.base_url, max_retries=max_retries,
                                          timeout=timeout_s)
        self._previous_response_id: str | None = None
        self._calls: deque[dict[str, Any]] = deque()
        self._pending: _Pending | None = None
        self._input: list[dict[str, Any]] = []
        self._shown = ShownScreen()
        """The newest screenshot the model was sent: the image its points are pixels of."""
        self._input_shot: Observation | None = None
        """The observation whose screenshot is the newest image in ``_input`` (``None``: none)."""
        self._intent = ""
        self._done: Done | None = None
        self.tokens_used = 0
        """Tokens the responses so far said they used (their ``usage``, :func:`usage_tokens`)."""

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        """Report ``last`` to the model when it answers a call, and return the next step.

        Args:
            observation: the current screen (screenshot in the model space).
            last: the outcome of this agent's previous proposal (``None`` at the first call).

        Returns:
            The next ``computer_call`` as a :class:`Proposal`, or :class:`Done` with the
            model's final message when it stops calling the tool (and at every call after).

        Raises:
            AgentError: the vendor failed or answered an unexpected shape, the
                observation has no screenshot, or the model's calls were refused
                :data:`~deskpod.agents._common.MAX_REJECTED_CALLS` times in a row.
        """
        if self._done is not None:
            return self._done
        screenshot = screenshot_of(observation, _VENDOR)
        if self._pending is not None:
            self._answer(self._pending, last, observation)
            self._pending = None
        for _ in range(MAX_REJECTED_CALLS + 1):
            while self._calls:
                call = self._calls.popleft()
                try:
                    actions = self._shown.to_model(adapter.call_actions(call), self._display)
                except DeskpodError as exc:
                    note = f"Not executed: {exc.code}: {exc.message}"
                    self._not_executed(call, observation, note[:MAX_NOTE_CHARS])
                    continue
                checks = [check for check in call.get("pending_safety_checks") or [] if isinstance(check, dict)]
                self._pending = _Pending(call, checks)
                return Proposal(actions=actions, intent=self._intent,
                                safety_checks=[str(c.get("message") or c.get("code") or c.get("id")) for c in checks])
            if self._previous_response_id is None and not self._input:
                self._input = [{"role": "user", "content": [
                    {"type": "input_text", "text": self._spec.instructions},
                    {"type": "input_image", "image_url": adapter.image_url(screenshot),
                     "detail": "high" if self._preview else "original"},
                ]}]
                self._input_shot = observation
            response = await self._create()
            self._calls.extend(item for item in response["output"] if item.get("type") == "computer_call")
            self._intent = _text(response["output"])
            if not self._calls:
                if response.get("status") == "incomplete":
                    raise AgentError("openai response incomplete before any computer_call: "
                                     f"{response.get('incomplete_details')}; raise max_output_tokens",
                                     detail={"reason": "incomplete_response", "vendor": _VENDOR})
                self._done = Done(claim=self._intent)
                return self._done
        raise AgentError(f"the model's computer calls were refused {MAX_REJECTED_CALLS} times in a row",
                         detail={"reason": "too_many_rejected_calls", "vendor": _VENDOR})

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    def _answer(self, pending: _Pending, last: StepOutcome | None, observation: Observation) -> None:
        if last is not None and last.status == "ok":
            self._input.append(adapter.computer_call_output(pending.call, screenshot_of(last.observation, _VENDOR),
                                                            pending.checks))
            note = state_note(last.observation)
            if note is not None:
                self._input.append({"role": "user", "content": [{"type": "input_text", "text": note}]})
            self._input_shot = last.observation
            return
        now = last.observation if last is not None else observation
        self._not_executed(pending.call, now, outcome_note(last) if last is not None else "No outcome was reported.")
        while self._calls:
            self._not_executed(self._calls.popleft(), now, "Skipped: an earlier action of this turn was not executed.")

    def _not_executed(self, call: dict[str, Any], observation: Observation, note: str) -> None:
        self._input += adapter.error_items(call, screenshot_of(observation, _VENDOR), note)
        self._input_shot = observation

    async def _create(self) -> dict[str, Any]:
        if self._input_shot is not None:
            self._shown.returned(self._input_shot)
        tool = adapter.tool_definition(self._shown.image_size(self._display),
                                       adapter.PREVIEW_TOOL_TYPE if self._preview else adapter.TOOL_TYPE)
        try:
            raw = await self._client.responses.with_raw_response.create(
                model=self._spec.model, instructions=SYSTEM_PROMPT, tools=[cast(Any, tool)],
                input=cast(Any, self._input), truncation="auto", max_output_tokens=self._spec.max_output_tokens,
                store=True, previous_response_id=self._previous_response_id or openai.omit)
            body = json.loads(raw.http_response.content)
        except openai.APIStatusError as exc:
            raise vendor_failure(_VENDOR, exc, self._key, exc.status_code) from exc
        except openai.APIConnectionError as exc:
            raise vendor_failure(_VENDOR, exc, self._key, None) from exc
        except openai.OpenAIError as exc:
            raise bad_response(_VENDOR, scrubbed(exc, self._key)) from exc
        except ValueError as exc:
            raise bad_response(_VENDOR, "the body is not JSON") from exc
        if not (isinstance(body, dict) and isinstance(body.get("id"), str) and isinstance(body.get("output"), list)):
            raise bad_response(_VENDOR, "a response needs a string 'id' and an 'output' list")
        if body.get("status") == "failed" or body.get("error"):
            raise bad_response(_VENDOR, f"response failed: {str(body.get('error'))[:MAX_VENDOR_MESSAGE_CHARS]}")
        body["output"] = [item for item in body["output"] if isinstance(item, dict)]
        self.tokens_used += usage_tokens(body)
        self._previous_response_id = body["id"]
        self._input, self._input_shot = [], None
        return body


def _text(output: list[dict[str, Any]]) -> str:
    """The response's words: ``output_text`` parts of messages, else reasoning summaries."""
    said = [part.get("text", "") for item in output if item.get("type") == "message"
            for part in item.get("content") or [] if isinstance(part, dict) and part.get("type") == "output_text"]
    if not said:
        said = [part.get("text", "") for item in output if item.get("type") == "reasoning"
                for part in item.get("summary") or [] if isinstance(part, dict)]
    return "\n".join(text for text in said if isinstance(text, str)).strip()
