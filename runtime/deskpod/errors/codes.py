"""The fixed wire table of deskpod's errors: an error envelope received from the (untrusted)
sandbox becomes an exception through :func:`error_from_wire`, never by a class name the
sandbox sends."""

from __future__ import annotations

import json
import re
from typing import Any

from deskpod.errors.tree import (
    ActionTimeoutError,
    AgentError,
    AuditKeyError,
    BadReplyError,
    BusyError,
    DeskpodError,
    DisplayUnavailableError,
    EgressControlError,
    ExecutionError,
    InternalError,
    InvalidActionError,
    InvalidRequestError,
    LimitExceededError,
    MessageTooLargeError,
    NavigationError,
    NoDialogError,
    NoWindowError,
    PageResponsiveError,
    NotVerifiedError,
    OutOfBoundsError,
    PathDeniedError,
    PolicyDeniedError,
    RateLimitedError,
    RefObscuredError,
    RunCancelledError,
    ScreenChangedError,
    SettingsError,
    SnapshotError,
    SnapshotIntegrityError,
    StaleRefError,
    UnauthorizedError,
    UnknownActionError,
    UnknownKeyError,
    WorkspaceError,
    WorkspaceUnavailableError,
)

__all__ = ["MAX_ERROR_DETAIL_CHARS", "MAX_ERROR_MESSAGE_CHARS", "error_code", "error_from_wire", "printable"]

MAX_ERROR_MESSAGE_CHARS = 2000
"""Longest error message kept from the wire; longer ones are cut."""

MAX_ERROR_DETAIL_CHARS = 8192
"""Largest error ``detail`` kept from the wire (as JSON text); a larger one becomes
``{"truncated": true}``."""



_WIRE_CODES: dict[str, type[DeskpodError]] = {
    "invalid_request": InvalidRequestError,
    "invalid_action": InvalidActionError,
    "unknown_action": UnknownActionError,
    "out_of_bounds": OutOfBoundsError,
    "unknown_key": UnknownKeyError,
    "message_too_large": MessageTooLargeError,
    "unauthorized": UnauthorizedError,
    "busy": BusyError,
    "timeout": ActionTimeoutError,
    "execution_failed": ExecutionError,
    "no_dialog": NoDialogError,
    "no_window": NoWindowError,
    "page_responsive": PageResponsiveError,
    "navigation_failed": NavigationError,
    "workspace_failed": WorkspaceError,
    "path_denied": PathDeniedError,
    "workspace_unavailable": WorkspaceUnavailableError,
    "display_unavailable": DisplayUnavailableError,
    "rate_limited": RateLimitedError,
    "screen_changed": ScreenChangedError,
    "stale_ref": StaleRefError,
    "ref_obscured": RefObscuredError,
    "bad_reply": BadReplyError,
    "snapshot_failed": SnapshotError,
    "snapshot_corrupt": SnapshotIntegrityError,
    "policy_denied": PolicyDeniedError,
    "limit_exceeded": LimitExceededError,
    "not_verified": NotVerifiedError,
    "cancelled": RunCancelledError,
    "agent_failed": AgentError,
    "invalid_config": SettingsError,
    "audit_key": AuditKeyError,
    "egress_control": EgressControlError,
    "internal": InternalError,
}
"""The fixed wire table: every code any error of this module carries → its class."""

_HOST_ONLY_CODES = frozenset({"policy_denied", "limit_exceeded", "not_verified", "cancelled", "agent_failed",
                              "invalid_config", "audit_key", "egress_control"})
"""Codes only the controller raises. :func:`error_from_wire` turns a sandbox's error
reply naming one into an :class:`InternalError`: a sandbox cannot make a run look
denied by policy, over a limit, unverified, cancelled by a human or misconfigured on
the host."""


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` safe to print on a terminal or write to a log: control characters other
    than newline and tab (escape sequences) and lone UTF-16 surrogates become
    ``\\xNN`` / ``\\uNNNN`` escapes."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def error_code(exc: BaseException) -> str:
    """The code an operation that ended in ``exc`` is known by (a span's ``error``, a metric's
    ``outcome``): a deskpod error's own code, ``cancelled`` for a cancelled task, ``timeout`` for a
    timeout, ``internal`` for anything else; never the exception's message."""
    if isinstance(exc, DeskpodError):
        return exc.code
    if isinstance(exc, TimeoutError):
        return "timeout"
    if not isinstance(exc, Exception):
        return "cancelled"
    return "internal"


def error_from_wire(envelope: dict[str, Any]) -> DeskpodError:
    """Build the exception for an error envelope received from the sandbox.

    Args:
        envelope: ``{"code": str, "message": str, "detail": dict}`` as sent by the daemon.

    Returns:
        An instance of the class the fixed table assigns to ``code``; unknown
        codes and the controller's own codes become :class:`InternalError`. The message is cut to
        :data:`MAX_ERROR_MESSAGE_CHARS` characters and made :func:`printable`, a ``detail`` over
        :data:`MAX_ERROR_DETAIL_CHARS` is dropped.
    """
    code = envelope.get("code")
    cls: type[DeskpodError] = InternalError
    if isinstance(code, str) and code not in _HOST_ONLY_CODES:
        cls = _WIRE_CODES.get(code, InternalError)
    message = printable(str(envelope.get("message", ""))[:MAX_ERROR_MESSAGE_CHARS])
    detail = envelope.get("detail")
    if not isinstance(detail, dict):
        detail = {}
    elif len(json.dumps(detail, default=str)) > MAX_ERROR_DETAIL_CHARS:
        detail = {"truncated": True}
    return cls(message, detail=detail)
