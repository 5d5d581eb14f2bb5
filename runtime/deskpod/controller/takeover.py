"""Take over and hand back: a person drives the sandbox through the run's own executor.

A person with an approver connection takes a run over (``takeover``, or the answer
``takeover`` to a pause); the run then stops asking its agent and waits, in its own
task, for the person's inputs (:meth:`Takeover.submit`): each is a protocol action,
validated like any, sent on the run's own sandbox connection in the order it came
(the daemon's serial executor: a failed or timed-out input releases what it pressed),
and written to the audit log as a ``human_input`` record whose ``actor`` is
``human:<principal>``. Human input is not risk-gated (the person is the approver) but
stays bounded: the policy's blocked actions are refused, an address-bar navigation is
judged against the allowlists before its Enter is sent, and every tab's URL is checked
after each input as for the agent. ``handback`` releases any button the person left
held, re-observes, and the agent plans again on that fresh observation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from deskpod.errors import BusyError, InvalidRequestError, UnauthorizedError
from deskpod.protocol import Action

__all__ = [
    "HumanInput",
    "MAX_QUEUED_HUMAN_INPUTS",
    "Takeover",
    "TakeoverListener",
]

MAX_QUEUED_HUMAN_INPUTS = 64
"""Inputs a person may have waiting for the executor; more are refused (``busy``)."""

TakeoverListener = Callable[[bool, "str | None"], None]
"""Called with ``(active, by)`` when a takeover begins or ends."""


@dataclass(eq=False)
class HumanInput:
    """One input of the person in control: a validated protocol ``action``, who sent it
    (``principal``) and ``done``, which gets ``None`` once it ran or the error it failed with."""

    action: Action
    principal: str
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Takeover:
    """A run's takeover state, shared by the service (which requests, feeds and ends it) and
    the GUI run (which holds it: :class:`deskpod.controller.gui.human.Human` drains the inputs).

    ``active``: a person is in control; ``by``: their principal. ``listener``: told of each change.
    """

    def __init__(self) -> None:
        self.active = False
        self.by: str | None = None
        self.requested_by: str | None = None
        self.listener: TakeoverListener | None = None
        self._inputs: asyncio.Queue[HumanInput] = asyncio.Queue(maxsize=MAX_QUEUED_HUMAN_INPUTS)
        self._handback = asyncio.Event()

    def request(self, principal: str) -> None:
        """Ask the run to hand the sandbox to ``principal`` at its next checkpoint.

        Raises:
            InvalidRequestError: someone is already in control.
        """
        if self.active or self.requested_by is not None:
            raise InvalidRequestError(f"the sandbox is already taken over by {self.by or self.requested_by}")
        self.requested_by = principal

    def begin(self, principal: str) -> None:
        """The runner hands control to ``principal`` (called by the runner)."""
        self.requested_by = None
        self.active, self.by = True, principal
        self._handback.clear()
        if self.listener is not None:
            self.listener(True, principal)

    def end(self) -> None:
        """The runner took control back (called by the runner); waiting inputs fail."""
        while not self._inputs.empty():
            item = self._inputs.get_nowait()
            if not item.done.done():
                item.done.set_exception(InvalidRequestError("the sandbox was handed back before this input ran"))
        self.active, self.by = False, None
        if self.listener is not None:
            self.listener(False, None)

    def _check(self, principal: str) -> None:
        if not self.active:
            raise InvalidRequestError("the sandbox is not taken over: send takeover first")
        if principal != self.by:
            raise UnauthorizedError(f"the sandbox is taken over by {self.by}, not {principal}",
                                    detail={"rule": "takeover_holder"})

    async def submit(self, action: Action, principal: str) -> None:
        """Queue ``action`` for the executor and wait until it ran.

        Raises:
            InvalidRequestError: not taken over, or handed back before it ran.
            UnauthorizedError: another person holds the takeover.
            BusyError: :data:`MAX_QUEUED_HUMAN_INPUTS` inputs are already waiting.
            DeskpodError: the input was refused or failed (the run goes on).
        """
        self._check(principal)
        item = HumanInput(action, principal)
        try:
            self._inputs.put_nowait(item)
        except asyncio.QueueFull:
            raise BusyError(f"{MAX_QUEUED_HUMAN_INPUTS} inputs are waiting for the sandbox") from None
        await item.done

    def handback(self, principal: str) -> None:
        """End the takeover once the inputs queued before it ran.

        Raises:
            InvalidRequestError: not taken over.
            UnauthorizedError: another person holds it.
        """
        self._check(principal)
        self._handback.set()

    async def next(self) -> HumanInput | None:
        """The next input to run (``None``: handed back and no input is left)."""
        if not self._inputs.empty():
            return self._inputs.get_nowait()
        getting = asyncio.ensure_future(self._inputs.get())
        back = asyncio.ensure_future(self._handback.wait())
        try:
            await asyncio.wait({getting, back}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            back.cancel()
            if not getting.done():
                getting.cancel()
        if getting.done() and not getting.cancelled():
            return getting.result()
        return None
