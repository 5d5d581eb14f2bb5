"""``deskpod pool up|status|acquire|release|snapshot|down`` and ``deskpod reset``: a warm
pool of ready sandboxes on the local Docker engine (:mod:`deskpod.backend`), kept in a
host state file (:mod:`deskpod.backend.pool_state`).

Pool commands never print a token: ``acquire`` writes the leased sandbox's token to a
file of mode 0600 and prints its path, for ``deskpod run --token-file``, and the lease's
id, which ``release --lease`` and, for a leased sandbox, ``deskpod reset --lease`` name: a
holder whose lease was taken back cannot release or reset the sandbox under its next
holder (exit 1, nothing changed). A lease lasts
``DESKPOD_POOL_LEASE_S`` (60 s) unless its holder renews it: ``acquire --hold`` stays in
the foreground renewing it every third of that and releases it when interrupted (SIGINT,
SIGTERM); a holder that dies stops renewing, and ``acquire`` (when none is idle) or
``status`` takes the sandbox back, reset (:mod:`deskpod.backend.lease`). Every command
first connects to the Docker engine: without the docker SDK or an engine that answers
it exits 3 and changes nothing (``pool up`` saves no pool record). Exit 1: the backend
failed (every sandbox leased, no such sandbox, a sandbox that never became ready);
2: bad options or no such pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.docker_backend import DockerBackend
from deskpod.backend.pool import StartEvent
from deskpod.cli.context import ConfigOption, Invocation, JsonOption, VerboseOption, invocation, shown_defaults
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

__all__ = ["ResetModeChoice", "pool_app", "reset_command"]

_SHOWN = shown_defaults()

pool_app = typer.Typer(name="pool", no_args_is_help=True,
                       help="A warm pool of ready sandboxes on the local Docker engine.")


class ResetModeChoice(str, Enum):
    """How a sandbox is reset (:data:`deskpod.backend.pool.ResetMode`)."""

    in_place = "in_place"
    recreate = "recreate"
    restore = "restore"


def _backend_default(field: str) -> str:
    """How ``pool up --help`` shows a backend option's default: its ``DESKPOD_*`` variable, else
    :class:`DockerBackendConfig`'s own default (so help and behaviour cannot drift)."""
    default = DockerBackendConfig.model_fields[field].default
    return f"$DESKPOD_{field.upper()}, else {default}"


PoolOption = Annotated[str | None, typer.Option(
    "--pool", metavar="NAME", show_default=f"$DESKPOD_POOL, else {_SHOWN.pool!r}", help="the pool's name")]
ModeOption = Annotated[ResetModeChoice | None, typer.Option(
    "--mode", show_default="the pool's reset mode", help="how to reset")]
SandboxId = Annotated[str, typer.Argument(metavar="ID", show_default=False,
                                          help="the sandbox's id, as `pool acquire` and `pool status` print it")]
LeaseOption = Annotated[str, typer.Option(
    "--lease", metavar="LEASE", show_default=False,
    help="the lease's id, as `pool acquire` prints it (`pool status` shows each sandbox's current one): "
         "a lease the pool took back (expired) is refused, exit 1, and nothing changes")]
ResetLeaseOption = Annotated[str | None, typer.Option(
    "--lease", metavar="LEASE", show_default="none: the sandbox must be idle",
    help="the lease's id, as `pool acquire` prints it: needed to reset a leased sandbox; a lease the pool "
         "took back (expired) is refused, exit 1, and nothing changes")]

Body = Callable[[Any, Any], Coroutine[Any, Any, tuple[dict[str, Any], list[str]]]]
"""A pool command's work: ``body(pool, state)`` → (its ``--json`` document, its human lines)."""


