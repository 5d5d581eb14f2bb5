"""The daemon's one serial executor: every X11 call runs on a single thread.

python-xlib connections and mss capture objects belong to the thread that made
them, and input must never interleave, so :class:`Executor` owns one worker
thread that creates the :class:`~deskpod.agentd.display.xinput.XInput` and
:class:`~deskpod.agentd.display.capture.ScreenCapture` objects and runs every action
(:mod:`deskpod.agentd.display.actions`), screenshot (:mod:`deskpod.agentd.screenshots`),
settle probe and release on them, one at a time. A request's batch and what it runs
with come as one :class:`~deskpod.agentd.batch.Batch`.

With a :class:`~deskpod.protocol.ScreenExpectation`, every bound pointer action is
checked right before its input (:mod:`deskpod.agentd.screen_check`): the region
under its points against the raw frame of the screenshot it was planned on, then,
with the pointer moved there, the control under it; a mismatch stops the batch with
:class:`~deskpod.errors.ScreenChangedError` before that action's button is touched.

Actions are validated in full (coordinates in the model space, key names)
before the first one runs (:func:`~deskpod.agentd.batch.validate_batch`), so a bad batch
has no effect. An element action
(``click_element``...) is resolved right before it runs into the pointer and key
actions at its element's box (:mod:`deskpod.agentd.browser.elements`), which then run
and are guarded exactly like the same actions sent with coordinates. A ``navigate`` loads
its URL through the browser (DevTools, never the address bar: :attr:`Batch.load
<deskpod.agentd.batch.Batch.load>`), as a dialog answer does. Whatever an action
pressed is released when it fails, when the request times out, and when the
client disconnects; the executor lock is released in every case.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from deskpod import keys
from deskpod.agentd.batch import Batch, BatchOutcome
from deskpod.agentd.browser.elements import ElementActions
from deskpod.agentd.browser.fasttype import INSERT_MIN_CHARS, Insert, split_for_insertion
from deskpod.agentd.browser.tab_keys import tab_move
from deskpod.agentd.display.actions import CANCELLED, chord_names, execute
from deskpod.agentd.display.capture import ScreenCapture
from deskpod.agentd.clipboard_bridge import ClipboardBridge
from deskpod.agentd.display.clipboard import XClipboard
from deskpod.agentd.display.damage import DamageMonitor
from deskpod.agentd.display.fit import FittedImage
from deskpod.agentd.display.mask_paint import MaskPlan, no_mask
from deskpod.agentd.display.xinput import XInput
from deskpod.agentd.display.xwindows import WindowInfo, XWindows
from deskpod.agentd.wait_for import wait_for
from deskpod.agentd.screen_check import AfterPress, FrameStore, check_region
from deskpod.agentd.screenshots import ScreenshotEncoder
from deskpod.errors import (
    ActionTimeoutError,
    BrowserError,
    CaptureError,
    DeskpodError,
    ExecutionError,
    InputError,
)
from deskpod.protocol import (
    Action,
    BOUND_POINTER_ACTIONS,
    ELEMENT_ACTION_TYPES,
    MAX_SCREENSHOT_BASE64_BYTES,
    PRESS_ACTIONS,
    ActionTiming,
    ClipboardRead,
    ClipboardWrite,
    CoordinateMap,
    DropFiles,
    Keypress,
    Point,
    ScreenExpectation,
    Screenshot,
    SelectOption,
    SetFiles,
    TypeText,
    WaitFor,
    WindowClose,
    WindowFocus,
    WindowMove,
    WindowResize,
    Zoom,
    action_points,
)

__all__ = ["Executor", "SETTLE_POLL_S", "TAB_SHOWN_QUIET_S", "TAB_SHOWN_TIMEOUT_S"]

log = logging.getLogger(__name__)

SETTLE_POLL_S = 0.008
"""Seconds between frames while waiting for the screen to settle (capture costs ~1 ms)."""

TAB_SHOWN_TIMEOUT_S = 2.0
"""Longest wait, seconds, for the screen to show a tab a tab-switching key brought to the front."""

TAB_SHOWN_QUIET_S = 0.1
"""Seconds the screen holds still once it changed for such a tab: its page and dialog are drawn."""

class _Cancelled(Exception):
    """Raised when the request was cancelled (timeout, disconnect): the batch stops there."""


class Executor:
    """Runs actions, screenshots and settle probes serially on one X11 thread.

    Args:
        display: the X display name, e.g. ``":99"``.
    """

    def __init__(self, display: str) -> None:
        self.display = display
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="deskpod-x11")
        self._input: Any = None
        self._capture: Any = None
        self._windows: Any = None
        self.frames = FrameStore()
        """Raw frames of the last screenshots, by their SHA-256 (executor thread only)."""
        self._shots = ScreenshotEncoder(self.frames)
        self.lock = asyncio.Lock()
        self.max_image_base64_bytes = MAX_SCREENSHOT_BASE64_BYTES
        """The longest base64 text of a screenshot or zoom image; the request holding
        :attr:`lock` sets it (its connection's ``configure`` and declared message size)."""
        self.damage: Any = None
        """The X server's damage reports (:class:`~deskpod.agentd.display.damage.DamageMonitor`)
        while the X connection is open; ``None`` when the server has no DAMAGE extension."""
        self.insert_text: Insert | None = None
        """Inserts long runs of typed text at the page's focus
        (:meth:`deskpod.agentd.browser.cdp.Browser.insert_text`); ``None``: every key is typed."""
        self.set_files: Callable[[SetFiles], Awaitable[None]] | None = None
        """Runs ``set_files`` (:class:`deskpod.agentd.browser.file_chooser.FileSetter`); ``None``: refused."""
        self.native_files: Callable[[SetFiles], Awaitable[list[Action] | None]] | None = None
        """The input that answers an application's focused file dialog with a ``set_files``
        (:meth:`deskpod.agentd.native_files.NativeFileDialog.keys`; ``None`` from it: no such
        dialog); ``None``: no applications' zone."""
        self.drop_files: Callable[[DropFiles, int, int], Awaitable[None]] | None = None
        """Runs ``drop_files`` at a screen point (:meth:`deskpod.agentd.browser.file_chooser.FileSetter.drop`);
        ``None``: refused."""
        self.cancel_chooser: Callable[[], bool] | None = None
        """Closes the open file chooser, as Escape does a native one, and says whether one was
        open (:meth:`deskpod.agentd.browser.file_chooser.FileSetter.cancel`); ``None``: no browser."""
        self.switch_tab: Callable[[list[str]], Awaitable[bool]] | None = None
        """Carries out a tab-switching key through DevTools while a dialog in another tab makes
        Chromium drop it, and says whether it did (:meth:`deskpod.agentd.browser.tab_switch.TabSwitching.switch_tab`);
        ``None``: every key is pressed."""
        self.agent_window: Callable[[int], bool] = lambda window: False
        """Whether an X window is one an agent's client made (:meth:`deskpod.agentd.display.xgate.XGate.agent_window`)."""
        self.clipboard = XClipboard(lambda: self.display)
        """The display's clipboard, through the daemon's own X connection."""
        self.clipboard_bridge = ClipboardBridge(self.clipboard)
        """Where ``clipboard_read`` and ``clipboard_write`` go (the daemon adds the zones')."""
        self.elements: ElementActions | None = None
        """Resolves element actions to input (:mod:`deskpod.agentd.browser.elements`); ``None``: refused."""
        self.mask_plan: Callable[[], Awaitable[MaskPlan]] = no_mask
        """Where the session's secrets show now, painted over every screenshot and zoom
        (:meth:`deskpod.agentd.secret_mask.SecretMask.plan`)."""

    async def _submit(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    async def start(self) -> tuple[int, int]:
        """Open the X connection and the capture object, and grab one frame.

        Returns:
            The screen size ``(width, height)`` in pixels.

        Raises:
            InputError: the X server or its XTEST extension is unavailable.
            CaptureError: the screen cannot be captured (fail fast).
        """
        return await self._submit(self._start)

    def _start(self) -> tuple[int, int]:
        self._input = XInput(self.display, lambda window: self.agent_window(window))
        self._windows = XWindows(self.display)
        self._capture = ScreenCapture(self.display)
        self._capture.health_check()
        monitor = DamageMonitor(self.display)
        try:
            monitor.start()
            self.damage = monitor
        except CaptureError as exc:
            log.warning("no damage reports, settling compares frames: %s", exc.message)
        return self._input.screen_size

    async def run(self, batch: Batch, timeout_s: float) -> BatchOutcome:
        """Execute ``batch.actions`` in order.

        Args:
            batch: the request's actions and what they run with (:class:`Batch`).
            timeout_s: deadline for the whole batch, seconds.

        Returns:
            The :class:`BatchOutcome` of the executed actions (``batch.outcome``).

        Raises:
            ActionTimeoutError: the batch ran past ``timeout_s`` or a ``wait_for``
                condition was not met in time; input is released.
            ExecutionError: an action failed (``detail["action_index"]``); input is released.
            ScreenChangedError: ``batch.expect`` did not hold for an action; nothing of it
                was pressed (earlier actions ran); input is released.
        """
        try:
            await asyncio.wait_for(self._run(batch), timeout_s)
        except ActionTimeoutError:  # a wait_for's own deadline: already says which
            raise
        except TimeoutError as exc:
            batch.cancel.set()
            await self.release_all()
            raise ActionTimeoutError(
                f"actions did not finish within {timeout_s:.1f} s; every key and button was released",
                detail={"timeout_s": timeout_s, "completed": len(batch.outcome.timings)},
            ) from exc
        return batch.outcome

    async def _run(self, batch: Batch) -> None:
        cancel = batch.cancel
        for index, action in enumerate(batch.actions):
            if cancel.is_set():
                break
            kind = action.type
            started = time.perf_counter()
            # An element action runs as the input it is resolved to, each step resolved
            # right before it runs (a fill_form's fields one after the other).
            pending: list[Action] = [action]
            try:
                while pending and not cancel.is_set():
                    step = pending.pop(0)
                    if step.type in ELEMENT_ACTION_TYPES and not isinstance(step, SelectOption):
                        if self.elements is None:
                            raise ExecutionError("this executor cannot act on element refs: no browser")
                        pending[0:0] = await self.elements.expand(step, batch.coords)
                        continue
                    await self._step(batch, step, index)
            except _Cancelled:
                break
            except DeskpodError as exc:
                await self.release_all()
                exc.detail.update({"action_index": index, "action": kind})
                if isinstance(exc, (InputError, CaptureError)):
                    if cancel.is_set():
                        break
                    raise ExecutionError(f"action {index} ({kind}): {exc.message}", detail=exc.detail) from exc
                raise
            except Exception as exc:
                await self.release_all()
                log.exception("action %d failed", index)
                raise ExecutionError(
                    f"action {index} ({kind}) failed: {type(exc).__name__}",
                    detail={"action_index": index, "action": kind},
                ) from exc
            batch.outcome.timings.append(
                ActionTiming(index=index, type=kind, duration_s=round(time.perf_counter() - started, 6))
            )

    async def _step(self, batch: Batch, action: Action, index: int) -> None:
        """Run one (resolved) action of ``batch``, guarded by its expectation; note in
        ``batch.pressed`` whether a press action has run in the request so far."""
        kind, expect = action.type, batch.expect
        if isinstance(action, SelectOption):
            # Chosen through DevTools, after the same check as a click at the select's centre.
            if self.elements is None:
                raise ExecutionError("this executor cannot act on element refs: no browser")
            guarded = None
            if expect is not None:
                point = batch.coords.to_screen(*await self.elements.point(action.ref, batch.coords))
                guarded = await self._guard(batch, action, index, expect, [point])
            try:
                await self.elements.select(action)
            finally:
                if guarded is not None:
                    await guarded(None)  # no press event: the guard is disarmed, not waited for
            batch.pressed = True
            return
        after = None
        if expect is not None and (kind in BOUND_POINTER_ACTIONS or expect.radius_px is None):
            after = await self._guard(batch, action, index, expect)
            batch.pressed = batch.pressed or kind in PRESS_ACTIONS
        if after is None:
            await self._input_of(batch, action)
            return
        try:
            await self._input_of(batch, action)
        except BaseException:
            await after(None)
            raise
        await after(kind)

    async def _input_of(self, batch: Batch, action: Action) -> None:
        """Send ``action``'s input (or do what it asks of the browser), checks done."""
        coords, cancel = batch.coords, batch.cancel
        if isinstance(action, WaitFor):
            if not await wait_for(action, cancel, batch.probe, lambda: self._submit(self._digest)):
                raise _Cancelled
        elif isinstance(action, Zoom):
            batch.outcome.zoom = await self._zoom(action, coords)
        elif isinstance(action, SetFiles):
            if self.native_files is not None and (steps := await self.native_files(action)) is not None:
                for step in steps:
                    await self._submit(self._execute, step, coords, cancel)
            elif self.set_files is None:
                raise ExecutionError("this daemon cannot set files", detail={"reason": "no_file_chooser"})
            else:
                await self.set_files(action)
        elif isinstance(action, DropFiles):
            if self.drop_files is None:
                raise ExecutionError("this daemon cannot drop files: no browser")
            await self.drop_files(action, *coords.to_screen(action.x, action.y))
        elif isinstance(action, ClipboardRead):
            batch.outcome.clipboard = await self.clipboard_bridge.read()
        elif isinstance(action, ClipboardWrite):
            await self.clipboard_bridge.write(action.text)
        elif isinstance(action, Keypress) and self._closes_chooser(action):
            return  # Escape went to the file chooser, as it goes to a native one, not to the page
        elif isinstance(action, Keypress) and await self._switches_tab(action):
            return  # the tab the key names came to the front (Chromium drops the key beside a dialog)
        elif isinstance(action, TypeText) and self.insert_text is not None and len(action.text) >= INSERT_MIN_CHARS:
            await self._type_inserting(action.text, coords, cancel)
        elif (handler := batch.handler(action)) is not None:
            await handler(action)
        elif isinstance(action, (WindowFocus, WindowClose, WindowMove, WindowResize)):
            await self._submit(self._windows.act, action, coords)
        else:
            cursor = await self._submit(self._execute, action, coords, cancel)
            if cursor == CANCELLED:
                raise _Cancelled
            if cursor is not None:
                batch.outcome.cursor = Point(x=cursor[0], y=cursor[1])

    async def _switches_tab(self, action: Keypress) -> bool:
        """Whether ``action`` is a tab-switching key that :attr:`switch_tab` carried out; the
        screen then showed the tab (it changed, then stayed the same for
        :data:`TAB_SHOWN_QUIET_S`; at most :data:`TAB_SHOWN_TIMEOUT_S`), since an open dialog
        ends the settle at once."""
        chord = keys.resolve_chord(chord_names(action.keys))
        if self.switch_tab is None or tab_move(chord) is None:
            return False
        before = await self._submit(self._digest)
        if not await self.switch_tab(chord):
            return False
        await self._submit(self._redrawn, before, TAB_SHOWN_TIMEOUT_S)
        return True

    def _redrawn(self, before: bytes, timeout_s: float) -> None:
        """Wait until the screen differs from the frame of digest ``before``, then until it
        holds still for :data:`TAB_SHOWN_QUIET_S`, at most ``timeout_s`` in all."""
        start = time.monotonic()
        while self._digest() == before and time.monotonic() - start < timeout_s:
            time.sleep(SETTLE_POLL_S)
        self._settle(TAB_SHOWN_QUIET_S, max(0.0, timeout_s - (time.monotonic() - start)))

    async def windows(self) -> list[WindowInfo]:
        """The desktop's managed windows, the frontmost first (what window actions may name from now
        on: :meth:`~deskpod.agentd.display.xwindows.XWindows.list_windows`).

        Raises:
            InputError: the display could not be asked.
        """
        return await self._submit(lambda: self._windows.list_windows())

    def _closes_chooser(self, action: Keypress) -> bool:
        """Whether ``action`` is Escape alone and closed an open file chooser."""
        if self.cancel_chooser is None or keys.resolve_chord(chord_names(action.keys)) != ["Escape"]:
            return False
        return self.cancel_chooser()

    async def _guard(self, batch: Batch, action: Action, index: int, expect: ScreenExpectation,
                     at: list[tuple[int, int]] | None = None) -> AfterPress | None:
        """Enforce ``expect`` (``batch.expect``) for one action, right before its input:
        the region (before the pointer moves), then, for the request's first press action
        with the pointer moved to its point, the control (when ``expect`` names one); the
        URL for every checked action.

        Returns:
            The press guard's :data:`~deskpod.agentd.screen_check.AfterPress`, to call once
            the action's input is sent, when one was armed.

        Raises:
            ScreenChangedError: the region, the control or the URL differ.
        """
        coords = batch.coords
        first_press = not batch.pressed
        points = at if at is not None else [coords.to_screen(p.x, p.y) for p in action_points(action)]
        if not points:
            points = [await self._submit(self._input.pointer_position)]
        await self._submit(self._check_region, expect, points, coords, index)
        press = action.type in PRESS_ACTIONS or at is not None
        if press and first_press and expect.element is not None:  # the control under the pointer is compared
            await self._submit(self._move_handled, points[0])
        if batch.control is None:
            return None
        return await batch.control(index, coords.to_model(*points[0]), press and first_press, action.type)

    def _check_region(self, expect: ScreenExpectation, points: list[tuple[int, int]], coords: CoordinateMap,
                      index: int) -> None:
        check_region(expect, self.frames, self._capture.grab_frame(), points, coords, index)

    def _move_handled(self, point: tuple[int, int]) -> None:
        """Move the pointer to ``point`` (screen pixels) and wait until the focused client
        has read the motion off its queue."""
        if self._input.pointer_position() != point:
            self._input.move(*point)
            self._input.wait_until_handled()

    async def _type_inserting(self, text: str, coords: CoordinateMap, cancel: threading.Event) -> None:
        """Type ``text`` with its long runs inserted in one piece each (:mod:`deskpod.agentd.browser.fasttype`)."""
        assert self.insert_text is not None
        for piece, insertable in split_for_insertion(text):
            if cancel.is_set():
                raise _Cancelled
            if insertable:
                try:
                    if await self.insert_text(piece):
                        continue
                except BrowserError as exc:
                    log.info("inserting text failed, typing it: %s", exc.message)
            await self._submit(self._execute, TypeText(type="type", text=piece), coords, cancel)

    def _digest(self) -> bytes:
        return self._capture.grab_frame().digest

    async def settle(self, window_s: float, timeout_s: float) -> tuple[bool, float]:
        """Wait until the screen has not changed for ``window_s`` seconds, at most ``timeout_s``.

        Returns:
            ``(settled, waited_s)``.
        """
        return await self._submit(self._settle, window_s, timeout_s)

    def _settle(self, window_s: float, timeout_s: float) -> tuple[bool, float]:
        start = time.monotonic()
        last = self._digest()
        stable_since = start
        while True:
            now = time.monotonic()
            if now - stable_since >= window_s:
                return True, now - start
            if now - start >= timeout_s:
                return False, now - start
            time.sleep(SETTLE_POLL_S)
            digest = self._digest()
            if digest != last:
                last, stable_since = digest, time.monotonic()

    async def wait_handled(self, timeout_s: float) -> bool:
        """Wait until the focused X client has handled the input sent so far
        (:meth:`~deskpod.agentd.display.xinput.XInput.wait_until_handled`).

        Returns:
            True once it answered; False when no client can be asked.

        Raises:
            InputError: no answer within ``timeout_s``.
        """
        if self._input is None:
            return False
        return bool(await self._submit(self._input.wait_until_handled, timeout_s))

    async def active_title(self) -> str | None:
        """The title of the window the window manager has active
        (:meth:`~deskpod.agentd.display.xinput.XInput.active_window`); ``None``: none, no title,
        a window :attr:`agent_window` names (an agent's program titles its windows as it likes),
        no X connection, or the X server could not be asked."""
        if self._input is None:
            return None
        try:
            active: tuple[int, str | None] | None = await self._submit(self._input.active_window)
        except InputError:
            return None
        return active[1] if active is not None and not self.agent_window(active[0]) else None

    def input_sent(self) -> dict[str, int]:
        """How many of each DOM event the input sent so far makes a page see
        (:attr:`~deskpod.agentd.display.xinput.XInput.sent`); empty before :meth:`start`."""
        return self._input.sent if self._input is not None else {}

    async def screenshot(self, coords: CoordinateMap, fmt: str, quality: int, cursor: bool = False) -> Screenshot:
        """Capture the screen and encode it in the model space.

        An unchanged screen with the same options reuses the last encoded image. An
        image whose base64 would be over :attr:`max_image_base64_bytes` is re-encoded
        or scaled down (:func:`~deskpod.agentd.display.fit.fit_encode`).

        Returns:
            A :class:`~deskpod.protocol.Screenshot`: PNG, JPEG or WebP,
            ``coords.model`` in size (smaller when ``fitted`` is ``"downscaled"``),
            with the scale back to screen pixels.

        Raises:
            ExecutionError: capture or encoding failed.
        """
        mask = await self.mask_plan()
        try:
            image, phash, masked = await self._submit(self._shoot, coords, fmt, quality, cursor, True, mask)
        except DeskpodError as exc:
            raise ExecutionError(f"screenshot failed: {exc.message}") from exc
        width, height = image.size
        scale = (coords.screen.width / width, coords.screen.height / height)
        shot = self._shots.describe(image, coords, scale, masked=masked)
        return shot.model_copy(update={"perceptual_hash": phash})

    async def prepare_screenshot(self, coords: CoordinateMap, fmt: str, quality: int, cursor: bool = False) -> None:
        """Capture and encode the screen now, so that :meth:`screenshot` with the same
        options, of a screen that is still the same pixel for pixel, reuses the encoding
        (the settle wait's quiet time is spent on it). A screen changed since is encoded
        afresh; failures are left for :meth:`screenshot` to report. Nothing is kept for
        the screen check: only screenshots sent are bound to (:attr:`frames`)."""
        mask = await self.mask_plan()
        try:
            await self._submit(self._shoot, coords, fmt, quality, cursor, False, mask)
        except DeskpodError as exc:
            log.debug("screenshot not prepared: %s", exc)

    def _execute(self, action: Action, coords: CoordinateMap,
                 cancel: threading.Event) -> tuple[int, int] | Literal["cancelled"] | None:
        """Run one action on the X thread (:func:`~deskpod.agentd.display.actions.execute`)."""
        return execute(self._input, action, coords, cancel)

    def _crop(self, box: tuple[int, int, int, int], max_base64_bytes: int, mask: MaskPlan) -> tuple[FittedImage, int]:
        mouse = self._input.pointer_position() if mask.tooltip else None
        return self._shots.crop(self._capture, box, max_base64_bytes, mask, mouse)

    def _shoot(self, coords: CoordinateMap, fmt: Any, quality: int, cursor: bool, keep: bool,
               mask: MaskPlan) -> tuple[FittedImage, str, int]:
        pointer = self._input.pointer_position() if cursor else None
        mouse = self._input.pointer_position() if mask.tooltip else None
        return self._shots.shoot(self._capture, pointer, coords, fmt, quality, self.max_image_base64_bytes, keep,
                                 mask, mouse)

    async def _zoom(self, action: Zoom, coords: CoordinateMap) -> Screenshot:
        x0, y0, x1, y1 = action.region
        sx0, sy0 = coords.to_screen(x0, y0)
        sx1 = min(coords.screen.width, max(sx0 + 1, round(x1 * coords.scale_x)))
        sy1 = min(coords.screen.height, max(sy0 + 1, round(y1 * coords.scale_y)))
        mask = await self.mask_plan()
        image, masked = await self._submit(self._crop, (sx0, sy0, sx1, sy1), self.max_image_base64_bytes, mask)
        # A zoom pixel (u, v) is the screen pixel (sx0 + u * scale_x, sy0 + v * scale_y): 1.0 unless downscaled.
        scale = ((sx1 - sx0) / image.size[0], (sy1 - sy0) / image.size[1])
        return self._shots.describe(image, coords, scale, offset=(sx0, sy0), masked=masked)

    async def release_all(self) -> None:
        """Release every key and button the executor holds (queued behind running work)."""
        if self._input is not None:
            await self._submit(self._input.release_all)

    async def disconnect(self) -> None:
        """Close the X connection and the capture object (before their X server is
        stopped); :meth:`reopen` opens new ones."""
        await self._submit(self._disconnect)

    def _disconnect(self) -> None:
        self.clipboard.stop()
        if self._input is not None:
            self._input.close()
        if self._capture is not None:
            self._capture.close()
        if self.damage is not None:
            self.damage.close()
        if self._windows is not None:
            self._windows.disconnect()
        self._input = self._capture = self.damage = self._windows = None
        self._shots.forget()

    async def reopen(self) -> tuple[int, int]:
        """Drop the X connection and the capture object (their X server may have died)
        and open new ones, on the same worker thread.

        Returns:
            The screen size ``(width, height)`` in pixels.

        Raises:
            InputError: the X server or its XTEST extension is unavailable.
            CaptureError: the screen cannot be captured.
        """
        return await self._submit(self._reopen)

    def _reopen(self) -> tuple[int, int]:
        self._disconnect()
        return self._start()

    async def close(self) -> None:
        """Release input, close the X connections and stop the worker thread."""
        if self._input is not None:
            await self.release_all()
            await self._submit(self._input.close)
        if self.damage is not None:
            self.damage.close()
            self.damage = None
        self._pool.shutdown(wait=False)
