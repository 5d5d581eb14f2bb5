"""A small Chrome DevTools Protocol client for the browser inside the sandbox.

Only the daemon uses it, over 127.0.0.1. It reads the active tab's URL, title
and text, and navigates. Everything it returns is page data: untrusted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import urllib.request
from typing import Any

import websockets

from deskpod.errors import BrowserError, NavigationError

__all__ = ["Browser", "PageState", "get_json"]

log = logging.getLogger(__name__)

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_CALL_TIMEOUT_S = 10.0


def get_json(url: str, timeout_s: float = 2.0) -> Any:
    """GET ``url`` without any proxy and decode its JSON body.

    Raises:
        OSError: the endpoint did not answer (``urllib.error.URLError`` is one).
        ValueError: the body is not JSON.
    """
    with _NO_PROXY.open(url, timeout=timeout_s) as resp:
        return json.loads(resp.read())


class PageState:
    """URL, title and (optionally) visible text of the active tab."""

    def __init__(self, url: str | None, title: str | None, text: str | None = None) -> None:
        self.url = url
        self.title = title
        self.text = text


class Browser:
    """Client for Chromium's DevTools endpoint on ``127.0.0.1:port``.

    One websocket to the active page target is kept open and replaced when the
    active tab changes or the socket drops.

    Args:
        port: the ``--remote-debugging-port`` Chromium listens on.
    """

    def __init__(self, port: int = 9222) -> None:
        self.port = port
        self._ws: Any = None
        self._target_id: str | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._load_waiters: list[asyncio.Future[None]] = []
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def _page_target(self) -> dict[str, Any]:
        try:
            targets = await asyncio.to_thread(get_json, f"http://127.0.0.1:{self.port}/json/list")
        except (OSError, ValueError) as exc:
            raise BrowserError(f"DevTools endpoint on port {self.port} did not answer: {exc}") from exc
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if not pages:
            raise BrowserError("the browser has no open page")
        return pages[0]

    async def _connect(self) -> None:
        target = await self._page_target()
        if self._ws is not None and self._target_id == target["id"] and self._reader and not self._reader.done():
            return
        await self.close()
        try:
            self._ws = await websockets.connect(target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
        except (OSError, websockets.WebSocketException) as exc:
            raise BrowserError(f"cannot open the page's DevTools socket: {exc}") from exc
        self._target_id = target["id"]
        self._reader = asyncio.create_task(self._read_loop(self._ws))
        await self._call("Page.enable")

    async def _read_loop(self, ws: Any) -> None:
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                elif msg.get("method") == "Page.loadEventFired":
                    for waiter in self._load_waiters:
                        if not waiter.done():
                            waiter.set_result(None)
                    self._load_waiters.clear()
        except (websockets.WebSocketException, OSError, ValueError) as exc:
            log.info("DevTools socket closed: %s", exc)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(BrowserError("DevTools socket closed"))
            self._pending.clear()

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            await self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
            reply = await asyncio.wait_for(fut, _CALL_TIMEOUT_S)
        except (websockets.WebSocketException, OSError) as exc:
            raise BrowserError(f"{method} failed: {exc}") from exc
        except asyncio.TimeoutError as exc:
            raise BrowserError(f"{method} got no answer within {_CALL_TIMEOUT_S:.0f} s") from exc
        finally:
            self._pending.pop(msg_id, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """Evaluate a JavaScript expression in the active tab and return its JSON value.

        Raises:
            BrowserError: the browser did not answer or the expression threw.
        """
        async with self._lock:
            await self._connect()
            result = await self._call(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True, "timeout": 5000}
            )
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails'].get('text', 'exception')}")
        return result.get("result", {}).get("value")

    async def state(self, text_chars: int | None = None) -> PageState:
        """Read the active tab's URL, title and, when ``text_chars`` is set, its visible text.

        Args:
            text_chars: at most this many characters of ``document.body.innerText``.

        Raises:
            BrowserError: the browser could not be asked.
        """
        text_expr = (
            f"(document.body ? document.body.innerText : '').slice(0, {int(text_chars)})"
            if text_chars is not None
            else "null"
        )
        value = await self.evaluate(f"[location.href, document.title, {text_expr}]")
        if not isinstance(value, list) or len(value) != 3:
            raise BrowserError("unexpected answer to the page-state query")
        url, title, text = value
        return PageState(str(url), str(title), None if text is None else str(text))

    async def navigate(self, url: str, timeout_s: float) -> None:
        """Load ``url`` in the active tab and wait for its load event.

        Raises:
            NavigationError: the browser reported an error (``detail["reason"]``),
                or the page did not load within ``timeout_s`` seconds.
        """
        async with self._lock:
            await self._connect()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._load_waiters.append(waiter)
            try:
                result = await self._call("Page.navigate", {"url": url})
            except BrowserError as exc:
                raise NavigationError(str(exc)) from exc
            if result.get("errorText"):
                raise NavigationError(
                    f"navigation to the URL failed: {result['errorText']}", detail={"reason": result["errorText"]}
                )
            try:
                await asyncio.wait_for(waiter, timeout_s)
            except asyncio.TimeoutError as exc:
                raise NavigationError(
                    f"page did not finish loading within {timeout_s:.1f} s", detail={"reason": "load_timeout"}
                ) from exc

    async def close(self) -> None:
        """Close the DevTools socket, if open."""
        if self._reader is not None:
            self._reader.cancel()
        if self._ws is not None:
            await self._ws.close()
        self._ws = None
        self._reader = None
        self._target_id = None
