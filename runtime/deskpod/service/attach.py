"""One call that attaches to the compose stack running on this host: :func:`attach`.

The stack publishes only its controller service on the host (``ws://127.0.0.1:PORT/v1/controller``,
``PORT`` being ``DESKPOD_SERVE_PORT``, 8766 unless ``scripts/up.sh`` had to take another);
its sandbox is reachable through it alone: the service owns it as ``stack``
(:meth:`~deskpod.service.client.ControllerClient.open_named`). :func:`attach` reads the port and the
token from the environment, else from the stack's ``.env`` (:mod:`deskpod.settings.stack`),
so a script on the host needs neither ``set -a; . ./.env`` nor a port written in its code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from deskpod.errors import SettingsError
from deskpod.service.client import CONNECT_TIMEOUT_S, ControllerClient, SyncControllerClient
from deskpod.settings import variable_name
from deskpod.settings.stack import stack_access

__all__ = ["attach", "attach_sync"]


def _address(env_file: str | Path | None, role: Literal["agent", "approver"]) -> tuple[str, str]:
    """The service's URL and the token of ``role`` (see :func:`attach`)."""
    access = stack_access(env_file=env_file)
    token = access.serve_token if role == "agent" else access.approver_token
    if not token:
        variable = variable_name("serve_token" if role == "agent" else "serve_approver_token")
        where = access.env_file or f"no .env here ({variable_name('stack_env')} names it)"
        raise SettingsError(f"no {variable} in the environment nor in the stack's .env ({where}): start the stack "
                            "with scripts/up.sh, or run from its checkout", detail={"variables": [variable]})
    return access.serve_url, token


async def attach(env_file: str | Path | None = None, *, role: Literal["agent", "approver"] = "agent",
                 timeout_s: float = CONNECT_TIMEOUT_S) -> ControllerClient:
    """Connect to the controller service of the stack running on this host.

    Args:
        env_file: the stack's ``.env``; ``None``: ``DESKPOD_STACK_ENV``, default ``.env`` in the
            current folder (the checkout ``scripts/up.sh`` ran in).
        role: ``"agent"`` (``DESKPOD_SERVE_TOKEN``: open sessions, submit actions) or
            ``"approver"`` (``DESKPOD_SERVE_APPROVER_TOKEN``: answer confirmations and pauses).
        timeout_s: how long the handshake may take, seconds.

    Returns:
        The connected :class:`~deskpod.service.client.ControllerClient` (``async with`` closes it).

    Raises:
        SettingsError: the token is neither in the environment nor in the file, or the
            file's port is not a port.
        UnauthorizedError: the service refused the token.
        DeskpodError: the service is not reachable (the stack is not up, or on another port).
    """
    url, token = _address(env_file, role)
    return await ControllerClient.connect(url, token, timeout_s=timeout_s, role=role)


def attach_sync(env_file: str | Path | None = None, *, role: Literal["agent", "approver"] = "agent",
                timeout_s: float = CONNECT_TIMEOUT_S) -> SyncControllerClient:
    """:func:`attach` for synchronous scripts: the same arguments and errors.

    Returns:
        The connected :class:`~deskpod.service.client.SyncControllerClient` (``with`` closes it).
    """
    url, token = _address(env_file, role)
    return SyncControllerClient.connect(url, token, timeout_s=timeout_s, role=role)
