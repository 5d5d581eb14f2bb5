"""The X gate's own connection to the display: untrusted authorizations and what the gate asks.

A :class:`TrustedDisplay` is an X client of the daemon's (it presents the X server's own
cookie, so the server trusts it). Through the SECURITY extension (``SecurityGenerate
Authorization``; python-xlib's :mod:`Xlib.ext.security`) it asks the server for an
*untrusted* MIT-MAGIC-COOKIE-1: a client that presents it is untrusted, as ``ssh -X``'s
clients are, and revoking it (``SecurityRevokeAuthorization``) disconnects every client
that used it. It also answers the gate's questions: who owns a selection
(:mod:`~deskpod.agentd.display.xfilter`'s ``ConvertSelection`` rule), the ids the rules
need, and which of the agent's windows is on top at a point or holds the keyboard focus
(what the controller is told, :class:`AgentWindowInfo`).

Blocking python-xlib calls: the gate runs them on worker threads, one at a time (a lock).
Xlib failures become :class:`~deskpod.errors.DisplayUnavailableError` here, once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import security

from deskpod.agentd.display.xauth import COOKIE_BYTES, COOKIE_SCHEME
from deskpod.agentd.display.xconn import x_failures_become
from deskpod.agentd.display.xfilter import GateRules
from deskpod.agentd.display.xwindows import window_label
from deskpod.errors import DisplayUnavailableError

__all__ = ["AgentWindowInfo", "TrustedDisplay", "UNOWNED_SELECTION_NAME"]

UNOWNED_SELECTION_NAME: Final = "_DESKPOD_UNOWNED_SELECTION"
"""The selection a refused ``ConvertSelection`` is turned into: no client of the sandbox
owns it (an agent client that takes it would be asked for its own data)."""

_MAX_TREE_WINDOWS: Final = 64
"""Windows of one top-level window's tree examined for an agent's window (a window
manager's frame holds the client's window one or two levels down)."""

_translating = x_failures_become(
    lambda operation, exc: DisplayUnavailableError(f"the display refused {operation}: {type(exc).__name__}",
                                                   detail={"reason": "x_failed", "operation": operation}),
    lock_of=lambda display: display._lock)
"""Run under the connection's lock; Xlib and socket failures become
:class:`DisplayUnavailableError` (``detail["reason"] = "x_failed"``)."""


@dataclass(frozen=True)
class AgentWindowInfo:
    """A window of an agent's X client, as the daemon reads it (its labels are the
    client's own: untrusted). ``app``: the class part of ``WM_CLASS``; ``title``:
    ``_NET_WM_NAME`` or ``WM_NAME``; either ``None`` when unset; at most
    :data:`~deskpod.protocol.windows.MAX_WINDOW_LABEL_CHARS` characters
    (:func:`~deskpod.agentd.display.xwindows.window_label`). ``box``: [x0, y0, x1, y1] in screen pixels.
    ``window``: its X resource id. ``source``: the display grant its client came in with
    (``"command"``, or the desktop application's name: :meth:`~deskpod.agentd.display.xgate.XGate.grant`)."""

    app: str | None
    title: str | None
    box: tuple[int, int, int, int]
    window: int = 0
    source: str = "command"


class TrustedDisplay:
    """One trusted X connection to ``display_name`` (``XAUTHORITY`` names its cookie).

    Raises:
        DisplayUnavailableError: the display cannot be opened, or it has no SECURITY
            extension (``detail["reason"]`` ``"x_failed"`` or ``"no_security_extension"``).
    """

    def __init__(self, display_name: str) -> None:
        self._lock = threading.Lock()
        try:
            self._display = Display(display_name)
        except (xerror.DisplayError, xerror.XError, OSError) as exc:
            raise DisplayUnavailableError(f"the display {display_name} cannot be opened: {type(exc).__name__}",
                                          detail={"reason": "x_failed"}) from exc
        if not self._display.has_extension(security.extname):
            self._display.close()
            raise DisplayUnavailableError("the X server has no SECURITY extension: no untrusted grant can be made",
                                          detail={"reason": "no_security_extension"})
        # Errors of requests without a reply (a revoke of an authorization a restarted
        # server no longer has) are of no use to the gate: not printed, not raised.
        self._display.set_error_handler(lambda error, request: None)
        self._root = self._display.screen().root

    @_translating
    def generate(self, lifetime_s: float) -> tuple[int, bytes]:
        """A new untrusted MIT-MAGIC-COOKIE-1.

        Args:
            lifetime_s: how long it lasts while no client uses it, seconds (the server's
                ``timeout``; rounded up, at least 1).

        Returns:
            ``(authid, cookie)``: its id (for :meth:`revoke`) and the 16-byte cookie.
        """
        reply = self._display.security_generate_authorization(
            COOKIE_SCHEME.decode(), timeout=max(1, int(-(-lifetime_s // 1))),
            trust_level=security.SecurityClientUntrusted)
        cookie = bytes(reply.auth_data_return)
        if len(cookie) != COOKIE_BYTES:
            raise DisplayUnavailableError("the X server made a cookie of an unexpected length",
                                          detail={"reason": "x_failed", "operation": "generate"})
        return int(reply.authid), cookie

    @_translating
    def revoke(self, authid: int) -> None:
        """Revoke an authorization :meth:`generate` made: the server disconnects every client
        that connected with it and admits none with it any more."""
        self._display.security_revoke_authorization(authid)
        self._display.sync()

    @_translating
    def rules(self) -> GateRules:
        """What the gate's rules need of this server (:class:`~deskpod.agentd.display.xfilter.GateRules`)."""
        big = self._display.query_extension("BIG-REQUESTS")
        return GateRules(
            root=self._root.id,
            big_requests_opcode=big.major_opcode if big is not None else None,
            unowned_selection=self._display.intern_atom(UNOWNED_SELECTION_NAME),
            active_window_atom=self._display.intern_atom("_NET_ACTIVE_WINDOW"),
        )

    @_translating
    def selection_owner(self, selection: int) -> int:
        """The window that owns atom ``selection`` now (0: none)."""
        owner = self._display.get_selection_owner(selection)
        return int(owner) if isinstance(owner, int) else int(owner.id)

    @_translating
    def window_at(self, x: int, y: int, agent_window: Callable[[int], bool]) -> AgentWindowInfo | None:
        """The agent's window on top at screen point (``x``, ``y``): the top-level window
        there (a child of the root, a window manager's frame included) when it is, or holds,
        a window of an agent's client; ``None`` when the sandbox's own window is on top."""
        top = self._root.translate_coords(self._root, x, y).child
        if not top:
            return None
        found = self._agent_in_tree(top, agent_window)
        return self._describe(found) if found is not None else None

    @_translating
    def focus_window(self, agent_window: Callable[[int], bool]) -> AgentWindowInfo | None:
        """The agent's window with the keyboard focus (``None``: the focus is elsewhere)."""
        focus = self._display.get_input_focus().focus
        if isinstance(focus, int) or not agent_window(focus.id):
            return None
        return self._describe(focus)

    def close(self) -> None:
        """Close the connection (idempotent; errors are ignored)."""
        with self._lock:
            try:
                self._display.close()
            except (xerror.XError, xerror.ConnectionClosedError, OSError):
                pass

    def _agent_in_tree(self, top: Any, agent_window: Callable[[int], bool]) -> Any | None:
        """The first window of ``top``'s tree (breadth first, at most :data:`_MAX_TREE_WINDOWS`)
        that an agent's client made."""
        queue, seen = [top], 0
        while queue and seen < _MAX_TREE_WINDOWS:
            window = queue.pop(0)
            seen += 1
            if agent_window(window.id):
                return window
            queue += list(window.query_tree().children)
        return None

    def _describe(self, window: Any) -> AgentWindowInfo:
        geometry = window.get_geometry()
        origin = window.translate_coords(self._root, 0, 0)
        x0, y0 = -origin.x, -origin.y
        wm_class = window.get_wm_class()
        title = window.get_full_text_property(self._display.intern_atom("_NET_WM_NAME"),
                                              self._display.intern_atom("UTF8_STRING"))
        if not title:
            title = window.get_full_text_property(Xatom.WM_NAME, X.AnyPropertyType)
        return AgentWindowInfo(app=window_label(wm_class[1] if wm_class else None), title=window_label(title),
                               box=(x0, y0, x0 + geometry.width, y0 + geometry.height), window=int(window.id))

