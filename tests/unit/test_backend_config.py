"""The Docker backend's pure parts: compose semantics → docker SDK arguments, naming,
configuration precedence, and the pool's host state file."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpod import __version__
from deskpod.backend.config import (
    EGRESS_ALIAS,
    HEALTHCHECK_TEST,
    LABEL_POOL,
    LABEL_ROLE,
    LABEL_SANDBOX,
    DockerBackendConfig,
    desktop_service,
    egress_service,
    labels,
    new_sandbox_id,
    parse_bytes,
    parse_duration_ns,
    resource_names,
    sandbox_service,
    translate_service,
    workspace_service,
    workspace_volume_options,
)
from deskpod.tokens import token_sha256
from deskpod.backend.pool import PoolMember
from deskpod.backend.base import SandboxHandle
from deskpod.backend.pool_state import PoolRecord, PoolStateFile, state_dir
from deskpod.controller.egress import egress_control_beside, egress_control_of
from deskpod.errors import BackendError, SettingsError

ROOT = Path(__file__).resolve().parents[2]
HARDENING = ("read_only", "tmpfs", "shm_size", "cap_drop", "security_opt", "pids_limit", "mem_limit", "nano_cpus")
COMPOSE_ONLY = ("build", "networks", "depends_on", "restart")
"""Keys of compose.yaml's services the backend handles itself: networks (a slot per
sandbox), the restart policy (none: the pool replaces a dead sandbox)."""


def read_profile(path: str) -> str:
    return (ROOT / path).read_text() if not Path(path).is_absolute() else Path(path).read_text()


def compose_service(name: str, env: dict[str, str]) -> dict[str, Any]:
    """compose.yaml's service ``name`` with ``${VAR...}`` interpolated as compose does."""
    text = (ROOT / "compose.yaml").read_text()
    env = {"DESKPOD_TOKEN": "t" * 32, "DESKPOD_TOKEN_SHA256": "ab" * 32, **env}

    def sub(m: re.Match[str]) -> str:
        var, op, default = m.group(1), m.group(2) or "", m.group(3) or ""
        if var in env:
            return env[var]
        if op == ":?":
            raise AssertionError(f"{var} is required by compose.yaml")
        return default

    text = re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", sub, text)
    service = dict(yaml.safe_load(text)["services"][name])
    for key in COMPOSE_ONLY:
        service.pop(key, None)
    return service


@pytest.fixture
def config() -> DockerBackendConfig:
    return DockerBackendConfig.from_env({}, seccomp_profile=str(ROOT / "seccomp" / "sandbox.json"))


def test_the_sandbox_gets_compose_yamls_hardening(config: DockerBackendConfig) -> None:
    digest = "ab" * 32
    ours = translate_service(sandbox_service(config, digest), read_profile)
    theirs = translate_service(compose_service("sandbox", {"DESKPOD_TOKEN_SHA256": digest}), read_profile)
    for key in (*HARDENING, "image"):
        assert ours[key] == theirs[key], key
    # The backend starts no desktop applications' zone: its sandboxes answer open_app
    # with no_desktop without asking anyone.
    assert theirs["environment"].pop("DESKPOD_APPS_RUNNER") == "desktop:8771"
    assert ours["environment"] == theirs["environment"]
    assert ours["cap_drop"] == ["ALL"] and ours["read_only"] is True
    assert ours["shm_size"] == 2**30 and ours["mem_limit"] == 3 * 2**30 and ours["nano_cpus"] == 2_000_000_000
    assert ours["user"] == "1000:1000"
    assert ours["restart_policy"] == {"Name": "no"}


def test_the_seccomp_profile_is_sent_as_json_content(config: DockerBackendConfig) -> None:
    opts = translate_service(sandbox_service(config, "ab" * 32), read_profile)["security_opt"]
    assert opts[0] == "no-new-privileges:true"
    key, _, profile = opts[1].partition("=")
    assert key == "seccomp"
    assert json.loads(profile) == json.loads((ROOT / "seccomp" / "sandbox.json").read_text())


def test_the_sandbox_env_has_only_the_tokens_hash(config: DockerBackendConfig) -> None:
    env = translate_service(sandbox_service(config, token_sha256("secret-token")), read_profile)["environment"]
    assert env["DESKPOD_TOKEN_SHA256"] == token_sha256("secret-token")
    assert "secret-token" not in json.dumps(env)
    assert not {"DESKPOD_TOKEN", "DESKPOD_TOKEN_FILE"} & set(env)
    assert env["HTTP_PROXY"] == env["https_proxy"] == f"http://{EGRESS_ALIAS}:3128"


