"""``deskpod mcp``: serve MCP (stdio or streamable HTTP); each session is one run through the controller
(:mod:`deskpod.mcp_server`)."""

from __future__ import annotations

import asyncio
import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

__all__ = ["mcp_command"]

def _hold_secrets(inv: Any) -> None:
    """Keep the secrets this process holds from processes of its own uid (the assistant that
    started it may give the model a shell): non-dumpable on Linux (:mod:`deskpod.nondumpable`);
    and say so when the approvers' token itself came in the environment, since whoever started
    this process holds it too. Exits 3 when the kernel refuses."""
    import sys

    from deskpod.nondumpable import non_dumpable_on_linux
    from deskpod.settings import get_settings

    try:
        non_dumpable_on_linux()
    except OSError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"cannot keep this process's secrets from its own uid: {exc}")
    if get_settings().serve_approver_token is not None:
        print("deskpod mcp: this process was given DESKPOD_SERVE_APPROVER_TOKEN itself, so whoever started it, "
              "the MCP client, holds the approvers' token (and so may its model, if it has a shell): give the "
              "client DESKPOD_SERVE_APPROVER_TOKEN_SHA256 instead and keep the token for the console",
              file=sys.stderr)


class Transport(str, enum.Enum):
    """How MCP clients reach the server."""

    stdio = "stdio"
    http = "http"


