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
from dataclasses import dataclass
from pathlib import Path

MAX_MODULE_LINES = 600
"""The issue's limit on a module's physical lines."""

REPO = Path(__file__).resolve().parent.parent


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


def _module_name(package_dir: Path, path: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(module: str, is_package: bool, node: ast.AST, known: set[str]) -> list[str]:
    """The deskpod modules one import statement names, ``from p import m`` resolved to ``p.m``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = []
    for alias in node.names:
        child = f"{source}.{alias.name}"
        out.append(child if child in known else source)
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Every module's imports of other deskpod modules, by any import form.

    Args:
        package_dir: the ``deskpod`` package folder.

    Returns:
        ``module -> {imported module, ...}``; a package importing its own children
        (its re-exports) is left out.
    """
    paths = {_module_name(package_dir, p): p for p in sorted(package_dir.rglob("*.py"))}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _targets(module, is_package, node, known):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if not target or target == module:
                    continue
                if is_package and target.startswith(module + "."):
                    continue
                edges.add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of a directed graph: its strongly connected parts of two or more nodes.

    Args:
        graph: ``node -> {successor, ...}``.

    Returns:
        Each cycle's nodes, sorted; the cycles sorted by their first node.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


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
    modules: list[tuple[int, str]] = []
    largest_class = (0, "")
    exported = exported_by_packages = 0
    for path in sorted(package_dir.rglob("*.py")):
        text = path.read_text()
        name = _module_name(package_dir, path)
        modules.append((len(text.splitlines()), name))
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
        modules=sorted(modules, reverse=True),
        largest_class=largest_class,
        cycles=strongly_connected(import_graph(package_dir)),
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
