"""The inside rules: judge the facts the probe (:mod:`deskpod.audit.probes`) gathered inside
the container (:func:`inside_checks`, :func:`dumpable_checks`, :func:`display_checks`), and
those of the untrusted-client probe (:mod:`deskpod.audit.untrusted_probe`,
:func:`untrusted_checks`)."""

from __future__ import annotations

import errno as _errno
from typing import Any

from deskpod.audit.report import Check, _check, _hex, _runtime_transient, _summ

__all__ = [
    "DAEMON_PORT",
    "DAEMON_PROCESSES",
    "X_AUTHORITIES",
    "X_TCP_PORT",
    "display_checks",
    "dumpable_checks",
    "inside_checks",
    "untrusted_checks",
]

DAEMON_PORT = 8765
"""The daemon's port (agentd); with :data:`X_TCP_PORT`, the only ports the sandbox may
listen on, loopback included."""

X_TCP_PORT = 6099
"""The display's TCP port (display ``:99``): the daemon's X gate, the display grant's way in
from the workspace container; open only to a live grant's untrusted cookie
(``display_requires_cookie``, ``display_grants_untrusted``)."""

X_AUTHORITIES = (("/tmp/deskpod/Xauthority", 99), ("/tmp/deskpod-seat1/Xauthority", 100))
"""The X servers' own authority files (the daemon's display and its standby's) and their
display numbers, with the default runtime folder: ``display_grants_untrusted`` tries their
cookies on :data:`X_TCP_PORT`."""

DAEMON_PROCESSES = ("init", "agentd", "Xvfb", "openbox")
"""deskpod's own processes that must be non-dumpable (``daemon_processes_non_dumpable``):
the container's init (pid 1, tini: a reset never kills it), the daemon (``python -m
deskpod.agentd``) and the processes named ``Xvfb`` and ``openbox``."""

_ALLOWED_WRITABLE_EXTRA = {"/dev/shm", "/dev/mqueue"}
_DENIED_ERRNOS = {1, 38}  # EPERM, ENOSYS: refused by seccomp or the kernel
_LISTEN_OK_LOOPBACK = ("127.", "::1")
_DOCKER_DNS = "127.0.0.11"
"""Docker's embedded DNS server: dockerd listens there (TCP and UDP, a random port) in
every container on a user-defined network; no process of the sandbox owns it."""
_SYSCALL_TITLES = {
    "mount": "mount(2) is refused",
    "unshare_mount_ns": "unshare(CLONE_NEWNS) is refused",
    "unshare_user_and_mount_ns": "unshare(CLONE_NEWUSER|CLONE_NEWNS) is refused",
    "mount_via_user_ns": "no mount namespace or mount from inside a new user namespace either",
    "keyctl": "keyctl(2) is refused (kernel keyrings)",
    "bpf": "bpf(2) is refused",
    "io_uring_setup": "io_uring_setup(2) is refused",
    "ptrace_other_process": "ptrace(PTRACE_ATTACH) of another process is refused",
}
_PROXY_TITLES = {
    "non_allowlisted_http": "the egress proxy refuses a domain off the allowlist (HTTP)",
    "non_allowlisted_connect": "the egress proxy refuses a domain off the allowlist (CONNECT)",
    "ip_literal_http": "the egress proxy refuses an IP literal (HTTP)",
    "ip_literal_connect": "the egress proxy refuses an IP literal (CONNECT)",
    "odd_port_http": "the egress proxy refuses a port other than 80/443 (HTTP :8080)",
    "odd_port_connect": "the egress proxy refuses a port other than 443 (CONNECT :22)",
}


