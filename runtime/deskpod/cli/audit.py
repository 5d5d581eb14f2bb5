"""``deskpod audit``: check a running sandbox container against SECURITY.md's claims.

Exit 0 only when every check passes; 1 when one failed; 2 when the named (or the
compose) sandbox cannot be found or is not running; 3 when the docker SDK is missing
or the Docker engine cannot be reached.
"""

from __future__ import annotations

from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

__all__ = ["audit_command"]

_UNAVAILABLE_REASONS = frozenset({"no_sdk", "docker", "listener"})
"""``AuditError.detail["reason"]`` values that mean the infrastructure, not the sandbox's name."""


def audit_command(
    ctx: typer.Context,
    sandbox: Annotated[str | None, typer.Argument(
        metavar="[SANDBOX]", show_default="the compose project's sandbox service",
        help="the sandbox container's name or id")] = None,
    project: Annotated[str | None, typer.Option(
        "--project", show_default="$COMPOSE_PROJECT_NAME, else from the container's labels",
        help="compose project of the sandbox and its peers")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Check a running sandbox's hardening, pass/fail per property (runs on the Docker host)."""
    from deskpod.audit import audit_sandbox, render_table
    from deskpod.errors import AuditError

    inv = invocation(ctx, verbose, json_out, config)
    try:
        report = audit_sandbox(sandbox, project=project)
    except AuditError as exc:
        reason = exc.detail.get("reason")
        inv.refuse(EXIT_UNAVAILABLE if reason in _UNAVAILABLE_REASONS else EXIT_USAGE, exc.message)
    inv.report(report.to_dict(), render_table(report).splitlines(), EXIT_OK if report.ok else EXIT_FAILURE)
