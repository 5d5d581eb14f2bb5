"""Vendor action formats ↔ deskpod's protocol.

- :mod:`.openai`: OpenAI's computer-use ``computer_call`` items in, ``computer_call_output`` out.
- :mod:`.anthropic`: Anthropic's computer-tool ``tool_use`` inputs in, ``tool_result`` out.

Conversion is pure; ``execute`` runs a call against a :class:`~deskpod.client.SandboxClient`.
Coordinates stay in the model space: declare the image size the model sees with
``SandboxClient.configure`` (Anthropic: the tool's ``display_width_px`` /
``display_height_px``), and the daemon checks and scales every point.
"""

from deskpod.adapters import anthropic, openai

__all__ = ["anthropic", "openai"]
