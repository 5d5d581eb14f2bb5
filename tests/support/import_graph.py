"""A package's import graph read from its source (nothing imported), and its cycles.

One reader for the layering tests (``tests/unit/test_layering.py``,
``tests/unit/test_gui_layers.py``) and ``python -m bench structure``. It sees every
import form: module level, under ``if TYPE_CHECKING:``, inside functions and classes,
relative imports, and ``from package import module`` (an import of the module and of
the package, whose ``__init__`` runs first).
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["cycles", "imported", "module_edges", "module_imports", "modules", "owner"]


def modules(package_dir: Path) -> dict[str, Path]:
    """A package's modules by dotted name (a package by its ``__init__``), ``examples`` folders left out.

    Args:
        package_dir: the package's folder (its parent is the import root).

    Returns:
        ``dotted name -> source file``.
    """
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "examples" not in path.relative_to(package_dir).parts:
            parts = path.relative_to(package_dir.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, is_package: bool, stmt: ast.stmt, known: dict[str, Path]) -> list[str]:
    """The names one import statement imports: ``from package import name`` imports the
    package, and the module ``package.name`` too when ``known`` has it.

    Args:
        module: the importing module's dotted name.
        is_package: it is a package's ``__init__`` (relative imports start from it).
        stmt: any statement (not an import: nothing).
        known: the modules by dotted name.

    Returns:
        Dotted names, absolute.
    """
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names]
    if isinstance(stmt, ast.ImportFrom):
        if not stmt.level:
            source = stmt.module or ""
        else:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (stmt.level - 1)]
            source = ".".join(base + ([stmt.module] if stmt.module else []))
        return [source] + [f"{source}.{alias.name}" for alias in stmt.names if f"{source}.{alias.name}" in known]
    return []


def owner(name: str, known: dict[str, Path]) -> str | None:
    """The module of ``known`` an imported name lies in (``deskpod.a.b.name`` -> ``deskpod.a.b``).

    Returns:
        Its dotted name; ``None`` when the name is outside the modules.
    """
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` one source file imports, by every import form.

    A package's ``__init__`` importing its own children (re-exporting them) is left out:
    a child importing its package is not a circle.

    Args:
        module: the file's dotted name.
        path: its source.
        known: the modules by dotted name (:func:`modules`).

    Returns:
        Dotted names of ``known``, the module itself left out.
    """
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.stmt):
            continue
        for target in imported(module, is_package, node, known):
            name = owner(target, known)
            if name is None or name == module or (is_package and name.startswith(f"{module}.")):
                continue
            found.add(name)
    return found


def module_edges(known: dict[str, Path]) -> set[tuple[str, str]]:
    """Edges between the modules by every import form (:func:`module_imports`).

    Args:
        known: the modules by dotted name (:func:`modules`).

    Returns:
        ``(importing module, imported module)`` pairs, self edges left out.
    """
    return {(module, target) for module, path in known.items() for target in module_imports(module, path, known)}


def cycles(edges: set[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm).

    Args:
        edges: directed edges.

    Returns:
        Each cycle's nodes.
    """
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
