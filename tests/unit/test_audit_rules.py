"""The audit's judging rules, on synthetic inspect data and probe facts (no Docker)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from deskpod.audit import AuditReport, render_table
from deskpod.audit.config_rules import config_checks, memory_volumes_as_tmpfs
from deskpod.audit.host import host_gateways, host_unreachable_check, local_ipv4_addresses
from deskpod.audit.inside_rules import inside_checks, untrusted_checks
from deskpod.audit.gate_probe import GATE_PROBE_SOURCE
from deskpod.audit.untrusted_probe import UNTRUSTED_PROBE_SOURCE
from deskpod.audit.zone import (
    GATE_FLOOD_CONNECTIONS,
    X_GATE_MAX_CONNECTIONS,
    display_gate_checks,
    reaped_check,
    tmpfs_within_memory,
    workspace_checks,
    zone_probe_checks,
)
from deskpod.agentd.display.xgate import MAX_GATE_CONNECTIONS
from deskpod.audit.reset_rules import reset_checks, reset_wipe_folders
from deskpod.audit.probes import HOST_PROBE_SOURCE, PROBE_SOURCE, ZONE_PROBE_SOURCE
from deskpod.audit.reap_probe import REAP_PROBE_SOURCE

PROFILE = json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["chroot"], "comment": "deskpod: x"}]})

GOOD_ATTRS: dict[str, Any] = {
    "Id": "c" * 64,
    "AppArmorProfile": "docker-default",
    "Config": {"User": "deskpod", "Env": ["DESKPOD_TOKEN_SHA256=" + "a" * 64],
               "Healthcheck": {"Test": ["CMD", "true"]}},
    "HostConfig": {
        "Privileged": False, "CapDrop": ["ALL"], "CapAdd": None,
        "SecurityOpt": ["no-new-privileges:true", "seccomp=" + PROFILE],
        "ReadonlyRootfs": True, "PidsLimit": 512, "Memory": 2 << 30, "NanoCpus": 2_000_000_000,
        "PidMode": "", "IpcMode": "private", "UTSMode": "", "NetworkMode": "p_sandbox_net", "UsernsMode": "",
        "Devices": [], "Binds": None, "Tmpfs": {"/tmp": "size=512m"}, "PortBindings": {},
    },
    "Mounts": [{"Type": "tmpfs", "Destination": "/tmp"}],
    "NetworkSettings": {"Networks": {"p_sandbox_net": {"NetworkID": "n1"}}, "Ports": {"8765/tcp": None}},
}
NETS = {"p_sandbox_net": {"Internal": True}}


def _failed(attrs: dict[str, Any], nets: dict[str, Any] = NETS) -> set[str]:
    return {c.id for c in config_checks(attrs, nets) if c.status == "fail"}


def _weaken(path: list[str], value: Any) -> dict[str, Any]:
    attrs = copy.deepcopy(GOOD_ATTRS)
    target = attrs
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return attrs


def test_a_compose_like_configuration_passes() -> None:
    assert _failed(GOOD_ATTRS) == set()


@pytest.mark.parametrize(
    ("path", "value", "check"),
    [
        (["HostConfig", "Privileged"], True, "not_privileged"),
        (["HostConfig", "CapDrop"], ["NET_RAW"], "cap_drop_all"),
        (["HostConfig", "CapAdd"], ["SYS_ADMIN"], "cap_add_none"),
        (["HostConfig", "SecurityOpt"], ["no-new-privileges:true", "seccomp=unconfined"], "seccomp_custom"),
        (["HostConfig", "SecurityOpt"], ["no-new-privileges:true"], "seccomp_custom"),
        (["HostConfig", "SecurityOpt"], ["seccomp=" + PROFILE], "no_new_privileges"),
        (["HostConfig", "ReadonlyRootfs"], False, "read_only_root"),
        (["HostConfig", "PidsLimit"], None, "pids_limit"),
        (["HostConfig", "Memory"], 0, "memory_limit"),
        (["HostConfig", "NanoCpus"], 0, "cpu_limit"),
        (["HostConfig", "PidMode"], "host", "no_host_pid_ns"),
        (["HostConfig", "IpcMode"], "host", "no_host_ipc_ns"),
        (["HostConfig", "UTSMode"], "host", "no_host_uts_ns"),
        (["HostConfig", "NetworkMode"], "host", "no_host_network_ns"),
        (["HostConfig", "Devices"], [{"PathOnHost": "/dev/kvm"}], "no_devices"),
        (["HostConfig", "Binds"], ["/var/run/docker.sock:/var/run/docker.sock"], "no_docker_socket"),
        (["Mounts"], [{"Type": "bind", "Source": "/etc", "Destination": "/host-etc"}], "no_host_mounts"),
        (["HostConfig", "PortBindings"], {"8765/tcp": [{"HostIp": "", "HostPort": "8765"}]}, "no_published_ports"),
        (["HostConfig", "Tmpfs"], {"/tmp": "mode=1777"}, "tmpfs_sized"),
        (["Config", "User"], "", "config_user"),
        (["Config", "Env"], ["DESKPOD_TOKEN=secret"], "no_token_in_config"),
    ],
)
def test_each_weakened_setting_fails_its_check(path: list[str], value: Any, check: str) -> None:
    assert check in _failed(_weaken(path, value))


def test_a_network_with_a_route_out_fails() -> None:
    assert "internal_network_only" in _failed(GOOD_ATTRS, {"p_sandbox_net": {"Internal": False}})


def _proc(pid: int, name: str, *, uid: str = "1000", cap: str = "0", seccomp: str = "2", ns: str | None = "user:[1]",
          cmd: str = "", nspid: str = "5", filters: str = "1") -> dict[str, Any]:
    return {"pid": pid, "Name": name, "Uid": f"{uid}\t{uid}\t{uid}\t{uid}", "CapEff": cap, "CapPrm": cap,
            "CapBnd": "0", "CapAmb": "0", "NoNewPrivs": "1", "Seccomp": seccomp, "Seccomp_filters": filters,
            "NSpid": nspid, "userns": ns, "cmd": cmd, "raw_token_env": False}


GOOD_FACTS: dict[str, Any] = {
    "uid": 1000,
    "own_userns": "user:[1]",
    "processes": [
        _proc(1, "tini"), _proc(7, "python", cmd="python -m deskpod.agentd"),
        _proc(20, "chromium", cmd="/usr/lib/chromium/chromium --user-data-dir=x"),
        _proc(30, "chromium", cmd="/usr/lib/chromium/chromium --type=renderer", ns="user:[2]", cap="1ff", filters="2",
              nspid="30 3"),
        _proc(40, "chromium", cmd="/usr/lib/chromium/chromium --type=gpu-process", filters="2"),
    ],
    "mounts": [["/", "overlay", "ro,relatime"], ["/tmp", "tmpfs", "rw,size=1"], ["/dev/shm", "tmpfs", "rw"]],
    "writable": {"/tmp": "/tmp", "/dev/shm": "/dev/shm"},
    "setid_files": [],
    "files_walked": 10,
    "syscalls": {"mount": 1, "keyctl": 1, "bpf": 1, "io_uring_setup": 1, "ptrace_other_process": 1},
    "raw_socket": 1,
    "tcp": [["egress@n2", "10.0.0.2", 3128, "blocked: TimeoutError: timed out"]],
    "udp": [["egress@n2", "10.0.0.2", 53, "blocked: TimeoutError: timed out"]],
    "icmp": [["egress@n2", "10.0.0.2", 0, "blocked: TimeoutError: timed out"]],
    "dns": {"demo.test": "failed: gaierror"},
    "ipv6_global": [],
    "listening": [["0.0.0.0", 8765], ["0.0.0.0", 6099], ["::", 6099], ["127.0.0.11", 37685]],
    "proxy": {"non_allowlisted_http": "HTTP/1.1 403 Forbidden"},
    "daemon_processes": {
        "init": [{"pid": 1, "mem_owner": 0, "mem_open": 13}],
        "agentd": [{"pid": 7, "mem_owner": 0, "mem_open": 13}],
        "Xvfb": [{"pid": 8, "mem_owner": 0, "mem_open": 13}],
        "openbox": [{"pid": 9, "mem_owner": 0, "mem_open": 13}],
    },
    "display": {"tcp_no_cookie": "refused: no display granted to this client", "abstract_sockets": [],
                "tcp_server_cookie": ["refused: no display granted to this client"], "security_extension": "present"},
}


def _inside_failed(facts: dict[str, Any]) -> set[str]:
    return {c.id for c in inside_checks(facts, ["/tmp"]) if c.status == "fail"}


def test_good_inside_facts_pass() -> None:
    assert _inside_failed(GOOD_FACTS) == set()


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("processes", [_proc(1, "tini", uid="0")], "uid_non_root"),
        ("processes", [_proc(1, "tini", cap="2000")], "cap_eff_zero"),
        ("processes", [_proc(1, "tini", seccomp="0")], "seccomp_filter_mode"),
        ("processes", [_proc(1, "tini")], "chromium_sandbox"),
        ("processes", [*GOOD_FACTS["processes"], _proc(41, "chromium", cmd="chromium --type=gpu-process")],
         "chromium_sandbox"),
        ("mounts", [["/", "overlay", "rw"]], "root_mounted_ro"),
        ("writable", {"/": "/var/tmp"}, "writable_only_tmpfs"),
        ("setid_files", ["/usr/bin/su"], "no_setid_files"),
        ("syscalls", {"io_uring_setup": 14}, "syscall_io_uring_setup"),
        ("syscalls", {"ptrace_other_process": 0}, "syscall_ptrace_other_process"),
        ("raw_socket", 0, "no_raw_socket"),
        ("tcp", [["demo@n2", "10.0.0.3", 80, "connected"]], "egress_tcp_blocked"),
        ("udp", [["demo@n2", "10.0.0.3", 53, "refused (reached)"]], "egress_udp_blocked"),
        ("icmp", [["demo@n2", "10.0.0.3", 0, "echo reply"]], "egress_icmp_blocked"),
        ("dns", {"demo.test": "resolved: 10.0.0.3"}, "dns_blocked"),
        ("listening", [["0.0.0.0", 9222]], "listen_loopback_only"),
        ("listening", [["0.0.0.0", 8765], ["127.0.0.1", 9222]], "no_devtools_port"),
        ("processes", [_proc(20, "chromium", cmd="chromium --remote-debugging-port=0")], "no_devtools_port"),
        ("proxy", {"ip_literal_http": "HTTP/1.1 200 OK"}, "proxy_refuses_ip_literal_http"),
        ("daemon_processes", dict(GOOD_FACTS["daemon_processes"], agentd=[{"pid": 7, "mem_owner": 1000,
                                                                           "mem_open": 0}]),
         "daemon_processes_non_dumpable"),
        ("daemon_processes", dict(GOOD_FACTS["daemon_processes"], Xvfb=[{"pid": 8, "mem_owner": 1000,
                                                                         "mem_open": 13}]),
         "daemon_processes_non_dumpable"),
        ("daemon_processes", {"agentd": [{"pid": 7, "mem_owner": 0, "mem_open": 13}]},
         "daemon_processes_non_dumpable"),
        ("daemon_processes", dict(GOOD_FACTS["daemon_processes"], init=[{"pid": 1, "mem_owner": 1000,
                                                                         "mem_open": 0}]),
         "daemon_processes_non_dumpable"),
        ("display", {"tcp_no_cookie": "accepted", "abstract_sockets": []}, "display_requires_cookie"),
        ("display", {"tcp_no_cookie": "refused: no", "abstract_sockets": ["@/tmp/.X11-unix/X99"]},
         "display_requires_cookie"),
        ("display", {}, "display_requires_cookie"),
        # The display's port admits the X server's own cookie (a grant of a trusted client, as on
        # main at 8939088), there is none to try, or the server cannot make untrusted cookies.
        ("display", dict(GOOD_FACTS["display"], tcp_server_cookie=["accepted"]), "display_grants_untrusted"),
        ("display", dict(GOOD_FACTS["display"], tcp_server_cookie=[]), "display_grants_untrusted"),
        ("display", dict(GOOD_FACTS["display"], security_extension="absent"), "display_grants_untrusted"),
    ],
)
def test_each_weakened_inside_fact_fails_its_check(key: str, value: Any, check: str) -> None:
    facts = dict(GOOD_FACTS, **{key: value})
    assert check in _inside_failed(facts)


GOOD_UNTRUSTED: dict[str, Any] = {"number": 99, "generated": "ok", "xtest": False, "get_image": "BadAccess",
                                   "after_revoke": "refused: Invalid MIT-MAGIC-COOKIE-1 key"}


def _untrusted_status(*displays: dict[str, Any]) -> str:
    return untrusted_checks({"displays": list(displays)})[0].status


def test_an_x_server_keeping_untrusted_clients_out_passes() -> None:
    assert _untrusted_status(GOOD_UNTRUSTED) == "pass"
    # The standby's server not started: not judged, while the one in force is.
    assert _untrusted_status(GOOD_UNTRUSTED, {"number": 100, "generated": "unreachable: ENOENT"}) == "pass"


@pytest.mark.parametrize("change", [
    {"generated": "no SECURITY extension"},  # no untrusted cookie can be made (Xvfb -extension SECURITY)
    {"generated": "refused: error 10"},
    {"xtest": True},  # the grant's client could type into the browser
    {"xtest": None},
    {"get_image": "allowed"},  # it could read the browser's pixels
    {"get_image": "error 8"},
    {"after_revoke": "accepted"},  # a grant would outlive its command
])
def test_an_x_server_letting_an_untrusted_client_through_fails(change: dict[str, Any]) -> None:
    assert _untrusted_status(dict(GOOD_UNTRUSTED, **change)) == "fail"
    assert _untrusted_status(GOOD_UNTRUSTED, dict(GOOD_UNTRUSTED, number=100, **change)) == "fail"


def test_no_x_server_tried_fails_display_untrusted_enforced() -> None:
    assert untrusted_checks({})[0].status == "fail"
    assert _untrusted_status({"number": 99, "generated": "unreachable: ECONNREFUSED"}) == "fail"


def test_a_non_dumpable_process_with_unreadable_namespaces_is_judged_with_the_container() -> None:
    """agentd's namespace links cannot be read once it is non-dumpable: it is not counted as
    living in another user namespace, and its capabilities still count."""
    procs = [*GOOD_FACTS["processes"], _proc(8, "Xvfb", ns=None)]
    assert _inside_failed(dict(GOOD_FACTS, processes=procs)) == set()
    procs = [*GOOD_FACTS["processes"], _proc(8, "Xvfb", ns=None, cap="2000")]
    assert "cap_eff_zero" in _inside_failed(dict(GOOD_FACTS, processes=procs))


def test_the_container_namespace_comes_from_the_probe_when_init_hides_it() -> None:
    procs = [_proc(1, "tini", ns=None), *GOOD_FACTS["processes"][1:]]
    assert _inside_failed(dict(GOOD_FACTS, processes=procs)) == set()
    procs = [*procs, _proc(40, "sh", ns="user:[9]")]
    assert "userns_only_chromium" in _inside_failed(dict(GOOD_FACTS, processes=procs))


def test_report_json_and_table_name_failed_checks() -> None:
    report = AuditReport("sb", "c" * 64, "deskpod/sandbox:latest",
                         config_checks(_weaken(["HostConfig", "ReadonlyRootfs"], False), NETS))
    assert not report.ok
    data = report.to_dict()
    assert data["ok"] is False and data["summary"]["fail"] == 1
    assert "FAILED: read_only_root" in render_table(report)


def test_the_probe_is_valid_python_and_uses_no_shell() -> None:
    compile(PROBE_SOURCE, "<probe>", "exec")
    assert "subprocess" not in PROBE_SOURCE and "os.system" not in PROBE_SOURCE


# ---------------------------------------------------------------- the agent's zone

WORKSPACE_ATTRS: dict[str, Any] = copy.deepcopy(GOOD_ATTRS) | {"Id": "w" * 64}
WORKSPACE_ATTRS["Config"] = {**GOOD_ATTRS["Config"], "User": "1001:1001"}
WORKSPACE_ATTRS["HostConfig"] = {**GOOD_ATTRS["HostConfig"], "ShmSize": 64 << 20,
                                 "Tmpfs": {"/workspace": "size=512m", "/tmp": "size=256m", "/home/agent": "size=128m"}}
WORKSPACE_ATTRS["Mounts"] = [{"Type": "tmpfs", "Destination": d} for d in ("/workspace", "/tmp", "/home/agent")]
SANDBOX_ATTRS = copy.deepcopy(GOOD_ATTRS)
SANDBOX_ATTRS["HostConfig"]["ShmSize"] = 512 << 20


def _zone_failed(workspace: dict[str, Any], sandbox: dict[str, Any] = SANDBOX_ATTRS) -> set[str]:
    return {c.id for c in workspace_checks(workspace, sandbox, NETS) if c.status == "fail"}


def test_a_compose_like_workspace_container_passes() -> None:
    assert _zone_failed(WORKSPACE_ATTRS) == set()
    assert tmpfs_within_memory({"sandbox": SANDBOX_ATTRS, "workspace": WORKSPACE_ATTRS}).status == "pass"


@pytest.mark.parametrize(
    ("path", "value", "check"),
    [
        (["HostConfig", "PidMode"], "container:sandbox", "workspace_own_namespaces"),
        (["HostConfig", "IpcMode"], "container:sandbox", "workspace_own_namespaces"),
        (["Config", "User"], "deskpod", "workspace_own_namespaces"),
        (["Mounts"], [{"Type": "volume", "Name": "shared", "Destination": "/workspace"}], "workspace_mounts_declared"),
        (["NetworkSettings", "Networks"], {"p_outside": {"NetworkID": "n2"}}, "workspace_networks"),
        (["HostConfig", "CapAdd"], ["SYS_PTRACE"], "workspace_hardening"),
    ],
)
def test_each_weakened_workspace_setting_fails_its_check(path: list[str], value: Any, check: str) -> None:
    attrs = copy.deepcopy(WORKSPACE_ATTRS)
    target = attrs
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert check in _zone_failed(attrs)


def test_tmpfs_above_the_memory_limit_fails() -> None:
    """Finding 7: 512 + 256 + 512 MiB of tmpfs and 1 GiB of shm in a 2 GiB container (main at 55dbe26)."""
    old = copy.deepcopy(SANDBOX_ATTRS)
    old["HostConfig"]["Tmpfs"] = {"/tmp": "size=512m", "/home/deskpod": "size=256m", "/workspace": "size=512m"}
    old["HostConfig"]["ShmSize"] = 1 << 30
    check = tmpfs_within_memory({"sandbox": old, "workspace": WORKSPACE_ATTRS})
    assert check.status == "fail" and "sandbox" in check.detail
    unsized = copy.deepcopy(WORKSPACE_ATTRS)
    unsized["HostConfig"]["Tmpfs"] = {"/workspace": "mode=0700"}
    assert tmpfs_within_memory({"workspace": unsized}).status == "fail"


GOOD_ZONE_FACTS: dict[str, Any] = {
    "uid": 1001,
    "processes": [{"pid": 1, "cmd": "python -m deskpod.agentd.runner ", "uid": "1001", "cap_eff": "0" * 16,
                   "opened": []},
                  {"pid": 40, "cmd": "sleep 10 ", "uid": "1001", "cap_eff": "0" * 16, "opened": ["mem_read"]}],
}


def _zone_probe_failed(facts: dict[str, Any]) -> set[str]:
    return {c.id for c in zone_probe_checks(facts) if c.status == "fail"}


def test_good_zone_facts_pass() -> None:
    assert _zone_probe_failed(GOOD_ZONE_FACTS) == set()


@pytest.mark.parametrize(
    ("process", "check"),
    [
        ({"pid": 7, "cmd": "python -m deskpod.agentd ", "uid": "1000", "cap_eff": "0", "opened": []},
         "agent_cannot_open_daemon_memory"),
        ({"pid": 8, "cmd": "/usr/lib/chromium/chromium --type=renderer", "uid": "1001", "cap_eff": "0", "opened": []},
         "agent_cannot_open_daemon_memory"),
        ({"pid": 1, "cmd": "python -m deskpod.agentd.runner ", "uid": "1001", "cap_eff": "0",
          "opened": ["mem_write"]}, "agent_cannot_open_daemon_memory"),
        ({"pid": 9, "cmd": "x", "uid": "1002", "cap_eff": "0", "opened": ["environ"]},
         "agent_cannot_open_daemon_memory"),
        ({"pid": 10, "cmd": "x", "uid": "1001", "cap_eff": "0000000000000400", "opened": []},
         "workspace_processes_unprivileged"),
    ],
)
def test_each_bad_zone_fact_fails_its_check(process: dict[str, Any], check: str) -> None:
    facts = copy.deepcopy(GOOD_ZONE_FACTS)
    facts["processes"] = [p for p in facts["processes"] if p["pid"] != process["pid"]] + [process]
    assert check in _zone_probe_failed(facts)


def test_a_concurrent_docker_exec_in_the_workspace_is_not_judged() -> None:
    # The runner's health check is a docker exec every 5 s; while runc sets it up the
    # process is root with the runtime's capabilities (CI saw pid 28 so, once).
    facts = copy.deepcopy(GOOD_ZONE_FACTS)
    facts["processes"].append({"pid": 28, "name": "runc:[2:INIT]", "cmd": "runc init", "uid": "0",
                               "cap_eff": "000001fffeffffff", "opened": []})
    assert _zone_probe_failed(facts) == set()
    facts["processes"][-1]["name"] = "python3"
    assert _zone_probe_failed(facts) == {"workspace_processes_unprivileged"}


def test_processes_reaped_needs_the_hidden_processes_started_and_gone() -> None:
    assert reaped_check(True, []).status == "pass"
    assert reaped_check(True, ["123 python3 -c ... mark"]).status == "fail"
    assert reaped_check(False, []).status == "fail"


GOOD_GATE_FACTS: dict[str, Any] = {
    "no_cookie": "refused: no display granted to this client",
    "guessed_cookie": "refused: no display granted to this client",
    "flood": {"opened": GATE_FLOOD_CONNECTIONS, "closed": GATE_FLOOD_CONNECTIONS - X_GATE_MAX_CONNECTIONS},
    "after": "refused: no display granted to this client",
}


def _gate_failed(facts: dict[str, Any]) -> set[str]:
    return {c.id for c in display_gate_checks(facts) if c.status == "fail"}


def test_a_gate_refusing_without_a_grant_and_holding_its_bound_passes() -> None:
    assert _gate_failed(GOOD_GATE_FACTS) == set()
    # The audit judges the bound the gate enforces.
    assert X_GATE_MAX_CONNECTIONS == MAX_GATE_CONNECTIONS


@pytest.mark.parametrize(
    ("change", "check"),
    [
        # An X server the agent's zone reaches without a cookie or with any cookie (Xvfb -ac
        # listening on TCP); none reached at all (the probe proves nothing).
        ({"no_cookie": "accepted"}, "workspace_display_needs_grant"),
        ({"guessed_cookie": "accepted"}, "workspace_display_needs_grant"),
        ({"guessed_cookie": "authenticate"}, "workspace_display_needs_grant"),
        ({"no_cookie": "unreachable: ECONNREFUSED"}, "workspace_display_needs_grant"),
        # Every idle connection held (no bound: 400 of them filled the X server's client
        # slots); some not even opened; the port silent after the flood.
        ({"flood": {"opened": GATE_FLOOD_CONNECTIONS, "closed": 0}}, "workspace_display_connections_capped"),
        ({"flood": {"opened": GATE_FLOOD_CONNECTIONS, "closed": 15}}, "workspace_display_connections_capped"),
        ({"flood": {"opened": 10, "closed": 0}}, "workspace_display_connections_capped"),
        ({"after": "closed"}, "workspace_display_connections_capped"),
    ],
)
def test_each_weakened_gate_fact_fails_its_check(change: dict[str, Any], check: str) -> None:
    assert _gate_failed(dict(GOOD_GATE_FACTS, **change)) == {check}


def test_the_gate_checks_fail_when_the_probe_did_not_run() -> None:
    assert _gate_failed({}) == {"workspace_display_needs_grant", "workspace_display_connections_capped"}


def test_the_zone_probes_are_valid_python() -> None:
    for source in (ZONE_PROBE_SOURCE, REAP_PROBE_SOURCE, GATE_PROBE_SOURCE, UNTRUSTED_PROBE_SOURCE):
        compile(source, "<probe>", "exec")
        assert "subprocess" not in source and "os.system" not in source
# --------------------------------------------------------------------------- host_unreachable

HOST_TARGETS = [["10.0.0.1", "p_sandbox_net gateway (dp-x)"], ["fd00::1", "p_sandbox_net gateway (dp-x)"]]
BLOCKED_HOST_FACTS: dict[str, Any] = {
    "uid": 1000,
    "tcp": [[t[1], t[0], 40000, "blocked: TimeoutError: timed out"] for t in HOST_TARGETS],
    "udp": [[t[1], t[0], 40001, "blocked: no answer"] for t in HOST_TARGETS],
    "icmp": [[t[1], t[0], 0, "blocked: TimeoutError: timed out"] for t in HOST_TARGETS],
}


def test_host_gateways_come_from_every_network_ipv4_and_ipv6_once() -> None:
    attrs = {"NetworkSettings": {"Networks": {
        "a_net": {"Gateway": "10.0.0.1", "IPv6Gateway": "fd00::1"},
        "b_net": {"Gateway": "10.0.1.1", "IPv6Gateway": ""},
    }}}
    nets = {"a_net": {"Options": {"com.docker.network.bridge.name": "dp-a"},
                      "IPAM": {"Config": [{"Gateway": "10.0.0.1"}, {"Gateway": "fd00::1/64"}]}},
            "b_net": {"IPAM": {"Config": [{"Subnet": "10.0.1.0/24", "Gateway": "10.0.1.1"}]}}}
    assert host_gateways(attrs, nets) == [["10.0.0.1", "a_net gateway (dp-a)"], ["fd00::1", "a_net gateway (dp-a)"],
                                          ["10.0.1.1", "b_net gateway"]]


def test_nothing_answering_on_any_gateway_passes_host_unreachable() -> None:
    check = host_unreachable_check(HOST_TARGETS, BLOCKED_HOST_FACTS, [], ["10.0.0.1"])
    assert check.status == "pass" and "10.0.0.1" in check.detail and "fd00::1" in check.detail


@pytest.mark.parametrize(
    ("kind", "result"),
    [("tcp", "connected"), ("tcp", "refused (reached)"), ("udp", "answered"), ("udp", "refused (reached)"),
     ("icmp", "echo reply")],
)
def test_any_answer_from_the_host_fails_host_unreachable(kind: str, result: str) -> None:
    facts = copy.deepcopy(BLOCKED_HOST_FACTS)
    facts[kind][1][3] = result
    check = host_unreachable_check(HOST_TARGETS, facts, [], ["10.0.0.1"])
    assert check.status == "fail" and result in check.detail


def test_a_datagram_the_host_saw_fails_host_unreachable_even_without_an_answer() -> None:
    check = host_unreachable_check(HOST_TARGETS, BLOCKED_HOST_FACTS, ["udp from 10.0.0.2: nonce"], ["10.0.0.1"])
    assert check.status == "fail" and "udp from 10.0.0.2" in check.detail


def test_host_unreachable_fails_without_a_probe_and_warns_when_nothing_could_be_shown() -> None:
    assert host_unreachable_check(HOST_TARGETS, None, [], []).status == "fail"
    assert host_unreachable_check([], {"tcp": [], "udp": [], "icmp": []}, [], []).status == "warn"
    # The listener is not at the gateway addresses: the audit is not on the Docker host.
    assert host_unreachable_check(HOST_TARGETS, BLOCKED_HOST_FACTS, [], []).status == "warn"


def test_the_host_probe_is_valid_python_and_uses_no_shell() -> None:
    compile(HOST_PROBE_SOURCE, "<host probe>", "exec")
    assert "subprocess" not in HOST_PROBE_SOURCE and "os.system" not in HOST_PROBE_SOURCE


FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.210.0.0/31 1 0 0
        |-- 10.210.0.0
           /24 link UNICAST
        |-- 10.210.0.1
           /32 host LOCAL
     |-- 10.210.0.255
        /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
        |-- 10.210.0.1
           /32 host LOCAL
        |-- 192.168.5.7
           /32 host LOCAL
"""


