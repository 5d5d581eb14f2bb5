"""deskpod's one exception tree.

::

    DeskpodError
    ├── ProtocolError            a message or action broke the wire contract
    │   ├── InvalidRequestError        (code ``invalid_request``)
    │   ├── InvalidActionError         (code ``invalid_action``)
    │   ├── UnknownActionError         (code ``unknown_action``)
    │   ├── OutOfBoundsError           (code ``out_of_bounds``)
    │   ├── UnknownKeyError            (code ``unknown_key``)
    │   └── MessageTooLargeError       (code ``message_too_large``)
    ├── SandboxError             the sandbox answered with an error or failed
    │   ├── UnauthorizedError          (code ``unauthorized``)
    │   ├── BusyError                  (code ``busy``)
    │   ├── ActionTimeoutError         (code ``timeout``; also a ``TimeoutError``)
    │   ├── ExecutionError             (code ``execution_failed``)
    │   │   └── NoDialogError          (code ``no_dialog``)
    │   ├── NavigationError            (code ``navigation_failed``)
    │   ├── WorkspaceError             (code ``workspace_failed``)
    │   │   ├── PathDeniedError        (code ``path_denied``)
    │   │   ├── WorkspaceUnavailableError  (code ``workspace_unavailable``)
    │   │   └── DisplayUnavailableError    (code ``display_unavailable``)
    │   ├── RateLimitedError           (code ``rate_limited``)
    │   ├── ScreenChangedError         the screen under a pointer action is not the one it was planned on (code ``screen_changed``)
    │   │   └── StaleRefError          an element ref is not one of the latest snapshot's (code ``stale_ref``)
    │   │       └── RefObscuredError   another element covers the ref's point (code ``ref_obscured``)
    │   ├── BadReplyError              the controller refused a reply (code ``bad_reply``; host side)
    │   └── InternalError              (code ``internal``)
    ├── SnapshotError            a snapshot could not be taken, stored or restored (code ``snapshot_failed``)
    │   └── SnapshotIntegrityError     its bytes do not match their SHA-256 (code ``snapshot_corrupt``)
    ├── InputError               XTEST input could not be delivered (daemon side)
    ├── CaptureError             the screen could not be captured (daemon side)
    ├── BrowserError             the browser's DevTools endpoint failed (daemon side)
    ├── PolicyError              the controller refused to go on
    │   ├── PolicyDeniedError          (code ``policy_denied``)
    │   ├── LimitExceededError         a step or wall-time limit was reached
    │   ├── RunCancelledError          a human denied, did not answer, or cancelled (code ``cancelled``)
    │   └── NotVerifiedError           the task's success check did not hold (code ``not_verified``)
    ├── AuditError               ``deskpod audit`` could not inspect a sandbox (host side)
    ├── AuditKeyError            the audit log's signing key cannot be read or created (code ``audit_key``; host side)
    ├── BackendError             a sandbox backend (Docker) failed to create, reset or remove (host side)
    │   ├── SandboxNotReadyError       a sandbox did not become ready in time (also a ``TimeoutError``)
    │   ├── HostFirewallError          the host guard could not install or remove a slot's firewall rule
    │   ├── EgressControlError         the egress proxy refused or did not take a run's allowlist (code
    │   │                              ``egress_control``)
    │   └── PoolExhaustedError         every sandbox of a warm pool is leased
    ├── AgentError               a model agent could not get its next step (code ``agent_failed``; host side)
    └── SettingsError            a ``DESKPOD_*`` variable or the configuration file is invalid (code
        │                        ``invalid_config``; also a ``ValueError``; never taken from the wire)
        └── TrustedCaError         a certificate of ``DESKPOD_TRUSTED_CAS`` is not a PEM CA certificate,
                                   or certutil could not import it (logged by the daemon and runner)

Every error carries a stable machine-readable ``code`` (the wire code from
:mod:`deskpod.protocol`) and a ``detail`` dict. Errors cross the wire only as
``{"code", "message", "detail"}``; :func:`error_from_wire` maps a code back to a
class through a fixed table, so the controller never instantiates a class named
by the (untrusted) sandbox.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "ActionTimeoutError",
    "AgentError",
    "AuditError",
    "AuditKeyError",
    "BackendError",
    "BadReplyError",
    "BrowserError",
    "BusyError",
    "CaptureError",
    "DeskpodError",
    "DisplayUnavailableError",
    "EgressControlError",
    "ExecutionError",
    "HostFirewallError",
    "InputError",
    "InternalError",
    "InvalidActionError",
    "InvalidRequestError",
    "LimitExceededError",
    "MAX_ERROR_DETAIL_CHARS",
    "MAX_ERROR_MESSAGE_CHARS",
    "MessageTooLargeError",
    "NavigationError",
    "NoDialogError",
    "NotVerifiedError",
    "OutOfBoundsError",
    "PathDeniedError",
    "PolicyDeniedError",
    "PolicyError",
    "PoolExhaustedError",
    "ProtocolError",
    "RateLimitedError",
    "RefObscuredError",
    "RunCancelledError",
    "SandboxError",
    "SandboxNotReadyError",
    "ScreenChangedError",
    "SettingsError",
    "SnapshotError",
    "SnapshotIntegrityError",
    "StaleRefError",
    "TrustedCaError",
    "UnauthorizedError",
    "UnknownActionError",
    "UnknownKeyError",
    "WorkspaceError",
    "WorkspaceUnavailableError",
    "error_from_wire",
    "printable",
]

MAX_ERROR_MESSAGE_CHARS = 2000
"""Longest error message kept from the wire; longer ones are cut."""

MAX_ERROR_DETAIL_CHARS = 8192
"""Largest error ``detail`` kept from the wire (as JSON text); a larger one becomes
``{"truncated": true}``."""


class DeskpodError(Exception):
    """Root of every error deskpod raises.

    Args:
        message: a human-readable sentence naming the problem.
        detail: structured facts (for example ``{"action_index": 2}``); JSON-safe.
    """

    code = "internal"

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail: dict[str, Any] = dict(detail or {})

    def to_wire(self) -> dict[str, Any]:
        """Return the closed error envelope ``{"code", "message", "detail"}``."""
        return {"code": self.code, "message": self.message, "detail": self.detail}


class ProtocolError(DeskpodError):
    """A message or an action does not follow :mod:`deskpod.protocol`."""

    code = "invalid_request"


class InvalidRequestError(ProtocolError):
    """The message is not valid JSON or not a known request shape."""

    code = "invalid_request"


class InvalidActionError(ProtocolError):
    """An action has missing, extra or wrongly typed fields."""

    code = "invalid_action"


class UnknownActionError(ProtocolError):
    """An action's ``type`` names no action deskpod knows."""

    code = "unknown_action"


