"""deskpod's layering: what importing a package pulls in, and no import cycles
between its subpackages nor between its modules (no Docker, no X).

The daemon inside the sandbox imports :mod:`deskpod.protocol` and
:mod:`deskpod.agentd`; neither may drag in the host-side websocket client. The
import graphs are read from the source: between subpackages, the imports that run on
import (``if TYPE_CHECKING:`` blocks left out); between modules, every import form
(module level, ``if TYPE_CHECKING:``, inside functions), so a circle hidden behind a
type-only or a late import is still one. ``from deskpod import keys`` is an import of
the module ``deskpod.keys``, not of the package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import deskpod
from import_graph import cycles, imported, module_edges, module_imports, modules

PACKAGE_DIR = Path(deskpod.__file__).parent

# Host-side modules the in-sandbox packages must not import.
HOST_ONLY = ("websockets", "deskpod.client", "deskpod.controller", "docker", "openai", "anthropic")


@pytest.mark.process
@pytest.mark.parametrize("module", ["deskpod", "deskpod.errors", "deskpod.protocol", "deskpod.agentd",
                                    "deskpod.agentd.config", "deskpod.agentd.runner_wire"])
def test_in_sandbox_modules_do_not_import_the_host_client(module: str) -> None:
    """A fresh interpreter importing ``module`` has none of :data:`HOST_ONLY` loaded."""
    code = (f"import sys, {module}\n"
            f"loaded = [m for m in {HOST_ONLY!r} if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.process
def test_the_lazy_top_level_names_resolve() -> None:
    """``deskpod.Sandbox`` and friends load on first access; an unknown name is an AttributeError."""
    code = ("import sys, deskpod\n"
            "assert 'deskpod.client' not in sys.modules\n"
            "from deskpod import DeskpodError, Sandbox, SandboxClient\n"
            "import deskpod.client, deskpod.errors\n"
            "assert Sandbox is deskpod.client.Sandbox and SandboxClient is deskpod.client.SandboxClient\n"
            "assert DeskpodError is deskpod.errors.DeskpodError\n"
            "assert 'docker' not in sys.modules\n"
            "from deskpod import ObserveOptions, Observation, Point, Size, attach, attach_sync, DockerSandbox\n"
            "import deskpod.protocol, deskpod.service.attach, deskpod.backend\n"
            "assert (ObserveOptions, Observation, Point, Size) == (deskpod.protocol.ObserveOptions, "
            "deskpod.protocol.Observation, deskpod.protocol.Point, deskpod.protocol.Size)\n"
            "assert (attach, attach_sync) == (deskpod.service.attach.attach, deskpod.service.attach.attach_sync)\n"
            "assert DockerSandbox is deskpod.backend.DockerSandbox and issubclass(DockerSandbox, Sandbox)\n"
            "assert set(deskpod.__all__) <= set(dir(deskpod))\n"
            "try:\n"
            "    deskpod.nothing_here\n"
            "except AttributeError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('no AttributeError')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run on import: into ``if`` (not ``if TYPE_CHECKING:``) and ``try``."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                out += _module_level(stmt.body)
            out += _module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            out += _module_level(stmt.body)
            for handler in stmt.handlers:
                out += _module_level(handler.body)
            out += _module_level(stmt.orelse) + _module_level(stmt.finalbody)
        else:
            out.append(stmt)
    return out


MODULES = modules(PACKAGE_DIR)

EDGES = module_edges(MODULES)
"""deskpod's modules' imports of each other, by every import form."""


def _unit(module: str) -> str:
    """The layer a module belongs to: its subpackage or top-level module under deskpod."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "deskpod"


def package_edges() -> dict[tuple[str, str], set[str]]:
    """Edges between deskpod's subpackages and top-level modules, each with the modules that make it.

    Returns:
        ``(importer, imported) -> {importing module, ...}``, self edges left out.
    """
    edges: dict[tuple[str, str], set[str]] = {}
    for module, path in MODULES.items():
        for stmt in _module_level(ast.parse(path.read_text()).body):
            for target in imported(module, path.name == "__init__.py", stmt, MODULES):
                if not target.startswith("deskpod."):
                    continue
                edge = (_unit(module), _unit(target))
                if edge[0] != edge[1] and edge[0] != "deskpod":
                    edges.setdefault(edge, set()).add(module)
    return edges


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a two-node and a three-node cycle are found, a chain is not."""
    assert cycles({("a", "b"), ("b", "a"), ("c", "d")}) == [{"a", "b"}]
    assert cycles({("a", "b"), ("b", "c"), ("c", "a")}) == [{"a", "b", "c"}]
    assert cycles({("a", "b"), ("b", "c")}) == []


def test_the_graph_sees_the_agents_importing_the_controller() -> None:
    """The graph is built from the real tree: the agents import the controller's agent types."""
    assert ("agents", "controller") in package_edges()


def test_no_import_cycle_between_deskpod_packages() -> None:
    """Module-level imports between deskpod's subpackages form no cycle (``agents`` and
    ``controller`` formed one until the service took the agent from its client)."""
    edges = package_edges()
    found = cycles(set(edges))
    assert not found, {f"{a} -> {b}": sorted(edges[a, b]) for c in found for a, b in edges
                       if a in c and b in c}