def test_the_hosts_own_addresses_are_read_from_fib_trie_without_loopback() -> None:
    assert local_ipv4_addresses(FIB_TRIE) == ["10.210.0.1", "192.168.5.7"]


def test_the_runtimes_transient_exec_init_is_not_judged_but_an_unfiltered_process_is() -> None:
    """``runc:[2:INIT]`` (a concurrent ``docker exec`` being set up, such as the health
    check) has no seccomp filter yet; any other process without one fails."""
    init = _proc(99, "runc:[2:INIT]", seccomp="0", filters="0")
    assert _inside_failed({**GOOD_FACTS, "processes": [*GOOD_FACTS["processes"], init]}) == set()
    plain = _proc(99, "sh", seccomp="0", filters="0")
    assert "seccomp_filter_mode" in _inside_failed({**GOOD_FACTS, "processes": [*GOOD_FACTS["processes"], plain]})


@pytest.mark.parametrize(("env", "wipe"), [
    (["HOME=/home/deskpod", "PATH=/usr/bin"], ["/tmp", "/dev/shm", "/home/deskpod"]),
    ([], ["/tmp", "/dev/shm", "/home/deskpod"]),
    (["HOME=/home/x", "DESKPOD_RESET_WIPE=/tmp:/home/x:"], ["/tmp", "/home/x"]),
])
def test_the_reset_folders_are_read_as_the_daemon_reads_them(env: list[str], wipe: list[str]) -> None:
    assert reset_wipe_folders(env) == wipe


