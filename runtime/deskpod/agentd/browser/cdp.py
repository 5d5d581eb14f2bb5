"""A small Chrome DevTools Protocol client for the browser inside the sandbox.

Transport: Chromium runs with ``--remote-debugging-pipe`` and no DevTools port.
It reads commands from its fd 3 and writes replies and events to its fd 4, each
message one JSON object followed by a NUL byte. Both are one end of a Unix
socket pair whose other end only the daemon holds (made by
:mod:`deskpod.agentd.session`): unlike a pipe, a socket cannot be reopened through
``/proc/<pid>/fd`` by another process of the same uid. The client speaks to the
browser target over it and to pages through flat sessions
(``Target.attachToTarget`` with ``flatten``; their messages carry ``sessionId``).

It reads the tabs, the active tab's URL, title, text, focused element,
accessibility tree and the element at a point, tracks whether a navigation is in
flight and the JavaScript dialogs open in every tab (:mod:`deskpod.agentd.browser.dialogs`),
answers them, notices renderer crashes, and navigates. Everything it returns is
page data: untrusted. Text, focus, the accessibility tree and the element at a point
are read through every frame, the page's out-of-process frames included
(auto-attached as flat sessions): :mod:`deskpod.agentd.browser.frames`. It passes the
browser's download events to :mod:`deskpod.agentd.browser.downloads` and intercepts file
choosers (:mod:`deskpod.agentd.browser.file_chooser`). While a run's egress
allowlist is in force it answers every paused request
(:mod:`deskpod.agentd.browser.request_filter`).

URL, title and tabs come from the browser target (``Target.getTargets``), which
answers even while a JavaScript dialog blocks the page; page scripts are not
evaluated while a dialog is open. The active tab is the visible one, read in an
isolated world the page's scripts cannot reach.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from deskpod.agentd.browser.axtree import AX_ESTIMATE_SCRIPT, DOM_SUMMARY_SCRIPT, AXSummary, bounded, dom_summary
from deskpod.agentd.browser.cdp_pipe import OversizedMessage, read_message
from deskpod.agentd.browser.dialogs import DialogTracker
from deskpod.agentd.browser.downloads import Downloads
from deskpod.agentd.browser.fasttype import EDITABLE_FOCUS_SCRIPT
from deskpod.agentd.browser.frames import ChildTarget, FrameReader
from deskpod.agentd.browser.request_filter import FETCH_PATTERNS, RequestFilter
from deskpod.agentd.settle import NavigationActivity, NetworkActivity
from deskpod.agentd.browser.text_sources import canvas_hook_script
from deskpod.errors import BrowserError, DialogBlockedError, ExecutionError, NavigationError, NoDialogError
from deskpod.protocol import MAX_AX_BYTES, MAX_AX_NAME_CHARS, DialogAccept, DialogDismiss, scrub_json

__all__ = ["Browser", "MAX_CDP_MESSAGE_BYTES", "PageState"]

log = logging.getLogger(__name__)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: only a message holding one needs scrubbing."""

MAX_CDP_MESSAGE_BYTES = 16 * 1_048_576
"""Largest DevTools message the daemon reads (16 MiB). A longer one is skipped without
being held (:mod:`deskpod.agentd.browser.cdp_pipe`): the command it answers fails with a
:class:`~deskpod.errors.BrowserError` whose ``detail["reason"]`` is ``"too_large"``,
and the channel goes on."""

_AX_SCAN_NODES = 100_000
"""Most accessibility nodes read through the frames before the summary's own limits are
applied (:func:`deskpod.agentd.browser.axtree.bounded` counts them all in ``total``)."""

_CALL_TIMEOUT_S = 10.0

_T = TypeVar("_T")
_VISIBILITY_TIMEOUT_S = 1.0
_ANSWER_TIMEOUT_S = 5.0
_BESIDE_DIALOG_TIMEOUT_S = 1.0
"""How long a page is waited for while another tab has a dialog open: pages opened by one
another share a renderer, whose dialog blocks them all (a popup's alert blocks its opener)."""


def _browser_ui(url: str) -> bool:
    """True for Chromium's own UI surfaces that DevTools may list as pages but no user
    sees as a tab (e.g. ``chrome://tab-search.top-chrome/``)."""
    return ".top-chrome" in url or url.startswith(("chrome-untrusted://", "devtools://"))


def _dialog_open(target_id: str) -> NavigationError:
    """The error of a navigation refused because a dialog is open in its tab."""
    return NavigationError(
        "a JavaScript dialog blocks the tab: answer it first (dialog_accept or dialog_dismiss; "
        "detail tab_id names its tab)",
        detail={"reason": "dialog_open", "tab_id": target_id[:128]},
    )


