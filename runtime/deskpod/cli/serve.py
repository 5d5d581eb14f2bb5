"""``deskpod serve`` (the controller as a websocket service, :mod:`deskpod.service.server`)
and ``deskpod agentd`` (the in-sandbox daemon)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation, shown_defaults, shown_path
from deskpod.cli.exits import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

__all__ = ["agentd_command", "parse_listen", "serve_command"]

_SHOWN = shown_defaults()


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; an empty host is 127.0.0.1) as a pair.

    Raises:
        ValueError: no port, or the port is not 1-65535.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r} is not HOST:PORT with a port from 1 to 65535")
    return host.strip("[]") or "127.0.0.1", int(port)


def serve_command(
    ctx: typer.Context,
    listen: Annotated[str | None, typer.Option(
        "--listen", metavar="HOST:PORT", show_default=f"$DESKPOD_SERVE_LISTEN, else {_SHOWN.serve_listen}",
        help="where to listen")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", metavar="FILE", show_default="the built-in policy",
        help="default policy file for sessions that send none")] = None,
    audit_dir: Annotated[Path | None, typer.Option(
        "--audit-dir", metavar="DIR", show_default=f"$DESKPOD_AUDIT_DIR, else {shown_path(_SHOWN.audit_dir)}",
        help="folder for the runs' audit logs, screenshots and failure scenes")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Run the controller as a websocket service; runs until interrupted.

    Agents present $DESKPOD_SERVE_TOKEN, approvers (who alone answer confirmations)
    $DESKPOD_SERVE_APPROVER_TOKEN; the web console (/console/, $DESKPOD_CONSOLE_*) signs people in
    with the approver token or $DESKPOD_CONSOLE_TOKENS_FILE's. Sessions on $DESKPOD_SANDBOX_URL give their run's allowlist
    to $DESKPOD_EGRESS_CONTROL (the stack's proxy); a pool slot's session names its own. Only sessions
    on a sandbox $DESKPOD_SERVE_SANDBOXES lists type host-held secrets ($DESKPOD_SECRET_*) or ask a
    person for a credential; the ones it lists by NAME=URL the service owns: sessions open them by
    name, each reset first (the rotated token goes to the entry's token_file), or restored from a
    snapshot of $DESKPOD_STATE_DIR/snapshots. Prometheus metrics: GET /metrics with
    $DESKPOD_SERVE_METRICS_TOKEN, or without a token on the loopback $DESKPOD_SERVE_METRICS_LISTEN."""
    inv = invocation(ctx, verbose, json_out, config)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        inv.refuse(EXIT_UNAVAILABLE, "serve needs FastAPI and uvicorn: pip install 'deskpod[serve]'")
    from deskpod.nondumpable import non_dumpable_on_linux

    try:  # its tokens and the run credentials it holds are no one else's, its own uid's neither
        non_dumpable_on_linux()
    except OSError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"cannot keep this process's secrets from its own uid: {exc}")
    from deskpod.client.snapshot_store import SnapshotStore
    from deskpod.controller.audit_sign import AuditSigner, pinned_public_key
    from deskpod.controller.egress import egress_control_from_settings
    from deskpod.controller.credentials import SecretStore
    from deskpod.controller.policy.policy_file import load_policy
    from deskpod.service.console.auth import ConsoleSettings
    from deskpod.service.server.app import serve
    from deskpod.service.server.metrics_settings import MetricsSettings
    from deskpod.service.server.service_state import ControllerService
    from deskpod.service.server.token_env import (
        approver_token_sha256_from_env,
        metrics_token_sha256_from_env,
        token_sha256_from_env,
    )
    from deskpod.errors import DeskpodError
    from deskpod.settings import get_settings

    try:
        host, port = parse_listen(listen or inv.defaults.serve_listen)
        service = ControllerService(token_sha256_from_env(), audit_dir=str(audit_dir or inv.defaults.audit_dir),
                                    signer=AuditSigner.load_or_create(), audit_public_key=pinned_public_key(),
                                    approver_token_sha256=approver_token_sha256_from_env(),
                                    egress_control=egress_control_from_settings(),
                                    egress_sandbox_url=inv.defaults.sandbox_url,
                                    secrets=SecretStore.from_env(), sandboxes=get_settings().serve_sandboxes,
                                    snapshots=SnapshotStore(inv.defaults.state_dir / "snapshots"),
                                    pool_state_dir=inv.defaults.state_dir)
        if policy is not None:
            service.policy = load_policy(policy)
        console = ConsoleSettings.from_settings(host, port, service.approver_token_sha256) \
            if get_settings().console else None
        metrics_listen = get_settings().serve_metrics_listen
        metrics = MetricsSettings(metrics_token_sha256_from_env(),
                                  parse_listen(metrics_listen) if metrics_listen else None)
    except (ValueError, OSError) as exc:
        inv.refuse(EXIT_USAGE, str(exc))
    except DeskpodError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    try:
        asyncio.run(serve(service, host, port, console=console,
                          metrics=metrics if metrics.enabled else None))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"cannot listen on {host}:{port}{' or ' + metrics_listen if metrics_listen else ''}: "
                                     f"{exc}")
    except DeskpodError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    raise typer.Exit(EXIT_OK)


def agentd_command() -> None:
    """Run the in-sandbox daemon (what the sandbox image runs)."""
    from deskpod.agentd.__main__ import main as agentd_main

    agentd_main()
