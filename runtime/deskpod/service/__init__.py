"""``deskpod serve``: the controller as a websocket service, with its one wire contract.

Modules, from the bottom up: :mod:`.messages` (the wire: every message both ways, the
source of its JSON Schemas), :mod:`.client` (``ControllerClient`` and
``SyncControllerClient``: they import the messages and never the server; their messages are
validated before they go out by :mod:`.outbound`), :mod:`.attach`
(``attach()``: the client connected to the compose stack's service on this host, its port
and token read from the stack's ``.env``),
:mod:`.session_view` (a session as a console shows it), :mod:`.server` (sessions,
approvals, connections, the FastAPI app), :mod:`.live_hub` (one live stream per sandbox,
fanned out to its viewers) and :mod:`.console` (the web console: its pages, sign-in, live
view and run history). Import the modules themselves: this package imports nothing
eagerly, so that a client loads neither FastAPI nor the server.
"""

__all__: list[str] = []
