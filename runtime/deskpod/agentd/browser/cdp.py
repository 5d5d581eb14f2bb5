"""A small Chrome DevTools Protocol client for the browser inside the sandbox: what
the daemon does in a page.

:class:`Browser` reads the tabs, the active tab's URL, title, text, focused element,
accessibility tree and the element at a point, navigates, inserts typed text and
answers the JavaScript dialogs open in every tab (:mod:`deskpod.agentd.browser.dialogs`).
Everything it returns is page data: untrusted. Text, focus, the accessibility tree and
the element at a point are read through every frame, the page's out-of-process frames
included: :mod:`deskpod.agentd.browser.frames`. Page scripts are not evaluated while a
dialog is open.

The connection underneath is apart: the pipe and its messages
(:mod:`deskpod.agentd.browser.devtools`), and the tabs, the active page's session and the
routing of events to downloads, the request filter, dialogs and settling
(:mod:`deskpod.agentd.browser.targets`), which :class:`Browser` extends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from deskpod.agentd.browser.axtree import AX_ESTIMATE_SCRIPT, DOM_SUMMARY_SCRIPT, AXSummary, bounded, dom_summary
from deskpod.agentd.browser.devtools import BESIDE_DIALOG_TIMEOUT_S, MAX_CDP_MESSAGE_BYTES
from deskpod.agentd.browser.fasttype import EDITABLE_FOCUS_SCRIPT
from deskpod.agentd.browser.frames import FrameReader
from deskpod.agentd.browser.pdf_viewer import PRESENTED_SCRIPT
from deskpod.agentd.browser.pdf_viewer import wait_loaded as wait_viewer_loaded
from deskpod.agentd.browser.press_guard import ArmedPress, arm, finish, wait_pressed
from deskpod.agentd.browser.permissions import TAKE_EXPRESSION, requests_seen
from deskpod.agentd.browser.tab_switch import TabSwitching
from deskpod.agentd.browser.targets import ANSWER_TIMEOUT_S
from deskpod.errors import (
    BrowserError,
    DialogBlockedError,
    ExecutionError,
    NavigationError,
    NoDialogError,
    PageUnresponsiveError,
)
from deskpod.protocol import MAX_AX_BYTES, MAX_AX_NAME_CHARS, DialogAccept, DialogDismiss, PermissionRequest

__all__ = ["Browser", "PageState"]

log = logging.getLogger(__name__)

_AX_SCAN_NODES = 100_000
"""Most accessibility nodes read through the frames before the summary's own limits are
applied (:func:`deskpod.agentd.browser.axtree.bounded` counts them all in ``total``)."""

_T = TypeVar("_T")


def _dialog_open(target_id: str) -> NavigationError:
    """The error of a navigation refused because a dialog is open in its tab."""
    return NavigationError(
        "a JavaScript dialog blocks the tab: answer it first (dialog_accept or dialog_dismiss; "
        "detail tab_id names its tab)",
        detail={"reason": "dialog_open", "tab_id": target_id[:128]},
    )


def _unresponsive(exc: PageUnresponsiveError) -> NavigationError:
    """The error of a navigation refused because its tab's page does not answer."""
    return NavigationError(
        "the tab's page does not answer (a script never ends): close the tab (ctrl+w) or use another one "
        "(detail tab_id names it)",
        detail={"reason": "page_unresponsive", **exc.detail},
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



class Browser(TabSwitching):
    """What the daemon does in the browser's pages, over the DevTools connection it
    extends (:class:`~deskpod.agentd.browser.targets.BrowserTargets`, through
    :class:`~deskpod.agentd.browser.tab_switch.TabSwitching`; see the module docstring).

    Args:
        device_scale_factor: the one Chromium was started with (screen pixels per
            device-independent pixel), for mapping CSS pixels to screen pixels.
    """

    def __init__(self, device_scale_factor: float = 1.0) -> None:
        super().__init__()
        self.device_scale_factor = device_scale_factor
        """Screen pixels per device-independent pixel: Chromium's ``--force-device-scale-factor``."""
        self._world: tuple[str, int] | None = None  # (page session, isolated world's context id)

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

    async def take_permission_requests(self, url: str | None) -> list[PermissionRequest]:
        """The permissions the active tab's page asked for since the last take, each with the
        answer the grants in force gave it (:mod:`deskpod.agentd.browser.permissions`), and
        the page's record emptied.

        Args:
            url: the active tab's URL (its origin is reported).

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the tab.
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
            result = await self._call("Runtime.evaluate", {"expression": TAKE_EXPRESSION, "returnByValue": True,
                                                           "timeout": 1000}, self._session, page=self._target_id)
            tab = self._target_id or ""
        return requests_seen(result.get("result", {}).get("value"), tab, url or "", self.permissions.grants)

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
            text, focused, _, unread, _ = await self.content(text_chars, focus)
        else:
            unread = []
        return PageState(tabs[0]["url"], tabs[0]["title"], text, tabs, focused, unread)

    async def content(self, text_chars: int | None, focus: bool, keys: bool = True
                      ) -> tuple[str | None, dict[str, Any] | None, dict[str, Any] | None, list[str], list[str]]:
        """The active tab's visible text, its frames' text after it (at most ``text_chars``
        characters; ``None``: not asked), its focused element (the deepest, through frames
        and open shadow roots, when ``focus``), the page's key facts read with it when ``keys``
        (:meth:`~deskpod.agentd.browser.key_facts.KeyFacts.key_facts`; ``None``: not asked or
        not readable), the URLs of the frames that could not be read and of the PDF documents
        among them (:meth:`~deskpod.agentd.browser.frames.FrameReader.text`; both empty when
        the text is not asked).

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the tab.
            BrowserError: the browser could not be asked.
        """
        async def read(reader: FrameReader
                       ) -> tuple[str | None, dict[str, Any] | None, dict[str, Any] | None, list[str], list[str]]:
            text, unread, pdfs = await reader.text(int(text_chars)) if text_chars is not None else (None, [], [])
            if not focus:
                return text, None, None, unread, pdfs
            focused, path = await reader.focus()
            if not keys:
                return text, focused, None, unread, pdfs
            try:
                facts = await reader.key_facts(path, bool(focused and focused.get("editable")))
            except BrowserError as exc:
                log.warning("page key facts unavailable: %s", exc)
                facts = None
            return text, focused, facts, unread, pdfs

        return await self.read_page(read)

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
            "form_action", "clickable", "frame", "options"}`` with ``box`` in screen pixels, or
            ``None`` when no element is there.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the active tab.
            BrowserError: the browser could not be asked.
        """
        return await self.read_page(lambda reader: reader.element_at(sx, sy, self.device_scale_factor))

    async def arm_press(self, sx: int, sy: int, kind: str) -> ArmedPress:
        """Arm the press guard of every frame of the active tab for one press (``kind``, a
        press action's type) at the screen point (sx, sy), pixels, on the node under it now
        (:mod:`deskpod.agentd.browser.press_guard`).

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the active tab.
            BrowserError: the guard of the frame under the point could not be armed.
        """
        async def armed(reader: FrameReader) -> ArmedPress:
            return await arm(reader, await reader.node_at(sx, sy, self.device_scale_factor), kind)

        return await self.read_page(armed)

    async def finish_press(self, armed: ArmedPress, kind: str | None) -> None:
        """Disarm the guards :meth:`arm_press` armed once the press ``kind`` (a press action's
        type; ``None``: nothing was sent) has reached the page (:func:`~deskpod.agentd.browser.press_guard.finish`).

        Raises:
            ScreenChangedError: a guard stopped an event of the press, or the press did not
                reach the page (reason ``"press"``).
        """
        received = True

        async def pressed(reader: FrameReader) -> None:
            nonlocal received
            if kind is not None:
                received = await wait_pressed(reader, armed, kind)

        async def finished(reader: FrameReader) -> None:
            await finish(reader, armed, kind, received)

        for step in (pressed, finished):
            try:
                await self.read_page(step)
            except BrowserError as exc:  # a dialog the press opened, the page gone: the guards went with it
                log.info("press guard: %s", exc)

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
            if not await self.ax_tree_fits():
                return await self._dom_summary(max_nodes, max_bytes), []
            nodes, unread = await self.read_page(lambda reader: reader.accessibility(_AX_SCAN_NODES))
        except BrowserError as exc:
            if exc.detail.get("reason") == "too_large":
                return await self._dom_summary(max_nodes, max_bytes), []
            if isinstance(exc.__cause__, TimeoutError):
                return AXSummary(total=None, reason="timeout"), []
            raise
        return bounded(nodes, max_nodes, max_bytes), unread

    async def ax_tree_fits(self) -> bool:
        """Whether the active tab's full accessibility tree may be asked for: its estimated size
        (:data:`~deskpod.agentd.browser.axtree.AX_ESTIMATE_SCRIPT`) is within
        :data:`MAX_CDP_MESSAGE_BYTES`. A larger tree is never asked for: Chromium takes many
        seconds to build it, or never answers, and holds the page's other calls meanwhile.

        Raises:
            BrowserError: the browser could not be asked.
        """
        estimate = await self.evaluate(f"({AX_ESTIMATE_SCRIPT})({MAX_CDP_MESSAGE_BYTES})")
        return isinstance(estimate, (int, float)) and estimate <= MAX_CDP_MESSAGE_BYTES

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

    async def drop_files(self, sx: int, sy: int, paths: list[str]) -> None:
        """Drop ``paths`` (files in the sandbox) onto the active tab at the screen point
        (``sx``, ``sy``), pixels: ``dragEnter``, ``dragOver`` and ``drop`` events
        (``Input.dispatchDragEvent``, https://chromedevtools.github.io/devtools-protocol/tot/Input/#method-dispatchDragEvent)
        at that point in the viewport's CSS pixels, offering a copy.

        Raises:
            DialogBlockedError: a JavaScript dialog is open in the active tab.
            BrowserError: the browser refused.
        """
        async def drop(reader: FrameReader) -> None:
            ox, oy, zoom = await reader.viewport(self.device_scale_factor)
            point = {"x": (sx - ox) / zoom, "y": (sy - oy) / zoom}
            data = {"items": [], "files": paths, "dragOperationsMask": 1}
            for kind in ("dragEnter", "dragOver", "drop"):
                await self._call("Input.dispatchDragEvent", {"type": kind, **point, "data": data}, self._session)

        await self.read_page(drop)

    async def wait_loaded(self, timeout_s: float) -> bool:
        """Wait until no main-frame navigation is in flight, at most ``timeout_s`` seconds.

        Returns:
            True when nothing is loading.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.loading and not self.dialogs.any_open() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return not self.loading

    async def wait_pdf_loaded(self, timeout_s: float) -> bool:
        """Wait until the PDF viewer of the active tab has its document and the tab's
        document is on the screen (see :mod:`deskpod.agentd.browser.pdf_viewer`), at most
        ``timeout_s`` seconds; each question to a frame is asked with the lock held.

        Returns:
            True when the viewer is done loading (or failed to, or asks for a password) and
            the document's first paint has been presented.
        """
        async def call(method: str, params: dict[str, Any] | None = None, session: str | None = None,
                       timeout_s: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
            async with self._lock:
                return await self._call(method, params, session, timeout_s, page=self._target_id)

        def frames() -> list[str]:
            return [c.session for c in self._children.values() if c.parent == self._session]

        deadline = asyncio.get_running_loop().time() + timeout_s
        if not await wait_viewer_loaded(call, frames, timeout_s):
            return False
        left = max(0.0, deadline - asyncio.get_running_loop().time())
        try:  # and the tab's document is on the screen (PRESENTED_SCRIPT)
            return await asyncio.wait_for(self.evaluate_isolated(f"{PRESENTED_SCRIPT}({int(left * 1000)})", True),
                                          left + 0.5) is True
        except (BrowserError, TimeoutError):
            return False

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
                (``detail["reason"]`` ``"dialog_open"``), its page does not answer
                (``"page_unresponsive"``, with ``tab_id`` and ``unresponsive_s``), the browser reported an
                error (``detail["reason"]``), or the page did not load within
                ``timeout_s`` seconds.
        """
        async with self._lock:
            try:
                await self._connect()
            except DialogBlockedError as exc:
                raise _dialog_open(exc.target_id) from exc
            except PageUnresponsiveError as exc:
                raise _unresponsive(exc) from exc
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
                except PageUnresponsiveError as exc:
                    raise _unresponsive(exc) from exc
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
        :data:`BESIDE_DIALOG_TIMEOUT_S` whether it still runs script: pages opened by one
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
                step = min(step, BESIDE_DIALOG_TIMEOUT_S)
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
                                     timeout_s=BESIDE_DIALOG_TIMEOUT_S, page=target)
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
            await self._call("Page.handleJavaScriptDialog", params, dialog.session, ANSWER_TIMEOUT_S)
        except BrowserError as exc:
            if "No dialog is showing" in exc.message:
                self.dialogs.closed(dialog.target_id)
                raise NoDialogError("the dialog had already closed", detail={"tab_id": dialog.target_id}) from exc
            raise ExecutionError(f"the dialog could not be answered: {exc.message}") from exc
        self.dialogs.closed(dialog.target_id)