class PageState:
    """The active tab's URL, title and, when asked, visible text and focused element;
    ``tabs``: every page target as ``{"id", "url", "title", "active"}``, the active one first;
    ``unread_frames``: URLs of frames whose text could not be read."""

    def __init__(
        self,
        url: str | None,
        title: str | None,
        text: str | None = None,
        tabs: list[dict[str, Any]] | None = None,
        focused: dict[str, Any] | None = None,
        unread_frames: list[str] | None = None,
    ) -> None:
        self.url = url
        self.title = title
        self.text = text
        self.tabs = tabs or []
        self.focused = focused
        self.unread_frames = unread_frames or []


class Browser:
    """Client for Chromium's DevTools protocol over its pipe (see the module docstring).

    :meth:`attach` binds it to a newly started Chromium's socket; every restart of
    Chromium brings a new socket pair, so the daemon attaches again. One flat session to
    the active page, with the Page and Inspector domains enabled, is kept and
    replaced when the active tab changes or the page goes away.

    Args:
        device_scale_factor: the one Chromium was started with (screen pixels per
            device-independent pixel), for mapping CSS pixels to screen pixels.
    """

    def __init__(self, device_scale_factor: float = 1.0) -> None:
        self.device_scale_factor = device_scale_factor
        """Screen pixels per device-independent pixel: Chromium's ``--force-device-scale-factor``."""
        self._send: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._load_waiters: list[asyncio.Future[None]] = []
        self._lock = asyncio.Lock()
        self._session: str | None = None
        self._target_id: str | None = None
        self._probes: dict[str, str] = {}
        self._main_frame: str | None = None
        self._children: dict[str, ChildTarget] = {}
        self._attaching: set[asyncio.Task[None]] = set()
        self.loading = False
        self.dialogs = DialogTracker()
        """The JavaScript dialogs open in the browser's tabs."""
        self.active_id: str | None = None
        """The tab found active by the last look at the tabs."""
        self._session_targets: dict[str, str] = {}
        self._preparing: set[asyncio.Task[None]] = set()
        self.events: list[str] = []
        self.downloads = Downloads()
        self.file_chooser: dict[str, Any] | None = None
        """The active tab's open file chooser (:mod:`deskpod.agentd.browser.file_chooser`)."""
        self.requests = RequestFilter()
        """The run's egress allowlist and the requests it refused (:meth:`set_allowed_domains`)."""
        self._world: tuple[str, int] | None = None  # (page session, isolated world's context id)
        self.network = NetworkActivity()
        """The active tab's requests in flight, for settling (:mod:`deskpod.agentd.settle`)."""
        self.navigation = NavigationActivity()
        """The active tab's navigations asked for and begun, for settling."""

    async def attach(self, pipe: socket.socket) -> None:
        """Speak DevTools over ``pipe``, the daemon's end of a newly started Chromium's
        socket pair, from now on; the client owns it and closes it in :meth:`close`.
        A previous one is closed first.

        Raises:
            BrowserError: the socket cannot be used, or target discovery failed.
        """
        await self.close()
        try:
            stream, self._send = await asyncio.open_unix_connection(sock=pipe, limit=MAX_CDP_MESSAGE_BYTES)
        except (OSError, ValueError) as exc:
            pipe.close()
            raise BrowserError(f"cannot use the DevTools pipe: {exc}") from exc
        self._reader = asyncio.create_task(self._read_loop(stream))
        await self._call("Target.setDiscoverTargets", {"discover": True})
        # Every page, as it appears and before it runs, gets a session with Page enabled, so
        # a dialog in any tab or popup is reported (see :mod:`deskpod.agentd.browser.dialogs`).
        # Unpaused, a popup that alerts at once was seen to open its dialog before Page.enable.
        await self._call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True})
        self.downloads.prepare()
        await self._call("Browser.setDownloadBehavior", self.downloads.behavior())
        if self.requests.domains is not None:
            await self._call("Fetch.enable", {"patterns": FETCH_PATTERNS})
            self.downloads.marking = True

    async def permit_downloads(self, permitted: bool) -> None:
        """Let downloads that begin from now on start (``True``: the request carries the
        controller's permission) or have the browser refuse them (``False``, the default).

        Raises:
            BrowserError: the browser could not be told; its setting, and
                ``downloads.permitted``, stay as they were (a refusal that failed is
                asked again at the next call).
        """
        if permitted == self.downloads.permitted:
            return
        self.downloads.permitted = permitted
        try:
            await self._call("Browser.setDownloadBehavior", self.downloads.behavior())
        except BrowserError:
            self.downloads.permitted = not permitted
            raise

    async def set_allowed_domains(self, domains: list[str] | None) -> None:
        """Fail every request to a host outside ``domains`` before it is sent, in every tab,
        frame and worker, from now on and after a browser restart (``None``: stop).

        Raises:
            BrowserError: the browser did not accept it (the list is in force anyway from
                the next :meth:`attach`).
        """
        self.requests.set(domains)
        if self._send is not None:
            if domains is None:
                self.downloads.marking = False
                await self._call("Fetch.disable")
            else:
                await self._call("Fetch.enable", {"patterns": FETCH_PATTERNS})
                self.downloads.marking = True

    def _post(self, method: str, params: dict[str, Any]) -> None:
        """Send a command to the browser target without waiting for its answer."""
        send = self._send
        if send is not None and not send.is_closing():
            send.write(json.dumps({"id": next(self._ids), "method": method, "params": params}).encode() + b"\0")

    async def _pages(self) -> list[dict[str, Any]]:
        """Page targets in creation order, Chromium's own UI surfaces left out."""
        targets = (await self._call("Target.getTargets")).get("targetInfos", [])
        return [t for t in targets if t.get("type") == "page" and not _browser_ui(str(t.get("url", "")))]

    async def _visible(self, target_id: str) -> bool | None:
        """``document.visibilityState == "visible"`` for a page, read in an isolated world
        (page scripts cannot redefine it there); ``None`` when the page did not answer
        in time (e.g. a dialog blocks it)."""
        try:
            if self.dialogs.get(target_id) is not None:
                return None
            if target_id not in self._probes:
                attached = await self._call("Target.attachToTarget", {"targetId": target_id, "flatten": True})
                self._probes[target_id] = attached["sessionId"]
                self._session_targets[attached["sessionId"]] = target_id
            session = self._probes[target_id]
            # A page target's id is its main frame's id.
            world = await self._call(
                "Page.createIsolatedWorld", {"frameId": target_id, "worldName": "deskpod"}, session,
                _VISIBILITY_TIMEOUT_S, page=target_id,
            )
            value = await self._call(
                "Runtime.evaluate",
                {"expression": "document.visibilityState", "contextId": world["executionContextId"],
                 "returnByValue": True},
                session, _VISIBILITY_TIMEOUT_S, page=target_id,
            )
        except (BrowserError, KeyError):
            return None
        return value.get("result", {}).get("value") == "visible"

    async def _ordered_pages(self) -> list[dict[str, Any]]:
        """Page targets, the active (visible) one first, then the others newest first.

        Raises:
            BrowserError: the browser could not be asked or has no open page.
        """
        pages = (await self._pages())[::-1]
        if not pages:
            raise BrowserError("the browser has no open page")
        if len(pages) > 1:
            current = next((p for p in pages if p["targetId"] == self._target_id), None)
            if current is not None and self.dialogs.any_open():
                active = current  # a dialog blocks its renderer's pages: the probe cannot answer
            else:
                visible = [p for p in pages if await self._visible(p["targetId"]) is not False]
                active = current if current in visible else (visible or pages)[0]
            pages.remove(active)
            pages.insert(0, active)
        self.active_id = str(pages[0].get("targetId", ""))
        return pages

    def take_events(self) -> list[str]:
        """Return and forget the events noticed since the last call (e.g. ``"renderer_crashed"``)."""
        events, self.events = self.events, []
        return events

    async def _connect(self) -> None:
        target = (await self._ordered_pages())[0]
        if self._session is not None and self._target_id == target["targetId"]:
            return
        self._session = self._target_id = None
        self._children = {}
        if self.dialogs.get(target["targetId"]) is not None:
            raise DialogBlockedError(target["targetId"])
        attached = await self._call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        session, target_id = attached["sessionId"], target["targetId"]
        self._session_targets[session] = target_id
        self._session, self._target_id = session, target_id
        self.loading = False
        self.file_chooser = None
        self.network.clear()
        self.navigation.forget()
        try:
            await self._call("Page.enable", session=session, page=target_id)
            await self._call("Network.enable", {"maxTotalBufferSize": 0, "maxResourceBufferSize": 0}, session,
                             page=target_id)
            await self._call("Page.addScriptToEvaluateOnNewDocument", {"source": canvas_hook_script()}, session,
                             page=target_id)
            await self._call("Inspector.enable", session=session, page=target_id)
            await self._auto_attach(session)
            await self._call("Page.setInterceptFileChooserDialog", {"enabled": True}, session, page=target_id)
            tree = await self._call("Page.getFrameTree", session=session, page=target_id)
        except BrowserError:
            self._session = self._target_id = None  # attach again next time
            raise
        self._main_frame = tree.get("frameTree", {}).get("frame", {}).get("id")

    async def _auto_attach(self, session: str) -> None:
        """Attach the out-of-process frames under ``session`` (now and as they appear) as
        flat sessions, reported by ``Target.attachedToTarget``."""
        await self._call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False,
                                                  "flatten": True, "filter": [{"type": "iframe"}]}, session)

    async def _auto_attach_quietly(self, session: str) -> None:
        try:
            await self._auto_attach(session)
        except BrowserError as exc:
            log.info("frames under an out-of-process frame stay unread: %s", exc)

    def _frame_attached(self, params: dict[str, Any], parent: str | None) -> None:
        """Record an out-of-process frame auto-attached under the page or one of its frames."""
        info = params.get("targetInfo", {})
        child = params.get("sessionId")
        known = parent is not None and (parent == self._session or parent in self._children)
        if not known or info.get("type") != "iframe" or not isinstance(child, str):
            return
        self._children[child] = ChildTarget(child, str(info.get("targetId", "")), str(parent))
        log.info("out-of-process frame attached (target %s)", str(info.get("targetId", ""))[:64])
        task = asyncio.get_running_loop().create_task(self._auto_attach_quietly(child))
        self._attaching.add(task)
        task.add_done_callback(self._attaching.discard)

    def _forget_frame(self, session: str) -> None:
        """Forget a detached out-of-process frame and the frames attached under it."""
        gone = {session}
        while True:
            more = {s for s, c in self._children.items() if c.parent in gone and s not in gone}
            if not more:
                break
            gone |= more
        self._children = {s: c for s, c in self._children.items() if s not in gone}

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
            self._session = self._target_id = None
            self._children = {}
            self.dialogs.clear()

    def _oversized(self, message: OversizedMessage) -> None:
        """Fail the command an oversized reply answers (an oversized event is dropped)."""
        log.warning("skipped a DevTools message of %d bytes (over %d)", message.size, MAX_CDP_MESSAGE_BYTES)
        fut = self._pending.pop(message.id, None) if message.id is not None else None
        if fut is not None and not fut.done():
            fut.set_exception(BrowserError(
                f"the browser's answer of {message.size} bytes is over the {MAX_CDP_MESSAGE_BYTES}-byte limit",
                detail={"reason": "too_large", "bytes": message.size},
            ))

    @property
    def channel_lost(self) -> bool:
        """True when a DevTools pipe was attached and its reader has ended (the browser
        closed it or it failed): nothing can be asked until the daemon attaches again."""
        return self._reader is not None and self._reader.done()

    def _on_event(self, method: str, params: dict[str, Any], session: str | None) -> None:
        if method == "Target.attachedToTarget":
            if session is None:
                self._prepare_target(params)  # a tab or worker the browser auto-attached
            else:
                self._frame_attached(params, session)  # an out-of-process frame of a page
            return
        if method.startswith("Browser.download") and session is None:
            self.downloads.on_event(method, params)
            for guid in self.downloads.take_cancels():
                self._post("Browser.cancelDownload", {"guid": guid})
            return
        if method == "Fetch.requestPaused" and session is None:
            self.downloads.on_request(params)
            self._post(*self.requests.answer(params))
            return
        if method == "Target.detachedFromTarget":
            gone = params.get("sessionId")
            self._probes = {t: s for t, s in self._probes.items() if s != gone}
            self._forget_frame(str(gone))
            self._session_targets.pop(str(gone), None)
            if gone == self._session:
                self._session = self._target_id = None
            return
        if method == "Target.targetDestroyed":
            self.dialogs.closed(str(params.get("targetId", "")))
            return
        target = self._session_targets.get(session or "")
        if method == "Page.javascriptDialogOpening" and session is not None and target is not None:
            opened = self.dialogs.opened(target, session, params)
            log.info("a %s dialog opened in tab %s", opened.type[:32], target[:64])
        elif method == "Page.javascriptDialogClosed" and target is not None:
            self.dialogs.closed(target)
        if session is None or session != self._session:
            return
        main = params.get("frameId") == self._main_frame
        if method.startswith("Network."):
            self.network.on_event(method, params)
        elif method == "Page.loadEventFired":
            for waiter in self._load_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._load_waiters.clear()
        elif method in ("Page.frameRequestedNavigation", "Page.navigatedWithinDocument") and main:
            self.navigation.on_event(method, params)
        elif method == "Page.frameStartedLoading" and main:
            self.navigation.on_event(method, params)
            self.loading = True
        elif method == "Page.frameStoppedLoading" and main:
            self.loading = False
        elif method == "Page.fileChooserOpened":
            self.file_chooser = {"multiple": params.get("mode") == "selectMultiple", "tab": self._target_id or "",
                                 "backend_node_id": params.get("backendNodeId")}
        elif method == "Page.frameNavigated" and params.get("frame", {}).get("id") == self._main_frame:
            self.file_chooser = None
        elif method == "Inspector.targetCrashed":
            self.events.append("renderer_crashed")

    async def _call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = _CALL_TIMEOUT_S,
        page: str | None = None,
        beside_dialog: bool = True,
    ) -> dict[str, Any]:
        """Send one command (to the browser target, or to a page's ``session``) and
        return its result.

        Args:
            page: the tab whose page must run the command: it is not sent while a
                JavaScript dialog is open there, and the wait ends when one opens.
            beside_dialog: while another tab has a dialog open, wait for ``page`` at most
                :data:`_BESIDE_DIALOG_TIMEOUT_S` (it may share that tab's renderer).

        Raises:
            DialogBlockedError: a dialog is open (or opened) in ``page``, or ``page``
                did not answer in time while another tab has one open.
            BrowserError: no pipe is attached or it closed, no answer within
                ``timeout_s`` seconds, or the browser answered an error.
        """
        send = self._send
        if send is None or send.is_closing() or self._reader is None or self._reader.done():
            raise BrowserError(f"{method} failed: no DevTools pipe (the browser is not running)")
        if page is not None and self.dialogs.get(page) is not None:
            raise DialogBlockedError(page)
        if page is not None and beside_dialog and self.dialogs.any_open():
            timeout_s = min(timeout_s, _BESIDE_DIALOG_TIMEOUT_S)
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
                reply = await self._page_reply(fut, page, timeout_s, beside_dialog)
        except TimeoutError as exc:
            raise BrowserError(f"{method} got no answer within {timeout_s:.0f} s") from exc
        finally:
            self._pending.pop(msg_id, None)
            fut.cancel()
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    async def _page_reply(self, fut: asyncio.Future[Any], page: str, timeout_s: float, beside_dialog: bool) -> Any:
        """Wait for the reply of a command ``page`` must run: give up when a dialog opens
        there, and (``beside_dialog``) :data:`_BESIDE_DIALOG_TIMEOUT_S` after one opens
        in another tab.

        Raises:
            DialogBlockedError: a dialog blocks ``page``, or another tab's dialog is open
                and ``page`` did not answer.
            TimeoutError: no reply within ``timeout_s`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            opened = self.dialogs.wait_opened(None)
            try:
                done, _ = await asyncio.wait({fut, opened}, timeout=max(0.0, deadline - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                opened.cancel()
            if fut in done:
                return fut.result()
            if self.dialogs.get(page) is not None:
                raise DialogBlockedError(page)
            others = self.dialogs.ordered(None)
            if not done:
                if beside_dialog and others:
                    raise DialogBlockedError(others[0].target_id)
                raise TimeoutError
            if beside_dialog:
                deadline = min(deadline, loop.time() + _BESIDE_DIALOG_TIMEOUT_S)

    async def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """Evaluate a JavaScript expression in the active tab and return its JSON value
        (with ``await_promise``, the value the promise it returns resolves to).

        Raises:
            BrowserError: the browser did not answer or the expression threw.
        """
        async with self._lock:
            await self._connect()
            result = await self._call(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True, "timeout": 5000,
                                     "awaitPromise": await_promise}, self._session, page=self._target_id,
            )
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails'].get('text', 'exception')}")
        return result.get("result", {}).get("value")

    async def evaluate_isolated(self, expression: str, await_promise: bool = False) -> Any:
        """:meth:`evaluate` in an isolated world of the active tab's main frame, where the
        page's scripts cannot redefine what the expression calls (``requestAnimationFrame``,
        ``document.getAnimations``); the world is made once per page session and again
        when a navigation destroyed it.

        Raises:
            BrowserError: the browser did not answer or the expression threw.
        """
        async with self._lock:
            await self._connect()
            return await self._isolated(expression, await_promise)

    async def _isolated(self, expression: str, await_promise: bool = False) -> Any:
        """:meth:`evaluate_isolated` with the lock held and the page connected.

        Raises:
            BrowserError: the browser did not answer or the expression threw.
        """
        for attempt in (0, 1):
            if self._world is None or self._world[0] != self._session:
                made = await self._call("Page.createIsolatedWorld",
                                        {"frameId": self._main_frame or self._target_id, "worldName": "deskpod"},
                                        self._session, page=self._target_id)
                self._world = (str(self._session), int(made["executionContextId"]))
            try:
                result = await self._call(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True, "timeout": 5000,
                                         "awaitPromise": await_promise, "contextId": self._world[1]},
                    self._session, page=self._target_id,
                )
            except BrowserError as exc:
                if attempt == 0 and "context" in exc.message.lower():
                    self._world = None  # the page navigated: its worlds went with it
                    continue
                raise
            break
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails'].get('text', 'exception')}")
        return result.get("result", {}).get("value")

    async def insert_text(self, text: str) -> bool:
        """Insert ``text`` at the active tab's focus with ``Input.insertText`` (as an IME
        commit), if the window has the focus and the focused element takes text
        (:mod:`deskpod.agentd.browser.fasttype`), as read in the isolated world: a page that
        redefines ``document.hasFocus`` or ``activeElement`` cannot draw in text typed
        where its page is not focused (the browser's address bar).

        Returns:
            True when inserted; False (nothing inserted) otherwise.

        Raises:
            BrowserError: the browser did not answer.
        """
        async with self._lock:
            await self._connect()
            if await self._isolated(EDITABLE_FOCUS_SCRIPT) is not True:
                log.info("text typed key by key: the page's focus does not take inserted text")
                return False
            await self._call("Input.insertText", {"text": text}, self._session, page=self._target_id)
        return True

    async def state(self, text_chars: int | None = None, focus: bool = False) -> PageState:
        """Read the tabs, the active tab's URL and title and, when asked, its visible
        text and focused element.

        Args:
            text_chars: at most this many characters of ``document.body.innerText``
                (``None``: no text).
            focus: describe the focused element (the deepest, through frames and shadow roots).

        Raises:
            BrowserError: the browser could not be asked.
        """
        pages = await self._ordered_pages()
        tabs: list[dict[str, Any]] = [
            {"id": str(p.get("targetId", "")), "url": str(p.get("url", "")), "title": str(p.get("title", "")),
             "active": i == 0}
            for i, p in enumerate(pages)
        ]
        text = focused = None
        if (text_chars is not None or focus) and self.dialogs.get(tabs[0]["id"]) is None:
            text, focused, unread = await self.content(text_chars, focus)
        else:
            unread = []
        return PageState(tabs[0]["url"], tabs[0]["title"], text, tabs, focused, unread)

    async def content(self, text_chars: int | None, focus: bool
                      ) -> tuple[str | None, dict[str, Any] | None, list[str]]:
        """The active tab's visible text, its frames' text after it (at most ``text_chars``
        characters; ``None``: not asked), its focused element (the deepest, through frames
        and open shadow roots, when ``focus``) and the URLs of the frames that could not be
        read (:class:`~deskpod.agentd.browser.frames.FrameReader`).

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the tab.
            BrowserError: the browser could not be asked.
        """
        text = focused = None
        unread: list[str] = []
        async with self._lock:
            await self._connect()
            reader = self._reader_for_page()
            try:
                if text_chars is not None:
                    text, unread = await reader.text(int(text_chars))
                if focus:
                    focused = await reader.focused()
            finally:
                await reader.release()
        return text, focused, unread

    def _reader_for_page(self) -> FrameReader:
        """A :class:`FrameReader` for the connected page (call with the lock held, connected);
        its calls give up when a JavaScript dialog opens in the page.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the page.
            BrowserError: no page is connected.
        """
        session, target = self._session, self._target_id
        if session is None or target is None or self._main_frame is None:
            raise BrowserError("no page is connected")
        if self.dialogs.get(target) is not None:
            raise DialogBlockedError(target)

        def call(method: str, params: dict[str, Any] | None = None, session: str | None = None,
                 timeout_s: float = _CALL_TIMEOUT_S) -> Awaitable[dict[str, Any]]:
            return self._call(method, params, session, timeout_s, page=target)

        return FrameReader(call, session, self._main_frame, list(self._children.values()))

    async def read_page(self, use: Callable[[FrameReader], Awaitable[_T]]) -> _T:
        """Run ``use`` with a :class:`FrameReader` of the active tab (the browser's lock held),
        and let the page forget the objects it made afterwards.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the active tab.
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
            reader = self._reader_for_page()
            try:
                return await use(reader)
            finally:
                await reader.release()

    async def element_at(self, sx: int, sy: int) -> dict[str, Any] | None:
        """Describe the control under the screen point (sx, sy), pixels, through frames and
        shadow roots (:meth:`deskpod.agentd.browser.frames.FrameReader.element_at`).

        Returns:
            ``{"tag", "role", "name", "text", "href", "box", "input_type", "download",
            "form_action", "clickable", "frame"}`` with ``box`` in screen pixels, or
            ``None`` when no element is there.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the active tab.
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
            reader = self._reader_for_page()
            try:
                return await reader.element_at(sx, sy, self.device_scale_factor)
            finally:
                await reader.release()

    async def accessibility(self, max_nodes: int, max_bytes: int = MAX_AX_BYTES) -> tuple[AXSummary, list[str]]:
        """Summarize the active tab's accessibility tree, its frames' trees inline under their
        ``Iframe`` nodes (:meth:`deskpod.agentd.browser.frames.FrameReader.accessibility`), within
        ``max_nodes`` nodes and ``max_bytes`` bytes (:func:`deskpod.agentd.browser.axtree.bounded`).

        The tree's size is estimated first (:data:`~deskpod.agentd.browser.axtree.AX_ESTIMATE_SCRIPT`);
        when the browser's answer would be over :data:`MAX_CDP_MESSAGE_BYTES`, or was,
        the page's controls are listed from the DOM instead
        (:data:`~deskpod.agentd.browser.axtree.DOM_SUMMARY_SCRIPT`, reason ``"too_large"``). When
        the browser does not answer in time the summary is empty, ``total`` is ``None``
        and the reason ``"timeout"``.

        Returns:
            ``(summary, unread)``: ``unread`` lists the URLs of frames that could not be read.

        Raises:
            BrowserError: the browser could not be asked.
        """
        try:
            estimate = await self.evaluate(f"({AX_ESTIMATE_SCRIPT})({MAX_CDP_MESSAGE_BYTES})")
            if not isinstance(estimate, (int, float)) or estimate > MAX_CDP_MESSAGE_BYTES:
                return await self._dom_summary(max_nodes, max_bytes), []
            async with self._lock:
                await self._connect()
                reader = self._reader_for_page()
                try:
                    nodes, unread = await reader.accessibility(_AX_SCAN_NODES)
                finally:
                    await reader.release()
        except BrowserError as exc:
            if exc.detail.get("reason") == "too_large":
                return await self._dom_summary(max_nodes, max_bytes), []
            if isinstance(exc.__cause__, TimeoutError):
                return AXSummary(total=None, reason="timeout"), []
            raise
        return bounded(nodes, max_nodes, max_bytes), unread

    async def _dom_summary(self, max_nodes: int, max_bytes: int) -> AXSummary:
        """The page's controls read from the DOM (see :meth:`accessibility`)."""
        value = await self.evaluate(f"({DOM_SUMMARY_SCRIPT})({int(max_nodes)}, {MAX_AX_NAME_CHARS})")
        return dom_summary(value, max_bytes)

    async def set_input_files(self, backend_node_id: int, paths: list[str]) -> None:
        """Set the files of the active tab's file input ``backend_node_id`` (from
        ``Page.fileChooserOpened``) to ``paths``, files in the sandbox.

        Raises:
            BrowserError: the browser refused (e.g. the input is gone).
        """
        async with self._lock:
            await self._connect()
            await self._call("DOM.setFileInputFiles", {"files": paths, "backendNodeId": backend_node_id},
                             self._session)

    def dialog_open(self) -> bool:
        """True while a JavaScript dialog is open in any tab."""
        return self.dialogs.any_open()

    async def wait_loaded(self, timeout_s: float) -> bool:
        """Wait until no main-frame navigation is in flight, at most ``timeout_s`` seconds.

        Returns:
            True when nothing is loading.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.loading and not self.dialogs.any_open() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return not self.loading

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the active tab's document has loaded (``document.readyState`` is
        ``"complete"``), polling every 20 ms, at most ``timeout_s`` seconds. Used after
        the browser (re)starts, before the first observation.

        Returns:
            True when the document is complete, False at the timeout or when a
            JavaScript dialog blocks the page.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline and not self.dialogs.any_open():
            try:
                if await self.evaluate("document.readyState") == "complete":
                    return True
            except BrowserError:
                pass
            await asyncio.sleep(0.02)
        return False

    async def navigate(self, url: str, timeout_s: float) -> None:
        """Load ``url`` in the active tab and wait for its load event, or until a
        JavaScript dialog opens in the tab (a ``beforeunload`` question before the
        navigation, or a dialog of the new page while it loads), or until a dialog open in
        another tab is found to block the tab's renderer: the dialog is then part of the
        state, to be answered by the agent.

        Raises:
            NavigationError: a dialog is already open in the tab
                (``detail["reason"]`` ``"dialog_open"``), the browser reported an
                error (``detail["reason"]``), or the page did not load within
                ``timeout_s`` seconds.
        """
        async with self._lock:
            try:
                await self._connect()
            except DialogBlockedError as exc:
                raise _dialog_open(exc.target_id) from exc
            except BrowserError as exc:
                raise NavigationError(str(exc)) from exc
            target = self._target_id or ""
            if self.dialogs.get(target) is not None:
                raise _dialog_open(target)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._load_waiters.append(waiter)
            opened = self.dialogs.wait_opened(target)
            try:
                try:
                    result = await self._call("Page.navigate", {"url": url}, self._session, page=target,
                                              beside_dialog=False)
                except DialogBlockedError:
                    return
                except BrowserError as exc:
                    raise NavigationError(str(exc)) from exc
                if result.get("errorText"):
                    raise NavigationError(
                        f"navigation to the URL failed: {result['errorText']}", detail={"reason": result["errorText"]}
                    )
                await self._load_or_dialog(waiter, opened, target, timeout_s)
            finally:
                opened.cancel()
                waiter.cancel()

    async def _load_or_dialog(self, loaded: asyncio.Future[None], opened: asyncio.Future[None], target: str,
                              timeout_s: float) -> None:
        """Wait until a navigation of tab ``target`` fires its load event (``loaded``) or
        a dialog opens in that tab (``opened``).

        While another tab has a dialog open, the tab's renderer is asked every
        :data:`_BESIDE_DIALOG_TIMEOUT_S` whether it still runs script: pages opened by one
        another share a renderer, which that dialog blocks, so the load cannot finish
        before the dialog is answered. The wait then ends, and the dialog is part of the
        state the observation reports.

        Raises:
            NavigationError: the page did not load within ``timeout_s`` seconds
                (``detail["reason"]`` ``"load_timeout"``).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            elsewhere = self.dialogs.wait_opened(None)
            step = deadline - loop.time()
            if self.dialogs.any_open():
                step = min(step, _BESIDE_DIALOG_TIMEOUT_S)
            try:
                done, _ = await asyncio.wait({loaded, opened, elsewhere}, timeout=max(0.0, step),
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                elsewhere.cancel()
            if loaded in done or opened in done:
                return
            if loop.time() >= deadline:
                raise NavigationError(
                    f"page did not finish loading within {timeout_s:.1f} s", detail={"reason": "load_timeout"}
                )
            if not done:
                try:
                    await self._call("Runtime.evaluate", {"expression": "0"}, self._session,
                                     timeout_s=_BESIDE_DIALOG_TIMEOUT_S, page=target)
                except DialogBlockedError:
                    return
                except BrowserError:
                    continue  # the renderer answered (e.g. its context went with the old page): it runs

    async def reset_history(self) -> None:
        """Forget the active tab's back/forward list but its current entry
        (``Page.resetNavigationHistory``): a swapped-in standby browser's tab then has
        the start page as its only entry, as a freshly started one.

        Raises:
            BrowserError: the command failed.
        """
        async with self._lock:
            await self._connect()
            await self._call("Page.resetNavigationHistory", {}, self._session, page=self._target_id or "")

    async def answer_dialog(self, action: DialogAccept | DialogDismiss) -> None:
        """Accept or dismiss a JavaScript dialog with ``Page.handleJavaScriptDialog`` on
        a session of its tab (the one ``action.tab_id`` names, else the one an
        observation reports first), with a ``prompt``'s answer text.

        Raises:
            NoDialogError: no dialog is open there.
            ExecutionError: the browser did not take the answer.
        """
        dialog = self.dialogs.pick(action.tab_id, self.active_id)
        params: dict[str, Any] = {"accept": isinstance(action, DialogAccept)}
        if isinstance(action, DialogAccept) and action.text is not None:
            params["promptText"] = action.text
        try:
            await self._call("Page.handleJavaScriptDialog", params, dialog.session, _ANSWER_TIMEOUT_S)
        except BrowserError as exc:
            if "No dialog is showing" in exc.message:
                self.dialogs.closed(dialog.target_id)
                raise NoDialogError("the dialog had already closed", detail={"tab_id": dialog.target_id}) from exc
            raise ExecutionError(f"the dialog could not be answered: {exc.message}") from exc
        self.dialogs.closed(dialog.target_id)

    def _prepare_target(self, params: dict[str, Any]) -> None:
        """Handle ``Target.attachedToTarget`` (auto-attach): remember the session's tab,
        enable Page there (for its dialog events) and let a new page start running."""
        session, info = params.get("sessionId"), params.get("targetInfo") or {}
        target = info.get("targetId")
        if not isinstance(session, str) or not isinstance(target, str):
            return
        self._session_targets[session] = target
        log.info("attached to %s %s (waiting: %s)", str(info.get("type"))[:32], target[:64],
                 bool(params.get("waitingForDebugger")))
        task = asyncio.create_task(self._prepare(session, info.get("type") == "page", bool(params.get("waitingForDebugger"))))
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)

    async def _prepare(self, session: str, page: bool, waiting: bool) -> None:
        # Both are written at once, in order: a paused page answers Page.enable.
        calls = []
        if page:
            calls.append(self._call("Page.enable", session=session, timeout_s=_ANSWER_TIMEOUT_S))
        if waiting:
            calls.append(self._call("Runtime.runIfWaitingForDebugger", session=session, timeout_s=_ANSWER_TIMEOUT_S))
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.info("preparing a new page failed: %s", outcome)

    async def shut_down(self) -> bool:
        """Ask Chromium to quit with ``Browser.close`` on the browser target: the same
        clean shutdown as closing its last window, which writes cookies and storage to
        disk (SIGTERM does not always wait for that). Then closes the pipe.

        Returns:
            True when the browser accepted the command (it exits shortly after).
        """
        try:
            await self._call("Browser.close")
        except BrowserError as exc:
            log.info("Browser.close failed: %s", exc)
            return False
        finally:
            await self.close()
        return True

    async def close(self) -> None:
        """Close the DevTools pipe, if attached (a running Chromium quits when it sees the
        pipe close). Nothing can be asked until the next :meth:`attach`."""
        if self._reader is not None:
            self._reader.cancel()
        if self._send is not None:
            self._send.close()
        self._reader = self._send = None
        self._session = self._target_id = None
        self._children = {}
        self._probes = {}
        self._session_targets = {}
        self.loading = False
        self.dialogs.clear()
