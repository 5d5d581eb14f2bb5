"""The ``deskpod`` command's defaults, from the one settings model (:mod:`deskpod.settings`).

An option given on the command line wins; then the ``DESKPOD_*`` variable; then
the configuration file (``--config FILE``, else ``$DESKPOD_CONFIG``, else
``~/.config/deskpod/config.toml`` if it exists; keys are the settings' field names,
e.g. ``sandbox_url = "ws://..."``); then the built-in default. The audit folder
defaults to ``audit/`` in the state folder the pools use (``$DESKPOD_STATE_DIR``,
else ``$XDG_STATE_HOME/deskpod``, else ``~/.local/state/deskpod``), so runs from
any folder land in one place. The stack's controller service is
``ws://127.0.0.1:PORT/v1/controller``, ``PORT`` being ``DESKPOD_SERVE_PORT``, else the one
the stack's ``.env`` records (:mod:`deskpod.settings.stack`), else 8766.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from deskpod.backend.pool_state import state_dir
from deskpod.settings import Settings, get_settings, load_settings
from deskpod.settings.stack import serve_url, stack_access

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
    serve_url: str
    """The stack's controller service as the Docker host reaches it (``ws://127.0.0.1:PORT/v1/controller``)."""

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, read_stack: bool = True) -> CliDefaults:
        """The defaults the settings give.

        Args:
            settings: ``None``: the process's settings (:func:`deskpod.settings.get_settings`).
            read_stack: read the stack's ``.env`` for the service's port (``False``: the settings' alone).

        Raises:
            SettingsError: a ``DESKPOD_*`` variable, the configuration file or the stack's
                ``.env`` holds a value that does not parse.
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
            serve_url=stack_access(settings).serve_url if read_stack else serve_url(settings.serve_port),
        )


def builtin_defaults() -> CliDefaults:
    """The defaults with no variable set and no configuration file (help texts fall back
    to them when the settings do not parse; the command then refuses them)."""
    return CliDefaults.from_settings(load_settings({}, config_file=None), read_stack=False)
