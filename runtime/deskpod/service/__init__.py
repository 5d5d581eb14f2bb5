"""``deskpod serve``: the controller as a websocket service, with its one wire contract.

Modules: :mod:`.messages` (the wire: every message both ways, the JSON Schemas'
source), :mod:`.client` (``ControllerClient`` and ``SyncControllerClient``, which
import the messages and never the server), :mod:`.server` (sessions, approvals, the
FastAPI app) and :mod:`.session_view` (a session as a console shows it). Import the
modules themselves: this package imports nothing eagerly, so that neither a client nor
the daemon's side loads FastAPI or the server.
"""

__all__: list[str] = []
