"""The browser's targets over one DevTools channel: its tabs, the active page's session
and frames, and where each event goes.

:class:`BrowserTargets` holds the :class:`~deskpod.agentd.browser.devtools.DevTools`
channel and routes every event: dialogs to :mod:`deskpod.agentd.browser.dialogs`,
downloads to :mod:`deskpod.agentd.browser.downloads`, paused requests to
:mod:`deskpod.agentd.browser.request_filter`, the active page's network and navigation
events to the settling trackers (:mod:`deskpod.agentd.browser.activity`) and, with its
console's events, to its bounded logs (:mod:`deskpod.agentd.browser.page_logs`), file
choosers (:mod:`deskpod.agentd.browser.file_chooser`) and renderer crashes to :attr:`events`.
The run's permission grants are applied on the browser target and in every page session
(:mod:`deskpod.agentd.browser.permissions`).

Every page, as it appears and before it runs, gets a flat session with Page enabled,
so a dialog in any tab or popup is reported, and the permission hook (and the run's
position, when one is configured) in it. The active tab is the visible one, read
in an isolated world the page's scripts cannot reach; one flat session to it, with the
Page, Network and Inspector domains enabled, is kept and replaced when the active tab
changes or the page goes away, and its out-of-process frames are auto-attached as
flat sessions under it (:mod:`deskpod.agentd.browser.frames`). Its Runtime and Log
domains are enabled only once a request asks for the console (:meth:`BrowserTargets.read_console`):
a page can tell an enabled Runtime domain (it then describes the arguments of every
``console`` call, running the page's getters), so a run that never reads the console
does not show it. URL, title and tabs come
from the browser target (``Target.getTargets``), which answers even while a JavaScript
dialog blocks the page. What is done in a page is :mod:`deskpod.agentd.browser.cdp`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from deskpod.agentd.browser.activity import NavigationActivity, NetworkActivity
from deskpod.agentd.browser.devtools import CALL_TIMEOUT_S, DevTools
from deskpod.agentd.browser.dialogs import DialogTracker
from deskpod.agentd.browser.downloads import Downloads
from deskpod.agentd.browser.frame_calls import ChildTarget
from deskpod.agentd.browser.frames import PDF_MIME_TYPE, FrameReader
from deskpod.agentd.browser.page_logs import CONSOLE_EVENTS, ConsoleMessages, NetworkRequests
from deskpod.agentd.browser.press_guard import GUARD_SCRIPT, GUARD_WORLD
from deskpod.agentd.browser.permissions import PermissionSetter, permission_hook_script
from deskpod.agentd.browser.request_filter import FETCH_PATTERNS, RequestFilter
from deskpod.agentd.browser.tab_keys import titled_front
from deskpod.agentd.browser.text_sources import canvas_hook_script
from deskpod.errors import BrowserError, DialogBlockedError
from deskpod.protocol import ConsoleLog, NetworkLog, PermissionGrants

__all__ = ["ANSWER_TIMEOUT_S", "BrowserTargets", "VISIBILITY_TIMEOUT_S", "front_page"]

log = logging.getLogger(__name__)

VISIBILITY_TIMEOUT_S = 1.0
"""How long a page is asked whether it is the visible one, seconds."""

ANSWER_TIMEOUT_S = 5.0
"""How long a command answering a dialog or preparing a new page waits, seconds."""


def _browser_ui(url: str) -> bool:
    """True for Chromium's own UI surfaces that DevTools may list as pages but no user
    sees as a tab (e.g. ``chrome://tab-search.top-chrome/``)."""
    return ".top-chrome" in url or url.startswith(("chrome-untrusted://", "devtools://"))


def front_page(pages: list[dict[str, Any]], current: str | None, seen: set[str],
               visible: set[str] | None = None) -> dict[str, Any]:
    """The page in front: of the ``visible`` pages (all when ``None``: a JavaScript dialog
    keeps the renderer from answering the probe, or none answered visible), the newest
    that is not in ``seen`` (the pages of the last look) and that another page opened
    (``openerId``: ``window.open``, a ``target=_blank`` link; Chromium puts that tab or
    popup window in front, and a popup window leaves its opener visible beside it), else
    the page ``current`` names, else the newest.

    Args:
        pages: page targets (``Target.getTargets`` infos), the newest first; not empty.
        current: the id of the page last found in front (``None``: none).
        seen: the ids of the pages at the last look.
        visible: the ids of the pages that may be visible (the probe did not say hidden).
    """
    candidates = [p for p in pages if visible is None or p.get("targetId") in visible] or pages
    opened = [p for p in candidates if p.get("targetId") not in seen and p.get("openerId")]
    if opened:
        return opened[0]
    return next((p for p in candidates if p.get("targetId") == current), candidates[0])


class BrowserTargets:
    """The browser's tabs, the active page's flat session and its frames, over one
    DevTools channel (see the module docstring).

    :meth:`attach` binds it to a newly started Chromium's socket; every restart of
    Chromium brings a new socket pair, so the daemon attaches again.
    """

    def __init__(self) -> None:
        self.dialogs = DialogTracker()
        """The JavaScript dialogs open in the browser's tabs."""
        self.devtools = DevTools(self.dialogs, self._on_event, self._channel_closed)
        """The channel to the browser (:mod:`deskpod.agentd.browser.devtools`)."""
        self._lock = asyncio.Lock()
        self._load_waiters: list[asyncio.Future[None]] = []
        self._session: str | None = None
        self._target_id: str | None = None
        self._probes: dict[str, str] = {}
        self._main_frame: str | None = None
        self._children: dict[str, ChildTarget] = {}
        self._attaching: set[asyncio.Task[None]] = set()
        self.loading = False
        self.pdf_shown = False
        """The active tab's document is a PDF (``application/pdf``: the browser's PDF viewer shows it)."""
        self.active_id: str | None = None
        """The tab found active by the last look at the tabs."""
        self._seen_pages: set[str] = set()  # the page ids of the last look
        self._session_targets: dict[str, str] = {}
        self._preparing: set[asyncio.Task[None]] = set()
        self.events: list[str] = []
        self.downloads = Downloads()
        self.file_chooser: dict[str, Any] | None = None
        """The active tab's open file chooser (:mod:`deskpod.agentd.browser.file_chooser`)."""
        self.requests = RequestFilter()
        """The run's egress allowlist and the requests it refused (:meth:`set_allowed_domains`)."""
        self.network = NetworkActivity()
        """The active tab's requests in flight, for settling (:mod:`deskpod.agentd.settle`)."""
        self.navigation = NavigationActivity()
        """The active tab's navigations asked for and begun, for settling."""
        self.console_messages = ConsoleMessages()
        """The active tab's console messages since its page loaded, once read (:meth:`read_console`)."""
        self.network_requests = NetworkRequests()
        """The active tab's requests since its page loaded (:meth:`read_network`)."""
        self._console_session: str | None = None
        self.permissions = PermissionSetter()
        """The run's permission grants (:meth:`set_permissions`)."""
        self._page_sessions: set[str] = set()
        self.window_title: Callable[[], Awaitable[str | None]] | None = None
        """The title of the window the screen shows in front (Chromium's: its active tab's
        title, then `` - Chromium``), for the tab in front while a dialog stops the probe;
        ``None``: not known."""
        self.created: dict[str, int] = {}
        """When each page target was first attached (larger: later), for the tab strip's order."""
        self._creations = itertools.count()

    async def attach(self, pipe: socket.socket) -> None:
        """Speak DevTools over ``pipe``, the daemon's end of a newly started Chromium's
        socket pair, from now on; the client owns it and closes it in :meth:`close`.
        A previous one is closed first.

        Raises:
            BrowserError: the socket cannot be used, or target discovery failed.
        """
        await self.close()
        await self.devtools.open(pipe)
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
        if self.permissions.grants.granted:
            await self.permissions.apply(self._call, ())

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
        if self.devtools.attached:
            if domains is None:
                self.downloads.marking = False
                await self._call("Fetch.disable")
            else:
                await self._call("Fetch.enable", {"patterns": FETCH_PATTERNS})
                self.downloads.marking = True

    async def set_permissions(self, grants: PermissionGrants) -> None:
        """Grant ``grants`` to every page from now on and after a browser restart; deny every
        other permission (the default, :class:`~deskpod.protocol.PermissionGrants` with none).

        Raises:
            BrowserError: the browser did not accept them (they are in force anyway from the
                next :meth:`attach`).
        """
        self.permissions.grants = grants
        if self.devtools.attached:
            await self.permissions.apply(self._call, sorted(self._page_sessions))

    async def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                    timeout_s: float = CALL_TIMEOUT_S, page: str | None = None,
                    beside_dialog: bool = True) -> dict[str, Any]:
        """One command through :attr:`devtools` (:meth:`~deskpod.agentd.browser.devtools.DevTools.call`).

        Raises:
            DialogBlockedError: a dialog blocks ``page``.
            BrowserError: no pipe, no answer in time, or an error answer.
        """
        return await self.devtools.call(method, params, session, timeout_s, page, beside_dialog)

    def _post(self, method: str, params: dict[str, Any]) -> None:
        """Send a command to the browser target without waiting for its answer."""
        self.devtools.post(method, params)

    @property
    def channel_lost(self) -> bool:
        """True when a DevTools pipe was attached and its reader has ended (the browser
        closed it or it failed): nothing can be asked until the daemon attaches again."""
        return self.devtools.lost

    def _channel_closed(self) -> None:
        """The pipe closed: no page session, frame or dialog is left."""
        self._session = self._target_id = None
        self._children = {}
        self.dialogs.clear()
        self.devtools.unresponsive.clear()

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
                VISIBILITY_TIMEOUT_S, page=target_id,
            )
            value = await self._call(
                "Runtime.evaluate",
                {"expression": "document.visibilityState", "contextId": world["executionContextId"],
                 "returnByValue": True},
                session, VISIBILITY_TIMEOUT_S, page=target_id,
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
        ids = {str(p.get("targetId", "")) for p in pages}
        if len(pages) > 1:
            front = self.active_id if self.active_id in ids else self._target_id
            if front in ids and self.dialogs.any_open():
                # A dialog blocks its renderer's pages: the probe cannot answer. A tab the user
                # brought to the front (a click on its tab) names the window.
                active = front_page(pages, front, self._seen_pages)
                if active.get("targetId") == front:
                    active = await titled_front(pages, front, await self._window_title(), self._visible) or active
            else:
                visible = {str(p["targetId"]) for p in pages if await self._visible(p["targetId"]) is not False}
                active = front_page(pages, front, self._seen_pages, visible)
            pages.remove(active)
            pages.insert(0, active)
        self.active_id = str(pages[0].get("targetId", ""))
        self._seen_pages = ids
        return pages

    async def _window_title(self) -> str | None:
        return await self.window_title() if self.window_title is not None else None

    def take_events(self) -> list[str]:
        """Return and forget the events noticed since the last call (e.g. ``"renderer_crashed"``)."""
        events, self.events = self.events, []
        return events

    def unresponsive(self) -> list[tuple[str, float]]:
        """The tabs whose page does not answer, each with how long it has not, seconds, the
        longest first (:mod:`deskpod.agentd.browser.unresponsive`)."""
        return self.devtools.unresponsive.report()

    def sessions_of(self, target_id: str) -> list[str]:
        """The DevTools sessions attached to tab ``target_id`` so far, the active page's first."""
        return sorted((s for s, t in self._session_targets.items() if t == target_id), key=lambda s: s != self._session)

    def dialog_open(self) -> bool:
        """True while a JavaScript dialog is open in any tab."""
        return self.dialogs.any_open()

    async def read_console(self, max_bytes: int) -> ConsoleLog:
        """The active tab's console messages since its page loaded, the newest whose JSON fits
        in ``max_bytes``. The first read on a tab's session enables its Runtime and Log domains;
        the browser then reports the messages the page logged before (its last 1000 at most).

        Raises:
            DialogBlockedError: a JavaScript dialog blocks the tab, whose console was not read yet.
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
            if self._console_session != self._session:
                await self._call("Runtime.enable", session=self._session, page=self._target_id)
                await self._call("Log.enable", session=self._session, page=self._target_id)
                self._console_session = self._session
        return self.console_messages.take(max_bytes)

    async def read_network(self, max_bytes: int) -> NetworkLog:
        """The active tab's requests since its page loaded (as far as the daemon saw them: from
        its first look at the tab), the newest whose JSON fits in ``max_bytes``.

        Raises:
            DialogBlockedError: a JavaScript dialog blocks a tab the daemon had not read yet.
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
        return self.network_requests.take(max_bytes)

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
        self.loading = self.pdf_shown = False
        self.file_chooser = None
        self.network.clear()
        self.navigation.forget()
        self.console_messages.clear()
        self.network_requests.clear()
        try:
            await self._call("Page.enable", session=session, page=target_id)
            await self._call("Network.enable", {"maxTotalBufferSize": 0, "maxResourceBufferSize": 0}, session,
                             page=target_id)
            await self._call("Page.addScriptToEvaluateOnNewDocument", {"source": canvas_hook_script()}, session,
                             page=target_id)
            await self._call("Page.addScriptToEvaluateOnNewDocument", {"source": GUARD_SCRIPT, "worldName": GUARD_WORLD},
                             session, page=target_id)
            await self._call("Page.addScriptToEvaluateOnNewDocument", {"source": permission_hook_script()}, session,
                             page=target_id)
            await self._call("Inspector.enable", session=session, page=target_id)
            await self._auto_attach(session)
            await self._call("Page.setInterceptFileChooserDialog", {"enabled": True}, session, page=target_id)
            tree = await self._call("Page.getFrameTree", session=session, page=target_id)
        except BrowserError:
            self._session = self._target_id = None  # attach again next time
            raise
        self._main_frame = tree.get("frameTree", {}).get("frame", {}).get("id")
        self.pdf_shown = tree.get("frameTree", {}).get("frame", {}).get("mimeType") == PDF_MIME_TYPE

    async def _auto_attach(self, session: str) -> None:
        """Attach the out-of-process frames under ``session`` (now and as they appear) as
        flat sessions, reported by ``Target.attachedToTarget``; a new one waits for
        :meth:`_prepare_frame` before its document runs. Its dedicated workers are attached
        too, only to be let run at once: with ``waitForDebuggerOnStart`` Chromium holds a
        worker it does not attach, and the page's worker never starts."""
        await self._call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True,
                                                  "filter": [{"type": "iframe"}, {"type": "worker"}]}, session)

    async def _prepare_frame(self, session: str) -> None:
        """Give an out-of-process frame just attached the press guard, before its document's
        scripts (:mod:`deskpod.agentd.browser.press_guard`), attach the frames under it, then
        let it run (it waits for that, ``waitForDebuggerOnStart``), whatever failed."""
        try:
            await self._call("Page.enable", session=session, timeout_s=ANSWER_TIMEOUT_S)
            await self._call("Page.addScriptToEvaluateOnNewDocument", {"source": GUARD_SCRIPT, "worldName": GUARD_WORLD},
                             session, timeout_s=ANSWER_TIMEOUT_S)
            await self._auto_attach(session)
        except BrowserError as exc:
            log.info("an out-of-process frame runs unguarded, its frames unread: %s", exc)
        finally:
            await self._resume(session)

    async def _resume(self, session: str) -> None:
        """Let a target that waits for the debugger run."""
        try:
            await self._call("Runtime.runIfWaitingForDebugger", session=session, timeout_s=ANSWER_TIMEOUT_S)
        except BrowserError as exc:
            log.info("a new out-of-process frame could not be resumed: %s", exc)

    def _frame_attached(self, params: dict[str, Any], parent: str | None) -> None:
        """Record an out-of-process frame auto-attached under the page or one of its frames."""
        info = params.get("targetInfo", {})
        child = params.get("sessionId")
        known = parent is not None and (parent == self._session or parent in self._children)
        if not isinstance(child, str):
            return
        if not known or info.get("type") != "iframe":
            task = asyncio.get_running_loop().create_task(self._resume(child))
        else:
            self._children[child] = ChildTarget(child, str(info.get("targetId", "")), str(parent))
            log.info("out-of-process frame attached (target %s)", str(info.get("targetId", ""))[:64])
            task = asyncio.get_running_loop().create_task(self._prepare_frame(child))
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
            self._page_sessions.discard(str(gone))
            if gone == self._session:
                self._session = self._target_id = None
            return
        if method == "Target.targetDestroyed":
            self.dialogs.closed(str(params.get("targetId", "")))
            self.created.pop(str(params.get("targetId", "")), None)
            self.devtools.unresponsive.answered(str(params.get("targetId", "")))
            return
        target = self._session_targets.get(session or "")
        if method == "Page.javascriptDialogOpening" and session is not None and target is not None:
            opened = self.dialogs.opened(target, session, params)
            log.info("a %s dialog opened in tab %s", opened.type[:32], target[:64])
        elif method == "Page.javascriptDialogClosed" and target is not None:
            self.dialogs.closed(target)
        if method == "Page.frameStoppedLoading" and session in self._children:
            self.network.frame_loaded(str(params.get("frameId", "")))
        if session is None or session != self._session:
            return
        main = params.get("frameId") == self._main_frame
        if method.startswith("Network."):
            self.network.on_event(method, params)
            self.network_requests.on_event(method, params)
        elif method in CONSOLE_EVENTS:
            self.console_messages.on_event(method, params)
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
            self.pdf_shown = params["frame"].get("mimeType") == PDF_MIME_TYPE
            self.file_chooser = None
            self.console_messages.navigated()
            self.network_requests.navigated(params["frame"].get("loaderId"))
        elif method == "Inspector.targetCrashed":
            self.events.append("renderer_crashed")

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
                 timeout_s: float = CALL_TIMEOUT_S) -> Awaitable[dict[str, Any]]:
            return self._call(method, params, session, timeout_s, page=target)

        return FrameReader(call, session, self._main_frame, list(self._children.values()))

    def _prepare_target(self, params: dict[str, Any]) -> None:
        """Handle ``Target.attachedToTarget`` (auto-attach): remember the session's tab,
        enable Page there (for its dialog events) and let a new page start running."""
        session, info = params.get("sessionId"), params.get("targetInfo") or {}
        target = info.get("targetId")
        if not isinstance(session, str) or not isinstance(target, str):
            return
        self._session_targets[session] = target
        if info.get("type") == "page":
            self._page_sessions.add(session)
            self.created.setdefault(target, next(self._creations))
        log.info("attached to %s %s (waiting: %s)", str(info.get("type"))[:32], target[:64],
                 bool(params.get("waitingForDebugger")))
        task = asyncio.create_task(self._prepare(session, info.get("type") == "page", bool(params.get("waitingForDebugger"))))
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)

    async def _prepare(self, session: str, page: bool, waiting: bool) -> None:
        # Both are written at once, in order: a paused page answers Page.enable.
        calls: list[Awaitable[Any]] = []
        if page:
            calls.append(self._call("Page.enable", session=session, timeout_s=ANSWER_TIMEOUT_S))
            calls.append(self._call("Page.addScriptToEvaluateOnNewDocument", {"source": permission_hook_script()},
                                    session, ANSWER_TIMEOUT_S))
            if self.permissions.grants.position is not None:
                calls.append(self.permissions.position(
                    lambda method, params, session: self._call(method, params, session, ANSWER_TIMEOUT_S), session))
        if waiting:
            calls.append(self._call("Runtime.runIfWaitingForDebugger", session=session, timeout_s=ANSWER_TIMEOUT_S))
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
        self.devtools.close()
        self._session = self._target_id = None
        self._children = {}
        self._probes = {}
        self._session_targets = {}
        self._page_sessions = set()
        self.created = {}
        self.loading = self.pdf_shown = False
        self.dialogs.clear()
        self.devtools.unresponsive.clear()
