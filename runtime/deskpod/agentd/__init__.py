"""agentd: the daemon inside the sandbox. It executes actions; it never decides policy.

Modules: :mod:`.config` (environment), :mod:`.session` (Xvfb, window manager,
Chromium), :mod:`.xinput` (XTEST input), :mod:`.capture` (screenshots),
:mod:`.cdp` (DevTools), :mod:`.executor` (the serial executor), :mod:`.workspace`
(the code agents' files, exec and tests), :mod:`.app` (the websocket server).

The workspace tools run in another container: :mod:`.runner` is the workspace
container's PID 1 (uid 1001) that serves them, :mod:`.runner_wire` the models of
its wire, :mod:`.runner_client` agentd's side, which forwards every workspace
request there.
"""

__all__: list[str] = []
