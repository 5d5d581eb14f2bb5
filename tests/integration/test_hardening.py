"""The running sandbox is hardened as compose.yaml promises."""

from __future__ import annotations

import json
import socket

import pytest

from deskpod.audit.config_rules import memory_volumes_as_tmpfs
from deskpod.audit.engine import mounted_volumes
from deskpod.protocol import ObserveOptions
from deskpod_stack import Stack, with_client

pytestmark = pytest.mark.integration

PROCESSES = r"""
import json, os
procs = []
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    try:
        status = dict(l.split(':', 1) for l in open(f'/proc/{pid}/status') if ':' in l)
        cmd = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        continue
    try:
        userns = os.readlink(f'/proc/{pid}/ns/user')
    except OSError:
        userns = None
    procs.append({k: status[k].strip() for k in ('Name', 'Uid', 'CapEff', 'CapPrm', 'NoNewPrivs', 'Seccomp', 'NSpid')}
                 | {'pid': int(pid), 'cmd': cmd, 'userns': userns})
print(json.dumps({'procs': procs, 'own_userns': os.readlink('/proc/self/ns/user')}))
"""


def _processes(stack: Stack) -> list[dict]:
    return stack.exec_python("sandbox", PROCESSES)["procs"]


def test_every_sandbox_process_is_unprivileged_and_filtered(stack: Stack) -> None:
    """Uid != 0, NoNewPrivs = 1 and Seccomp = 2 for the daemon and everything it started, and
    CapEff = 0 for every process in the container's user namespace.

    Chromium's zygote holds capabilities inside the user namespace its sandbox
    creates; those confer nothing outside it, so only Chromium's own children may
    live in another user namespace.
    """
    found = stack.exec_python("sandbox", PROCESSES)
    procs = found["procs"]
    names = {p["Name"] for p in procs}
    assert {"Xvfb", "chromium"} <= names, names
    daemon = [p for p in procs if "deskpod.agentd" in p["cmd"]]
    assert daemon, "the daemon is not running"
    # The probe's own namespace (docker exec joins the container's); init's is unreadable
    # once init is non-dumpable.
    container_userns = found["own_userns"]
    assert container_userns
    for p in procs:
        assert p["Uid"].split()[0] != "0", p
        assert p["NoNewPrivs"] == "1", p
        assert p["Seccomp"] == "2", p
        # A non-dumpable process (the daemon, Xvfb, openbox) hides its namespace links
        # (userns None): it is in the container's user namespace and holds nothing.
        if p["userns"] in (container_userns, None):
            assert int(p["CapEff"], 16) == 0, p
            assert int(p["CapPrm"], 16) == 0, p
        else:
            assert p["Name"] == "chromium" and "--type=" in p["cmd"], p


MEM = r"""
import json, os
out = {}
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        name = dict(l.split(':', 1) for l in open(f'/proc/{pid}/status') if ':' in l)['Name'].strip()
        cmd = open(f'/proc/{pid}/cmdline', 'rb').read()
    except OSError:
        continue
    role = ('init' if pid == '1' else 'agentd' if b'deskpod.agentd' in cmd else
            name if name in ('Xvfb', 'openbox') else None)
    if role is None or role in out:
        continue
    result = {}
    for what in ('mem', 'environ'):
        try:
            with open(f'/proc/{pid}/{what}', 'rb') as f:
                f.read(1) if what == 'environ' else None
            result[what] = 'opened'
        except OSError as e:
            result[what] = e.errno
    out[role] = result
print(json.dumps(out))
"""


def test_deskpod_processes_are_non_dumpable(stack: Stack) -> None:
    """Another uid-1000 process in the sandbox container (``docker exec``
    as the image's user) cannot open the memory or environment of the container's init (tini,
    which no reset kills), the daemon, Xvfb or openbox (0711 binaries and the daemon's prctl
    make them non-dumpable). Chromium cannot be made so:
    its sandbox needs it (SECURITY.md)."""
    import errno

    found = stack.exec_python("sandbox", MEM)
    assert {"init", "agentd", "Xvfb", "openbox"} <= set(found), found
    for role in ("init", "agentd", "Xvfb", "openbox"):
        assert found[role] == {"mem": errno.EACCES, "environ": errno.EACCES}, (role, found[role])


