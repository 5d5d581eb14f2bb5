"""The reap probe ``deskpod audit`` runs through the workspace runner, and the call that asks
the runner for it.

Like :mod:`deskpod.audit.probes`, this module is never imported for its code: the probe's
*source text* (stdlib only) is run as an agent's command (``python3 -c SOURCE MARK``, a fixed
argv) to check that the processes a command leaves behind, however they hide, are gone once it
has answered; the call's is run in the sandbox container, whose address alone the runner answers.

Nothing here is executed by importing it.
"""

from __future__ import annotations

__all__ = ["REAP_PROBE_SOURCE", "RUNNER_CALL_SOURCE"]

REAP_PROBE_SOURCE = r'''
import ctypes, os, select, sys, time
mark = sys.argv[1]
ready_r, ready_w = os.pipe()
def detach():
    if os.fork():
        return False
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    os.write(ready_w, b"1")
    return True
if detach():
    while True:
        time.sleep(0.05)
if detach():
    while True:  # the pid hopper: a new pid every 0.5 ms
        if os.fork():
            os._exit(0)
        time.sleep(0.0005)
started, deadline = b"", time.monotonic() + 20
while len(started) < 2 and select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))[0]:
    started += os.read(ready_r, 2 - len(started))
print("hidden" if len(started) == 2 else "not started")
'''
"""Run through the workspace runner as an agent's command (``argv[1]``: a marker put in
every process's command line): a non-dumpable process that left its session twice
(setsid + double fork) and a pid hopper. Prints ``hidden`` once both have started (each
says so through a pipe; ``not started`` after 20 s without), and answers then."""

RUNNER_CALL_SOURCE = r'''
import sys
from deskpod.agentd.runner import call
from deskpod.agentd.runner_wire import RunnerWorkspaceRequest
from deskpod.protocol import ExecRequest
host, port, probe, mark = sys.argv[1:5]
request = ExecRequest(type="exec", id="audit", argv=["python3", "-c", probe, mark], timeout_s=30)
print(call(host, int(port), RunnerWorkspaceRequest(request=request), 60.0).model_dump_json())
'''
"""Run in the sandbox container, agentd's (the workspace runner answers that address alone):
ask the runner at ``host:port`` to run ``probe`` with ``mark``, print its reply's JSON."""
