"""``deskpod eval``: run a suite of tasks over a pool of sandboxes and report the success rate.

The suite (:mod:`deskpod.eval.suite`) is loaded and every task file in it validated
before any sandbox starts (a bad file exits 2). The command then makes a pool of
``--parallel`` sandboxes of its own (Docker: one slot each, named after the process;
Kubernetes: claims on the warm pool), runs every task ``--repeat`` times over it
(:mod:`deskpod.eval.harness`), destroys the pool, and writes ``report.json`` and
``report.html`` into ``--report`` (:mod:`deskpod.eval.report`).

While it runs, a terminal on standard error shows a progress bar; otherwise one plain
line per finished run is printed there. The report's summary goes to standard output
(``--json``: the whole report document).

Exit codes: 0 when the success rate (passed runs among the runs judged) reaches
``--min-success`` and no run hit an infrastructure error; 1 when the rate is below
it; 3 when a run hit an infrastructure error on both attempts (the rate is then not a
verdict on the agent), or the backend cannot be reached or made ready at all; 2 for
a bad suite, option or configuration.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deskpod.cli.context import ConfigOption, Invocation, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from deskpod.errors import printable

__all__ = [
    "BackendChoice",
    "EVAL_EPILOG",
    "eval_command",
    "eval_exit_code",
    "make_backend",
]

EVAL_EPILOG = (f"Exit codes: {EXIT_OK} the success rate (passed among the judged runs) reached --min-success and "
               f"no run hit an infrastructure error; {EXIT_FAILURE} the rate is below --min-success; {EXIT_USAGE} a "
               f"bad suite, task, option or configuration (nothing ran); {EXIT_UNAVAILABLE} a run hit an "
               "infrastructure error twice, a snapshot setup failed, or the backend could not be reached.")
"""``deskpod eval --help``'s exit codes (the module docstring's), instead of the generic ones."""


class BackendChoice(str, Enum):
    """Where the eval's sandboxes run."""

    docker = "docker"
    kubernetes = "kubernetes"


def eval_exit_code(document: dict[str, Any]) -> int:
    """The exit code of a report document (see the module docstring).

    Args:
        document: :func:`deskpod.eval.report.report_document`'s dict.

    Returns:
        :data:`EXIT_UNAVAILABLE` when any run is an infrastructure error, else
        :data:`EXIT_OK` when the success rate reaches ``min_success``, else :data:`EXIT_FAILURE`.
    """
    if document["infrastructure_errors"] or document["setup_errors"]:
        return EXIT_UNAVAILABLE
    rate = document["success_rate"]
    return EXIT_OK if rate is not None and rate >= document["min_success"] else EXIT_FAILURE


def make_backend(choice: BackendChoice, name_prefix: str | None = None) -> Any:
    """The backend the settings describe.

    Args:
        choice: Docker (:class:`~deskpod.backend.docker_backend.DockerBackend` from
            :meth:`DockerBackendConfig.from_env`) or Kubernetes
            (:class:`~deskpod.backend.kubernetes_backend.KubernetesBackend` from the
            ``DESKPOD_K8S_*`` settings).
        name_prefix: the Docker backend's container and network name prefix (``None``: the settings').

    Returns:
        The backend (not yet connected).

    Raises:
        BackendError: the configuration is invalid (``detail["reason"] == "config"``),
            e.g. no bootstrap token file for Kubernetes.
    """
    from deskpod.errors import BackendError, SettingsError
    from deskpod.settings import get_settings

    if choice is BackendChoice.docker:
        from deskpod.backend import DockerBackend, DockerBackendConfig

        return DockerBackend(DockerBackendConfig.from_env(name_prefix=name_prefix))
    from deskpod.backend.kubernetes_backend import KubernetesBackend, KubernetesBackendConfig

    try:
        settings = get_settings()
    except SettingsError as exc:
        raise BackendError(f"invalid backend configuration: {exc.message}", detail={"reason": "config"}) from exc
    if settings.k8s_bootstrap_token_file is None:
        raise BackendError("--backend kubernetes: set DESKPOD_K8S_BOOTSTRAP_TOKEN_FILE (the deskpod-bootstrap "
                           "Secret's token)", detail={"reason": "config"})
    try:
        token = settings.k8s_bootstrap_token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendError(f"cannot read the bootstrap token file {settings.k8s_bootstrap_token_file}: {exc}",
                           detail={"reason": "config"}) from exc
    control_token = settings.egress_control_token
    return KubernetesBackend(KubernetesBackendConfig(
        namespace=settings.k8s_namespace, warm_pool=settings.k8s_warm_pool, bootstrap_token=token,
        api_url=settings.k8s_api_url, egress_control_url=settings.egress_control,
        egress_control_token=control_token.get_secret_value() if control_token is not None else "",
        egress_allowlist=tuple(settings.egress_allowlist.replace(",", " ").split())))


