"""The agent's zone, tried as an attacker would.

Every attack runs as an agent's command, through the daemon's ``exec`` tool, so in the
workspace container as uid 1001 under the workspace runner. What it leaves behind is
checked from outside: ``docker top`` and ``docker exec`` into the containers. On the
single-container design (main at 55dbe26) these fail: agentd's ``/proc/<pid>/mem`` was
writable from ``exec``, a non-dumpable ``setsid`` process survived, IPC objects crossed
a reset, and filling the tmpfs mounts OOM-killed the sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deskpod.audit.reap_probe import REAP_PROBE_SOURCE
from deskpod.client import SandboxClient
from deskpod.errors import WorkspaceUnavailableError
from deskpod.protocol import ExecOutput, ExecRequest
from deskpod_stack import Stack, start_stack, wait_healthy, with_client

pytestmark = pytest.mark.integration

DESKPOD_PROCESSES = (b"deskpod.agentd", b"Xvfb", b"openbox", b"chromium")

# Tries every process it can see: /proc/<pid>/mem for writing and reading, environ,
# and scans whatever it can read for the needle (passed reversed, so the needle is in
# no process's argv but this one's, which is skipped).
MEMORY_PROBE = r"""
import json, os, sys
needle = sys.argv[1][::-1].encode()
me = os.getpid()
out = {"visible": [], "mem_write": [], "mem_read": [], "environ": [], "hits": [], "deskpod": []}
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == me:
        continue
    pid = int(entry)
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        cmd = b""
    out["visible"].append([pid, cmd.replace(b"\0", b" ").decode(errors="replace")[:200]])
    if any(name in cmd for name in (b"deskpod.agentd ", b"Xvfb", b"openbox", b"chromium")) \
            and b"deskpod.agentd.runner" not in cmd:
        out["deskpod"].append(pid)
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        out["mem_write"].append(pid)
    except OSError:
        pass
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
        out["environ"].append(pid)
        if needle in env or b"DESKPOD_TOKEN" in env:
            out["hits"].append([pid, "environ"])
    except OSError:
        pass
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            out["mem_read"].append(pid)
            for line in maps:
                span, perms = line.split()[:2]
                if "r" not in perms:
                    continue
                start, end = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(start)
                    if needle in mem.read(min(end - start, 64 << 20)):
                        out["hits"].append([pid, "mem"])
                except OSError:
                    pass
    except OSError:
        pass
print(json.dumps(out))
"""

# Reaches for the sandbox container's X server and files from the workspace container.
X_PROBE = r"""
import json, os, socket, struct
out = {"x_socket": os.path.exists("/tmp/.X11-unix/X99"), "marker": os.path.exists("/tmp/" + os.environ["MARK"])}
for name, address in (("unix", "/tmp/.X11-unix/X99"),):
    try:
        s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(address); out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""

# An X11 connection setup over TCP to the display the command was given (``DISPLAY``), with
# the MIT-MAGIC-COOKIE-1 of its ``XAUTHORITY`` file, or with none when it has no such file.
# Prints the server's answer: 0 refused, 1 accepted.
X_SETUP = r"""
import json, os, socket, struct
host, number = os.environ.get("DISPLAY", "sandbox:99").rsplit(":", 1)
name = data = b""
if os.environ.get("XAUTHORITY"):
    record = open(os.environ["XAUTHORITY"], "rb").read()
    name, data = b"MIT-MAGIC-COOKIE-1", record[-16:]
pad = lambda b: b + b"\0" * (-len(b) % 4)
with socket.create_connection((host, 6000 + int(number.split(".")[0])), timeout=10) as sock:
    sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(data)) + pad(name) + pad(data))
    print(json.dumps({"display": os.environ.get("DISPLAY"), "answer": sock.recv(1)[0]}))
"""

