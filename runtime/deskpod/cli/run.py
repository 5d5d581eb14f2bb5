"""``deskpod run`` and ``deskpod code``: play a task against a running sandbox.

Exit 0 only on verified success; 1 when the run failed or was cancelled (its audit
log and failure scene say why); 2 for a bad URL, task, policy file or no token,
refused before anything is sent; 3 when the sandbox's host name does not resolve (at
once, naming the host and the fix) or nothing accepts a connection at the sandbox URL
within ``--connect-timeout``; 4 when the sandbox (or, with ``--service``, the service)
refuses the token.

The control token comes from ``DESKPOD_TOKEN`` or ``--token-file``, never from the
command line, where other users could read it. The sandbox's egress proxy gets the run's
allowlist: a leased pool slot's own proxy when its egress control file lies beside the
token file (``deskpod pool acquire`` writes both), else the stack's from the settings
(``DESKPOD_EGRESS_CONTROL``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from deskpod.cli.context import ConfigOption, Invocation, JsonOption, VerboseOption, invocation, shown_defaults, shown_path
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNAUTHORIZED, EXIT_UNAVAILABLE, EXIT_USAGE
from deskpod.cli.reach import check_sandbox_url, unresolvable, wait_reachable
from deskpod.errors import UnauthorizedError

__all__ = ["ConfirmMode", "code_command", "run_command"]

_SHOWN = shown_defaults()


class ConfirmMode(str, Enum):
    """How confirmations and pauses are answered."""

    prompt = "prompt"
    deny = "deny"


TaskFile = Annotated[str, typer.Argument(metavar="TASK_FILE", show_default=False,
                                         help="the task file (YAML), e.g. runtime/deskpod/tasks/demo.yaml")]
SandboxOption = Annotated[
    str | None,
    typer.Option("--sandbox", metavar="URL", show_default=f"$DESKPOD_SANDBOX_URL, else {_SHOWN.sandbox_url}",
                 help="the sandbox daemon's websocket URL (ws:// or wss://)"),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option("--token-file", metavar="FILE", show_default="$DESKPOD_TOKEN",
                 help="read the control token from this file instead of $DESKPOD_TOKEN"),
]
AuditDirOption = Annotated[
    Path | None,
    typer.Option("--audit-dir", metavar="DIR", show_default=f"$DESKPOD_AUDIT_DIR, else {shown_path(_SHOWN.audit_dir)}",
                 help="folder for the run's JSONL audit log, screenshots and failure scenes"),
]
ConnectTimeoutOption = Annotated[
    float, typer.Option("--connect-timeout", metavar="SECONDS", min=0.0,
                        help="seconds to wait for the sandbox to accept a connection"),
]
PolicyOption = Annotated[
    Path | None,
    typer.Option("--policy", metavar="FILE", show_default="the built-in policy",
                 help="policy file (YAML): allowlist, blocked actions, confirmations, limits"),
]


def _load_policy(inv: Invocation, path: Path | None) -> Any:
    from deskpod.controller.policy.policy_file import load_policy
    from deskpod.errors import TaskFileError

    if path is None:
        return None
    try:
        return load_policy(path)
    except TaskFileError as exc:
        inv.refuse(EXIT_USAGE, exc.message)


def _checked_url(inv: Invocation, sandbox: str | None) -> tuple[str, str, int, bool]:
    """The sandbox URL, its host, port and whether it is wss://; a URL that is not ws:// or wss:// exits 2."""
    url = sandbox or inv.defaults.sandbox_url
    try:
        return (url, *check_sandbox_url(url))
    except ValueError as exc:
        inv.refuse(EXIT_USAGE, str(exc))


_FIRST_WAIT_S = 2.0
"""How long the sandbox may refuse connections before the command says it is waiting, seconds."""


def _wait_reachable(inv: Invocation, target: tuple[str, str, int, bool], connect_timeout_s: float) -> str:
    """The sandbox URL once something accepts connections there; exit 3 when its host name does
    not resolve (at once) or nothing accepts in time."""
    url, host, port, secure = target
    unknown = asyncio.run(unresolvable(host, port))
    if unknown is not None:
        way_in = (f"play the task as a session of the stack's controller service (--service "
                  f"{inv.defaults.serve_url}, --sandbox naming the sandbox as the service reaches it)"
                  if inv.command == "run" else
                  f"run the command in the stack (scripts/compose.sh --profile demo run --rm controller deskpod "
                  f"{inv.command} TASK_FILE --sandbox {url})")
        inv.refuse(EXIT_UNAVAILABLE, f"sandbox host {host!r} does not resolve from here ({unknown}). A stack's "
                   f"sandbox is reachable by that name only on the stack's own network: from the Docker host, "
                   f"{way_in}, or pass --sandbox with an address this machine reaches")
    started = time.monotonic()
    last = asyncio.run(wait_reachable(host, port, min(connect_timeout_s, _FIRST_WAIT_S), secure=secure))
    if last is not None and connect_timeout_s > _FIRST_WAIT_S:
        inv.note(f"sandbox at {url} does not accept connections yet ({last}); waiting up to "
                 f"{connect_timeout_s:g} s (--connect-timeout) for it to start")
        remaining = connect_timeout_s - (time.monotonic() - started)
        last = asyncio.run(wait_reachable(host, port, max(0.0, remaining), secure=secure))
    if last is not None:
        inv.refuse(EXIT_UNAVAILABLE, f"sandbox at {url} not reachable within {connect_timeout_s:g} s; last: {last}")
    return url


