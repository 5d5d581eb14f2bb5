"""The Anthropic agent: the Messages API computer-tool loop, one ``tool_use`` per proposal.

Request and response shapes follow Anthropic's computer use tool guide
(https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool) and
the Messages API reference (https://platform.claude.com/docs/en/api/messages):

- Every request (``POST /v1/messages`` with the ``anthropic-beta`` flag of the tool
  version) sends ``model``, ``max_tokens`` (``spec.max_output_tokens``), ``system``
  (:data:`~deskpod.agents._common.SYSTEM_PROMPT`), ``tools`` with the computer tool
  declaring the size of the newest screenshot sent as ``display_width_px`` /
  ``display_height_px``, and the whole conversation in ``messages``.
- Coordinates: the model's are the pixels of the newest screenshot it was sent. That is
  the model space, unless the daemon scaled the image down to fit the vendors' limits
  (:attr:`~deskpod.protocol.Screenshot.fitted` ``"downscaled"``, e.g. 3049x1715 sent from
  a 7680x4320 model space): the tool then declares the smaller size, the points of each
  ``tool_use`` (``coordinate``, ``start_coordinate``, a zoom's ``region``) are mapped back
  to the model space before they become a proposal, and ``cursor_position`` answers in
  the image's pixels (:class:`deskpod.adapters._common.ShownScreen`, as the adapters do).
- Tool version (``spec.computer_tool``, ``"auto"`` by default: :func:`tool_type_for`):
  ``computer_20250124`` (beta ``computer-use-2025-01-24``) for the models in
  :data:`OLDER_TOOL_MODEL_PREFIXES`; the computer toolset ``computer_toolset_20260801``
  (generally available: the non-beta Messages API, no beta flag; one ``tools`` entry with
  ``spec.computer_configs`` as its per-member ``configs``) for the models in
  :data:`TOOLSET_MODEL_PREFIXES`, which refuse the older versions; ``computer_20251124``
  (beta ``computer-use-2025-11-24``, ``zoom`` enabled) for every other model. With the
  toolset, each member ``tool_use`` (``left_click``, ``type``... several per turn) is one
  proposal, answered as the SDK's toolset answers it (:func:`deskpod.adapters.anthropic.member_result`);
  a call of a member the configs disabled is answered ``is_error``.
- The first user message holds the task (``spec.instructions``) and the first
  screenshot. Each ``tool_use`` block of a response becomes one
  :class:`~deskpod.controller.gui_agent.Proposal` (a response may hold several; the text
  blocks are the ``intent``). Once all of them are answered, the next user message
  carries their ``tool_result`` blocks in order: the screenshot after an executed
  action (text for ``cursor_position``, the zoomed image for ``zoom``), ``is_error``
  with a short text for an error or a denial, and ``is_error`` "skipped" for the
  blocks after a failed one (they were planned on a screen that did not come about).
  When the last result holds no image, the current screenshot follows as an image
  block.
- A response without ``tool_use`` ends the loop with
  :class:`~deskpod.controller.gui_agent.Done` (its text is the claim), unless it stopped
  at ``max_tokens`` (:class:`~deskpod.errors.AgentError`, ``incomplete_response``).
- The conversation is bounded: only the newest :data:`KEEP_SCREENSHOTS` images stay
  in ``messages``; older ones are replaced by a short text.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, cast

import anthropic

from deskpod.adapters import anthropic as adapter
from deskpod.adapters._common import ShownScreen
from deskpod.agents._common import (
    MAX_REJECTED_CALLS,
    MAX_RETRIES,
    REQUEST_TIMEOUT_S,
    SYSTEM_PROMPT,
    api_key,
    bad_response,
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

__all__ = [
    "AnthropicAgent",
    "DEFAULT_API_KEY_ENV",
    "KEEP_SCREENSHOTS",
    "MAX_IMAGE_PIXELS",
    "MAX_LONG_EDGE_PX",
    "OLDER_TOOL_MODEL_PREFIXES",
    "TOOLSET_MODEL_PREFIXES",
    "tool_type_for",
]

DEFAULT_API_KEY_ENV = "ANTHROPIC_API_KEY"
"""The environment variable holding the key when the spec names none."""

KEEP_SCREENSHOTS = 3
"""Images kept in the conversation (the newest); older ones become a text placeholder."""

OLDER_TOOL_MODEL_PREFIXES = (
    "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1", "claude-sonnet-4-0", "claude-opus-4-0",
    "claude-sonnet-4-2025", "claude-opus-4-2025", "claude-3-7-sonnet",
)
"""Models that take ``computer_20250124`` (the guide's beta-header table); others get ``computer_20251124``."""

MAX_LONG_EDGE_PX = 1568
"""Longest image edge Claude sees unscaled (pixels); above it the API downsizes the image."""

MAX_IMAGE_PIXELS = 1_150_000
"""About the most pixels Claude sees unscaled; above it the API downsizes the image."""

_VENDOR = "anthropic"
_OMITTED = {"type": "text", "text": "[older screenshot removed]"}
_logger = logging.getLogger(__name__)


TOOLSET_MODEL_PREFIXES = (
    "claude-opus-5", "claude-sonnet-5", "claude-haiku-5", "claude-mythos", "claude-fable",
)
"""Models that take only the computer toolset (the ``anthropic`` SDK 2.15's newest model names)."""


def tool_type_for(model: str, requested: str = "auto") -> str:
    """The computer-tool version for ``model`` (``requested``, unless ``"auto"``): see
    :data:`OLDER_TOOL_MODEL_PREFIXES` and :data:`TOOLSET_MODEL_PREFIXES`."""
    if requested != "auto":
        return requested
    if model.startswith(OLDER_TOOL_MODEL_PREFIXES):
        return adapter.TOOL_TYPE
    return adapter.TOOLSET_TYPE if model.startswith(TOOLSET_MODEL_PREFIXES) else adapter.ZOOM_TOOL_TYPE


class AnthropicAgent:
    """The Messages API computer-tool loop (see the module docstring for the wire shapes).

    Args:
        spec: the task file's ``agent:`` block (``type: anthropic``).
        display: the model space, pixels: the space of every coordinate this agent
            proposes, and the size of every screenshot it is given unless the daemon
            scaled one down (the tool definition declares the size actually sent, and
            the model's points are mapped back; see the module). A size the API would
            downscale (long edge over
            :data:`MAX_LONG_EDGE_PX` or over about :data:`MAX_IMAGE_PIXELS` pixels)
            is logged as a warning: the model's coordinates would then be off.
        max_retries: retries of the SDK after a connection error, 408, 409, 429 or 5xx.
        timeout_s: seconds one HTTP request may take.
        keep_screenshots: images kept in the conversation (at least 1).

    Raises:
        AgentError: the API key's environment variable is unset or empty, or
            ``spec.computer_configs`` is not a valid toolset configuration.
    """

    def __init__(self, spec: ModelAgentSpec, display: Size, *, max_retries: int = MAX_RETRIES,
                 timeout_s: float = REQUEST_TIMEOUT_S, keep_screenshots: int = KEEP_SCREENSHOTS) -> None:
        self._spec = spec
        self._display = display
        self._key = api_key(spec, DEFAULT_API_KEY_ENV)
        self._tool_type = tool_type_for(spec.model, spec.computer_tool)
        self._toolset = self._tool_type == adapter.TOOLSET_TYPE
        try:
            self._toolset_entry = adapter.toolset_definition(spec.computer_configs) if self._toolset else None
            self._enabled = adapter.enabled_members(spec.computer_configs)
        except DeskpodError as exc:
            raise AgentError(f"agent.computer_configs: {exc.message}", detail={"reason": "bad_config",
                                                                                "vendor": _VENDOR}) from exc
        self._beta = adapter.BETA_FLAGS.get(self._tool_type)
        self._keep = max(1, keep_screenshots)
        if max(display.width, display.height) > MAX_LONG_EDGE_PX or display.width * display.height > MAX_IMAGE_PIXELS:
            _logger.warning("model space %dx%d is larger than Claude sees unscaled; declare a smaller model_size "
                            "(e.g. 1280x800) or clicks may miss", display.width, display.height)
        self._client = anthropic.AsyncAnthropic(api_key=self._key, base_url=spec.base_url, max_retries=max_retries,
                                                timeout=timeout_s)
        self._messages: list[dict[str, Any]] = []
        self.tokens_used = 0
        """Tokens the responses so far said they used (their ``usage``, :func:`usage_tokens`)."""
        self._uses: deque[dict[str, Any]] = deque()
        self._pending: dict[str, Any] | None = None
        self._results: list[dict[str, Any]] = []
        self._shown = ShownScreen()
        """The newest screenshot the model was sent: the image its points are pixels of."""
        self._results_shot: Observation | None = None
        """The observation whose screenshot is the newest image in ``_results`` (``None``: none)."""
        self._intent = ""
        self._done: Done | None = None

    async def propose(self, observation: Observation, last: StepOutcome | None) -> Proposal | Done:
        """Report ``last`` to the model when it answers a ``tool_use``, and return the next step.

        Args:
            observation: the current screen (screenshot in the model space).
            last: the outcome of this agent's previous proposal (``None`` at the first call).

        Returns:
            The next ``tool_use`` as a :class:`Proposal`, or :class:`Done` with the
            model's final text when it stops using the tool (and at every call after).

        Raises:
            AgentError: the vendor failed or answered an unexpected shape, the
                observation has no screenshot, or the model's tool uses were refused
                :data:`~deskpod.agents._common.MAX_REJECTED_CALLS` times in a row.
        """
        if self._done is not None:
            return self._done
        screenshot = screenshot_of(observation, _VENDOR)
        if self._pending is not None:
            self._answer(self._pending, last, observation)
            self._pending = None
        for _ in range(MAX_REJECTED_CALLS + 1):
            while self._uses:
                use = self._uses.popleft()
                use_id = str(use.get("id", ""))
                member = self._toolset and adapter.is_member_use(use)
                if not member and (self._toolset or use.get("name") != "computer"):
                    self._results.append(adapter.text_error_result(use_id, f"unknown tool {use.get('name')!r}"))
                    continue
                try:
                    planned = (adapter.member_actions(str(use.get("name")), use.get("input"),  # type: ignore[arg-type]
                                                      self._enabled) if member
                               else adapter.to_actions(use.get("input")))  # type: ignore[arg-type]
                    actions = self._shown.to_model(planned, self._display)
                except DeskpodError as exc:
                    self._results.append(adapter.error_result(use_id, exc))
                    continue
                self._pending = use
                return Proposal(actions=actions, intent=self._intent)
            if not self._messages:
                content = [{"type": "text", "text": self._spec.instructions}, adapter.image_block(screenshot)]
                newest: Observation | None = observation
            else:
                content, newest = self._results, self._results_shot
                last_content = content[-1].get("content") if content else None
                if not isinstance(last_content, list) or not any(b.get("type") == "image" for b in last_content):
                    content, newest = [*content, adapter.image_block(screenshot)], observation
            if newest is not None:
                self._shown.returned(newest)
            reply = await self._create({"role": "user", "content": content})
            self._results, self._results_shot = [], None
            blocks = reply["content"]
            self._uses.extend(b for b in blocks if b.get("type") == "tool_use")
            self._intent = "\n".join(b["text"] for b in blocks
                                     if b.get("type") == "text" and isinstance(b.get("text"), str)).strip()
            if not self._uses:
                if reply.get("stop_reason") == "max_tokens":
                    raise AgentError("anthropic message cut at max_tokens before any tool_use; raise "
                                     "max_output_tokens", detail={"reason": "incomplete_response", "vendor": _VENDOR})
                self._done = Done(claim=self._intent)
                return self._done
        raise AgentError(f"the model's tool uses were refused {MAX_REJECTED_CALLS} times in a row",
                         detail={"reason": "too_many_rejected_calls", "vendor": _VENDOR})

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    def _answer(self, use: dict[str, Any], last: StepOutcome | None, observation: Observation) -> None:
        use_id = str(use.get("id", ""))
        if last is not None and last.status == "ok":
            seen = last.observation
            if seen.cursor is not None:  # cursor_position answers in the pixels of the image the model saw
                seen = seen.model_copy(update={"cursor": self._shown.to_image(seen.cursor, self._display)})
            result = (adapter.member_result(use_id, str(use.get("name")), use["input"], seen) if self._toolset
                      else adapter.tool_result(use_id, str(use["input"].get("action")), seen))
            self._results.append(result)
            if seen.screenshot is not None and adapter.image_block(seen.screenshot) in result["content"]:
                self._results_shot = seen
            return
        self._results.append(adapter.text_error_result(
            use_id, outcome_note(last) if last is not None else "No outcome was reported."))
        while self._uses:
            skipped = self._uses.popleft()
            self._results.append(adapter.text_error_result(
                str(skipped.get("id", "")), "Skipped: an earlier action of this turn was not executed."))

    async def _create(self, user: dict[str, Any]) -> dict[str, Any]:
        messages = [*self._messages, user]
        _drop_old_images(messages, self._keep)
        tool = (self._toolset_entry if self._toolset_entry is not None
                else adapter.tool_definition(self._shown.image_size(self._display), self._tool_type))
        try:
            if self._beta is None:  # the toolset: generally available, no beta flag
                raw: Any = await self._client.messages.with_raw_response.create(
                    model=self._spec.model, max_tokens=self._spec.max_output_tokens, system=SYSTEM_PROMPT,
                    tools=[cast(Any, tool)], messages=cast(Any, messages))
            else:
                raw = await self._client.beta.messages.with_raw_response.create(
                    model=self._spec.model, max_tokens=self._spec.max_output_tokens, system=SYSTEM_PROMPT,
                    tools=[cast(Any, tool)], messages=cast(Any, messages), betas=[self._beta])
            body = raw.http_response.json()
        except anthropic.APIStatusError as exc:
            raise vendor_failure(_VENDOR, exc, self._key, exc.status_code) from exc
        except anthropic.APIConnectionError as exc:
            raise vendor_failure(_VENDOR, exc, self._key, None) from exc
        except anthropic.AnthropicError as exc:
            raise bad_response(_VENDOR, scrubbed(exc, self._key)) from exc
        except ValueError as exc:
            raise bad_response(_VENDOR, "the body is not JSON") from exc
        if not isinstance(body, dict) or body.get("type") != "message" or not isinstance(body.get("content"), list):
            raise bad_response(_VENDOR, "a message needs type 'message' and a 'content' list")
        blocks = [b for b in body["content"] if isinstance(b, dict)]
        if any(b.get("type") == "tool_use" and not isinstance(b.get("input"), dict) for b in blocks):
            raise bad_response(_VENDOR, "a tool_use block needs an 'input' object")
        body["content"] = blocks
        self.tokens_used += usage_tokens(body)
        self._messages = [*messages, {"role": "assistant", "content": blocks}]
        return body


def _drop_old_images(messages: list[dict[str, Any]], keep: int) -> None:
    """Replace all but the newest ``keep`` image blocks (top level or inside a ``tool_result``)."""
    seen = 0

    def visit(blocks: list[dict[str, Any]]) -> None:
        nonlocal seen
        for i in reversed(range(len(blocks))):
            block = blocks[i]
            if block.get("type") == "image":
                seen += 1
                if seen > keep:
                    blocks[i] = dict(_OMITTED)
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                visit(block["content"])

    for message in reversed(messages):
        if isinstance(message.get("content"), list):
            visit(message["content"])
