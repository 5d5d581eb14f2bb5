"""deskpod's settings: every ``DESKPOD_*`` variable, read in this one place.

One pydantic-settings model, :class:`Settings`, holds every variable any part of
deskpod reads: the controller and CLI on the host, the daemon (agentd) and the
workspace runner in their containers, the Docker backend and its warm pools, and
the variables only ``compose.yaml`` and the scripts read (documented here so that
the docs' configuration table lists them all). A field's name is its variable's name without the
``DESKPOD_`` prefix, in lower case (``DESKPOD_SCREEN_SIZE`` → ``screen_size``);
its description, type, default and the side that reads it make the docs' table of
variables (``python -m deskpod.settings --write-readme docs/reference/configuration.md``).

Where values come from, first match wins:

1. the environment (``DESKPOD_SCREEN_SIZE=1920x1080``; an empty value counts as unset);
2. the TOML configuration file, if there is one: ``$DESKPOD_CONFIG``, else
   ``$XDG_CONFIG_HOME/deskpod/config.toml`` (``~/.config/deskpod/config.toml``), keys
   being field names (``screen_size = "1920x1080"``); a missing default file is no
   file, a missing file that ``DESKPOD_CONFIG`` names is an error;
3. the defaults below.

The daemon and the workspace runner read their environment only
(:func:`use_environment_only`): their home folders are writable by the processes
they confine (Chromium in the sandbox, the agent's commands in the workspace), and
a file there must never steer them.

A value that does not parse raises :class:`~deskpod.errors.SettingsError` naming
the variable (or the file and key), never a traceback of the validator.

Use :func:`get_settings` (cached for the process; ``get_settings.cache_clear()`` or
:func:`reload_settings` in tests) or :func:`load_settings` for an explicit
environment mapping.

Layout: :mod:`.variables` (the fields, by the side that reads them), :mod:`.load` (the
model with its checks, and reading it), :mod:`.sandboxes` (the entries of
``DESKPOD_SERVE_SANDBOXES``), :mod:`.table` (the docs' table and ``python -m deskpod.settings``),
:mod:`.stack` (how a client on the Docker host reaches the compose stack: its published port
and tokens, from the stack's ``.env``).
"""

from deskpod.settings.load import (
    Settings,
    config_file_path,
    get_settings,
    load_settings,
    reload_settings,
    use_environment_only,
)
from deskpod.settings.table import README_BEGIN, README_END, main, markdown_table, write_readme_table
from deskpod.settings.variables import ENV_PREFIX, SIDES, Side, variable_name

__all__ = [
    "ENV_PREFIX",
    "README_BEGIN",
    "README_END",
    "SIDES",
    "Settings",
    "Side",
    "config_file_path",
    "get_settings",
    "load_settings",
    "main",
    "markdown_table",
    "reload_settings",
    "use_environment_only",
    "variable_name",
    "write_readme_table",
]
