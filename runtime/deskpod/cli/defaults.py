"""The ``deskpod`` command's defaults, from the one settings model (:mod:`deskpod.settings`).

An option given on the command line wins; then the ``DESKPOD_*`` variable; then
the configuration file (``--config FILE``, else ``$DESKPOD_CONFIG``, else
``~/.config/deskpod/config.toml`` if it exists; keys are the settings' field names,
e.g. ``sandbox_url = "ws://..."``); then the built-in default. The audit folder
defaults to ``audit/`` in the state folder the pools use (``$DESKPOD_STATE_DIR``,
else ``$XDG_STATE_HOME/deskpod``, else ``~/.local/state/deskpod``), so runs from
any folder land in one place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.backend.pool_state import state_dir
from deskpod.settings import Settings, get_settings, load_settings

__all__ = ["CliDefaults", "builtin_defaults"]


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
    def from_settings(cls, settings: Settings | None = None) -> CliDefaults:
        """The defaults the settings give.

        Args:
            settings: ``None``: the process's settings (:func:`deskpod.settings.get_settings`).

        Raises:
            SettingsError: a ``DESKPOD_*`` variable or the configuration file holds a value
                that does not parse.
        """
        if settings is None:
            settings, state = get_settings(), state_dir()
        else:
            state = settings.state_dir or state_dir({"XDG_STATE_HOME": os.environ.get("XDG_STATE_HOME", "")})
        return cls(
            sandbox_url=settings.sandbox_url,
            token=settings.token.get_secret_value() if settings.token else "",
            audit_dir=settings.audit_dir or state / "audit",
            state_dir=state,
            serve_listen=settings.serve_listen,
            pool=settings.pool,
        )


def builtin_defaults() -> CliDefaults:
    """The defaults with no variable set and no configuration file (help texts fall back
    to them when the settings do not parse; the command then refuses them)."""
    return CliDefaults.from_settings(load_settings({}, config_file=None))
