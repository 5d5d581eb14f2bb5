"""Clients for a sandbox's control websocket, on the host side.

Two levels (as in docker-py):

- :class:`SandboxClient`: low level, one method per protocol message.
- :class:`Sandbox`: high level verbs (``click``, ``type_text``, ``keypress``,
  ``screenshot``, ``navigate``) on top of it.

Everything received is validated with :mod:`deskpod.protocol`; error replies
become exceptions through :func:`deskpod.errors.error_from_wire`, so callers
never see a ``websockets`` exception.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import time
from collections.abc import Sequence
from typing import Any

import websockets
from pydantic import BaseModel

from deskpod.errors import (
    InvalidRequestError,
    SandboxError,
    UnauthorizedError,
    error_from_wire,
)
from deskpod.protocol import (
    MAX_SERVER_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    ActRequest,
    ConfigureRequest,
    ErrorReply,
    Hello,
    NavigateRequest,
    Observation,
    ObserveOptions,
    Result,
    Size,
    WorkspaceRequest,
    parse_action,
    parse_server_message,
)

__all__ = ["SandboxClient", "Sandbox", "CONNECT_TIMEOUT_S"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0
"""Default time to wait for a sandbox to accept a connection (it may still be starting)."""


class SandboxClient:
    """One authenticated connection to a sandbox daemon.

    Use :meth:`connect`; the instance holds the daemon's :class:`Hello` as ``hello``.
    """

    def __init__(self, ws: Any, hello: Hello) -> None:
        self._ws = ws
        self.hello = hello
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> SandboxClient:
        """Open the control websocket, retrying while the sandbox is still starting.

        Args:
            url: e.g. ``ws://sandbox:8765/v1/ws``.
            token: the sandbox's control token (sent as a bearer header, never in the URL).
            timeout_s: how long to keep retrying refused or unresolvable connections.

        Raises:
            UnauthorizedError: the daemon refused the token.
            SandboxError: no connection within ``timeout_s`` (the message reports the
                number of attempts and the last failure), or the daemon speaks
                another protocol version.
        """
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            attempts += 1
            try:
                ws = await websockets.connect(
                    url,
                    additional_headers={"Authorization": f"Bearer {token}"},
                    max_size=MAX_SERVER_MESSAGE_BYTES,
                    open_timeout=10,
                    proxy=None,
                )
                break
            except websockets.InvalidStatus as exc:
                if exc.response.status_code in (401, 403):
                    raise UnauthorizedError("the sandbox refused the control token or origin") from exc
                last = f"HTTP {exc.response.status_code}"
            except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise SandboxError(
                    f"sandbox at {url} not reachable after {attempts} attempts in {timeout_s:.0f} s; last: {last}",
                    detail={"attempts": attempts, "last": last},
                )
            await asyncio.sleep(0.5)
        try:
            hello = parse_server_message(await asyncio.wait_for(ws.recv(), 10))
        except (websockets.WebSocketException, asyncio.TimeoutError) as exc:
            await ws.close()
            raise SandboxError(f"sandbox sent no hello: {exc}") from exc
        if not isinstance(hello, Hello) or hello.protocol_version != PROTOCOL_VERSION:
            await ws.close()
            raise SandboxError(f"sandbox speaks an unexpected protocol: {hello!r}"[:300])
        return cls(ws, hello)

    def next_id(self) -> str:
        """Return a fresh request id."""
        return f"r-{next(self._ids)}"

    async def send_raw(self, text: str | bytes) -> Hello | Result | ErrorReply:
        """Send any frame and return the parsed reply (for tests and debugging).

        Raises:
            SandboxError: the connection closed.
        """
        async with self._lock:
            try:
                await self._ws.send(text)
                return parse_server_message(await self._ws.recv())
            except websockets.WebSocketException as exc:
                raise SandboxError(f"connection to the sandbox closed: {exc}") from exc

    async def request(self, request: ActRequest | NavigateRequest | ConfigureRequest | WorkspaceRequest) -> Result:
        """Send one request and wait for its reply.

        Raises:
            DeskpodError: the daemon's typed error, mapped by code (for example
                :class:`~deskpod.errors.OutOfBoundsError`).
            InvalidRequestError: the reply's id does not match.
        """
        reply = await self.send_raw(request.model_dump_json())
        if isinstance(reply, ErrorReply):
            raise error_from_wire(reply.error.model_dump())
        if not isinstance(reply, Result) or reply.id != request.id:
            raise InvalidRequestError(f"reply does not answer request {request.id}")
        return reply

    async def act(
        self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
        timeout_s: float = 60.0
    ) -> Observation:
        """Run actions (protocol models or their JSON dicts) and return the observation after them."""
        parsed = [a if isinstance(a, BaseModel) else parse_action(a, i) for i, a in enumerate(actions)]
        req = ActRequest(
            type="act", id=self.next_id(), actions=parsed, observe=observe or ObserveOptions(),  # type: ignore[arg-type]
            timeout_s=timeout_s,
        )
        result = await self.request(req)
        assert result.observation is not None
        return result.observation

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0) -> Observation:
        """Load ``url`` in the sandbox's browser and return the observation after it."""
        req = NavigateRequest(
            type="navigate", id=self.next_id(), url=url, observe=observe or ObserveOptions(), timeout_s=timeout_s
        )
        result = await self.request(req)
        assert result.observation is not None
        return result.observation

    async def configure(self, model_size: Size | None) -> Size:
        """Declare the model space (``None``: the screen). Returns the model space in force."""
        result = await self.request(ConfigureRequest(type="configure", id=self.next_id(), model_size=model_size))
        assert result.model_size is not None
        return result.model_size

    async def close(self) -> None:
        """Close the connection."""
        await self._ws.close()


class Sandbox:
    """High-level handle on one sandbox: verbs in model-space pixels.

    Example::

        async with await Sandbox.open("ws://sandbox:8765/v1/ws", token) as sb:
            await sb.click(640, 400)
            await sb.type_text("penguin")
            png = await sb.screenshot()
    """

    def __init__(self, client: SandboxClient) -> None:
        self.client = client

    @classmethod
    async def open(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> Sandbox:
        """Connect to the sandbox at ``url`` (see :meth:`SandboxClient.connect`)."""
        return cls(await SandboxClient.connect(url, token, timeout_s=timeout_s))

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.client.close()

    async def click(self, x: int, y: int, button: str = "left") -> Observation:
        """Click at (x, y), model-space pixels."""
        return await self.client.act([{"type": "click", "x": x, "y": y, "button": button}])

    async def type_text(self, text: str) -> Observation:
        """Type ``text`` exactly."""
        return await self.client.act([{"type": "type", "text": text}])

    async def keypress(self, *keys: str) -> Observation:
        """Press ``keys`` as one chord, e.g. ``keypress("CTRL", "a")``."""
        return await self.client.act([{"type": "keypress", "keys": list(keys)}])

    async def navigate(self, url: str) -> Observation:
        """Load ``url`` in the browser."""
        return await self.client.navigate(url)

    async def screenshot(self, fmt: str = "png") -> bytes:
        """Return the current screen as PNG (or JPEG) bytes in the model space."""
        obs = await self.client.act([], ObserveOptions(format=fmt))  # type: ignore[arg-type]
        assert obs.screenshot is not None
        return base64.b64decode(obs.screenshot.data)

    async def close(self) -> None:
        """Close the connection."""
        await self.client.close()
