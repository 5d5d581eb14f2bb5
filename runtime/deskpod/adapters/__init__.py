"""Vendor action formats ↔ deskpod's protocol.

- :mod:`.openai`: OpenAI's computer-use ``computer_call`` items in, ``computer_call_output`` out.
- :mod:`.anthropic`: Anthropic's computer-tool ``tool_use`` inputs in, ``tool_result`` out.

Conversion is pure; ``execute`` runs a call against a :class:`~deskpod.client.SandboxClient`.
Choose the model space with ``SandboxClient.configure``; a vendor's coordinates are the
pixels of the screenshot the adapter last returned, which is the model space unless the
daemon scaled the image down to fit the vendors' limits. ``execute`` maps them to the
model space and binds the call's pointer actions to that screenshot, so a click planned
on a screen that has since shifted is refused (``screen_changed``) instead of landing on
whatever moved under it (:mod:`._common`); declare ``display_size(client)`` as the tool's
display size (Anthropic's ``display_width_px`` / ``display_height_px``). The daemon checks
and scales every point.
"""

from deskpod.adapters import anthropic, openai

__all__ = ["anthropic", "openai"]
