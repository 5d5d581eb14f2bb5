"""The ``deskpod`` command.

- ``deskpod run TASK_FILE --sandbox URL [--policy FILE] [--confirm prompt|deny]``:
  play a task against a running sandbox under a policy file and exit 0 only on
  verified success (1: the run failed or was cancelled, 2: bad usage, task or
  policy file). Confirmations and pauses are asked at the terminal, and denied
  when there is none.
- ``deskpod verify-log LOG [--head HASH] [--public-key FILE] [--unsigned]``: check an
  audit log's hash chain, that it ends with ``run_finished``, and that record's seal
  against the controller's public key (default: this host's key); ``--unsigned``
  (only with ``--head``) accepts a log written before logs were sealed (0: intact,
  1: broken, 2: unreadable).
- ``deskpod audit-key [--key FILE]``: print the public key that seals audit logs (PEM),
  creating the controller's key on first use.
- ``deskpod serve [--listen HOST:PORT] [--policy FILE]``: the controller as a
  websocket service for other services (:mod:`deskpod.controller.serve`); agents
  present ``$DESKPOD_SERVE_TOKEN`` as a bearer token, approvers (who alone answer
  confirmations) ``$DESKPOD_SERVE_APPROVER_TOKEN``.
- ``deskpod code TASK_FILE --sandbox URL``: play a code-agent task in the sandbox's
  workspace; exit 0 only when the controller's own re-run of the tests passed.
  ``--confirm prompt`` (the default) asks at the terminal before a risky exec and
  refuses when there is no terminal; ``--confirm deny`` always refuses.
- ``deskpod agentd``: run the in-sandbox daemon (what the sandbox image runs).
- ``deskpod schema [--out DIR]``: write a JSON Schema per message of the daemon wire
  and of the controller service wire, plus ``index.json``, into DIR; without
  ``--out``, print the index (:mod:`deskpod.schema`).
- ``deskpod audit [SANDBOX] [--json]``: check a running sandbox container against
  SECURITY.md's claims; exit 0 only when every check passes (1: a check failed,
  2: the sandbox could not be inspected).
- ``deskpod pool up|status|acquire|release|snapshot|down``: a warm pool of ready
  sandboxes on the local Docker engine (:mod:`deskpod.backend`), kept in a host
  state file (:mod:`deskpod.backend.state`).
- ``deskpod reset ID [--mode in_place|recreate|restore]``: reset one sandbox of a
  pool, rotating its token.
  These exit 0 on success, 1 when the backend failed, 2 on bad usage or no pool.

The control token comes from ``DESKPOD_TOKEN`` or ``--token-file``, never from
the command line, where other users could read it. Pool commands never print a
token: ``deskpod pool acquire`` writes the leased sandbox's token to a file of
mode 0600 and prints its path, for ``deskpod run --token-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from deskpod.controller.runner import run_task
from deskpod.errors import printable
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
    # The reason and the final URL can quote what the sandbox sent: no escape sequence reaches the terminal.
    print(f"  {printable(result.reason)}")
    print(f"  {printable(extra)}")
    print(f"  audit log: {result.audit_log}")
    if getattr(result, "audit_head", ""):
        print(f"  audit log head: {result.audit_head}")
    if getattr(result, "scene", None):
        print(f"  failure scene: {result.scene}")
    return 0 if result.status == "succeeded" else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from deskpod.agents import create_agent
    from deskpod.controller.confirm import DenyChannel, TerminalChannel
    from deskpod.controller.policy import load_policy

    try:
        task = load_task(args.task_file)
        policy = load_policy(args.policy) if args.policy else None
    except TaskFileError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    channel = TerminalChannel() if args.confirm == "prompt" else DenyChannel()
    signer = _signer()
    if signer is None:
        return 2
    result = asyncio.run(
        run_task(task, args.sandbox, _token(args), audit_dir=args.audit_dir, channel=channel, policy=policy,
                 agent_factory=create_agent, connect_timeout_s=args.connect_timeout, signer=signer)
    )
    return _report(task.name, result, f"final URL: {result.url}")


def _signer(path: str | None = None) -> Any:
    """The controller's audit signing key (created on first use), or ``None`` after printing why not."""
    from deskpod.controller.audit_sign import AuditSigner
    from deskpod.errors import AuditKeyError

    try:
        return AuditSigner.load_or_create(path)
    except AuditKeyError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return None


