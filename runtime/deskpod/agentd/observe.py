"""Building the observation after a request: settle, screenshot, browser state.

The daemon produces every field from the environment itself (frames from the X
server, state from CDP); nothing is taken from what a page claims about itself,
and everything page-derived stays marked untrusted in the protocol's docs.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from deskpod.agentd.cdp import Browser
from deskpod.agentd.executor import BatchOutcome, Executor
from deskpod.errors import BrowserError
from deskpod.protocol import (
    MAX_DIALOG_CHARS,
    MAX_LABEL_CHARS,
    MAX_TABS,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    AXNode,
    CoordinateMap,
    Dialog,
    ElementInfo,
    FocusedElement,
    Observation,
    ObserveOptions,
    Tab,
)

__all__ = ["Observer"]

log = logging.getLogger(__name__)

_URL_FIELDS = ("href", "form_action")


def _cut(value: Any, limit: int) -> Any:
    """A page-derived string cut to ``limit`` characters (other values unchanged)."""
    return value[:limit] if isinstance(value, str) else value


_URL_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _url(value: Any) -> Any:
    """A URL with any raw control character percent-encoded (a browser never reports
    one; the protocol refuses them) and cut to the protocol's cap."""
    if not isinstance(value, str):
        return value
    return _URL_CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", value)[:MAX_URL_CHARS]


def _labels(info: dict[str, Any]) -> dict[str, Any]:
    """An element description with every string cut to the protocol's caps (the
    controller refuses a reply beyond them)."""
    return {k: _url(v) if k in _URL_FIELDS else _cut(v, MAX_LABEL_CHARS) for k, v in info.items()}


def _tab(tab: dict[str, Any]) -> Tab:
    return Tab(id=_cut(tab["id"], 128), url=_url(tab["url"]), title=_cut(tab["title"], MAX_TITLE_CHARS),
               active=tab["active"])


class Observer:
    """Takes observations for one daemon.

    Args:
        executor: the serial X11 executor (frames, screenshots).
        browser: the DevTools client (URL, tabs, focus, dialogs, loading state).
    """

    def __init__(self, executor: Executor, browser: Browser) -> None:
        self.executor = executor
        self.browser = browser

    async def settle(self, options: ObserveOptions) -> tuple[bool, float]:
        """Wait until the screen is stable for ``settle_window_s`` and no main-frame
        navigation is in flight, at most ``settle_timeout_s``.

        Returns:
            ``(settled, waited_s)``.
        """
        started = time.monotonic()
        deadline = started + options.settle_timeout_s
        while True:
            stable, _ = await self.executor.settle(options.settle_window_s, max(0.0, deadline - time.monotonic()))
            if not self.browser.loading:
                return stable, time.monotonic() - started
            if time.monotonic() >= deadline:
                return False, time.monotonic() - started
            await self.browser.wait_loaded(max(0.0, deadline - time.monotonic()))

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
    ) -> Observation:
        """Observe the sandbox after a request.

        Args:
            options: what to include and whether to settle first.
            coords: the session's model space.
            force_shot: include a screenshot even if ``options.screenshot`` is off.
            outcome: timings, cursor and zoom produced by the batch.

        Raises:
            OutOfBoundsError: ``options.element_at`` lies outside the model space.
            ExecutionError: the screen could not be captured.
        """
        started = time.perf_counter()
        if options.element_at is not None:
            coords.check(options.element_at.x, options.element_at.y)
        settled, settle_s = (None, 0.0)
        if options.settle:
            settled, settle_s = await self.settle(options)
        shot = None
        if options.screenshot or force_shot:
            shot = await self.executor.screenshot(coords, options.format, options.quality, options.cursor)
        fields: dict[str, Any] = {}
        try:
            page = await self.browser.state(options.max_text_chars if options.page_text else None, focus=True)
            dialog = self.browser.dialog
            fields.update(
                url=_url(page.url),
                title=_cut(page.title, MAX_TITLE_CHARS),
                page_text=page.text,
                tabs=[_tab(t) for t in page.tabs[:MAX_TABS]],
                focused=FocusedElement(**_labels(page.focused)) if page.focused else None,
                dialog=Dialog(**{k: _cut(v, MAX_DIALOG_CHARS) for k, v in dialog.items()}) if dialog else None,
            )
            if options.element_at is not None:
                fields["element_at"] = await self._element_at(options.element_at.x, options.element_at.y, coords)
            if options.accessibility:
                nodes = await self.browser.accessibility(options.max_ax_nodes)
                fields["accessibility"] = [AXNode(**_labels(n)) for n in nodes]
        except (TimeoutError, BrowserError) as exc:
            log.warning("page state unavailable: %s", exc)
        outcome = outcome or BatchOutcome()
        return Observation(
            screenshot=shot,
            settled=settled,
            settle_s=round(settle_s, 6),
            cursor=outcome.cursor,
            zoom=outcome.zoom,
            events=self.browser.take_events(),
            blocked=self.browser.requests.take_blocked(),
            timings=outcome.timings,
            observe_s=round(time.perf_counter() - started, 6),
            **fields,
        )

    async def _element_at(self, x: int, y: int, coords: CoordinateMap) -> ElementInfo | None:
        info = await self.browser.element_at(*coords.to_screen(x, y))
        if info is None:
            return None
        info = _labels(info)
        box = info.pop("box", None)
        if box is not None:
            x0, y0 = coords.to_model(box[0], box[1])
            x1, y1 = coords.to_model(max(box[0], box[2] - 1), max(box[1], box[3] - 1))
            box = [x0, y0, x1 + 1, y1 + 1]
        return ElementInfo(
            tag=str(info.get("tag", "")), role=info.get("role"), name=info.get("name"), text=info.get("text"),
            href=info.get("href"), box=box, input_type=info.get("input_type"), download=bool(info.get("download")),
            form_action=info.get("form_action"),
        )