def _reset_status(writable: dict[str, str], wipe: list[str]) -> str:
    (check,) = reset_checks({"writable": writable}, wipe)
    assert check.id == "reset_empties_writable"
    return check.status


def test_a_reset_that_empties_every_writable_folder_passes() -> None:
    writable = {"/tmp": "/tmp", "/home/deskpod": "/home/deskpod", "/dev/shm": "/dev/shm", "/dev/mqueue": "/dev/mqueue"}
    assert _reset_status(writable, ["/tmp", "/dev/shm", "/home/deskpod"]) == "pass"
    assert _reset_status({"/tmp/deskpod": "/tmp/deskpod/x"}, ["/tmp/"]) == "pass"


@pytest.mark.parametrize(("writable", "wipe"), [
    # An extra tmpfs no reset empties (writable_only_tmpfs passes it when declared).
    ({"/tmp": "/tmp", "/var/tmp": "/var/tmp"}, ["/tmp", "/dev/shm", "/home/deskpod"]),
    # A reset that empties only the runtime folder leaves the rest of /tmp.
    ({"/tmp": "/tmp"}, ["/tmp/deskpod", "/dev/shm"]),
    ({"/": "/var/lib"}, ["/tmp"]),
    ({}, ["/tmp"]),
])
def test_a_writable_folder_no_reset_empties_fails(writable: dict[str, str], wipe: list[str]) -> None:
    assert _reset_status(writable, wipe) == "fail"