def _cmd_serve(args: argparse.Namespace) -> int:
    from deskpod.controller.policy import load_policy
    from deskpod.controller.audit_sign import AuditSigner
    from deskpod.controller.serve import ControllerService, approver_token_sha256_from_env, serve, token_sha256_from_env
    from deskpod.errors import DeskpodError

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print("deskpod: serve needs FastAPI and uvicorn: pip install 'deskpod[serve]'", file=sys.stderr)
        return 2
    try:
        service = ControllerService(token_sha256_from_env(), audit_dir=args.audit_dir,
                                    signer=AuditSigner.load_or_create(),
                                    approver_token_sha256=approver_token_sha256_from_env())
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
    from deskpod.controller.audit_sign import AuditPublicKey
    from deskpod.errors import AuditKeyError

    if args.unsigned and not args.head:
        print("deskpod: --unsigned needs --head: without a seal only the run's head anchors the log's end",
              file=sys.stderr)
        return 2
    try:
        key = AuditPublicKey.load(args.public_key) if args.public_key else None
        check = verify_log(args.log, args.head, public_key=key, require_seal=not args.unsigned)
    except AuditKeyError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"deskpod: cannot read {args.log}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"deskpod: --head: {exc}", file=sys.stderr)
        return 2
    if check.ok:
        sealed = f", sealed by key {check.key_id}" if check.key_id else ", not sealed (checked against --head)"
        print(f"OK: {check.lines} lines, hash chain intact, ends with run_finished{sealed}, head {check.head}")
        return 0
    print(f"BROKEN after {check.lines} good lines: {printable(check.error)}")
    return 1


def _cmd_audit_key(args: argparse.Namespace) -> int:
    from deskpod.controller.audit_sign import default_key_path

    path = args.key or str(default_key_path())
    signer = _signer(path)
    if signer is None:
        return 2
    print(signer.public_key.pem(), end="")
    print(f"key id {signer.public_key.key_id} (private key: {path})", file=sys.stderr)
    return 0


def _cmd_code(args: argparse.Namespace) -> int:
    from deskpod.controller.code_agent import run_code_task
    from deskpod.controller.code_task import load_code_task
    from deskpod.controller.confirm import DenyChannel, TerminalChannel

    try:
        task = load_code_task(args.task_file)
    except TaskFileError as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 2
    channel = TerminalChannel() if args.confirm == "prompt" else DenyChannel()
    signer = _signer()
    if signer is None:
        return 2
    result = asyncio.run(
        run_code_task(task, args.sandbox, _token(args), channel=channel, audit_dir=args.audit_dir,
                      connect_timeout_s=args.connect_timeout, signer=signer)
    )
    return _report(task.name, result, f"changed: {', '.join(result.changed_files) or '(nothing)'}")


