"""The ``host_unreachable`` check: a listener opened on the Docker host, probed from inside a
container at every gateway address of its networks (:func:`audit_host_unreachable`)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from deskpod.audit.engine import _client, _docker_errors
from deskpod.audit.report import Check, _summ
from deskpod.audit.probes import HOST_PROBE_SOURCE
from deskpod.errors import AuditError

__all__ = [
    "HOST_ADDRESS_LIMIT",
    "HostListener",
    "PROBE_TIMEOUT_S",
    "audit_host_unreachable",
    "host_gateways",
    "host_unreachable_check",
    "local_ipv4_addresses",
]

PROBE_TIMEOUT_S = 2.0
"""Per-connection timeout of the inside network probes, seconds."""


class HostListener:
    """TCP and UDP listeners on every address of the host running the audit.

    Bound to ``::`` (dual stack) where the host has IPv6, else ``0.0.0.0``, on
    ephemeral ports, like any service an operator runs on the Docker host. Threads
    record every TCP connection and UDP datagram that arrives (and answer the
    datagrams), so the audit learns from the host's side what reached it.

    Attributes:
        tcp_port: the TCP listener's port.
        udp_port: the UDP listener's port.
        nonce: the bytes the probe sends (hex text).
        arrivals: ``"tcp from ADDRESS: DATA"`` / ``"udp from ADDRESS: DATA"`` lines.
    """

    def __init__(self) -> None:
        import secrets

        self.nonce = "deskpod-audit-" + secrets.token_hex(8)
        self.arrivals: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        dual = socket.has_dualstack_ipv6()
        self._tcp = socket.create_server(("::" if dual else "0.0.0.0", 0),
                                         family=socket.AF_INET6 if dual else socket.AF_INET, dualstack_ipv6=dual)
        self._udp = socket.socket(socket.AF_INET6 if dual else socket.AF_INET, socket.SOCK_DGRAM)
        if dual:
            self._udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self._udp.bind(("::" if dual else "0.0.0.0", 0))
        self.tcp_port = int(self._tcp.getsockname()[1])
        self.udp_port = int(self._udp.getsockname()[1])
        self._tcp.settimeout(0.2)
        self._udp.settimeout(0.2)
        self._threads = [threading.Thread(target=self._serve_tcp, daemon=True),
                         threading.Thread(target=self._serve_udp, daemon=True)]

    def __enter__(self) -> HostListener:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._tcp.close()
        self._udp.close()

    def _record(self, line: str) -> None:
        with self._lock:
            self.arrivals.append(line[:200])

    def _serve_tcp(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._tcp.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
            self._record(f"tcp from {peer[0]}: {data.decode(errors='replace')}")

    def _serve_udp(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._udp.recvfrom(512)
            except (TimeoutError, OSError):
                continue
            self._record(f"udp from {peer[0]}: {data.decode(errors='replace')}")
            try:
                self._udp.sendto(data, peer)
            except OSError:
                pass

    def snapshot(self) -> list[str]:
        """The arrivals so far (a copy)."""
        with self._lock:
            return list(self.arrivals)


def host_gateways(attrs: dict[str, Any], networks: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Every gateway address of every network a container is on: addresses of the Docker host.

    Args:
        attrs: the container's inspect data.
        networks: inspect data of each of its networks, keyed by name.

    Returns:
        ``[[ip, label], ...]``, IPv4 and IPv6, without duplicates; the label names
        the network and its bridge.
    """
    out: dict[str, str] = {}
    for name, endpoint in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).items():
        net = networks.get(name) or {}
        bridge = (net.get("Options") or {}).get("com.docker.network.bridge.name") or ""
        label = f"{name} gateway" + (f" ({bridge})" if bridge else "")
        found = [endpoint.get("Gateway"), endpoint.get("IPv6Gateway")]
        found += [c.get("Gateway") for c in ((net.get("IPAM") or {}).get("Config") or [])]
        for ip in found:
            ip = str(ip or "").split("/", 1)[0]
            if ip and ip not in out:
                out[ip] = label
    return [[ip, label] for ip, label in out.items()]


HOST_ADDRESS_LIMIT = 16
"""At most this many of the host's own IPv4 addresses are probed besides the gateways."""


def local_ipv4_addresses(fib_trie: str) -> list[str]:
    """The host's own IPv4 addresses (loopback excluded), read from ``/proc/net/fib_trie``.

    Args:
        fib_trie: the text of ``/proc/net/fib_trie``.

    Returns:
        Each address marked ``/32 host LOCAL``, once, in order, at most
        :data:`HOST_ADDRESS_LIMIT`.
    """
    found: list[str] = []
    last = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:].strip()
        elif text.startswith("/32 host LOCAL") and last and not last.startswith("127.") and last not in found:
            found.append(last)
    return found[:HOST_ADDRESS_LIMIT]


