"""Where the ``deskpod`` command's defaults come from, read in this one module.

An option given on the command line wins; then the ``DESKPOD_*`` environment
variable; then the ``--config`` TOML file (top-level keys named like the variable
without its prefix, in lower case: ``sandbox_url = "ws://..."``); then the built-in
default. The audit folder defaults to ``audit/`` in the state folder the pools use
(``$DESKPOD_STATE_DIR``, else ``$XDG_STATE_HOME/deskpod``, else
``~/.local/state/deskpod``), so runs from any folder land in one place.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deskpod.backend.state import state_dir

__all__ = ["CliDefaults", "ConfigFileError", "DEFAULT_POOL", "DEFAULT_SANDBOX_URL", "DEFAULT_SERVE_LISTEN"]

DEFAULT_SANDBOX_URL = "ws://127.0.0.1:8765/v1/ws"
"""The sandbox daemon's websocket URL when neither ``--sandbox`` nor ``DESKPOD_SANDBOX_URL`` says."""

DEFAULT_SERVE_LISTEN = "127.0.0.1:8766"
"""Where ``deskpod serve`` listens when neither ``--listen`` nor ``DESKPOD_SERVE_LISTEN`` says."""

DEFAULT_POOL = "default"
"""The pool's name when neither ``--pool`` nor ``DESKPOD_POOL`` says."""


class ConfigFileError(ValueError):
    """The ``--config`` file cannot be read or is not a TOML table of strings."""


@dataclass(frozen=True)
class CliDefaults:
    """The defaults in force for one invocation (see the module docstring for the order)."""

    sandbox_url: str
    token: str = field(repr=False)
    audit_dir: Path
    state_dir: Path
    serve_listen: str
    pool: str

    @classmethod
    def load(cls, config: Path | None = None, environ: Mapping[str, str] | None = None) -> CliDefaults:
        """Resolve the defaults.

        Args:
            config: a TOML file of ``name = "value"`` settings, or ``None``.
            environ: the environment to read (default ``os.environ``).

        Raises:
            ConfigFileError: ``config`` cannot be read or parsed, or a value is not a string.
        """
        env = os.environ if environ is None else environ
        file = _read_config(config) if config is not None else {}

        def pick(name: str, default: str) -> str:
            return env.get(f"DESKPOD_{name.upper()}") or file.get(name) or default

        state = Path(pick("state_dir", str(state_dir(env))))
        return cls(
            sandbox_url=pick("sandbox_url", DEFAULT_SANDBOX_URL),
            token=env.get("DESKPOD_TOKEN", ""),  # never from the file: a token is not configuration
            audit_dir=Path(pick("audit_dir", str(state / "audit"))),
            state_dir=state,
            serve_listen=pick("serve_listen", DEFAULT_SERVE_LISTEN),
            pool=pick("pool", DEFAULT_POOL),
        )


def _read_config(path: Path) -> dict[str, str]:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"config file {path}: {exc}") from exc
    bad = sorted(k for k, v in data.items() if not isinstance(v, str))
    if bad:
        raise ConfigFileError(f"config file {path}: not a string: {', '.join(bad)}")
    return data