@contextmanager
def _progress(total: int) -> Iterator[Callable[[Any], None]]:
    """A progress callback for :class:`~deskpod.eval.harness.EvalRunner`: a bar on a terminal
    (standard error), else one plain line per finished or retried run."""
    console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    counts = {"passed": 0, "failed": 0, "infrastructure_error": 0, "running": 0}

    def line(event: Any) -> str:
        if event.kind == "retry":
            return f"retry {event.task} #{event.index} on a fresh sandbox: {event.error}"
        record = event.record
        return (f"{record.status.upper():<20} {record.task} #{record.index}  {record.steps} steps  "
                f"{record.wall_time_s:.1f} s  {record.mismatch or record.reason}")

    if not console.is_terminal:
        def plain(event: Any) -> None:
            if event.kind != "started":
                print(printable(line(event)[:400]), file=sys.stderr, flush=True)

        yield plain
        return

    def describe() -> str:
        return (f"tasks: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['infrastructure_error']} infra, {counts['running']} running")

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        bar = progress.add_task(describe(), total=total)

        def rich(event: Any) -> None:
            if event.kind == "started":
                counts["running"] += 1
            elif event.kind == "done":
                counts["running"] -= 1
                counts[event.record.status] += 1
            if event.kind != "started":
                progress.console.print(printable(line(event)[:400]))
            progress.update(bar, description=describe(), advance=1 if event.kind == "done" else 0)

        yield rich


def _summary(document: dict[str, Any], json_path: Path, html_path: Path) -> list[str]:
    rate = document["success_rate"]
    shown = "n/a" if rate is None else f"{rate * 100:.1f}%"
    interval = document["interval"]
    extra = f" (95% Wilson {interval[0] * 100:.1f}%-{interval[1] * 100:.1f}%)" if interval else ""
    lines = [f"suite {document['suite']}: {document['passed']} of {document['judged']} runs passed, "
             f"success rate {shown}{extra}, {document['infrastructure_errors']} infrastructure error(s), "
             f"{document['wall_time_s']:.1f} s at --parallel {document['parallel']}"]
    for run in document["runs"]:
        lines.append(f"  {run['status']:<20} {run['task']} #{run['index']}: expected {' or '.join(run['expected'])}, "
                     f"got {' / '.join(run['outcomes']) or 'none'}; {run['steps']} steps, {run['wall_time_s']:.1f} s, "
                     f"audit log {'verified' if run['audit']['verified'] else 'NOT verified'}")
        if run["status"] != "passed":
            lines.append(f"      {(run['mismatch'] or run['reason'])[:300]}")
    lines += [f"  setup error: {e[:300]}" for e in document["setup_errors"]]
    lines += [f"report: {html_path}", f"report (JSON): {json_path}"]
    return lines


