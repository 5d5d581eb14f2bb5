"""The GUI run's package imports one way: each module only the ones its package docstring lists after it."""

from __future__ import annotations

import re
from pathlib import Path

import deskpod
import deskpod.controller.gui as gui
from import_graph import module_imports, modules

PACKAGE = Path(gui.__file__).parent

MODULES = modules(Path(deskpod.__file__).parent)
"""deskpod's modules by dotted name."""


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
    prefix = gui.__name__ + "."
    found = module_imports(prefix + name, PACKAGE / f"{name}.py", MODULES)
    return {module[len(prefix):].split(".")[0] for module in found if module.startswith(prefix)}


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