def host_unreachable_check(targets: list[list[str]], facts: dict[str, Any] | None, arrivals: list[str],
                           control_ok: list[str]) -> Check:
    """Judge the ``host_unreachable`` probe.

    Args:
        targets: the gateway addresses tried (:func:`host_gateways`).
        facts: the probe's output (``{"tcp", "udp", "icmp"}``), or ``None`` if it did not run.
        arrivals: what the host listener saw during the probe (:class:`HostListener`).
        control_ok: the gateway addresses at which the audit itself reached its
            listener (proof that it listens on the Docker host).

    Returns:
        The check: ``fail`` if anything answered or arrived, or the probe did not
        run; ``warn`` if there was no gateway to try or the listener is not on the
        Docker host (nothing shown); else ``pass``.
    """
    title = "the Docker host is unreachable: nothing answers on any gateway address (TCP, UDP, ICMP)"
    if facts is None:
        return Check("host_unreachable", title, "fail", "the probe did not run", "inside")
    leaks = [f"{kind} {r[1]}:{r[2]} {r[3]}" for kind in ("tcp", "udp", "icmp") for r in facts.get(kind) or []
             if not str(r[3]).startswith("blocked")]
    leaks += [f"host saw {a}" for a in arrivals]
    if leaks:
        return Check("host_unreachable", title, "fail",
                     _summ(leaks) + " (host firewall off or missing? see DESKPOD_HOST_FIREWALL)", "inside")
    if not targets:
        return Check("host_unreachable", title, "warn", "no gateway address to try", "inside")
    if not control_ok:
        return Check("host_unreachable", title, "warn",
                     "the audit could not reach its own listener at the gateway addresses: it does not run on "
                     "the Docker host, so nothing was shown", "inside")
    tried = sum(len(facts.get(k) or []) for k in ("tcp", "udp", "icmp"))
    gws = [t[0] for t in targets if t[1] != "host address"]
    others = len(targets) - len(gws)
    return Check("host_unreachable", title, "pass",
                 f"gateways {', '.join(gws)}" + (f" and {others} other host addresses" if others else "")
                 + f", {tried} TCP/UDP/ICMP probes: nothing answered, nothing arrived", "inside")


def audit_host_unreachable(container: Any, client: Any | None = None) -> Check:
    """Show, on a running container of the stack, that it cannot reach the Docker host.

    Opens a :class:`HostListener` on this host, runs
    :data:`~deskpod.audit.probes.HOST_PROBE_SOURCE` in the container (as its user,
    fixed argv) against every gateway address of its networks, then connects to
    the listener from this host at those addresses as a control. Any container with
    ``python3`` can be audited this way (the sandbox, a workspace container).

    Args:
        container: a ``docker.models.containers.Container``.
        client: a ``docker.DockerClient``; ``None`` connects with ``docker.from_env()``.

    Returns:
        The ``host_unreachable`` :class:`Check`.

    Raises:
        AuditError: Docker failed while inspecting or running the probe, or the
            host listener could not be opened.
    """
    client = _client(client)
    with _docker_errors(f"inspecting {container.name}"):
        container.reload()
        attrs: dict[str, Any] = container.attrs
        networks = {name: client.networks.get(net.get("NetworkID") or name).attrs
                    for name, net in ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).items()}
    targets = host_gateways(attrs, networks)
    gateways = [ip for ip, _label in targets]
    # The host's other addresses too: a rule that covers only the gateway is not enough.
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as f:
            local = local_ipv4_addresses(f.read())
    except OSError:
        local = []
    targets += [[ip, "host address"] for ip in local if ip not in gateways]
    try:
        listener = HostListener()
    except OSError as exc:
        raise AuditError(f"cannot open the host listener: {exc}", detail={"reason": "listener"}) from exc
    with listener:
        params = {"targets": targets, "tcp_port": listener.tcp_port, "udp_port": listener.udp_port,
                  "nonce": listener.nonce, "timeout_s": PROBE_TIMEOUT_S}
        with _docker_errors(f"running the host probe in {container.name}"):
            result = container.exec_run(["python3", "-c", HOST_PROBE_SOURCE, json.dumps(params)], demux=True)
        time.sleep(0.3)  # a datagram in flight still counts
        arrivals = listener.snapshot()
        control_ok = []
        for ip in gateways:
            try:
                with socket.create_connection((ip, listener.tcp_port), timeout=1.0) as s:
                    s.sendall(b"control")
                control_ok.append(ip)
            except OSError:
                continue
    stdout = result.output[0] if isinstance(result.output, tuple) else result.output
    try:
        facts = json.loads((stdout or b"").decode())
        if not isinstance(facts, dict):
            raise ValueError("not an object")
    except ValueError:
        facts = None
    return host_unreachable_check(targets, facts, arrivals, control_ok)