def test_the_health_check_is_the_images(config: DockerBackendConfig) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    m = re.search(r"HEALTHCHECK (.*?)\\\n\s*CMD (\[.*\])", dockerfile)
    assert m, "no HEALTHCHECK in the Dockerfile"
    assert ["CMD", *json.loads(m.group(2))] == HEALTHCHECK_TEST
    hc = translate_service(sandbox_service(config, "ab" * 32), read_profile)["healthcheck"]
    assert hc == {"test": HEALTHCHECK_TEST, "interval": 5_000_000_000, "timeout": 5_000_000_000,
                  "start_period": 60_000_000_000, "retries": 3}
    assert "--interval=5s --timeout=5s --start-period=60s --retries=3" in m.group(1)


def test_the_workspace_container_gets_compose_yamls_service(config: DockerBackendConfig) -> None:
    """The agent's zone: the same flags as compose.yaml's workspace service, uid 1001, the runner as PID 1."""
    ours = translate_service(workspace_service(config), read_profile)
    compose = compose_service("workspace", {})
    # compose.yaml's /workspace is the volume `workspace` (a tmpfs of the same size), shared with
    # the desktop profile's applications' zone; the backend starts no such zone: a tmpfs of its own.
    assert compose.pop("volumes") == ["workspace:/workspace"]
    compose["tmpfs"] = ["/workspace:uid=1001,gid=1001,mode=0700,size=512m", *compose["tmpfs"]]
    theirs = translate_service(compose, read_profile)
    assert ours == {**theirs, "restart_policy": {"Name": "no"}}
    assert ours["user"] == "1001:1001" and ours["entrypoint"] == ["python", "-m", "deskpod.agentd.runner"]
    assert ours["ipc_mode"] == "private" and ours["cap_drop"] == ["ALL"]
    sandbox = translate_service(sandbox_service(config, "ab" * 32), read_profile)
    assert sandbox["environment"]["DESKPOD_WORKSPACE_RUNNER"] == "workspace:8770"
    assert "/workspace" not in sandbox["tmpfs"]


@pytest.fixture
def desktop_config() -> DockerBackendConfig:
    return DockerBackendConfig.from_env({"DESKPOD_DESKTOP": "on"}, seccomp_profile=str(ROOT / "seccomp" / "sandbox.json"))


def compose_volume(name: str) -> dict[str, Any]:
    """compose.yaml's top-level volume ``name``."""
    return dict(yaml.safe_load((ROOT / "compose.yaml").read_text())["volumes"][name])


def test_the_desktop_setting_is_off_by_default_and_names_the_desktop_image() -> None:
    assert DockerBackendConfig.from_env({}).desktop is False
    config = DockerBackendConfig.from_env({"DESKPOD_DESKTOP": "on", "DESKPOD_DESKTOP_IMAGE": "deskpod/desktop:x"})
    assert config.desktop is True and config.desktop_image == "deskpod/desktop:x"
    assert DockerBackendConfig().desktop_image == f"deskpod/desktop:{__version__}"


def test_with_the_desktop_the_slot_gets_compose_yamls_desktop_profile(desktop_config: DockerBackendConfig) -> None:
    """The desktop profile: the desktop service exactly as compose.yaml's (its /workspace the
    slot's volume, which the backend mounts), the workspace service exactly as compose.yaml's
    (the volume, no tmpfs of its own), the sandbox's env compose.yaml's, apps runner included."""
    compose = compose_service("desktop", {})
    assert compose.pop("profiles") == ["desktop"] and compose.pop("volumes") == ["workspace:/workspace"]
    ours = translate_service(desktop_service(desktop_config), read_profile)
    assert ours == {**translate_service(compose, read_profile), "restart_policy": {"Name": "no"}}
    assert ours["user"] == "1001:1001" and "HTTP_PROXY" not in ours["environment"]
    workspace = compose_service("workspace", {})
    assert workspace.pop("volumes") == ["workspace:/workspace"]
    assert translate_service(workspace_service(desktop_config), read_profile) == {
        **translate_service(workspace, read_profile), "restart_policy": {"Name": "no"}}
    digest = "ab" * 32
    sandbox = translate_service(sandbox_service(desktop_config, digest), read_profile)
    theirs = translate_service(compose_service("sandbox", {"DESKPOD_TOKEN_SHA256": digest}), read_profile)
    assert sandbox["environment"] == theirs["environment"]
    assert sandbox["environment"]["DESKPOD_APPS_RUNNER"] == "desktop:8771"