COMPOSE_WORKSPACE_VOLUME = {"Driver": "local", "Options": {"type": "tmpfs", "device": "tmpfs",
                                                           "o": "size=512m,uid=1001,gid=1001,mode=0770"}}
"""compose.yaml's volume ``workspace`` as the engine inspects it: memory only."""


def _with_volume_workspace(volume: dict[str, Any]) -> dict[str, Any]:
    """The compose workspace container as it is now (``/workspace`` the volume ``p_workspace``),
    judged with ``volume`` as that volume's inspect data."""
    attrs = copy.deepcopy(WORKSPACE_ATTRS)
    del attrs["HostConfig"]["Tmpfs"]["/workspace"]
    attrs["Mounts"][0] = {"Type": "volume", "Name": "p_workspace", "Destination": "/workspace",
                          "Source": "/var/lib/docker/volumes/p_workspace/_data"}
    attrs["HostConfig"]["Binds"] = ["p_workspace:/workspace:rw"]  # as compose starts it
    return memory_volumes_as_tmpfs(attrs, {"p_workspace": volume})


def test_a_memory_only_volume_is_judged_as_the_tmpfs_it_is() -> None:
    attrs = _with_volume_workspace(COMPOSE_WORKSPACE_VOLUME)
    assert _zone_failed(attrs) == set()
    assert attrs["HostConfig"]["Tmpfs"]["/workspace"] == "size=512m,uid=1001,gid=1001,mode=0770"
    assert tmpfs_within_memory({"sandbox": SANDBOX_ATTRS, "workspace": attrs}).status == "pass"


@pytest.mark.parametrize("volume", [{"Driver": "local", "Options": {}},
                                    {"Driver": "local", "Options": {"type": "none", "device": "/srv", "o": "bind"}},
                                    {"Driver": "nfs", "Options": {"type": "tmpfs", "device": "tmpfs"}}])
def test_a_volume_on_disk_or_of_another_driver_stays_a_host_mount(volume: dict[str, Any]) -> None:
    assert {"workspace_hardening", "workspace_mounts_declared"} <= _zone_failed(_with_volume_workspace(volume))


def test_a_memory_only_volume_shared_with_the_sandbox_is_still_shared() -> None:
    sandbox = copy.deepcopy(SANDBOX_ATTRS)
    sandbox["Mounts"] = [*sandbox.get("Mounts", []), {"Type": "volume", "Name": "p_workspace", "Destination": "/w",
                                                      "Source": "/var/lib/docker/volumes/p_workspace/_data"}]
    assert "workspace_mounts_declared" in _zone_failed(_with_volume_workspace(COMPOSE_WORKSPACE_VOLUME), sandbox)
