"""Run the daemon: ``python -m deskpod.agentd`` (the sandbox image's command).

The first thing the daemon does is mark itself non-dumpable
(``prctl(PR_SET_DUMPABLE, 0)``): the kernel then refuses every other process of its
uid the daemon's ``/proc/<pid>/mem``, ``environ``, ``fd`` and ``ptrace``, and owns its
``/proc/<pid>`` files to root. The image also makes the Python binary executable
but not readable (mode 0711), which has the kernel mark it so at exec already; the
``prctl`` keeps the property when the daemon runs from another interpreter.
"""

from __future__ import annotations

import logging
import os
import sys

from deskpod.agentd.config import AgentdConfig
from deskpod.errors import ConfigError
from deskpod.agentd.session import EarlyStart
from deskpod.nondumpable import set_non_dumpable
from deskpod.settings import use_environment_only

__all__ = ["main", "set_non_dumpable"]


def main() -> None:
    """Mark the daemon non-dumpable, read the environment (never a configuration file:
    :func:`~deskpod.settings.use_environment_only`), start the session (before the
    server's modules load: :class:`~deskpod.agentd.session.EarlyStart`) and serve the
    control websocket."""
    try:
        set_non_dumpable()
    except OSError as exc:
        print(f"agentd: cannot make the daemon non-dumpable: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_environment_only()
    try:
        config = AgentdConfig.from_env()
    except ConfigError as exc:
        print(f"agentd: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from exc
    # The daemon keeps only the token's hash; its children must not inherit the token.
    for name in ("DESKPOD_TOKEN", "DESKPOD_TOKEN_FILE"):
        os.environ.pop(name, None)
    # The desktop starts while the server's modules load and its app is built.
    early = EarlyStart.begin(config) if config.manage_session else None

    import uvicorn

    from deskpod.agentd.app import create_app
    from deskpod.protocol import MAX_MESSAGE_BYTES

    uvicorn.run(
        create_app(config, early),
        host=config.host,
        port=config.port,
        ws_max_size=MAX_MESSAGE_BYTES,
        # No permessage-deflate: it cost about 6 ms a screenshot reply, for a quarter of
        # the bytes of a link that is local, and typed secrets compressed beside page
        # text make a length side channel.
        ws_per_message_deflate=False,
        ws_ping_interval=20.0,
        log_level="info",
    )


if __name__ == "__main__":
    main()