def test_the_slots_workspace_volume_is_compose_yamls(desktop_config: DockerBackendConfig) -> None:
    assert workspace_volume_options(desktop_config) == compose_volume("workspace")["driver_opts"]


def test_a_sized_desktop_slot_splits_its_budget_four_ways() -> None:
    """With a slot budget the desktop zone gets its share: the four limits fit the budget, and in
    the desktop container the shared volume, its tmpfs and shm leave half its limit free."""
    config = DockerBackendConfig(desktop=True, slot_memory="1g")
    plan = config.slot_limits()
    assert plan is not None and plan.desktop_bytes > 0 and plan.total_bytes <= 2**30
    desktop = translate_service(desktop_service(config), lambda _: "{}")
    assert desktop["mem_limit"] == desktop["memswap_limit"] == plan.desktop_bytes
    used = sum(parse_bytes(o.rsplit("size=", 1)[1]) for o in desktop["tmpfs"].values()) + desktop["shm_size"]
    volume = parse_bytes(workspace_volume_options(config)["o"].split(",")[0].removeprefix("size="))
    assert volume == plan.workspace_dir_bytes and used + volume <= plan.desktop_bytes / 2
    assert DockerBackendConfig(slot_memory="1g").slot_limits().desktop_bytes == 0  # type: ignore[union-attr]
    with pytest.raises(BackendError):
        DockerBackendConfig.from_env({"DESKPOD_DESKTOP": "on", "DESKPOD_SLOT_MEMORY": "700m"})


def test_the_egress_proxy_gets_compose_yamls_hardening(config: DockerBackendConfig) -> None:
    ours = translate_service(egress_service(config, "cd" * 32), read_profile)
    theirs = translate_service(compose_service("egress", {"DESKPOD_EGRESS_CONTROL_TOKEN_SHA256": "cd" * 32}),
                               read_profile)
    assert ours == {**theirs, "restart_policy": {"Name": "no"}}
    assert ours["environment"] == {"DESKPOD_EGRESS_ALLOWLIST": "demo.test", "DESKPOD_EGRESS_DAEMON": "sandbox:8765",
                                   "DESKPOD_EGRESS_CONTROL_TOKEN_SHA256": "cd" * 32}


def test_a_slots_proxy_gets_only_its_control_tokens_hash(config: DockerBackendConfig) -> None:
    """The slot's proxy holds the hash of the token the backend keeps; no container of the slot the token."""
    token = "egress-control-secret-0123456789"
    proxy = egress_service(config, token_sha256(token))
    assert proxy["environment"]["DESKPOD_EGRESS_CONTROL_TOKEN_SHA256"] == token_sha256(token)
    for service in (proxy, sandbox_service(config, "ab" * 32), workspace_service(config)):
        assert token not in repr(service)
    assert egress_service(config, "")["environment"]["DESKPOD_EGRESS_CONTROL_TOKEN_SHA256"] == ""


def test_start_url_and_screen_size_reach_the_sandbox() -> None:
    config = DockerBackendConfig(start_url="http://demo.test/", screen_size="1920x1080")
    env = sandbox_service(config, "ab" * 32)["environment"]
    assert env["DESKPOD_START_URL"] == "http://demo.test/" and env["DESKPOD_SCREEN_SIZE"] == "1920x1080"
    assert "DESKPOD_START_URL" not in sandbox_service(DockerBackendConfig(), "ab" * 32)["environment"]


@pytest.mark.parametrize(("variable", "default", "value", "bad"), [
    ("DESKPOD_DEVICE_SCALE_FACTOR", "1", "1.5", "8"),
    ("DESKPOD_DISPLAY_REFRESH_HZ", "240", "60", "1000"),
])
def test_the_screen_settings_reach_the_sandbox(variable: str, default: str, value: str, bad: str) -> None:
    """The device scale factor (0.5..4) and the display's refresh rate (30..480 Hz) go to
    every pool sandbox, with compose.yaml's defaults; out of range they are refused."""
    assert sandbox_service(DockerBackendConfig(), "ab" * 32)["environment"][variable] == default
    config = DockerBackendConfig.from_env({variable: value})
    assert sandbox_service(config, "ab" * 32)["environment"][variable] == value
    with pytest.raises(BackendError):
        DockerBackendConfig.from_env({variable: bad})