def _cmd_agentd(_: argparse.Namespace) -> int:
    from deskpod.agentd.__main__ import main as agentd_main

    agentd_main()
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from deskpod.audit import audit_sandbox, render_table
    from deskpod.errors import AuditError

    try:
        report = audit_sandbox(args.sandbox, project=args.project)
    except AuditError as exc:
        print(f"deskpod audit: {exc.message}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else render_table(report))
    return 0 if report.ok else 1


def _pool_command(args: argparse.Namespace, body: Callable[[Any, Any], Coroutine[Any, Any, int]]) -> int:
    """Load the pool named by ``--pool`` under its lock, run ``body(pool, state)``, save the pool.

    ``body`` returns the exit code. The pool's members are saved even when it fails,
    since a failed reset may already have replaced a sandbox.
    """
    from deskpod.backend import DockerBackend, PoolStateFile, SandboxPool
    from deskpod.errors import BackendError, SnapshotError
    from deskpod.snapshots import SnapshotStore

    try:
        state = PoolStateFile(args.pool)
        with state.lock():
            record = state.load()
            if record is None:
                print(f"deskpod: no pool {args.pool!r} (start one with `deskpod pool up`)", file=sys.stderr)
                return 2
            snapshot = SnapshotStore(state.directory / "snapshots").load(record.snapshot) if record.snapshot else None
            pool = SandboxPool(DockerBackend(record.backend), name=record.name, size=record.size,
                               reset_mode=record.reset_mode, start_url=record.start_url, snapshot=snapshot,
                               members=record.to_members())
            try:
                code: int = asyncio.run(body(pool, state))
            finally:
                record.update_from(pool)
                state.save(record)
            return code
    except (BackendError, SnapshotError) as exc:
        print(f"deskpod: {exc.message}", file=sys.stderr)
        return 1


def _print_members(pool: Any, as_json: bool, found: list[Any] | None = None) -> None:
    """Print the pool's members and, from ``found`` (:meth:`SandboxPool.check`), the
    broken sandboxes this command replaced (or, leased, left for their release)."""
    rows = [{"id": m.handle.id, "state": m.state, "url": m.handle.url, "container": m.handle.container,
             "resets": m.resets, "replaced": m.replaced} for m in pool.members]
    broken = [{"id": r.old_id, "replaced_by": r.new_id or None, "reason": r.reason} for r in found or []]
    if as_json:
        print(json.dumps({"pool": pool.name, "size": pool.size, "reset_mode": pool.reset_mode, "sandboxes": rows,
                          "replaced": broken}, indent=2))
        return
    print(f"pool {pool.name}: {len(rows)}/{pool.size} sandboxes, reset mode {pool.reset_mode}")
    for r in rows:
        last = f"  last replaced: {r['replaced']}" if r["replaced"] else ""
        print(f"  {r['id']}  {r['state']:<6}  {r['url']}  resets={r['resets']}{last}")
    for b in broken:
        now = f"by {b['replaced_by']}" if b["replaced_by"] else "at its release (leased)"
        print(f"  replaced: {b['reason']}: {b['id']} {now}")


def _print_report(report: Any) -> None:
    fallback = f" (fell back: {'; '.join(report.failures)})" if report.failures and not report.replaced else ""
    replaced = f" (replaced: {report.replaced})" if report.replaced else ""
    print(f"sandbox {report.sandbox_id}: {report.performed} in {report.duration_s:.2f} s"
          f"{f', now {report.handle.id}' if report.handle.id != report.sandbox_id else ''}{fallback}{replaced}")


def _cmd_pool_up(args: argparse.Namespace) -> int:
    from deskpod.backend import DockerBackendConfig, PoolRecord, PoolStateFile
    from deskpod.errors import BackendError

    # The options apply when the pool is created; `up` on an existing pool refills it.
    try:
        state = PoolStateFile(args.pool)
        with state.lock():
            if state.load() is None:
                config = DockerBackendConfig.from_env(
                    sandbox_image=args.image, egress_image=args.egress_image, egress_allowlist=args.allowlist,
                    outside_network=args.outside_network, screen_size=args.screen_size,
                    start_url=args.start_url,
                )
                state.save(PoolRecord(name=args.pool, size=args.size, reset_mode=args.reset_mode,
                                      start_url=args.start_url, snapshot=args.snapshot, backend=config))
    except (BackendError, ValueError) as exc:
        print(f"deskpod: {exc}", file=sys.stderr)
        return 2

    async def up(pool: Any, _: Any) -> int:
        await pool.fill()
        _print_members(pool, args.json)
        return 0

    return _pool_command(args, up)


def _cmd_pool_status(args: argparse.Namespace) -> int:
    async def status(pool: Any, _: Any) -> int:
        _print_members(pool, args.json, await pool.check())
        return 0

    return _pool_command(args, status)


def _cmd_pool_acquire(args: argparse.Namespace) -> int:
    async def acquire(pool: Any, state: Any) -> int:
        before = len(pool.replacements)
        handle = await pool.acquire()
        path = state.write_token(handle.id, handle.token)
        replaced = [r for r in pool.replacements[before:] if r.new_id == handle.id]
        reason = replaced[-1].reason if replaced else None
        if args.json:
            print(json.dumps({"id": handle.id, "url": handle.url, "token_file": str(path), "replaced": reason,
                              "replaced_id": replaced[-1].old_id if replaced else None}))
        else:
            print(f"{handle.id} {handle.url} {path}"
                  + (f" (replaced: {reason}: {replaced[-1].old_id})" if replaced else ""))
        return 0

    return _pool_command(args, acquire)


def _cmd_pool_release(args: argparse.Namespace) -> int:
    async def release(pool: Any, state: Any) -> int:
        state.remove_token(args.id)
        _print_report(await pool.release(args.id, mode=args.mode))
        return 0

    return _pool_command(args, release)


def _cmd_reset(args: argparse.Namespace) -> int:
    async def reset(pool: Any, state: Any) -> int:
        leased = pool.member(args.id).state == "leased"
        report = await pool.reset(args.id, mode=args.mode)
        state.remove_token(args.id)
        if leased:
            path = state.write_token(report.handle.id, report.handle.token)
            print(f"new token of {report.handle.id}: {path}")
        _print_report(report)
        return 0

    return _pool_command(args, reset)


def _cmd_pool_snapshot(args: argparse.Namespace) -> int:
    from deskpod.client import SandboxClient
    from deskpod.snapshots import SnapshotStore

    async def snapshot(pool: Any, state: Any) -> int:
        handle = pool.member(args.id).handle
        client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
        try:
            archive = await client.snapshot()
        finally:
            await client.close()
        info = SnapshotStore(state.directory / "snapshots").save(args.name, archive)
        print(f"snapshot {info.name}: {info.size} bytes, sha256 {info.sha256}")
        return 0

    return _pool_command(args, snapshot)


def _cmd_pool_down(args: argparse.Namespace) -> int:
    async def down(pool: Any, state: Any) -> int:
        for m in pool.members:
            state.remove_token(m.handle.id)
        await pool.close()
        print(f"pool {pool.name}: every sandbox destroyed")
        return 0

    code = _pool_command(args, down)
    if code == 0:
        from deskpod.backend import PoolStateFile

        PoolStateFile(args.pool).delete()
    return code


def _pool_parsers(sub: Any) -> None:
    """``deskpod pool ...`` and ``deskpod reset``."""
    modes = ["in_place", "recreate", "restore"]
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pool", default=os.environ.get("DESKPOD_POOL", "default"),
                        help="the pool's name (default: $DESKPOD_POOL or 'default')")
    common.add_argument("--json", action="store_true", help="print JSON")

    pool = sub.add_parser("pool", help="a warm pool of ready sandboxes on the local Docker engine")
    psub = pool.add_subparsers(dest="pool_command", required=True)
    up = psub.add_parser("up", parents=[common], help="create the pool (or refill it) and wait until it is ready")
    up.add_argument("--size", type=int, default=2, help="how many sandboxes the pool holds (default 2)")
    up.add_argument("--reset-mode", choices=modes, default="in_place", help="how release resets (default in_place)")
    up.add_argument("--start-url", help="the page sandboxes start at and resets open")
    up.add_argument("--snapshot", help="stored snapshot that 'restore' resets bring back (see `pool snapshot`)")
    up.add_argument("--image", help="sandbox image (default: $DESKPOD_SANDBOX_IMAGE or deskpod/sandbox:latest)")
    up.add_argument("--egress-image", help="egress image (default: $DESKPOD_EGRESS_IMAGE or deskpod/egress:latest)")
    up.add_argument("--allowlist", help="egress domain allowlist (default: $DESKPOD_EGRESS_ALLOWLIST or demo.test)")
    up.add_argument("--outside-network", help="network the egress proxies reach sites on "
                    "(default: $DESKPOD_OUTSIDE_NETWORK or bridge)")
    up.add_argument("--screen-size", help="Xvfb screen size (default: $DESKPOD_SCREEN_SIZE or 1280x800)")
    up.set_defaults(func=_cmd_pool_up)
    status = psub.add_parser("status", parents=[common], help="list the pool's sandboxes")
    status.set_defaults(func=_cmd_pool_status)
    acquire = psub.add_parser("acquire", parents=[common],
                              help="lease a ready sandbox: prints ID URL TOKEN_FILE (the token file is mode 0600)")
    acquire.set_defaults(func=_cmd_pool_acquire)
    release = psub.add_parser("release", parents=[common], help="reset a leased sandbox and return it to the pool")
    release.add_argument("id")
    release.add_argument("--mode", choices=modes, help="how to reset (default: the pool's reset mode)")
    release.set_defaults(func=_cmd_pool_release)
    snap = psub.add_parser("snapshot", parents=[common], help="store a snapshot of a sandbox's browser session")
    snap.add_argument("id")
    snap.add_argument("name")
    snap.set_defaults(func=_cmd_pool_snapshot)
    down = psub.add_parser("down", parents=[common], help="destroy every sandbox of the pool and forget it")
    down.set_defaults(func=_cmd_pool_down)

    reset = sub.add_parser("reset", parents=[common], help="reset one sandbox of a pool (its token rotates)")
    reset.add_argument("id")
    reset.add_argument("--mode", choices=modes, help="how to reset (default: the pool's reset mode)")
    reset.set_defaults(func=_cmd_reset)


