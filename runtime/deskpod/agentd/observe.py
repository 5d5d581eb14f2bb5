"""Building the observation after a request: settle, then the screenshot and the browser state together.

The daemon produces every field from the environment itself (frames from the X
server, state from CDP); nothing is taken from what a page claims about itself,
and everything page-derived stays marked untrusted in the protocol's docs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from deskpod.agentd.browser.axtree import AXSummary
from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.browser.dialogs import OpenDialog
from deskpod.agentd.browser.elements import ElementActions
from deskpod.agentd.browser.press_guard import ArmedPress
from deskpod.agentd.batch import BatchOutcome
from deskpod.agentd.display.xtrusted import AgentWindowInfo
from deskpod.agentd.display.xwindows import WindowInfo, format_window_id
from deskpod.agentd.executor import Executor
from deskpod.agentd.native_controls import NativeReader, NativeRefs, model_box, native_fields
from deskpod.agentd.secret_mask import SecretMask
from deskpod.agentd.screen_check import MOVE_HANDLED_SCRIPT, AfterPress, ControlCheck, check_control
from deskpod.agentd.settle import DamageSource, Settler, expected_input
from deskpod.agentd.browser.text_sources import build_sources, collection_expression
from deskpod.agentd.reply_fit import clean_page_url, cut_label, element_labels, fit_sources, with_page_content
from deskpod.errors import (
    BrowserError,
    DialogBlockedError,
    DisplayUnavailableError,
    InputError,
    InvalidRequestError,
    PageUnresponsiveError,
    ScreenChangedError,
)
from deskpod.protocol import (
    APPS,
    AppName,
    MAX_AX_BYTES,
    MAX_FRAMES,
    MAX_LABEL_CHARS,
    MAX_SERVER_MESSAGE_BYTES,
    MAX_SNAPSHOT_CHARS,
    MAX_TABS,
    MAX_TITLE_CHARS,
    Action,
    AgentWindow,
    CoordinateMap,
    Dialog,
    ElementInfo,
    FileChooser,
    FocusedElement,
    Observation,
    ObserveOptions,
    PageKeys,
    Point,
    ScreenExpectation,
    Tab,
    TextSource,
    Truncation,
    Unread,
    Window,
)
from deskpod.protocol.limits import MAX_PAGE_LOG_BYTES
from deskpod.protocol.observation import MAX_NEAR_LABELS

__all__ = ["AgentWindows", "Observer", "collect_text_sources"]

log = logging.getLogger(__name__)

_PING_TIMEOUT_S = 1.0
"""Longest wait for the focused client to confirm it handled the input, before settling."""

def _focused_element(info: dict[str, Any] | None) -> FocusedElement | None:
    """The focused element's description as the protocol holds it (strings and lists cut to
    its caps; ``None`` for none)."""
    if not info:
        return None
    lists = {k: [cut_label(v, MAX_LABEL_CHARS) for v in info.get(k) or []][:MAX_NEAR_LABELS]
             for k in ("form_labels", "near_buttons")}
    return FocusedElement(**{**element_labels({k: v for k, v in info.items() if k not in lists}), **lists})


def _tab(tab: dict[str, Any]) -> Tab:
    return Tab(id=cut_label(tab["id"], 128), url=clean_page_url(tab["url"]), title=cut_label(tab["title"], MAX_TITLE_CHARS),
               active=tab["active"])


def _dialog(dialog: OpenDialog) -> Dialog:
    return Dialog(type=dialog.type, message=dialog.message, default_prompt=dialog.default_prompt,
                  tab_id=cut_label(dialog.target_id, 128) or None, url=clean_page_url(dialog.url) or None)


class AgentWindows(Protocol):
    """Where the agent's own programs' windows are (:class:`~deskpod.agentd.display.xgate.XGate`).
    Either method raises :class:`~deskpod.errors.DisplayUnavailableError` when the display
    cannot be asked."""

    async def window_at(self, x: int, y: int) -> AgentWindowInfo | None:
        """The agent's window on top at screen point (``x``, ``y``), if one is."""
        ...

    async def focus_window(self) -> AgentWindowInfo | None:
        """The agent's window with the keyboard focus, if one has it."""
        ...

    def agent_window(self, window: int) -> bool:
        """Whether the X window ``window`` is one an agent's client made."""
        ...


