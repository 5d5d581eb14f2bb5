"""The console's live view route: ``/console/live/{session}``, a websocket per viewer.

:func:`live_router` returns a FastAPI router the console app includes. Each connection
is authorized by the console (``authorize(websocket)`` returns the signed-in principal,
or ``None``: the upgrade is refused before the handshake, HTTP 403; the console's
:meth:`~deskpod.service.console.auth.ConsoleAuth.authorize_websocket` wants the cookie,
the ``Origin`` and the page secret) and then watches one
session through the service's :class:`~deskpod.service.live_hub.LiveHub`: one stream per
sandbox, however many people watch. The viewer receives

- binary messages: one JPEG frame each, the sandbox's screen (pixels = the canvas's);
  or, when the URL asks for video (``?video=avc1``) and PyAV is installed, one H.264 chunk each
  (:meth:`~deskpod.service.live_video.VideoChunk.packed`: a flags byte, bit 0 set for
  a key frame, an 8-byte big-endian timestamp in microseconds, then the access unit in
  Annex B format), encoded by the controller;
- ``{"type": "video", "codec", "width", "height"}`` (video only): the decoder's
  configuration, before the first chunk and again before a key frame;
- ``{"type": "pointer", "x", "y"}``: the pointer, screen pixels;
- ``{"type": "meta", "url", "state", "screen": {"width", "height"}, "stream"}``: the
  page's URL and the run's state (text from the sandbox and the run: render it as text),
  the screen's size, and ``stream`` ``connecting``/``live``/``reconnecting``/``ended``.

A viewer only watches: any message it sends closes its connection (code 1008). An
unknown session is refused like a missing sign-in. ``static/live.js`` draws all of it
on a ``<canvas data-live-session>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Final

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from deskpod.errors import InvalidRequestError
from deskpod.service.console.auth import websocket_subprotocol
from deskpod.service.live_hub import LiveHub, Viewer
from deskpod.service.live_video import video_available
from deskpod.service.server.service_state import ControllerService

__all__ = ["LIVE_ROUTE", "MAX_SESSION_CHARS", "VIDEO_QUERY", "live_router"]

log = logging.getLogger(__name__)

LIVE_ROUTE: Final = "/console/live/{session}"
"""The live view's websocket path."""

MAX_SESSION_CHARS: Final = 128
"""The longest session id a viewer may name."""

VIDEO_QUERY: Final = ("video", "avc1")
"""The query parameter and value with which a viewer asks for H.264 instead of JPEG."""


def live_router(service: ControllerService, authorize: Callable[[WebSocket], Awaitable[object | None]],
                hub: LiveHub | None = None) -> APIRouter:
    """The live view's router for the console app.

    Args:
        service: the controller service whose sessions are watched; the hub learns their
            URL and state from its records (:attr:`ControllerService.record_listeners`).
        authorize: the console's check of a websocket upgrade (session cookie, Origin):
            the principal, or ``None`` to refuse.
        hub: the streams' fan-out (default: a hub on ``service``'s sessions).

    Returns:
        A router with the websocket route :data:`LIVE_ROUTE`.
    """
    live_hub = hub or LiveHub(service.session_sandbox)
    service.record_listeners.append(live_hub.note)
    router = APIRouter()

    @router.websocket(LIVE_ROUTE)
    async def live(websocket: WebSocket, session: str) -> None:
        principal = await authorize(websocket)
        if principal is None or len(session) > MAX_SESSION_CHARS or service.session_sandbox(session) is None:
            log.warning("refused a live view connection (%s)", "not signed in" if principal is None else "no session")
            await websocket.close(code=1008)
            return
        await websocket.accept(subprotocol=websocket_subprotocol(websocket))
        try:
            video = websocket.query_params.get(VIDEO_QUERY[0]) == VIDEO_QUERY[1] and video_available()
            async with live_hub.watch(session, video=video) as viewer:
                log.info("live view of %s opened by %s (%s)", session, principal, "video" if video else "jpeg")
                sender = asyncio.create_task(_send(websocket, viewer))
                reader = asyncio.create_task(_sent_input(websocket))
                try:
                    await asyncio.wait({sender, reader}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sender.cancel()
                    reader.cancel()
                    await asyncio.gather(sender, reader, return_exceptions=True)
                sent_input = reader.done() and not reader.cancelled() and reader.result()
                # Closed before the stream stops: the last viewer's leaving waits for the
                # daemon's close handshake, and the viewer must not wait with it.
                await _close(websocket, 1008 if sent_input else 1000)
                log.info("live view of %s closed (%d frames sent, %d dropped)", session, viewer.delivered,
                         viewer.dropped)
        except InvalidRequestError:  # the session ended in between
            await _close(websocket, 1000)

    return router


async def _close(websocket: WebSocket, code: int) -> None:
    """Close the viewer's connection with ``code``, if it is still open."""
    with suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close(code=code)


async def _sent_input(websocket: WebSocket) -> bool:
    """Wait until the viewer leaves (``False``) or sends anything (``True``: a viewer only watches)."""
    try:
        message = await websocket.receive()
    except (WebSocketDisconnect, RuntimeError):
        return False
    return message.get("type") == "websocket.receive"


async def _send(websocket: WebSocket, viewer: Viewer) -> None:
    """Send the viewer what its mailbox holds, as it comes, until the session ends or the viewer leaves."""
    with suppress(WebSocketDisconnect, RuntimeError):
        while True:
            for item in await viewer.take():
                if isinstance(item, bytes):
                    await websocket.send_bytes(item)
                    continue
                await websocket.send_text(json.dumps(item, separators=(",", ":")))
                if item.get("type") == "meta" and item.get("stream") == "ended":
                    return
