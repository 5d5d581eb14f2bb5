"""A small Chrome DevTools Protocol client for the browser inside the sandbox.

Transport: Chromium runs with ``--remote-debugging-pipe`` and no DevTools port.
It reads commands from its fd 3 and writes replies and events to its fd 4, each
message one JSON object followed by a NUL byte. Both are one end of a Unix
socket pair whose other end only the daemon holds (made by
:mod:`deskpod.agentd.session`): unlike a pipe, a socket cannot be reopened through
``/proc/<pid>/fd`` by another process of the same uid. The client speaks to the
browser target over it and to pages through flat sessions
(``Target.attachToTarget`` with ``flatten``; their messages carry ``sessionId``).

It reads the tabs, the active tab's URL, title, text, focused element, open
dialog, accessibility tree and the element at a point, tracks whether a
navigation is in flight, notices renderer crashes, and navigates. Everything it
returns is page data: untrusted. While a run's egress allowlist is in force it answers
every paused request (:mod:`deskpod.agentd.request_filter`).

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
from typing import Any

from deskpod.agentd.request_filter import FETCH_PATTERNS, RequestFilter
from deskpod.errors import BrowserError, NavigationError
from deskpod.protocol import scrub_json

__all__ = ["Browser", "ELEMENT_SCRIPT", "FOCUS_SCRIPT", "MAX_CDP_MESSAGE_BYTES", "PageState"]

FOCUS_SCRIPT = r"""(() => {
  const e = document.activeElement;
  if (!e || e === document.body || e === document.documentElement) return null;
  const tag = e.tagName.toLowerCase();
  const type = tag === "input" ? (e.type || "text").toLowerCase() : null;
  const implied = {a: "link", button: "button", textarea: "textbox", select: "combobox"}[tag]
    || (tag === "input" ? ({checkbox: "checkbox", radio: "radio", button: "button", submit: "button",
                           range: "slider", search: "searchbox"}[type] || "textbox") : null)
    || (e.isContentEditable ? "textbox" : null);
  const pressable = ["a", "button", "summary"].includes(tag) || ["submit", "button", "reset"].includes(type);
  const label = e.getAttribute("aria-label") || (e.labels && e.labels[0] && e.labels[0].innerText)
    || e.getAttribute("placeholder") || e.getAttribute("title") || e.getAttribute("name")
    || (pressable ? (e.innerText || e.value) : null);
  const noText = ["checkbox", "radio", "button", "submit", "range", "color", "file", "image", "reset"];
  const editable = e.isContentEditable || tag === "textarea" || (tag === "input" && !noText.includes(type));
  const form = e.form || e.closest("form");
  const submit = form && form.querySelector("button:not([type]),button[type=submit],input[type=submit]");
  return {tag, role: e.getAttribute("role") || implied, name: label ? String(label).slice(0, 200) : null,
          input_type: type, is_password: type === "password", editable: !!editable && !e.disabled && !e.readOnly,
          autocomplete: e.getAttribute("autocomplete") ? e.getAttribute("autocomplete").slice(0, 100) : null,
          form_submit: submit ? String(submit.innerText || submit.value || "submit").slice(0, 200) : null};
})()"""
"""Describes ``document.activeElement`` (see :class:`deskpod.protocol.FocusedElement`)."""

ELEMENT_SCRIPT = r"""((sx, sy, d) => {
  const z = window.devicePixelRatio || 1;
  const ow = (window.outerWidth || screen.width) * d, oh = (window.outerHeight || screen.height) * d;
  const ox = window.screenX * d + Math.max(0, ow - window.innerWidth * z) / 2;
  const oy = window.screenY * d + oh - window.innerHeight * z;
  const hit = document.elementFromPoint((sx - ox) / z, (sy - oy) / z);
  if (!hit) return null;
  const e = hit.closest("a[href],button,input,select,textarea,label,summary,[role=button],[role=link],"
    + "[role=menuitem],[role=checkbox],[role=radio],[role=switch],[role=tab],[role=option]") || hit;
  const r = e.getBoundingClientRect();
  const tag = e.tagName.toLowerCase();
  const label = e.getAttribute("aria-label") || e.getAttribute("alt") || e.getAttribute("title")
    || e.getAttribute("placeholder") || e.getAttribute("name");
  const form = e.form || e.closest("form");
  return {tag, role: e.getAttribute("role"), name: label ? String(label).slice(0, 200) : null,
          text: (e.innerText || e.value || "").slice(0, 200) || null, href: e.href ? String(e.href) : null,
          box: r.width > 0 && r.height > 0 ? [ox + r.left * z, oy + r.top * z, ox + r.right * z, oy + r.bottom * z] : null,
          input_type: tag === "input" ? (e.type || "text").toLowerCase() : null,
          download: tag === "a" && e.hasAttribute("download"), form_action: form ? String(form.action).slice(0, 2000) : null};
})"""
"""Called with a screen point and the device scale factor ``d``; maps the point to CSS
pixels through ``devicePixelRatio`` (page zoom times ``d``) and the viewport's origin on
the screen, and returns the control there (the element under the point, or its closest
ancestor a click activates) with its box back in screen pixels. The window's position
and outer size (``screenX``, ``outerWidth``...) are device-independent pixels, so they
are multiplied by ``d``; ``innerWidth`` times ``devicePixelRatio`` is screen pixels already."""

log = logging.getLogger(__name__)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: only a message holding one needs scrubbing."""