def eval_command(
    ctx: typer.Context,
    suite: Annotated[Path, typer.Argument(metavar="SUITE", show_default=False,
                                          help="the suite file (YAML), e.g. runtime/deskpod/tasks/regression/suite.yaml")],
    backend: Annotated[BackendChoice, typer.Option("--backend", help="where the sandboxes run")] = BackendChoice.docker,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64, metavar="N",
                                          help="runs at a time (the pool's size)")] = 1,
    repeat: Annotated[int | None, typer.Option("--repeat", min=1, max=100, metavar="K",
                                               show_default="each task's repeat in the suite, else 1",
                                               help="runs of every task")] = None,
    min_success: Annotated[float, typer.Option("--min-success", min=0.0, max=1.0, metavar="F",
                                               help="exit 0 only when this share of the judged runs passed")] = 1.0,
    report: Annotated[Path | None, typer.Option("--report", metavar="DIR", show_default="eval-report/",
                                                help="folder for report.json and report.html")] = None,
    audit_dir: Annotated[Path | None, typer.Option("--audit-dir", metavar="DIR",
                                                   show_default="$DESKPOD_AUDIT_DIR, else the state folder's audit/",
                                                   help="folder for the runs' audit logs and failure scenes")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Run a suite of task files over a pool of sandboxes; report the success rate (exit by --min-success)."""
    inv = invocation(ctx, verbose, json_out, config)
    loaded = _load(inv, suite)
    signer = inv.audit_signer()
    pool = _pool(inv, backend, parallel)
    document, json_path, html_path = _run(inv, loaded, pool, signer, backend, parallel, repeat, min_success,
                                          report or Path("eval-report"), audit_dir or inv.defaults.audit_dir)
    inv.report({**document, "report_html": str(html_path), "report_json": str(json_path)},
               _summary(document, json_path, html_path), eval_exit_code(document))


def _load(inv: Invocation, suite: Path) -> Any:
    from deskpod.eval.suite import load_suite
    from deskpod.errors import SuiteFileError

    try:
        return load_suite(suite)
    except SuiteFileError as exc:
        inv.refuse(EXIT_USAGE, exc.message)


def _pool(inv: Invocation, backend: BackendChoice, parallel: int) -> Any:
    """A pool of ``parallel`` sandboxes of its own (named after this process), not yet filled."""
    from deskpod.backend import SandboxPool
    from deskpod.errors import BackendError

    name = f"eval-{os.getpid()}"
    try:
        made = make_backend(backend)
        if backend is BackendChoice.docker:
            made.client  # noqa: B018 - connecting is the point: no engine exits 3 before anything starts
    except BackendError as exc:
        inv.refuse(EXIT_USAGE if exc.detail.get("reason") == "config" else EXIT_UNAVAILABLE, exc.message)
    return SandboxPool(made, name=name, size=parallel, reset_mode="in_place")


def _run(inv: Invocation, loaded: Any, pool: Any, signer: Any, backend: BackendChoice, parallel: int,
         repeat: int | None, min_success: float, report_dir: Path, audit_dir: Path) -> tuple[dict[str, Any], Path, Path]:
    """Run the suite, always destroy the pool, write the report; a pool that cannot be made exits 3."""
    from deskpod.errors import DeskpodError
    from deskpod.eval.report import write_report
    from deskpod.eval.harness import EvalRunner

    async def body(on_progress: Callable[[Any], None]) -> Any:
        runner = EvalRunner(loaded, pool, audit_dir=audit_dir, signer=signer, parallel=parallel, repeat=repeat,
                            on_progress=on_progress, backend_name=backend.value)
        try:
            async with pool.renewing():  # this process holds its leases (and, on Kubernetes, its claims)
                return await runner.run()
        finally:
            try:
                await pool.close()
            except DeskpodError as exc:
                Console(stderr=True, markup=False, highlight=False).print(
                    printable(f"deskpod eval: the pool was not fully removed: {exc.message}"))

    total = sum(repeat or entry.repeat for entry in loaded.entries)
    try:
        with _progress(total) as on_progress:
            result = asyncio.run(body(on_progress))
    except DeskpodError as exc:
        inv.refuse(EXIT_UNAVAILABLE, f"the {backend.value} backend could not run the suite: {exc.message}")
    try:
        json_path, html_path, document = write_report(result, report_dir, min_success)
    except OSError as exc:
        inv.refuse(EXIT_USAGE, f"cannot write the report into {report_dir}: {exc}")
    return document, json_path, html_path
