"""Run the daemon: ``python -m deskpod.agentd`` (the sandbox image's command)."""

from __future__ import annotations

import logging
import os
import sys

from deskpod.agentd.config import AgentdConfig, ConfigError

__all__ = ["main"]


def main() -> None:
    """Read the environment, start the session and serve the control websocket."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = AgentdConfig.from_env()
    except ConfigError as exc:
        print(f"agentd: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from exc
    # The daemon keeps only the token's hash; its children must not inherit the token.
    for name in ("DESKPOD_TOKEN", "DESKPOD_TOKEN_FILE"):
        os.environ.pop(name, None)

    import uvicorn

    from deskpod.agentd.app import create_app
    from deskpod.protocol import MAX_MESSAGE_BYTES

    uvicorn.run(
        create_app(config),
        host=config.host,
        port=config.port,
        ws_max_size=MAX_MESSAGE_BYTES,
        ws_ping_interval=20.0,
        log_level="info",
    )


if __name__ == "__main__":
    main()
