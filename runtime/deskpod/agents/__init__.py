"""Model agents: the OpenAI and Anthropic computer-use loops behind :class:`~deskpod.controller.gui_agent.GuiAgent`.

A task file's ``agent:`` block (:class:`~deskpod.controller.task.ModelAgentSpec`)
names the vendor, the model and the task; :func:`create_agent` builds the agent the
controller then asks for one :class:`~deskpod.controller.gui_agent.Proposal` per step:

- :mod:`.openai`: :class:`~deskpod.agents.openai.OpenAIAgent`, the Responses API
  computer-use loop (``computer_call`` → proposal, ``computer_call_output`` back,
  turns chained by ``previous_response_id``).
- :mod:`.anthropic`: :class:`~deskpod.agents.anthropic.AnthropicAgent`, the
  Messages API computer-tool loop (``tool_use`` → proposal, ``tool_result`` back).

Both propose coordinates in the model space and never execute anything. The model's
own coordinates are the pixels of the newest screenshot it was sent, which is the model
space unless the daemon scaled the image down to fit the vendors' limits
(:attr:`~deskpod.protocol.Screenshot.fitted` ``"downscaled"``): each request declares
the size actually sent, and each point is mapped back to the model space
(:class:`deskpod.adapters._common.ShownScreen`, as the vendor adapters do). The
controller validates, confirms and executes, then reports the
:class:`~deskpod.controller.gui_agent.StepOutcome`. The API key is read on the
controller host from the environment variable the spec names; it goes only into the
vendor SDK's auth header (``Authorization: Bearer``). Vendor failures surface as
:class:`~deskpod.errors.AgentError`.

Importing this package is cheap: the vendor SDKs (the ``agents`` extra) and the
agent modules are imported by :func:`create_agent` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deskpod.errors import AgentError

if TYPE_CHECKING:
    from deskpod.controller.gui_agent import GuiAgent
    from deskpod.controller.task import ModelAgentSpec
    from deskpod.protocol import Size

__all__ = ["create_agent"]


def create_agent(spec: ModelAgentSpec, display: Size) -> GuiAgent:
    """Build the model agent a task file's ``agent:`` block describes.

    Args:
        spec: vendor, model, task instructions, base URL, key variable (default
            ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``), output cap.
        display: the model space, pixels (the size of the screenshots the model is sent,
            unless the daemon scales one down); every coordinate the agent proposes is in it.

    Returns:
        An :class:`~deskpod.controller.gui_agent.GuiAgent`; call its ``close()`` when done.

    Raises:
        AgentError: the API key's environment variable is unset or empty
            (``reason="missing_api_key"``), or the vendor SDK is not installed
            (``reason="missing_sdk"``: install ``deskpod[agents]``).
    """
    try:
        if spec.type == "openai":
            from deskpod.agents.openai import OpenAIAgent

            return OpenAIAgent(spec, display)
        from deskpod.agents.anthropic import AnthropicAgent

        return AnthropicAgent(spec, display)
    except ModuleNotFoundError as exc:
        if exc.name not in ("openai", "anthropic"):
            raise
        raise AgentError(f"the {spec.type} agent needs the {exc.name} SDK: pip install 'deskpod[agents]'",
                         detail={"reason": "missing_sdk", "vendor": spec.type}) from exc
