"""agentd: the daemon inside the sandbox. It executes actions; it never decides policy.

Modules: :mod:`.config` (environment), :mod:`.session` (Xvfb, window manager,
Chromium), :mod:`.xinput` (XTEST input), :mod:`.capture` (screenshots),
:mod:`.cdp` (DevTools), :mod:`.executor` (the serial executor), :mod:`.workspace`
(the code agents' files, exec and tests), :mod:`.app` (the websocket server).
"""

__all__: list[str] = []
