"""The state of ``deskpod serve``: :class:`ControllerService`.

It holds what the operator configured (tokens, policy, audit folder, egress proxy, the
sandboxes it vouches for, host-held secrets) and what is live: the connections, the
sandboxes in use, the questions waiting for an answer. It answers the questions every
connection asks of it (whose token, which sandbox, which session) and queues messages
for approver and viewer connections, each of which sends its queue in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deskpod.backend.pool_leases import PoolLeases
from deskpod.request_observer import RequestObserver
from deskpod.client.snapshot_store import SnapshotStore
from deskpod.controller.audit_sign import AuditPublicKey, AuditSigner
from deskpod.controller.credentials import SecretStore
from deskpod.controller.egress import EgressControl
from deskpod.controller.policy.policy_file import Policy
from deskpod.errors import BusyError, InvalidRequestError
from deskpod.service.messages import SandboxRef, ServiceHealth, ServiceMessage
from deskpod.service.server.endpoints import endpoint, matching
from deskpod.service.server.owned import OwnedSandbox
from deskpod.service.server.pooled import PooledSandbox
from deskpod.service.server.session import Peer, Pending, Role, Session, SessionSandbox
from deskpod.settings.sandboxes import parse_sandbox_entries
from deskpod.timing import timed_outcome
from deskpod.tokens import bearer_refusal

__all__ = ["BUSY_RETRY_AFTER_S", "ControllerService", "MAX_WATCHER_QUEUE", "MAX_WITHDRAWN_REMEMBERED", "Recognised",
           "ResetKind", "busy"]

log = logging.getLogger(__name__)

BUSY_RETRY_AFTER_S = 5.0
"""The retry hint of the ``busy`` an ``open`` gets while another session holds a sandbox the
service owns (``detail: {sandbox, retry_after_s}``), seconds: the service keeps no queue."""

MAX_WATCHER_QUEUE = 1000
"""Messages an approver or viewer connection may leave unsent before the service closes it."""

MAX_WITHDRAWN_REMEMBERED = 1000
"""Withdrawn questions whose reason the service remembers, to tell a late answer why it is refused."""


ResetKind = Literal["open", "session", "pool"]
"""A reset the service makes: ``open`` (a sandbox it owns, reset as a session opens it by name),
``session`` (a session's ``reset``), ``pool`` (a pool's sandbox given back when its session ends:
the pool resets it before the release returns)."""


def busy(name: str) -> BusyError:
    """The ``busy`` an ``open`` gets while another session holds the owned sandbox ``name``,
    with its retry hint (:data:`BUSY_RETRY_AFTER_S`)."""
    return BusyError(f"sandbox {name!r} is in use by another session: retry in {BUSY_RETRY_AFTER_S:g} s",
                     detail={"sandbox": name, "retry_after_s": BUSY_RETRY_AFTER_S})


@dataclass(frozen=True)
class Recognised:
    """What the service knows of a session's sandbox (:meth:`ControllerService.recognise`):
    ``stack``: it is the stack's sandbox, behind the stack's egress proxy; ``vouched``: it is one
    of ``DESKPOD_SERVE_SANDBOXES``."""

    stack: bool
    vouched: bool


@dataclass
class ControllerService:
    """The ``deskpod serve`` service: the operator's configuration, and the connections,
    sessions and questions of the moment (its connections are served by
    :func:`~deskpod.service.server.connection.serve_connection`).

    Args:
        token_sha256: SHA-256 (hex) of the bearer token agents' connections present.
        approver_token_sha256: SHA-256 (hex) of the approver token (``None``: no
            approver can connect); it must differ from ``token_sha256``.
        audit_dir: where runs write their audit logs, screenshots and scenes.
        policy: the operator's policy: a session's own policy can only tighten it
            (:func:`deskpod.controller.policy.policy_file.tightened`).
        signer: seals every run's audit log (default: the controller's key,
            :meth:`AuditSigner.load_or_create`, loaded when the service is made).
        audit_public_key: the key the console checks logs' seals with, the operator's pinned
            one (``DESKPOD_AUDIT_PUBLIC_KEY``); ``None``: ``signer``'s own public half, held in
            memory. Never a key file found beside the logs (:attr:`seal_key`).
        egress_control: the stack's egress proxy control (``None``: none), used only for
            sessions on ``egress_sandbox_url``'s sandbox (by endpoint, :meth:`recognise`).
        egress_sandbox_url: the websocket URL of the stack's sandbox, the one behind that proxy.
        secrets: the host-held secrets a run's ``type_secret`` may type (:mod:`deskpod.controller.credentials`).
        sandboxes: the entries of ``DESKPOD_SERVE_SANDBOXES`` (:mod:`deskpod.settings.sandboxes`):
            the sandboxes the operator vouches for, recognised by the endpoint ``open``'s
            ``sandbox.url`` reaches, however it is spelled (:meth:`recognise`): only a session on one of them is given ``secrets`` and may
            ask a person for a credential; sessions on any other sandbox run without either
            (default none: no session). The named ones the service owns (:attr:`owned`).
        snapshots: the store ``open.restore`` names snapshots in (``None``: no store, such an open is refused).
        environ: where an owned sandbox's ``token_env`` is read (default ``os.environ``).
        pool_state_dir: the pools' state folder, for ``NAME=pool:POOL`` entries (``None``: the default).

    One session at a time may run on a sandbox (``in_use`` holds their daemons'
    ``sandbox_id``, ``claimed`` the names of the owned ones); ``pending`` holds the
    questions waiting for an answer, by id, and ``withdrawn`` why the last ones nobody may
    answer any more were withdrawn.

    Raises:
        InvalidRequestError: the approver token is the agents' token, or an entry of
            ``sandboxes`` does not parse.
        SandboxError: an owned sandbox's token file cannot be read or seeded.
    """

    token_sha256: str
    audit_dir: str = "deskpod-audit"
    policy: Policy = field(default_factory=Policy)
    signer: AuditSigner = field(default_factory=AuditSigner.load_or_create)
    audit_public_key: AuditPublicKey | None = None
    approver_token_sha256: str | None = None
    egress_control: EgressControl | None = None
    egress_sandbox_url: str | None = None
    secrets: SecretStore = field(default_factory=SecretStore)
    sandboxes: frozenset[str] = frozenset()
    snapshots: SnapshotStore | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    pool_state_dir: Path | None = None
    in_use: set[str] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)
    connections: set[Peer] = field(default_factory=set)
    pending: dict[str, Pending] = field(default_factory=dict)
    withdrawn: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Why each of the last :data:`MAX_WITHDRAWN_REMEMBERED` withdrawn questions was withdrawn, by id."""
    record_listeners: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    """Called with ``(session, record)`` for every audit record of every session (the live view's meta)."""
    reset_listeners: list[Callable[[str, str, float], None]] = field(default_factory=list)
    """Called with ``(kind, outcome, duration_s)`` for every reset of a sandbox the service makes
    (:meth:`resetting`)."""
    request_listeners: list[RequestObserver] = field(default_factory=list)
    """Called for every request the service's sessions send a sandbox daemon (:meth:`requested`,
    the observer each of its connections installs)."""

    @property
    def seal_key(self) -> AuditPublicKey:
        """The key the console checks audit logs' seals with: :attr:`audit_public_key`, else the signer's."""
        return self.audit_public_key if self.audit_public_key is not None else self.signer.public_key

    def __post_init__(self) -> None:
        try:
            entries = parse_sandbox_entries(self.sandboxes)
        except ValueError as exc:
            raise InvalidRequestError(f"DESKPOD_SERVE_SANDBOXES: {exc}") from exc
        self.vouched: frozenset[str] = frozenset(e.url for e in entries if e.pool is None)
        """The URLs of every sandbox the service vouches for (owned ones included)."""
        self.owned: dict[str, OwnedSandbox] = {e.name: OwnedSandbox(e, self.environ)
                                               for e in entries if e.name is not None and e.pool is None}
        """The sandboxes the service owns, by name."""
        self.pools: dict[str, PooledSandbox] = {e.name: PooledSandbox(e.name, PoolLeases(e.pool, self.pool_state_dir))
                                                for e in entries if e.name is not None and e.pool is not None}
        """The warm pools the service leases a sandbox of for each session, by name (vouched for too)."""
        for owned in self.owned.values():
            owned.seed()
        if self.approver_token_sha256 == self.token_sha256:
            raise InvalidRequestError("the approver token must differ from the service token: whoever submits "
                                      "actions must not be able to approve them")
        if self.approver_token_sha256 is None:
            log.warning("no approver token (DESKPOD_SERVE_APPROVER_TOKEN): confirmations are denied when they time "
                        "out, unless a session approves itself under a policy that allows it")
        if self.secrets.names and not self.vouched:
            log.warning("%d host-held secret(s) but no sandbox listed in DESKPOD_SERVE_SANDBOXES: no session will type "
                        "them", len(self.secrets.names))

    @staticmethod
    def credentials_refusal(recognised: Recognised) -> str | None:
        """Why a session on a sandbox :meth:`recognise` gave may type no secret and ask nobody
        for a credential (``None``: the service vouches for it, so it may)."""
        if recognised.vouched:
            return None
        return ("the service does not vouch for this session's sandbox (it is none of DESKPOD_SERVE_SANDBOXES), "
                "and the page and field such a secret would go to are what that sandbox reports")

    def owned_sandbox(self, sandbox: SandboxRef) -> OwnedSandbox | None:
        """The sandbox the service owns that ``sandbox`` names, by name or by its URL (``None``:
        an ``{url, token}`` of a sandbox the service does not own).

        Raises:
            InvalidRequestError: no sandbox of that name.
        """
        if sandbox.name is not None:
            found = self.owned.get(sandbox.name)
            if found is None and sandbox.name not in self.pools:
                raise InvalidRequestError(f"no sandbox named {sandbox.name!r} (the operator registers them in "
                                          "DESKPOD_SERVE_SANDBOXES)", detail={"sandbox": sandbox.name})
            return found
        return next((o for o in self.owned.values() if o.entry.url == sandbox.url), None)

    def claim(self, owned: OwnedSandbox) -> None:
        """Hold ``owned`` for one session (released with :meth:`release`).

        Raises:
            BusyError: another session holds it (``detail``: ``sandbox``, ``retry_after_s``).
        """
        if owned.name in self.claimed:
            raise busy(owned.name)
        self.claimed.add(owned.name)

    def release(self, owned: OwnedSandbox | None, sandbox_id: str | None) -> None:
        """Let the next session have the sandbox."""
        if owned is not None:
            self.claimed.discard(owned.name)
        if sandbox_id is not None:
            self.in_use.discard(sandbox_id)

    async def recognise(self, sandbox: SandboxRef) -> Recognised:
        """Whether ``sandbox`` is the stack's sandbox and whether the service vouches for it, by
        the endpoint its URL reaches (:mod:`~deskpod.service.server.endpoints`), however the
        opener spelled it.

        Raises:
            SandboxError: its URL, or the stack sandbox's, does not resolve (``reason``
                ``"unresolvable"``): the session is refused rather than run without the proxy's list.
        """
        mine = await endpoint(sandbox.url or "")
        stack = False
        if self.egress_sandbox_url is not None and self.egress_control is not None:
            stack = mine.meets(await endpoint(self.egress_sandbox_url))
        return Recognised(stack=stack, vouched=bool(await matching(mine, sorted(self.vouched))))

    def egress_control_for(self, sandbox: SandboxRef, recognised: Recognised) -> EgressControl | None:
        """The egress proxy control of the sandbox a session drives: the stack's for the
        stack's sandbox (:meth:`recognise`: whatever URL the opener gave), the opener's for a
        pool slot, else ``None``.

        Raises:
            InvalidRequestError: the opener's ``egress_control`` is not a usable URL.
        """
        if recognised.stack:
            return self.egress_control
        if sandbox.egress_control is None:
            return None
        try:
            return EgressControl(sandbox.egress_control.url, sandbox.egress_control.token,
                                 tenant=sandbox.egress_control.tenant)
        except ValueError as exc:
            raise InvalidRequestError(f"sandbox.egress_control: {exc}") from exc

    def session_sandbox(self, session: str) -> SessionSandbox | None:
        """The sandbox session ``session`` drives, with its current token (``None``: no such
        session on a live connection)."""
        for connection in self.connections:
            found = connection.sessions.get(session)
            if found is not None:
                return found.sandbox
        return None

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries either bearer token."""
        return self.role(header) is not None

    def role(self, header: str | None) -> Role | None:
        """The role an ``Authorization`` header's bearer token grants (``None``: neither token)."""
        if bearer_refusal(header, self.token_sha256) is None:
            return "agent"
        if self.approver_token_sha256 is not None and bearer_refusal(header, self.approver_token_sha256) is None:
            return "approver"
        return None

    async def to_approvers(self, message: ServiceMessage) -> None:
        """Send ``message`` to every approver and viewer connection (:meth:`to_watchers`)."""
        self.to_watchers(message)

    def to_watchers(self, message: ServiceMessage) -> None:
        """Queue ``message`` for every connection of a :data:`~deskpod.service.server.session.WATCHER_ROLES` role.

        Each such connection sends its queue in order, so that a console sees a session's
        views and questions in the order the run made them; one whose queue holds
        :data:`MAX_WATCHER_QUEUE` unsent messages is closed (a console that stopped reading).
        """
        for connection in list(self.connections):
            outbox = connection.outbox
            if outbox is None:
                continue
            if outbox.full():
                log.warning("closing a %s connection that stopped reading", connection.role)
                connection.outbox = None
                connection.overflowed.set()
                continue
            outbox.put_nowait(message)

    def remember_withdrawn(self, key: str, reason: str) -> None:
        """Remember why question ``key`` was withdrawn (the oldest is forgotten past
        :data:`MAX_WITHDRAWN_REMEMBERED`)."""
        self.withdrawn[key] = reason
        while len(self.withdrawn) > MAX_WITHDRAWN_REMEMBERED:
            self.withdrawn.popitem(last=False)

    def find_session(self, session: str) -> Session:
        """The session ``session`` of any connection.

        Raises:
            InvalidRequestError: there is none.
        """
        for connection in self.connections:
            found = connection.sessions.get(session)
            if found is not None:
                return found
        raise InvalidRequestError(f"no session {session!r}")

    @contextmanager
    def resetting(self, kind: ResetKind) -> Iterator[None]:
        """Time the reset the block makes and tell :attr:`reset_listeners` of it, however it ends.

        Args:
            kind: which reset (:data:`ResetKind`).

        Yields:
            Nothing; the listeners are told the outcome as :func:`~deskpod.timing.timed_outcome` names it.
        """
        with timed_outcome(lambda outcome, duration_s: self._reset_done(kind, outcome, duration_s)):
            yield

    def _reset_done(self, kind: ResetKind, outcome: str, duration_s: float) -> None:
        for listener in self.reset_listeners:
            listener(kind, outcome, duration_s)

    def requested(self, request_type: str, outcome: str, duration_s: float) -> None:
        """Tell :attr:`request_listeners` of one request to a daemon (a
        :data:`~deskpod.request_observer.RequestObserver`)."""
        for listener in self.request_listeners:
            listener(request_type, outcome, duration_s)

    def health(self) -> ServiceHealth:
        """The ``/healthz`` status: sessions open on live connections, runs going."""
        return ServiceHealth(ok=True, sessions=sum(len(c.sessions) for c in self.connections),
                             running=len(self.in_use))

    async def close(self) -> None:
        """Cancel every connection's sessions and wait for their runs to end."""
        await asyncio.gather(*(c.close() for c in list(self.connections)), return_exceptions=True)
