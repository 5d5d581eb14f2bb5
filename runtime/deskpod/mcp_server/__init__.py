"""``deskpod mcp``: an MCP server whose tools are actions of a run under the controller's policy.

:mod:`.content` (tool results, untrusted text), :mod:`.runs` (one session = one run),
:mod:`.sessions` (what a session runs, the open sessions' runs), :mod:`.server` (the computer
tools, the MCP server), :mod:`.steps` (a GUI tool's step and its result), :mod:`.browser_tools`
(the browser tools), :mod:`.window_tools` (the desktop's windows), :mod:`.code_tools` (the
workspace tools), :mod:`.page_logs` (the console and network tools' text), :mod:`.hints` (every
tool's title and annotations), :mod:`.app` (the embedded controller, stdio or HTTP with its
bearer check), :mod:`.handback` (a sandbox handed back by a detached helper), :mod:`.sources`
(where a session's sandbox comes from and how it goes back). Needs the ``mcp`` extra.
"""

__all__: list[str] = []
