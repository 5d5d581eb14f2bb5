"""What every command shares: the global options (accepted before or after the
subcommand), the defaults they resolve, and the one way a command reports.

A command that reports prints, with ``--json``, exactly one JSON document on
standard output, its error included (``{"ok": false, "exit_code", "error": {"code",
"message"}}``); human text goes to standard output without ``--json``, and
refusals go to standard error as one line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from deskpod.cli.defaults import CliDefaults, builtin_defaults
from deskpod.cli.exits import EXIT_OK, EXIT_USAGE, exit_name
from deskpod.errors import SettingsError, printable
from deskpod.settings import get_settings, load_settings, variable_name

__all__ = [
    "ConfigOption",
    "GlobalOptions",
    "Invocation",
    "JsonOption",
    "VerboseOption",
    "invocation",
    "shown_defaults",
    "shown_path",
]

VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="log every step (INFO) on standard error")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document on standard output")]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE",
                 show_default="$DESKPOD_CONFIG, else ~/.config/deskpod/config.toml if it exists",
                 help="TOML settings file (keys: the settings' names, e.g. sandbox_url, audit_dir); "
                      "DESKPOD_* variables win over it"),
]


def shown_path(path: Path) -> str:
    """``path`` as help texts show it: the home folder as ``~``."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)


def shown_defaults() -> CliDefaults:
    """The defaults as the environment sets them, for the help texts (the built-in ones when
    a variable does not parse). No configuration file is read for them: the command's
    modules are imported by ``deskpod agentd`` too, whose home folder the browser can write."""
    try:
        return CliDefaults.from_settings(load_settings(config_file=None))
    except SettingsError:
        return builtin_defaults()


@dataclass
class GlobalOptions:
    """The global options given before the subcommand (the root callback's)."""

    verbose: bool = False
    json: bool = False
    config: Path | None = None


@dataclass
class Invocation:
    """One command's view of the global options and defaults, and its output channel."""

    json: bool
    defaults: CliDefaults
    command: str

    def report(self, document: dict[str, Any], human: list[str], code: int = EXIT_OK) -> NoReturn:
        """Print the command's result and exit with ``code``.

        Args:
            document: the ``--json`` document (``ok`` is added: ``code == 0``).
            human: the lines printed without ``--json`` (made :func:`printable`).
            code: the exit code (:mod:`deskpod.cli.exits`).

        Raises:
            typer.Exit: always, with ``code``.
        """
        self.emit(document, human, code)
        raise typer.Exit(code)

    def emit(self, document: dict[str, Any], human: list[str], code: int = EXIT_OK) -> None:
        """Print a result as :meth:`report` does, without exiting (a command that goes on
        after its result, e.g. ``pool acquire --hold``), and flush it."""
        if self.json:
            print(json.dumps({"ok": code == EXIT_OK, **document}, indent=2), flush=True)
        else:
            for line in human:
                print(printable(line), flush=True)

    def refuse(self, code: int, message: str) -> NoReturn:
        """Stop the command with a one-line reason on standard error (and, with
        ``--json``, the error document on standard output).

        Args:
            code: :data:`~deskpod.cli.exits.EXIT_USAGE`, ``EXIT_UNAVAILABLE`` or ``EXIT_FAILURE``.
            message: the reason (made one line).

        Raises:
            typer.Exit: always, with ``code``.
        """
        line = self.note(message)
        if self.json:
            print(json.dumps({"ok": False, "exit_code": code, "error": {"code": exit_name(code), "message": line}},
                             indent=2))
        raise typer.Exit(code)

    def note(self, message: str) -> str:
        """Print one line on standard error, ``deskpod COMMAND: message`` (made one printable line).

        Returns:
            The line as printed, without the prefix.
        """
        line = printable(" ".join(message.split()))
        Console(stderr=True, highlight=False, markup=False, soft_wrap=True).print(f"deskpod {self.command}: {line}")
        return line

    def token(self, token_file: Path | None, missing: str = "set DESKPOD_TOKEN or pass --token-file") -> str:
        """The bearer token to use: ``token_file``'s text (stripped) when given, else ``$DESKPOD_TOKEN``.

        Args:
            token_file: a file holding the token, or ``None``.
            missing: the reason given when neither holds a token.

        Raises:
            typer.Exit: :data:`~deskpod.cli.exits.EXIT_USAGE` when the file cannot be read or
                is empty, or no token is set.
        """
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                self.refuse(EXIT_USAGE, f"cannot read the token file {token_file}: {exc}")
            if not token:
                self.refuse(EXIT_USAGE, f"the token file {token_file} is empty")
            return token
        if not self.defaults.token:
            self.refuse(EXIT_USAGE, missing)
        return str(self.defaults.token)

    def audit_signer(self) -> Any:
        """The controller's audit signing key (:class:`~deskpod.controller.audit_sign.AuditSigner`,
        created on first use).

        Raises:
            typer.Exit: :data:`~deskpod.cli.exits.EXIT_USAGE` when it cannot be read or created.
        """
        from deskpod.controller.audit_sign import AuditSigner
        from deskpod.errors import AuditKeyError

        try:
            return AuditSigner.load_or_create()
        except AuditKeyError as exc:
            self.refuse(EXIT_USAGE, exc.message)


def invocation(ctx: typer.Context, verbose: bool, json_out: bool, config: Path | None) -> Invocation:
    """Merge a command's global options with those given before the subcommand, set up
    logging, and resolve the defaults.

    Args:
        ctx: the command's context (its root holds :class:`GlobalOptions`).
        verbose, json_out, config: the command's own ``-v``, ``--json``, ``--config``.

    Returns:
        The :class:`Invocation`; settings that do not parse (a ``DESKPOD_*`` variable, the
        ``--config`` file) end the command with exit code 2.
    """
    root = ctx.find_root().obj
    given = root if isinstance(root, GlobalOptions) else GlobalOptions()
    verbose = verbose or given.verbose
    json_out = json_out or given.json
    config = config or given.config
    command = " ".join(ctx.command_path.split()[1:]) or "deskpod"
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    get_settings.cache_clear()  # each command reads the settings afresh (several may run in one process)
    if config is not None:
        _use_config_file(ctx, config)
    try:
        defaults = CliDefaults.from_settings()
    except SettingsError as exc:
        Invocation(json_out, builtin_defaults(), command).refuse(EXIT_USAGE, exc.message)
    return Invocation(json_out, defaults, command)


def _use_config_file(ctx: typer.Context, config: Path) -> None:
    """Make ``config`` this command's configuration file, for every module that reads the
    settings (``--config FILE`` is ``DESKPOD_CONFIG=FILE``); the command's end restores the
    variable as it was."""
    name = variable_name("config")
    before = os.environ.get(name)
    os.environ[name] = str(config)
    get_settings.cache_clear()

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
        get_settings.cache_clear()

    ctx.call_on_close(restore)
