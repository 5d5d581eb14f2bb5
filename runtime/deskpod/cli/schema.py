"""``deskpod schema``: the JSON Schemas of the daemon and controller service wires (:mod:`deskpod.schema`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from deskpod.cli.context import ConfigOption, JsonOption, VerboseOption, invocation
from deskpod.cli.exits import EXIT_FAILURE, EXIT_OK

__all__ = ["schema_command"]


def schema_command(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", show_default="print the index",
        help="folder to write one schema per message, index.json and service/openapi.json into")] = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Write a JSON Schema per message of both wires; without --out, print their index (JSON)."""
    from deskpod.schema import index, wire_messages, write_schemas

    inv = invocation(ctx, verbose, json_out, config)
    if out is None:
        print(json.dumps(index(wire_messages()), indent=2))
        raise typer.Exit(EXIT_OK)
    try:
        written = write_schemas(out)
    except OSError as exc:
        inv.refuse(EXIT_FAILURE, f"cannot write {out}: {exc}")
    count = sum(len(messages) for messages in written["wires"].values())
    inv.report({"out": str(out), "schemas": count, "index": str(out / "index.json")},
               [f"wrote {count} schemas and index.json to {out}"])
