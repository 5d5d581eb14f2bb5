"""``deskpod verify-log``: check an audit log's hash chain (:func:`deskpod.controller.audit.verify_log`).

Exit 0 when the chain is intact (and ends at ``--head``), 1 when it is broken, 2 when
the log cannot be read or ``--head`` is not a SHA-256.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

__all__ = ["verify_log_command"]


def verify_log_command(
    ctx: typer.Context,
    log: Annotated[Path, typer.Argument(metavar="LOG", show_default=False,
                                        help="the run's audit log, <audit-dir>/<run_id>.jsonl")],
    head: Annotated[str | None, typer.Option(
        "--head", metavar="HASH", show_default="not checked",
        help="the run's audit log head hash (also detects lines cut from the end)")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Check an audit log's hash chain."""
    from deskpod.controller.audit import verify_log

    inv = invocation(ctx, verbose, json_out, config)
    try:
        check = verify_log(log, head)
    except OSError as exc:
        inv.refuse(EXIT_USAGE, f"cannot read {log}: {exc}")
    except ValueError as exc:
        inv.refuse(EXIT_USAGE, f"--head: {exc}")
    document = {"log": str(log), "intact": check.ok, "lines": check.lines, "head": check.head, "error": check.error}
    if check.ok:
        inv.report(document, [f"OK: {check.lines} lines, hash chain intact, head {check.head}"], EXIT_OK)
    inv.report(document, [f"BROKEN after {check.lines} good lines: {check.error}"], EXIT_FAILURE)
