"""The daemon's configuration, read from ``DESKPOD_*`` environment variables in one place.

Variables (all optional except the token or its hash):

- ``DESKPOD_TOKEN_SHA256``: the SHA-256 (hex) of the per-sandbox control token.
  Preferred: the sandbox then never holds the token itself, so nothing running in
  it (a command an agent runs, a compromised renderer) can read it from
  ``/proc/*/environ`` and reuse it. ``DESKPOD_TOKEN`` (or ``DESKPOD_TOKEN_FILE``)
  holding the token itself also works, for development: the daemon hashes it and
  keeps it from its children, but the container's init and the daemon's own
  ``/proc/<pid>/environ`` still show it to anything in the sandbox
  (``deskpod audit`` fails such a sandbox).
- ``DESKPOD_SCREEN_SIZE``: ``WIDTHxHEIGHT`` of the Xvfb screen, default 1280x800.
- ``DESKPOD_DISPLAY``: X display name, default ``:99``.
- ``DESKPOD_DISPLAY_GRANT_HOST``: the sandbox's host name as the workspace container
  resolves it, for display grants (``<host>:<display number>`` over TCP), default
  ``sandbox`` (the compose service's name).
- ``DESKPOD_PORT``: daemon port, default 8765 (all interfaces *of the container*,
  which is attached only to an internal network).
- ``DESKPOD_START_URL``: the page Chromium opens at start, default ``about:blank``.
- ``DESKPOD_PROXY``: proxy URL for Chromium; defaults to ``HTTPS_PROXY``/``HTTP_PROXY``.
- ``DESKPOD_ALLOWED_ORIGINS``: comma-separated websocket ``Origin`` values accepted;
  by default a request carrying any ``Origin`` header is refused (browsers send one;
  our clients are services and do not).
- ``DESKPOD_CHROMIUM``: Chromium binary, default ``/usr/bin/chromium``.
- ``DESKPOD_MANAGE_SESSION``: ``0`` to attach to an already running display instead
  of starting Xvfb, the window manager and Chromium; the daemon then reads no
  browser (it speaks DevTools only over the pipe of a Chromium it started).
- ``DESKPOD_WORKSPACE_RUNNER``: ``host:port`` of the workspace runner, where every
  workspace request is forwarded (the workspace container), default
  ``workspace:8770``. agentd itself never touches the workspace.
- ``DESKPOD_DEVICE_SCALE_FACTOR``: Chromium's device scale factor (HiDPI), a float
  from :data:`MIN_DEVICE_SCALE_FACTOR` to :data:`MAX_DEVICE_SCALE_FACTOR`, default 1.0
  (``--force-device-scale-factor``): pages render that many screen pixels per CSS
  pixel. Screen coordinates stay X11 pixels; the daemon maps CSS pixels to them.
- ``DESKPOD_RESET_WIPE``: colon-separated folders a reset empties, default
  ``/tmp:/dev/shm:$HOME`` (the sandbox's tmpfs mounts in compose.yaml, plus
  /dev/shm). The daemon's runtime folder (browser profile, logs) lies in /tmp.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.errors import DeskpodError
from deskpod.protocol import Size
from deskpod.tokens import token_sha256

__all__ = ["AgentdConfig", "ConfigError", "MAX_DEVICE_SCALE_FACTOR", "MIN_DEVICE_SCALE_FACTOR", "MIN_TOKEN_CHARS"]

MIN_TOKEN_CHARS = 16
"""Shortest control token the daemon accepts."""

MIN_DEVICE_SCALE_FACTOR = 0.5
"""Smallest device scale factor the daemon passes to Chromium (screen pixels per CSS pixel)."""

MAX_DEVICE_SCALE_FACTOR = 4.0
"""Largest device scale factor the daemon passes to Chromium (screen pixels per CSS pixel)."""


class ConfigError(DeskpodError):
    """The daemon's environment is incomplete or malformed."""

    code = "internal"


def _size(text: str) -> Size:
    m = re.fullmatch(r"\s*(\d{2,5})\s*x\s*(\d{2,5})\s*", text)
    if not m:
        raise ConfigError(f"DESKPOD_SCREEN_SIZE must look like 1280x800, got {text!r}")
    return Size(width=int(m.group(1)), height=int(m.group(2)))