# Makes one SysV shared memory segment (attached and kept), message queue and semaphore
# set, and one POSIX message queue, then prints /proc/sysvipc and /dev/mqueue.
IPC_MAKE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.mq_open.restype = ctypes.c_int
IPC_CREAT = 0o1000
shm = libc.shmget(0x5eed, 4096, IPC_CREAT | 0o600)
libc.shmat(shm, None, 0)
msg = libc.msgget(0x5eee, IPC_CREAT | 0o600)
sem = libc.semget(0x5eef, 1, IPC_CREAT | 0o600)
mq = libc.mq_open(b"/" + sys.argv[1].encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
print(json.dumps({"shm": shm, "msg": msg, "sem": sem, "mq": mq}), flush=True)
import time
time.sleep(600)  # keeps the segment attached (shm_rmid_forced destroys it once nobody holds it)
"""

# Run from outside (docker exec) in the workspace container.
IPC_LIST = r"""
import json, os
out = {}
for kind in ("shm", "msg", "sem"):
    out[kind] = [l.split()[1] for l in open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]]
out["mqueue"] = sorted(os.listdir("/dev/mqueue"))
print(json.dumps(out))
"""

# Fills every writable mount (given as argv) until ENOSPC.
FILL = r"""
import errno, json, os, sys
block = b"\1" * (1 << 20)
out = {}
for top in sys.argv[1:]:
    written, err = 0, None
    try:
        with open(os.path.join(top, "deskpod-fill"), "wb") as f:
            while True:
                f.write(block)
                f.flush()
                written += 1
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
    out[top] = [written, err]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def zone() -> Iterator[Stack]:
    yield from start_stack("zone", "1280x800")


def run(stack: Stack, argv: list[str] | None = None, cmd: str | None = None, timeout_s: float = 60) -> ExecOutput:
    async def body(client: SandboxClient) -> ExecOutput:
        result = await client.request(
            ExecRequest(type="exec", id=client.next_id(), argv=argv, cmd=cmd, timeout_s=timeout_s)
        )
        assert isinstance(result.workspace, ExecOutput), result
        return result.workspace

    out: ExecOutput = with_client(stack, body)
    return out


def json_out(output: ExecOutput) -> Any:
    assert output.exit_code == 0, output
    return json.loads(output.stdout)


def workspace_pids(stack: Stack) -> list[list[str]]:
    """The workspace container's processes as ``docker top`` lists them (from the host)."""
    top = stack.container("workspace").top(ps_args="-eo pid,args")
    return [p for p in top["Processes"] if "deskpod.agentd.runner" not in " ".join(p)]


def is_health_check(cmd: str) -> bool:
    """Whether a process the agent zone sees is (a stage of) the container's health check."""
    return "deskpod.agentd.runner_health" in cmd or cmd.strip() in ("runc init", "")


def test_agent_sees_no_deskpod_process_and_opens_no_memory_but_its_own(zone: Stack) -> None:
    """Finding 1 and 2: from exec, agentd, Xvfb, openbox and Chromium are not even visible; the
    runner's memory and environ cannot be opened; the token is in nothing the agent can read."""
    found = json_out(run(zone, argv=["python3", "-c", MEMORY_PROBE, zone.token[::-1]]))
    assert found["deskpod"] == [], found["visible"]
    # Only the runner, and at times the container's health check (an agent-zone process, uid 1001):
    # a docker exec shows as `runc init` until it executes the check, and one that ended between
    # the probe's listing and its read has no command line left.
    others = [cmd for pid, cmd in found["visible"] if pid != 1]
    assert 1 in [pid for pid, _ in found["visible"]], found
    assert all(is_health_check(cmd) for cmd in others), found
    for what in ("mem_write", "mem_read", "environ"):
        assert 1 not in found[what], found
    assert found["hits"] == [], found
    # And the sandbox container itself still runs them all, as uid 1000.
    names = zone.exec_python("sandbox", "import json, os\nprint(json.dumps([open(f'/proc/{p}/comm').read().strip() "
                                        "for p in os.listdir('/proc') if p.isdigit()]))")
    assert {"Xvfb", "openbox", "chromium"} <= set(names), names


def test_agent_cannot_reach_the_x_server_or_the_sandbox_files(zone: Stack) -> None:
    mark = "mark" + secrets.token_hex(4)
    zone.container("sandbox").exec_run(["touch", f"/tmp/{mark}"], user="1000")
    found = json_out(run(zone, cmd=f"MARK={mark} python3 -c '{X_PROBE}'"))
    assert found == {"x_socket": False, "marker": False, "unix": "FileNotFoundError"}, found
    zone.container("sandbox").exec_run(["rm", "-f", f"/tmp/{mark}"], user="1000")
    # The X server listens on TCP for display grants, and refuses a client without the cookie.
    assert json_out(run(zone, argv=["python3", "-c", X_SETUP])) == {"display": None, "answer": 0}