def _agent_window(info: AgentWindowInfo | None, coords: CoordinateMap) -> AgentWindow | None:
    """An agent's window as the protocol reports it, its box in the model space."""
    if info is None:
        return None
    x0, y0, x1, y1 = info.box
    left, top = coords.to_model(x0, y0)
    right, bottom = coords.to_model(max(x0, x1 - 1), max(y0, y1 - 1))
    return AgentWindow(app=info.app, title=info.title, box=[left, top, right + 1, bottom + 1],
                       source=cast(AppName, info.source) if info.source in APPS else "command")


def _window(info: WindowInfo, coords: CoordinateMap, agent: bool) -> Window:
    """A listed window as the protocol reports it (``agent``: an agent's client made it)."""
    return Window(id=format_window_id(info.id), app=info.app, title=info.title, box=model_box(info.box, coords),
                  focused=info.focused, modal=info.modal, zone="agent" if agent else "sandbox")


def _unread(part: str, exc: Exception) -> Unread:
    """Why ``part`` could not be read: a dialog blocks its tab, a timeout (a page that does
    not answer, too), a page too large to read that way, or an error."""
    if isinstance(exc, DialogBlockedError):
        reason = "dialog_open"
    elif isinstance(exc, BrowserError) and exc.detail.get("reason") == "too_large":
        reason = "too_large"
    elif isinstance(exc, (TimeoutError, PageUnresponsiveError)) or isinstance(exc.__cause__, TimeoutError):
        reason = "timeout"
    else:
        reason = "browser_error"
    return Unread.model_validate({"part": part, "reason": reason})


async def collect_text_sources(browser: Browser, max_chars: int, max_ax_nodes: int = 2000) -> list[TextSource]:
    """Collect the active tab's readable text beyond ``innerText`` (:mod:`deskpod.agentd.browser.text_sources`).

    Args:
        browser: the daemon's DevTools client.
        max_chars: character budget for everything collected.
        max_ax_nodes: most accessibility nodes read.

    Returns:
        The entries.

    Raises:
        BrowserError: the browser could not be asked, or a JavaScript dialog blocks the
            page's scripts (:class:`~deskpod.agentd.browser.dialogs.DialogBlockedError`; its
            message is in the observation's ``dialogs``).
    """
    collected = await browser.evaluate(collection_expression(max_chars))
    try:
        summary, _ = await browser.accessibility(max_ax_nodes)
        ax_nodes = summary.nodes
    except BrowserError:
        ax_nodes = []
    return build_sources(collected, ax_nodes, max_chars)