class OutOfBoundsError(ProtocolError):
    """A coordinate lies outside the model space the screenshot was sent in."""

    code = "out_of_bounds"


class UnknownKeyError(ProtocolError):
    """A key name maps to no X keysym. ``detail["key"]`` names it."""

    code = "unknown_key"


class MessageTooLargeError(ProtocolError):
    """A message exceeds :data:`deskpod.protocol.MAX_MESSAGE_BYTES`, or a reply would
    exceed the message size the client declared (``detail["reason"]`` is
    ``"reply_too_large"``, with ``bytes`` and ``max_bytes``)."""

    code = "message_too_large"


class SandboxError(DeskpodError):
    """The sandbox failed to carry out a request."""

    code = "internal"


class UnauthorizedError(SandboxError):
    """The control token was missing or wrong."""

    code = "unauthorized"


class BusyError(SandboxError):
    """Another request holds the sandbox's serial executor."""

    code = "busy"


class ActionTimeoutError(SandboxError, TimeoutError):
    """An action or a request ran past its deadline."""

    code = "timeout"


class ExecutionError(SandboxError):
    """An action was valid but failed while executing."""

    code = "execution_failed"


class NoDialogError(ExecutionError):
    """A ``dialog_accept`` or ``dialog_dismiss`` found no JavaScript dialog open in
    the tab it names (``detail["tab_id"]``), or in any tab."""

    code = "no_dialog"


class NavigationError(SandboxError):
    """The browser could not navigate to the requested URL."""

    code = "navigation_failed"


class WorkspaceError(SandboxError):
    """A workspace tool (files, patch, exec, tests, diff) could not be carried out.

    ``detail["reason"]`` names the cause, e.g. ``"not_found"``, ``"not_a_file"``,
    ``"too_large"``, ``"patch_failed"``, ``"not_a_git_repo"``, ``"bad_archive"``.
    """

    code = "workspace_failed"


