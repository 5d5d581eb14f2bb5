"""Unit tests for the daemon's configuration and its connection check (no X, no Docker)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from deskpod.agentd.app import authorized
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.display.refresh import MAX_DOT_CLOCK_HZ
from deskpod.errors import ConfigError
from deskpod.agentd.browser.chromium import chromium_args, chromium_env

TOKEN = "t" * 32


def test_config_reads_the_environment() -> None:
    cfg = AgentdConfig.from_env(
        {"DESKPOD_TOKEN": TOKEN, "DESKPOD_SCREEN_SIZE": "1920x1080", "HTTP_PROXY": "http://egress:3128"}
    )
    assert (cfg.screen.width, cfg.screen.height) == (1920, 1080)
    assert cfg.proxy == "http://egress:3128"
    assert TOKEN not in repr(cfg)
    assert cfg.token_sha256 == hashlib.sha256(TOKEN.encode()).hexdigest()


def test_the_hash_alone_configures_the_daemon() -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    cfg = AgentdConfig.from_env({"DESKPOD_TOKEN_SHA256": digest.upper()})
    assert authorized({"authorization": f"Bearer {TOKEN}"}, cfg) == (True, "ok")
    assert authorized({"authorization": f"Bearer {digest}"}, cfg) == (False, "wrong token")


@pytest.mark.parametrize(
    "env",
    [{}, {"DESKPOD_TOKEN": "short"}, {"DESKPOD_TOKEN_SHA256": "abc"}, {"DESKPOD_TOKEN": TOKEN, "DESKPOD_SCREEN_SIZE": "big"},
     {"DESKPOD_TOKEN": TOKEN, "DESKPOD_PORT": "http"}],
)
def test_bad_configuration_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        AgentdConfig.from_env(env)


def test_only_the_right_bearer_token_without_origin_is_authorized() -> None:
    """No token, a wrong token, or a foreign Origin are refused."""
    cfg = AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN})
    assert authorized({"authorization": f"Bearer {TOKEN}"}, cfg) == (True, "ok")
    assert authorized({"authorization": f"bearer {TOKEN}"}, cfg)[0]
    assert authorized({}, cfg) == (False, "missing token")
    assert authorized({"authorization": TOKEN}, cfg) == (False, "missing token")
    assert authorized({"authorization": "Bearer " + "x" * 32}, cfg) == (False, "wrong token")
    assert authorized({"authorization": f"Bearer {TOKEN}", "origin": "http://evil.test"}, cfg) == (
        False, "origin not allowed")
    allowing = AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_ALLOWED_ORIGINS": "https://ops.test"})
    assert authorized({"authorization": f"Bearer {TOKEN}", "origin": "https://ops.test"}, allowing)[0]


def test_chromium_never_runs_without_its_sandbox_and_devtools_go_over_a_pipe() -> None:
    cfg = AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "HTTPS_PROXY": "http://egress:3128"})
    args = chromium_args(cfg, cfg.runtime_dir / "profile")
    assert "--no-sandbox" not in args
    assert "--remote-debugging-pipe" in args
    assert not any(a.startswith(("--remote-debugging-port", "--remote-debugging-address")) for a in args)
    assert "--proxy-server=http://egress:3128" in args
    assert {"--disable-background-networking", "--disable-component-update", "--disable-sync"} <= set(args)
    assert "--wm-window-animations-disabled" in args  # a select's list and the pickers show without a fade


def test_webgl_runs_on_llvmpipe_with_the_gpu_process_sandboxed() -> None:
    """WebGL on ANGLE over Mesa's llvmpipe, never SwiftShader's unsafe mode nor an unsandboxed GPU
    process: a GPU process that cannot start its sandbox exits, and Mesa starts no thread that
    would keep the sandbox from starting."""
    cfg = AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN})
    args = chromium_args(cfg, cfg.runtime_dir / "profile")
    assert {"--use-gl=angle", "--use-angle=gl", "--gpu-sandbox-failures-fatal=yes",
            "--disable-gpu-compositing"} <= set(args)
    assert not {"--disable-gpu", "--enable-unsafe-swiftshader", "--disable-gpu-sandbox", "--no-sandbox",
                "--in-process-gpu", "--single-process"} & set(args)
    env = chromium_env({"DISPLAY": ":99", "LP_NUM_THREADS": "8"})
    assert env["DISPLAY"] == ":99"
    assert env["LP_NUM_THREADS"] == "0" and env["MESA_SHADER_CACHE_DISABLE"] == "true"


@pytest.mark.parametrize(("text", "factor", "window"), [(None, 1.0, "1280,800"), ("1.5", 1.5, "853,533"),
                                                         ("2", 2.0, "640,400")])
def test_the_device_scale_factor_reaches_chromium(text: str | None, factor: float, window: str) -> None:
    """DESKPOD_DEVICE_SCALE_FACTOR (default 1) is always passed as --force-device-scale-factor, and the
    window's size is given in device-independent pixels (the screen's over the factor)."""
    env = {"DESKPOD_TOKEN": TOKEN} | ({"DESKPOD_DEVICE_SCALE_FACTOR": text} if text is not None else {})
    cfg = AgentdConfig.from_env(env)
    assert cfg.device_scale_factor == factor
    args = chromium_args(cfg, cfg.runtime_dir / "profile")
    assert f"--force-device-scale-factor={factor:g}" in args
    assert f"--window-size={window}" in args


@pytest.mark.parametrize("text", ["big", "0", "0.4", "4.5", "nan", "inf", "-1"])
def test_a_bad_device_scale_factor_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="DESKPOD_DEVICE_SCALE_FACTOR"):
        AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_DEVICE_SCALE_FACTOR": text})


@pytest.mark.parametrize("rate", ["29", "481", "fast"])
def test_a_refresh_rate_out_of_range_is_refused(rate: str) -> None:
    """30..480 frames a second."""
    with pytest.raises(ConfigError, match="DESKPOD_DISPLAY_REFRESH_HZ"):
        AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN, "DESKPOD_DISPLAY_REFRESH_HZ": rate})
    assert AgentdConfig.from_env({"DESKPOD_TOKEN": TOKEN}).display_refresh_hz == 240


@pytest.mark.parametrize(("wipe", "extra", "left"), [
    ("/dev/shm:/home/deskpod", {}, ["/tmp/deskpod"]),
    ("/tmp", {}, ["/home/deskpod"]),
    ("/tmp/deskpod:/home/deskpod", {"DESKPOD_STANDBY_BROWSER": "on"}, ["/tmp/deskpod-seat1"]),
    ("/var/tmp:/home", {}, ["/tmp/deskpod"]),
])
def test_a_reset_that_would_leave_the_browsers_folders_is_refused(wipe: str, extra: dict[str, str],
                                                                  left: list[str]) -> None:
    """A reset that leaves the profile (in the runtime folder) or the home folder leaves the
    previous task's service workers, caches, cookies and HSTS pins to the next task."""
    env = {"DESKPOD_TOKEN": TOKEN, "HOME": "/home/deskpod", "DESKPOD_RESET_WIPE": wipe, **extra}
    with pytest.raises(ConfigError) as caught:
        AgentdConfig.from_env(env)
    assert caught.value.detail == {"variables": ["DESKPOD_RESET_WIPE"], "left": left}, caught.value.detail


