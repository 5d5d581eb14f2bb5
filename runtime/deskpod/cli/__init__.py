"""The ``deskpod`` command (typer and rich): one module per command.

- ``run TASK_FILE``, ``code TASK_FILE`` (:mod:`deskpod.cli.run`): play a task against a sandbox.
- ``serve``, ``agentd`` (:mod:`deskpod.cli.serve`): the controller service, the in-sandbox daemon.
- ``verify-log LOG`` (:mod:`deskpod.cli.verify_log`), ``schema`` (:mod:`deskpod.cli.schema`),
  ``audit [SANDBOX]`` (:mod:`deskpod.cli.audit`).
- ``pool up|status|acquire|release|snapshot|down``, ``reset ID`` (:mod:`deskpod.cli.pool`).

Global options, defaults and output: :mod:`deskpod.cli.context`, :mod:`deskpod.cli.defaults`;
exit codes: :mod:`deskpod.cli.exits`.
"""

from deskpod.cli.app import app, main
from deskpod.cli.exits import (
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_UNAUTHORIZED,
    EXIT_UNAVAILABLE,
    EXIT_UNVERIFIED,
    EXIT_USAGE,
)

__all__ = ["EXIT_CODES", "EXIT_FAILURE", "EXIT_OK", "EXIT_UNAUTHORIZED", "EXIT_UNAVAILABLE", "EXIT_UNVERIFIED",
           "EXIT_USAGE", "app", "main"]