class PathDeniedError(WorkspaceError):
    """A path names something outside the sandbox's workspace, or is malformed.

    ``detail["reason"]``: ``"nul_byte"``, ``"empty"``, ``"outside_workspace"``
    (absolute or ``..`` escape) or ``"symlink_escape"`` (a symlink leads out);
    ``detail["path"]`` repeats the path as given (cut to 256 characters).
    """

    code = "path_denied"


class WorkspaceUnavailableError(WorkspaceError):
    """The workspace runner (the workspace container's PID 1) could not be reached, or
    its reply was malformed or too large; the daemon stays usable.
    ``detail["reason"]``: ``"unreachable"``, ``"bad_reply"``, ``"too_large"`` or ``"timeout"``."""

    code = "workspace_unavailable"


class DisplayUnavailableError(WorkspaceError):
    """A command asked for the sandbox's display (``display: true``) but this sandbox
    grants none to the workspace (no X11 grant provider is configured)."""

    code = "display_unavailable"


class RateLimitedError(SandboxError):
    """The connection sent messages faster than the daemon's per-connection rate limit;
    the message was not carried out and the connection stays usable.
    ``detail["retry_after_s"]``: seconds until one more message is allowed."""

    code = "rate_limited"


class ScreenChangedError(SandboxError):
    """The daemon refused a request before sending a pointer action's input: the screen
    region under the point, the control there or the page's URL is not what the
    request's :class:`~deskpod.protocol.ScreenExpectation` says (``detail["reason"]``:
    ``"region"``, ``"element"``, ``"url"`` or ``"unknown_screenshot"``;
    ``detail["action_index"]``). Nothing of that action was sent; earlier actions of
    the batch ran."""

    code = "screen_changed"


class StaleRefError(ScreenChangedError):
    """An element action named a ref (``[ref=eN]`` of :attr:`~deskpod.protocol.Observation.snapshot`)
    that is not valid now: not one of the latest snapshot's refs, or its element is gone
    from the page, is no longer where the snapshot saw it, or no longer on screen
    (``detail["reason"]``: ``"unknown_ref"``, ``"gone"``, ``"moved"`` or ``"not_visible"``;
    ``detail["ref"]``). Nothing of that action was sent; take a new snapshot."""

    code = "stale_ref"


class RefObscuredError(StaleRefError):
    """An element action's ref is covered at the point it would act on (the centre of its
    box): a click there would land on another element, not on the ref's node, inside it or
    on a label of it (``detail["reason"]``: ``"obscured"``; ``detail["ref"]``). Nothing of
    that action was sent: what a click there does is judged by pixels, so act there by
    pixels, or remove what covers it and take a new snapshot."""

    code = "ref_obscured"


class BadReplyError(SandboxError):
    """The controller refused what the sandbox sent: the sandbox is untrusted, and this
    reply broke the wire contract in a way that matters on the host. Raised by the
    client, never sent by the daemon; the connection is unusable afterwards and a run
    stops.

    ``detail["reason"]`` names the cause: ``"not_json"``, ``"too_large"``,
    ``"surrogate"`` (a lone UTF-16 surrogate), ``"invalid"`` (a field over its cap or
    of the wrong shape), ``"wrong_id"`` (a reply to another request),
    ``"wrong_kind"`` (not the reply the request asks for), ``"no_reply"`` (none in
    time), ``"closed"``, ``"sha256_mismatch"``, ``"bad_image"`` (not the format or
    size it claims), ``"too_many_pixels"``, ``"over_request"`` (more than the request
    asked for).
    """

    code = "bad_reply"


class SnapshotError(DeskpodError):
    """A browser snapshot could not be taken, stored, loaded or restored.

    ``detail["reason"]`` names the cause, e.g. ``"bad_archive"``, ``"too_large"``,
    ``"bad_name"``, ``"not_found"``, ``"browser_failed"``.
    """

    code = "snapshot_failed"


class SnapshotIntegrityError(SnapshotError):
    """A snapshot's bytes do not match the SHA-256 recorded for them (the archive's in
    a store's manifest, or a file's in the archive's own manifest)."""

    code = "snapshot_corrupt"


class InternalError(SandboxError):
    """An unexpected failure inside the sandbox; the daemon stays up."""

    code = "internal"


class InputError(DeskpodError):
    """XTEST input could not be delivered to the X server."""

    code = "execution_failed"


class CaptureError(DeskpodError):
    """The screen could not be captured or encoded."""

    code = "execution_failed"


class BrowserError(DeskpodError):
    """Chromium's DevTools endpoint could not be reached or answered an error."""

    code = "execution_failed"


