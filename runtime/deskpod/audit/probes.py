"""The probe ``deskpod audit`` runs inside a sandbox container (stdlib only).

This module is never imported by the audit: its *source text* is sent as
``python3 -c SOURCE PARAMS_JSON`` through the Docker API (a fixed argv, no
shell) and run by the container's own ``python3`` as the container's user, under
the container's capabilities, seccomp profile and no-new-privileges flag, so
every syscall it tries is judged exactly as an agent's command would be. It
prints one JSON object of raw facts on stdout; :mod:`deskpod.audit` judges them.

Parameters (one JSON object in ``argv[1]``), all chosen by the audit from the
project's own containers, never from a public address:

- ``tcp`` / ``udp`` / ``icmp``: ``[[ip, port, label], ...]`` addresses of the
  project's other containers on networks the sandbox is not attached to.
- ``dns_names``: names that resolve only on those other networks.
- ``proxy``: ``[host, port]`` of the egress proxy, or ``null``.
- ``allowed_domain``: one allowlisted domain (for the odd-port checks), or ``null``.
- ``ip_literal``: an address to request through the proxy as an IP literal.
- ``own_ips``: the sandbox's addresses on its networks.
- ``timeout_s``: per-probe timeout, float seconds.
- ``x_tcp_port``: the display's TCP port (6099 for display ``:99``: the daemon's X gate).
- ``x_authorities``: ``[[path, display_number], ...]``: the X servers' authority files
  (this user's: the daemon's and its standby's) and the displays they open.

:data:`HOST_PROBE_SOURCE` is a second, separate probe run the same way for the
``host_unreachable`` check against any container of the stack: it tries a
listener the audit opened on the Docker host, at the container's gateway
addresses, over TCP, UDP and ICMP echo.

Nothing here is executed by importing it.
"""

from __future__ import annotations

from deskpod.audit.x_wire import X_WIRE_SOURCE

__all__ = ["GRANT_PROBE_SOURCE", "HOST_PROBE_SOURCE", "PROBE_SOURCE", "ZONE_PROBE_SOURCE"]

