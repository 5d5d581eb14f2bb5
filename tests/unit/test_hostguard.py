"""The host guard's pure parts: bridge names, its container's privileges, its configuration,
and compose.yaml's wiring of it (no Docker)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.hostguard import (
    BRIDGE_NAME_OPTION,
    MAX_BRIDGE_NAME_CHARS,
    guard_container_kwargs,
    project_bridge_name,
    sandbox_bridge_name,
)
from deskpod.errors import BackendError, HostFirewallError

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "compose.yaml").read_text()))


@pytest.mark.parametrize("project", ["deskpod", "deskpodit12345", "A Very Long Project Name With Spaces" * 3, ""])
def test_project_bridge_names_fit_an_interface_name(project: str) -> None:
    name = project_bridge_name(project)
    assert len(name) <= MAX_BRIDGE_NAME_CHARS and name.startswith("dp-")
    assert project_bridge_name(project.upper()) == name  # compose lower-cases project names


def test_different_projects_and_sandboxes_get_different_bridges() -> None:
    assert project_bridge_name("deskpodit1") != project_bridge_name("deskpodit2")
    assert sandbox_bridge_name("0123456789") == "dps-0123456789"
    long_id = "a" * 32
    assert len(sandbox_bridge_name(long_id)) <= MAX_BRIDGE_NAME_CHARS
    assert sandbox_bridge_name(long_id) != sandbox_bridge_name("b" * 32)


@pytest.mark.process
def test_compose_sh_derives_the_same_bridge_name(tmp_path: Path) -> None:
    """scripts/compose.sh names the bridge as project_bridge_name does (a fake `docker` prints it)."""
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\n[ "$2" = version ] && exit 0\necho "$DESKPOD_SANDBOX_BRIDGE"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("DESKPOD_SANDBOX_BRIDGE", "COMPOSE_PROJECT_NAME")}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"

    def bridge(*args: str, **extra: str) -> str:
        out = subprocess.run([str(ROOT / "scripts" / "compose.sh"), *args], env={**env, **extra},
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert bridge("ps") == project_bridge_name(ROOT.name)
    assert bridge("ps", COMPOSE_PROJECT_NAME="MyStack") == project_bridge_name("mystack")
    assert bridge("-p", "other", "ps") == project_bridge_name("other")
    assert bridge("ps", DESKPOD_SANDBOX_BRIDGE="dp-mine") == "dp-mine"


def test_the_guard_runs_with_host_networking_and_only_net_admin() -> None:
    kwargs = guard_container_kwargs("img", "install", ["dps-0123456789"])
    assert kwargs["network_mode"] == "host"
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["cap_add"] == ["NET_ADMIN"]
    assert kwargs["read_only"] is True and kwargs["security_opt"] == ["no-new-privileges:true"]
    assert kwargs["command"] == ["install", "dps-0123456789"]
    assert "mounts" not in kwargs


def test_iptables_legacy_adds_net_raw_and_the_hosts_xtables_lock() -> None:
    kwargs = guard_container_kwargs("img", "remove", ["dp-x"], iptables="legacy")
    assert kwargs["cap_add"] == ["NET_ADMIN", "NET_RAW"]
    assert [(m["Source"], m["Target"], m["Type"]) for m in kwargs["mounts"]] == [
        ("/run/xtables.lock", "/run/xtables.lock", "bind")]


@pytest.mark.parametrize("bad", [[], ["-j"], ["a;b"], ["x" * 16], ["br 0"], [""]])
def test_bad_bridge_names_are_refused(bad: list[str]) -> None:
    with pytest.raises(HostFirewallError):
        guard_container_kwargs("img", "install", bad)


def test_the_host_firewall_is_on_unless_turned_off() -> None:
    assert DockerBackendConfig.from_env({}).host_firewall is True
    assert DockerBackendConfig.from_env({"DESKPOD_HOST_FIREWALL": "off"}).host_firewall is False
    config = DockerBackendConfig.from_env({"DESKPOD_HOSTGUARD_IMAGE": "g:1", "DESKPOD_HOST_IPTABLES": "legacy"})
    assert (config.hostguard_image, config.host_iptables) == ("g:1", "legacy")
    for key, value in (("DESKPOD_HOST_FIREWALL", "maybe"), ("DESKPOD_HOST_IPTABLES", "ipfw")):
        with pytest.raises(BackendError):
            DockerBackendConfig.from_env({key: value})


def test_compose_runs_the_guard_before_the_sandbox_on_a_named_bridge() -> None:
    c = compose()
    guard = c["services"]["hostguard"]
    assert guard["network_mode"] == "host" and guard["read_only"] is True
    assert guard["cap_drop"] == ["ALL"] and guard["cap_add"] == ["NET_ADMIN"]
    assert guard["command"] == ["install", "${DESKPOD_SANDBOX_BRIDGE:-dp-sandbox}"]
    assert c["services"]["sandbox"]["depends_on"]["hostguard"] == {"condition": "service_completed_successfully"}
    assert c["networks"]["sandbox_net"]["driver_opts"] == {BRIDGE_NAME_OPTION: "${DESKPOD_SANDBOX_BRIDGE:-dp-sandbox}"}
    assert len("dp-sandbox") <= MAX_BRIDGE_NAME_CHARS
