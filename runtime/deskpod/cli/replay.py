"""``deskpod replay``: write a run's replay as one self-contained HTML file a reviewer opens offline
(:func:`deskpod.service.console.replay_html.render_run`).

``LOG_OR_RUN_DIR`` is a run's audit log (``<audit-dir>/<run_id>.jsonl``), its failure
scene's folder (``<audit-dir>/scenes/<run_id>``), or an audit folder (then ``--run``
names the run, else the newest is taken). The page carries the audit log's verdict,
checked with the pinned key, ``--public-key`` or ``DESKPOD_AUDIT_PUBLIC_KEY`` (with
neither: "chain intact, seal NOT verified (no pinned key)"), never a key found beside the
logs. Exit 0 when the file is written and the log is intact, 1 when it is written and the
log is broken or could not be checked, 2 when there is no such run, the key cannot be read or the file cannot be
written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

__all__ = [
    "replay_command", "resolve_run",
]


def resolve_run(source: Path, run_id: str | None) -> tuple[Path, str] | str:
    """The audit folder and run id that ``source`` (and ``--run``) name, or why there are none.

    Args:
        source: a log file, a scene folder or an audit folder.
        run_id: the run within an audit folder (``None``: the newest).

    Returns:
        ``(audit_dir, run_id)``, or a one-line reason.
    """
    from deskpod.service.console.timeline import list_runs

    if source.is_file():
        if source.suffix != ".jsonl":
            return f"{source} is not an audit log (<run_id>.jsonl)"
        return source.parent, source.stem
    if not source.is_dir():
        return f"{source} does not exist"
    if (source / "scene.json").is_file():
        return source.parent.parent, source.name
    if run_id is not None:
        return source, run_id
    runs, _ = list_runs(source, limit=1)
    if not runs:
        return f"{source} holds no audit log"
    return source, runs[0].run_id


def replay_command(
    ctx: typer.Context,
    source: Annotated[Path, typer.Argument(
        metavar="LOG_OR_RUN_DIR", show_default=False,
        help="the run's audit log, its scene folder (scenes/<run_id>), or an audit folder")],
    html: Annotated[Path, typer.Option("--html", metavar="OUT.html", show_default=False,
                                       help="the HTML file to write")],
    run: Annotated[str | None, typer.Option(
        "--run", metavar="RUN_ID", show_default="the newest run", help="the run, when LOG_OR_RUN_DIR is an audit "
        "folder")] = None,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", metavar="FILE", show_default="$DESKPOD_AUDIT_PUBLIC_KEY; with none the seal is not verified",
        help="the controller's public key (PEM, `deskpod audit-key` on its host) the log's seal must verify with: "
             "the pinned key; keep it outside the audit folder")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Write a run's timeline (steps, confirmations, pauses, screenshots, the log's verdict) as one HTML file."""
    from deskpod.service.console.replay_html import render_run
    from deskpod.service.console.timeline import load_run
    from deskpod.controller.audit_sign import AuditPublicKey, pinned_public_key
    from deskpod.errors import AuditKeyError, SettingsError

    inv = invocation(ctx, verbose, json_out, config)
    found = resolve_run(source, run)
    if isinstance(found, str):
        inv.refuse(EXIT_USAGE, found)
    audit_dir, run_id = found
    try:
        key = AuditPublicKey.load(public_key) if public_key is not None else pinned_public_key()
        timeline = load_run(audit_dir, run_id, public_key=key)
        if timeline is None:
            inv.refuse(EXIT_USAGE, f"no run {run_id!r} in {audit_dir}")
        html.write_text(render_run(timeline, audit_dir), encoding="utf-8")
    except (AuditKeyError, SettingsError) as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    except OSError as exc:
        inv.refuse(EXIT_USAGE, f"cannot read the run or write {html}: {exc}")
    verdict = timeline.summary.verdict
    document = {"html": str(html), "run_id": run_id, "status": timeline.summary.status, "records": timeline.records,
                "verdict": verdict.state, "verdict_text": verdict.text, "notes": list(timeline.notes)}
    lines = [f"wrote {html}: run {run_id} ({timeline.summary.status}, {timeline.records} records)",
             f"audit log: {verdict.text}"]
    inv.report(document, lines, EXIT_OK if verdict.ok else EXIT_FAILURE)
