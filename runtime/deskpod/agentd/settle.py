"""Settling by signal: when is the screen after a request the settled screen?

The first version waited for a quiet window: frames captured every 8 ms until the
screen had not changed for 50 ms. Most of that wait was the window itself, and a page
that changes more slowly than the window (a CSS transition, a fetch that answers late)
could still be caught half-way. :class:`Settler` waits for the signals that say what is
still going on, in this order, each bounded by the request's ``settle_timeout_s``:

1. **navigation**: no main-frame load in flight (``Page.frameStartedLoading`` /
   ``frameStoppedLoading``), and none the page has asked for and the browser not yet
   begun (``Page.frameRequestedNavigation``: a link, a form's submission, a script;
   :class:`~deskpod.agentd.browser.activity.NavigationActivity`), waited for at most
   :data:`NAVIGATION_START_S`; an open JavaScript dialog holds a load and the page's
   signals: the screen then settles once it has had no damage for :data:`DIALOG_QUIET_S`
   (at most :data:`DIALOG_DRAW_MAX_S`), so the dialog, or the tab a click brought to the
   front with it, is drawn. A load that begins while the page is asked (its script below ran in the
   document being left) starts the wait over in the new document.
2. **network**: every request the page started since the request began has finished
   (``Network.requestWillBeSent`` / ``loadingFinished`` / ``loadingFailed``, tracked by
   :class:`~deskpod.agentd.browser.activity.NetworkActivity`), for at most
   :data:`NETWORK_WAIT_MAX_S`; requests older than the request, event streams and
   websockets are not waited for. A frame's document request that moved with the frame to
   a process of its own (a cross-site frame, the PDF viewer) ends when that frame stops
   loading. The page's signal is asked again after the requests
   end (their answers change the page).
3. **animation** and **frame**: one script in the page (:data:`~deskpod.agentd.settle_script.PAGE_SETTLE_SCRIPT`, in
   an isolated world: the page's scripts cannot redefine what it calls) first waits,
   for at most :data:`INPUT_WAIT_MS`, until the DOM event of the request's last action
   has reached the page (:class:`ExpectedInput`, counted by a listener the script leaves
   in the document; only where the event can reach that document). The wait is *exact*
   when it is for every such event the request's input sent (the executor counts
   left-button presses and releases and key releases as it sends them), so it ends on
   the last key typed, not the first. After an exact wait the event and its handlers
   have run: the script waits a task turn (``setTimeout`` 0: the handlers' own deferred
   work runs before it) and one animation frame with the rendering update after it.
   Otherwise (the first settle in a document, a wheel, which Chromium may merge, an
   event that did not come in time) it waits for two animation frames, a task turn and
   one more frame: the input reaches the page's main thread on another channel than
   the script, and with one frame a click's deferred repaint was missed now and then
   (2 of 20 rounds on the shared machine; 0 of 60 with two). Then it waits for every finite running animation (CSS
   transitions and animations, Web Animations) to finish, frame by frame. A document
   hidden before it answers (a click opened a tab in front of it: a hidden document
   paints no frame, and the wait ran to the timeout) answers at once, and the tab now
   in front is asked instead, as the next document of a navigation is. Before it,
   unless the page is to wait for every event the input sent (its own wait orders it),
   the focused X client is pinged (``_NET_WM_PING``), so the browser has taken the
   input off its X queue and passed it on to the page first; when such a page could
   not wait after all (the point was on a frame or the browser's own window, the event
   did not come), the client is pinged then and the page asked again.
   When the tab's document is a PDF, its viewer (an out-of-process frame of the browser's
   own, whose plugin draws the document in a process of its own) is then waited for until it
   has the document (:mod:`deskpod.agentd.browser.pdf_viewer`): the tab stops loading before
   the viewer has even started, and until then it shows an empty grey area.
4. **damage**: the X server's damage reports (:class:`~deskpod.agentd.display.damage.DamageMonitor`)
   must then be quiet for :data:`PAGE_QUIET_S` (after an exact wait, which counted one
   frame, at least one frame of the display and :data:`EXACT_QUIET_SLACK_S`: a paint one
   frame later still extends the wait), long
   enough for the painted frame to reach the X server (compositor, display compositor,
   ``XShmPutImage``), or for 1.5 times the gap between the last two reports when frames
   come further apart (a loaded machine: up to :data:`DAMAGE_GAP_MAX_S`); when no damage
   at all has come since the input, the first one is awaited for up to
   :data:`FIRST_DAMAGE_S` (the frame may still be on its way). After a PDF's viewer, the quiet time is
   :data:`PDF_QUIET_S`: the page it draws next is no frame the page's signal follows.
5. **popup**: once a popup has opened since the request began (a top-level window with
   ``override_redirect`` created or mapped, :mod:`deskpod.agentd.display.popups`: the
   browser draws a ``<select>``'s list, a date or colour picker, a context menu, an
   autofill list in one, a moment after the input), the quiet time is at least
   :data:`POPUP_QUIET_S` and does not end before
   :data:`~deskpod.agentd.display.popups.POPUP_DRAW_S` past its map, or
   :data:`~deskpod.agentd.display.popups.POPUP_MAP_S` past the creation of one not mapped yet (the cap of an endless
   animation is stretched to it). The page's frame came before such a popup was drawn in
   about half the rounds (it maps up to 110 ms after it is created; the colour picker's
   content came up to 100 ms after its map). A popup created after the wait has ended is
   not waited for.

When the page cannot be asked (no browser, a page that does not answer, a native
window) or an animation never ends (``infinite``, a canvas redrawn every frame), the
fallback is the bounded quiet window: no damage for ``settle_window_s``, at most
:data:`FALLBACK_MAX_S` after the page's own signals when it runs an endless animation.
Without a damage monitor the quiet part polls frames as before.

The observation reports which signal ended the wait (``settle_signal``): the last one
that had to be waited for (``"popup"`` after a popup), ``"frame"`` when nothing was in
progress and no damage followed, ``"quiet_window"`` for the fallback, ``"dialog"``, or
``"timeout"``.
Durations are float seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from deskpod.agentd.browser.activity import NavigationActivity, NetworkActivity
from deskpod.agentd.display.popups import Opened
from deskpod.agentd.display.refresh import FALLBACK_REFRESH_HZ, frame_interval_s
from deskpod.agentd.settle_script import INPUT_EVENTS, PAGE_SETTLE_SCRIPT
from deskpod.errors import BrowserError
from deskpod.protocol import (
    Action,
    Click,
    CoordinateMap,
    DoubleClick,
    Drag,
    HoldKey,
    Keypress,
    MouseDown,
    MouseUp,
    Scroll,
    SettleSignal,
    TripleClick,
    TypeText,
)

__all__ = [
    "DAMAGE_GAP_FACTOR",
    "DAMAGE_GAP_MAX_S",
    "DIALOG_DRAW_MAX_S",
    "DIALOG_QUIET_S",
    "DamageSource",
    "EXACT_QUIET_SLACK_S",
    "ExpectedInput",
    "FALLBACK_MAX_S",
    "FIRST_DAMAGE_S",
    "INPUT_WAIT_MS",
    "MAX_DOCUMENTS",
    "NAVIGATION_START_S",
    "NETWORK_WAIT_MAX_S",
    "PAGE_QUIET_S",
    "PDF_QUIET_S",
    "POPUP_QUIET_S",
    "PopupSource",
    "SentInput",
    "SettleResult",
    "Settler",
    "expected_input",
]

log = logging.getLogger(__name__)

PAGE_QUIET_S: Final = 0.012
"""Damage-free time after the page's frame signal before the screen counts as settled:
the painted frame's way from the renderer to the X server (measured 2-8 ms on an idle
2-core machine)."""

EXACT_QUIET_SLACK_S: Final = 0.0033
"""When the script's wait for the input was exact and it counted one frame after the
input's events, the damage-free time after the page's frame is one frame of the display
(:class:`Settler`'s ``frame_interval``) plus this, and never less than
:data:`PAGE_QUIET_S` (the painted frame's way to the X server): what a handler paints one
frame later (deferred to a second animation frame) reaches the X server, and extends the
wait, before the screen counts as settled (20 ms at 60 Hz, 12 ms at 240 Hz)."""

NAVIGATION_START_S: Final = 0.25
"""Longest wait for the browser to begin a navigation the page asked for (a form's
submission, a link): one the page cancels, or the browser drops, never begins."""

MAX_DOCUMENTS: Final = 3
"""How many documents one settle wait follows when loads begin while the page is asked
(a redirecting page, a script that navigates on load); the timeout bounds each."""

DAMAGE_GAP_FACTOR: Final = 1.5
"""The quiet time is at least this many times the last gap between two damage reports
seen while waiting (frames drawn 20 ms apart on a loaded machine are one animation)..."""

DAMAGE_GAP_MAX_S: Final = 0.05
"""... up to this long."""

FIRST_DAMAGE_S: Final = 0.05
"""When the page has painted its frame but no damage has reached the X server since the
input yet: how long to wait for the first one (on the shared machine it came up to 16 ms
after the page's signal in half the rounds); none by then means nothing changed on screen."""

DIALOG_QUIET_S: Final = 0.1
"""Damage-free time that settles the screen beside an open JavaScript dialog (no page
signal then): a tab a click on the tab strip brought to the front, its dialog with it,
was drawn after the click's reply on main."""

DIALOG_DRAW_MAX_S: Final = 1.0
"""Longest wait for that quiet time (a screen that keeps changing beside the dialog)."""

FALLBACK_MAX_S: Final = 0.15
"""Longest wait for quiet after the page reported an endless animation (the screen never
stops changing there: the screenshot is one frame of it)."""

NETWORK_WAIT_MAX_S: Final = 1.0
"""Longest wait for the page's requests (a long poll never finishes); the other signals
are still waited for after it."""

PDF_QUIET_S: Final = 0.15
"""Damage-free time before the screen of a tab showing a PDF counts as settled, once its
viewer has the document (:mod:`deskpod.agentd.browser.pdf_viewer`): the viewer draws the
first page 10-35 ms after, in the plugin's own process, which no frame signal follows."""

POPUP_QUIET_S: Final = 0.05
"""The damage-free time once a popup has opened, at the least (a popup's parts are drawn
up to 60 ms apart on the shared machine)."""

INPUT_WAIT_MS: Final = 100
"""Longest wait, in the page, for the DOM event of the request's last action before the
frames are counted (:class:`ExpectedInput`); on an idle machine it comes within a few ms."""

class PopupSource(Protocol):
    """What settling needs of :class:`~deskpod.agentd.display.popups.Popups`."""

    @property
    def seq(self) -> int: ...

    def since(self, seq: int) -> Opened: ...


class DamageSource(Protocol):
    """What settling needs of :class:`~deskpod.agentd.display.damage.DamageMonitor`."""

    @property
    def seq(self) -> int: ...

    @property
    def popups(self) -> PopupSource: ...

    async def wait_for_change(self, after_seq: int, timeout_s: float) -> int: ...


@dataclass(frozen=True)
class ExpectedInput:
    """The DOM event a request's last action makes the page see: ``event`` (one of
    ``pointerup``, ``pointerdown``, ``wheel``, ``keyup``) and, for a pointer event,
    where (``x``, ``y``: screen pixels)."""

    event: str
    x: int | None = None
    y: int | None = None


def expected_input(actions: Sequence[Action], coords: CoordinateMap) -> ExpectedInput | None:
    """What the page should see of the last of ``actions`` (:class:`ExpectedInput`), or
    ``None`` when nothing is sure to reach it as a DOM event: a pointer action with no
    point or not of the left button (a context menu takes the release), a scroll of no
    notches, an empty text, an action that sends no input."""
    if not actions:
        return None
    last = actions[-1]
    if isinstance(last, (Click, DoubleClick, TripleClick, MouseDown, MouseUp)):
        if last.x is None or last.y is None or getattr(last, "button", "left") != "left":
            return None
        event, point = ("pointerdown" if isinstance(last, MouseDown) else "pointerup"), (last.x, last.y)
    elif isinstance(last, Drag):
        event, point = "pointerup", (last.path[-1].x, last.path[-1].y)
    elif isinstance(last, Scroll) and (last.scroll_x or last.scroll_y):
        event, point = "wheel", (last.x, last.y)
    elif isinstance(last, (Keypress, HoldKey)) or (isinstance(last, TypeText) and last.text):
        return ExpectedInput("keyup")
    else:
        return None
    x, y = coords.to_screen(*point)
    return ExpectedInput(event, x, y)


@dataclass(frozen=True)
class _Asked:
    """What the page's settle script answered: ``endless`` (an animation that never ends;
    ``None``: no answer), ``exact`` (its last run waited for every input event sent, see
    :meth:`Settler.mark`, and counted one frame after them), the ``signal`` it was waited
    for by (``network``, ``animation`` or ``None``), ``awaited``: its first run, the one
    given the expected input, waited for every input event sent (later runs, after the
    page's requests, are given none) and ``hidden``: the document was hidden before it
    answered (another tab came to the front: that one is to be asked)."""

    endless: bool | None
    exact: bool
    signal: SettleSignal | None
    awaited: bool = False
    hidden: bool = False


@dataclass(frozen=True)
class SettleResult:
    """How a settle wait ended: ``settled`` (False on timeout), ``waited_s``, ``signal``."""

    settled: bool
    waited_s: float
    signal: SettleSignal


class _Page(Protocol):
    """What settling needs of :class:`~deskpod.agentd.browser.cdp.Browser`."""

    loading: bool
    pdf_shown: bool
    network: NetworkActivity
    navigation: NavigationActivity
    device_scale_factor: float

    def dialog_open(self) -> bool: ...

    async def wait_loaded(self, timeout_s: float) -> bool: ...

    async def wait_pdf_loaded(self, timeout_s: float) -> bool: ...

    async def evaluate_isolated(self, expression: str, await_promise: bool = False) -> Any: ...


FramePoll = Callable[[float, float], Awaitable[tuple[bool, float]]]
"""``poll(window_s, timeout_s)`` → ``(stable, waited_s)``: frames compared until the
screen is unchanged for ``window_s`` (the executor's fallback without damage reports)."""

SentInput = Callable[[], Mapping[str, int]]
"""``sent()`` → how many of each DOM event the input sent so far makes a page see, by
event name (``pointerdown``, ``pointerup``, ``keyup``;
:meth:`~deskpod.agentd.executor.Executor.input_sent`)."""


class Settler:
    """Waits for the settled screen after a request (see the module docstring).

    Args:
        page: the browser (navigation, network, the page's frame and animation signal).
        damage: returns the X damage reports now (``None``: quiet is measured by comparing frames).
        poll_frames: compares frames (used without ``damage``).
        ping: waits until the focused X client has handled the input sent (False when
            it cannot be asked); errors are ignored.
        sent: the input's DOM events sent so far (:data:`SentInput`): what makes a wait
            for the input exact.
        by_signal: False: the quiet window alone, as before settling by signal (for
            benchmarks; ``DESKPOD_SETTLE_BY_SIGNAL``).
        frame_interval: returns the time between two of Chromium's frames now, seconds
            (the display's refresh rate, :mod:`deskpod.agentd.display.refresh`); 60 Hz when omitted.
    """

    def __init__(self, page: _Page, damage: Callable[[], DamageSource | None], poll_frames: FramePoll,
                 ping: Callable[[], Awaitable[bool]], sent: SentInput, by_signal: bool = True,
                 frame_interval: Callable[[], float] = lambda: frame_interval_s(FALLBACK_REFRESH_HZ)) -> None:
        self.page = page
        self.by_signal = by_signal
        self._frame_interval = frame_interval
        self._damage = damage
        self._poll_frames = poll_frames
        self._ping = ping
        self._sent = sent
        self._seq = 0
        self._popups = 0
        self._generation = page.network.mark()
        self._expect: ExpectedInput | None = None
        # The page's listener as the last settle left it, with the input sent before it asked.
        self._seen: dict[str, Any] | None = None
        self._sent_before: dict[str, int] = {}
        self._preparing: asyncio.Future[None] | None = None  # the screenshot encoded during the quiet time

    def mark(self, expect: ExpectedInput | None = None) -> None:
        """Note the start of a request, before its input: what happens from now on is
        what settling waits for, ``expect`` first (the page is asked to wait for that DOM
        event when its listener, installed by an earlier settle in the same document,
        can see it)."""
        damage = self._damage()
        self._seq = damage.seq if damage is not None else 0
        self._popups = damage.popups.seq if damage is not None else 0
        self._generation = self.page.network.mark()
        self._expect = expect

    async def _ping_focused(self) -> None:
        """Ping the focused X client (see :class:`Settler`); a hung or vanished one is
        logged, and the page is asked anyway."""
        try:
            await self._ping()
        except Exception as exc:
            log.debug("settle: the focused client was not pinged: %s", exc)

    def _new_events(self, expect: ExpectedInput, seen: dict[str, Any], sent: Mapping[str, int]) -> int:
        """How many ``expect.event`` events the input has sent since the page last
        reported its counts (``seen``)."""
        return sent.get(expect.event, 0) - seen["sent"].get(expect.event, 0)

    def _exact_expected(self) -> bool:
        """Whether the page will be asked to wait for every event of the expected kind
        sent since it last reported (:meth:`_script`): it then waits for them itself."""
        expect, seen = self._expect, self._seen
        return expect is not None and seen is not None and self._new_events(expect, seen, self._sent()) >= 1

    def _script(self, budget_ms: int) -> str:
        """The page's settle script called with ``budget_ms`` and, the first time after
        :meth:`mark`, the expected input counted from the listener's last counts.

        The wait is exact when the input has sent events of the expected kind since the
        page last reported its counts: the page should then count that many more (a
        page that misses some, such as a key the browser keeps, makes the wait run to
        :data:`INPUT_WAIT_MS`). The input sent so far is read before the page is asked,
        so input that arrives while it answers is counted by the page, never expected
        of it twice."""
        expect, seen = self._expect, self._seen
        self._expect = None
        sent = dict(self._sent())
        wanted: dict[str, Any] | None = None
        if expect is not None and seen is not None:
            count = seen["counts"].get(expect.event, 0)
            new = self._new_events(expect, seen, sent)
            exact = new >= 1
            wanted = {"doc": seen["doc"], "event": expect.event, "count": count + new - 1 if exact else count,
                      "exact": exact, "x": expect.x, "y": expect.y, "scale": self.page.device_scale_factor,
                      "wait_ms": INPUT_WAIT_MS}
        self._sent_before = sent
        return f"{PAGE_SETTLE_SCRIPT}({budget_ms}, {json.dumps(wanted)})"

    def _note_seen(self, answer: dict[str, Any]) -> bool:
        """Keep the listener's document id and counts the page reported, with the input
        sent before it was asked; returns whether its wait for the input was exact."""
        seen = answer.get("input")
        if not (isinstance(seen, dict) and isinstance(seen.get("doc"), str) and isinstance(seen.get("counts"), dict)):
            return False
        counts = {k: v for k, v in seen["counts"].items() if k in INPUT_EVENTS and isinstance(v, int)}
        self._seen = {"doc": seen["doc"][:64], "counts": counts, "sent": self._sent_before}
        return seen.get("exact") is True

    async def settle(self, window_s: float, timeout_s: float,
                     prepare: Callable[[], Awaitable[None]] | None = None) -> SettleResult:
        """Wait for the settled screen, at most ``timeout_s``.

        Args:
            window_s: the fallback quiet window (no page signal available).
            timeout_s: the longest wait.
            prepare: started in the background whenever the damage reports start a quiet
                time after new damage, one at a time: the screenshot that follows the
                wait is captured and encoded then, and reused when the screen is still
                the same (:meth:`~deskpod.agentd.executor.Executor.prepare_screenshot`).

        Returns:
            How the wait ended.
        """
        if not self.by_signal:
            return await self._window_only(window_s, timeout_s)
        started = time.monotonic()
        deadline = started + timeout_s
        page = self.page
        signal: SettleSignal | None = None
        asked: _Asked | None = None
        for document in range(MAX_DOCUMENTS):
            while (page.loading or page.navigation.pending()) and not page.dialog_open():
                signal = "navigation"
                left = deadline - time.monotonic()
                if left <= 0:
                    return SettleResult(False, time.monotonic() - started, "timeout")
                if page.navigation.pending():
                    await page.navigation.wait_begun(min(NAVIGATION_START_S, left))
                else:
                    await page.wait_loaded(left)
            if page.dialog_open():
                return await self._beside_dialog(started, deadline, prepare)
            # A page that can count the input's events needs no ping: its wait for them is the order.
            unpinged = document == 0 and self._exact_expected()
            if document == 0 and not unpinged:
                await self._ping_focused()
            loads = page.navigation.loads
            network_until = min(deadline, time.monotonic() + NETWORK_WAIT_MAX_S)
            asked = await self._ask_page(deadline, network_until)
            if unpinged and not asked.awaited and not asked.hidden and page.navigation.loads == loads \
                    and not page.dialog_open():
                # It could not (the point was on a frame or the browser's own window, the event did
                # not come): the browser is pinged and the page asked again, as without an expectation.
                await self._ping_focused()
                signal = asked.signal or signal
                asked = await self._ask_page(deadline, network_until)
            signal = asked.signal or signal
            if page.dialog_open():
                return await self._beside_dialog(started, deadline, prepare)
            if page.navigation.pending():
                signal = "navigation"
                await page.navigation.wait_begun(min(NAVIGATION_START_S, max(0.0, deadline - time.monotonic())))
            if page.navigation.loads == loads and not asked.hidden:
                break
            # The document asked was left (a load began in the tab, or another tab came to the
            # front and hid it): ask the one now shown.
            signal = "navigation"
        # A PDF's viewer draws its document well after the tab stopped loading: it is waited for.
        pdf_quiet_s = 0.0
        if page.pdf_shown and not page.dialog_open():
            if not await page.wait_pdf_loaded(max(0.0, deadline - time.monotonic())):
                return SettleResult(False, time.monotonic() - started, "timeout")
            signal, pdf_quiet_s = "navigation", PDF_QUIET_S
        if asked is None or asked.endless is None:
            if page.dialog_open():  # it opened while the page was asked, and blocks the page
                return await self._beside_dialog(started, deadline, prepare)
            return await self._quiet(max(window_s, pdf_quiet_s), started, deadline, "quiet_window", deadline, prepare)
        cap = min(deadline, time.monotonic() + FALLBACK_MAX_S) if asked.endless else deadline
        fallback: SettleSignal | None = "quiet_window" if asked.endless else None
        quiet_s = max(PAGE_QUIET_S, self._frame_interval() + EXACT_QUIET_SLACK_S) if asked.exact else PAGE_QUIET_S
        return await self._quiet(max(quiet_s, pdf_quiet_s), started, deadline, fallback or signal, cap, prepare)

    async def _ask_page(self, deadline: float, network_until: float) -> _Asked:
        """Wait for the page's requests since :meth:`mark` (until ``network_until``), then
        run the page's settle script, again while requests it waited through are still
        in flight; see :class:`_Asked`."""
        page = self.page
        signal: SettleSignal | None = None
        awaited: bool | None = None
        while True:
            if page.network.pending_since(self._generation) and time.monotonic() < network_until:
                signal = "network"
                await page.network.wait_idle(self._generation, max(0.0, network_until - time.monotonic()))
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                answer = await asyncio.wait_for(
                    page.evaluate_isolated(self._script(left_ms), await_promise=True),
                    max(0.001, deadline - time.monotonic()))
            except (BrowserError, TimeoutError) as exc:
                log.debug("settle: no page signal: %s", exc)
                return _Asked(None, False, signal, bool(awaited))
            if not isinstance(answer, dict):
                return _Asked(None, False, signal, bool(awaited))
            if answer.get("hidden") is True:
                return _Asked(None, False, signal, bool(awaited), hidden=True)
            exact = self._note_seen(answer)
            awaited = exact if awaited is None else awaited
            if answer.get("animations"):
                signal = "animation"
            if page.dialog_open() or not page.network.pending_since(self._generation) \
                    or time.monotonic() >= network_until:
                return _Asked(bool(answer.get("endless")), exact, signal, awaited)

    async def _beside_dialog(self, started: float, deadline: float,
                             prepare: Callable[[], Awaitable[None]] | None) -> SettleResult:
        """Settled beside an open JavaScript dialog, which holds the page's signals: once the
        screen has had no damage for :data:`DIALOG_QUIET_S` (the dialog, or a tab brought to
        the front with it, is drawn after the input), at most :data:`DIALOG_DRAW_MAX_S`."""
        cap = min(deadline, time.monotonic() + DIALOG_DRAW_MAX_S)
        drawn = await self._quiet(DIALOG_QUIET_S, started, deadline, "dialog", cap, prepare)
        return SettleResult(True, drawn.waited_s, "dialog")

    async def _window_only(self, window_s: float, timeout_s: float) -> SettleResult:
        """The quiet window alone: frames compared until unchanged for ``window_s``, and
        no navigation in flight (an open dialog holds a load and counts as settled)."""
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            stable, _ = await self._poll_frames(window_s, max(0.0, deadline - time.monotonic()))
            if not self.page.loading or self.page.dialog_open():
                return SettleResult(stable, time.monotonic() - started, "quiet_window" if stable else "timeout")
            if time.monotonic() >= deadline:
                return SettleResult(False, time.monotonic() - started, "timeout")
            await self.page.wait_loaded(max(0.0, deadline - time.monotonic()))

    async def _quiet(self, quiet_s: float, started: float, deadline: float, signal: SettleSignal | None,
                     cap: float, prepare: Callable[[], Awaitable[None]] | None) -> SettleResult:
        """Wait until the screen has had no damage for ``quiet_s`` (until ``cap``: then
        settled with the fallback's signal; the ``deadline`` alone means a timeout),
        starting ``prepare`` (see :meth:`settle`) when it starts a quiet time after damage.
        Once a popup has opened since :meth:`mark`, the quiet time is at least
        :data:`POPUP_QUIET_S` and lasts until it is drawn (:meth:`~deskpod.agentd.display.popups.Opened.drawn_by`),
        the cap of an endless animation too."""
        damage = self._damage()
        if damage is None:
            stable, _ = await self._poll_frames(quiet_s, max(0.0, cap - time.monotonic()))
            settled = stable or cap < deadline
            return SettleResult(settled, time.monotonic() - started,
                                (signal or "frame") if stable else "quiet_window" if settled else "timeout")
        seen = damage.seq
        damaged = seen > self._seq
        if damaged:
            self._start_preparing(prepare)
        first = quiet_s < FIRST_DAMAGE_S and not damaged  # the page's signal, and no paint seen yet
        last_at, gap = time.monotonic(), 0.0
        while True:
            now = time.monotonic()
            # Frames drawn further apart than the quiet time (a loaded machine) stretch it.
            quiet = max(quiet_s, min(DAMAGE_GAP_MAX_S, DAMAGE_GAP_FACTOR * gap))
            popup_until = damage.popups.since(self._popups).drawn_by()
            if popup_until is not None:
                quiet, cap_now = max(quiet, POPUP_QUIET_S), min(deadline, max(cap, popup_until))
            else:
                popup_until, cap_now = 0.0, cap
            settles_at = max(last_at + (FIRST_DAMAGE_S if first else quiet), popup_until)
            if now >= settles_at:
                popup = popup_until > 0 and signal != "quiet_window"
                return SettleResult(True, now - started, "popup" if popup else signal or ("damage" if damaged else "frame"))
            if now >= cap_now:
                settled = cap_now < deadline
                return SettleResult(settled, now - started, "quiet_window" if settled else "timeout")
            new = await damage.wait_for_change(seen, min(settles_at, cap_now) - now)
            if new == seen:
                continue
            if damaged:
                gap = time.monotonic() - last_at
            first = False
            last_at, seen, damaged = time.monotonic(), new, True
            self._start_preparing(prepare)

    def _start_preparing(self, prepare: Callable[[], Awaitable[None]] | None) -> None:
        """Start ``prepare`` in the background unless the last one is still running."""
        if prepare is not None and (self._preparing is None or self._preparing.done()):
            self._preparing = asyncio.ensure_future(prepare())
