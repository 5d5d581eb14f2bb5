"""``deskpod mcp``: an MCP server whose tools are actions of a run under the controller's policy.

:mod:`.content` (tool results, untrusted text), :mod:`.runs` (one session = one run),
:mod:`.server` (the tools, the MCP server, HTTP authentication), :mod:`.sources`
(where a session's sandbox comes from and how it goes back). Needs the ``mcp`` extra.
"""

__all__: list[str] = []