def _cmd_schema(args: argparse.Namespace) -> int:
    from deskpod.schema import index, wire_messages, write_schemas

    if args.out is None:
        print(json.dumps(index(wire_messages()), indent=2))
        return 0
    try:
        written = write_schemas(Path(args.out))
    except OSError as exc:
        print(f"deskpod schema: cannot write {args.out}: {exc}", file=sys.stderr)
        return 1
    count = sum(len(messages) for messages in written["wires"].values())
    print(f"wrote {count} schemas and index.json to {args.out}")
    return 0


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

    verify = sub.add_parser("verify-log", help="check an audit log's hash chain, final record and seal")
    verify.add_argument("log")
    verify.add_argument("--head", help="the run's audit log head hash (also detects lines cut from the end)")
    verify.add_argument("--public-key", help="the controller's public key (PEM, from `deskpod audit-key`; "
                        "default: this host's key)")
    verify.add_argument("--unsigned", action="store_true",
                        help="accept a log without a seal (written before logs were sealed); needs --head")
    verify.set_defaults(func=_cmd_verify_log)

    audit_key = sub.add_parser("audit-key", help="print the public key that seals audit logs (PEM)")
    audit_key.add_argument("--key", help="the private key file (default: $DESKPOD_AUDIT_KEY or "
                           "STATE_DIR/audit/signing.key; created when missing)")
    audit_key.set_defaults(func=_cmd_audit_key)

    code = _task_parser(sub, "code", "play a code-agent task in the sandbox's workspace and verify it")
    code.add_argument("--confirm", choices=["prompt", "deny"], default="prompt",
                      help="risky exec commands: ask at the terminal (refused without one), or always refuse")
    code.set_defaults(func=_cmd_code)

    agentd = sub.add_parser("agentd", help="run the in-sandbox daemon")
    agentd.set_defaults(func=_cmd_agentd)

    schema = sub.add_parser("schema", help="write the JSON Schemas of the daemon and controller service wires")
    schema.add_argument("--out", help="folder to write one schema per message and index.json into "
                                      "(default: print the index)")
    schema.set_defaults(func=_cmd_schema)

    audit = sub.add_parser("audit", help="check a running sandbox's hardening, pass/fail per property")
    audit.add_argument("sandbox", nargs="?", help="container name or id (default: the compose sandbox service)")
    audit.add_argument("--project", help="compose project of the sandbox and its peers (default: from labels)")
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.set_defaults(func=_cmd_audit)

    _pool_parsers(sub)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    raise SystemExit(args.func(args))
