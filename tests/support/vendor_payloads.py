"""Recorded vendor payloads the adapter tests are built on (shapes of the newest SDKs on PyPI).

Checked on 2026-12-01 against ``anthropic`` 2.15.0 (``anthropic.types.ComputerToolset20260801Param``,
``ComputerToolsetConfigsParam``, ``anthropic.types.beta.BetaComputer*Input`` and the
``BetaComputer*ToolUseBlock`` union discriminated by ``name``, ``toolset_name: "computer"``) and
``openai`` 3.57.0 (``openai.types.responses.ResponseComputerToolCall``: ``ActionMove.keys`` and
``ActionDrag.keys`` "The keys being held while moving / dragging the mouse", batched ``actions``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ANTHROPIC_TOOLSET_ENTRY", "ANTHROPIC_TOOLSET_MESSAGE", "OPENAI_KEYS_CALL"]

ANTHROPIC_TOOLSET_ENTRY: dict[str, Any] = {
    "type": "computer_toolset_20260801",
    "configs": {"zoom": {"enabled": False}, "hold_key": {"enabled": True, "defer_loading": False}},
}
"""A ``tools`` entry: one toolset, per-member overrides (zoom off)."""

ANTHROPIC_TOOLSET_MESSAGE: dict[str, Any] = {
    "id": "msg_01Ts", "type": "message", "role": "assistant", "model": "claude-opus-5",
    "content": [
        {"type": "text", "text": "I'll search for penguin."},
        {"type": "tool_use", "id": "toolu_01A", "name": "left_click", "toolset_name": "computer",
         "input": {"coordinate": [640, 400]}},
        {"type": "tool_use", "id": "toolu_01B", "name": "type", "toolset_name": "computer",
         "input": {"text": "penguin"}},
        {"type": "tool_use", "id": "toolu_01C", "name": "key", "toolset_name": "computer",
         "input": {"text": "Return", "repeat": 1}},
        {"type": "tool_use", "id": "toolu_01D", "name": "scroll", "toolset_name": "computer",
         "input": {"coordinate": [640, 500], "scroll_direction": "down", "scroll_amount": 3, "text": "shift"}},
        {"type": "tool_use", "id": "toolu_01E", "name": "screenshot", "toolset_name": "computer", "input": {}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 1500, "output_tokens": 120},
}
"""A toolset turn: several member calls in one message."""

OPENAI_KEYS_CALL: dict[str, Any] = {
    "type": "computer_call", "id": "cu_68a1", "call_id": "call_kz1", "status": "completed",
    "pending_safety_checks": [],
    "actions": [
        {"type": "move", "x": 300, "y": 200, "keys": ["SHIFT"]},
        {"type": "drag", "path": [{"x": 300, "y": 200}, {"x": 500, "y": 260}], "keys": ["CTRL", "SHIFT"]},
        {"type": "click", "button": "left", "x": 500, "y": 260, "keys": ["CTRL"]},
    ],
}
"""A GA ``computer`` tool call whose move and drag hold keys."""
