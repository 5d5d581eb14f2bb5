"""Give a session's sandbox back after the MCP process is gone: reset it, or release its pool lease.

A stdio client ends the session by closing the server's standard input and kills the
server's process group two seconds later (the MCP SDK's shutdown; the lifecycle section of
the MCP specification), which is less than a reset takes. So at the end of a stdio session
``deskpod mcp`` ends the run itself (a cancel is quick) and hands the reset to this helper,
started in a session of its own (:func:`spawn`) so that the kill does not reach it. The
helper reads its orders, tokens included, from its standard input (never its command line),
as one JSON object:

- ``{"kind": "reset", "url", "token", "token_file", "start_url"}``: reset the sandbox in place
  and write the new token to ``token_file`` (mode 0600);
- ``{"kind": "pool", "pool", "state_dir", "sandbox_id", "lease"}``: release the pool's lease
  ``lease`` (the pool resets the sandbox; a lease the pool took back meanwhile is refused and
  its next holder's sandbox left alone).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from deskpod.mcp_server.runs import SandboxLease
from deskpod.mcp_server.sources import GivenSandbox, PoolSandbox

__all__ = ["handback", "main", "spawn"]

log = logging.getLogger(__name__)


def spawn(lease: SandboxLease, start_url: str | None, state_dir: Path | None) -> None:
    """Start the helper for ``lease`` in a new session and give it its orders on its standard input."""
    if lease.pool is not None:
        orders: dict[str, Any] = {"kind": "pool", "pool": lease.pool, "sandbox_id": lease.sandbox_id,
                                  "lease": lease.lease_id, "state_dir": str(state_dir) if state_dir else None}
    else:
        orders = {"kind": "reset", "url": lease.url, "token": lease.token, "start_url": start_url,
                  "token_file": str(lease.token_file) if lease.token_file else None}
    helper = subprocess.Popen([sys.executable, "-m", "deskpod.mcp_server.handback"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, start_new_session=True)
    assert helper.stdin is not None
    helper.stdin.write(json.dumps(orders).encode())
    helper.stdin.close()


async def handback(orders: dict[str, Any]) -> None:
    """Carry out ``orders`` (see the module docstring).

    Raises:
        DeskpodError: the reset or the release failed.
    """
    if orders["kind"] == "pool":
        state_dir = Path(orders["state_dir"]) if orders.get("state_dir") else None
        pool = PoolSandbox(orders["pool"], state_dir)
        await pool.release(SandboxLease("", "", sandbox_id=orders["sandbox_id"], pool=orders["pool"],
                                        lease_id=orders["lease"]), None)
        return
    from deskpod.client import Sandbox

    sandbox = await Sandbox.open(orders["url"], orders["token"])
    try:
        await sandbox.reset(orders.get("start_url"))
    finally:
        await sandbox.close()
    token_file = Path(orders["token_file"]) if orders.get("token_file") else None
    await GivenSandbox(orders["url"], orders["token"], token_file).release(
        SandboxLease(orders["url"], orders["token"]), sandbox.token)


def main() -> None:
    """Entry point: orders from standard input; exit status 1 when they failed (logged on standard error)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        asyncio.run(handback(json.loads(sys.stdin.read())))
    except Exception:  # noqa: BLE001 - a detached helper has nobody else to tell
        log.exception("handing the sandbox back failed")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