def inside_checks(facts: dict[str, Any], declared_tmpfs: list[str]) -> list[Check]:
    """Judge the facts the probe gathered inside the container.

    Args:
        facts: the probe's JSON output (see :mod:`deskpod.audit.probes`).
        declared_tmpfs: the tmpfs mount points the container was started with.

    Returns:
        One :class:`Check` per property, in report order.
    """
    out: list[Check] = []

    def add(id: str, title: str, ok: bool, detail: str, warn: bool = False) -> None:
        out.append(_check(id, title, ok, detail, source="inside", warn=warn))

    procs: list[dict[str, Any]] = [p for p in facts.get("processes") or [] if not _runtime_transient(p.get("Name"))]
    pid1 = next((p for p in procs if p.get("pid") == 1), None)
    cns = facts.get("own_userns") or (pid1.get("userns") if pid1 else None)
    # A non-dumpable process's namespace links cannot be read (userns None): it is
    # judged with the container's own processes (its capabilities must be zero too).
    own_ns = [p for p in procs if p.get("userns") in (cns, None)]
    root = [f"{p['pid']} {p['Name']}" for p in procs if "0" in str(p.get("Uid", "")).split()]
    add("uid_non_root", "no process runs as uid 0", bool(procs) and not root and facts.get("uid") != 0,
        f"uid 0: {_summ(root)}" if root else f"{len(procs)} processes, probe uid {facts.get('uid')}")
    caps = [f"{p['pid']} {p['Name']} CapEff={p['CapEff']} CapPrm={p['CapPrm']}" for p in own_ns
            if _hex(p.get("CapEff", "")) != 0 or _hex(p.get("CapPrm", "")) != 0 or _hex(p.get("CapAmb", "0")) > 0]
    add("cap_eff_zero", "no capability held in the container's user namespace", bool(own_ns) and not caps,
        _summ(caps) if caps else f"CapEff=CapPrm=0 for all {len(own_ns)} processes")
    bnd = sorted({p.get("CapBnd", "") for p in own_ns if _hex(p.get("CapBnd", "")) != 0})
    add("cap_bounding_empty", "capability bounding set empty (nothing can be regained)", not bnd,
        f"CapBnd={bnd}" if bnd else "CapBnd=0")
    # Chromium's sandboxed children hold capabilities only inside the user namespace
    # they created; that is where Chromium's sandbox is meant to put them.
    foreign = [f"{p['pid']} {p['Name']}" for p in procs if p.get("userns") not in (cns, None)
               and not (p.get("Name") == "chromium" and "--type=" in p.get("cmd", ""))]
    add("userns_only_chromium", "only Chromium's sandboxed children live in another user namespace", not foreign,
        _summ(foreign) if foreign else "ok")
    nnp = [f"{p['pid']} {p['Name']}" for p in procs if p.get("NoNewPrivs") != "1"]
    add("no_new_privs", "NoNewPrivs=1 for every process", bool(procs) and not nnp, _summ(nnp) if nnp else "all 1")
    unfiltered = [f"{p['pid']} {p['Name']} Seccomp={p.get('Seccomp')}" for p in procs if p.get("Seccomp") != "2"]
    add("seccomp_filter_mode", "Seccomp=2 (filter) for every process", bool(procs) and not unfiltered,
        _summ(unfiltered) if unfiltered else "all 2")
    leaked = [f"{p['pid']} {p['Name']}" for p in procs if p.get("raw_token_env")]
    add("no_token_in_process_env", "no process's environment holds DESKPOD_TOKEN", not leaked,
        _summ(leaked) if leaked else "only the hash")

    browsers = [p for p in procs if p.get("Name") == "chromium" and "--type=" not in p.get("cmd", "")]
    renderers = [p for p in procs if "--type=renderer" in p.get("cmd", "")]
    no_sandbox = [p["pid"] for p in procs if "--no-sandbox" in p.get("cmd", "")]
    bad = []
    # The GPU process (WebGL's llvmpipe runs there) stays in the browser's namespaces but
    # must have Chromium's own seccomp filter: without it, Chromium only logs a warning.
    for gpu in (p for p in procs if "--type=gpu-process" in p.get("cmd", "")):
        base = int(browsers[0].get("Seccomp_filters") or 0) if browsers else 0
        if gpu.get("Seccomp") != "2" or int(gpu.get("Seccomp_filters") or 0) <= base:
            bad.append(f"{gpu['pid']}: GPU process without its own seccomp filter "
                       f"(filters={gpu.get('Seccomp_filters')})")
    for r in renderers:
        if browsers and r.get("userns") == browsers[0].get("userns"):
            bad.append(f"{r['pid']}: browser's user namespace")
        if len(str(r.get("NSpid", "")).split()) < 2:
            bad.append(f"{r['pid']}: no own PID namespace")
        # Its own filter: one more than the browser process has (Docker's, if any).
        base = int(browsers[0].get("Seccomp_filters") or 0) if browsers else 0
        if r.get("Seccomp") != "2" or (r.get("Seccomp_filters") and int(r["Seccomp_filters"]) <= base):
            bad.append(f"{r['pid']}: Seccomp={r.get('Seccomp')} filters={r.get('Seccomp_filters')}")
    add("chromium_sandbox", "Chromium renderers run sandboxed (own user+PID namespace, own seccomp filter), "
        "its GPU process with its own seccomp filter",
        bool(renderers) and not bad and not no_sandbox,
        ("no renderer running" if not renderers else
         f"--no-sandbox in {no_sandbox}" if no_sandbox else _summ(bad) if bad else
         f"{len(renderers)} renderers: own user and PID namespaces, own seccomp filter"))

    mounts = {m[0]: (m[1], m[2]) for m in facts.get("mounts") or []}
    root_opts = mounts.get("/", ("", ""))[1].split(",")
    add("root_mounted_ro", "/ is mounted read-only", "ro" in root_opts, f"/ options: {','.join(root_opts[:2])}")
    allowed = set(declared_tmpfs) | _ALLOWED_WRITABLE_EXTRA
    writable: dict[str, str] = facts.get("writable") or {}
    stray = [f"{m} (e.g. {p})" for m, p in writable.items() if m not in allowed]
    not_tmpfs = [m for m in writable if m in allowed and mounts.get(m, ("",))[0] not in ("tmpfs", "mqueue")]
    add("writable_only_tmpfs", "the user can write only to the declared tmpfs mounts",
        not stray and not not_tmpfs,
        (f"writable outside them: {_summ(stray)}" if stray else
         f"not tmpfs: {not_tmpfs}" if not_tmpfs else
         f"writable: {', '.join(sorted(writable))} ({facts.get('files_walked', 0)} files checked)"))
    setid = list(facts.get("setid_files") or [])
    add("no_setid_files", "no setuid/setgid files", not setid, _summ(setid) if setid else
        f"none in {facts.get('files_walked', 0)} files")

    sc: dict[str, int] = facts.get("syscalls") or {}
    if not sc:
        add("blocked_syscalls", "dangerous syscalls refused", False,
            str(facts.get("syscalls_error", "the probe tried no syscall")))
    for name, code in sc.items():
        label = "succeeded" if code == 0 else _errno.errorcode.get(code, f"code {code}")
        add(f"syscall_{name}", _SYSCALL_TITLES.get(name, f"{name} is refused"), code in _DENIED_ERRNOS,
            f"{name} -> {label}" + ("" if code in _DENIED_ERRNOS else " (expected EPERM or ENOSYS)"))
    raw = facts.get("raw_socket")
    add("no_raw_socket", "raw sockets refused (no CAP_NET_RAW)", raw not in (0, None),
        "raw ICMP socket opened" if raw == 0 else f"socket(AF_INET, SOCK_RAW) -> "
        f"{_errno.errorcode.get(int(raw or 0), raw)}")

    for kind, title in (("tcp", "direct TCP to the project's other containers fails"),
                        ("udp", "direct UDP to the project's other containers fails"),
                        ("icmp", "ICMP echo to the project's other containers fails")):
        results = facts.get(kind) or []
        leaks = [f"{r[0]} {r[1]}:{r[2]} {r[3]}" for r in results if not str(r[3]).startswith("blocked")]
        add(f"egress_{kind}_blocked", title, bool(results) and not leaks,
            _summ(leaks) if leaks else (f"{len(results)} targets blocked" if results else
                                        "no target: no other container of the project found"),
            warn=not results)
    dns: dict[str, str] = facts.get("dns") or {}
    resolved = [f"{n} {v}" for n, v in dns.items() if not v.startswith("failed")]
    add("dns_blocked", "names outside the sandbox's network do not resolve", bool(dns) and not resolved,
        _summ(resolved) if resolved else (f"{len(dns)} names unresolved" if dns else "no name to try"),
        warn=not dns)
    v6 = list(facts.get("ipv6_global") or [])
    add("no_ipv6", "no global IPv6 address", not v6, _summ(v6) if v6 else "none")
    ports = f":{DAEMON_PORT} and the X display :{X_TCP_PORT}"
    listening = [f"{a}:{p}" for a, p in facts.get("listening") or []
                 if not str(a).startswith(_LISTEN_OK_LOOPBACK) and p not in (DAEMON_PORT, X_TCP_PORT)]
    add("listen_loopback_only", f"only the daemon and the X display ({ports}) listen beyond loopback",
        not listening, f"also listening: {listening}" if listening else f"only {ports}")
    # Chromium speaks DevTools over the daemon's pipe: no port for it, not even on loopback.
    others = [f"{a}:{p}" for a, p in facts.get("listening") or []
              if p not in (DAEMON_PORT, X_TCP_PORT) and a != _DOCKER_DNS]
    port_flag = [str(p["pid"]) for p in procs if "--remote-debugging-port" in p.get("cmd", "")]
    add("no_devtools_port", f"no DevTools port: nothing but {ports} listens, loopback included",
        not others and not port_flag,
        (f"--remote-debugging-port in {port_flag}" if port_flag else
         f"also listening: {others}" if others else f"only {ports}"))

    proxy: dict[str, str] = facts.get("proxy") or {}
    if not proxy:
        add("proxy_configured", "an egress proxy is configured (HTTP_PROXY)", False, "no proxy in the environment")
    for name, line in proxy.items():
        add(f"proxy_refuses_{name}", _PROXY_TITLES.get(name, f"the egress proxy refuses {name}"),
            " 403 " in f" {line} ", line[:120])
    out.extend(dumpable_checks(facts))
    out.extend(display_checks(facts))
    return out


