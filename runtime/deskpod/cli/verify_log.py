"""``deskpod verify-log``: check an audit log's hash chain, that it ends with
``run_finished``, and that record's seal (:func:`deskpod.controller.audit_log.verify_log`).

The key the seal must verify with is the one the operator pins: ``--public-key FILE`` (the
controller's public key, from ``deskpod audit-key`` on its host), else
``DESKPOD_AUDIT_PUBLIC_KEY`` (:func:`~deskpod.controller.audit_sign.pinned_public_key`);
never a key found on disk beside the logs or the controller's private key, which whoever
rewrites a log in that folder could have replaced. The seal covers the log's run id and
file name, so a log renamed or copied under another run's name fails. The run's screen
recording, when its file is there (``recordings/<run_id>.mp4`` beside the log), must have the
SHA-256 the log holds (:func:`~deskpod.controller.recording_store.check_recording`). Exit 0 when the log
is intact and sealed by that key (or, with ``--unsigned``, ends at ``--head``); 1 when it
is broken, cut, renamed, unsealed or sealed by another key, or its recording was modified or
is not covered by the log; 2 when the log or the key
cannot be read, ``--head`` is not a SHA-256, or ``--unsigned`` comes without ``--head``;
5 (:data:`~deskpod.cli.exits.EXIT_UNVERIFIED`) when no key is pinned and the chain is
intact and ends with ``run_finished``: "chain intact, seal NOT verified (no pinned key)",
never "broken".
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_UNVERIFIED, EXIT_USAGE

__all__ = ["verify_log_command"]

_SEALED_FOR = {2: "this run id and file name", 1: "this run id (a v1 seal: its file name matches the run id)"}


def verify_log_command(
    ctx: typer.Context,
    log: Annotated[Path, typer.Argument(metavar="LOG", show_default=False,
                                        help="the run's audit log, <audit-dir>/<run_id>.jsonl")],
    head: Annotated[str | None, typer.Option(
        "--head", metavar="HASH", show_default="not checked",
        help="the run's audit log head hash (also detects lines cut from the end)")] = None,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", metavar="FILE",
        show_default="$DESKPOD_AUDIT_PUBLIC_KEY; with none the seal is not verified (exit 5)",
        help="the controller's public key (PEM, `deskpod audit-key` on its host) the final record's seal must "
             "verify with: the pinned key; keep it outside the audit folder")] = None,
    unsigned: Annotated[bool, typer.Option(
        "--unsigned", help="accept a log without a seal (written before logs were sealed); needs --head")] = False,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Check an audit log's hash chain, its final run_finished record and that record's seal."""
    from deskpod.controller.audit_log import NO_PINNED_KEY, verify_log
    from deskpod.controller.audit_sign import AuditPublicKey, pinned_public_key
    from deskpod.controller.recording_store import check_log_recording
    from deskpod.errors import AuditKeyError, SettingsError

    inv = invocation(ctx, verbose, json_out, config)
    if unsigned and not head:
        inv.refuse(EXIT_USAGE, "--unsigned needs --head: without a seal only the run's head anchors the log's end")
    try:
        key = AuditPublicKey.load(public_key) if public_key is not None else pinned_public_key()
        check = verify_log(log, head, public_key=key, require_seal=key is not None and not unsigned)
        recording = check_log_recording(log) if check.ok else None
    except (AuditKeyError, SettingsError) as exc:
        inv.refuse(EXIT_USAGE, exc.message)
    except OSError as exc:
        inv.refuse(EXIT_USAGE, f"cannot read {log}: {exc}")
    except ValueError as exc:
        inv.refuse(EXIT_USAGE, f"--head: {exc}")
    document = {"log": str(log), "intact": check.ok, "lines": check.lines, "head": check.head,
                "key_id": check.key_id, "seal_version": check.seal_version, "error": check.error}
    if recording is not None:
        document["recording"] = recording.state
        if not recording.ok:
            document["intact"], document["error"] = False, recording.text
            inv.report(document, [f"BROKEN: the log's {check.lines} lines are intact, and the recording {recording.text}"],
                       EXIT_FAILURE)
    if check.ok and key is None and not unsigned:
        document["seal_verified"] = False
        inv.report(document, [f"UNVERIFIED: {check.lines} lines, {NO_PINNED_KEY}; ends with run_finished, head "
                              f"{check.head}; pin the controller's key with --public-key FILE or "
                              "DESKPOD_AUDIT_PUBLIC_KEY"], EXIT_UNVERIFIED)
    if check.ok:
        document["seal_verified"] = bool(check.key_id)
        sealed = (f", sealed by key {check.key_id} for {_SEALED_FOR[check.seal_version]}" if check.key_id
                  else ", not sealed (checked against --head)")
        kept = f"; recording: {recording.text}" if recording is not None and recording.state != "none" else ""
        inv.report(document, [f"OK: {check.lines} lines, hash chain intact, ends with run_finished{sealed}, "
                              f"head {check.head}{kept}"], EXIT_OK)
    inv.report(document, [f"BROKEN after {check.lines} good lines: {check.error}"], EXIT_FAILURE)
