"""Unit tests for deskpod.settings: parsing, the TOML file, precedence, typed errors, and
that the settings model is the one place DESKPOD_* variables are read and documented."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskpod import settings as settings_module
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.runner import RunnerConfig
from deskpod.agentd.runner_wire import RUNNER_PORT
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.pool_state import state_dir
from deskpod.errors import BackendError, SettingsError
from deskpod.settings import (
    Settings,
    config_file_path,
    get_settings,
    load_settings,
    markdown_table,
    reload_settings,
    use_environment_only,
    variable_name,
    write_readme_table,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "runtime" / "deskpod"
TOKEN = "t" * 32


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no cached settings and may read a file; none leaks into the next."""
    monkeypatch.setattr(settings_module.load._Mode, "environment_only", False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_environment_is_parsed_into_typed_fields() -> None:
    s = load_settings({
        "DESKPOD_SCREEN_SIZE": " 1920 x 1080 ", "DESKPOD_PORT": "9000", "DESKPOD_DEVICE_SCALE_FACTOR": "2",
        "DESKPOD_HOST_FIREWALL": "off", "DESKPOD_MANAGE_SESSION": "0", "DESKPOD_ALLOWED_ORIGINS": "https://a.test, https://b.test,",
        "DESKPOD_RESET_WIPE": "/tmp:/x:", "DESKPOD_STATE_DIR": "/var/lib/dp", "DESKPOD_TOKEN": TOKEN,
        "DESKPOD_TOKEN_SHA256": "AB" * 32, "DESKPOD_HOST_IPTABLES": "legacy", "HOME": "/nowhere",
    })
    assert s.screen_size == "1920x1080" and s.port == 9000 and s.device_scale_factor == 2.0
    assert s.host_firewall is False and s.manage_session is False and s.host_iptables == "legacy"
    assert s.allowed_origins == frozenset({"https://a.test", "https://b.test"})
    assert s.reset_wipe == (Path("/tmp"), Path("/x")) and s.state_dir == Path("/var/lib/dp")
    assert s.token is not None and s.token.get_secret_value() == TOKEN and TOKEN not in repr(s)
    assert s.token_sha256 == "ab" * 32
    assert s.config is None


def test_defaults_and_empty_values() -> None:
    s = load_settings({"DESKPOD_SCREEN_SIZE": "", "DESKPOD_TOKEN_SHA256": "  ", "HOME": "/nowhere"})
    assert s.screen_size == "1280x800" and s.token_sha256 is None and s.device_scale_factor == 1.0
    assert s.sandbox_url == "ws://127.0.0.1:8765/v1/ws" and s.pool == "default"
    # The daemon, the runner and the backend keep the defaults they had.
    assert s.runner_port == RUNNER_PORT
    backend = DockerBackendConfig()
    for field in ("screen_size", "egress_allowlist", "outside_network", "name_prefix", "host_firewall", "host_iptables"):
        assert getattr(s, field) == getattr(backend, field), field


def test_the_toml_file_named_by_deskpod_config(tmp_path: Path) -> None:
    path = write(tmp_path / "dp.toml", 'screen_size = "1024x768"\nallowed_origins = ["https://ops.test"]\n'
                                       'reset_wipe = ["/tmp"]\nhost_firewall = false\nport = 9001\n')
    s = load_settings({"DESKPOD_CONFIG": str(path)})
    assert (s.screen_size, s.allowed_origins, s.reset_wipe) == ("1024x768", frozenset({"https://ops.test"}), (Path("/tmp"),))
    assert s.host_firewall is False and s.port == 9001 and s.config == path


def test_the_default_file_is_under_xdg_config_home(tmp_path: Path) -> None:
    assert config_file_path({"XDG_CONFIG_HOME": str(tmp_path)}) is None
    path = write(tmp_path / "deskpod" / "config.toml", 'pool = "ci"\n')
    assert config_file_path({"XDG_CONFIG_HOME": str(tmp_path)}) == path
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path)}).pool == "ci"
    write(tmp_path / "home" / ".config" / "deskpod" / "config.toml", 'pool = "home"\n')
    assert load_settings({"HOME": str(tmp_path / "home")}).pool == "home"
    assert load_settings({}).pool == "default"


