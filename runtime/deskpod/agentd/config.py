"""The daemon's configuration, from its environment through :mod:`deskpod.settings`.

:meth:`AgentdConfig.from_env` reads the daemon's fields of
:class:`~deskpod.settings.Settings` from the environment only, never from a
configuration file (the daemon's home folder is writable by Chromium, which it
confines). The docs' table of variables (docs/reference/configuration.md) lists them (``daemon`` side).
The token material:

- ``DESKPOD_TOKEN_SHA256``: the SHA-256 (hex) of the per-sandbox control token.
  Preferred: the sandbox then never holds the token itself, so nothing running in
  it (a command an agent runs, a compromised renderer) can read it from
  ``/proc/*/environ`` and reuse it. ``DESKPOD_TOKEN`` (or ``DESKPOD_TOKEN_FILE``)
  holding the token itself also works, for development: the daemon hashes it and
  keeps it from its children, but the container's init and the daemon's own
  ``/proc/<pid>/environ`` still show it to anything in the sandbox
  (``deskpod audit`` fails such a sandbox).

Defaults that depend on other variables: the display is ``DESKPOD_DISPLAY``, else
``DISPLAY``, else ``:99``; Chromium's proxy ``DESKPOD_PROXY``, else ``HTTPS_PROXY``,
else ``HTTP_PROXY``; a reset empties ``DESKPOD_RESET_WIPE``, else ``/tmp``,
``/dev/shm`` and ``$HOME`` (the sandbox's tmpfs mounts in compose.yaml, plus
/dev/shm; the daemon's runtime folder, browser profile and logs, lies in /tmp).
A ``DESKPOD_RESET_WIPE`` that leaves a desktop's runtime folder or home folder is
refused: the browser keeps every store a page can fill there (its profile: cookies,
service workers, Cache API, HSTS pins, the HTTP cache; NSS's database in the home),
and a reset that kept them would hand them to the next task.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.agentd.display.refresh import fitting_refresh_hz
from deskpod.errors import ConfigError, SettingsError
from deskpod.protocol import MAX_IMAGE_SIDE_PX, MAX_SCREENSHOT_PIXELS, Size
from deskpod.settings import load_settings, variable_name
from deskpod.tokens import token_sha256

__all__ = ["AgentdConfig", "MIN_TOKEN_CHARS", "seat_runtime_dir"]

MIN_TOKEN_CHARS = 16
"""Shortest control token the daemon accepts."""


def seat_runtime_dir(runtime_dir: Path, seat: int) -> Path:
    """The runtime folder of desktop seat ``seat`` (0 or 1; :mod:`deskpod.agentd.standby`):
    ``runtime_dir`` itself for seat 0, its sibling ``<runtime_dir>-seat1`` for seat 1."""
    return runtime_dir if seat == 0 else runtime_dir.with_name(f"{runtime_dir.name}-seat1")


def _left_by_reset(wipe: tuple[Path, ...], runtime_dir: Path, home_dir: Path, standby: bool) -> list[Path]:
    """The desktops' runtime and home folders (both seats' with a standby) that no folder of
    ``wipe`` holds."""
    folders = [runtime_dir, home_dir]
    if standby:
        folders.append(seat_runtime_dir(runtime_dir, 1))
    emptied = [Path(os.path.abspath(w)) for w in wipe]
    return [f for f in folders if not any(w == Path(os.path.abspath(f)) or w in Path(os.path.abspath(f)).parents
                                          for w in emptied)]


@dataclass(frozen=True)
class AgentdConfig:
    """Settings of one daemon. Build with :meth:`from_env`."""

    token_sha256: str = field(repr=False)
    screen: Size = Size(width=1280, height=800)
    device_scale_factor: float = 1.0
    display_refresh_hz: int = 240
    display: str = ":99"
    display_grant_host: str = "sandbox"
    host: str = "0.0.0.0"
    port: int = 8765
    start_url: str = "about:blank"
    proxy: str | None = None
    allowed_origins: frozenset[str] = frozenset()
    chromium: str = "/usr/bin/chromium"
    manage_session: bool = True
    settle_by_signal: bool = True
    runtime_dir: Path = Path("/tmp/deskpod")
    workspace_runner: str = "workspace:8770"
    apps_runner: str | None = None
    home_dir: Path = Path("/home/deskpod")
    wipe_dirs: tuple[Path, ...] = (Path("/tmp"), Path("/dev/shm"), Path("/home/deskpod"))
    trusted_cas: str | None = None
    standby_browser: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentdConfig:
        """Read the configuration from ``env`` (default: ``os.environ``), never from a file.

        Raises:
            ConfigError: neither a token hash nor a token, a malformed hash, a token
                shorter than :data:`MIN_TOKEN_CHARS` or a token file that cannot be
                read, or any variable that does not parse (a malformed size or port, a
                device scale factor out of range, a display grant host that is not a
                host name, ...; the message names it), a screen size no model takes
                (over :data:`~deskpod.protocol.MAX_IMAGE_SIDE_PX` a side or
                :data:`~deskpod.protocol.MAX_SCREENSHOT_PIXELS` in all), or, when the
                daemon manages the session, a ``DESKPOD_RESET_WIPE`` that holds neither
                the runtime folder (the browser's profile), the standby seat's
                (:func:`seat_runtime_dir`, with ``DESKPOD_STANDBY_BROWSER``) or the home folder.
                A refresh rate no display mode of the screen's size can say is lowered to the
                highest one that can (:func:`~deskpod.agentd.display.refresh.fitting_refresh_hz`:
                7680x4320 runs at 129 Hz).
        """
        environ = os.environ if env is None else env
        try:
            settings = load_settings(environ, config_file=None)
        except SettingsError as exc:
            raise ConfigError(exc.message, detail=exc.detail) from exc
        digest = settings.token_sha256
        if digest is None:
            token = settings.token.get_secret_value() if settings.token is not None else ""
            if not token and settings.token_file is not None:
                try:
                    token = settings.token_file.read_text().strip()
                except OSError as exc:
                    raise ConfigError(f"DESKPOD_TOKEN_FILE: cannot read {settings.token_file}: {exc.strerror}",
                                      detail={"variables": [variable_name("token_file")]}) from exc
            if len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    "set DESKPOD_TOKEN_SHA256 (preferred), or DESKPOD_TOKEN / DESKPOD_TOKEN_FILE holding a token "
                    f"of at least {MIN_TOKEN_CHARS} characters"
                )
            digest = token_sha256(token)
        home = environ.get("HOME") or "/home/deskpod"
        wipe = settings.reset_wipe
        if wipe is None:
            wipe = (Path("/tmp"), Path("/dev/shm"), Path(home))
        left = _left_by_reset(wipe, settings.runtime_dir, Path(home), settings.standby_browser)
        if settings.manage_session and left:
            raise ConfigError(
                f"DESKPOD_RESET_WIPE: a reset would leave {', '.join(map(str, left))}, where the browser keeps what "
                "a page stored (cookies, service workers, caches, HSTS pins): the next task would find it. "
                "List folders that hold it",
                detail={"variables": [variable_name("reset_wipe")], "left": [str(f) for f in left]},
            )
        width, height = (int(n) for n in settings.screen_size.split("x"))
        if max(width, height) > MAX_IMAGE_SIDE_PX or width * height > MAX_SCREENSHOT_PIXELS:
            raise ConfigError(
                f"DESKPOD_SCREEN_SIZE: {width}x{height} is too large: at most {MAX_IMAGE_SIDE_PX} px a side and "
                f"{MAX_SCREENSHOT_PIXELS} pixels (no model takes a larger image)",
                detail={"variables": [variable_name("screen_size")]},
            )
        return cls(
            token_sha256=digest,
            screen=Size(width=width, height=height),
            device_scale_factor=settings.device_scale_factor,
            display_refresh_hz=fitting_refresh_hz(Size(width=width, height=height), settings.display_refresh_hz),
            display=settings.display or environ.get("DISPLAY") or ":99",
            display_grant_host=settings.display_grant_host,
            port=settings.port,
            start_url=settings.start_url or "about:blank",
            proxy=settings.proxy or environ.get("HTTPS_PROXY") or environ.get("HTTP_PROXY") or None,
            allowed_origins=settings.allowed_origins,
            chromium=settings.chromium,
            manage_session=settings.manage_session,
            settle_by_signal=settings.settle_by_signal,
            runtime_dir=settings.runtime_dir,
            workspace_runner=settings.workspace_runner,
            apps_runner=settings.apps_runner or None,
            home_dir=Path(home),
            wipe_dirs=wipe,
            trusted_cas=settings.trusted_cas,
            standby_browser=settings.standby_browser,
        )