def test_chromium_keeps_its_own_sandbox(stack: Stack) -> None:
    """Renderers run in their own user and PID namespaces (an extra NSpid level) with seccomp;
    no --no-sandbox anywhere."""
    procs = _processes(stack)
    assert all("--no-sandbox" not in p["cmd"] for p in procs)
    browser = [p for p in procs if p["Name"] == "chromium" and "--type=" not in p["cmd"]]
    assert len(browser) == 1, browser
    renderers = [p for p in procs if "--type=renderer" in p["cmd"]]
    assert renderers, "no renderer process"
    for r in renderers:
        assert len(r["NSpid"].split()) >= 2, f"renderer not in a nested PID namespace: {r}"
        assert r["userns"] and r["userns"] != browser[0]["userns"], r
        assert r["Seccomp"] == "2"


def test_root_filesystem_is_read_only_and_writable_paths_are_tmpfs(stack: Stack) -> None:
    result = stack.exec_python(
        "sandbox",
        "import json, os\n"
        "out = {}\n"
        "for path in ('/usr/x', '/etc/x', '/opt/x', '/x'):\n"
        "    try:\n"
        "        open(path, 'w'); out[path] = 'written'\n"
        "    except OSError as e:\n"
        "        out[path] = e.errno\n"
        "mounts = [l.split()[1:3] for l in open('/proc/mounts')]\n"
        "out['mounts'] = mounts\n"
        "out['sock'] = [p for p in ('/var/run/docker.sock', '/run/docker.sock') if os.path.exists(p)]\n"
        "print(json.dumps(out))",
    )
    import errno

    for path in ("/usr/x", "/etc/x", "/opt/x", "/x"):
        assert result[path] in (errno.EROFS, errno.EACCES), (path, result[path])
    root = [m for m in result["mounts"] if m[0] == "/"]
    assert root, result["mounts"]
    assert result["sock"] == []
    writable = {m[0]: m[1] for m in result["mounts"]}
    assert writable["/tmp"] == "tmpfs"
    assert writable["/dev/shm"] == "tmpfs"


@pytest.mark.parametrize("service", ["sandbox", "workspace"])
def test_container_configuration_matches_the_hardening_flags(stack: Stack, service: str) -> None:
    """Each container as ``deskpod audit`` judges it: a memory-only volume (the workspace's
    ``/workspace``, shared with the desktop profile's zone) counts as the tmpfs it is, any other
    volume or bind mount fails."""
    c = stack.container(service)
    c.reload()
    attrs = memory_volumes_as_tmpfs(c.attrs, mounted_volumes(stack.docker, c.attrs))
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["Privileged"] is False
    opts = host["SecurityOpt"]
    assert "no-new-privileges:true" in opts or "no-new-privileges" in opts
    seccomp = [o for o in opts if o.startswith("seccomp")]
    assert seccomp and "unconfined" not in seccomp[0]
    profile = json.loads(seccomp[0].split("=", 1)[1] if "=" in seccomp[0] else seccomp[0].split(":", 1)[1])
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert host["PidsLimit"] and host["PidsLimit"] > 0
    assert host["Memory"] > 0
    assert not host.get("Binds")
    assert all(m["Type"] == "tmpfs" for m in attrs["Mounts"]), c.attrs["Mounts"]
    assert not host.get("PortBindings"), "the sandbox publishes no port"
    assert host["ShmSize"] >= 64 << 20 or "/dev/shm" in (host.get("Tmpfs") or {})


def test_sandbox_is_only_on_the_internal_network(stack: Stack) -> None:
    """The daemon's port is reachable only on an internal network."""
    c = stack.container("sandbox")
    c.reload()
    networks = list(c.attrs["NetworkSettings"]["Networks"])
    assert networks == [f"{stack.project}_sandbox_net"]
    net = stack.docker.networks.get(networks[0])
    assert net.attrs["Internal"] is True


