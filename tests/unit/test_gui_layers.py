"""The GUI run's package imports one way: each module only the ones its package docstring lists after it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import deskpod.controller.gui as gui

PACKAGE = Path(gui.__file__).parent


def layers() -> list[str]:
    """The package's modules in the order its docstring lists them, top (the loop) first.

    Returns:
        Their names, without the package.
    """
    return re.findall(r"^- :mod:`\.(\w+)`", gui.__doc__ or "", flags=re.M)


def imported_siblings(name: str) -> set[str]:
    """The package's modules ``name`` imports, by any import form (in functions and
    ``if TYPE_CHECKING:`` blocks too).

    Args:
        name: a module of the package.

    Returns:
        Their names, without the package.
    """
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    prefix = gui.__name__ + "."
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and node.module == gui.__name__:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
            found.add((node.module or "")[len(prefix):].split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(prefix):].split(".")[0] for alias in node.names
                         if alias.name.startswith(prefix))
    return found


def test_the_docstring_lists_every_module_once() -> None:
    """The list is the package: every module once, nothing else."""
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert sorted(layers()) == modules
    assert len(set(layers())) == len(layers())


def test_each_module_imports_only_the_modules_below_it() -> None:
    """No module of the package imports one listed before it (or itself): the concerns point down."""
    order = layers()
    upward = {name: sorted(imported_siblings(name) - set(order[index + 1:]))
              for index, name in enumerate(order)}
    assert {name: found for name, found in upward.items() if found} == {}
