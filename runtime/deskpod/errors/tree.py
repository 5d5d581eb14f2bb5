"""The classes of deskpod's one exception tree; :mod:`deskpod.errors` draws the tree and
re-exports every one of them."""

from __future__ import annotations

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
    "ConfigError",
    "DeskpodError",
    "DialogBlockedError",
    "DisplayUnavailableError",
    "EgressControlError",
    "ExecutionError",
    "HostFirewallError",
    "InputError",
    "InternalError",
    "InvalidActionError",
    "InvalidRequestError",
    "InvalidTransition",
    "JUnitError",
    "LimitExceededError",
    "MessageTooLargeError",
    "NavigationError",
    "NoDialogError",
    "NoWindowError",
    "NotVerifiedError",
    "OutOfBoundsError",
    "PageResponsiveError",
    "PageUnresponsiveError",
    "PathDeniedError",
    "PolicyDeniedError",
    "PolicyError",
    "PoolExhaustedError",
    "ProtocolError",
    "RateLimitedError",
    "RecordingError",
    "RefObscuredError",
    "RefreshRateError",
    "RunCancelledError",
    "RunEnded",
    "SandboxError",
    "SandboxNotReadyError",
    "ScreenChangedError",
    "SessionError",
    "SettingsError",
    "SnapshotError",
    "SnapshotIntegrityError",
    "StaleRefError",
    "StepWithdrawnError",
    "SuiteFileError",
    "TaskFileError",
    "TrustedCaError",
    "UnauthorizedError",
    "UnknownActionError",
    "UnknownKeyError",
    "WorkspaceError",
    "WorkspaceUnavailableError",
]


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


class PatternError(InvalidRequestError):
    """A regular expression RE2 does not accept (:mod:`deskpod.protocol.patterns`): its syntax,
    lookaround, backreferences, or more memory than allowed; the message says which."""


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


class NoWindowError(ExecutionError):
    """A window action names a window the latest list of windows did not hold, or one that
    is gone (``detail["window_id"]``): nothing was done."""

    code = "no_window"


class PageResponsiveError(ExecutionError):
    """A ``recover_tab`` found the tab's page answering (``detail["tab_id"]``): there is
    nothing to recover, and the page was left as it is."""

    code = "page_responsive"


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


class DialogBlockedError(BrowserError):
    """A DevTools call needs a page whose JavaScript dialog is open (daemon side,
    :mod:`deskpod.agentd.browser.dialogs`).

    Args:
        target_id: the tab with the dialog.

    Attributes:
        target_id: the tab with the dialog.
    """

    def __init__(self, target_id: str) -> None:
        super().__init__("a JavaScript dialog is open in the tab", detail={"tab_id": target_id})
        self.target_id = target_id


class PageUnresponsiveError(BrowserError):
    """A DevTools call needs a page that does not answer: its renderer is stuck (an endless
    script; daemon side, :mod:`deskpod.agentd.browser.unresponsive`).

    Args:
        target_id: the tab whose page does not answer.
        unresponsive_s: how long it has not answered, seconds.

    Attributes:
        target_id: the tab whose page does not answer.
    """

    def __init__(self, target_id: str, unresponsive_s: float) -> None:
        super().__init__(f"the tab's page has not answered for {unresponsive_s:.1f} s (a script never ends)",
                         detail={"tab_id": target_id, "unresponsive_s": round(unresponsive_s, 3)})
        self.target_id = target_id


class SessionError(DeskpodError):
    """A session process could not be started or died during start (daemon side,
    :mod:`deskpod.agentd.session`)."""

    code = "internal"


class RefreshRateError(DeskpodError):
    """The X server did not take the refresh rate (no RandR, no output, a refused mode;
    daemon side, :mod:`deskpod.agentd.display.refresh`)."""

    code = "internal"


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


class StepWithdrawnError(RunCancelledError):
    """The agent withdrew the step in progress (:meth:`deskpod.controller.run_api.RunControl.withdraw`):
    what it waited on is withdrawn and the rest of it does not run. The run goes on: the step
    ends refused (rule ``withdrawn``); only a step catches it."""


class RunEnded(RunCancelledError):
    """An MCP session's run has ended (:mod:`deskpod.mcp_server.runs`); no tool acts any more.

    Args:
        summary: how it ended: the service's run summary
            (:class:`deskpod.service.messages.ServiceRunSummary`), or ``None`` when the session
            has none (a code run).
        message: a sentence saying how it ended.

    Attributes:
        summary: as given.
    """

    def __init__(self, summary: Any, message: str) -> None:
        super().__init__(message)
        self.summary = summary


class TaskFileError(DeskpodError):
    """A task file is missing, unreadable or does not match
    :class:`~deskpod.controller.task.TaskSpec` (host side)."""

    code = "invalid_request"


class SuiteFileError(TaskFileError):
    """A suite file (:mod:`deskpod.eval.suite`), or a file it names, is missing, unreadable or
    invalid (code ``invalid_request``)."""


class InvalidTransition(DeskpodError):
    """The controller tried a run-state transition the machine
    (:mod:`deskpod.controller.state`) does not have (a controller bug)."""

    code = "internal"


class JUnitError(DeskpodError, ValueError):
    """The test report a code run's tests wrote (:func:`deskpod.controller.verdict.parse_junit`)
    is missing, too large, declares a DTD or is not JUnit XML (host side; also a ``ValueError``)."""

    code = "internal"


class AuditError(DeskpodError):
    """``deskpod audit`` could not inspect a sandbox: Docker unreachable, no such or no
    running container, or several candidates. ``detail["reason"]`` names the cause."""

    code = "internal"


class RecordingError(DeskpodError):
    """A run's screen recording (:mod:`deskpod.controller.recording`) could not be made:
    PyAV is missing, or the file could not be written. The run goes on without it.
    ``detail["reason"]`` names the cause (``"no_av"``)."""

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
    """A certificate of ``DESKPOD_TRUSTED_CAS`` (:mod:`deskpod.agentd.browser.trusted_ca`) is not a
    PEM CA certificate, or it could not be imported or bundled. Logged, never sent: the
    browser starts without it. ``detail``: ``certificate`` (its place, from 1) when one is meant."""

    code = "invalid_config"


class ConfigError(SettingsError):
    """The daemon's environment is incomplete or malformed (:mod:`deskpod.agentd.config`)."""
