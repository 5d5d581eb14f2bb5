"""The ``deskpod`` command's exit codes: one table, which the documentation's CLI reference shows.

A harness tells "the agent failed" (1) from "my command was wrong" (2), "the
sandbox or Docker is not there" (3), "my token was refused" (4) and "the log is intact
but nothing pinned its seal" (5) by the code alone.
"""

from __future__ import annotations

__all__ = ["EXIT_CODES", "EXIT_FAILURE", "EXIT_OK", "EXIT_UNAUTHORIZED", "EXIT_UNAVAILABLE", "EXIT_UNVERIFIED",
           "EXIT_USAGE", "exit_name"]

EXIT_OK = 0
"""Verified success: the run's success check held, the log's chain is intact, every audit check passed,
the pool command did what it says."""

EXIT_FAILURE = 1
"""Verified failure: the run failed or was cancelled (its audit log says why; a sandbox that breaks the
protocol is this too), the chain is broken, an audit check failed, a backend operation failed (pool
exhausted, no such sandbox)."""

EXIT_USAGE = 2
"""Usage or input error, refused at once with a one-line reason and never retried: a bad option, a
``--sandbox`` URL that is not ``ws://`` or ``wss://``, an unreadable or invalid task, policy, token or
config file, no token, no such pool, an audit target (a container) that does not exist."""

EXIT_UNAVAILABLE = 3
"""Infrastructure unavailable: the sandbox did not accept a TCP connection within ``--connect-timeout``
(connection refused; a host name that does not resolve fails at once, naming the host and the fix), the Docker engine cannot be reached, or the docker SDK (or
another optional dependency of the command, such as ``serve``'s FastAPI) is not installed (``pool up``
then saves no pool record); for ``deskpod eval``, also a run that hit an infrastructure error on both its
attempts (its sandbox crashed, the backend failed), so the success rate is no verdict on the agent."""

EXIT_UNAUTHORIZED = 4
"""Authentication refused: the sandbox refused the control token (``DESKPOD_TOKEN``, ``--token-file``),
or with ``run --service`` the service refused its token (``DESKPOD_SERVE_TOKEN``) or the sandbox's. A
harness fixes the token rather than retrying."""

EXIT_UNVERIFIED = 5
"""Not verified: ``verify-log`` found the hash chain intact and ending with ``run_finished``, but no
pinned key (``--public-key FILE``, ``DESKPOD_AUDIT_PUBLIC_KEY``) checked the final record's seal: a
log rewritten and sealed again with a key of the forger's own would look the same."""

EXIT_CODES: dict[int, tuple[str, str]] = {
    EXIT_OK: ("ok", "verified success"),
    EXIT_FAILURE: ("failure", "verified failure (run failed or cancelled, chain broken, check failed)"),
    EXIT_USAGE: ("usage", "usage or input error (bad option, URL, task/policy/config file, no token)"),
    EXIT_UNAVAILABLE: ("unavailable", "infrastructure unavailable (sandbox or Docker unreachable, SDK missing)"),
    EXIT_UNAUTHORIZED: ("unauthorized", "authentication refused (the sandbox's or the service's token)"),
    EXIT_UNVERIFIED: ("unverified", "log chain intact, seal not verified (no pinned key: --public-key)"),
}
"""Exit code → (name used in ``--json`` error documents, meaning)."""


def exit_name(code: int) -> str:
    """The table's name for ``code`` (``"failure"`` for codes outside it)."""
    return EXIT_CODES.get(code, EXIT_CODES[EXIT_FAILURE])[0]
