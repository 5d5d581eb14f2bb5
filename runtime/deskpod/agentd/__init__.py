"""agentd: the daemon inside the sandbox. It executes actions; it never decides policy.

Subpackages: :mod:`.display` (the X server: input, capture, damage, live streams),
:mod:`.browser` (Chromium over DevTools), :mod:`.workspace` (the code agents' files,
commands and tests). Above them: :mod:`.config` (environment), :mod:`.session` (Xvfb,
window manager, Chromium), :mod:`.standby` (the next desktop, started early),
:mod:`.settle` (when the screen has settled), :mod:`.screen_check` (the screen an
action was planned on), :mod:`.executor` (the serial executor), :mod:`.observe` (the
observation after a request), :mod:`.ipc` (IPC objects left behind at a reset) and
:mod:`.app` (the websocket server).

The workspace tools run in another container: :mod:`.runner` is the workspace
container's PID 1 (uid 1001) that serves them, :mod:`.runner_wire` the models of
its wire, :mod:`.workspace.runner_client` agentd's side, which forwards every
workspace request there.
"""

__all__: list[str] = []
