"""The window verbs of :class:`~deskpod.client.sandbox.Sandbox`: list the desktop's windows,
focus, close, move or resize one by its id (:mod:`deskpod.protocol.windows`), and open a
desktop application (:mod:`deskpod.protocol.apps`).

Each verb is one ``act`` request; a window action names a window of the latest list (from
:meth:`WindowVerbs.windows`, or any observation taken with ``windows=True``): any other id,
or a window gone since, raises :class:`~deskpod.errors.NoWindowError` and nothing is done.
Coordinates and sizes are model-space pixels.
"""

from __future__ import annotations

from typing import Any

from deskpod.client.wire import SandboxClient
from deskpod.client.workspace import ObserveLike, observe_options
from deskpod.protocol import Observation, ObserveOptions, Window

__all__ = ["WindowVerbs"]


class WindowVerbs:
    """The window verbs, on the connection :attr:`client` (a base of :class:`~deskpod.client.sandbox.Sandbox`)."""

    client: SandboxClient
    """The connection the requests go to."""

    async def windows(self) -> list[Window]:
        """The desktop's top-level windows, the frontmost first (an observation with
        ``windows=True``, no screenshot, not settled).

        Returns:
            The windows (empty when the window manager could not be asked).
        """
        observed = await self.client.act([], ObserveOptions(screenshot=False, settle=False, windows=True))
        return list(observed.windows or [])

    async def _window(self, action: dict[str, Any], observe: ObserveLike) -> Observation:
        return await self.client.act([action], observe_options(observe))

    async def focus_window(self, window_id: str, *, observe: ObserveLike = None) -> Observation:
        """Raise the window ``window_id`` and give it the keyboard focus (``window_focus``).

        Raises:
            NoWindowError: no such window in the latest list, or it is gone.
        """
        return await self._window({"type": "window_focus", "window_id": window_id}, observe)

    async def close_window(self, window_id: str, *, observe: ObserveLike = None) -> Observation:
        """Ask the window ``window_id`` to close (``window_close``; its program may ask first).

        Raises:
            NoWindowError: no such window in the latest list, or it is gone.
        """
        return await self._window({"type": "window_close", "window_id": window_id}, observe)

    async def move_window(self, window_id: str, x: int, y: int, *, observe: ObserveLike = None) -> Observation:
        """Move the window ``window_id``'s top-left corner to (``x``, ``y``) (``window_move``).

        Raises:
            OutOfBoundsError: the point is outside the model space.
            NoWindowError: no such window in the latest list, or it is gone.
        """
        return await self._window({"type": "window_move", "window_id": window_id, "x": x, "y": y}, observe)

    async def resize_window(self, window_id: str, width: int, height: int, *,
                            observe: ObserveLike = None) -> Observation:
        """Resize the window ``window_id`` to ``width`` x ``height`` (``window_resize``).

        Raises:
            NoWindowError: no such window in the latest list, or it is gone.
        """
        return await self._window({"type": "window_resize", "window_id": window_id, "width": width,
                                   "height": height}, observe)

    async def open_app(self, app: str, path: str | None = None, *, observe: ObserveLike = None) -> Observation:
        """Start the desktop application ``app`` (:data:`~deskpod.protocol.APPS`: ``open_app``), with
        the workspace file ``path`` for it to open; its window joins the observation's list.

        Raises:
            ExecutionError: the sandbox has no desktop applications' zone (``detail["reason"]``
                ``"no_desktop"``) or the application could not start.
        """
        return await self._window({"type": "open_app", "app": app, "path": path}, observe)
