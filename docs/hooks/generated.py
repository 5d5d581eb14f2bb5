"""The documentation's generated blocks: tables and counts that come from the code.

A page holds a block as two marker lines with the generated Markdown between them::

    <!-- generated: NAME [ARGUMENT] -->
    ...
    <!-- /generated: NAME -->

(the configuration table keeps :mod:`deskpod.settings`' own markers). :func:`render`
rewrites every block of a page from the code; MkDocs calls it on each page as it builds
(the ``hooks`` entry of ``mkdocs.yml``), so the site never shows a stale table, and
``tests/unit/test_docs_site.py`` fails while a page's file differs from its rendering, so
the Markdown read on its own is right too. ``python docs/hooks/generated.py --write``
rewrites the files in place.

A block that only the built site shows (the API reference's member lists, the module
table) is one line, ``<!-- generated: NAME [ARGUMENT] /-->``: the build replaces it, the
file keeps only the line, so moving a module or changing an ``__all__`` changes no page.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["BLOCKS", "DOCS", "on_page_markdown", "render", "write_all"]

DOCS = Path(__file__).resolve().parents[1]
"""The documentation folder (``docs/``)."""

_ROOT = DOCS.parent
if str(_ROOT / "runtime") not in sys.path:
    # MkDocs loads this hook by path: the checkout's package is the one documented.
    sys.path.insert(0, str(_ROOT / "runtime"))
_BUILD_ONLY = re.compile(r"<!-- generated: ([a-z-]+)(?: ([\w.]+))? /-->\n")
_BLOCK = re.compile(r"(<!-- generated: ([a-z-]+)(?: ([\w.]+))? -->\n)(.*?)(<!-- /generated: \2 -->)", re.S)


def _attribute_docs(module_name: str) -> dict[str, str]:
    """The attribute docstrings of a module's top-level constants (``NAME = ...`` then a string).

    Args:
        module_name: the module's dotted name.

    Returns:
        Constant name → its docstring, whitespace folded to single spaces.
    """
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    docs: dict[str, str] = {}
    body = tree.body
    for node, after in zip(body, body[1:], strict=False):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if (isinstance(target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[target.id] = " ".join(after.value.value.split())
    return docs


def _cell(text: str) -> str:
    """``text`` fit for a Markdown table cell (``|`` escaped, reST roles as code).

    Args:
        text: the text.

    Returns:
        The cell's text.
    """
    text = re.sub(r":(?:data|class|attr|func|meth|mod):`~?([^`<]+?)(?: <[^>]+>)?`", r"`\1`", text)
    return text.replace("``", "`").replace("|", "\\|")


def limits_table(module_name: str = "deskpod.protocol.limits") -> str:
    """A module's limits, one row per upper-case constant of its ``__all__`` (by default the
    daemon wire's caps, :mod:`deskpod.protocol.limits`).

    Args:
        module_name: the module's dotted name.

    Returns:
        The Markdown table.
    """
    module = importlib.import_module(module_name)
    docs = _attribute_docs(module.__name__)
    rows = ["| constant | value | meaning |", "|---|---|---|"]
    for name in sorted(n for n in module.__all__ if n.isupper()):
        value = getattr(module, name)
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)
        rows.append(f"| `{name}` | `{shown}` | {_cell(docs.get(name, ''))} |")
    return "\n".join(rows) + "\n"


def exit_codes_table() -> str:
    """The ``deskpod`` command's exit codes (:data:`deskpod.cli.exits.EXIT_CODES`), each meaning
    the docstring of its ``EXIT_*`` constant.

    Returns:
        The Markdown table.
    """
    exits = importlib.import_module("deskpod.cli.exits")
    docs = _attribute_docs(exits.__name__)
    by_code = {getattr(exits, name): doc for name, doc in docs.items()
               if name.startswith("EXIT_") and isinstance(getattr(exits, name), int)}
    rows = ["| code | `--json` name | meaning |", "|---|---|---|"]
    for code, (name, _) in sorted(exits.EXIT_CODES.items()):
        rows.append(f"| `{code}` | `{name}` | {_cell(by_code[code])} |")
    return "\n".join(rows) + "\n"


def metrics_table() -> str:
    """The metrics ``deskpod serve`` exports (:data:`deskpod.service.server.metrics.METRICS`).

    Returns:
        The Markdown table: name, type, labels, meaning.
    """
    metrics = importlib.import_module("deskpod.service.server.metrics")
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for spec in metrics.METRICS:
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
        rows.append(f"| `{spec.name}` | {spec.kind} | {labels} | {_cell(spec.help)} |")
    return "\n".join(rows) + "\n"


def _type_name(annotation: Any) -> str:
    """A field's type as the docs show it: ``bool``, ``list[Tab]``, ``Screenshot | None``,
    ``"png" | "jpeg"`` (constraints left out: the field's docstring and the limits page give them)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(arg) for arg in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", repr(annotation))


def model_fields(model_path: str) -> str:
    """A pydantic model's fields: name, type, default and meaning (the field's docstring).

    Args:
        model_path: ``module.Model``, e.g. ``deskpod.protocol.Observation``.

    Returns:
        The Markdown table.
    """
    module_name, _, name = model_path.rpartition(".")
    model = getattr(importlib.import_module(module_name), name)
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field_name, field in model.model_fields.items():
        default = "required" if field.is_required() else f"`{field.default!r}`"
        rows.append(f"| `{field_name}` | `{_cell(_type_name(field.annotation))}` | {default} | "
                    f"{_cell(' '.join((field.description or '').split()))} |")
    return "\n".join(rows) + "\n"


def _cli() -> Any:
    """The ``deskpod`` command as a click group."""
    import typer.main

    return typer.main.get_command(importlib.import_module("deskpod.cli").app)


def cli_commands() -> str:
    """Every ``deskpod`` command and subcommand with the first line of its help.

    Returns:
        The Markdown table.
    """
    group = _cli()
    rows = ["| command | what it does |", "|---|---|"]

    def walk(command: Any, path: str) -> None:
        for name in sorted(command.commands):
            sub = command.commands[name]
            if getattr(sub, "commands", None):
                walk(sub, f"{path} {name}")
                continue
            summary = (sub.help or "").strip().split("\n\n")[0]
            rows.append(f"| `{path} {name}` | {_cell(' '.join(summary.split()))} |")

    walk(group, "deskpod")
    return "\n".join(rows) + "\n"


def command_names() -> str:
    """The ``deskpod`` command's first-level names, as a sentence's list.

    Returns:
        The names, code-quoted, comma-separated, with a line break at the end.
    """
    group = _cli()
    names = [f"`{name} ...`" if getattr(group.commands[name], "commands", None) else f"`{name}`"
             for name in group.commands]
    return ", ".join(names) + "\n"


def _schema_index() -> dict[str, Any]:
    """The index ``deskpod schema`` prints (name, direction and file of every message)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(importlib.import_module("deskpod.cli").app, ["schema"])
    if result.exit_code != 0:
        raise RuntimeError(f"deskpod schema failed: {result.output}")
    index: dict[str, Any] = json.loads(result.stdout)
    return index


def wire_counts() -> str:
    """How many messages each wire has in each direction, as ``deskpod schema`` writes them.

    Returns:
        A Markdown table.
    """
    rows = ["| wire | direction | messages |", "|---|---|---|"]
    for wire, entries in _schema_index()["wires"].items():
        directions: dict[str, int] = {}
        for entry in entries:
            directions[entry["direction"]] = directions.get(entry["direction"], 0) + 1
        rows += [f"| {wire} | `{direction}` | {count} |" for direction, count in directions.items()]
    return "\n".join(rows) + "\n"


def wire_messages() -> str:
    """Every message of both wires, with its direction and its schema's file.

    Returns:
        A Markdown table.
    """
    rows = ["| wire | message | direction | schema file |", "|---|---|---|---|"]
    for wire, entries in _schema_index()["wires"].items():
        rows += [f"| {wire} | `{e['name']}` | `{e['direction']}` | `{e['file']}` |" for e in entries]
    return "\n".join(rows) + "\n"


def source_layout() -> str:
    """The package's modules and subpackages, each with its docstring's first sentence.

    Returns:
        A Markdown table, in path order.
    """
    package = _ROOT / "runtime" / "deskpod"
    rows = ["| module | its job |", "|---|---|"]
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        if "__pycache__" in rel.parts or any(p.startswith(".") for p in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        name = ".".join(parts) + ("/" if path.name == "__init__.py" else "")
        rows.append(f"| `{name}` | {_cell(first)} |")
    return "\n".join(rows) + "\n"


def settings_table() -> str:
    """The configuration table of :mod:`deskpod.settings` (its own markers)."""
    settings = importlib.import_module("deskpod.settings")
    table: str = settings.markdown_table()
    return table


def trace_spans() -> str:
    """The spans of a run's trace (:data:`deskpod.tracing.spans.SPANS`).

    Returns:
        The Markdown table: span, parent, what it covers.
    """
    spans = importlib.import_module("deskpod.tracing.spans")
    rows = ["| span | parent | covers |", "|---|---|---|"]
    for name, (parent, covers) in spans.SPANS.items():
        shown = f"`{parent}`" if parent in spans.SPANS else parent
        rows.append(f"| `{name}` | {shown} | {_cell(covers)} |")
    return "\n".join(rows) + "\n"


def trace_attributes() -> str:
    """The attributes a run's spans carry (:data:`deskpod.tracing.spans.ATTRIBUTES`).

    Returns:
        The Markdown table: key, kind, spans, meaning.
    """
    spans = importlib.import_module("deskpod.tracing.spans")
    rows = ["| attribute | kind | on | meaning |", "|---|---|---|---|"]
    for name, spec in spans.ATTRIBUTES.items():
        on = "every span" if set(spec.spans) == set(spans.SPANS) else ", ".join(
            f"`{s.removeprefix('deskpod.')}`" for s in spec.spans)
        rows.append(f"| `{spans.attribute_key(name)}` | {spec.kind} | {on} | {_cell(spec.doc)} |")
    return "\n".join(rows) + "\n"


def api_reference(module_name: str) -> str:
    """The mkdocstrings directive documenting exactly the names ``module_name`` exports.

    Args:
        module_name: the module's dotted name.

    Returns:
        A ``:::`` block whose ``members`` are the module's ``__all__``, in its order.
    """
    names = importlib.import_module(module_name).__all__
    members = "".join(f"        - {name}\n" for name in names)
    return f"::: {module_name}\n    options:\n      show_root_heading: false\n      members:\n{members}"


BLOCKS: dict[str, Callable[..., str]] = {
    "api": api_reference,
    "cli-commands": cli_commands,
    "command-names": command_names,
    "exit-codes": exit_codes_table,
    "limits": limits_table,
    "metrics": metrics_table,
    "model-fields": model_fields,
    "source-layout": source_layout,
    "trace-attributes": trace_attributes,
    "trace-spans": trace_spans,
    "wire-counts": wire_counts,
    "wire-messages": wire_messages,
}
"""Block name → the function that makes its Markdown."""


def render(markdown: str, *, build: bool = False) -> str:
    """``markdown`` with every generated block made again from the code.

    Args:
        markdown: a page's text.
        build: also replace the build-only blocks (as the site's build does).

    Returns:
        The page's text with its blocks regenerated (unchanged when they are current).

    Raises:
        KeyError: a block names no generator.
    """
    def made(name: str, argument: str | None) -> str:
        make = BLOCKS[name]
        return make(argument) if argument else make()

    text = _BLOCK.sub(lambda m: m.group(1) + made(m.group(2), m.group(3)) + m.group(5), markdown)
    if build:
        text = _BUILD_ONLY.sub(lambda m: made(m.group(1), m.group(2)), text)
    settings = importlib.import_module("deskpod.settings")
    begin, end = settings.README_BEGIN + "\n", settings.README_END
    if begin in text:
        start, stop = text.index(begin) + len(begin), text.index(end)
        text = text[:start] + settings_table() + text[stop:]
    return text


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: the page's Markdown with its generated blocks current.

    Args:
        markdown: the page's Markdown.

    Returns:
        The rendered Markdown.
    """
    return render(markdown, build=True)


def write_all() -> list[Path]:
    """Rewrite every page under :data:`DOCS` whose blocks are stale.

    Returns:
        The pages rewritten.
    """
    changed = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Regenerate the docs' generated blocks.")
    parser.add_argument("--write", action="store_true", help="rewrite stale pages in place")
    if parser.parse_args().write:
        for page in write_all():
            print(page.relative_to(_ROOT))
    sys.exit(0)