def test_no_process_in_the_sandbox_can_read_the_control_token(stack: Stack) -> None:
    """The sandbox holds only the token's SHA-256: code run inside (by an agent, or a compromised
    renderer) finds the token in no process's environment."""
    code = (
        "import json, os\n"
        "envs = []\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            envs.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError:\n"
        "            pass\n"
        "print(json.dumps(envs))"
    )
    envs = stack.exec_python("sandbox", code)
    assert len(envs) >= 3, "the probe must see the daemon's and tini's environments"
    assert all(stack.token not in env for env in envs)
    assert any("DESKPOD_TOKEN_SHA256=" in env for env in envs)


DEVTOOLS_PROBE = r"""
import ctypes, errno, json, os, socket
ports = []
for line in open('/proc/net/tcp').read().splitlines()[1:] + open('/proc/net/tcp6').read().splitlines()[1:]:
    local, state = line.split()[1], line.split()[3]
    address, port = local.split(':')
    # 127.0.0.11: Docker's embedded DNS server, run by dockerd in the container's network namespace.
    if state == '0A' and address != '0B00007F':  # TCP_LISTEN
        ports.append(int(port, 16))
try:
    socket.create_connection(('127.0.0.1', 9222), timeout=3).close()
    out = {'devtools_port': 'open'}
except OSError as exc:
    out = {'devtools_port': type(exc).__name__}
def argv(pid):
    try:
        return open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
    except OSError:
        return [b'']
browser = next(pid for pid in os.listdir('/proc') if pid.isdigit() and argv(pid)[0].endswith(b'/chromium')
               and not any(a.startswith(b'--type=') for a in argv(pid)))
for fd in (3, 4):  # Chromium's DevTools fds: a socket cannot be reopened through /proc, a pipe could
    try:
        os.close(os.open(f'/proc/{browser}/fd/{fd}', os.O_RDWR))
        out[f'reopen_fd{fd}'] = 'opened'
    except OSError as exc:
        out[f'reopen_fd{fd}'] = errno.errorcode[exc.errno]
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(int(browser))
got = libc.syscall(438, pidfd, 3, 0)  # pidfd_getfd(pidfd, 3, 0)
out['pidfd_getfd'] = 'got it' if got >= 0 else errno.errorcode[ctypes.get_errno()]
out['listening'] = sorted(set(ports))
print(json.dumps(out))
"""


def test_sandbox_code_cannot_reach_devtools(stack: Stack) -> None:
    """Chromium speaks DevTools only over the daemon's socket pair: code running as the
    sandbox's uid (a compromised process of the browser's zone; agent commands run in the
    workspace container and see none of this, see test_zone.py) finds no way to drive or
    forge the page. Nothing but the daemon's 8765 and the X server's 6099 (which wants its
    cookie, test_display.py) listens, not even on loopback (Docker's embedded DNS aside),
    9222 refuses, Chromium's fds 3 and 4 cannot be reopened through /proc and pidfd_getfd
    is refused, while the daemon still reads the page."""
    found = stack.exec_python("sandbox", DEVTOOLS_PROBE, user="1000")
    page = with_client(
        stack, lambda client: client.navigate("http://demo.test/", ObserveOptions(screenshot=False, page_text=True))
    )
    assert found == {
        "listening": [6099, 8765], "devtools_port": "ConnectionRefusedError", "reopen_fd3": "ENXIO",
        "reopen_fd4": "ENXIO",
        "pidfd_getfd": "EPERM",
    }
    assert page.url == "http://demo.test/" and page.title == "deskpod demo search"
    address = stack.ip("sandbox", "sandbox_net")
    with socket.create_connection((address, 8765), timeout=3):
        pass
    with pytest.raises(OSError):
        socket.create_connection((address, 9222), timeout=3).close()
