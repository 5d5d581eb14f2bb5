"""``deskpod audit-key``: print the public key that seals this controller's audit logs
(:class:`deskpod.controller.audit_sign.AuditSigner`), creating the key on first use.

A reviewer verifies a log with that key alone: ``deskpod verify-log LOG --public-key FILE``.
Exit 0 with the key, 2 when the private key cannot be read or created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_OK, EXIT_USAGE

__all__ = ["audit_key_command"]


def audit_key_command(
    ctx: typer.Context,
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="FILE", show_default="$DESKPOD_AUDIT_KEY, else audit/signing.key in the state folder",
        help="the private key file (created, mode 0600, when missing)")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Print the public key (PEM) that seals audit logs; the key id goes to standard error."""
    from deskpod.controller.audit_sign import AuditSigner, default_key_path
    from deskpod.errors import AuditKeyError, SettingsError

    inv = invocation(ctx, verbose, json_out, config)
    try:
        path = key if key is not None else default_key_path()
        signer = AuditSigner.load_or_create(path)
    except (AuditKeyError, SettingsError) as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    pem = signer.public_key.pem()
    if inv.json:
        inv.report({"key_id": signer.public_key.key_id, "public_key": pem, "private_key": str(path)}, [], EXIT_OK)
    typer.echo(pem, nl=False)
    typer.echo(f"key id {signer.public_key.key_id} (private key: {path})", err=True)
    raise typer.Exit(EXIT_OK)