PROBE_SOURCE = r'''
import ctypes, errno, json, os, platform, signal, socket, stat, struct, sys, time
from concurrent.futures import ThreadPoolExecutor
''' + X_WIRE_SOURCE + r'''

signal.alarm(90)  # never outlive the audit
P = json.loads(sys.argv[1])
T = float(P.get("timeout_s", 2.0))
out = {"uid": os.getuid(), "euid": os.geteuid()}

# ---- processes -------------------------------------------------------------
procs = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        env = b""  # a non-dumpable process: no other process can read it either
    try:
        userns = os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        userns = None
    rec = {k: st.get(k, "").strip() for k in ("Name", "Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "CapAmb",
                                               "NoNewPrivs", "Seccomp", "Seccomp_filters", "NSpid")}
    rec.update(pid=int(pid), cmd=cmd[:300], userns=userns,
               raw_token_env=any(v.startswith(b"DESKPOD_TOKEN=") for v in env.split(b"\0")))
    procs.append(rec)
out["processes"] = procs
# The container's user namespace, as this process (run by docker exec) sees its own:
# init's link is unreadable when init is non-dumpable.
out["own_userns"] = os.readlink("/proc/self/ns/user")

# ---- mounts, writable paths, setuid/setgid files ---------------------------
mounts = []
for line in open("/proc/self/mounts"):
    dev, mnt, fstype, opts = line.split()[:4]
    mounts.append([mnt.replace("\\040", " "), fstype, opts])
out["mounts"] = mounts
mnts = sorted((m[0] for m in mounts), key=len, reverse=True)

def mount_of(path):
    for m in mnts:
        if path == m or path.startswith(m.rstrip("/") + "/"):
            return m
    return "/"

SKIP = ("/proc", "/sys")
writable, setid, walked = {}, [], 0
for root, dirs, files in os.walk("/", topdown=True):
    if root.startswith(SKIP) and (root in SKIP or root.startswith(tuple(s + "/" for s in SKIP))):
        dirs[:] = []
        continue
    if os.access(root, os.W_OK):
        writable.setdefault(mount_of(root), root)
    for name in files:
        path = os.path.join(root, name)
        walked += 1
        try:
            s = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(s.st_mode):
            if s.st_mode & (stat.S_ISUID | stat.S_ISGID) and len(setid) < 50:
                setid.append(path)
            if os.access(path, os.W_OK):
                writable.setdefault(mount_of(path), path)
out["writable"] = writable
out["setid_files"] = setid
out["files_walked"] = walked

# ---- syscalls (each in a forked child; 0 = the call succeeded) -------------
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "x86_64": {"mount": 165, "unshare": 272, "keyctl": 250, "bpf": 321, "io_uring_setup": 425, "ptrace": 101},
    "aarch64": {"mount": 40, "unshare": 97, "keyctl": 219, "bpf": 280, "io_uring_setup": 425, "ptrace": 117},
}.get(platform.machine())
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000

def call(name, *args):
    r = libc.syscall(NR[name], *args)
    return 0 if r >= 0 else ctypes.get_errno()

def in_child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn() & 0xFF)
        except BaseException:
            os._exit(255)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return 254

def userns_then_mount():
    # The attacker's route: a user namespace (allowed, for Chromium), then a mount
    # namespace and a mount inside it.
    if call("unshare", CLONE_NEWUSER) != 0:
        return 200  # user namespace refused: nothing further to try
    r = call("unshare", CLONE_NEWNS)
    if r != 0:
        return r
    return call("mount", b"none", b"/tmp", b"tmpfs", 0, None)

def ptrace_other():
    # A process that is not our child (re-parented to PID 1), like the daemon is.
    r, w = os.pipe()
    mid = os.fork()
    if mid == 0:
        gpid = os.fork()
        if gpid == 0:
            os.close(r)
            time.sleep(15)
            os._exit(0)
        os.write(w, str(gpid).encode())
        os._exit(0)
    os.waitpid(mid, 0)
    target = int(os.read(r, 32))
    try:
        res = call("ptrace", 16, target, 0, 0)  # PTRACE_ATTACH
        if res == 0:
            call("ptrace", 17, target, 0, 0)  # PTRACE_DETACH
        return res
    finally:
        os.kill(target, signal.SIGKILL)

sc = {}
if NR is None:
    out["syscalls_error"] = f"unsupported architecture {platform.machine()}"
else:
    sc["mount"] = in_child(lambda: call("mount", b"none", b"/tmp", b"tmpfs", 0, None))
    sc["unshare_mount_ns"] = in_child(lambda: call("unshare", CLONE_NEWNS))
    sc["unshare_user_and_mount_ns"] = in_child(lambda: call("unshare", CLONE_NEWUSER | CLONE_NEWNS))
    sc["mount_via_user_ns"] = in_child(userns_then_mount)
    sc["keyctl"] = in_child(lambda: call("keyctl", 0, -3, 1))  # KEYCTL_GET_KEYRING_ID, session, create
    sc["bpf"] = in_child(lambda: call("bpf", 0, None, 0))  # BPF_MAP_CREATE
    sc["io_uring_setup"] = in_child(lambda: call("io_uring_setup", 1, None))
    sc["ptrace_other_process"] = in_child(ptrace_other)
out["syscalls"] = sc
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.close()
    out["raw_socket"] = 0
except OSError as e:
    out["raw_socket"] = e.errno or -1

# ---- network ----------------------------------------------------------------
def err(e):
    return f"{type(e).__name__}: {e}"

def tcp(target):
    ip, port, label = target
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    s.settimeout(T)
    try:
        s.connect((ip, port))
        return [label, ip, port, "connected"]
    except ConnectionRefusedError as e:
        return [label, ip, port, "refused (reached)"]
    except OSError as e:
        return [label, ip, port, "blocked: " + err(e)]
    finally:
        s.close()

def udp(target):
    ip, port, label = target
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(T)
    try:
        s.connect((ip, port))
        # A DNS query for a reserved name; any answer, or an ICMP port-unreachable
        # (ECONNREFUSED), proves the datagram arrived.
        s.send(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07invalid\x00\x00\x01\x00\x01")
        s.recv(512)
        return [label, ip, port, "answered"]
    except ConnectionRefusedError:
        return [label, ip, port, "refused (reached)"]
    except OSError as e:
        return [label, ip, port, "blocked: " + err(e)]
    finally:
        s.close()

def icmp(target):
    ip, _port, label = target
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        return [label, ip, 0, "blocked: no ICMP socket: " + err(e)]
    s.settimeout(T)
    try:
        s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"deskpod-audit", (ip, 0))
        s.recv(512)
        return [label, ip, 0, "echo reply"]
    except OSError as e:
        return [label, ip, 0, "blocked: " + err(e)]
    finally:
        s.close()

def resolve(name):
    try:
        return "resolved: " + ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80)}))
    except OSError as e:
        return "failed: " + err(e)

# Everything at once: each probe is bounded by T, name lookups by 2 T.
pool = ThreadPoolExecutor(max_workers=64)
futs = {k: [pool.submit(fn, t) for t in P.get(k, [])] for k, fn in (("tcp", tcp), ("udp", udp), ("icmp", icmp))}
names = P.get("dns_names", [])
dns_futs = [pool.submit(resolve, n) for n in names]
deadline = time.monotonic() + 2 * T + 1
for k, fs in futs.items():
    out[k] = [f.result() for f in fs]
dns = {}
for n, f in zip(names, dns_futs):
    try:
        dns[n] = f.result(timeout=max(0.0, deadline - time.monotonic()))
    except Exception:
        dns[n] = "failed: no answer in time"
out["dns"] = dns
pool.shutdown(wait=False, cancel_futures=True)

v6 = []
try:
    for line in open("/proc/net/if_inet6"):
        addr, _idx, _plen, scope, _flags, ifname = line.split()
        if scope == "00" and ifname != "lo":  # global scope
            v6.append(f"{ifname} {addr}")
except OSError:
    pass
out["ipv6_global"] = v6

listen = []
for path, fam in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[3] != "0A":
            continue
        hexaddr, hexport = f[1].split(":")
        raw = bytes.fromhex(hexaddr)
        if fam == 4:
            addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
        else:
            addr = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        listen.append([addr, int(hexport, 16)])
out["listening"] = listen

def via_proxy(request):
    host, port = P["proxy"]
    try:
        s = socket.create_connection((host, port), timeout=T * 3)
    except OSError as e:
        return "unreachable: " + err(e)
    try:
        s.sendall(request.encode())
        data = b""
        while b"\r\n" not in data and len(data) < 4096:
            chunk = s.recv(1024)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
    except OSError as e:
        return "error: " + err(e)
    finally:
        s.close()

proxy = {}
if P.get("proxy"):
    other = "deskpod-audit.invalid"
    allowed = P.get("allowed_domain") or other
    lit = P.get("ip_literal") or "127.0.0.1"
    proxy["non_allowlisted_http"] = via_proxy(f"GET http://{other}/ HTTP/1.1\r\nHost: {other}\r\nConnection: close\r\n\r\n")
    proxy["non_allowlisted_connect"] = via_proxy(f"CONNECT {other}:443 HTTP/1.1\r\nHost: {other}:443\r\n\r\n")
    proxy["ip_literal_http"] = via_proxy(f"GET http://{lit}/ HTTP/1.1\r\nHost: {lit}\r\nConnection: close\r\n\r\n")
    proxy["ip_literal_connect"] = via_proxy(f"CONNECT {lit}:443 HTTP/1.1\r\nHost: {lit}:443\r\n\r\n")
    proxy["odd_port_http"] = via_proxy(f"GET http://{allowed}:8080/ HTTP/1.1\r\nHost: {allowed}:8080\r\nConnection: close\r\n\r\n")
    proxy["odd_port_connect"] = via_proxy(f"CONNECT {allowed}:22 HTTP/1.1\r\nHost: {allowed}:22\r\n\r\n")
out["proxy"] = proxy

# ---- deskpod's own processes non-dumpable; the X display needs its cookie ---
# (The probe is another process of the daemon's uid: what it cannot open, an agent's
# process of that uid could not either.)
def mem_access(pid):
    try:
        owner = os.stat(f"/proc/{pid}/mem").st_uid
    except OSError as e:
        return {"pid": pid, "mem_owner": None, "mem_open": e.errno or -1}
    try:
        with open(f"/proc/{pid}/mem", "rb"):
            opened = 0
    except OSError as e:
        opened = e.errno or -1
    return {"pid": pid, "mem_owner": owner, "mem_open": opened}

daemon_procs = {}
for p in procs:
    role = ("init" if p["pid"] == 1 else "agentd" if "deskpod.agentd" in p["cmd"] else
            p["Name"] if p["Name"] in ("Xvfb", "openbox") else None)
    if role is not None and p["pid"] != os.getpid():
        daemon_procs.setdefault(role, []).append(mem_access(p["pid"]))
out["daemon_processes"] = daemon_procs

def x_setup(sock, cookie=b""):
    sock.settimeout(T)
    sock.sendall(setup_request(cookie))
    try:
        return setup_answer(*setup_reply(sock))
    except ConnectionError:
        return "closed"

def x_security(number, cookie):
    # On the X server's own Unix socket with its cookie: does it have the SECURITY
    # extension (QueryExtension, opcode 98; the reply's byte 8 is "present")?
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(T)
        s.connect(f"/tmp/.X11-unix/X{number}")
        s.sendall(setup_request(cookie))
        head, _ = setup_reply(s)
        if head[0] != 1:
            return "refused"
        name = b"SECURITY"
        s.sendall(struct.pack("<BxHHxx", 98, 2 + len(name) // 4, len(name)) + name)
        reply = recv_exactly(s, 32)
        return "present" if reply[0] == 1 and reply[8] else "absent"

display = {}
xport = int(P.get("x_tcp_port") or 6099)
try:
    with socket.create_connection(("127.0.0.1", xport), timeout=T) as s:
        display["tcp_no_cookie"] = x_setup(s)
except OSError as e:
    display["tcp_no_cookie"] = "unreachable: " + err(e)
# The X servers' own cookies: the display's TCP port must refuse them too (a display grant
# is an untrusted client, never one holding the server's cookie), and the server must have
# the SECURITY extension that makes untrusted cookies.
display["tcp_server_cookie"] = []
for path, number in P.get("x_authorities") or []:
    try:
        cookie = open(path, "rb").read()[-16:]
    except OSError:
        continue
    try:
        with socket.create_connection(("127.0.0.1", xport), timeout=T) as s:
            display["tcp_server_cookie"].append(x_setup(s, cookie))
    except OSError as e:
        display["tcp_server_cookie"].append("unreachable: " + err(e))
    try:
        answer = x_security(number, cookie)
    except (OSError, ConnectionError) as e:
        answer = "unreachable: " + err(e)
    if answer != "refused" and "security_extension" not in display:
        display["security_extension"] = answer
abstract = []
try:
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[7].startswith("@") and ".X11-unix" in f[7]:
            abstract.append(f[7])
except OSError as e:
    abstract.append("unreadable: " + err(e))
display["abstract_sockets"] = abstract
out["display"] = display
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
os._exit(0)  # do not wait for name lookups still pending in the pool
'''