def test_environment_beats_file_beats_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'pool = "file"\nscreen_size = "1024x768"\n')
    s = load_settings({"DESKPOD_CONFIG": str(path), "DESKPOD_POOL": "env"})
    assert (s.pool, s.screen_size, s.port) == ("env", "1024x768", 8765)
    assert load_settings({"DESKPOD_CONFIG": str(path), "DESKPOD_POOL": "env"}, config_file=None).screen_size == "1280x800"


@pytest.mark.parametrize("env, named", [
    ({"DESKPOD_PORT": "http"}, "DESKPOD_PORT"),
    ({"DESKPOD_PORT": "70000"}, "DESKPOD_PORT"),
    ({"DESKPOD_SCREEN_SIZE": "big"}, "DESKPOD_SCREEN_SIZE"),
    ({"DESKPOD_DEVICE_SCALE_FACTOR": "0"}, "DESKPOD_DEVICE_SCALE_FACTOR"),
    ({"DESKPOD_DEVICE_SCALE_FACTOR": "two"}, "DESKPOD_DEVICE_SCALE_FACTOR"),
    ({"DESKPOD_DEVICE_SCALE_FACTOR": "nan"}, "DESKPOD_DEVICE_SCALE_FACTOR"),
    ({"DESKPOD_DEVICE_SCALE_FACTOR": "4.5"}, "DESKPOD_DEVICE_SCALE_FACTOR"),
    ({"DESKPOD_HOST_FIREWALL": "maybe"}, "DESKPOD_HOST_FIREWALL"),
    ({"DESKPOD_HOST_IPTABLES": "ipfw"}, "DESKPOD_HOST_IPTABLES"),
    ({"DESKPOD_TOKEN_SHA256": "abc"}, "DESKPOD_TOKEN_SHA256"),
    ({"DESKPOD_RESET_WIPE": "/tmp:/"}, "DESKPOD_RESET_WIPE"),
    ({"DESKPOD_RESET_WIPE": "relative"}, "DESKPOD_RESET_WIPE"),
    ({"DESKPOD_DISPLAY_GRANT_HOST": "a b"}, "DESKPOD_DISPLAY_GRANT_HOST"),
    ({"DESKPOD_SANDBOX_BRIDGE": "x" * 16}, "DESKPOD_SANDBOX_BRIDGE"),
    ({"DESKPOD_NAME_PREFIX": "../x"}, "DESKPOD_NAME_PREFIX"),
])
def test_a_bad_variable_is_a_typed_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env, config_file=None)
    assert named in info.value.message and info.value.detail["variables"] == [named]
    assert info.value.code == "invalid_config" and isinstance(info.value, ValueError)
    assert "Traceback" not in info.value.message and "pydantic" not in info.value.message


