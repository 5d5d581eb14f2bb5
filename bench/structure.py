"""The package's shape, measured from the source of two trees side by side.

For each tree (the checkout, and a baseline such as a worktree of an older commit)
it reads ``runtime/deskpod`` without importing it and prints, as Markdown for
BENCHMARKS.md:

- the modules over 600 physical lines and the largest module;
- the largest class in physical lines (decorators and docstring included);
- import cycles between modules, counting every import form: module level, inside
  ``if TYPE_CHECKING:``, inside functions, and ``from package import module``
  (a package's ``__init__`` importing its own children is not counted);
- the number of names exported through ``__all__`` in all modules, and in package
  ``__init__`` files alone;
- README.md's length in lines and words.

    python -m bench structure [--baseline PATH]

No Docker, no import of the measured code; pure reading of files.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The import graph's reader is the layering tests' own (tests/support is their import root).
sys.path.insert(0, str(REPO / "tests" / "support"))
from import_graph import cycles, module_edges, modules  # noqa: E402

MAX_MODULE_LINES = 600
"""The most physical lines one module may have (``tests/unit/test_module_size.py`` keeps it)."""


@dataclass(frozen=True)
class Shape:
    """What :func:`measure` found in one tree.

    Attributes:
        modules: ``(lines, dotted name)`` of every module, largest first.
        largest_class: ``(lines, "module.Class")`` of the largest class.
        cycles: each import cycle's modules, sorted.
        exported: names in every ``__all__``.
        exported_by_packages: names in the ``__all__`` of package ``__init__`` files.
        readme_lines: README.md's lines.
        readme_words: README.md's words.
    """

    modules: list[tuple[int, str]]
    largest_class: tuple[int, str]
    cycles: list[list[str]]
    exported: int
    exported_by_packages: int
    readme_lines: int
    readme_words: int


def _exports(tree: ast.Module) -> int:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                value = node.value
                if isinstance(value, ast.List | ast.Tuple):
                    return len(value.elts)
    return 0


def measure(root: Path) -> Shape:
    """Measure the tree checked out at ``root``.

    Args:
        root: a checkout of the repository (holding ``runtime/deskpod`` and README.md).

    Returns:
        The :class:`Shape` of that tree.
    """
    package_dir = root / "runtime" / "deskpod"
    known = modules(package_dir)
    sizes: list[tuple[int, str]] = []
    largest_class = (0, "")
    exported = exported_by_packages = 0
    for name, path in known.items():
        text = path.read_text()
        sizes.append((len(text.splitlines()), name))
        tree = ast.parse(text)
        count = _exports(tree)
        exported += count
        if path.name == "__init__.py":
            exported_by_packages += count
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                size = (node.end_lineno or node.lineno) - start + 1
                largest_class = max(largest_class, (size, f"{name}.{node.name}"))
    readme = (root / "README.md").read_text()
    return Shape(
        modules=sorted(sizes, reverse=True),
        largest_class=largest_class,
        cycles=sorted(sorted(cycle) for cycle in cycles(module_edges(known))),
        exported=exported,
        exported_by_packages=exported_by_packages,
        readme_lines=len(readme.splitlines()),
        readme_words=len(readme.split()),
    )


def _row(label: str, shape: Shape) -> str:
    over = [m for m in shape.modules if m[0] > MAX_MODULE_LINES]
    largest = shape.modules[0]
    return (f"| {label} | {len(shape.modules)} | {len(over)} | {largest[1]} ({largest[0]}) "
            f"| {shape.largest_class[1]} ({shape.largest_class[0]}) | {len(shape.cycles)} "
            f"| {shape.exported} ({shape.exported_by_packages} by packages) "
            f"| {shape.readme_lines} lines, {shape.readme_words} words |")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options: the baseline tree to measure beside the checkout."""
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout to measure beside this one (e.g. a worktree of an older commit)")


def run(args: argparse.Namespace) -> None:
    """Print the shape of the checkout, and of ``--baseline`` beside it, as Markdown."""
    shapes = [("this checkout", measure(REPO))]
    if args.baseline is not None:
        shapes.insert(0, (f"baseline ({args.baseline})", measure(args.baseline)))
    print("| tree | modules | over 600 lines | largest module | largest class | import cycles "
          "| names in `__all__` | README |")
    print("|---|---|---|---|---|---|---|---|")
    for label, shape in shapes:
        print(_row(label, shape))
    for label, shape in shapes:
        print(f"\n{label}: modules over {MAX_MODULE_LINES} lines")
        for lines, name in shape.modules:
            if lines > MAX_MODULE_LINES:
                print(f"- {name}: {lines}")
        print(f"\n{label}: import cycles (every import form)")
        for cycle in shape.cycles:
            print(f"- {' ↔ '.join(cycle)}")