def test_a_display_grant_opens_the_x_server_for_that_command_only(zone: Stack) -> None:
    """``display: true`` (which the controller allows only when the task grants it) gives that
    one command ``DISPLAY`` and a private Xauthority file holding the X server's current
    cookie; the next command has neither, and a reset replaces the cookie."""

    async def body(client: SandboxClient) -> tuple[ExecOutput, ExecOutput]:
        granted = await client.request(ExecRequest(
            type="exec", id=client.next_id(), argv=["python3", "-c", X_SETUP], display=True, timeout_s=30))
        after = await client.request(ExecRequest(
            type="exec", id=client.next_id(), cmd="echo $DISPLAY$XAUTHORITY; ls /tmp /home/agent"))
        assert isinstance(granted.workspace, ExecOutput) and isinstance(after.workspace, ExecOutput)
        return granted.workspace, after.workspace

    granted, after = with_client(zone, body)
    assert json_out(granted) == {"display": "sandbox:99", "answer": 1}
    assert after.stdout.splitlines()[0] == "" and "Xauthority" not in after.stdout, after.stdout


def test_workspace_processes_are_unprivileged_and_filtered(zone: Stack) -> None:
    code = (
        "import json, os\nout = []\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        s = dict(l.split(':', 1) for l in open(f'/proc/{p}/status') if ':' in l)\n"
        "        out.append({k: s[k].strip() for k in ('Name', 'Uid', 'CapEff', 'NoNewPrivs', 'Seccomp')})\n"
        "print(json.dumps(out))"
    )
    for p in json_out(run(zone, argv=["python3", "-c", code])):
        assert p["Uid"].split()[0] == "1001" and int(p["CapEff"], 16) == 0, p
        assert p["NoNewPrivs"] == "1" and p["Seccomp"] == "2", p
    c = zone.container("workspace")
    c.reload()
    host = c.attrs["HostConfig"]
    assert c.attrs["Config"]["User"] == "1001:1001"
    assert host["PidMode"] == "" and host["IpcMode"] == "private", (host["PidMode"], host["IpcMode"])
    assert list(c.attrs["NetworkSettings"]["Networks"]) == [f"{zone.project}_sandbox_net"]
    mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
    assert set(mounts) <= {"/workspace", "/tmp", "/home/agent"}
    # /workspace: the project's volume `workspace` (shared with the desktop profile's zone), a tmpfs too.
    workspace = mounts.pop("/workspace")
    assert workspace["Type"] == "volume" and workspace["Name"] == f"{zone.project}_workspace", workspace
    options = zone.docker.volumes.get(workspace["Name"]).attrs["Options"]
    assert options["type"] == "tmpfs" and {"nosuid", "nodev", "noexec"} <= set(options["o"].split(",")), options
    assert all(m["Type"] == "tmpfs" for m in mounts.values()), c.attrs["Mounts"]
    assert not zone.container("sandbox").attrs["HostConfig"].get("Tmpfs", {}).get("/workspace")


def _hide(zone: Stack, mark: str, then: str) -> ExecOutput:
    return run(zone, cmd=f"python3 -c '{REAP_PROBE_SOURCE}' {mark} && {then}", timeout_s=300)


def test_hidden_processes_are_gone_when_their_command_answers(zone: Stack) -> None:
    """Finding 4: a non-dumpable setsid'd double-forked process and a pid hopper, started by one
    exec, are gone (seen from the host) as soon as it has answered, before the next exec."""
    mark = "hid" + secrets.token_hex(3)
    out = _hide(zone, mark, "ps -eo pid,args")
    assert out.exit_code == 0 and "hidden" in out.stdout, out  # both started before it answered
    # The probe has exited: a python3 that ps lists is a hidden one (the pid hopper may slip
    # between ps's reads of /proc, the sleeper may not).
    assert out.stdout.count("python3") >= 1, out.stdout
    assert workspace_pids(zone) == []
    assert "python3" not in run(zone, cmd="ps -eo args").stdout


