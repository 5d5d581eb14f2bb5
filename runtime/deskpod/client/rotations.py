"""Who in this process learns a sandbox's new control token when a reset rotates it.

Every reset rotates the control token (:meth:`deskpod.client.Sandbox.reset`), so
whoever keeps a copy of the token for later (a warm pool keeps its leased sandboxes'
tokens to reset them at release) holds a dead one once its lessee resets through any
client. A keeper registers the sandbox's URL and the token it holds
(:func:`watch_rotation`); each :meth:`~deskpod.client.Sandbox.reset` made in this process
with that token then hands it the new one (:func:`token_rotated`), and keeps watching under
the new token, so a chain of resets is followed. Watches are keyed by the token's SHA-256, never the token itself.
Thread-safe: :class:`~deskpod.client.SyncSandbox` resets on a loop of its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from deskpod.tokens import token_sha256

__all__ = ["token_rotated", "unwatch_rotation", "watch_rotation"]

_watches: dict[tuple[str, str], Callable[[str], None]] = {}
_lock = threading.Lock()


def watch_rotation(url: str, token: str, on_rotated: Callable[[str], None]) -> None:
    """Call ``on_rotated(new_token)`` when a reset in this process rotates ``token`` of the
    sandbox at ``url`` (``ws://HOST:8765/v1/ws``); replaces an earlier watch of the same pair."""
    with _lock:
        _watches[(url, token_sha256(token))] = on_rotated


def unwatch_rotation(url: str, token: str) -> None:
    """Stop watching ``token`` of the sandbox at ``url`` (nothing happens if it was not watched)."""
    with _lock:
        _watches.pop((url, token_sha256(token)), None)


def token_rotated(url: str, old_token: str, new_token: str) -> None:
    """Tell the watcher of ``old_token`` at ``url`` (if any) that ``new_token`` is now in force,
    and move its watch to ``new_token``. Called by :meth:`deskpod.client.Sandbox.reset`; whoever
    resets with :func:`deskpod.client.reset_and_reconnect` directly calls it too, or tells the
    pool (:meth:`deskpod.backend.pool.SandboxPool.rotated`)."""
    with _lock:
        on_rotated = _watches.pop((url, token_sha256(old_token)), None)
        if on_rotated is not None:
            _watches[(url, token_sha256(new_token))] = on_rotated
    if on_rotated is not None:
        on_rotated(new_token)
