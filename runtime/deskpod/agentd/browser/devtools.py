"""One DevTools channel to Chromium: commands over its pipe, each reply matched to its
command, every event handed on.

Transport: Chromium runs with ``--remote-debugging-pipe`` and no DevTools port.
It reads commands from its fd 3 and writes replies and events to its fd 4, each
message one JSON object followed by a NUL byte. Both are one end of a Unix
socket pair whose other end only the daemon holds (made by
:mod:`deskpod.agentd.session`): unlike a pipe, a socket cannot be reopened through
``/proc/<pid>/fd`` by another process of the same uid. :class:`DevTools` speaks to the
browser target over it and to pages through flat sessions
(``Target.attachToTarget`` with ``flatten``; their messages carry ``sessionId``).

A command a page must run is not sent while a JavaScript dialog blocks that page, and
its wait ends when one opens (:mod:`deskpod.agentd.browser.dialogs`); one the page leaves
unanswered while no dialog is open has the page probed, and a page that does not answer
the probe is marked unresponsive (:mod:`deskpod.agentd.browser.unresponsive`). What the targets
are and what their events mean is :mod:`deskpod.agentd.browser.targets`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import socket
import time
from collections.abc import Callable
from typing import Any

from deskpod.agentd.browser.cdp_pipe import OversizedMessage, read_message
from deskpod.agentd.browser.dialogs import DialogTracker
from deskpod.agentd.browser.unresponsive import (
    PROBE_TIMEOUT_S,
    RETRY_PROBE_TIMEOUT_S,
    WATCH_AFTER_S,
    UnresponsivePages,
)
from deskpod.errors import BrowserError, DialogBlockedError, PageUnresponsiveError
from deskpod.protocol import scrub_json

__all__ = ["BESIDE_DIALOG_TIMEOUT_S", "CALL_TIMEOUT_S", "DevTools", "EventHandler", "MAX_CDP_MESSAGE_BYTES"]

log = logging.getLogger(__name__)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: only a message holding one needs scrubbing."""

MAX_CDP_MESSAGE_BYTES = 16 * 1_048_576
"""Largest DevTools message the daemon reads (16 MiB). A longer one is skipped without
being held (:mod:`deskpod.agentd.browser.cdp_pipe`): the command it answers fails with a
:class:`~deskpod.errors.BrowserError` whose ``detail["reason"]`` is ``"too_large"``,
and the channel goes on."""

CALL_TIMEOUT_S = 10.0
"""How long a command waits for its reply unless it says otherwise, seconds."""

BESIDE_DIALOG_TIMEOUT_S = 1.0
"""How long a page is waited for while another tab has a dialog open: pages opened by one
another share a renderer, whose dialog blocks them all (a popup's alert blocks its opener)."""

EventHandler = Callable[[str, dict[str, Any], str | None], None]
"""``on_event(method, params, session)``: one DevTools event (``session``: the flat
session it came from, ``None`` for the browser target)."""