def _document(name: str, result: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"task": name, "run_id": result.run_id, "status": result.status,
                                "reason": result.reason, "steps": result.steps,
                                "duration_s": round(result.duration_s, 3), "audit_log": str(result.audit_log)}
    for key in ("url", "audit_head", "screenshots", "changed_files"):
        if hasattr(result, key):
            document[key] = getattr(result, key)
    scene = getattr(result, "scene", None)
    if hasattr(result, "scene"):
        document["scene"] = str(scene) if scene else None
    return document


def _report(inv: Invocation, name: str, result: Any, extra: str) -> None:
    """Print a run's verdict, reason, one extra line, the audit log and the failure scene;
    exit 0 only for a verified success."""
    verdict = {"succeeded": "VERIFIED SUCCESS", "cancelled": "CANCELLED", "ended": "ENDED"}.get(result.status, "FAILED")
    # The reason and the final URL can quote what the sandbox sent: report() makes every line printable.
    human = [f"{verdict}: task {name!r} ({result.run_id}) after {result.steps} steps in {result.duration_s:.1f} s",
             f"  {result.reason}", f"  {extra}", f"  audit log: {result.audit_log}"]
    if getattr(result, "audit_head", ""):
        human.append(f"  audit log head: {result.audit_head}")
    if getattr(result, "scene", None):
        human.append(f"  failure scene: {result.scene}")
    inv.report(_document(name, result), human, _exit_code(result))


_REFUSED_TOKEN = f"{UnauthorizedError.code}:"
"""How a run's reason starts when the sandbox refused its token (``"<code>: <message>"``)."""


def _exit_code(result: Any) -> int:
    """0 for a verified success, 4 when the run ended because its token was refused, else 1."""
    if result.status == "succeeded":
        return EXIT_OK
    return EXIT_UNAUTHORIZED if result.reason.startswith(_REFUSED_TOKEN) else EXIT_FAILURE


def _channel(confirm: ConfirmMode) -> Any:
    from deskpod.controller.confirm import DenyChannel, TerminalChannel

    return TerminalChannel() if confirm is ConfirmMode.prompt else DenyChannel()


@dataclass(frozen=True)
class _Prepared:
    """What ``run`` and ``code`` check before a run starts."""

    task: Any
    policy: Any
    token: str
    signer: Any
    url: str
    egress_control: Any


def _prepare(inv: Invocation, load: Callable[[str], Any], task_file: str, sandbox: str | None,
             token_file: Path | None, policy: Path | None, connect_timeout_s: float) -> _Prepared:
    """Check a run's inputs in the order a user fixes them, refusing the first bad one
    (exit 2): the sandbox URL, the task file (``load``), the policy file, the token, the
    audit signing key; then wait until the sandbox accepts a connection (exit 3)."""
    from deskpod.errors import TaskFileError

    target = _checked_url(inv, sandbox)
    try:
        task = load(task_file)
    except TaskFileError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    loaded = _load_policy(inv, policy)
    token = inv.token(token_file)
    egress = _egress_control(inv, token_file)
    signer = inv.audit_signer()
    return _Prepared(task, loaded, token, signer, _wait_reachable(inv, target, connect_timeout_s), egress)


def _egress_control(inv: Invocation, token_file: Path | None) -> Any:
    """The sandbox's egress proxy control: a lease's file beside ``token_file`` (the slot's
    own proxy), else the settings' (the stack's); a bad file or URL exits 2."""
    from deskpod.controller.egress import egress_control_beside, egress_control_from_settings
    from deskpod.errors import SettingsError

    try:
        beside = egress_control_beside(token_file) if token_file is not None else None
        return beside if beside is not None else egress_control_from_settings()
    except SettingsError as exc:
        inv.refuse(EXIT_USAGE, exc.message)


