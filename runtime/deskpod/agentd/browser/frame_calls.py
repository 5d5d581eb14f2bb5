"""Calls into a page's frames within one time budget: DevTools commands, isolated
worlds and the frame tree.

:class:`FrameCalls` sends the commands of one read of a page (its top document's
session and the out-of-process frames attached under it) through one
:class:`Call`, each bounded by :data:`FRAME_CALL_TIMEOUT_S` and all together by
:data:`FRAME_READ_BUDGET_S`. Scripts run in an isolated world
(``Page.createIsolatedWorld``) whose objects are released afterwards
(:meth:`FrameCalls.release`). What is read with them is
:mod:`deskpod.agentd.browser.frames`'s.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from deskpod.errors import BrowserError
from deskpod.protocol import MAX_FRAMES

__all__ = [
    "Call",
    "ChildTarget",
    "FRAME_CALL_TIMEOUT_S",
    "FRAME_READ_BUDGET_S",
    "Frame",
    "FrameCalls",
    "VIEWPORT_ORIGIN_SCRIPT",
    "WORLD",
]

FRAME_CALL_TIMEOUT_S = 2.0
"""Longest wait for one DevTools call made here; a frame that does not answer in time is
reported unread (text, accessibility) or ends the descent (hit-testing, focus)."""

FRAME_READ_BUDGET_S = 5.0
"""Longest time one :class:`~deskpod.agentd.browser.frames.FrameReader` (one page text, accessibility tree, focus or hit
test) may spend on DevTools calls in all."""

WORLD = "deskpod"
"""The name of the isolated world the reads' scripts run in, and of their object group."""

VIEWPORT_ORIGIN_SCRIPT: Final = r"""((d) => {
  const z = window.devicePixelRatio || 1;
  const ow = (window.outerWidth || screen.width) * d, oh = (window.outerHeight || screen.height) * d;
  return [window.screenX * d + Math.max(0, ow - window.innerWidth * z) / 2,
          window.screenY * d + oh - window.innerHeight * z, z];
})"""
"""Called with the device scale factor ``d``: the viewport's origin on the screen (screen
pixels) and screen pixels per CSS pixel. The window's position and outer size are
device-independent pixels, so they are multiplied by ``d``; ``innerWidth`` times
``devicePixelRatio`` is screen pixels already."""


class Call(Protocol):
    """Sends one DevTools command (to ``session``) and returns its result, raising
    :class:`~deskpod.errors.BrowserError` on failure or after ``timeout_s``."""

    def __call__(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout_s: float = ...
    ) -> Awaitable[dict[str, Any]]: ...


@dataclass(frozen=True)
class ChildTarget:
    """An out-of-process frame's DevTools target, attached as a flat session.

    ``session``: its session id. ``target_id``: its target id (the frame's id).
    ``parent``: the session of the target that holds the frame's owner element.
    """

    session: str
    target_id: str
    parent: str


@dataclass(frozen=True)
class Frame:
    """One frame of the page: the ``session`` that reads it, its ``frame_id`` and ``url``,
    the session holding its owner element (``None`` for the top document) and its
    document's ``mime_type`` (``application/pdf``: a PDF the browser's viewer shows)."""

    session: str
    frame_id: str
    url: str
    owner_session: str | None
    mime_type: str = ""


