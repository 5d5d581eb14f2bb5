"""The daemon's one serial executor: every X11 call runs on a single thread.

python-xlib connections and mss capture objects belong to the thread that made
them, and input must never interleave, so :class:`Executor` owns one worker
thread that creates the :class:`~deskpod.agentd.xinput.XInput` and
:class:`~deskpod.agentd.capture.ScreenCapture` objects and runs every action,
screenshot and release on them, one at a time.

Actions are validated in full (coordinates in the model space, key names)
before the first one runs, so a bad batch has no effect. Whatever an action
pressed is released when it fails, when the request times out, and when the
client disconnects.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from deskpod import keys
from deskpod.errors import (
    ActionTimeoutError,
    CaptureError,
    DeskpodError,
    ExecutionError,
    InputError,
)
from deskpod.protocol import (
    ActionTiming,
    Click,
    CoordinateMap,
    DoubleClick,
    Drag,
    Keypress,
    Move,
    Screenshot,
    Scroll,
    TakeScreenshot,
    TypeText,
    Wait,
    action_points,
)

__all__ = ["Executor", "validate_batch"]

log = logging.getLogger(__name__)


class _Cancelled(Exception):
    """Raised inside the worker when the request was cancelled (timeout, disconnect)."""


def _chord_names(action: Keypress) -> list[str]:
    """Key names of a keypress; an element may itself be chord text such as ``"ctrl+a"``."""
    return [name for item in action.keys for name in keys.parse_chord(item)]


def validate_batch(actions: Sequence[BaseModel], coords: CoordinateMap) -> None:
    """Check every point and key name of a batch before anything runs.

    Raises:
        OutOfBoundsError: a point lies outside the model space
            (``detail["action_index"]`` says which action).
        UnknownKeyError: a key name maps to no keysym.
    """
    for index, action in enumerate(actions):
        try:
            for point in action_points(action):
                coords.check(point.x, point.y)
            if isinstance(action, Keypress):
                keys.resolve_chord(_chord_names(action))
        except DeskpodError as exc:
            exc.detail.update({"action_index": index, "action": getattr(action, "type", "?")})
            raise


class Executor:
    """Runs actions and screenshots serially on one X11 thread.

    Args:
        display: the X display name, e.g. ``":99"``.
    """

    def __init__(self, display: str) -> None:
        self.display = display
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="deskpod-x11")
        self._input: Any = None
        self._capture: Any = None
        self._shot_ids = itertools.count(1)
        self.lock = asyncio.Lock()

    async def _submit(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    async def start(self) -> tuple[int, int]:
        """Open the X connection and the capture object, and grab one frame.

        Returns:
            The screen size ``(width, height)`` in pixels.

        Raises:
            InputError: the X server or its XTEST extension is unavailable.
            CaptureError: the screen cannot be captured (case C-21: fail fast).
        """
        return await self._submit(self._start)

    def _start(self) -> tuple[int, int]:
        from deskpod.agentd.capture import ScreenCapture
        from deskpod.agentd.xinput import XInput

        self._input = XInput(self.display)
        self._capture = ScreenCapture(self.display)
        self._capture.health_check()
        return self._input.screen_size

    async def run(
        self, actions: Sequence[BaseModel], coords: CoordinateMap, timeout_s: float, cancel: threading.Event
    ) -> list[ActionTiming]:
        """Execute ``actions`` in order.

        Args:
            actions: validated protocol actions (see :func:`validate_batch`).
            coords: maps their model-space points to screen pixels.
            timeout_s: deadline for the whole batch, seconds.
            cancel: set by the caller when the client goes away; stops the batch
                between actions and interrupts ``wait``.

        Returns:
            One timing per executed action.

        Raises:
            ActionTimeoutError: the batch ran past ``timeout_s``; input is released.
            ExecutionError: an action failed (``detail["action_index"]``); input is released.
        """
        future = self._pool.submit(self._run, list(actions), coords, cancel)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except asyncio.TimeoutError as exc:
            cancel.set()
            await self.release_all()
            raise ActionTimeoutError(
                f"actions did not finish within {timeout_s:.1f} s; every key and button was released",
                detail={"timeout_s": timeout_s},
            ) from exc

    def _run(self, actions: list[BaseModel], coords: CoordinateMap, cancel: threading.Event) -> list[ActionTiming]:
        timings: list[ActionTiming] = []
        for index, action in enumerate(actions):
            if cancel.is_set():
                break
            started = time.perf_counter()
            try:
                self._execute(action, coords, cancel)
            except _Cancelled:
                self._input.release_all()
                break
            except DeskpodError as exc:
                self._input.release_all()
                exc.detail.update({"action_index": index, "action": action.type})  # type: ignore[attr-defined]
                if isinstance(exc, (InputError, CaptureError)):
                    raise ExecutionError(f"action {index} ({action.type}): {exc.message}", detail=exc.detail) from exc  # type: ignore[attr-defined]
                raise
            except Exception as exc:
                self._input.release_all()
                log.exception("action %d failed", index)
                raise ExecutionError(
                    f"action {index} ({action.type}) failed: {type(exc).__name__}",  # type: ignore[attr-defined]
                    detail={"action_index": index, "action": action.type},  # type: ignore[attr-defined]
                ) from exc
            timings.append(
                ActionTiming(index=index, type=action.type, duration_s=round(time.perf_counter() - started, 6))  # type: ignore[attr-defined]
            )
        return timings

    def _execute(self, action: BaseModel, coords: CoordinateMap, cancel: threading.Event) -> None:
        xin = self._input
        if isinstance(action, Click):
            xin.click(*coords.to_screen(action.x, action.y), button=action.button)
        elif isinstance(action, DoubleClick):
            xin.click(*coords.to_screen(action.x, action.y), button="left", count=2)
        elif isinstance(action, Move):
            xin.move(*coords.to_screen(action.x, action.y))
        elif isinstance(action, Drag):
            xin.drag([coords.to_screen(p.x, p.y) for p in action.path], button="left")
        elif isinstance(action, Scroll):
            xin.scroll(*coords.to_screen(action.x, action.y), action.scroll_x, action.scroll_y)
        elif isinstance(action, Keypress):
            xin.keypress(_chord_names(action))
        elif isinstance(action, TypeText):
            xin.type_text(action.text)
        elif isinstance(action, Wait):
            if cancel.wait(action.seconds):
                raise _Cancelled
        elif isinstance(action, TakeScreenshot):
            pass  # the observation after the batch carries the screenshot
        else:  # pragma: no cover - protocol and executor out of step
            raise ExecutionError(f"no executor for action {action!r}")

    async def screenshot(self, coords: CoordinateMap, fmt: str, quality: int) -> Screenshot:
        """Capture the screen and encode it in the model space.

        Returns:
            A :class:`~deskpod.protocol.Screenshot`: PNG or JPEG, ``coords.model``
            in size, with the scale back to screen pixels.

        Raises:
            ExecutionError: capture or encoding failed.
        """
        try:
            data = await self._submit(self._shoot, coords, fmt, quality)
        except DeskpodError as exc:
            raise ExecutionError(f"screenshot failed: {exc.message}") from exc
        return Screenshot(
            id=f"s-{next(self._shot_ids)}",
            format=fmt,  # type: ignore[arg-type]
            width=coords.model.width,
            height=coords.model.height,
            screen_width=coords.screen.width,
            screen_height=coords.screen.height,
            scale_x=coords.scale_x,
            scale_y=coords.scale_y,
            sha256=hashlib.sha256(data).hexdigest(),
            data=base64.b64encode(data).decode("ascii"),
        )

    def _shoot(self, coords: CoordinateMap, fmt: str, quality: int) -> bytes:
        image = self._capture.grab()
        size = (coords.model.width, coords.model.height)
        return self._capture.encode(image, fmt=fmt, quality=quality, size=size)

    async def release_all(self) -> None:
        """Release every key and button the executor holds (queued behind running work)."""
        if self._input is not None:
            await self._submit(self._input.release_all)

    async def close(self) -> None:
        """Release input, close the X connections and stop the worker thread."""
        if self._input is not None:
            await self.release_all()
            await self._submit(self._input.close)
        self._pool.shutdown(wait=False)