class DevTools:
    """A DevTools channel over one Chromium's pipe (see the module docstring).

    Args:
        dialogs: the dialogs open in the browser's tabs (a command a blocked page must
            run is refused, and its wait ends when one opens).
        on_event: called with every event, in the order they came.
        on_closed: called once the pipe has closed or failed (every pending command
            has failed then).
    """

    def __init__(self, dialogs: DialogTracker, on_event: EventHandler, on_closed: Callable[[], None]) -> None:
        self.dialogs = dialogs
        self.unresponsive = UnresponsivePages()
        """The tabs whose page does not answer (:mod:`deskpod.agentd.browser.unresponsive`)."""
        self._on_event = on_event
        self._on_closed = on_closed
        self._send: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}

    async def open(self, pipe: socket.socket) -> None:
        """Speak over ``pipe``, the daemon's end of a newly started Chromium's socket pair,
        from now on; the channel owns it and closes it in :meth:`close`.

        Raises:
            BrowserError: the socket cannot be used.
        """
        try:
            stream, self._send = await asyncio.open_unix_connection(sock=pipe, limit=MAX_CDP_MESSAGE_BYTES)
        except (OSError, ValueError) as exc:
            pipe.close()
            raise BrowserError(f"cannot use the DevTools pipe: {exc}") from exc
        self._reader = asyncio.create_task(self._read_loop(stream))

    @property
    def attached(self) -> bool:
        """True while a pipe is open (it may have been lost since: :attr:`lost`)."""
        return self._send is not None

    @property
    def lost(self) -> bool:
        """True when a DevTools pipe was attached and its reader has ended (the browser
        closed it or it failed): nothing can be asked until the daemon attaches again."""
        return self._reader is not None and self._reader.done()

    def post(self, method: str, params: dict[str, Any]) -> None:
        """Send a command to the browser target without waiting for its answer."""
        send = self._send
        if send is not None and not send.is_closing():
            send.write(json.dumps({"id": next(self._ids), "method": method, "params": params}).encode() + b"\0")

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = CALL_TIMEOUT_S,
        page: str | None = None,
        beside_dialog: bool = True,
    ) -> dict[str, Any]:
        """Send one command (to the browser target, or to a page's ``session``) and
        return its result.

        Args:
            page: the tab whose page must run the command: it is not sent while a
                JavaScript dialog is open there, and the wait ends when one opens; with
                ``session``, a page that leaves it unanswered is probed (see the module docstring).
            beside_dialog: while another tab has a dialog open, wait for ``page`` at most
                :data:`BESIDE_DIALOG_TIMEOUT_S` (it may share that tab's renderer).

        Raises:
            DialogBlockedError: a dialog is open (or opened) in ``page``, or ``page``
                did not answer in time while another tab has one open.
            PageUnresponsiveError: ``page`` does not answer (its renderer is stuck).
            BrowserError: no pipe is attached or it closed, no answer within
                ``timeout_s`` seconds, or the browser answered an error.
        """
        send = self._send
        if send is None or send.is_closing() or self._reader is None or self._reader.done():
            raise BrowserError(f"{method} failed: no DevTools pipe (the browser is not running)")
        if page is not None and self.dialogs.get(page) is not None:
            raise DialogBlockedError(page)
        watch = page if session is not None and page is not None else None
        if watch is not None and session is not None and self.unresponsive.since(watch) is not None:
            await self._probe_again(watch, session)
        if page is not None and beside_dialog and self.dialogs.any_open():
            timeout_s = min(timeout_s, BESIDE_DIALOG_TIMEOUT_S)
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            send.write(json.dumps(message).encode() + b"\0")
            if page is None:
                reply = await asyncio.wait_for(fut, timeout_s)
            else:
                reply = await self._page_reply(fut, page, timeout_s, beside_dialog, session if watch else None)
        except TimeoutError as exc:
            raise BrowserError(f"{method} got no answer within {timeout_s:.0f} s") from exc
        finally:
            self._pending.pop(msg_id, None)
            fut.cancel()
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    async def _page_reply(self, fut: asyncio.Future[Any], page: str, timeout_s: float, beside_dialog: bool,
                          session: str | None = None) -> Any:
        """Wait for the reply of a command ``page`` must run: give up when a dialog opens
        there, and (``beside_dialog``) :data:`BESIDE_DIALOG_TIMEOUT_S` after one opens
        in another tab; with ``session``, probe the page once after :data:`WATCH_AFTER_S`
        without a reply (no dialog open).

        Raises:
            DialogBlockedError: a dialog blocks ``page``, or another tab's dialog is open
                and ``page`` did not answer.
            PageUnresponsiveError: the page did not answer the probe.
            TimeoutError: no reply within ``timeout_s`` seconds.
        """
        loop = asyncio.get_running_loop()
        sent = time.monotonic()
        deadline = loop.time() + timeout_s
        watch_at = loop.time() + WATCH_AFTER_S if session is not None else None
        while True:
            opened = self.dialogs.wait_opened(None)
            until = deadline if watch_at is None else min(deadline, watch_at)
            try:
                done, _ = await asyncio.wait({fut, opened}, timeout=max(0.0, until - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                opened.cancel()
            if fut in done:
                if session is not None:
                    self.unresponsive.answered(page)
                return fut.result()
            if not done and watch_at is not None and session is not None and loop.time() < deadline:
                watch_at = None
                if self.dialogs.any_open() or await self.answers(session, PROBE_TIMEOUT_S):
                    continue
                if fut.done():
                    return fut.result()
                if not self.dialogs.any_open():
                    self.unresponsive.mark(page, sent)
                    raise PageUnresponsiveError(page, time.monotonic() - sent)
                continue
            if self.dialogs.get(page) is not None:
                raise DialogBlockedError(page)
            others = self.dialogs.ordered(None)
            if not done:
                if beside_dialog and others:
                    raise DialogBlockedError(others[0].target_id)
                raise TimeoutError
            if beside_dialog:
                deadline = min(deadline, loop.time() + BESIDE_DIALOG_TIMEOUT_S)

    async def answers(self, session: str, timeout_s: float) -> bool:
        """Whether the page of ``session`` answers a probe (the value ``0``, evaluated where
        no page script sees it) within ``timeout_s``; an error answer is an answer."""
        try:
            await self.call("Runtime.evaluate", {"expression": "0", "returnByValue": True}, session, timeout_s)
        except BrowserError as exc:
            return not isinstance(exc.__cause__, TimeoutError)
        return True

    async def _probe_again(self, page: str, session: str) -> None:
        """Probe a page marked unresponsive before a command it must run: the mark is
        cleared when it answers.

        Raises:
            DialogBlockedError: a dialog opened there meanwhile.
            PageUnresponsiveError: it still does not answer.
        """
        since = self.unresponsive.since(page)
        if since is None or self.dialogs.any_open():
            return  # a dialog elsewhere may block the renderer: the dialog rules apply
        if await self.answers(session, RETRY_PROBE_TIMEOUT_S):
            self.unresponsive.answered(page)
            return
        if self.dialogs.get(page) is not None:
            raise DialogBlockedError(page)
        raise PageUnresponsiveError(page, time.monotonic() - since)

    async def _read_loop(self, stream: asyncio.StreamReader) -> None:
        try:
            while True:
                # A page's strings may hold lone UTF-16 surrogates (JavaScript allows them);
                # they become U+FFFD here, so every reply built from them can be sent.
                raw = await read_message(stream)
                if isinstance(raw, OversizedMessage):
                    self._oversized(raw)
                    continue
                msg = json.loads(raw)
                if _SURROGATE_ESCAPE.search(raw):
                    msg = scrub_json(msg)
                if "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                else:
                    self._on_event(msg.get("method", ""), msg.get("params", {}), msg.get("sessionId"))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError) as exc:
            log.info("DevTools pipe closed: %s", exc)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(BrowserError("DevTools pipe closed"))
            self._pending.clear()
            self._on_closed()

    def _oversized(self, message: OversizedMessage) -> None:
        """Fail the command an oversized reply answers (an oversized event is dropped)."""
        log.warning("skipped a DevTools message of %d bytes (over %d)", message.size, MAX_CDP_MESSAGE_BYTES)
        fut = self._pending.pop(message.id, None) if message.id is not None else None
        if fut is not None and not fut.done():
            fut.set_exception(BrowserError(
                f"the browser's answer of {message.size} bytes is over the {MAX_CDP_MESSAGE_BYTES}-byte limit",
                detail={"reason": "too_large", "bytes": message.size},
            ))

    def close(self) -> None:
        """Close the pipe, if open (a running Chromium quits when it sees the pipe close)."""
        if self._reader is not None:
            self._reader.cancel()
        if self._send is not None:
            self._send.close()
        self._reader = self._send = None
