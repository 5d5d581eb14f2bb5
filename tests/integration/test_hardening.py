"""The running sandbox is hardened as compose.yaml promises (issue 2, item 7)."""

from __future__ import annotations

import json

import pytest

from deskpod_stack import Stack

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
print(json.dumps(procs))
"""


def _processes(stack: Stack) -> list[dict]:
    return stack.exec_python("sandbox", PROCESSES)


def test_every_sandbox_process_is_unprivileged_and_filtered(stack: Stack) -> None:
    """uid != 0, NoNewPrivs = 1 and Seccomp = 2 for the daemon and everything it started, and
    CapEff = 0 for every process in the container's user namespace.

    Chromium's zygote holds capabilities inside the user namespace its sandbox
    creates; those confer nothing outside it, so only Chromium's own children may
    live in another user namespace.
    """
    procs = _processes(stack)
    names = {p["Name"] for p in procs}
    assert {"Xvfb", "chromium"} <= names, names
    daemon = [p for p in procs if "deskpod.agentd" in p["cmd"]]
    assert daemon, "the daemon is not running"
    container_userns = next(p["userns"] for p in procs if p["pid"] == 1)
    assert container_userns
    for p in procs:
        assert p["Uid"].split()[0] != "0", p
        assert p["NoNewPrivs"] == "1", p
        assert p["Seccomp"] == "2", p
        if p["userns"] == container_userns:
            assert int(p["CapEff"], 16) == 0, p
            assert int(p["CapPrm"], 16) == 0, p
        else:
            assert p["Name"] == "chromium" and "--type=" in p["cmd"], p


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


def test_container_configuration_matches_the_hardening_flags(stack: Stack) -> None:
    c = stack.container("sandbox")
    c.reload()
    host = c.attrs["HostConfig"]
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
    assert all(m["Type"] == "tmpfs" for m in c.attrs["Mounts"]), c.attrs["Mounts"]
    assert not host.get("PortBindings"), "the sandbox publishes no port (C-28)"
    assert host["ShmSize"] >= 1 << 30 or "/dev/shm" in (host.get("Tmpfs") or {})


def test_sandbox_is_only_on_the_internal_network(stack: Stack) -> None:
    """C-28: the daemon's port is reachable only on an internal network."""
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


def test_devtools_port_is_reachable_only_inside_the_sandbox(stack: Stack) -> None:
    """Chromium's DevTools port listens on the sandbox's loopback only: from the network it is closed,
    while the daemon's port answers."""
    import socket

    address = stack.ip("sandbox", "sandbox_net")
    with socket.create_connection((address, 8765), timeout=3):
        pass
    with pytest.raises(OSError):
        socket.create_connection((address, 9222), timeout=3).close()
    inside = stack.exec_python(
        "sandbox",
        "import json, socket\n"
        "s = socket.create_connection(('127.0.0.1', 9222), timeout=3); s.close(); print(json.dumps('open'))",
    )
    assert inside == "open"