def _scale_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise ConfigError(f"DESKPOD_DEVICE_SCALE_FACTOR must be a number, got {text!r}") from exc
    if not MIN_DEVICE_SCALE_FACTOR <= value <= MAX_DEVICE_SCALE_FACTOR:  # also refuses nan
        raise ConfigError(f"DESKPOD_DEVICE_SCALE_FACTOR must be from {MIN_DEVICE_SCALE_FACTOR} to "
                          f"{MAX_DEVICE_SCALE_FACTOR}, got {text!r}")
    return value


@dataclass(frozen=True)
class AgentdConfig:
    """Settings of one daemon. Build with :meth:`from_env`."""

    token_sha256: str = field(repr=False)
    screen: Size = Size(width=1280, height=800)
    device_scale_factor: float = 1.0
    display: str = ":99"
    display_grant_host: str = "sandbox"
    host: str = "0.0.0.0"
    port: int = 8765
    start_url: str = "about:blank"
    proxy: str | None = None
    allowed_origins: frozenset[str] = frozenset()
    chromium: str = "/usr/bin/chromium"
    manage_session: bool = True
    runtime_dir: Path = Path("/tmp/deskpod")
    workspace_runner: str = "workspace:8770"
    home_dir: Path = Path("/home/deskpod")
    wipe_dirs: tuple[Path, ...] = (Path("/tmp"), Path("/dev/shm"), Path("/home/deskpod"))

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentdConfig:
        """Read the configuration from ``env`` (default: ``os.environ``).

        Raises:
            ConfigError: neither a token hash nor a token, a malformed hash, a token
                shorter than :data:`MIN_TOKEN_CHARS`, a malformed size or port, a
                device scale factor that is not a number in range, or a display grant
                host that is not a host name.
        """
        env = dict(os.environ if env is None else env)
        digest = env.get("DESKPOD_TOKEN_SHA256", "").strip().lower()
        if digest:
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ConfigError("DESKPOD_TOKEN_SHA256 must be 64 hexadecimal digits (sha256 of the token)")
        else:
            token = env.get("DESKPOD_TOKEN", "")
            if not token and env.get("DESKPOD_TOKEN_FILE"):
                token = Path(env["DESKPOD_TOKEN_FILE"]).read_text().strip()
            if len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    "set DESKPOD_TOKEN_SHA256 (preferred), or DESKPOD_TOKEN / DESKPOD_TOKEN_FILE holding a token "
                    f"of at least {MIN_TOKEN_CHARS} characters"
                )
            digest = token_sha256(token)
        try:
            port = int(env.get("DESKPOD_PORT", "8765"))
        except ValueError as exc:
            raise ConfigError("DESKPOD_PORT must be an integer") from exc
        proxy = env.get("DESKPOD_PROXY") or env.get("HTTPS_PROXY") or env.get("HTTP_PROXY") or None
        home = env.get("HOME") or "/home/deskpod"
        default_wipe = ["/tmp", "/dev/shm", home]
        wipe = [w.strip() for w in env.get("DESKPOD_RESET_WIPE", ":".join(default_wipe)).split(":") if w.strip()]
        if any(not w.startswith("/") or w == "/" for w in wipe):
            raise ConfigError("DESKPOD_RESET_WIPE must list absolute folders other than /")
        grant_host = env.get("DESKPOD_DISPLAY_GRANT_HOST", "sandbox").strip()
        if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})", grant_host):
            raise ConfigError("DESKPOD_DISPLAY_GRANT_HOST must be a host name (letters, digits, dots and hyphens)")
        origins = frozenset(o.strip() for o in env.get("DESKPOD_ALLOWED_ORIGINS", "").split(",") if o.strip())
        return cls(
            token_sha256=digest,
            screen=_size(env.get("DESKPOD_SCREEN_SIZE", "1280x800")),
            device_scale_factor=_scale_factor(env.get("DESKPOD_DEVICE_SCALE_FACTOR", "1.0")),
            display=env.get("DESKPOD_DISPLAY", env.get("DISPLAY", ":99")) or ":99",
            display_grant_host=grant_host,
            port=port,
            start_url=env.get("DESKPOD_START_URL", "about:blank"),
            proxy=proxy,
            allowed_origins=origins,
            chromium=env.get("DESKPOD_CHROMIUM", "/usr/bin/chromium"),
            manage_session=env.get("DESKPOD_MANAGE_SESSION", "1") != "0",
            runtime_dir=Path(env.get("DESKPOD_RUNTIME_DIR", "/tmp/deskpod")),
            workspace_runner=env.get("DESKPOD_WORKSPACE_RUNNER", "workspace:8770").strip() or "workspace:8770",
            home_dir=Path(home),
            wipe_dirs=tuple(Path(w) for w in wipe),
        )