@contextmanager
def _progress(pool: Any, missing: int) -> Iterator[None]:
    """Show, on standard error, how many of ``missing`` sandboxes are ready, starting and
    retried while :meth:`SandboxPool.fill` makes them (nothing when standard error is not
    a terminal); a failed attempt is printed as it happens."""
    console = Console(stderr=True)
    if missing <= 0 or not console.is_terminal:
        yield
        return
    counts = {"starting": 0, "retry": 0, "failed": 0}

    def describe() -> str:
        extra = "".join(f", {counts[k]} {word}" for k, word in (("retry", "retried"), ("failed", "failed"))
                        if counts[k])
        return f"sandboxes ready ({counts['starting']} starting{extra})"

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(describe(), total=missing)

        def on_start(event: StartEvent) -> None:
            if event.kind == "starting":
                counts["starting"] += 1
            else:
                counts["starting"] -= 1
            if event.kind in ("retry", "failed"):
                counts[event.kind] += 1
                progress.console.print(f"sandbox {event.slot + 1}, attempt {event.attempt} failed: {event.error}",
                                       markup=False, highlight=False)
            progress.update(task, description=describe(), advance=1 if event.kind == "ready" else 0)

        pool.on_start = on_start
        try:
            yield
        finally:
            pool.on_start = None


def _resolve_slot_memory(inv: Invocation, backend: DockerBackend, record: Any) -> Any:
    """``--slot-memory auto`` of a new pool: the engine's memory less the reserve, shared by
    the pool's size (:func:`deskpod.backend.memory.auto_slot_bytes`, desktop zones counted);
    too many slots exit 2."""
    from deskpod.backend.memory import auto_slot_bytes
    from deskpod.errors import BackendError

    try:
        with _engine_errors():
            host_bytes = int(backend.client.info().get("MemTotal") or 0)
        share = auto_slot_bytes(host_bytes, record.size, desktop=record.backend.desktop) if host_bytes else None
    except BackendError as exc:
        inv.refuse(_exit_for(exc), exc.message)
    if share is None:
        return record
    return record.model_copy(update={"backend": record.backend.model_copy(
        update={"slot_memory": f"{share // 1_048_576}m"})})


@contextmanager
def _engine_errors() -> Iterator[None]:
    """The engine's errors as :class:`~deskpod.errors.BackendError` (``reason`` ``"docker"``)."""
    from deskpod.errors import BackendError

    try:
        yield
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - the SDK's and the transport's errors alike
        raise BackendError(f"asking the Docker engine for its memory: {exc}", detail={"reason": "docker"}) from exc


def _connect(inv: Invocation, backend: DockerBackend) -> None:
    """Reach the Docker engine, or exit 3."""
    from deskpod.errors import BackendError

    try:
        backend.client  # noqa: B018 - connecting is the point
    except BackendError as exc:
        inv.refuse(EXIT_UNAVAILABLE, exc.message)


def _exit_for(exc: Any) -> int:
    return EXIT_USAGE if exc.detail.get("reason") == "config" else EXIT_FAILURE


def _new_record(inv: Invocation, name: str, create: dict[str, Any]) -> Any:
    """The record of a new pool from ``pool up``'s options; bad options exit 2."""
    from deskpod.backend import DockerBackendConfig, PoolRecord
    from deskpod.errors import BackendError
    from pydantic import ValidationError

    options = dict(create)
    try:
        return PoolRecord(name=name, backend=DockerBackendConfig.from_env(**options.pop("backend")), **options)
    except BackendError as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    except (ValidationError, ValueError) as exc:
        inv.refuse(EXIT_USAGE, str(exc).splitlines()[0])


def _lease_s(inv: Invocation) -> float:
    """``DESKPOD_POOL_LEASE_S`` (or the configuration file's ``pool_lease_s``); invalid exits 2."""
    from deskpod.errors import SettingsError
    from deskpod.settings import get_settings

    try:
        return get_settings().pool_lease_s
    except SettingsError as exc:
        inv.refuse(EXIT_USAGE, exc.message)