def _task(inv: Any, task_file: Path | None, start_url: str | None, allow_domain: list[str], max_steps: int,
          max_wall_time_s: float, success_url: str | None, success_text: str | None, name: str | None) -> Any:
    """The sessions' task: a task file (GUI or code) or the flags (named ``name``, else
    ``mcp-session`` until a session's client names it); bad ones exit 2."""
    from pydantic import ValidationError

    from deskpod.controller.code_task import load_code_task
    from deskpod.service.messages import SessionTask
    from deskpod.controller.task import load_task
    from deskpod.errors import TaskFileError
    from deskpod.errors import DeskpodError
    from deskpod.mcp_server.server import NO_SUCCESS_CHECK

    try:
        if task_file is not None:
            import yaml

            raw = yaml.safe_load(task_file.read_text(encoding="utf-8"))
            if isinstance(raw, dict) and "workspace" in raw:
                code = load_code_task(task_file)
                return code.model_copy(update={"name": name}) if name else code
            spec = load_task(task_file)
            return SessionTask(name=name or spec.name, start_url=spec.start_url, model_size=spec.model_size,
                               allowed_domains=spec.allowed_domains, limits=spec.limits, success=spec.success,
                               permissions=spec.permissions, allow_clipboard_read=spec.allow_clipboard_read)
        if start_url is None:
            inv.refuse(EXIT_USAGE, "give a task file (--task) or a start URL (--start-url)")
        success: dict[str, Any] = {"url_matches": success_url, "page_text_contains": success_text}
        if success_url is None and success_text is None:
            success = {"url_matches": NO_SUCCESS_CHECK, "timeout_s": 0.5}
        return SessionTask.model_validate({
            "name": name or "mcp-session", "start_url": start_url, "allowed_domains": allow_domain,
            "limits": {"max_steps": max_steps, "max_wall_time_s": max_wall_time_s, "max_errors": 20},
            "success": success})
    except (OSError, ValueError, ValidationError, TaskFileError, DeskpodError) as exc:
        inv.refuse(EXIT_USAGE, f"task: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


def mcp_command(
    ctx: typer.Context,
    task_file: Annotated[Path | None, typer.Option("--task", metavar="FILE",
                                                   help="task file: a GUI task (start URL) or a code task (seed)")] = None,
    start_url: Annotated[str | None, typer.Option("--start-url", metavar="URL", help="GUI task without a file")] = None,
    allow_domain: Annotated[list[str] | None, typer.Option("--allow-domain", metavar="DOMAIN",
                                                           help="allowed domain (repeat)")] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="tool calls a run may make")] = 500,
    max_wall_time_s: Annotated[float, typer.Option("--max-wall-time", metavar="SECONDS", min=1.0,
                                                   help="a run's wall time")] = 3600.0,
    success_url: Annotated[str | None, typer.Option("--success-url", metavar="REGEX",
                                                    help="success check: the URL")] = None,
    success_text: Annotated[str | None, typer.Option("--success-text", metavar="TEXT",
                                                     help="success check: page text")] = None,
    sandbox: Annotated[str | None, typer.Option("--sandbox", metavar="URL", help="the sandbox daemon's URL")] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", metavar="FILE",
                                                    help="the sandbox's token (else $DESKPOD_TOKEN)")] = None,
    pool: Annotated[str | None, typer.Option("--pool", metavar="NAME",
                                             help="lease each session's sandbox from this pool")] = None,
    reset_on_end: Annotated[bool, typer.Option("--reset-on-end", help="reset the given sandbox when a session "
                                               "ends (the new token goes to --token-file)")] = False,
    controller: Annotated[str | None, typer.Option("--controller", metavar="URL",
                                                   help="a running `deskpod serve` to go through")] = None,
    controller_token_file: Annotated[Path | None, typer.Option("--controller-token-file", metavar="FILE",
                                                               help="its agent token")] = None,
    approver_port: Annotated[int, typer.Option("--approver-port", min=0, max=65535,
                                               help="port (127.0.0.1) of the embedded controller service and its "
                                               "console (0: a free one)")] = 0,
    policy: Annotated[Path | None, typer.Option("--policy", metavar="FILE", help="operator's policy file")] = None,
    audit_dir: Annotated[Path | None, typer.Option("--audit-dir", metavar="DIR", help="audit logs")] = None,
    approve_by_elicitation: Annotated[bool, typer.Option(
        "--approve-by-elicitation", help="ask the MCP client's human to confirm (MCP elicitation); only under a "
        "policy with allow_self_approval")] = False,
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", help="the sessions' runs' name (default: "
                                             "the task file's, else each MCP client's clientInfo.name)")] = None,
    transport: Annotated[Transport, typer.Option("--transport", help="stdio or streamable HTTP")] = Transport.stdio,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="HTTP address")] = "127.0.0.1:8780",
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Serve MCP: every tool call is an action of a run under the controller's policy.

    Over HTTP clients present $DESKPOD_MCP_TOKEN. Confirmations go to the controller's
    approvers: those of --controller, or, without it, the console of the service this process
    embeds (its address is printed on standard error; sign in with $DESKPOD_SERVE_APPROVER_TOKEN)."""
    inv = invocation(ctx, verbose, json_out, config)
    _hold_secrets(inv)
    try:
        import mcp  # noqa: F401
    except ImportError:
        inv.refuse(EXIT_UNAVAILABLE, "deskpod mcp needs the MCP SDK: pip install 'deskpod[mcp]'")
    from deskpod.cli.serve import parse_listen
    from deskpod.controller.egress import EGRESS_FILE_SUFFIX, egress_control_beside, egress_control_from_settings
    from deskpod.controller.policy.policy_file import Policy, load_policy
    from deskpod.controller.task import permission_grants
    from deskpod.service.messages import SessionTask
    from deskpod.service.server.token_env import approver_token_sha256_from_env
    from deskpod.errors import DeskpodError
    from deskpod.mcp_server.app import EmbeddedController, serve_mcp
    from deskpod.mcp_server.sessions import McpConfig
    from deskpod.mcp_server.sources import GivenSandbox, PoolSandbox
    from deskpod.settings import get_settings
    from deskpod.tokens import token_sha256

    task = _task(inv, task_file, start_url, allow_domain or [], max_steps, max_wall_time_s, success_url, success_text,
                 name)
    source: GivenSandbox | PoolSandbox
    try:
        operator = load_policy(policy) if policy is not None else Policy()
        if controller is None and isinstance(task, SessionTask):  # the operator's own task file: its grants stand
            operator = operator.model_copy(update={
                "session_permissions": sorted(set(operator.session_permissions)
                                              | set(permission_grants(task.permissions).granted)),
                "session_clipboard_read": operator.session_clipboard_read or task.allow_clipboard_read})
        if pool is not None:
            source = PoolSandbox(pool, inv.defaults.state_dir)
        else:
            egress = None
            if token_file is not None and egress_control_beside(token_file) is not None:  # checks the document
                egress = json.loads(token_file.with_suffix(EGRESS_FILE_SUFFIX).read_text(encoding="utf-8"))
            token = inv.token(token_file, "set DESKPOD_TOKEN or pass --token-file (or lease from a pool with --pool)")
            source = GivenSandbox(sandbox or inv.defaults.sandbox_url, token, token_file, reset_on_end, egress)
        host, port = parse_listen(listen)
        settings = get_settings()
        http_sha = settings.mcp_token_sha256 or (token_sha256(settings.mcp_token.get_secret_value())
                                                 if settings.mcp_token is not None else None)
        audit = str(audit_dir or inv.defaults.audit_dir)
        mcp_config = McpConfig(task, source.lease, source.release, policy=operator, audit_dir=Path(audit),
                               detach_handback=transport is Transport.stdio, state_dir=inv.defaults.state_dir,
                               elicit_approvals=approve_by_elicitation,
                               client_names=task_file is None and name is None)
        embedded = None
        if controller is not None:
            mcp_config.controller_url = controller
            mcp_config.controller_token = inv.token(controller_token_file) if controller_token_file else (
                settings.serve_token.get_secret_value() if settings.serve_token else "")
            if not mcp_config.controller_token:
                inv.refuse(EXIT_USAGE, "--controller needs its token: --controller-token-file or $DESKPOD_SERVE_TOKEN")
        else:
            embedded = EmbeddedController(approver_port, approver_token_sha256_from_env(), audit,
                                          egress_control_from_settings(), inv.defaults.sandbox_url)
    except ValueError as exc:
        inv.refuse(EXIT_USAGE, str(exc))
    except DeskpodError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    try:
        asyncio.run(serve_mcp(mcp_config, transport.value, host=host, port=port, token_sha256_hex=http_sha,
                              embedded=embedded, session_idle_s=get_settings().mcp_session_idle_s))
    except KeyboardInterrupt:
        pass
    except ValueError as exc:
        inv.refuse(EXIT_USAGE, str(exc))
    except OSError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"cannot listen: {exc}")
    raise typer.Exit(EXIT_OK)