def dumpable_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge whether deskpod's own processes are non-dumpable.

    The probe (another process of the daemon's uid) stats and tries to open
    ``/proc/<pid>/mem`` of each process of :data:`DAEMON_PROCESSES`: the kernel owns a
    non-dumpable process's ``mem`` to root and refuses to open it (EACCES).

    Args:
        facts: the probe's JSON output; ``daemon_processes`` maps each role to
            ``[{"pid", "mem_owner", "mem_open"}, ...]`` (``mem_open`` 0 when it opened,
            else the errno).

    Returns:
        One check, ``daemon_processes_non_dumpable``.
    """
    found: dict[str, list[dict[str, Any]]] = facts.get("daemon_processes") or {}
    missing = [role for role in DAEMON_PROCESSES if not found.get(role)]
    open_to_uid = []
    for role, records in found.items():
        for r in records:
            if r.get("mem_open") == 0:
                open_to_uid.append(f"{role} {r['pid']} (mem opened)")
            elif r.get("mem_owner") not in (0, None):
                open_to_uid.append(f"{role} {r['pid']} (mem owned by uid {r.get('mem_owner')})")
    shown = ", ".join(f"{role} {r['pid']}" for role in DAEMON_PROCESSES for r in found.get(role) or [])
    return [_check(
        "daemon_processes_non_dumpable",
        "init, agentd, Xvfb and openbox are non-dumpable: another process of their uid cannot open their memory",
        not missing and not open_to_uid,
        (f"dumpable: {_summ(open_to_uid)}" if open_to_uid else
         f"not running: {', '.join(missing)}" if missing else f"/proc/<pid>/mem refused for {shown}"),
        source="inside",
    )]


def display_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge the X display's access control.

    Args:
        facts: the probe's JSON output; ``display`` holds ``tcp_no_cookie`` (the
            display's answer to a connection setup without a cookie on
            ``127.0.0.1:``:data:`X_TCP_PORT`: ``"refused: <reason>"``, ``"accepted"``,
            ``"unreachable: ..."``) and ``abstract_sockets`` (X sockets in the abstract
            Unix namespace, from ``/proc/net/unix``).

            ``tcp_server_cookie`` (the answers there to the X servers' own cookies) and
            ``security_extension`` (``"present"``/``"absent"``: the X server's SECURITY
            extension, asked on its Unix socket with its cookie).

    Returns:
        Two checks, ``display_requires_cookie`` and ``display_grants_untrusted``.
    """
    display: dict[str, Any] = facts.get("display") or {}
    answer = str(display.get("tcp_no_cookie", "not probed"))
    abstract = list(display.get("abstract_sockets") or [])
    ok = answer.startswith("refused") and not abstract
    server_cookie = [str(a) for a in display.get("tcp_server_cookie") or []]
    security = str(display.get("security_extension", "not probed"))
    admitted = [a for a in server_cookie if not a.startswith("refused")]
    untrusted = bool(server_cookie) and not admitted and security == "present"
    return [_check(
        "display_requires_cookie",
        f"the X display refuses a client without its cookie (TCP :{X_TCP_PORT}); no abstract X socket",
        ok,
        (f"abstract socket(s): {_summ(abstract)}" if abstract else
         f"without a cookie: {answer[:120]}" if not answer.startswith("refused") else
         f"without a cookie: {answer[:120]}; no abstract socket"),
        source="inside",
    ), _check(
        "display_grants_untrusted",
        f"the display's TCP port (:{X_TCP_PORT}) refuses even the X server's own cookie, and the X server has "
        "the SECURITY extension: a display grant is an untrusted client",
        untrusted,
        ("no X server cookie found to try" if not server_cookie else
         f"the X server's own cookie: {_summ(admitted)}" if admitted else
         f"SECURITY extension: {security[:80]}" if security != "present" else
         f"the X server's own cookie: {server_cookie[0][:100]}; SECURITY extension present"),
        source="inside",
    )]


def untrusted_checks(facts: dict[str, Any]) -> list[Check]:
    """Judge whether the X servers keep an untrusted client (what a display grant's client is)
    from what the grants rely on them to refuse.

    Args:
        facts: the untrusted-client probe's JSON output (:mod:`deskpod.audit.untrusted_probe`);
            ``displays`` holds one record per X server whose own cookie the probe read.

    Returns:
        One check, ``display_untrusted_enforced``: every X server made an untrusted cookie;
        a client with it saw no XTEST and got ``BadAccess`` reading the root window's pixels;
        revoked, the cookie was refused. An X server whose socket does not answer (a standby's
        not started) is not judged; at least one must be.
    """
    probed: list[dict[str, Any]] = list(facts.get("displays") or [])
    # A server whose socket is gone (the standby's, between resets) is not judged.
    displays = [d for d in probed if not str(d.get("generated", "")).startswith("unreachable")]
    problems = []
    for d in displays:
        where = f":{d.get('number')}"
        if d.get("generated") != "ok":
            problems.append(f"{where} made no untrusted cookie ({str(d.get('generated'))[:60]})")
            continue
        if d.get("xtest") is not False:
            problems.append(f"{where} XTEST: {d.get('xtest')}")
        if d.get("get_image") != "BadAccess":
            problems.append(f"{where} GetImage of the root window: {str(d.get('get_image'))[:60]}")
        if not str(d.get("after_revoke", "")).startswith("refused"):
            problems.append(f"{where} the revoked cookie: {str(d.get('after_revoke'))[:60]}")
    shown = ", ".join(f":{d.get('number')}" for d in displays)
    return [_check(
        "display_untrusted_enforced",
        "an untrusted X client (a display grant's) gets no XTEST and no pixels of the root window, "
        "and its cookie is refused once revoked",
        bool(displays) and not problems,
        (_summ(problems) if problems else "no X server could be tried" if not displays else
         f"{shown}: XTEST absent, GetImage BadAccess, the revoked cookie refused"),
        source="inside",
    )]