@pytest.mark.parametrize("text, expected", [
    ("1gb", 2**30), ("1g", 2**30), ("512m", 512 * 2**20), ("8k", 8192), ("100", 100), (4096, 4096),
    ("1.5g", int(1.5 * 2**30)),
])
def test_sizes_parse_in_compose_notation(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("5s", 5_000_000_000), ("500ms", 500_000_000), ("1m30s", 90_000_000_000), ("1h", 3_600_000_000_000), (2, 2_000_000_000),
])
def test_durations_parse_in_compose_notation(text: str | int, expected: int) -> None:
    assert parse_duration_ns(text) == expected


@pytest.mark.parametrize("bad", ["", "g", "12q", "-1m", "1 gb extra"])
def test_bad_sizes_are_refused(bad: str) -> None:
    with pytest.raises(BackendError) as info:
        parse_bytes(bad)
    assert info.value.detail["reason"] == "config"


@pytest.mark.parametrize("bad", ["", "5", "5x", "s5", "5s junk"])
def test_bad_durations_are_refused(bad: str) -> None:
    with pytest.raises(BackendError):
        parse_duration_ns(bad)


def test_unsupported_compose_keys_are_refused_not_dropped() -> None:
    with pytest.raises(BackendError, match="privileged"):
        translate_service({"image": "x", "privileged": True}, read_profile)
    with pytest.raises(BackendError, match="volumes"):
        translate_service({"image": "x", "volumes": ["/:/host"]}, read_profile)


def test_names_and_labels() -> None:
    sid = new_sandbox_id()
    assert re.fullmatch(r"[0-9a-f]{10}", sid)
    assert new_sandbox_id() != sid
    names = resource_names("deskpod", sid)
    assert (names.network, names.egress, names.sandbox) == (
        f"deskpod-{sid}-net", f"deskpod-{sid}-egress", f"deskpod-{sid}-sandbox")
    assert labels(sid, "egress", "ci") == {LABEL_SANDBOX: sid, LABEL_ROLE: "egress", LABEL_POOL: "ci"}


@pytest.mark.parametrize("prefix, sid", [("deskpod", "../x"), ("deskpod", "ABC123"), ("-x", "abcd1234"),
                                         ("a b", "abcd1234"), ("deskpod", "ab")])
def test_bad_names_are_refused(prefix: str, sid: str) -> None:
    with pytest.raises(BackendError):
        resource_names(prefix, sid)


def test_configuration_precedence_explicit_then_env_then_defaults() -> None:
    env = {"DESKPOD_EGRESS_ALLOWLIST": "a.test b.test", "DESKPOD_SANDBOX_IMAGE": "img:env",
           "DESKPOD_OUTSIDE_NETWORK": "outside", "DESKPOD_SECCOMP_PROFILE": "/etc/p.json"}
    config = DockerBackendConfig.from_env(env, sandbox_image="img:explicit", start_url=None)
    assert config.type == "docker"
    assert config.sandbox_image == "img:explicit"
    assert config.egress_allowlist == "a.test b.test" and config.outside_network == "outside"
    assert config.seccomp_profile == "/etc/p.json"
    assert config.egress_image == f"deskpod/egress:{__version__}" and config.screen_size == "1280x800"
    default = DockerBackendConfig.from_env({})
    assert default.outside_network == "bridge" and default.name_prefix == "deskpod"
    assert Path(default.seccomp_profile) == (ROOT / "seccomp" / "sandbox.json").resolve()


@pytest.mark.parametrize("field, value", [("screen_size", "big"), ("name_prefix", "../x"), ("cpus", "0"),
                                          ("pids_limit", "-1")])
def test_bad_configuration_is_a_backend_error(field: str, value: str) -> None:
    with pytest.raises(BackendError) as info:
        DockerBackendConfig.from_env({}, **{field: value})
    assert info.value.detail["reason"] == "config"


