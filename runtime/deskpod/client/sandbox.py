"""The high-level handle on one sandbox: a verb for every action and request of the protocol.

:class:`Sandbox` sits on a :class:`~deskpod.client.wire.SandboxClient` (one method
per message) and owns the lifecycle: the connection, and the control token, which it
rotates on every :meth:`~Sandbox.reset`. Coordinates are int pixels from the
top-left of the *model space* (the screen unless :meth:`~Sandbox.configure` declared
another); durations are float seconds; sizes are bytes.

- GUI verbs (each one ``act`` request with one action, answered by the
  :class:`~deskpod.protocol.Observation` after it; the pointer and keyboard ones are
  defined in :mod:`deskpod.client.input_verbs`): :meth:`~Sandbox.click`,
  :meth:`~Sandbox.double_click`, :meth:`~Sandbox.triple_click`,
  :meth:`~Sandbox.mouse_down`, :meth:`~Sandbox.mouse_up`, :meth:`~Sandbox.move`,
  :meth:`~Sandbox.drag`, :meth:`~Sandbox.scroll`, :meth:`~Sandbox.keypress`,
  :meth:`~Sandbox.hold_key`, :meth:`~Sandbox.type_text`, :meth:`~Sandbox.wait`,
  :meth:`~Sandbox.wait_for`; :meth:`~Sandbox.screenshot`,
  :meth:`~Sandbox.cursor_position`, :meth:`~Sandbox.zoom` and :meth:`~Sandbox.read_clipboard` return what they read.
  :meth:`~Sandbox.act` runs a batch, :meth:`~Sandbox.observe` only observes.
- Window verbs (:mod:`deskpod.client.window_verbs`): :meth:`~Sandbox.windows` lists the
  desktop's windows; :meth:`~Sandbox.focus_window`, :meth:`~Sandbox.close_window`,
  :meth:`~Sandbox.move_window` and :meth:`~Sandbox.resize_window` act on one by its id.
- Requests: :meth:`~Sandbox.navigate`, :meth:`~Sandbox.configure`, :meth:`~Sandbox.allow_hosts`,
  :meth:`~Sandbox.grant_permissions`,
  :meth:`~Sandbox.reset`, :meth:`~Sandbox.snapshot`, :meth:`~Sandbox.restore`.
- Workspace verbs (code agents; each returns its tool's output model; defined in
  :mod:`deskpod.client.workspace`):
  :meth:`~Sandbox.seed`, :meth:`~Sandbox.list_dir`, :meth:`~Sandbox.read_file`,
  :meth:`~Sandbox.write_file`, :meth:`~Sandbox.edit_file`,
  :meth:`~Sandbox.apply_patch`, :meth:`~Sandbox.exec`, :meth:`~Sandbox.run_tests`,
  :meth:`~Sandbox.diff`.

Arguments are checked against the protocol's models before anything is sent; a
bad one is an :class:`~deskpod.errors.InvalidActionError` (actions) or
:class:`~deskpod.errors.InvalidRequestError` (requests).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from deskpod.client.elements import ElementVerbs
from deskpod.client.input_verbs import InputVerbs
from deskpod.client.rotations import token_rotated
from deskpod.client.window_verbs import WindowVerbs
from deskpod.client.wire import CONNECT_TIMEOUT_S, SandboxClient, reset_and_reconnect
from deskpod.client.workspace import ObserveLike, WorkspaceVerbs, build, observe_options
from deskpod.errors import BadReplyError, InvalidRequestError
from deskpod.protocol import (
    Hello,
    Observation,
    ObserveOptions,
    PermissionGrants,
    Point,
    Size,
    parse_action,
)

__all__ = ["ImageFormat", "Sandbox"]

ImageFormat = Literal["png", "jpeg", "webp"]
"""A screenshot encoding."""

_STATE_ONLY = ObserveOptions(screenshot=False)
"""Observation options of the verbs that return a reading, not an observation."""



class Sandbox(InputVerbs, WorkspaceVerbs, ElementVerbs, WindowVerbs):
    """High-level handle on one sandbox (see the module's docstring for the verbs).

    Args:
        client: an open connection.
        token: the control token it was opened with (kept for :meth:`reset`).

    Example (``url``: the daemon as this machine reaches it, e.g. a pool lease's; to start a
    sandbox of your own, :meth:`deskpod.backend.launch.DockerSandbox.create`)::

        async with await Sandbox.open(url, token) as sb:
            await sb.click(640, 400)
            await sb.type_text("penguin")
            page = await sb.observe(page_text=True)
            png = await sb.screenshot()
    """

    def __init__(self, client: SandboxClient, token: str = "") -> None:
        self.client = client
        """The low-level connection (replaced by a new one at each :meth:`reset`)."""
        self.token = token
        """The control token in force (a new one after each :meth:`reset`). Secret."""

    @classmethod
    async def open(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> Sandbox:
        """Connect to the sandbox at ``url`` (see :meth:`SandboxClient.connect`).

        Args:
            url: the daemon's websocket URL as this machine reaches it, e.g.
                ``ws://ADDRESS:8765/v1/ws`` (the compose stack's ``ws://sandbox:8765/v1/ws``
                resolves only on the stack's own network).
            token: the sandbox's control token.
            timeout_s: how long to keep retrying while the sandbox starts, seconds.

        Returns:
            The handle, connected.

        Raises:
            UnauthorizedError: the daemon refused the token.
            SandboxError: no connection within ``timeout_s``.
        """
        return cls(await SandboxClient.connect(url, token, timeout_s=timeout_s), token)

    @property
    def hello(self) -> Hello:
        """The daemon's greeting on the current connection (screen size, model space)."""
        return self.client.hello

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection."""
        await self.client.close()

    # --- lifecycle -----------------------------------------------------------------------

    async def configure(self, model_size: Size | tuple[int, int] | None = None, *,
                        max_dimension: int | None = None, max_image_bytes: int | None = None) -> Size:
        """Declare the model space: the size of the images the model sees.

        Args:
            model_size: that size exactly, as a :class:`~deskpod.protocol.Size` or
                ``(width, height)``, pixels.
            max_dimension: instead, the screen scaled down (aspect kept) so its longer
                side is at most this many pixels (e.g. 1280). Neither: the screen.
            max_image_bytes: the longest base64 text of a screenshot from now on
                (default and most :data:`~deskpod.protocol.MAX_SCREENSHOT_BASE64_BYTES`).

        Returns:
            The model space in force; every later coordinate is checked against it.

        Raises:
            InvalidRequestError: both forms given, or a size out of range.
        """
        if isinstance(model_size, tuple):
            width, height = model_size
            model_size = build(Size, width=width, height=height)
        return await self.client.configure(model_size, max_dimension=max_dimension, max_image_bytes=max_image_bytes)

    async def allow_hosts(self, domains: Sequence[str] | None) -> list[str] | None:
        """Let the browser reach only ``domains`` and their subdomains: every other request
        fails before it is sent, a refused page shows deskpod's blocked page, and each is
        reported in the next observation's ``blocked`` (``None``: no limit; a reset also ends it).

        Returns:
            The list now in force.

        Raises:
            InvalidRequestError: a domain is not a host name, or there are too many.
        """
        return await self.client.set_egress(domains)

    async def grant_permissions(self, grants: PermissionGrants | dict[str, Any]) -> PermissionGrants:
        """Grant the browser's pages ``grants`` (e.g. ``{"granted": ["geolocation"], "position":
        {"lat": 48.86, "lon": 2.29}}``) and deny every other permission, with no prompt
        (:mod:`deskpod.protocol.permissions`; ``{}``: deny all, as a reset does).

        Returns:
            The grants now in force.

        Raises:
            InvalidRequestError: an unknown permission, or a granted ``geolocation`` without a position.
        """
        return await self.client.set_permissions(build(PermissionGrants, **grants) if isinstance(grants, dict)
                                                 else grants)

    async def reset(self, start_url: str | None = None) -> Observation:
        """Reset the sandbox in place with a new random control token, and reconnect with it.
        Whoever in this process watches the old token (:mod:`deskpod.client.rotations`: the
        warm pool that leased the sandbox) learns the new one.

        Args:
            start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.

        Returns:
            The observation of the fresh state (model space: the screen again).

        Raises:
            SandboxError: the reset failed or the reconnection did not succeed.
            BusyError: another request was running in the sandbox.
        """
        url, old = self.client.url, self.token

        def rotated(token: str) -> None:
            self.token = token
            token_rotated(url, old, token)  # e.g. the warm pool that leased this sandbox learns it

        _, observation, self.client = await reset_and_reconnect(
            self.client, start_url, connect_timeout_s=30.0, on_rotated=rotated
        )
        return observation

    async def snapshot(self) -> bytes:
        """Take a snapshot of the browser session (see :meth:`SandboxClient.snapshot`).

        Returns:
            The archive (gzip'd tar with its manifest first).
        """
        return await self.client.snapshot()

    async def restore(self, archive: bytes, start_url: str | None = None) -> Observation:
        """Restore a snapshot (see :meth:`SandboxClient.restore`).

        Args:
            archive: bytes :meth:`snapshot` returned.
            start_url: http(s) URL Chromium opens; ``None``: the sandbox's start page.

        Returns:
            The observation once the restored browser is up.
        """
        return await self.client.restore(archive, start_url)

    async def navigate(self, url: str, *, observe: ObserveLike = None, timeout_s: float = 30.0,
                       allow_downloads: bool = False) -> Observation:
        """Load ``url`` (http or https) in the active tab.

        Args:
            url: the page to load.
            observe: what the observation holds (default: a PNG screenshot and the browser state).
            timeout_s: how long the load may take, seconds.
            allow_downloads: let a download the URL starts begin (by default the
                browser refuses it and the observation reports it ``blocked``).

        Returns:
            The observation once the page loaded.

        Raises:
            InvalidRequestError: not an http(s) URL.
            NavigationError: the load failed or timed out.
        """
        return await self.client.navigate(url, observe_options(observe), timeout_s, allow_downloads=allow_downloads)

    # --- GUI verbs -----------------------------------------------------------------------

    async def act(self, actions: Sequence[dict[str, Any] | BaseModel], *, observe: ObserveLike = None,
                  timeout_s: float = 60.0, allow_downloads: bool = False) -> Observation:
        """Run a batch of actions in order (protocol models or their JSON dicts), then observe.

        Args:
            actions: the batch (none: only observe).
            observe: what the observation holds.
            timeout_s: the whole batch's time limit, seconds.
            allow_downloads: let downloads the batch starts begin (by default the
                browser refuses them and the observation reports them ``blocked``).

        Returns:
            The observation after the batch.

        Raises:
            InvalidActionError: an action is malformed (nothing runs).
            OutOfBoundsError: a point lies outside the model space (nothing runs).
            ActionTimeoutError: the batch ran out of time (whatever it pressed is released).
        """
        parsed = [a if isinstance(a, BaseModel) else parse_action(a, i) for i, a in enumerate(actions)]
        return await self.client.act(parsed, observe_options(observe), timeout_s, allow_downloads=allow_downloads)

    async def observe(self, options: ObserveLike = None, **fields: Any) -> Observation:
        """Observe without acting.

        Args:
            options: what the observation holds, as an :class:`~deskpod.protocol.ObserveOptions`
                or a mapping of its fields (``None``: the defaults, or ``fields``).
            **fields: instead, those fields as keywords: ``observe(page_text=True, snapshot=True)``.

        Returns:
            The observation.

        Raises:
            InvalidRequestError: both forms given, or a field unknown or out of range.
        """
        if fields and options is not None:
            raise InvalidRequestError("observe: give the options or their fields as keywords, not both")
        return await self.act([], observe=fields or options)

    async def set_files(self, *paths: str, observe: ObserveLike = None) -> Observation:
        """Answer the open file chooser (the observation's ``file_chooser``: the page's, or a
        desktop application's file dialog) with files of the workspace, relative to its root.

        Returns:
            The observation after it.

        Raises:
            InvalidActionError: no path, or more than the protocol allows.
            ExecutionError: no chooser is open, or a path is not a regular file in the workspace.
        """
        return await self._one({"type": "set_files", "paths": list(paths)}, observe)

    async def drop_files(self, x: int, y: int, *paths: str, observe: ObserveLike = None) -> Observation:
        """Drop workspace files (relative to its root) onto the page at the model-space point
        (``x``, ``y``), as a user drags them in (the ``drop_files`` action; judged an upload, ``L2``).

        Raises:
            ExecutionError: a path is not a regular file in the workspace
                (``detail["reason"] == "not_a_workspace_file"``).
        """
        return await self._one({"type": "drop_files", "x": x, "y": y, "paths": list(paths)}, observe)

    async def wait(self, seconds: float = 1.0, *, observe: ObserveLike = None) -> Observation:
        """Do nothing for ``seconds``, then observe.

        Returns:
            The observation after the wait.
        """
        return await self._one({"type": "wait", "seconds": seconds}, observe, timeout_s=seconds + 60.0)

    async def wait_for(self, *, url_matches: str | None = None, text_present: str | None = None,
                       screen_changed: bool = False, timeout_s: float = 10.0,
                       observe: ObserveLike = None, text_absent: str | None = None) -> Observation:
        """Wait until one condition holds, checked by the daemon.

        Args:
            url_matches: a regular expression searched in the active tab's URL.
            text_present: a substring of the page's visible text.
            text_absent: a text the page's visible text no longer holds.
            screen_changed: the screen differs from the frame at the start.
            timeout_s: how long to wait, seconds.
            observe: what the observation holds.

        Returns:
            The observation once the condition held.

        Raises:
            InvalidActionError: not exactly one condition given.
            ActionTimeoutError: the condition did not hold within ``timeout_s``.
        """
        action: dict[str, Any] = {"type": "wait_for", "timeout_s": timeout_s}
        if url_matches is not None:
            action["url_matches"] = url_matches
        if text_present is not None:
            action["text_present"] = text_present
        if text_absent is not None:
            action["text_absent"] = text_absent
        if screen_changed:
            action["screen_changed"] = True
        return await self._one(action, observe, timeout_s=timeout_s + 60.0)

    async def accept_dialog(self, text: str | None = None, *, tab_id: str | None = None,
                            observe: ObserveLike = None) -> Observation:
        """Accept the open JavaScript dialog (OK, or leave the page for ``beforeunload``).

        Args:
            text: a ``prompt``'s answer (``None``: its default).
            tab_id: the tab whose dialog to answer (``None``: the one observations report).
            observe: what the observation holds.

        Returns:
            The observation after the answer.

        Raises:
            NoDialogError: no dialog is open there.
        """
        action: dict[str, Any] = {"type": "dialog_accept", "text": text, "tab_id": tab_id}
        return await self._one(action, observe)

    async def dismiss_dialog(self, *, tab_id: str | None = None, observe: ObserveLike = None) -> Observation:
        """Dismiss the open JavaScript dialog (Cancel, or stay on the page for ``beforeunload``).

        Args:
            tab_id: the tab whose dialog to answer (``None``: the one observations report).
            observe: what the observation holds.

        Returns:
            The observation after the answer.

        Raises:
            NoDialogError: no dialog is open there.
        """
        return await self._one({"type": "dialog_dismiss", "tab_id": tab_id}, observe)

    async def recover_tab(self, *, tab_id: str | None = None, observe: ObserveLike = None) -> Observation:
        """Stop a page that does not answer and load its URL again (the ``recover_tab`` action).

        Args:
            tab_id: the tab (``None``: the one the observation lists first in ``unresponsive``).
            observe: what the observation holds.

        Returns:
            The observation after it.

        Raises:
            PageResponsiveError: the page answers: it was left alone.
        """
        return await self._one({"type": "recover_tab", "tab_id": tab_id}, observe)

    async def screenshot(self, fmt: ImageFormat = "png", *, quality: int = 80, cursor: bool = False) -> bytes:
        """Capture the screen in the model space.

        Args:
            fmt: png (lossless), jpeg or webp.
            quality: 1..95, for jpeg and webp.
            cursor: draw the pointer in.

        Returns:
            The image's bytes (``fmt``, the model space's width × height), checked
            against the SHA-256, format and size the daemon claimed.

        Raises:
            BadReplyError: the reply holds no screenshot.
        """
        options = build(ObserveOptions, format=fmt, quality=quality, cursor=cursor)
        obs = await self.act([{"type": "screenshot"}], observe=options)
        if obs.screenshot is None:
            raise BadReplyError("the sandbox sent no screenshot", detail={"reason": "missing"})
        return base64.b64decode(obs.screenshot.data)

    async def cursor_position(self) -> Point:
        """Read the pointer's position.

        Returns:
            It, in model-space pixels.

        Raises:
            BadReplyError: the reply holds no cursor position.
        """
        obs = await self.act([{"type": "cursor_position"}], observe=_STATE_ONLY)
        if obs.cursor is None:
            raise BadReplyError("the sandbox sent no cursor position", detail={"reason": "missing"})
        return obs.cursor

    async def read_clipboard(self) -> str:
        """Read the clipboard's text (the ``clipboard_read`` action; ``""``: it is empty).

        Returns:
            The text, at most :data:`~deskpod.protocol.MAX_CLIPBOARD_CHARS` characters.

        Raises:
            BadReplyError: the reply holds no clipboard text.
        """
        obs = await self.act([{"type": "clipboard_read"}], observe=_STATE_ONLY)
        if obs.clipboard is None:
            raise BadReplyError("the sandbox sent no clipboard text", detail={"reason": "missing"})
        return obs.clipboard

    async def write_clipboard(self, text: str, observe: ObserveLike = None) -> Observation:
        """Put ``text`` on the clipboard, for the next paste (the ``clipboard_write`` action)."""
        return await self._one({"type": "clipboard_write", "text": text}, observe)

    async def zoom(self, x0: int, y0: int, x1: int, y1: int) -> bytes:
        """Capture the model-space rectangle [x0, x1) × [y0, y1) at the screen's full resolution.

        Returns:
            A PNG of that region, as many pixels as it covers on the screen.

        Raises:
            BadReplyError: the reply holds no zoom image.
        """
        obs = await self.act([{"type": "zoom", "region": [x0, y0, x1, y1]}], observe=_STATE_ONLY)
        if obs.zoom is None:
            raise BadReplyError("the sandbox sent no zoom image", detail={"reason": "missing"})
        return base64.b64decode(obs.zoom.data)
