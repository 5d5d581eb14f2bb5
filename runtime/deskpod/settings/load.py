"""Reading the settings: the environment, then the configuration file, then the defaults
(see :mod:`deskpod.settings`), into one checked :class:`Settings`; a value that does not
parse becomes a :class:`~deskpod.errors.SettingsError` naming its variable.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings import SettingsError as _PydanticSettingsError

from deskpod.errors import SettingsError
from deskpod.settings.sandboxes import parse_sandbox_entries
from deskpod.settings.variables import ENV_PREFIX, StackVariables, variable_name

__all__ = ["Settings", "config_file_path", "get_settings", "load_settings", "reload_settings", "use_environment_only"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SIZE = re.compile(r"\s*(\d{2,5})\s*x\s*(\d{2,5})\s*")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def _comma_set(value: Any) -> Any:
    """A comma-separated string (the environment) or a list (a TOML file) as a frozenset of
    its non-empty, stripped items; any other value as it is, for pydantic to refuse."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list | tuple | set | frozenset):
        return frozenset(str(item).strip() for item in items if str(item).strip())
    return items


class Settings(StackVariables):
    """Every ``DESKPOD_*`` variable (see the module docstring for sources and precedence).

    Fields are grouped by the side that reads them (:mod:`.variables`); a field read by
    several sides lists them all in its ``sides``. Secrets are :class:`~pydantic.SecretStr`
    (``.get_secret_value()``); they never show in ``repr`` or the table.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", frozen=True,
    )

    @field_validator("screen_size")
    @classmethod
    def _screen_size(cls, value: str) -> str:
        m = _SIZE.fullmatch(value)
        if not m:
            raise ValueError(f"must look like 1280x800, got {value!r}")
        return f"{int(m.group(1))}x{int(m.group(2))}"

    @field_validator("token_sha256", "serve_token_sha256", "serve_approver_token_sha256", "egress_control_token_sha256",
                     "mcp_token_sha256", "serve_metrics_token_sha256")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        digest = (value or "").strip().lower()
        if not digest:
            return None
        if not _HEX64.fullmatch(digest):
            raise ValueError("must be 64 hexadecimal digits (the SHA-256 of the token)")
        return digest

    @field_validator("display_grant_host")
    @classmethod
    def _host_name(cls, value: str) -> str:
        host = value.strip()
        if not _HOST_NAME.fullmatch(host):
            raise ValueError("must be a host name (letters, digits, dots and hyphens)")
        return host

    @field_validator("workspace_runner")
    @classmethod
    def _stripped(cls, value: str) -> str:
        return value.strip() or "workspace:8770"

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        return _comma_set(value)

    @field_validator("serve_sandboxes", mode="before")
    @classmethod
    def _sandbox_urls(cls, value: Any) -> Any:
        entries = _comma_set(value)
        if isinstance(entries, frozenset):
            entries = frozenset(" ".join(e.split()) for e in entries)
            parse_sandbox_entries(entries)
        return entries

    @field_validator("reset_wipe", mode="before")
    @classmethod
    def _wipe(cls, value: Any) -> Any:
        items = value.split(":") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return items
        folders = [str(w).strip() for w in items if str(w).strip()]
        if any(not w.startswith("/") or w.rstrip("/") == "" for w in folders):
            raise ValueError("must list absolute folders other than /")
        return tuple(Path(w) for w in folders)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment, then the configuration file (no ``.env`` file, no secrets folder)."""
        plan = _PLAN.get()
        if plan is None:
            plan = _Plan(os.environ, config_file_path(os.environ))
        sources: list[PydanticBaseSettingsSource] = [init_settings, _MappingEnvSource(settings_cls, plan.environ)]
        if plan.config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=plan.config_file))
        return tuple(sources)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {(k if self.case_sensitive else k.lower()): v for k, v in self._environ.items()
                if not (self.env_ignore_empty and v == "")}


@dataclass(frozen=True)
class _Plan:
    environ: Mapping[str, str]
    config_file: Path | None


_PLAN: ContextVar[_Plan | None] = ContextVar("deskpod_settings_plan", default=None)