def _run_pool(inv: Invocation, name: str | None, body: Body, create: dict[str, Any] | None = None,
              auto_memory: bool = False) -> None:
    """Run ``body`` on the pool (:func:`_with_pool`) and report its result."""
    inv.report(*_with_pool(inv, name, body, create, auto_memory))


def _with_pool(inv: Invocation, name: str | None, body: Body, create: dict[str, Any] | None = None,
               auto_memory: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Load the pool under its lock (``create``: the options of a new pool), connect to
    Docker, run ``body(pool, state)``, save the pool, return what ``body`` returned.

    A missing pool (without ``create``) exits 2 before anything is written: no folder,
    no lock file. A new pool is saved only once Docker answered and its options made a
    pool. Its members are saved even when ``body`` fails, since a failed reset may
    already have replaced a sandbox. ``auto_memory``: a new pool's slot memory is sized
    from the engine's memory (see :func:`_resolve_slot_memory`).
    """
    from deskpod.backend import PoolStateFile, SandboxPool
    from deskpod.errors import DeskpodError, SnapshotError
    from deskpod.client.snapshot_store import SnapshotStore

    lease_s = _lease_s(inv)
    try:
        state = PoolStateFile(name or inv.defaults.pool, inv.defaults.state_dir)
        if create is None and not state.path.exists():
            inv.refuse(EXIT_USAGE, f"no pool {state.name!r} (start one with `deskpod pool up`)")
        with state.lock():
            record = state.load()
            new = record is None
            if record is None:
                if create is None:
                    inv.refuse(EXIT_USAGE, f"no pool {state.name!r} (start one with `deskpod pool up`)")
                record = _new_record(inv, state.name, create)
            backend = DockerBackend(record.backend)
            _connect(inv, backend)
            if new and auto_memory:
                record = _resolve_slot_memory(inv, backend, record)
                backend = DockerBackend(record.backend, client=backend.client)
            snapshot = None
            if record.snapshot:
                try:
                    snapshot = SnapshotStore(state.directory / "snapshots").load(record.snapshot)
                except SnapshotError as exc:
                    inv.refuse(EXIT_USAGE if new else EXIT_FAILURE, exc.message)
            pool = SandboxPool(backend, name=record.name, size=record.size, reset_mode=record.reset_mode,
                               start_url=record.start_url, snapshot=snapshot, members=record.to_members(),
                               lease_s=lease_s)
            try:
                with _progress(pool, pool.size - len(pool.members) if create is not None else 0):
                    return asyncio.run(body(pool, state))
            finally:
                record.update_from(pool)
                state.save(record)
    except DeskpodError as exc:
        inv.refuse(_exit_for(exc), exc.message)


def _members(pool: Any, found: list[Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The pool's members and, from ``found`` (:meth:`SandboxPool.check`), the broken
    sandboxes this command replaced (or, leased, left for their release)."""
    rows = [{"id": m.handle.id, "state": m.state, "url": m.handle.url, "container": m.handle.container,
             "resets": m.resets, "replaced": m.replaced, "lease": m.lease or None} for m in pool.members]
    broken = [{"id": r.old_id, "replaced_by": r.new_id or None, "reason": r.reason} for r in found or []]
    human = [f"pool {pool.name}: {len(rows)}/{pool.size} sandboxes, reset mode {pool.reset_mode}"]
    for r in rows:
        last = f"  last replaced: {r['replaced']}" if r["replaced"] else ""
        lease = f"  lease={r['lease']}" if r["lease"] else ""
        human.append(f"  {r['id']}  {r['state']:<6}  {r['url']}  resets={r['resets']}{lease}{last}")
    for b in broken:
        now = f"by {b['replaced_by']}" if b["replaced_by"] else "at its release (leased)"
        human.append(f"  replaced: {b['reason']}: {b['id']} {now}")
    return ({"pool": pool.name, "size": pool.size, "reset_mode": pool.reset_mode, "sandboxes": rows,
             "replaced": broken}, human)


def _reset_report(report: Any) -> tuple[dict[str, Any], list[str]]:
    fallback = f" (fell back: {'; '.join(report.failures)})" if report.failures and not report.replaced else ""
    replaced = f" (replaced: {report.replaced})" if report.replaced else ""
    now = f", now {report.handle.id}" if report.handle.id != report.sandbox_id else ""
    document = {"sandbox_id": report.sandbox_id, "id": report.handle.id, "url": report.handle.url,
                "requested": report.requested, "performed": report.performed,
                "duration_s": round(report.duration_s, 3), "failures": list(report.failures),
                "replaced": report.replaced}
    return document, [f"sandbox {report.sandbox_id}: {report.performed} in {report.duration_s:.2f} s"
                      f"{now}{fallback}{replaced}"]


def _configured_slot_memory(inv: Invocation) -> str:
    """``DESKPOD_SLOT_MEMORY`` (or the configuration file's ``slot_memory``), else ``"auto"``;
    an invalid setting exits 2."""
    from deskpod.errors import SettingsError
    from deskpod.settings import get_settings

    try:
        return get_settings().slot_memory or "auto"
    except SettingsError as exc:
        inv.refuse(EXIT_USAGE, exc.message)


@pool_app.command("up")
def up_command(
    ctx: typer.Context,
    pool_name: PoolOption = None,
    size: Annotated[int, typer.Option("--size", min=1, help="how many sandboxes the pool holds")] = 2,
    reset_mode: Annotated[ResetModeChoice, typer.Option(
        "--reset-mode", help="how release resets")] = ResetModeChoice.in_place,
    start_url: Annotated[str | None, typer.Option(
        "--start-url", metavar="URL", show_default="the sandbox image's start page",
        help="the page sandboxes start at and resets open")] = None,
    snapshot: Annotated[str | None, typer.Option(
        "--snapshot", metavar="NAME", show_default="none",
        help="stored snapshot that 'restore' resets bring back (see `pool snapshot`)")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", show_default=_backend_default("sandbox_image"), help="sandbox image")] = None,
    egress_image: Annotated[str | None, typer.Option(
        "--egress-image", show_default=_backend_default("egress_image"),
        help="egress proxy image")] = None,
    allowlist: Annotated[str | None, typer.Option(
        "--allowlist", show_default=_backend_default("egress_allowlist"), help="egress domain allowlist")] = None,
    outside_network: Annotated[str | None, typer.Option(
        "--outside-network", show_default=_backend_default("outside_network"),
        help="network the egress proxies reach sites on")] = None,
    screen_size: Annotated[str | None, typer.Option(
        "--screen-size", metavar="WxH", show_default=_backend_default("screen_size"),
        help="Xvfb screen size")] = None,
    subnet_pool: Annotated[str | None, typer.Option(
        "--subnet-pool", metavar="CIDR", show_default="$DESKPOD_SUBNET_POOL, else Docker's default pools",
        help="address range each slot's network takes a free subnet of")] = None,
    subnet_size: Annotated[int | None, typer.Option(
        "--subnet-size", metavar="PREFIX", min=16, max=29, show_default=_backend_default("subnet_size"),
        help="prefix length of each slot's subnet")] = None,
    slot_memory: Annotated[str | None, typer.Option(
        "--slot-memory", metavar="SIZE|auto", show_default="$DESKPOD_SLOT_MEMORY, else auto",
        help="memory of one slot (sandbox + workspace + proxy); auto: the engine's memory less 2 GiB, "
             "shared by --size")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Create the pool (or refill it) and wait until it is ready; the options apply when it is created."""
    inv = invocation(ctx, verbose, json_out, config)
    memory = slot_memory or _configured_slot_memory(inv)
    create = {"size": size, "reset_mode": reset_mode.value, "start_url": start_url, "snapshot": snapshot,
              "backend": {"sandbox_image": image, "egress_image": egress_image, "egress_allowlist": allowlist,
                          "outside_network": outside_network, "screen_size": screen_size, "start_url": start_url,
                          "subnet_pool": subnet_pool, "subnet_size": subnet_size,
                          "slot_memory": None if memory == "auto" else memory}}

    async def fill(pool: Any, _: Any) -> tuple[dict[str, Any], list[str]]:
        await pool.fill()
        return _members(pool)

    _run_pool(inv, pool_name, fill, create, auto_memory=memory == "auto")


@pool_app.command("status")
def status_command(ctx: typer.Context, pool_name: PoolOption = None, verbose: VerboseOption = False,
                   json_out: JsonOption = False, config: ConfigOption = None) -> None:
    """List the pool's sandboxes; release (reset) those whose lease expired, replace idle ones that died."""
    inv = invocation(ctx, verbose, json_out, config)

    async def status(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        expired = await pool.expire()
        for report in expired:
            state.remove_token(report.sandbox_id)
        document, human = _members(pool, await pool.check())
        document["expired"] = [report.sandbox_id for report in expired]
        human += [f"  lease expired: {report.sandbox_id} released ({report.performed})" for report in expired]
        return document, human

    _run_pool(inv, pool_name, status)


@pool_app.command("acquire")
def acquire_command(
    ctx: typer.Context,
    pool_name: PoolOption = None,
    hold: Annotated[bool, typer.Option(
        "--hold", help="stay in the foreground renewing the lease every third of DESKPOD_POOL_LEASE_S; "
                       "release it at SIGINT or SIGTERM")] = False,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Lease a ready sandbox: prints ID URL TOKEN_FILE LEASE (the token file is mode 0600; `deskpod run
    --token-file` finds the slot's egress control file beside it; `pool release ID --lease LEASE` gives it
    back). The lease lasts DESKPOD_POOL_LEASE_S (60 s) unless renewed (--hold); an expired one is taken
    back, reset."""
    inv = invocation(ctx, verbose, json_out, config)

    async def acquire(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        before = len(pool.replacements)
        handle = await pool.acquire()
        member = pool.member(handle.id)
        path = state.write_token(handle.id, handle.token)
        egress = state.write_egress_control(handle)
        replaced = [r for r in pool.replacements[before:] if r.new_id == handle.id]
        reason = replaced[-1].reason if replaced else None
        document = {"id": handle.id, "url": handle.url, "token_file": str(path), "replaced": reason,
                    "replaced_id": replaced[-1].old_id if replaced else None,
                    "egress_control_file": str(egress) if egress else None,
                    "lease": member.lease, "lease_expires": member.lease_expires}
        return document, [f"{handle.id} {handle.url} {path} {member.lease}"
                          + (f" (replaced: {reason}: {replaced[-1].old_id})" if replaced else "")]

    if not hold:
        _run_pool(inv, pool_name, acquire)
    document, human = _with_pool(inv, pool_name, acquire)
    inv.emit(document, human)
    _hold(inv, pool_name, document["id"], document["lease"])


def _hold(inv: Invocation, pool_name: str | None, sandbox_id: str, lease: str) -> None:
    """Renew the lease until SIGINT or SIGTERM, then release the sandbox (exit 0); a lease
    lost meanwhile (the pool took the sandbox back) exits 1."""
    import signal

    from deskpod.backend import PoolStateFile
    from deskpod.backend.lease import keep_renewing
    from deskpod.errors import BackendError

    state = PoolStateFile(pool_name or inv.defaults.pool, inv.defaults.state_dir)
    lease_s = _lease_s(inv)
    lost: list[str] = []

    async def hold() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)

        async def renew() -> float:
            try:
                return await asyncio.to_thread(state.renew, sandbox_id, lease, lease_s)
            except BackendError as exc:
                if exc.detail.get("reason") == "lease_lost":
                    lost.append(exc.message)
                    stop.set()
                raise

        async with keep_renewing(renew, lease_s, f"the lease of sandbox {sandbox_id}"):
            await stop.wait()

    asyncio.run(hold())
    if lost:
        inv.refuse(EXIT_FAILURE, lost[0])

    async def release(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        return _reset_report(await state.release(pool, sandbox_id, lease))

    _with_pool(inv, pool_name, release)
    raise typer.Exit(EXIT_OK)


@pool_app.command("release")
def release_command(ctx: typer.Context, sandbox_id: SandboxId, lease: LeaseOption, mode: ModeOption = None,
                    pool_name: PoolOption = None, verbose: VerboseOption = False, json_out: JsonOption = False,
                    config: ConfigOption = None) -> None:
    """End a lease: reset its sandbox (its token rotates) and return it to the pool; a lease the pool
    took back is refused (exit 1) and changes nothing."""
    inv = invocation(ctx, verbose, json_out, config)

    async def release(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        return _reset_report(await state.release(pool, sandbox_id, lease, mode=mode.value if mode else None))

    _run_pool(inv, pool_name, release)


@pool_app.command("snapshot")
def snapshot_command(
    ctx: typer.Context,
    sandbox_id: SandboxId,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                        help="the snapshot's name, for `pool up --snapshot NAME`")],
    pool_name: PoolOption = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Store a snapshot of a sandbox's browser session (cookies, storage; a credential: keep it safe)."""
    from deskpod.client import SandboxClient
    from deskpod.client.snapshot_store import SnapshotStore

    inv = invocation(ctx, verbose, json_out, config)

    async def snapshot(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        handle = pool.member(sandbox_id).handle
        client = await SandboxClient.connect(handle.url, handle.token, timeout_s=30)
        try:
            archive = await client.snapshot()
        finally:
            await client.close()
        info = SnapshotStore(state.directory / "snapshots").save(name, archive)
        return ({"name": info.name, "size_bytes": info.size, "sha256": info.sha256},
                [f"snapshot {info.name}: {info.size} bytes, sha256 {info.sha256}"])

    _run_pool(inv, pool_name, snapshot)


@pool_app.command("down")
def down_command(ctx: typer.Context, pool_name: PoolOption = None, verbose: VerboseOption = False,
                 json_out: JsonOption = False, config: ConfigOption = None) -> None:
    """Destroy every sandbox of the pool and forget it."""
    from deskpod.backend import PoolStateFile

    inv = invocation(ctx, verbose, json_out, config)
    destroyed: list[str] = []

    async def down(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        for m in pool.members:
            state.remove_token(m.handle.id)
            destroyed.append(m.handle.id)
        await pool.close()
        return {"pool": pool.name, "destroyed": destroyed}, [f"pool {pool.name}: every sandbox destroyed"]

    try:
        _run_pool(inv, pool_name, down)
    except typer.Exit as done:
        if done.exit_code == EXIT_OK:
            PoolStateFile(pool_name or inv.defaults.pool, inv.defaults.state_dir).delete()
        raise


def reset_command(ctx: typer.Context, sandbox_id: SandboxId, lease: ResetLeaseOption = None,
                  mode: ModeOption = None, pool_name: PoolOption = None, verbose: VerboseOption = False,
                  json_out: JsonOption = False, config: ConfigOption = None) -> None:
    """Reset one sandbox of a pool (its token rotates); a leased one needs its lease (--lease, else exit 1
    and nothing changes), stays leased and gets a new token file."""
    inv = invocation(ctx, verbose, json_out, config)

    async def reset(pool: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
        leased = pool.member(sandbox_id).state == "leased"
        report = await pool.reset(sandbox_id, lease=lease, mode=mode.value if mode else None)
        state.remove_token(sandbox_id)
        document, human = _reset_report(report)
        document["token_file"] = None
        if leased:
            path = state.write_token(report.handle.id, report.handle.token)
            state.write_egress_control(report.handle)
            document["token_file"] = str(path)
            human.insert(0, f"new token of {report.handle.id}: {path}")
        return document, human

    _run_pool(inv, pool_name, reset)
