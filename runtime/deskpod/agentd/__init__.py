"""agentd: the daemon inside the sandbox. It executes actions; it never decides policy.

Subpackages: :mod:`.display` (the X server: input, capture, damage, live streams),
:mod:`.browser` (Chromium over DevTools), :mod:`.workspace` (the code agents' files,
commands and tests). Above them: :mod:`.config` (environment), :mod:`.session` (Xvfb,
window manager, Chromium), :mod:`.baseline` (the home folder's files a reset puts
back), :mod:`.standby` (the next desktop, started early), :mod:`.settle` (when the
screen has settled), :mod:`.screen_check` (the screen an action was planned on),
:mod:`.batch` (one request's actions), :mod:`.screenshots` (encoding what the agent
sees), :mod:`.executor` (the serial executor), :mod:`.wait_for` (the ``wait_for`` action's
condition), :mod:`.observe` (the observation after
a request), :mod:`.ipc` (IPC objects left behind at a reset), :mod:`.daemon` (the parts
and their life), :mod:`.connection` (one control connection) and :mod:`.app` (the
HTTP and websocket routes).

The workspace tools run in another container: :mod:`.runner` is the workspace
container's PID 1 (uid 1001) that serves them, :mod:`.runner_wire` the models of
its wire, :mod:`.workspace.runner_client` agentd's side, which forwards every
workspace request there.
"""

__all__: list[str] = []