def _reset(zone: Stack, client: SandboxClient) -> Any:
    token = secrets.token_urlsafe(32)

    async def go() -> Any:
        obs = await client.reset(None, token_sha256=hashlib.sha256(token.encode()).hexdigest())
        zone.token = token
        return obs

    return go()


def test_reset_kills_hidden_processes_and_removes_ipc_objects(zone: Stack) -> None:
    """Finding 4 and 5 (IPC): a long exec starts hidden processes and makes SysV shm, msg, sem and
    a POSIX message queue; a reset from another connection kills the first and removes the rest,
    checked from the host (docker top, docker exec reading /proc/sysvipc and /dev/mqueue)."""
    mark = "ipc" + secrets.token_hex(3)
    workspace = zone.container("workspace")

    def ipc_now() -> dict[str, list[str]]:
        result = workspace.exec_run(["python3", "-c", IPC_LIST], demux=True)
        assert result.exit_code == 0, result.output
        listed: dict[str, list[str]] = json.loads(result.output[0])
        return listed

    async def body() -> None:
        coder = await SandboxClient.connect(zone.ws_url, zone.token, timeout_s=30)
        driver = await SandboxClient.connect(zone.ws_url, zone.token, timeout_s=30)
        long_exec = asyncio.create_task(coder.request(ExecRequest(
            type="exec", id="long", timeout_s=300,
            cmd=f"python3 -c '{REAP_PROBE_SOURCE}' {mark} && python3 -c '{IPC_MAKE}' {mark} & sleep 300",
        )))
        for _ in range(100):
            await asyncio.sleep(0.1)
            listed = ipc_now()
            if all(listed[k] for k in ("shm", "msg", "sem", "mqueue")) and len(workspace_pids(zone)) >= 4:
                break
        else:
            raise AssertionError(f"the attack did not set up: {ipc_now()} {workspace_pids(zone)}")
        await _reset(zone, driver)
        assert workspace_pids(zone) == [], workspace_pids(zone)
        assert ipc_now() == {"shm": [], "msg": [], "sem": [], "mqueue": []}
        try:
            await asyncio.wait_for(long_exec, 30)
        except Exception:
            pass  # its connection (old token) may be closed before the killed command's reply
        await coder.close()
        await driver.close()

    asyncio.run(body())
    assert json_out(run(zone, cmd="echo '\"ok\"'")) == "ok"


def _daemon_answers(zone: Stack) -> None:
    wait_healthy(zone, 60)
    assert with_client(zone, lambda c: c.act([])) is not None


def test_filling_every_workspace_mount_leaves_the_daemon_answering(zone: Stack) -> None:
    """Finding 7: an exec fills /workspace, /tmp, /dev/shm and the agent's home to ENOSPC; the
    exec answers, the workspace container is not OOM-killed, the next request works."""
    out = run(zone, argv=["python3", "-c", FILL, "/workspace", "/tmp", "/dev/shm", "/home/agent"], timeout_s=300)
    filled = json_out(out)
    assert all(err == "ENOSPC" for _, err in filled.values()), filled
    assert sum(mib for mib, _ in filled.values()) >= 900, filled
    c = zone.container("workspace")
    c.reload()
    assert c.status == "running" and c.attrs["State"]["OOMKilled"] is False and c.attrs["RestartCount"] == 0
    assert run(zone, cmd="rm -f /workspace/deskpod-fill /tmp/deskpod-fill /dev/shm/deskpod-fill "
                         "$HOME/deskpod-fill").exit_code == 0
    _daemon_answers(zone)


def test_filling_every_sandbox_mount_leaves_the_daemon_answering(zone: Stack) -> None:
    """Finding 7, the browser's zone: code running as uid 1000 in the sandbox container (a
    compromised browser) fills /tmp, /dev/shm and the home folder; agentd still answers."""
    c = zone.container("sandbox")
    result = c.exec_run(["python3", "-c", FILL, "/tmp", "/dev/shm", "/home/deskpod"], user="1000", demux=True)
    filled = json.loads(result.output[0])
    assert all(err == "ENOSPC" for _, err in filled.values()), filled
    try:
        c.reload()
        assert c.status == "running" and c.attrs["State"]["OOMKilled"] is False, c.attrs["State"]
        started = time.monotonic()
        _daemon_answers(zone)
        print(f"daemon answered {time.monotonic() - started:.1f} s after the fill")
    finally:
        c.exec_run(["rm", "-f", "/tmp/deskpod-fill", "/dev/shm/deskpod-fill", "/home/deskpod/deskpod-fill"],
                   user="1000")