def test_the_config_round_trips_with_its_tag() -> None:
    config = DockerBackendConfig(egress_allowlist="x.test")
    data = json.loads(config.model_dump_json())
    assert data["type"] == "docker"
    assert DockerBackendConfig.model_validate(data) == config
    with pytest.raises(ValueError):
        DockerBackendConfig.model_validate({**data, "type": "k8s"})
    with pytest.raises(ValueError):
        DockerBackendConfig.model_validate({**data, "privileged": True})


def test_handles_never_show_their_token() -> None:
    handle = SandboxHandle(id="abcd1234", container="c", network="n", egress="e", address="172.18.0.3",
                           token="very-secret", egress_address="172.18.0.2", egress_token="egress-secret")
    assert "very-secret" not in repr(handle) and "egress-secret" not in repr(handle)
    assert handle.egress_control_url == "http://172.18.0.2:3129"
    assert handle.url == "ws://172.18.0.3:8765/v1/ws"
    assert handle.health_url == "http://172.18.0.3:8765/healthz"


def test_state_dir_follows_the_environment(tmp_path: Path) -> None:
    assert state_dir({"DESKPOD_STATE_DIR": str(tmp_path)}) == tmp_path
    assert state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/deskpod")
    assert state_dir({}) == Path.home() / ".local" / "state" / "deskpod"


def test_the_state_file_and_token_files_are_private(tmp_path: Path) -> None:
    state = PoolStateFile("ci", tmp_path / "state")
    handle = SandboxHandle(id="abcd1234", container="c", network="n", egress="e", address="172.18.0.3",
                           token="very-secret", pool="ci", egress_address="172.18.0.2",
                           egress_token="egress-secret-0123456789", egress_lessee="lessee-secret-0123456789")
    record = PoolRecord(name="ci", size=1, backend=DockerBackendConfig())
    with state.lock():
        assert state.load() is None

        class Pool:  # what update_from reads
            members = [PoolMember(handle, "leased", 2)]

        record.update_from(Pool())  # type: ignore[arg-type]
        state.save(record)
        token_file = state.write_token(handle.id, handle.token)
        egress_file = state.write_egress_control(handle)
    loaded = state.load()
    assert loaded is not None and loaded.to_members() == [PoolMember(handle, "leased", 2)]
    assert loaded.to_members()[0].handle.token == "very-secret"
    assert loaded.to_members()[0].handle.egress_token == "egress-secret-0123456789"
    assert loaded.to_members()[0].handle.egress_lessee == "lessee-secret-0123456789"
    # The lease carries the slot's own proxy control: `deskpod run --token-file` finds it beside the token,
    # with the lease's lessee token, never the slot's control token.
    assert egress_file is not None and egress_file == token_file.with_suffix(".egress")
    assert json.loads(egress_file.read_text())["token"] == "lessee-secret-0123456789"
    assert "egress-secret" not in egress_file.read_text()
    control = egress_control_beside(token_file)
    assert control is not None and (control.host, control.port) == ("172.18.0.2", 3129)
    of_handle = egress_control_of(handle)
    assert of_handle is not None and of_handle.host == "172.18.0.2"
    for path in (state.path, token_file, egress_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for d in (state.directory, state.path.parent, state.tokens):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert token_file.read_text() == "very-secret"
    state.remove_token(handle.id)
    assert not token_file.exists() and not egress_file.exists()
    assert egress_control_beside(token_file) is None
    state.delete()
    assert state.load() is None


@pytest.mark.parametrize("name", ["", "../x", "A", "-x", "x" * 33])
def test_bad_pool_names_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(BackendError):
        PoolStateFile(name, tmp_path)


def test_a_malformed_state_file_is_a_backend_error(tmp_path: Path) -> None:
    state = PoolStateFile("ci", tmp_path)
    state.path.parent.mkdir(parents=True)
    state.path.write_text("{}")
    with pytest.raises(BackendError) as info:
        state.load()
    assert info.value.detail["reason"] == "state"


def test_a_malformed_egress_control_file_is_refused_not_ignored(tmp_path: Path) -> None:
    """A lease's control file that does not parse stops the run (exit 2), not a run with the browser's line only."""
    token_file = tmp_path / "abcd1234.token"
    token_file.write_text("t" * 43)
    token_file.with_suffix(".egress").write_text('{"url": "https://x:3129", "token": "y"}')
    with pytest.raises(SettingsError):
        egress_control_beside(token_file)
