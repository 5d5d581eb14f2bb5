"""The sandbox as the controller sees it: the verbs the run loops use, and nothing else.

:class:`SandboxAPI` is a :class:`typing.Protocol`; :class:`deskpod.client.SandboxClient`
(the authenticated websocket to a sandbox daemon) satisfies it, and so can an
in-memory fake (``tests/support/fake_sandbox.py``), so policy enforcement is tested
without Docker. The verbs:

- :meth:`~SandboxAPI.act`: run actions and observe. With no action it is an
  observation; with ``ObserveOptions(element_at=...)`` it is the element probe the
  risk classifier asks for (the control under a point, the focused element), and
  with a ``cursor_position`` action the pointer probe.
- :meth:`~SandboxAPI.navigate`, :meth:`~SandboxAPI.configure` (the model space),
  :meth:`~SandboxAPI.set_egress` (the hosts the browser may reach during a run),
  :meth:`~SandboxAPI.reset`, :meth:`~SandboxAPI.close`.
- :meth:`~SandboxAPI.request` with :meth:`~SandboxAPI.next_id`: a workspace
  request of a code run (its reply's ``workspace`` holds the tool's output).
- ``hello``: the daemon's greeting (the screen and the model space).

Everything a sandbox returns is untrusted; the client checks replies
(:mod:`deskpod.client.untrusted`) before they reach the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from deskpod.protocol import (
    Action,
    AnyWorkspaceReply,
    Hello,
    Observation,
    ObserveOptions,
    PermissionGrants,
    ScreenExpectation,
    Size,
    WorkspaceRequest,
)

__all__ = ["SandboxAPI"]


class SandboxAPI(Protocol):
    """What a run loop needs from a sandbox (see the module's docstring)."""

    hello: Hello

    def next_id(self) -> str:
        """Return a fresh request id."""
        ...

    async def act(
        self, actions: Sequence[dict[str, Any] | Action], observe: ObserveOptions | None = None,
        timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *, allow_downloads: bool = False,
        mask: Sequence[str] = (),
    ) -> Observation:
        """Run ``actions`` in order (none: only observe) and return the observation after them;
        ``expect``: what must hold right before a pointer action's input (else
        :class:`~deskpod.errors.ScreenChangedError` and nothing of it is sent);
        ``allow_downloads``: the controller's permission for downloads they start;
        ``mask``: secrets the daemon masks in every image and text from now until a reset
        (:mod:`deskpod.protocol.mask`)."""
        ...

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0, *,
                       allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Load ``url`` in the browser and return the observation after it (``allow_downloads``,
        ``mask``: as in act)."""
        ...

    async def configure(self, model_size: Size | None) -> Size:
        """Declare the model space (``None``: the screen); return the one in force."""
        ...

    async def set_egress(self, allowed_domains: Sequence[str] | None) -> list[str] | None:
        """Let the browser reach only ``allowed_domains`` (``None``: no run limit); return the list in force."""
        ...

    async def set_permissions(self, grants: PermissionGrants) -> PermissionGrants:
        """Grant the browser's pages ``grants``, deny every other permission; return the grants in force."""
        ...

    async def reset(
        self, start_url: str | None = None, *, token_sha256: str, observe: ObserveOptions | None = None
    ) -> Observation:
        """Put the sandbox back to its baseline, rotating its token; return the fresh observation."""
        ...

    async def request(self, request: WorkspaceRequest) -> AnyWorkspaceReply:
        """Run one workspace request; the reply's ``workspace`` holds its output."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...
