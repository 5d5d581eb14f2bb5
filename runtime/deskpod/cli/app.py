"""The ``deskpod`` command: a typer application, one module per command.

``-v/--verbose``, ``--json`` and ``--config FILE`` are accepted before or after the
subcommand; ``deskpod --version`` prints the package's version; ``--install-completion``
and ``--show-completion`` are typer's shell completion. Exit codes: :mod:`deskpod.cli.exits`.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
import typer.rich_utils

from deskpod.cli.audit import audit_command
from deskpod.cli.eval import EVAL_EPILOG, eval_command
from deskpod.cli.context import ConfigOption, GlobalOptions, JsonOption, VerboseOption
from deskpod.cli.exits import EXIT_CODES, EXIT_FAILURE, EXIT_USAGE, exit_name
from deskpod.cli.mcp import mcp_command
from deskpod.cli.pool import pool_app, reset_command
from deskpod.cli.run import code_command, run_command
from deskpod.cli.schema import schema_command
from deskpod.cli.serve import agentd_command, serve_command
from deskpod.cli.audit_key import audit_key_command
from deskpod.cli.verify_log import verify_log_command
from deskpod.cli.replay import replay_command

__all__ = ["app", "main", "package_version"]

_EPILOG = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, (_, meaning) in EXIT_CODES.items()) + "."


def package_version() -> str:
    """The installed deskpod distribution's version (``"unknown"`` when not installed)."""
    try:
        return version("deskpod")
    except PackageNotFoundError:
        return "unknown"


app = typer.Typer(
    name="deskpod",
    help="deskpod: a hardened desktop sandbox for computer-use and code agents, and its controller.",
    epilog=_EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
    show_version: Annotated[bool, typer.Option("--version", help="print deskpod's version and exit")] = False,
) -> None:
    """Remember the global options given before the subcommand; ``--version``."""
    ctx.obj = GlobalOptions(verbose=verbose, json=json_out, config=config)
    if show_version:
        print(json.dumps({"name": "deskpod", "version": package_version()}) if json_out
              else f"deskpod {package_version()}")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        print(ctx.get_help(), file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)


app.command("run", epilog=_EPILOG)(run_command)
app.command("code", epilog=_EPILOG)(code_command)
app.command("eval", epilog=EVAL_EPILOG)(eval_command)
app.command("serve", epilog=_EPILOG)(serve_command)
app.command("mcp", epilog=_EPILOG)(mcp_command)
app.command("verify-log", epilog=_EPILOG)(verify_log_command)
app.command("audit-key", epilog=_EPILOG)(audit_key_command)
app.command("replay", epilog=_EPILOG)(replay_command)
app.command("agentd")(agentd_command)
app.command("schema", epilog=_EPILOG)(schema_command)
app.command("audit", epilog=_EPILOG)(audit_command)
app.add_typer(pool_app, name="pool")
app.command("reset", epilog=_EPILOG)(reset_command)


def _json_requested(args: list[str]) -> bool:
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``deskpod`` console script (and ``python -m deskpod``).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Raises:
        SystemExit: always, with the exit code (:data:`~deskpod.cli.exits.EXIT_CODES`); a
            command line typer refuses exits 2 with its reason on standard error (and,
            with ``--json``, an error document on standard output).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="deskpod", standalone_mode=False)
    except typer.TyperException as exc:
        typer.rich_utils.rich_format_error(exc)  # type: ignore[arg-type]  # a TyperException from parsing
        code = exc.exit_code
        if _json_requested(args):
            print(json.dumps({"ok": False, "exit_code": code,
                              "error": {"code": exit_name(code), "message": exc.format_message()}}, indent=2))
    except typer.Abort:
        print("deskpod: aborted", file=sys.stderr)
        code = EXIT_FAILURE
    raise SystemExit(code if isinstance(code, int) else 0)
