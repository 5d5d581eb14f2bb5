"""deskpod's one exception tree.

::

    DeskpodError
    ├── ProtocolError            a message or action broke the wire contract
    │   ├── InvalidRequestError        (code ``invalid_request``)
    │   │   └── PatternError           a regular expression RE2 does not accept
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
    │   │   ├── NoDialogError          (code ``no_dialog``)
    │   │   ├── NoWindowError          a window action's window is unknown or gone (code ``no_window``)
    │   │   └── PageResponsiveError    a ``recover_tab``'s page answers (code ``page_responsive``)
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
    │   ├── DialogBlockedError         a DevTools call needs a page whose JavaScript dialog is open
    │   └── PageUnresponsiveError      a DevTools call needs a page that does not answer (an endless script)
    ├── SessionError             a session process could not be started or died during start (daemon side)
    ├── RefreshRateError         the X server did not take the display's refresh rate (daemon side)
    ├── PolicyError              the controller refused to go on
    │   ├── PolicyDeniedError          (code ``policy_denied``)
    │   ├── LimitExceededError         a step or wall-time limit was reached
    │   ├── RunCancelledError          a human denied, did not answer, or cancelled (code ``cancelled``)
    │   │   ├── StepWithdrawnError     the agent withdrew the step in progress; the run goes on
    │   │   └── RunEnded               an MCP session's run has ended; no tool acts any more
    │   └── NotVerifiedError           the task's success check did not hold (code ``not_verified``)
    ├── TaskFileError            a task file is missing, unreadable or invalid (code ``invalid_request``;
    │   │                        host side)
    │   └── SuiteFileError             a suite file, or a file it names, is missing, unreadable or invalid
    ├── InvalidTransition        the controller tried a run-state transition it does not have (a bug)
    ├── JUnitError               a code run's test report is not usable JUnit XML (also a ``ValueError``;
    │                            host side)
    ├── AuditError               ``deskpod audit`` could not inspect a sandbox (host side)
    ├── AuditKeyError            the audit log's signing key cannot be read or created (code ``audit_key``; host side)
    ├── RecordingError           a run's screen recording could not be made (host side)
    ├── BackendError             a sandbox backend (Docker) failed to create, reset or remove (host side)
    │   ├── SandboxNotReadyError       a sandbox did not become ready in time (also a ``TimeoutError``)
    │   ├── HostFirewallError          the host guard could not install or remove a slot's firewall rule
    │   ├── EgressControlError         the egress proxy refused or did not take a run's allowlist (code
    │   │                              ``egress_control``)
    │   └── PoolExhaustedError         every sandbox of a warm pool is leased
    ├── AgentError               a model agent could not get its next step (code ``agent_failed``; host side)
    └── SettingsError            a ``DESKPOD_*`` variable or the configuration file is invalid (code
        │                        ``invalid_config``; also a ``ValueError``; never taken from the wire)
        ├── TrustedCaError         a certificate of ``DESKPOD_TRUSTED_CAS`` is not a PEM CA certificate,
        │                          or certutil could not import it (logged by the daemon and runner)
        └── ConfigError            the daemon's environment is incomplete or malformed

Every error carries a stable machine-readable ``code`` (the wire code from
:mod:`deskpod.protocol`) and a ``detail`` dict. Errors cross the wire only as
``{"code", "message", "detail"}``; :func:`error_from_wire` maps a code back to a
class through a fixed table, so the controller never instantiates a class named
by the (untrusted) sandbox.

The classes live in :mod:`deskpod.errors.tree`, the table in :mod:`deskpod.errors.codes`;
import them from here, where every class says it lives (its ``__module__``).
"""

from __future__ import annotations

from deskpod.errors.codes import (
    MAX_ERROR_DETAIL_CHARS,
    MAX_ERROR_MESSAGE_CHARS,
    error_code,
    error_from_wire,
    printable,
)
from deskpod.errors.tree import (
    ActionTimeoutError,
    AgentError,
    AuditError,
    AuditKeyError,
    BackendError,
    BadReplyError,
    BrowserError,
    BusyError,
    CaptureError,
    ConfigError,
    DeskpodError,
    DialogBlockedError,
    DisplayUnavailableError,
    EgressControlError,
    ExecutionError,
    HostFirewallError,
    InputError,
    InternalError,
    InvalidActionError,
    InvalidRequestError,
    InvalidTransition,
    JUnitError,
    LimitExceededError,
    MessageTooLargeError,
    NavigationError,
    NoDialogError,
    NoWindowError,
    PageResponsiveError,
    NotVerifiedError,
    OutOfBoundsError,
    PageUnresponsiveError,
    PathDeniedError,
    PatternError,
    PolicyDeniedError,
    PolicyError,
    PoolExhaustedError,
    ProtocolError,
    RateLimitedError,
    RecordingError,
    RefObscuredError,
    RefreshRateError,
    RunCancelledError,
    RunEnded,
    SandboxError,
    SandboxNotReadyError,
    ScreenChangedError,
    SessionError,
    SettingsError,
    SnapshotError,
    SnapshotIntegrityError,
    StaleRefError,
    StepWithdrawnError,
    SuiteFileError,
    TaskFileError,
    TrustedCaError,
    UnauthorizedError,
    UnknownActionError,
    UnknownKeyError,
    WorkspaceError,
    WorkspaceUnavailableError,
)

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
    "MAX_ERROR_DETAIL_CHARS",
    "MAX_ERROR_MESSAGE_CHARS",
    "MessageTooLargeError",
    "NavigationError",
    "NoDialogError",
    "NoWindowError",
    "NotVerifiedError",
    "OutOfBoundsError",
    "PageResponsiveError",
    "PageUnresponsiveError",
    "PathDeniedError",
    "PatternError",
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
    "error_code",
    "error_from_wire",
    "printable",
]

# Every class names deskpod.errors as its module, where its users import it from: tracebacks,
# reprs and pickles read the same as when the tree was one module.
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = __name__
del _name, _value