class PolicyError(DeskpodError):
    """The controller refused to continue a run."""

    code = "policy_denied"


class PolicyDeniedError(PolicyError):
    """A policy rule forbids the action. ``detail["rule"]`` names the rule."""

    code = "policy_denied"


class LimitExceededError(PolicyError):
    """A run reached its step or wall-time limit. ``detail["limit"]`` names it."""

    code = "limit_exceeded"


class NotVerifiedError(PolicyError):
    """The environment did not show the task's success condition in time."""

    code = "not_verified"


class RunCancelledError(PolicyError):
    """The run was cancelled: a confirmation was denied or not answered in time, a
    pause was not resumed, or someone cancelled it. ``detail["cause"]`` says which."""

    code = "cancelled"


class AuditError(DeskpodError):
    """``deskpod audit`` could not inspect a sandbox: Docker unreachable, no such or no
    running container, or several candidates. ``detail["reason"]`` names the cause."""

    code = "internal"


class AuditKeyError(DeskpodError):
    """The controller's audit signing key (:mod:`deskpod.controller.audit_sign`) cannot be
    read, created or parsed, or a public key file is not an Ed25519 public key.
    ``detail["path"]`` names the file."""

    code = "audit_key"


class BackendError(DeskpodError):
    """A sandbox backend failed: the Docker engine is unreachable or refused a request,
    an image or the seccomp profile is missing, a container exited. Docker's own
    exceptions are translated into this once, at the backend's boundary.
    ``detail["reason"]`` names the cause (``"docker"``, ``"not_found"``, ``"no_sdk"``,
    ``"config"``, ``"exited"``, ``"state"``, ...)."""

    code = "internal"


class HostFirewallError(BackendError):
    """The host guard could not install, check or remove the firewall rule that keeps a
    sandbox network off the Docker host (image missing, no ``CAP_NET_ADMIN`` or host
    networking, unknown iptables backend); the sandbox is not started.
    ``detail["reason"]`` is ``"host_firewall"`` (or ``"config"`` for a bad bridge
    name); ``detail["output"]`` holds the guard's last lines."""

    code = "internal"


class EgressControlError(BackendError):
    """The egress proxy's control endpoint refused a run's allowlist (a domain outside the
    stack's, a bad token) or could not be reached; the run does not start without it.
    ``detail``: ``status`` (the HTTP status, or ``None``) and ``refused`` (the domains it refused)."""

    code = "egress_control"


class SandboxNotReadyError(BackendError, TimeoutError):
    """A sandbox did not become ready within its timeout. ``detail["attempts"]`` and
    ``detail["last_status"]`` report the readiness wait."""

    code = "timeout"


class PoolExhaustedError(BackendError):
    """A warm pool has no idle sandbox to hand out. ``detail["size"]`` is its size."""

    code = "busy"


class AgentError(DeskpodError):
    """A model agent (:mod:`deskpod.agents`) could not get its next step from its vendor.

    ``detail["reason"]`` names the cause: ``"missing_api_key"`` (the environment
    variable is unset or empty), ``"missing_sdk"`` (the ``agents`` extra is not
    installed), ``"vendor_status"`` (the API answered an HTTP error;
    ``detail["status"]`` holds the status code), ``"vendor_unreachable"`` (connection
    failure or timeout), ``"bad_response"`` (the answer is not the documented shape),
    ``"incomplete_response"`` (the output was cut, e.g. at ``max_output_tokens``),
    ``"no_screenshot"`` (an observation without the screenshot the model needs) or
    ``"too_many_rejected_calls"`` (the model kept proposing actions deskpod cannot
    run). ``detail["vendor"]`` names the vendor. Never carries the API key.
    """

    code = "agent_failed"


class SettingsError(DeskpodError, ValueError):
    """A ``DESKPOD_*`` variable or the configuration file holds a value that does not parse
    (:mod:`deskpod.settings`). The message names each variable, or the file and key;
    ``detail``: ``variables`` (their names) and ``config_file`` (the file read, or ``None``)."""

    code = "invalid_config"


class TrustedCaError(SettingsError):
    """A certificate of ``DESKPOD_TRUSTED_CAS`` (:mod:`deskpod.agentd.trusted_ca`) is not a
    PEM CA certificate, or it could not be imported or bundled. Logged, never sent: the
    browser starts without it. ``detail``: ``certificate`` (its place, from 1) when one is meant."""

    code = "invalid_config"


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