class Observer:
    """Takes observations for one daemon.

    Args:
        executor: the serial X11 executor (frames, screenshots).
        browser: the DevTools client (URL, tabs, focus, dialogs, loading state).
        settle_by_signal: False: settle by the quiet window alone (:class:`Settler`).
        frame_interval: returns the time between two of Chromium's frames now, seconds
            (:attr:`~deskpod.agentd.session.DesktopSession.frame_interval_s`).
    """

    def __init__(self, executor: Executor, browser: Browser, settle_by_signal: bool,
                 frame_interval: Callable[[], float]) -> None:
        self.executor = executor
        self.browser = browser
        self.settler = Settler(browser, self._damage, executor.settle, self._ping, executor.input_sent,
                               settle_by_signal, frame_interval)
        """Settles by signal (:mod:`deskpod.agentd.settle`); :meth:`mark` it before a request's input."""
        self.elements = ElementActions(browser)
        """The element snapshot and its refs (:mod:`deskpod.agentd.browser.elements`)."""
        self.secret_mask: SecretMask | None = None
        """The session's secrets, replaced in every text of an observation (``None``: none)."""
        self.windows: AgentWindows | None = None
        """Where the agent's programs' windows are (``None``: this daemon grants no display)."""
        self.native: NativeReader | None = None
        """Reads the desktop applications' native controls (``None``: no applications' zone)."""
        self.native_refs = NativeRefs()
        """The refs of the latest native tree, which element actions take."""
        self.elements.native = self.native_refs

    def mark(self, actions: Sequence[Action], coords: CoordinateMap) -> None:
        """Note the start of a request, before its input (what settling then waits for),
        with the DOM event the last of its ``actions`` makes the page see
        (:func:`~deskpod.agentd.settle.expected_input`)."""
        self.settler.mark(expected_input(actions, coords))

    def _damage(self) -> DamageSource | None:
        damage: DamageSource | None = self.executor.damage
        return damage

    async def _ping(self) -> bool:
        return await self.executor.wait_handled(_PING_TIMEOUT_S)

    async def probe(self, with_text: bool) -> tuple[str | None, str | None]:
        """The active tab's URL and (when asked) visible text; ``(None, None)`` if unreachable."""
        try:
            page = await self.browser.state(1_000_000 if with_text else None)
        except BrowserError:
            return None, None
        return page.url, page.text

    async def observe(
        self,
        options: ObserveOptions,
        coords: CoordinateMap,
        force_shot: bool = False,
        outcome: BatchOutcome | None = None,
        max_reply_bytes: int = MAX_SERVER_MESSAGE_BYTES,
    ) -> Observation:
        """Observe the sandbox after a request.

        Page text is cut at ``options.max_text_chars`` and
        :data:`~deskpod.protocol.MAX_PAGE_TEXT_BYTES`, the accessibility summary at
        ``options.max_ax_nodes`` and :data:`~deskpod.protocol.MAX_AX_BYTES`, and both to
        what ``max_reply_bytes`` leaves once the rest of the observation is counted and
        to what ``options.max_content_bytes`` leaves once the snapshot (an eighth of it in
        characters at most), text sources (a quarter) and logs (an eighth each) are counted
        (page text first); the
        observation's ``truncated`` says what was cut.

        Args:
            options: what to include and whether to settle first.
            coords: the session's model space.
            force_shot: include a screenshot even if ``options.screenshot`` is off.
            outcome: timings, cursor, zoom and clipboard text produced by the batch.
            max_reply_bytes: the longest reply the client reads.

        Raises:
            OutOfBoundsError: ``options.element_at`` lies outside the model space.
            StaleRefError: ``options.element_ref`` is not a valid ref now.
            ExecutionError: the screen could not be captured.
        """
        started = time.perf_counter()
        if options.element_at is not None:
            coords.check(options.element_at.x, options.element_at.y)
        if options.element_ref is not None and options.element_at is not None:
            raise InvalidRequestError("give element_at or element_ref, not both")
        settled, settle_s, signal = None, 0.0, None
        wants_shot = options.screenshot or force_shot
        if options.settle:
            prepare = (lambda: self.executor.prepare_screenshot(coords, options.format, options.quality,
                                                                 options.cursor)) if wants_shot else None
            result = await self.settler.settle(options.settle_window_s, options.settle_timeout_s, prepare)
            settled, settle_s, signal = result.settled, result.waited_s, result.signal
        # The page's state is read over DevTools while the executor's thread captures and encodes.
        state = asyncio.create_task(self._page_state(options, coords))
        capture_s = None
        try:
            shot = None
            if wants_shot:
                captured = time.perf_counter()
                shot = await self.executor.screenshot(coords, options.format, options.quality, options.cursor)
                capture_s = round(time.perf_counter() - captured, 6)
        except BaseException:
            state.cancel()
            raise
        fields, text, summary = await state
        if fields.get("text_sources"):
            fields["text_sources"] = fit_sources(fields["text_sources"], options.max_content_bytes // 4)
        fields.update(await self._elements(options, coords, fields, max_reply_bytes))
        fields.update(await self._page_logs(options, fields, max_reply_bytes))
        fields.update(await self._agent_windows(options, coords, fields))
        if options.windows:
            fields["windows"] = await self._window_list(coords)
        outcome = outcome or BatchOutcome()
        observation = Observation(
            screenshot=shot,
            settled=settled,
            settle_s=round(settle_s, 6),
            settle_signal=signal,
            cursor=outcome.cursor,
            zoom=outcome.zoom,
            clipboard=outcome.clipboard,
            events=self.browser.take_events(),
            downloads=self.browser.downloads.take(),
            blocked=self.browser.requests.take_blocked(),
            timings=outcome.timings,
            observe_s=round(time.perf_counter() - started, 6),
            capture_s=capture_s,
            **fields,
        )
        observation = with_page_content(observation, options, text, summary, max_reply_bytes)
        return observation if self.secret_mask is None else self.secret_mask.observation(observation)

    async def element_at(self, x: int, y: int, coords: CoordinateMap) -> ElementInfo | None:
        """The element under the model-space point (x, y), described as in
        :attr:`~deskpod.protocol.Observation.element_at` (``None``: nothing there, or a dialog is open).

        Raises:
            BrowserError: the browser could not be asked.
        """
        return await self._element_at(x, y, coords)

    async def focused(self) -> FocusedElement | None:
        """The focused element, described as in :attr:`~deskpod.protocol.Observation.focused`
        (``None``: nothing has the focus).

        Raises:
            BrowserError: the browser could not be asked (a dialog is open, or it failed).
        """
        _, focused, _, _, _ = await self.browser.content(None, True, keys=False)
        return _focused_element(focused)

    def control_check(self, expect: ScreenExpectation, coords: CoordinateMap) -> ControlCheck:
        """The :data:`~deskpod.agentd.screen_check.ControlCheck` enforcing ``expect``
        through the browser (see :mod:`deskpod.agentd.screen_check`).

        Args:
            expect: the request's expectation.
            coords: the session's model space.
        """
        browser = self.browser

        async def check(index: int, point: tuple[int, int], first_press: bool, kind: str) -> AfterPress | None:
            element = url = focus = window = focus_window = None
            armed: ArmedPress | None = None
            try:
                if first_press and expect.element is not None:
                    if browser.dialogs.get(browser.active_id) is None:
                        await browser.evaluate(MOVE_HANDLED_SCRIPT, await_promise=True)
                        if expect.press_guard:
                            armed = await browser.arm_press(*coords.to_screen(*point), kind)
                    element = await self.element_at(point[0], point[1], coords)
                    if self.windows is not None:
                        window = _agent_window(await self.windows.window_at(*coords.to_screen(*point)), coords)
                if expect.url is not None:
                    url = (await browser.state()).url
                if expect.focus is not None:
                    focus = await self.focused()
                    if self.windows is not None:
                        focus_window = _agent_window(await self.windows.focus_window(), coords)
                check_control(expect, element, url, index, first_press, focus, window, focus_window)
            except (BrowserError, DisplayUnavailableError, TimeoutError) as exc:
                if armed is not None:
                    await browser.finish_press(armed, None)
                raise ScreenChangedError(f"the page could not be asked what is under the pointer ({exc}); "
                                         "nothing was pressed",
                                         detail={"reason": "element", "action_index": index}) from exc
            except ScreenChangedError:
                if armed is not None:
                    await browser.finish_press(armed, None)
                raise
            if armed is None:
                return None
            pressed = armed

            async def after(kind: str | None) -> None:
                await browser.finish_press(pressed, kind)

            return after

        return check

    async def _elements(self, options: ObserveOptions, coords: CoordinateMap, fields: dict[str, Any],
                        max_reply_bytes: int) -> dict[str, Any]:
        """The element snapshot and the target of ``element_ref``, when asked (an open dialog
        leaves the snapshot unread; a stale ref raises :class:`~deskpod.errors.StaleRefError`)."""
        out: dict[str, Any] = {}
        if options.element_ref is not None:
            x, y = await self.elements.point(options.element_ref, coords)
            out.update(element_ref_point=Point(x=x, y=y), element_at=await self._element_at(x, y, coords))
        if options.snapshot:
            try:
                shot = await self.elements.snapshot(options.max_ax_nodes,
                                                    min(MAX_SNAPSHOT_CHARS, max_reply_bytes // 8,
                                                        options.max_content_bytes // 8))
            except (TimeoutError, BrowserError) as exc:
                self.elements.table.clear()
                out["unread"] = [*fields.get("unread", []), _unread("snapshot", exc)]
                return out
            out["snapshot"] = shot.text
            if shot.truncated:
                out["truncated"] = Truncation(snapshot=True)
        return out

    async def _page_logs(self, options: ObserveOptions, fields: dict[str, Any], max_reply_bytes: int
                         ) -> dict[str, Any]:
        """The console and network logs, when asked, each within :data:`~deskpod.protocol.limits.MAX_PAGE_LOG_BYTES`
        a sixteenth of ``max_reply_bytes`` and an eighth of ``options.max_content_bytes`` (a log that cannot
        be read is listed in ``unread``)."""
        out: dict[str, Any] = {}
        unread: list[Unread] = []
        budget = min(MAX_PAGE_LOG_BYTES, max_reply_bytes // 16, options.max_content_bytes // 8)
        for part, asked, read in (("console", options.console, self.browser.read_console),
                                  ("network", options.network, self.browser.read_network)):
            if not asked:
                continue
            try:
                out[part] = await read(budget)
            except (TimeoutError, BrowserError) as exc:
                unread.append(_unread(part, exc))
        if unread:
            out["unread"] = [*fields.get("unread", []), *unread]
        return out

    async def _agent_windows(self, options: ObserveOptions, coords: CoordinateMap,
                             fields: dict[str, Any]) -> dict[str, Any]:
        """The agent's windows the observation names: the one on top at ``element_at``'s point
        (or ``element_ref``'s) and the one with the keyboard focus, and the native controls there
        when a desktop application made them (:func:`~.native_controls.native_fields`). A display
        that cannot be asked names none (logged)."""
        if self.windows is None:
            return {}
        point = options.element_at or fields.get("element_ref_point")
        screen = coords.to_screen(point.x, point.y) if point is not None else None
        at = focus = None
        try:
            if screen is not None:
                at = await self.windows.window_at(*screen)
            focus = await self.windows.focus_window()
        except DisplayUnavailableError as exc:
            log.warning("the agent's windows could not be read: %s", exc.message)
        out: dict[str, Any] = {"window_at": _agent_window(at, coords), "focus_window": _agent_window(focus, coords)}
        if self.native is not None:
            native = await native_fields(self.native, screen, at, focus, coords, options.accessibility,
                                         options.text_sources, self.native_refs)
            if (source := native.pop("native_text", None)) is not None:
                out["text_sources"] = [*(fields.get("text_sources") or []), source]
            if "unread" in native:
                native["unread"] = [*fields.get("unread", []), *native["unread"]]
            if fields.get("file_chooser") is not None:
                native.pop("file_chooser", None)  # the page's chooser goes first, as set_files answers it
            out.update(native)
        return out

    async def _window_list(self, coords: CoordinateMap) -> list[Window] | None:
        """The desktop's windows, the frontmost first, each marked with its zone (``None``: the
        window manager could not be asked; logged)."""
        try:
            listed = await self.executor.windows()
        except InputError as exc:
            log.warning("the windows could not be listed: %s", exc.message)
            return None
        gate = self.windows
        return [_window(info, coords, gate is not None and gate.agent_window(info.id)) for info in listed]

    async def _page_state(self, options: ObserveOptions, coords: CoordinateMap
                          ) -> tuple[dict[str, Any], str | None, AXSummary | None]:
        """The observation's browser fields, each part read on its own: a part that
        fails (or that an open dialog blocks) is left ``None`` and listed in ``unread``,
        and the others are still read. Returns the fields, the page text (one character
        more than asked, so a cut shows) and the accessibility summary, which
        :func:`_with_page_content` fits into the reply."""
        browser = self.browser
        fields: dict[str, Any] = {}
        unread: list[Unread] = []
        page_urls: dict[str, str] | None = None  # tab id -> URL, as the tabs were read
        frames: list[str] = []
        text: str | None = None
        summary: AXSummary | None = None
        try:
            page = await browser.state()
            page_urls = {str(t["id"]): str(t["url"]) for t in page.tabs}
            fields.update(url=clean_page_url(page.url), title=cut_label(page.title, MAX_TITLE_CHARS),
                          tabs=[_tab(t) for t in page.tabs[:MAX_TABS]])
        except (TimeoutError, BrowserError) as exc:
            log.warning("tabs unavailable: %s", exc)
            unread.append(_unread("tabs", exc))
        # Once the page is found blocked (a dialog, or no answer in time), its other parts
        # are not asked: each would wait as long again.
        blocked: Exception | None = None
        try:
            text, focused, keys, unread_frames, pdfs = await browser.content(
                options.max_text_chars + 1 if options.page_text else None, True)
            if pdfs:
                unread.append(Unread(part="page_text", reason="pdf"))
            fields["focused"] = _focused_element(focused)
            fields["page_keys"] = PageKeys(**keys) if keys is not None else None
            frames += unread_frames
        except (TimeoutError, BrowserError) as exc:
            blocked = exc if _unread("page_text", exc).reason != "browser_error" else None
            unread += [_unread(part, exc) for part in ("page_text", "focused") if part != "page_text" or options.page_text]
        if options.element_at is not None:
            try:
                if blocked is not None:
                    raise blocked
                fields["element_at"] = await self._element_at(options.element_at.x, options.element_at.y, coords)
            except (TimeoutError, BrowserError) as exc:
                blocked = exc if _unread("element_at", exc).reason != "browser_error" else blocked
                unread.append(_unread("element_at", exc))
        if options.accessibility:
            try:
                if blocked is not None:
                    raise blocked
                summary, unread_ax = await browser.accessibility(options.max_ax_nodes, MAX_AX_BYTES)
                frames += [u for u in unread_ax if u not in frames]
            except (TimeoutError, BrowserError) as exc:
                unread.append(_unread("accessibility", exc))
        if options.text_sources:
            try:
                if blocked is not None:
                    raise blocked
                fields["text_sources"] = await collect_text_sources(browser, options.max_scan_chars)
            except (TimeoutError, BrowserError) as exc:
                unread.append(_unread("text_sources", exc))
        if blocked is None:
            try:
                fields["permission_requests"] = await browser.take_permission_requests(fields.get("url"))
            except (TimeoutError, BrowserError) as exc:
                log.info("permission requests unread: %s", exc)
        chooser = browser.file_chooser
        if chooser is not None:
            fields["file_chooser"] = FileChooser(multiple=bool(chooser["multiple"]), tab=cut_label(chooser["tab"], 128))
        # Last, so a dialog that opened while the page was read is in this observation.
        dialogs = [_dialog(d) for d in browser.dialogs.ordered(browser.active_id, None if page_urls is None else list(page_urls))[:MAX_TABS]]
        fields.update(dialogs=dialogs, dialog=dialogs[0] if dialogs else None, unread=unread,
                      unread_frames=[clean_page_url(u) for u in frames[:MAX_FRAMES]],
                      unresponsive=browser.devtools.unresponsive.pages(page_urls or {}))
        return fields, text, summary

    async def _element_at(self, x: int, y: int, coords: CoordinateMap) -> ElementInfo | None:
        info = await self.browser.element_at(*coords.to_screen(x, y))
        if info is None:
            return None
        info = element_labels(info)
        box = info.pop("box", None)
        if box is not None:
            x0, y0 = coords.to_model(box[0], box[1])
            x1, y1 = coords.to_model(max(box[0], box[2] - 1), max(box[1], box[3] - 1))
            box = [x0, y0, x1 + 1, y1 + 1]
        return ElementInfo(
            tag=str(info.get("tag", "")), role=info.get("role"), name=info.get("name"), text=info.get("text"),
            href=info.get("href"), box=box, input_type=info.get("input_type"), download=bool(info.get("download")),
            form_action=info.get("form_action"), clickable=bool(info.get("clickable")), frame=info.get("frame"),
            frame_unreadable=bool(info.get("frame_unreadable")), options=info.get("options"),
        )