def run_command(
    ctx: typer.Context,
    task_file: TaskFile,
    sandbox: SandboxOption = None,
    token_file: TokenFileOption = None,
    audit_dir: AuditDirOption = None,
    connect_timeout: ConnectTimeoutOption = 90.0,
    policy: PolicyOption = None,
    confirm: Annotated[ConfirmMode, typer.Option(
        "--confirm", help="confirmations and pauses: ask at the terminal (denied without one), or always deny",
    )] = ConfirmMode.prompt,
    service: Annotated[str | None, typer.Option(
        "--service", metavar="URL", show_default="none: this process is the controller",
        help="play the task's steps as a session of deskpod serve (ws://HOST:PORT/v1/controller, token "
             "$DESKPOD_SERVE_TOKEN): its approvers, on the web console, answer the confirmations; --sandbox is "
             f"the sandbox as the service reaches it. The stack's, from this host: {_SHOWN.serve_url} "
             "(the port: $DESKPOD_SERVE_PORT, else the stack's .env)")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Play a task file against a sandbox and verify it (exit 0 only on verified success)."""
    from deskpod.agents import create_agent
    from deskpod.controller.gui import run_task
    from deskpod.controller.task import load_task

    inv = invocation(ctx, verbose, json_out, config)
    if service is not None:
        _run_via_service(inv, load_task, task_file, sandbox, token_file, service)
        return
    run = _prepare(inv, load_task, task_file, sandbox, token_file, policy, connect_timeout)
    result = asyncio.run(run_task(run.task, run.url, run.token, audit_dir=audit_dir or inv.defaults.audit_dir,
                                  channel=_channel(confirm), policy=run.policy, agent_factory=create_agent,
                                  connect_timeout_s=connect_timeout, signer=run.signer,
                                  egress_control=run.egress_control))
    _report(inv, run.task.name, result, f"final URL: {result.url}")


def _run_via_service(inv: Invocation, load: Callable[[Path], Any], task_file: str, sandbox: str | None,
                     token_file: Path | None, service: str) -> None:
    """``deskpod run --service``: the run is a session of ``deskpod serve`` (:mod:`deskpod.cli.service_run`)."""
    from deskpod.cli.service_run import run_via_service
    from deskpod.errors import TaskFileError
    from deskpod.errors import DeskpodError
    from deskpod.settings import get_settings

    try:
        task = load(Path(task_file))
    except TaskFileError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    if not service.startswith(("ws://", "wss://")):
        inv.refuse(EXIT_USAGE, f"--service {service[:200]!r} is not a ws:// or wss:// URL")
    service_token = get_settings().serve_token
    if service_token is None:
        inv.refuse(EXIT_USAGE, "--service: set DESKPOD_SERVE_TOKEN (the service's agent token)")
    url = sandbox or inv.defaults.sandbox_url
    started = time.monotonic()
    try:
        summary = asyncio.run(run_via_service(task, service, service_token.get_secret_value(), url,
                                              inv.token(token_file)))
    except TaskFileError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    except UnauthorizedError as exc:  # a refused token (the service's or the sandbox's), as without --service
        inv.refuse(EXIT_UNAUTHORIZED, f"the controller service at {service}: {exc.message}")
    except DeskpodError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"the controller service at {service}: {exc.message}")
    result = _ServiceResult(summary.run_id, summary.status, summary.reason, summary.steps,
                            time.monotonic() - started, summary.audit_log, summary.url, summary.audit_head,
                            summary.scene)
    _report(inv, task.name, result, f"final URL: {result.url} (audit log on the service's host)")


@dataclass(frozen=True)
class _ServiceResult:
    """A ``--service`` run's summary in the shape :func:`_report` prints."""

    run_id: str
    status: str
    reason: str
    steps: int
    duration_s: float
    audit_log: str
    url: str | None
    audit_head: str
    scene: str | None


def code_command(
    ctx: typer.Context,
    task_file: TaskFile,
    sandbox: SandboxOption = None,
    token_file: TokenFileOption = None,
    audit_dir: AuditDirOption = None,
    connect_timeout: ConnectTimeoutOption = 90.0,
    policy: PolicyOption = None,
    confirm: Annotated[ConfirmMode, typer.Option(
        "--confirm", help="risky exec commands: ask at the terminal (refused without one), or always refuse",
    )] = ConfirmMode.prompt,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Play a code-agent task in the sandbox's workspace (exit 0 only when the controller's re-run of the tests passed)."""
    from deskpod.controller.code_agent import run_code_task
    from deskpod.controller.code_task import load_code_task

    inv = invocation(ctx, verbose, json_out, config)
    run = _prepare(inv, load_code_task, task_file, sandbox, token_file, policy, connect_timeout)
    result = asyncio.run(run_code_task(run.task, run.url, run.token, channel=_channel(confirm),
                                       audit_dir=audit_dir or inv.defaults.audit_dir,
                                       connect_timeout_s=connect_timeout, policy=run.policy, signer=run.signer))
    _report(inv, run.task.name, result, f"changed: {', '.join(result.changed_files) or '(nothing)'}")