def test_a_bad_file_is_a_typed_error_naming_the_file_and_key(tmp_path: Path) -> None:
    bad_value = write(tmp_path / "a.toml", 'port = "http"\n')
    with pytest.raises(SettingsError) as info:
        load_settings({"DESKPOD_CONFIG": str(bad_value)})
    assert f"'port' in {bad_value}" in info.value.message
    typo = write(tmp_path / "b.toml", 'screen_sise = "1x1"\n')
    with pytest.raises(SettingsError, match=r"'screen_sise' in .*not a deskpod setting"):
        load_settings({"DESKPOD_CONFIG": str(typo)})
    broken = write(tmp_path / "c.toml", "port = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({"DESKPOD_CONFIG": str(broken)})
    with pytest.raises(SettingsError, match="DESKPOD_CONFIG: no configuration file"):
        load_settings({"DESKPOD_CONFIG": str(tmp_path / "missing.toml")})
    # The environment's value wins, and is the one named when it is the bad one.
    with pytest.raises(SettingsError, match="DESKPOD_PORT"):
        load_settings({"DESKPOD_CONFIG": str(write(tmp_path / "d.toml", "port = 1\n")), "DESKPOD_PORT": "x"})


def test_get_settings_is_cached_until_cleared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("DESKPOD_POOL", "one")
    first = get_settings()
    monkeypatch.setenv("DESKPOD_POOL", "two")
    assert get_settings() is first and first.pool == "one"
    assert reload_settings().pool == "two"
    monkeypatch.setenv("DESKPOD_POOL", "three")
    get_settings.cache_clear()
    assert get_settings().pool == "three"


def test_the_backend_and_pool_state_read_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write(tmp_path / "deskpod" / "config.toml",
                 f'sandbox_image = "img:file"\nhost_firewall = false\nstate_dir = "{tmp_path / "state"}"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("DESKPOD_EGRESS_ALLOWLIST", "a.test")
    for name in ("DESKPOD_CONFIG", "DESKPOD_SANDBOX_IMAGE", "DESKPOD_HOST_FIREWALL", "DESKPOD_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    config = DockerBackendConfig.from_env(egress_image="egress:explicit")
    assert (config.sandbox_image, config.host_firewall, config.egress_allowlist, config.egress_image) == (
        "img:file", False, "a.test", "egress:explicit")
    assert state_dir() == tmp_path / "state" and get_settings().config == path
    with pytest.raises(BackendError) as info:
        DockerBackendConfig.from_env({"DESKPOD_SCREEN_SIZE": "huge"})
    assert info.value.detail["reason"] == "config" and "DESKPOD_SCREEN_SIZE" in info.value.message


def test_a_file_in_a_confined_home_does_not_steer_the_daemon_or_the_runner(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What Chromium (the sandbox's home) or an agent's command (the workspace's home) could write
    where a host-side process would look for its configuration file: the attacker's own token
    hash, an Origin it controls, a workspace of its choosing."""
    home = tmp_path / "home"
    attacker = hashlib.sha256(b"attacker-token-0123456789").hexdigest()
    write(home / ".config" / "deskpod" / "config.toml",
          f'token_sha256 = "{attacker}"\nallowed_origins = ["https://evil.test"]\nworkspace = "/"\n'
          'device_scale_factor = 4.0\n')
    env = {"HOME": str(home), "DESKPOD_TOKEN": TOKEN}
    assert load_settings(env).token_sha256 == attacker  # a host-side reader would take it
    daemon = AgentdConfig.from_env(env)
    assert daemon.token_sha256 == hashlib.sha256(TOKEN.encode()).hexdigest() and daemon.allowed_origins == frozenset()
    assert RunnerConfig.from_env(env).workspace == Path("/workspace")
    # The daemons' processes (python -m deskpod.agentd, the runner) call use_environment_only() first,
    # so get_settings() (the device scale factor at Chromium's launch) ignores the file too.
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("DESKPOD_CONFIG", raising=False)
    monkeypatch.delenv("DESKPOD_DEVICE_SCALE_FACTOR", raising=False)
    assert get_settings().device_scale_factor == 4.0
    use_environment_only()
    assert get_settings().device_scale_factor == 1.0 and get_settings().config is None


def test_every_field_is_documented_with_its_readers() -> None:
    for name, info in Settings.model_fields.items():
        assert name == name.lower() and info.description, name
        extra = info.json_schema_extra
        assert isinstance(extra, dict), name
        sides = extra["sides"]
        assert isinstance(sides, list) and sides and set(sides) <= set(settings_module.SIDES), name
    assert Settings.model_fields["token"].annotation is not str
    assert "SecretStr" in str(Settings.model_fields["serve_token"].annotation)


_VARIABLE = re.compile(r"(?<![A-Za-z0-9_])DESKPOD_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# An X window property (agentd/display/xkeymap.py), and a build argument compose.yaml fixes.
_NOT_VARIABLES = {"DESKPOD_SPARE_KEYCODES", "DESKPOD_VERSION"}


def test_every_deskpod_variable_of_the_tree_is_a_setting() -> None:
    """Every DESKPOD_* name the package, compose.yaml, the Dockerfile, the scripts or the images
    mention is a field of the model (and so a row of the docs' configuration table)."""
    known = {variable_name(f) for f in Settings.model_fields}
    files = [*PACKAGE.rglob("*.py"), ROOT / "compose.yaml", ROOT / "Dockerfile",
             *(p for p in (ROOT / "scripts").rglob("*") if p.is_file()),
             *(p for p in (ROOT / "images").rglob("*") if p.is_file())]
    found: dict[str, str] = {}
    for path in files:
        for name in _VARIABLE.findall(path.read_text(errors="replace")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    unknown = {n: where for n, where in found.items() if n not in known | _NOT_VARIABLES}
    assert unknown == {}


def _deskpod_reads(source: str, variables: set[str]) -> list[tuple[int, str]]:
    """Lines where ``source`` names a deskpod variable other than as the key it writes into a
    container's environment (a dict literal's key, or ``env["DESKPOD_X"] = ...``)."""
    tree = ast.parse(source)
    written: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            written.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            written.add(id(node.slice))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in variables and id(node) not in written)


_ALLOWED_READS = {
    # Removes the token from the environment the daemon's children inherit (agentd/__main__.py).
    ("agentd/__main__.py", "DESKPOD_TOKEN"), ("agentd/__main__.py", "DESKPOD_TOKEN_FILE"),
    # The workspace health check runs every 5 s and loads no model library (agentd/runner_health.py);
    # test_runner_health pins its reading to the settings' meaning.
    ("agentd/runner_health.py", "DESKPOD_RUNNER_PORT"),
}


def test_no_module_reads_a_deskpod_variable_outside_the_settings() -> None:
    variables = {variable_name(f) for f in Settings.model_fields}
    old_style = ('import os\nport = int(os.environ.get("DESKPOD_PORT", "8765"))\n'
                 'names = {"sandbox_image": "DESKPOD_SANDBOX_IMAGE"}\nif "DESKPOD_TOKEN" in os.environ: pass\n')
    assert _deskpod_reads(old_style, variables) == [(2, "DESKPOD_PORT"), (3, "DESKPOD_SANDBOX_IMAGE"), (4, "DESKPOD_TOKEN")]
    assert _deskpod_reads('env = {"DESKPOD_TOKEN_SHA256": h}\nenv["DESKPOD_START_URL"] = u\n', variables) == []
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("settings/"):
            continue
        offenders += [(rel, line, name) for line, name in _deskpod_reads(path.read_text(), variables)
                      if (rel, name) not in _ALLOWED_READS]
    assert offenders == []


def test_the_docs_configuration_table_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    begin, end = page.index(settings_module.README_BEGIN), page.index(settings_module.README_END)
    assert page[begin + len(settings_module.README_BEGIN) + 1:end] == markdown_table(), (
        "the docs' table is stale: run python -m deskpod.settings --write-readme docs/reference/configuration.md")
    assert markdown_table().count("\n| `DESKPOD_") == len(Settings.model_fields)


def test_the_table_writer_and_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = write(tmp_path / "README.md",
                   f"# x\n\n{settings_module.README_BEGIN}\nold\n{settings_module.README_END}\n\nafter\n")
    assert write_readme_table(readme) is True and write_readme_table(readme) is False
    text = readme.read_text()
    assert "\nold\n" not in text and text.endswith(f"{settings_module.README_END}\n\nafter\n")
    assert "| `DESKPOD_DEVICE_SCALE_FACTOR` | float | `1.0` | daemon, backend, compose |" in text
    assert settings_module.main(["--markdown"]) == 0 and capsys.readouterr().out == markdown_table()
    assert settings_module.main(["--write-readme", str(write(tmp_path / "none.md", "# no markers\n"))]) == 2


@pytest.mark.process
@pytest.mark.parametrize("module, variable", [("deskpod.agentd", "DESKPOD_PORT"),
                                              ("deskpod.agentd.runner", "DESKPOD_RUNNER_PORT"),
                                              ("deskpod.agentd.runner_health", "DESKPOD_RUNNER_PORT")])
def test_the_daemons_stop_with_one_line_naming_a_bad_variable(module: str, variable: str, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DESKPOD_TOKEN": TOKEN, variable: "http"}
    done = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert variable in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_show_prints_the_settings_read_with_secrets_masked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DESKPOD_CONFIG", str(write(tmp_path / "c.toml", 'pool = "ci"\n')))
    monkeypatch.setenv("DESKPOD_SERVE_TOKEN", "serve-secret-value")
    assert settings_module.main(["--show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["pool"] == "ci" and shown["config"] == str(tmp_path / "c.toml")
    assert "serve-secret-value" not in json.dumps(shown)
    monkeypatch.setenv("DESKPOD_PORT", "x")
    assert settings_module.main(["--show"]) == 2 and "DESKPOD_PORT" in capsys.readouterr().err