MAX_CDP_MESSAGE_BYTES = 64 * 1_048_576
"""Largest DevTools message the daemon reads (an accessibility tree can be large);
a longer one ends the connection."""

_CALL_TIMEOUT_S = 10.0
_VISIBILITY_TIMEOUT_S = 1.0


def _browser_ui(url: str) -> bool:
    """True for Chromium's own UI surfaces that DevTools may list as pages but no user
    sees as a tab (e.g. ``chrome://tab-search.top-chrome/``)."""
    return ".top-chrome" in url or url.startswith(("chrome-untrusted://", "devtools://"))


class PageState:
    """The active tab's URL, title and, when asked, visible text and focused element;
    ``tabs``: every page target as ``{"id", "url", "title", "active"}``, the active one first."""

    def __init__(
        self,
        url: str | None,
        title: str | None,
        text: str | None = None,
        tabs: list[dict[str, Any]] | None = None,
        focused: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.title = title
        self.text = text
        self.tabs = tabs or []
        self.focused = focused


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
        self.loading = False
        self.dialog: dict[str, str] | None = None
        self.events: list[str] = []
        self.requests = RequestFilter()
        """The run's egress allowlist and the requests it refused (:meth:`set_allowed_domains`)."""

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
        if self.requests.domains is not None:
            await self._call("Fetch.enable", {"patterns": FETCH_PATTERNS})

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
                await self._call("Fetch.disable")
            else:
                await self._call("Fetch.enable", {"patterns": FETCH_PATTERNS})

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
            if target_id not in self._probes:
                attached = await self._call("Target.attachToTarget", {"targetId": target_id, "flatten": True})
                self._probes[target_id] = attached["sessionId"]
            session = self._probes[target_id]
            # A page target's id is its main frame's id.
            world = await self._call(
                "Page.createIsolatedWorld", {"frameId": target_id, "worldName": "deskpod"}, session,
                _VISIBILITY_TIMEOUT_S,
            )
            value = await self._call(
                "Runtime.evaluate",
                {"expression": "document.visibilityState", "contextId": world["executionContextId"],
                 "returnByValue": True},
                session, _VISIBILITY_TIMEOUT_S,
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
            if current is not None and self.dialog is not None:
                active = current  # its dialog blocks its scripts; it stays in front
            else:
                visible = [p for p in pages if await self._visible(p["targetId"]) is not False]
                active = current if current in visible else (visible or pages)[0]
            pages.remove(active)
            pages.insert(0, active)
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
        attached = await self._call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        self._session, self._target_id = attached["sessionId"], target["targetId"]
        self.loading = False
        self.dialog = None
        await self._call("Page.enable", session=self._session)
        await self._call("Inspector.enable", session=self._session)
        tree = await self._call("Page.getFrameTree", session=self._session)
        self._main_frame = tree.get("frameTree", {}).get("frame", {}).get("id")

    async def _read_loop(self, stream: asyncio.StreamReader) -> None:
        try:
            while True:
                # A page's strings may hold lone UTF-16 surrogates (JavaScript allows them);
                # they become U+FFFD here, so every reply built from them can be sent.
                raw = (await stream.readuntil(b"\0"))[:-1]
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

    def _on_event(self, method: str, params: dict[str, Any], session: str | None) -> None:
        if method == "Fetch.requestPaused" and session is None:
            self._post(*self.requests.answer(params))
            return
        if method == "Target.detachedFromTarget":
            gone = params.get("sessionId")
            self._probes = {t: s for t, s in self._probes.items() if s != gone}
            if gone == self._session:
                self._session = self._target_id = None
            return
        if session is None or session != self._session:
            return
        main = params.get("frameId") == self._main_frame
        if method == "Page.loadEventFired":
            for waiter in self._load_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._load_waiters.clear()
        elif method == "Page.frameStartedLoading" and main:
            self.loading = True
        elif method == "Page.frameStoppedLoading" and main:
            self.loading = False
        elif method == "Page.javascriptDialogOpening":
            self.dialog = {"type": str(params.get("type", "")), "message": str(params.get("message", ""))[:2000]}
        elif method == "Page.javascriptDialogClosed":
            self.dialog = None
        elif method == "Inspector.targetCrashed":
            self.events.append("renderer_crashed")

    async def _call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = _CALL_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send one command (to the browser target, or to a page's ``session``) and
        return its result.

        Raises:
            BrowserError: no pipe is attached or it closed, no answer within
                ``timeout_s`` seconds, or the browser answered an error.
        """
        send = self._send
        if send is None or send.is_closing() or self._reader is None or self._reader.done():
            raise BrowserError(f"{method} failed: no DevTools pipe (the browser is not running)")
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            send.write(json.dumps(message).encode() + b"\0")
            reply = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError as exc:
            raise BrowserError(f"{method} got no answer within {timeout_s:.0f} s") from exc
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
                "Runtime.evaluate", {"expression": expression, "returnByValue": True, "timeout": 5000}, self._session
            )
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails'].get('text', 'exception')}")
        return result.get("result", {}).get("value")

    async def state(self, text_chars: int | None = None, focus: bool = False) -> PageState:
        """Read the tabs, the active tab's URL and title and, when asked, its visible
        text and focused element.

        Args:
            text_chars: at most this many characters of ``document.body.innerText``
                (``None``: no text).
            focus: describe the focused element (:data:`FOCUS_SCRIPT`).

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
        if (text_chars is not None or focus) and self.dialog is None:
            await self._connect_quietly()
            if self.dialog is None:
                text_expr = (
                    f"(document.body ? document.body.innerText : '').slice(0, {int(text_chars)})"
                    if text_chars is not None
                    else "null"
                )
                value = await self.evaluate(f"[{text_expr}, {FOCUS_SCRIPT if focus else 'null'}]")
                if isinstance(value, list) and len(value) == 2:
                    text = None if value[0] is None else str(value[0])
                    focused = value[1] if isinstance(value[1], dict) else None
        return PageState(tabs[0]["url"], tabs[0]["title"], text, tabs, focused)

    async def _connect_quietly(self) -> None:
        async with self._lock:
            await self._connect()

    async def element_at(self, sx: int, sy: int) -> dict[str, Any] | None:
        """Describe the element under the screen point (sx, sy), pixels (:data:`ELEMENT_SCRIPT`).

        Returns:
            ``{"tag", "role", "name", "text", "href", "box"}`` with ``box`` in screen
            pixels, or ``None`` when no element is there or a dialog is open.

        Raises:
            BrowserError: the browser could not be asked.
        """
        if self.dialog is not None:
            return None
        value = await self.evaluate(f"({ELEMENT_SCRIPT})({int(sx)}, {int(sy)}, {float(self.device_scale_factor)!r})")
        return value if isinstance(value, dict) else None

    async def accessibility(self, max_nodes: int) -> list[dict[str, Any]]:
        """Summarize the active tab's accessibility tree: unignored nodes with a role,
        depth-first, at most ``max_nodes``, as ``{"depth", "role", "name", "value", "focused"}``.

        Raises:
            BrowserError: the browser could not be asked.
        """
        async with self._lock:
            await self._connect()
            tree = await self._call("Accessibility.getFullAXTree", session=self._session)
        nodes = {n["nodeId"]: n for n in tree.get("nodes", [])}
        children = {nid: n.get("childIds", []) for nid, n in nodes.items()}
        roots = [nid for nid, n in nodes.items() if not n.get("parentId")]
        out: list[dict[str, Any]] = []

        def prop(node: dict[str, Any], key: str) -> Any:
            return (node.get(key) or {}).get("value")

        def walk(nid: str, depth: int) -> None:
            if len(out) >= max_nodes or nid not in nodes:
                return
            node = nodes[nid]
            role = prop(node, "role")
            shown = not node.get("ignored") and role not in (None, "none", "generic", "InlineTextBox")
            if shown:
                focused = any(p.get("name") == "focused" and p.get("value", {}).get("value")
                              for p in node.get("properties", []))
                name, value = prop(node, "name"), prop(node, "value")
                out.append({"depth": depth, "role": str(role),
                            "name": None if name in (None, "") else str(name)[:200],
                            "value": None if value in (None, "") else str(value)[:200], "focused": bool(focused)})
            for child in children.get(nid, []):
                walk(child, depth + 1 if shown else depth)

        for root in roots:
            walk(root, 0)
        return out

    async def wait_loaded(self, timeout_s: float) -> bool:
        """Wait until no main-frame navigation is in flight, at most ``timeout_s`` seconds.

        Returns:
            True when nothing is loading.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.loading and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return not self.loading

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the active tab's document has loaded (``document.readyState`` is
        ``"complete"``), polling every 20 ms, at most ``timeout_s`` seconds. Used after
        the browser (re)starts, before the first observation.

        Returns:
            True when the document is complete, False at the timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                if await self.evaluate("document.readyState") == "complete":
                    return True
            except BrowserError:
                pass
            await asyncio.sleep(0.02)
        return False

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
                result = await self._call("Page.navigate", {"url": url}, self._session)
            except BrowserError as exc:
                raise NavigationError(str(exc)) from exc
            if result.get("errorText"):
                raise NavigationError(
                    f"navigation to the URL failed: {result['errorText']}", detail={"reason": result["errorText"]}
                )
            try:
                await asyncio.wait_for(waiter, timeout_s)
            except TimeoutError as exc:
                raise NavigationError(
                    f"page did not finish loading within {timeout_s:.1f} s", detail={"reason": "load_timeout"}
                ) from exc

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
        self._probes = {}
        self.loading = False
        self.dialog = None