MEMORY_HOG = r"""
chunks = []
for _ in range(4096):                   # up to 4 GiB, twice the workspace container's limit
    chunks.append(bytearray(1 << 20))   # zero-filled: every page touched
print("never")
"""

FORK_BOMB = r"""
import os, time
n = 0
while True:
    try:
        if os.fork() == 0:
            os.setsid()
            time.sleep(3600)
            os._exit(0)
        n += 1
    except OSError:
        print(n, flush=True)
        time.sleep(1)
        break
"""


def test_an_out_of_memory_command_dies_not_the_runner(zone: Stack) -> None:
    """The agent's commands run with oom_score_adj 1000: the memory cgroup's OOM killer takes the
    hog, the runner (PID 1) lives on and answers the next request."""
    out = run(zone, argv=["python3", "-c", MEMORY_HOG], timeout_s=120)
    assert out.signal == 9 and "never" not in out.stdout, out
    c = zone.container("workspace")
    c.reload()
    assert c.status == "running" and c.attrs["RestartCount"] == 0
    assert json_out(run(zone, cmd="echo '\"ok\"'")) == "ok"


def test_a_fork_bomb_hits_the_pids_limit_and_is_killed_after_its_command(zone: Stack) -> None:
    """512 processes at most; the setsid'd children are gone once the command answered, and the
    next command starts (its pid was freed by the runner's kill)."""
    out = run(zone, argv=["python3", "-c", FORK_BOMB], timeout_s=120)
    assert out.exit_code == 0 and 0 < int(out.stdout.split()[0]) < 512, out
    assert workspace_pids(zone) == []
    assert json_out(run(zone, cmd="echo '\"ok\"'")) == "ok"


def test_a_missing_workspace_container_is_a_typed_error_and_the_daemon_stays_usable(zone: Stack) -> None:
    """With the workspace container stopped, workspace requests get ``workspace_unavailable``;
    GUI requests still work, and workspace requests work again once it is back."""
    workspace = zone.container("workspace")
    workspace.stop(timeout=5)
    try:
        async def body(client: SandboxClient) -> None:
            with pytest.raises(WorkspaceUnavailableError):
                await client.request(ExecRequest(type="exec", id=client.next_id(), cmd="true"))
            assert (await client.act([{"type": "screenshot"}])).screenshot is not None

        with_client(zone, body)
    finally:
        workspace.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            assert json_out(run(zone, cmd="echo '\"ok\"'")) == "ok"
            break
        except WorkspaceUnavailableError:
            assert time.monotonic() < deadline, "the workspace runner did not come back"
            time.sleep(0.5)


def test_a_configuration_file_the_agent_writes_does_not_steer_the_workspace_health_check(zone: Stack) -> None:
    """The agent writes deskpod's default configuration file into its home, naming a runner port
    and address nothing listens on. Docker runs the workspace's health check
    (``python -m deskpod.agentd.runner_health``) in the agent's zone, as the container's user with
    that home: it still pings the real runner, because the sandbox side reads its environment
    only (deskpod.settings.use_environment_only), while a host-side reader would take the file."""
    out = run(zone, cmd='mkdir -p "$HOME/.config/deskpod" && '
                        'printf \'runner_port = 9\\nrunner_host = "127.0.0.2"\\n\' > "$HOME/.config/deskpod/config.toml"')
    assert out.exit_code == 0, out
    workspace = zone.container("workspace")
    reader = workspace.exec_run(["python", "-c", "from deskpod.settings import load_settings as l; print(l().runner_port)"])
    assert (reader.exit_code, reader.output.strip()) == (0, b"9"), reader
    ping = workspace.exec_run(["python", "-m", "deskpod.agentd.runner_health"])
    assert ping.exit_code == 0, ping.output
    assert run(zone, cmd='rm -r "$HOME/.config/deskpod"').exit_code == 0
