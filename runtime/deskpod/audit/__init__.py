"""``deskpod audit``: check a running sandbox container against deskpod's hardening claims.

Two sources of evidence, each judged by pure functions so the rules are testable
without Docker:

- **configuration** (:func:`~deskpod.audit.config_rules.config_checks`): the container's inspect data from the
  Docker API: capabilities, seccomp profile, read-only root, limits, privileged
  mode, host namespaces, devices, mounts, networks, published ports (the
  applicable CIS Docker Benchmark §5 checks, and stricter ones).
- **inside** (:func:`~deskpod.audit.inside_rules.inside_checks`): facts gathered by a stdlib-only probe
  (:mod:`deskpod.audit.probes`) run in the container with ``exec_run`` and a fixed
  argv, as the container's user: every process's uid, capabilities,
  NoNewPrivs and seccomp mode; setuid/setgid files; the writable paths; blocked
  syscalls; direct TCP/UDP/ICMP egress to the project's other containers; DNS;
  the egress proxy's refusals; listening sockets; Chromium's renderer sandbox; and, by a
  second probe (:mod:`deskpod.audit.untrusted_probe`, judged by
  :func:`~deskpod.audit.inside_rules.untrusted_checks`), an untrusted X client made as for a
  display grant: no XTEST, no pixels of the root window, its cookie refused once revoked.
- **the reset** (:func:`~deskpod.audit.reset_rules.reset_checks`): every mount the probe
  found writable lies in a folder the daemon's reset empties (``DESKPOD_RESET_WIPE`` from the
  container's environment, else its default), so no browser store outlives a reset.
- **the agent's zone** (:func:`~deskpod.audit.zone.workspace_checks`, :func:`~deskpod.audit.zone.zone_probe_checks`,
  :func:`~deskpod.audit.zone.reaped_check`, :func:`~deskpod.audit.zone.tmpfs_within_memory`): the workspace container
  that belongs to the sandbox (same compose project, or same ``deskpod.sandbox``
  label): its configuration, a probe run there as uid 1001 that tries
  ``/proc/<pid>/mem`` and ``environ`` of every process it sees, a hidden process
  started through the workspace runner and looked for with ``docker top`` after
  the request, an allowlisted domain through the egress proxy without and with a
  guessed credential (:func:`~deskpod.audit.zone.grant_check`, refused without an egress grant), the
  display's port (the daemon's X gate) without a grant: setups without and with a guessed cookie,
  and idle connections beyond its bound (:func:`~deskpod.audit.zone.display_gate_checks`), and
  each container's tmpfs + shm sizes against its memory limit.
- **the host** (:func:`audit_host_unreachable`, check ``host_unreachable``): a
  listener the audit opens on the Docker host, probed from inside the container
  (:data:`~deskpod.audit.probes.HOST_PROBE_SOURCE`) at every gateway address of its
  networks over TCP, UDP and ICMP echo; works on any container with ``python3``.

The probe only ever contacts the project's own containers and loopback.

Layout: :mod:`~deskpod.audit.report` (the result and its table),
:mod:`~deskpod.audit.config_rules`, :mod:`~deskpod.audit.inside_rules` and
:mod:`~deskpod.audit.reset_rules` (the pure rules),
:mod:`~deskpod.audit.zone` (the agent's zone), :mod:`~deskpod.audit.host` (``host_unreachable``),
:mod:`~deskpod.audit.engine` (the Docker connection and its errors),
:mod:`~deskpod.audit.probes`, :mod:`~deskpod.audit.reap_probe`, :mod:`~deskpod.audit.gate_probe` and
:mod:`~deskpod.audit.untrusted_probe` (the probes' source text, run in the containers) and
:mod:`~deskpod.audit.gather` (finding the sandbox and running every check).

Typical use::

    report = audit_sandbox("deskpod_sandbox_1")
    print(render_table(report))
    sys.exit(0 if report.ok else 1)
"""

from __future__ import annotations

from deskpod.audit.host import audit_host_unreachable
from deskpod.audit.report import AuditReport, render_table
from deskpod.audit.gather import audit_sandbox

__all__ = ["AuditReport", "audit_host_unreachable", "audit_sandbox", "render_table"]
