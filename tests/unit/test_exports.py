"""Every module of deskpod declares ``__all__``: a literal list, sorted, without
duplicates, every name in it defined; each package's ``__init__`` exports what
its ``__all__`` promises (no Docker, no X)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import deskpod

PACKAGE_DIR = Path(deskpod.__file__).parent

def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "examples" in path.relative_to(PACKAGE_DIR).parts:
            continue
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


MODULES = _modules()
PACKAGES = [name for name, path in MODULES if path.name == "__init__.py"]


def declared_all(path: Path) -> list[str]:
    """The module's ``__all__``, read from its source.

    Args:
        path: the module's file.

    Returns:
        The names, in the order written.

    Raises:
        AssertionError: no module-level ``__all__``, or not a literal list of strings.
    """
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            names = ast.literal_eval(value)
            assert isinstance(names, list) and all(isinstance(name, str) for name in names), path
            return names
    raise AssertionError(f"{path} has no __all__")


def test_the_tree_has_modules_and_packages() -> None:
    """The walk finds the tree (a guard against checking nothing)."""
    names = {name for name, _ in MODULES}
    assert {"deskpod", "deskpod.protocol", "deskpod.controller.gui.run", "deskpod.agentd.app"} <= names
    assert "deskpod.protocol" in PACKAGES


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_all_is_sorted_unique_and_defined(module: str, path: Path) -> None:
    """``__all__`` exists, is sorted (plain ``sorted()``), has no duplicate, and names only what the module defines."""
    names = declared_all(path)
    assert len(set(names)) == len(names), f"{module}: duplicate names in __all__"
    assert names == sorted(names), f"{module}: __all__ should read {sorted(names)}"
    loaded = importlib.import_module(module)
    missing = [name for name in names if not hasattr(loaded, name)]
    assert not missing, f"{module}: __all__ names undefined {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_star_import_of_a_package_gives_its_all(package: str) -> None:
    """``from package import *`` binds exactly the names ``__all__`` promises."""
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # a fixed package name from the walk above
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(importlib.import_module(package).__all__)


def test_the_check_rejects_an_unsorted_or_undefined_list(tmp_path: Path) -> None:
    """The reader returns the list as written, so an unsorted list compares unequal to its sorted self."""
    path = tmp_path / "m.py"
    path.write_text('__all__ = ["b", "a"]\n')
    assert declared_all(path) == ["b", "a"] != sorted(declared_all(path))
    path.write_text("x = 1\n")
    with pytest.raises(AssertionError):
        declared_all(path)
