"""The ``deskpod`` command.

- ``deskpod run TASK_FILE --sandbox URL [--policy FILE] [--confirm prompt|deny]``:
  play a task against a running sandbox under a policy file and exit 0 only on
  verified success (1: the run failed or was cancelled, 2: bad usage, task or
  policy file). Confirmations and pauses are asked at the terminal, and denied
  when there is none.
- ``deskpod verify-log LOG [--head HASH]``: check an audit log's hash chain
  (0: intact, 1: broken, 2: unreadable).
- ``deskpod serve [--listen HOST:PORT] [--policy FILE]``: the controller as a
  websocket service for other services (:mod:`deskpod.controller.serve`); clients
  present ``$DESKPOD_SERVE_TOKEN`` as a bearer token.
- ``deskpod code TASK_FILE --sandbox URL``: play a code-agent task in the sandbox's
  workspace; exit 0 only when the controller's own re-run of the tests passed.
  ``--confirm prompt`` (the default) asks at the terminal before a risky exec and
  refuses when there is no terminal; ``--confirm deny`` always refuses.
- ``deskpod agentd``: run the in-sandbox daemon (what the sandbox image runs).
- ``deskpod audit [SANDBOX] [--json]``: check a running sandbox container against
  SECURITY.md's claims; exit 0 only when every check passes (1: a check failed,
  2: the sandbox could not be inspected).

The control token comes from ``DESKPOD_TOKEN`` or ``--token-file``, never from
the command line, where other users could read it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from deskpod.controller.runner import run_task
from deskpod.controller.task import TaskFileError, load_task

__all__ = ["main"]


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    token = os.environ.get("DESKPOD_TOKEN", "")
    if not token:
        raise SystemExit("deskpod: set DESKPOD_TOKEN or pass --token-file")
    return token


def _report(name: str, result: Any, extra: str) -> int:
    """Print a run's verdict, reason, one extra line, the audit log and the failure scene;
    return the exit code (0 only for a verified success)."""
    verdict = {"succeeded": "VERIFIED SUCCESS", "cancelled": "CANCELLED"}.get(result.status, "FAILED")
    print(f"{verdict}: task {name!r} ({result.run_id}) after {result.steps} steps in {result.duration_s:.1f} s")
    print(f"  {result.reason}")
    print(f"  {extra}")
    print(f"  audit log: {result.audit_log}")
    if getattr(result, "audit_head", ""):
        print(f"  audit log head: {result.audit_head}")
    if getattr(result, "scene", None):
        print(f"  failure scene: {result.scene}")
    return 0 if result.status == "succeeded" else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from deskpod.controller.confirm import DenyChannel, TerminalChannel
    from deskpod.controller.policy import load_policy

    try:
        task = load_task(args.task_file)
        policy = load_policy(args.policy) if args.policy else None
    except TaskFileError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    channel = TerminalChannel() if args.confirm == "prompt" else DenyChannel()
    result = asyncio.run(
        run_task(task, args.sandbox, _token(args), audit_dir=args.audit_dir, channel=channel, policy=policy,
                 connect_timeout_s=args.connect_timeout)
    )
    return _report(task.name, result, f"final URL: {result.url}")


def _cmd_serve(args: argparse.Namespace) -> int:
    from deskpod.controller.policy import load_policy
    from deskpod.controller.serve import ControllerService, serve, token_sha256_from_env
    from deskpod.errors import DeskpodError

    try:
        service = ControllerService(token_sha256_from_env(), audit_dir=args.audit_dir)
        if args.policy:
            service.policy = load_policy(args.policy)
    except DeskpodError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    host, _, port = args.listen.rpartition(":")
    try:
        asyncio.run(serve(service, host or "127.0.0.1", int(port)))
    except KeyboardInterrupt:
        pass
    return 0


def _cmd_verify_log(args: argparse.Namespace) -> int:
    from deskpod.controller.audit import verify_log

    try:
        check = verify_log(args.log, args.head)
    except OSError as exc:
        print(f"deskpod: cannot read {args.log}: {exc}", file=sys.stderr)
        return 2
    if check.ok:
        print(f"OK: {check.lines} lines, hash chain intact, head {check.head}")
        return 0
    print(f"BROKEN after {check.lines} good lines: {check.error}")
    return 1


def _cmd_code(args: argparse.Namespace) -> int:
    from deskpod.controller.code_agent import load_code_task, run_code_task
    from deskpod.controller.exec_risk import deny_all, prompt_on_tty

    try:
        task = load_code_task(args.task_file)
    except TaskFileError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    confirm = prompt_on_tty() if args.confirm == "prompt" else deny_all
    result = asyncio.run(
        run_code_task(task, args.sandbox, _token(args), confirm=confirm, audit_dir=args.audit_dir,
                      connect_timeout_s=args.connect_timeout)
    )
    return _report(task.name, result, f"changed: {', '.join(result.changed_files) or '(nothing)'}")


def _cmd_agentd(_: argparse.Namespace) -> int:
    from deskpod.agentd.__main__ import main as agentd_main

    agentd_main()
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import json

    from deskpod.audit import audit_sandbox, render_table
    from deskpod.errors import AuditError

    try:
        report = audit_sandbox(args.sandbox, project=args.project)
    except AuditError as exc:
        print(f"deskpod audit: {exc.message}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else render_table(report))
    return 0 if report.ok else 1


def _task_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand that plays a task file against a sandbox, with the options they share."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.add_argument("task_file")
    parser.add_argument("--sandbox", default=os.environ.get("DESKPOD_SANDBOX_URL", "ws://127.0.0.1:8765/v1/ws"),
                        help="the sandbox daemon's websocket URL (default: $DESKPOD_SANDBOX_URL)")
    parser.add_argument("--token-file", help="read the control token from this file instead of $DESKPOD_TOKEN")
    parser.add_argument("--audit-dir", default=os.environ.get("DESKPOD_AUDIT_DIR", "deskpod-audit"),
                        help="folder for the run's JSONL audit log")
    parser.add_argument("--connect-timeout", type=float, default=90.0,
                        help="seconds to wait for the sandbox to accept a connection")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``deskpod`` console script."""
    parser = argparse.ArgumentParser(prog="deskpod", description="deskpod sandbox controller")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    sub = parser.add_subparsers(dest="command", required=True)

    run = _task_parser(sub, "run", "play a task file against a sandbox and verify it")
    run.add_argument("--policy", help="policy file (YAML): allowlist, blocked actions, confirmations, limits")
    run.add_argument("--confirm", choices=["prompt", "deny"], default="prompt",
                     help="confirmations and pauses: ask at the terminal (denied without one), or always deny")
    run.set_defaults(func=_cmd_run)

    serve = sub.add_parser("serve", help="the controller as a websocket service (token: $DESKPOD_SERVE_TOKEN)")
    serve.add_argument("--listen", default=os.environ.get("DESKPOD_SERVE_LISTEN", "127.0.0.1:8766"),
                       help="HOST:PORT to listen on (default 127.0.0.1:8766; $DESKPOD_SERVE_LISTEN)")
    serve.add_argument("--policy", help="default policy file for sessions that send none")
    serve.add_argument("--audit-dir", default=os.environ.get("DESKPOD_AUDIT_DIR", "deskpod-audit"),
                       help="folder for the runs' audit logs, screenshots and failure scenes")
    serve.set_defaults(func=_cmd_serve)

    verify = sub.add_parser("verify-log", help="check an audit log's hash chain")
    verify.add_argument("log")
    verify.add_argument("--head", help="the run's audit log head hash (also detects lines cut from the end)")
    verify.set_defaults(func=_cmd_verify_log)

    code = _task_parser(sub, "code", "play a code-agent task in the sandbox's workspace and verify it")
    code.add_argument("--confirm", choices=["prompt", "deny"], default="prompt",
                      help="risky exec commands: ask at the terminal (refused without one), or always refuse")
    code.set_defaults(func=_cmd_code)

    agentd = sub.add_parser("agentd", help="run the in-sandbox daemon")
    agentd.set_defaults(func=_cmd_agentd)

    audit = sub.add_parser("audit", help="check a running sandbox's hardening, pass/fail per property")
    audit.add_argument("sandbox", nargs="?", help="container name or id (default: the compose sandbox service)")
    audit.add_argument("--project", help="compose project of the sandbox and its peers (default: from labels)")
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.set_defaults(func=_cmd_audit)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    raise SystemExit(args.func(args))
