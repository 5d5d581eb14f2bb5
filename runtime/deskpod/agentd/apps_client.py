"""agentd's side of the applications wire: starts desktop applications in their zone, reads
their native controls and reads or owns the zone's clipboard.

Each :class:`~deskpod.protocol.OpenApp` gets a display grant of its own from the X gate
(:meth:`deskpod.agentd.display.xgate.XGate.grant`: an untrusted cookie), held until the
next reset, when the applications runner has killed every process of the zone and the
grants are revoked (the X server then drops any client that still used them). Everything
the runner answers is untrusted (:func:`~deskpod.agentd.workspace.runner_client.call_runner`).
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Final, TypeVar

from pydantic import BaseModel

from deskpod.agentd.apps_wire import (
    AppsAccessible,
    AppsAccessibleRequest,
    AppsClipboard,
    AppsClipboardRequest,
    AppsOpened,
    AppsOpenRequest,
    AppsRestored,
    AppsRestoreRequest,
    AppsSnapshot,
    AppsSnapshotRequest,
    parse_apps_reply,
)
from deskpod.agentd.runner_wire import RunnerResetDone, RunnerResetRequest
from deskpod.agentd.runner_wire import X11Grant
from deskpod.agentd.workspace.runner_client import RESET_TIMEOUT_S, call_runner, parse_address, unexpected_reply
from deskpod.errors import DisplayUnavailableError, ExecutionError, WorkspaceUnavailableError
from deskpod.protocol import OpenApp

__all__ = [
    "ACCESSIBLE_TIMEOUT_S", "APPS_CONNECT_TIMEOUT_S", "APP_GRANT_LIFETIME_S", "AppGrantProvider", "AppsClient",
    "MAX_OPEN_APPS", "OPEN_TIMEOUT_S",
]

log = logging.getLogger(__name__)

APPS_CONNECT_TIMEOUT_S: Final = 2.0
"""How long connecting to the applications runner may take, seconds: on the browser-only compose
stack the zone's name never resolves (Docker's resolver does not answer it), and ``open_app``
then says ``no_desktop`` after this long; with the zone running it resolves at once."""

OPEN_TIMEOUT_S: Final = 15.0
"""How long agentd waits for the runner to start an application, seconds."""

ACCESSIBLE_TIMEOUT_S: Final = 4.0
"""How long agentd waits for the runner to read native controls, seconds (its reader is killed
after :data:`~deskpod.agentd.apps_runner.READER_TIMEOUT_S`)."""

APP_GRANT_LIFETIME_S: Final = 24 * 3600.0
"""The lifetime of an application's display cookie once its last client left, seconds
(revoked at the next reset anyway)."""

MAX_OPEN_APPS: Final = 32
"""Most applications started between two resets. Each holds a display grant (a cookie and
the daemon's trusted X connection that made it) until the reset, whether or not its
program still runs; the X gate carries at most
:data:`~deskpod.agentd.display.xgate.MAX_GATE_CONNECTIONS` agent clients at once anyway."""

_WHO: Final = "the applications runner"

Answer = TypeVar("Answer", bound=BaseModel)

AppGrantProvider = Callable[[float, str], AbstractAsyncContextManager[X11Grant]]
"""Makes a display grant for one application, live inside its ``async with`` (its arguments:
the cookie's lifetime, seconds, and the application's name, which the X gate gives its
windows as their source: :meth:`deskpod.agentd.display.xgate.XGate.grant`)."""


class AppsClient:
    """Talks to the applications runner of the desktop profile (see the module).

    Args:
        address: its ``host:port`` (``DESKPOD_APPS_RUNNER``); ``None``: this sandbox has no
            desktop applications' zone, ``open_app`` fails (``no_desktop``).
        grants: makes a display grant for an application (the X gate's); ``None``: no display to grant.
    """

    def __init__(self, address: str | None, grants: AppGrantProvider | None) -> None:
        self.address = parse_address(address) if address else None
        self.grants = grants
        self._held = contextlib.AsyncExitStack()
        self.asked = False
        """Whether an application was asked for since the last reset (only then is there
        anything to clear: the runner starts nothing by itself, and an application dies with
        the X server it drew on)."""
        self._opened = 0
        self._clipboard_grant = contextlib.AsyncExitStack()

    async def open(self, action: OpenApp) -> int:
        """Start ``action``'s application with a grant of its own; return its pid in the zone.

        Raises:
            ExecutionError: no desktop applications' zone (``detail["reason"]``
                ``"no_desktop"``), :data:`MAX_OPEN_APPS` were started since the last reset
                (``"too_many_apps"``), or it could not start (``"app_failed"``).
            DisplayUnavailableError: no display grant could be made.
            WorkspaceUnavailableError: the runner is unreachable or answered nonsense.
        """
        grants = self._grants()
        if self._opened >= MAX_OPEN_APPS:
            raise ExecutionError(f"{MAX_OPEN_APPS} applications were opened since the last reset: reset the sandbox "
                                 "to open more", detail={"reason": "too_many_apps"})
        async with contextlib.AsyncExitStack() as attempt:
            grant = await attempt.enter_async_context(grants(APP_GRANT_LIFETIME_S, action.app))
            reply = await self._ask_zone(AppsOpenRequest(action=action, x11=grant), OPEN_TIMEOUT_S, AppsOpened,
                                         "this sandbox's desktop applications' zone cannot be reached")
            self._held.push_async_exit(attempt.pop_all())
            self._opened += 1
        return reply.pid

    async def accessible(self, request: AppsAccessibleRequest) -> AppsAccessible:
        """Ask the applications' accessibility trees ``request``'s question (see
        :class:`~deskpod.agentd.apps_wire.AppsAccessibleRequest`); an empty answer when no
        application was opened since the last reset.

        Raises:
            WorkspaceUnavailableError: the runner is unreachable or answered nonsense or not in time.
            DeskpodError: the runner's error (``execution_failed``, reason ``accessibility``).
        """
        if self.address is None or not self.asked:
            return AppsAccessible()
        return await self._ask(request, ACCESSIBLE_TIMEOUT_S, AppsAccessible)

    async def clipboard(self, text: str | None) -> str | None:
        """Read the zone's clipboard (``text`` ``None``: what an application copied) or own it
        with ``text`` (the applications' next paste pastes it), through a helper of the zone on a
        display grant of its own (:mod:`deskpod.agentd.zone_clipboard`; source ``clipboard``).
        A write's grant is held until the next write or reset; a read's ends with it.

        Returns:
            The text read (untrusted: the zone's), or ``None`` after a write.

        Raises:
            ExecutionError: no desktop applications' zone (``no_desktop``) or the helper failed
                (``clipboard``).
            DisplayUnavailableError: no display grant could be made.
            WorkspaceUnavailableError: the runner is unreachable or answered nonsense.
        """
        grants = self._grants()
        if text is not None:
            await self._clipboard_grant.aclose()
        async with contextlib.AsyncExitStack() as attempt:
            grant = await attempt.enter_async_context(grants(APP_GRANT_LIFETIME_S, "clipboard"))
            self.asked = True
            reply = await self._ask(AppsClipboardRequest(x11=grant, text=text), ACCESSIBLE_TIMEOUT_S, AppsClipboard)
            if text is not None:
                self._clipboard_grant.push_async_exit(attempt.pop_all())
        return reply.text

    async def snapshot(self) -> bytes | None:
        """The zone's home, packed by the runner (:mod:`deskpod.agentd.zone_home`): a gzip'd tar
        (untrusted: the zone's files); ``None`` when this sandbox has no such zone or nothing
        ran in it since the reset that emptied its home.

        Raises:
            WorkspaceUnavailableError: the runner is unreachable or answered nonsense.
            DeskpodError: the runner's error (``too_large``).
        """
        if self.address is None or not self.asked:
            return None
        reply = await self._ask(AppsSnapshotRequest(), RESET_TIMEOUT_S, AppsSnapshot)
        return base64.b64decode(reply.archive)

    async def restore(self, archive: bytes) -> int:
        """Write a snapshot's ``archive`` of the zone's home back over it (the next reset
        empties it again).

        Returns:
            The number of files written.

        Raises:
            ExecutionError: this sandbox has no desktop applications' zone, or it cannot be
                reached (``no_desktop``).
            WorkspaceUnavailableError: the runner answered nonsense or not in time.
            DeskpodError: the runner's error (a bad archive).
        """
        refusal = "this sandbox has no desktop applications to restore (start it with the desktop profile)"
        if self.address is None:
            raise ExecutionError(refusal, detail={"reason": "no_desktop"})
        reply = await self._ask_zone(AppsRestoreRequest(archive=base64.b64encode(archive).decode()), RESET_TIMEOUT_S,
                                     AppsRestored, refusal)
        return reply.files

    def _grants(self) -> AppGrantProvider:
        """The display grants' maker, once this sandbox is known to have the zone and a display.

        Raises:
            ExecutionError: no desktop applications' zone (``detail["reason"]`` ``"no_desktop"``).
            DisplayUnavailableError: no display to grant (``"no_provider"``).
        """
        if self.address is None:
            raise ExecutionError("this sandbox has no desktop applications (start it with the desktop profile)",
                                 detail={"reason": "no_desktop"})
        if self.grants is None:
            raise DisplayUnavailableError("this sandbox grants no display to applications",
                                          detail={"reason": "no_provider"})
        return self.grants

    async def _ask(self, request: BaseModel, timeout_s: float, answer: type[Answer]) -> Answer:
        """The runner's reply to ``request``, which must be an ``answer``.

        Raises:
            WorkspaceUnavailableError: the runner is unreachable, answered nonsense, another
                reply or not within ``timeout_s``.
            DeskpodError: the runner's error.
        """
        assert self.address is not None
        reply = await call_runner(*self.address, request, timeout_s, None, parse_apps_reply, _WHO,
                                  APPS_CONNECT_TIMEOUT_S)
        if not isinstance(reply, answer):
            raise unexpected_reply(reply, _WHO)
        return reply

    async def _ask_zone(self, request: BaseModel, timeout_s: float, answer: type[Answer], refusal: str) -> Answer:
        """:meth:`_ask` for a request that leaves something in the zone (an application, files
        in its home): the next reset must clear it. A runner that cannot be reached (the compose
        stack without the desktop profile) left nothing: ``ExecutionError`` ``no_desktop``, its
        message ``refusal`` and why.

        Raises:
            ExecutionError: the zone cannot be reached (``no_desktop``).
            WorkspaceUnavailableError: the runner answered nonsense or not in time.
            DeskpodError: the runner's error.
        """
        asked, self.asked = self.asked, True
        try:
            return await self._ask(request, timeout_s, answer)
        except WorkspaceUnavailableError as exc:
            if exc.detail.get("reason") == "unreachable":
                self.asked = asked  # it never reached a runner: nothing more to clear
                raise ExecutionError(f"{refusal} ({exc.message})", detail={"reason": "no_desktop"}) from exc
            raise

    async def reset(self) -> RunnerResetDone | None:
        """Kill every application and clear the zone, then revoke every grant; ``None`` when
        no application was asked for since the last reset that cleared the zone, this sandbox
        has no such zone or it is not running (nothing to clear). Asking nothing then matters: on the browser-only
        compose stack the zone's name resolves to nothing only after the resolver's timeout
        (5 s, measured by ``python -m bench desktop``).

        Raises:
            WorkspaceUnavailableError: the runner answered nonsense or not in time.
            DeskpodError: the runner's error.
        """
        try:
            if self.address is None or not self.asked:
                return None
            try:
                reply = await self._ask(RunnerResetRequest(), RESET_TIMEOUT_S, RunnerResetDone)
            except WorkspaceUnavailableError as exc:
                if exc.detail.get("reason") != "unreachable":
                    raise
                log.info("no desktop applications' zone to reset: %s", exc.message)
                return None
            # Only a zone that said it was cleared has nothing left: after a failed reset the
            # next one asks again, or what survived this one would survive every later one.
            self.asked = False
            return reply
        finally:
            held, self._held, self._opened = self._held, contextlib.AsyncExitStack(), 0
            clipboard, self._clipboard_grant = self._clipboard_grant, contextlib.AsyncExitStack()
            await held.aclose()
            await clipboard.aclose()