def test_the_module_graph_reads_every_import_form(tmp_path: Path) -> None:
    """The module graph sees ``from package import module``, a relative import, a
    function's import and a type-only import, and leaves out a package re-exporting its
    children; on a made-up package, then on deskpod's own ``from deskpod import keys``."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "from pkg import a\nfrom pkg.sub import c\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "b.py": "def late():\n    from pkg import a\n",
        "sub/__init__.py": "from .c import C\n",
        "sub/c.py": "import pkg\nfrom .. import b\nfrom pkg.sub import C\n",
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    edges = module_edges(modules(package))
    assert edges == {("pkg.a", "pkg.b"), ("pkg.b", "pkg"), ("pkg.b", "pkg.a"), ("pkg.sub.c", "pkg"),
                     ("pkg.sub.c", "pkg.b"), ("pkg.sub.c", "pkg.sub")}
    assert cycles(edges) == [{"pkg.a", "pkg.b"}]
    assert ("deskpod.agentd.batch", "deskpod.keys") in EDGES


def test_no_import_cycle_between_modules_by_any_import_form() -> None:
    """No module of deskpod is on a circle of two or more modules, counting every import
    form (a circle hidden behind ``if TYPE_CHECKING:`` or an import inside a function is
    still one; a package's ``__init__`` re-exporting its children is not)."""
    found = cycles(EDGES)
    assert not found, [sorted(f"{a} -> {b}" for a, b in EDGES if a in c and b in c) for c in found]


def test_the_in_sandbox_packages_import_only_protocol_and_errors() -> None:
    """protocol imports only errors; agentd only protocol, errors, the stdlib-only tokens module
    (the bearer check both wires share) and nondumpable module (the prctl the daemon and the
    host-side servers share), settings (which imports only errors) and keys (the key
    names, which import only errors) (from the source, not a run)."""
    edges = package_edges()
    assert {b for a, b in edges if a == "protocol"} <= {"errors"}
    assert {b for a, b in edges if a == "tokens"} == set()
    assert {b for a, b in edges if a == "nondumpable"} == set()
    assert {b for a, b in edges if a == "settings"} <= {"errors"}
    assert {b for a, b in edges if a == "keys"} <= {"errors"}
    assert {b for a, b in edges if a == "agentd"} <= {"errors", "protocol", "tokens", "nondumpable", "settings",
                                                       "keys"}


def import_closure(start: str) -> set[str]:
    """Every deskpod module that importing ``start`` may load, by any import form (the
    parent packages of each module included: importing a module runs them first)."""
    graph: dict[str, set[str]] = {}
    for a, b in EDGES:
        graph.setdefault(a, set()).add(b)
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += sorted(graph.get(module, ()))
    return seen


SERVICE_CLIENT = ("deskpod.service.client",)
"""The modules of ``deskpod serve``'s client."""

SERVICE_SERVER = ("deskpod.service.server", "deskpod.service.console", "deskpod.console")
"""The modules (and packages) of ``deskpod serve``'s server side: the client must load none of them."""

SERVICE = ("deskpod.service", "deskpod.console")
"""``deskpod serve``'s package, and the console's old import path kept beside it."""


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_every_import_reads_type_only_and_function_level_imports(tmp_path: Path) -> None:
    """The reader itself: an import under ``if TYPE_CHECKING:``, one inside a function and a
    ``from package import module`` are all read."""
    source = tmp_path / "example.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "from deskpod.service import messages\n"
                      "if TYPE_CHECKING:\n"
                      "    from deskpod.service.server.app import create_app\n"
                      "def f():\n"
                      "    import deskpod.service.client\n"
                      "    from deskpod.protocol import Action\n")
    assert module_imports("deskpod.service.example", source, MODULES) == {
        "deskpod.service", "deskpod.service.messages", "deskpod.service.server.app", "deskpod.service.client",
        "deskpod.protocol"}


def test_the_service_client_never_imports_the_server() -> None:
    """``deskpod serve``'s client speaks the wire of :mod:`deskpod.service.messages` and loads
    no module of the server or the console, by any import form, directly or through what it
    imports."""
    for client in SERVICE_CLIENT:
        loaded = import_closure(client)
        assert "deskpod.service.messages" in loaded
        server = sorted(m for m in loaded if _within(m, SERVICE_SERVER))
        assert not server, (client, server)


def test_the_service_is_in_no_import_cycle() -> None:
    """No module of ``deskpod serve`` is in an import cycle of two or more modules, by any
    import form (the console and the server once imported each other, one side only to
    type it, the other inside a function)."""
    found = [sorted(c) for c in cycles(EDGES) if any(_within(m, SERVICE) for m in c)]
    assert not found, found


def test_the_service_paths_readme_showed_still_import() -> None:
    """The import paths of ``deskpod serve``'s pieces that README showed before the service
    became one package still give the same objects (re-exports kept for them)."""
    from deskpod import ControllerClient, SyncControllerClient
    from deskpod.client.live import LiveClient
    from deskpod.console.history import history_router
    from deskpod.console.live import live_router
    from deskpod.service import client
    from deskpod.service.console import history, live_view

    assert (ControllerClient, SyncControllerClient) == (client.ControllerClient, client.SyncControllerClient)
    assert (live_router, history_router) == (live_view.live_router, history.history_router)
    assert LiveClient.__module__ == "deskpod.client.live"


def test_no_two_test_modules_share_a_name() -> None:
    """pytest imports test modules by their base name (the test folders are not packages):
    two files of one name in different folders stop the whole run at collection."""
    tests = Path(__file__).resolve().parents[1]
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