def config_file_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The configuration file to read for ``environ`` (default ``os.environ``).

    Returns:
        ``$DESKPOD_CONFIG`` if set; else ``$XDG_CONFIG_HOME/deskpod/config.toml`` (with
        ``$HOME/.config`` for an unset ``XDG_CONFIG_HOME``) if that file exists; else ``None``.
    """
    env = os.environ if environ is None else environ
    named = env.get(variable_name("config"), "").strip()
    if named:
        return Path(named).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        base = Path(env["XDG_CONFIG_HOME"])
    elif env.get("HOME"):
        base = Path(env["HOME"]) / ".config"
    else:
        return None
    default = base / "deskpod" / "config.toml"
    return default if default.is_file() else None


def _describe_source(field: str, environ: Mapping[str, str], config_file: Path | None) -> str:
    name = variable_name(field)
    if any(k.upper() == name and v != "" for k, v in environ.items()):
        return name
    if config_file is not None:
        return f"{field!r} in {config_file}"
    return name


def _translate(exc: ValidationError, environ: Mapping[str, str], config_file: Path | None) -> SettingsError:
    problems: list[str] = []
    variables: list[str] = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            where = f"{field!r} in {config_file}" if config_file is not None else repr(field)
            problems.append(f"{where}: not a deskpod setting")
        else:
            where = _describe_source(field, environ, config_file)
            message = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"{where}: {message}")
        variables.append(variable_name(field))
    return SettingsError("invalid setting: " + "; ".join(problems),
                         detail={"variables": variables, "config_file": str(config_file) if config_file else None})


@contextmanager
def _planned(plan: _Plan) -> Iterator[None]:
    token = _PLAN.set(plan)
    try:
        yield
    finally:
        _PLAN.reset(token)


_FROM_ENVIRONMENT: Final = object()


def load_settings(environ: Mapping[str, str] | None = None, *, config_file: Any = _FROM_ENVIRONMENT) -> Settings:
    """Read the settings afresh.

    Args:
        environ: the environment (default ``os.environ``).
        config_file: the TOML file to read, ``None`` for none; by default the one
            :func:`config_file_path` finds for ``environ``.

    Returns:
        The settings; ``config`` is the file that was read (``None``: none).

    Raises:
        SettingsError: a value does not parse (the message names each variable, or the
            file and key), the file is not valid TOML or cannot be read, a key of the
            file is not a setting, or ``DESKPOD_CONFIG`` names a file that does not exist.
    """
    env = os.environ if environ is None else environ
    path: Path | None = config_file_path(env) if config_file is _FROM_ENVIRONMENT else config_file
    if path is not None and not path.is_file():
        raise SettingsError(f"{variable_name('config')}: no configuration file {path}",
                            detail={"variables": [variable_name("config")], "config_file": str(path)})
    try:
        with _planned(_Plan(env, path)):
            return Settings(config=path)
    except ValidationError as exc:
        raise _translate(exc, env, path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"configuration file {path} is not valid TOML: {exc}",
                            detail={"config_file": str(path)}) from exc
    except OSError as exc:
        raise SettingsError(f"cannot read configuration file {path}: {exc.strerror or exc}",
                            detail={"config_file": str(path)}) from exc
    except _PydanticSettingsError as exc:
        raise SettingsError(f"invalid setting: {exc}", detail={"config_file": str(path) if path else None}) from exc


class _Mode:
    """Whether this process may read a configuration file (see :func:`use_environment_only`)."""

    environment_only = False


@functools.cache
def get_settings() -> Settings:
    """The process's settings, read once (see the module docstring); ``get_settings.cache_clear()``
    makes the next call read them again.

    Raises:
        SettingsError: see :func:`load_settings`.
    """
    if _Mode.environment_only:
        return load_settings(config_file=None)
    return load_settings()


def reload_settings() -> Settings:
    """Forget the cached settings and read them again (tests, or after changing the environment).

    Raises:
        SettingsError: see :func:`load_settings`.
    """
    get_settings.cache_clear()
    return get_settings()


def use_environment_only() -> None:
    """Make this process read its settings from the environment only, never from a file,
    and forget any settings read before. The daemon and the workspace runner call it first:
    the home folders of their containers are writable by the processes they confine."""
    _Mode.environment_only = True
    get_settings.cache_clear()