# --------------------------------------------------------------------------- the agent's zone

ZONE_PROBE_SOURCE = r'''
import json, os, sys
me = os.getpid()
out = {"uid": os.getuid(), "processes": []}
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == me:
        continue
    pid = int(entry)
    rec = {"pid": pid, "name": "", "cmd": "", "uid": None, "cap_eff": None, "opened": []}
    try:
        rec["cmd"] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:300]
        st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
        rec["name"] = st.get("Name", "").strip()
        rec["uid"] = st.get("Uid", "").split()[0]
        rec["cap_eff"] = st.get("CapEff", "").strip()
    except (OSError, IndexError):
        pass
    for what, path, flags in (("mem_write", "mem", os.O_RDWR), ("mem_read", "mem", os.O_RDONLY),
                              ("environ", "environ", os.O_RDONLY)):
        try:
            fd = os.open(f"/proc/{pid}/{path}", flags)
            try:
                if what == "environ":
                    os.read(fd, 1)
            finally:
                os.close(fd)
            rec["opened"].append(what)
        except OSError:
            pass
    out["processes"].append(rec)
print(json.dumps(out))
'''
"""Run in the workspace container as uid 1001 (the agent's uid): every other process it
sees, with its name, uid, CapEff, and which of ``/proc/<pid>/mem`` (write, read) and
``environ`` it could open."""

