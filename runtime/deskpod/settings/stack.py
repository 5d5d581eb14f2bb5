"""How a client on the Docker host reaches the compose stack: its published port and tokens.

``scripts/up.sh`` writes the stack's ``.env`` (``DESKPOD_STACK_ENV``, default ``.env`` in
the current folder): the tokens it made and the loopback port it published the controller
service on (``DESKPOD_SERVE_PORT``, 8766 or the free port it took instead). A variable set
in the environment (or the configuration file) wins over the file; the file is read with
``python-dotenv`` (https://pypi.org/project/python-dotenv/), compose's own format.

From the host only the controller service is reachable (``ws://127.0.0.1:PORT/v1/controller``
and its console): the sandbox's daemon listens on the stack's internal network alone, where
the service owns it as ``stack`` and resets it, with a new token, before each session (so
``DESKPOD_TOKEN`` in ``.env`` is only the token it started with: no access here reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from deskpod.errors import SettingsError
from deskpod.settings.load import Settings, get_settings
from deskpod.settings.variables import variable_name

__all__ = ["StackAccess", "serve_url", "stack_access"]


def serve_url(port: int) -> str:
    """The controller service published on the host's loopback ``port``: ``ws://127.0.0.1:PORT/v1/controller``."""
    return f"ws://127.0.0.1:{port}/v1/controller"


@dataclass(frozen=True)
class StackAccess:
    """What a client on the Docker host needs to drive the stack.

    Attributes:
        serve_port: the host's loopback port the controller service is published on.
        serve_token: the service's agent token (``DESKPOD_SERVE_TOKEN``; ``""``: none known). Secret.
        approver_token: its approvers' token (``DESKPOD_SERVE_APPROVER_TOKEN``; ``""``: none). Secret.
        env_file: the ``.env`` that was read (``None``: there was none).
    """

    serve_port: int
    serve_token: str = field(repr=False)
    approver_token: str = field(repr=False)
    env_file: Path | None

    @property
    def serve_url(self) -> str:
        """The controller service's websocket URL, ``ws://127.0.0.1:PORT/v1/controller``."""
        return serve_url(self.serve_port)

    @property
    def console_url(self) -> str:
        """The web console's address, ``http://127.0.0.1:PORT/console/``."""
        return f"http://127.0.0.1:{self.serve_port}/console/"


def _port(value: str, source: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise SettingsError(f"{variable_name('serve_port')} in {source} must be a port (1..65535), got {value[:40]!r}",
                            detail={"variables": [variable_name("serve_port")]})
    return port


def stack_access(settings: Settings | None = None, env_file: str | Path | None = None) -> StackAccess:
    """The stack's published port and tokens: the settings' where set, else the stack's ``.env``.

    Args:
        settings: ``None``: the process's (:func:`~deskpod.settings.get_settings`).
        env_file: the stack's ``.env``; ``None``: ``DESKPOD_STACK_ENV`` (default ``.env`` in the
            current folder). A missing file reads as empty.

    Returns:
        The :class:`StackAccess` (port 8766 when neither names one).

    Raises:
        SettingsError: the file's ``DESKPOD_SERVE_PORT`` is not a port, or the file cannot be read.
    """
    settings = settings or get_settings()
    path = Path(env_file) if env_file is not None else settings.stack_env
    try:
        values = {k: v or "" for k, v in dotenv_values(path).items()} if path.is_file() else {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read the stack's {path}: {exc}", detail={"stack_env": str(path)}) from exc

    def secret(name: str) -> str:
        value = getattr(settings, name)
        return value.get_secret_value() if value is not None else values.get(variable_name(name), "")

    if "serve_port" in settings.model_fields_set or variable_name("serve_port") not in values:
        port = settings.serve_port
    else:
        port = _port(values[variable_name("serve_port")], str(path))
    return StackAccess(serve_port=port, serve_token=secret("serve_token"),
                       approver_token=secret("serve_approver_token"), env_file=path if path.is_file() else None)