class FrameCalls:
    """Budgeted calls into one page's frames (see the module docstring); the base of
    :class:`~deskpod.agentd.browser.frames.FrameReader`.

    Args:
        call: sends one DevTools command (see :class:`Call`).
        page: the page target's session id.
        main_frame: its top document's frame id.
        children: the attached out-of-process frames' targets.
        budget_s: the most seconds all of this reader's calls may take together (a call
            after that fails at once, so the frames left are reported unread).
    """

    def __init__(
        self, call: Call, page: str, main_frame: str, children: Sequence[ChildTarget],
        budget_s: float = FRAME_READ_BUDGET_S,
    ) -> None:
        self._call = call
        self._deadline = time.monotonic() + budget_s
        self._page = page
        self._main = main_frame
        self._children = {c.target_id: c for c in children}
        self._worlds: dict[tuple[str, str], int] = {}
        self._used: set[str] = set()

    async def release(self) -> None:
        """Let the page forget the objects this reader's calls made (its object group), in
        every session it used; a session that does not answer is left as it is."""
        for session in self._used:
            try:
                await self._cdp("Runtime.releaseObjectGroup", {"objectGroup": WORLD}, session)
            except BrowserError:
                continue
        self._used.clear()

    @property
    def page(self) -> str:
        """The page target's session id (the top document's)."""
        return self._page

    @property
    def main_frame(self) -> str:
        """The top document's frame id."""
        return self._main

    @property
    def children(self) -> list[ChildTarget]:
        """The attached out-of-process frames' targets."""
        return list(self._children.values())

    async def cdp(self, method: str, params: dict[str, Any], session: str) -> dict[str, Any]:
        """Send one DevTools command within this reader's budget (see :class:`Call`)."""
        return await self._cdp(method, params, session)

    async def evaluate(self, session: str, frame_id: str, expression: str) -> dict[str, Any]:
        """The remote object (by value) ``expression`` evaluates to in the isolated world of
        the frame ``frame_id`` (read through ``session``), within this reader's budget.

        Raises:
            BrowserError: the frame did not answer or the expression threw.
        """
        return await self._evaluate(session, frame_id, expression)

    async def call_on(self, session: str, object_id: str, function: str, *args: Any) -> Any:
        """Call ``function`` (a JavaScript function declaration) on the remote object
        ``object_id`` with ``args`` and return its JSON value.

        Raises:
            BrowserError: the call failed or the function threw.
        """
        return await self._on(session, object_id, function, *args)

    async def resolve(self, session: str, frame_id: str, backend: int) -> str | None:
        """The object id of the DOM node ``backend`` in this reader's isolated world of the
        frame ``frame_id`` (``None`` when the node is gone)."""
        context = await self._world(session, frame_id)
        resolved = await self._cdp("DOM.resolveNode", {"backendNodeId": backend, "executionContextId": context,
                                                       "objectGroup": WORLD}, session)
        object_id = resolved.get("object", {}).get("objectId")
        return str(object_id) if object_id else None

    async def viewport(self, device_scale_factor: float) -> tuple[float, float, float]:
        """The top viewport's origin on the screen (screen pixels) and screen pixels per CSS pixel."""
        origin = await self._evaluate(self._page, self._main, f"{VIEWPORT_ORIGIN_SCRIPT}({float(device_scale_factor)!r})")
        ox, oy, zoom = (float(v) for v in origin.get("value") or (0, 0, 1))
        return ox, oy, zoom

    async def _cdp(self, method: str, params: dict[str, Any], session: str) -> dict[str, Any]:
        left_s = self._deadline - time.monotonic()
        if left_s <= 0:
            raise BrowserError(f"{method} not sent: reading the page's frames took its whole budget")
        return await self._call(method, params, session, min(FRAME_CALL_TIMEOUT_S, left_s))

    async def _world(self, session: str, frame_id: str) -> int:
        key = (session, frame_id)
        if key not in self._worlds:
            made = await self._cdp("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": WORLD}, session)
            self._worlds[key] = int(made["executionContextId"])
        return self._worlds[key]

    async def _evaluate(self, session: str, frame_id: str, expression: str, by_value: bool = True) -> dict[str, Any]:
        """The remote object ``expression`` evaluates to in the frame's isolated world.

        Raises:
            BrowserError: the frame did not answer or the expression threw.
        """
        params = {"expression": expression, "returnByValue": by_value, "timeout": 1000, "objectGroup": WORLD}
        try:
            result = await self._cdp("Runtime.evaluate", {**params, "contextId": await self._world(session, frame_id)},
                                     session)
        except BrowserError:
            # A navigation that commits between making the world and using it destroys the
            # world with the old document: make one in the new document, once.
            self._worlds.pop((session, frame_id), None)
            result = await self._cdp("Runtime.evaluate", {**params, "contextId": await self._world(session, frame_id)},
                                     session)
        self._used.add(session)
        if "exceptionDetails" in result:
            raise BrowserError(f"frame script failed: {result['exceptionDetails'].get('text', 'exception')}")
        return dict(result.get("result", {}))

    async def _on(self, session: str, object_id: str, function: str, *args: Any, by_value: bool = True) -> Any:
        result = await self._cdp("Runtime.callFunctionOn", {
            "functionDeclaration": function, "objectId": object_id, "returnByValue": by_value,
            "arguments": [{"value": a} for a in args], "objectGroup": WORLD}, session)
        self._used.add(session)
        if "exceptionDetails" in result:
            raise BrowserError(f"frame script failed: {result['exceptionDetails'].get('text', 'exception')}")
        remote = result.get("result", {})
        return remote.get("value") if by_value else remote

    async def _frame_url(self, session: str, frame_id: str) -> str:
        try:
            return str((await self._evaluate(session, frame_id, "location.href")).get("value", ""))
        except BrowserError:
            return ""

    async def frames(self) -> list[Frame]:
        """Every frame of the page, the top document first, at most :data:`MAX_FRAMES`
        (in-process frames from the page's frame tree, then each out-of-process frame's tree).

        Raises:
            BrowserError: the page's own frame tree could not be read.
        """
        out: list[Frame] = []

        def walk(tree: dict[str, Any], session: str, owner: str | None) -> None:
            frame = tree.get("frame", {})
            if len(out) >= MAX_FRAMES or "id" not in frame:
                return
            out.append(Frame(session, str(frame["id"]), str(frame.get("url", ""))[:4000], owner,
                             str(frame.get("mimeType", ""))[:128]))
            for child in tree.get("childFrames", []):
                walk(child, session, session)

        walk((await self._cdp("Page.getFrameTree", {}, self._page)).get("frameTree", {}), self._page, None)
        for child in self._children.values():
            if len(out) >= MAX_FRAMES:
                break
            try:
                tree = (await self._cdp("Page.getFrameTree", {}, child.session)).get("frameTree", {})
            except BrowserError:
                continue
            walk(tree, child.session, child.parent)
        return out