GRANT_PROBE_SOURCE = r'''
import json, sys, urllib.request, urllib.error
proxy, domain = sys.argv[1], sys.argv[2]
guessed = proxy.replace("://", "://deskpod:" + "A" * 43 + "@", 1)
out = {}
for label, url in (("none", proxy), ("guessed", guessed)):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": url}))
    try:
        out[label] = opener.open("http://%s/" % domain, timeout=10).status
    except urllib.error.HTTPError as e:
        out[label] = e.code
    except OSError as e:
        out[label] = "error: %s" % e
print(json.dumps(out))
'''
"""Run in the workspace container as the agent's uid with the egress proxy's URL and an
allowlisted domain: that domain through the proxy with no credential and with a guessed
one. Prints ``{"none": status, "guessed": status}`` (an HTTP status or ``"error: ..."``)."""

HOST_PROBE_SOURCE = r'''
import json, os, signal, socket, struct, sys, time
from concurrent.futures import ThreadPoolExecutor

# The host_unreachable probe: from inside the container, try to reach a listener the
# audit opened on the Docker host, at every gateway address of the container's
# networks, over TCP, UDP and ICMP echo. argv[1]: {"targets": [[ip, label], ...],
# "tcp_port": int, "udp_port": int, "nonce": str, "timeout_s": float}. Prints
# {"uid": int, "tcp": [...], "udp": [...], "icmp": [...]}, each [label, ip, port, result].
signal.alarm(60)
P = json.loads(sys.argv[1])
T = float(P.get("timeout_s", 2.0))
NONCE = P["nonce"].encode()

def err(e):
    return f"{type(e).__name__}: {e}"

def family(ip):
    return socket.AF_INET6 if ":" in ip else socket.AF_INET

def tcp(target):
    ip, label = target
    port = P["tcp_port"]
    s = socket.socket(family(ip), socket.SOCK_STREAM)
    s.settimeout(T)
    try:
        s.connect((ip, port))
        s.sendall(NONCE)
        return [label, ip, port, "connected"]
    except ConnectionRefusedError:
        return [label, ip, port, "refused (reached)"]
    except OSError as e:
        return [label, ip, port, "blocked: " + err(e)]
    finally:
        s.close()

def udp(target):
    ip, label = target
    port = P["udp_port"]
    s = socket.socket(family(ip), socket.SOCK_DGRAM)
    s.settimeout(T)
    try:
        s.connect((ip, port))
        # Three tries; the host side also records every datagram that arrives.
        for _ in range(3):
            s.send(NONCE)
            try:
                s.recv(512)
                return [label, ip, port, "answered"]
            except socket.timeout:
                continue
        return [label, ip, port, "blocked: no answer"]
    except ConnectionRefusedError:
        return [label, ip, port, "refused (reached)"]
    except OSError as e:
        return [label, ip, port, "blocked: " + err(e)]
    finally:
        s.close()

def icmp(target):
    ip, label = target
    v6 = ":" in ip
    try:
        s = socket.socket(family(ip), socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
    except OSError as e:
        return [label, ip, 0, "blocked: no ICMP socket: " + err(e)]
    s.settimeout(T)
    try:
        s.sendto(struct.pack("!BBHHH", 128 if v6 else 8, 0, 0, 0, 1) + NONCE, (ip, 0))
        s.recv(512)
        return [label, ip, 0, "echo reply"]
    except OSError as e:
        return [label, ip, 0, "blocked: " + err(e)]
    finally:
        s.close()

out = {"uid": os.getuid()}
targets = P.get("targets", [])
with ThreadPoolExecutor(max_workers=max(1, 3 * len(targets))) as pool:
    futs = {k: [pool.submit(fn, t) for t in targets] for k, fn in (("tcp", tcp), ("udp", udp), ("icmp", icmp))}
    for k, fs in futs.items():
        out[k] = [f.result() for f in fs]
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
'''
"""Source of the ``host_unreachable`` probe (stdlib only), run like :data:`PROBE_SOURCE`.

Parameters (``argv[1]``): ``targets`` ``[[ip, label], ...]``, the gateway addresses
of the container's networks (addresses of the Docker host itself); ``tcp_port`` and
``udp_port``, the host listener's ports; ``nonce``, the bytes it sends (the host
listener counts datagrams carrying them); ``timeout_s``. It prints
``{"uid", "tcp", "udp", "icmp"}``, each a list of ``[label, ip, port, result]``
whose result starts with ``blocked`` unless the host answered."""