@pytest.mark.parametrize(("wipe", "extra"), [
    ("/tmp/deskpod:/home/deskpod", {}),
    ("/tmp:/home", {"DESKPOD_STANDBY_BROWSER": "on"}),
    ("/dev/shm", {"DESKPOD_MANAGE_SESSION": "0"}),
])
def test_a_reset_that_empties_the_browsers_folders_is_accepted(wipe: str, extra: dict[str, str]) -> None:
    env = {"DESKPOD_TOKEN": TOKEN, "HOME": "/home/deskpod", "DESKPOD_RESET_WIPE": wipe, **extra}
    assert AgentdConfig.from_env(env).wipe_dirs == tuple(Path(w) for w in wipe.split(":"))


@pytest.mark.parametrize(("size", "rate", "hz"), [("1280x800", None, 240), ("3840x2160", None, 240),
                                                  ("7680x4320", None, 129), ("7680x4320", "120", 120),
                                                  ("7680x4320", "480", 129), ("8000x4000", "240", 134)])
def test_a_screen_too_large_for_the_rate_starts_at_the_highest_rate_its_mode_can_say(
        size: str, rate: str | None, hz: int) -> None:
    """Width × height × rate must fit a RandR mode's 32-bit dot clock: the largest screens
    (7680x4320 is documented) start at the highest rate that does, never refused (on
    63c358c the default 240 Hz at 7680x4320 was refused at start)."""
    env = {"DESKPOD_TOKEN": TOKEN, "DESKPOD_SCREEN_SIZE": size} | ({"DESKPOD_DISPLAY_REFRESH_HZ": rate} if rate else {})
    config = AgentdConfig.from_env(env)
    assert config.display_refresh_hz == hz
    assert config.screen.width * config.screen.height * hz <= MAX_DOT_CLOCK_HZ
