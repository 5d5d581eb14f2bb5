"""The X gate probe ``deskpod audit`` runs in the workspace container as the agent's uid (stdlib only).

Like :mod:`deskpod.audit.probes`, this module is never imported for its code: its *source
text* is run as an agent's command would run (``python3 -c SOURCE HOST PORT COUNT``, a fixed
argv) to check, from the agent's zone and with no display grant live, that the display's
port answers a connection setup without a cookie and one with a guessed cookie with a
refusal, and that it holds at most its bound of idle connections.

Its output, one JSON object:

- ``no_cookie``, ``guessed_cookie``: the answer to each setup: ``"refused: <reason>"``,
  ``"accepted"``, ``"authenticate"``, ``"closed"`` (no answer) or ``"unreachable: <errno>"``.
- ``flood``: ``{"opened": n, "closed": k}``: of ``COUNT`` connections opened at once and sent
  nothing, how many connected and how many the other end had closed
  :data:`FLOOD_WAIT_S` seconds later.
- ``after``: the answer to one more setup without a cookie once the flood's connections
  were closed (the port still answers).

Nothing here is executed by importing it.
"""

from __future__ import annotations

from deskpod.audit.x_wire import X_WIRE_SOURCE

__all__ = ["FLOOD_WAIT_S", "GATE_PROBE_SOURCE"]

FLOOD_WAIT_S = 1.5
"""How long the probe holds its idle connections before counting the closed ones, seconds:
well under the gate's setup timeout (5 s), so only the connections beyond its bound are closed."""

GATE_PROBE_SOURCE = r'''
import errno, json, os, socket, struct, sys, time
''' + X_WIRE_SOURCE + r'''
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
wait_s = float(sys.argv[4])
T = 5.0

def x_setup(cookie=b""):
    try:
        sock = socket.create_connection((host, port), timeout=T)
    except OSError as e:
        return "unreachable: " + (errno.errorcode.get(e.errno or 0) or type(e).__name__)
    with sock:
        try:
            sock.sendall(setup_request(cookie))
            return setup_answer(*setup_reply(sock))
        except (OSError, ConnectionError):
            return "closed"

out = {"no_cookie": x_setup(), "guessed_cookie": x_setup(os.urandom(16))}
held = []
for _ in range(count):
    try:
        held.append(socket.create_connection((host, port), timeout=T))
    except OSError:
        pass
time.sleep(wait_s)
closed = 0
for sock in held:
    sock.setblocking(False)
    try:
        closed += sock.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
    sock.close()
out["flood"] = {"opened": len(held), "closed": closed}
time.sleep(0.2)
out["after"] = x_setup()
print(json.dumps(out))
'''
