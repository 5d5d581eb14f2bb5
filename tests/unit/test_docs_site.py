"""The documentation site (``mkdocs.yml``, ``docs/``) builds, strictly, and cannot drift from the code.

- ``mkdocs build --strict`` passes (through MkDocs' Python API, in-process): every page is in
  the navigation, every link and anchor resolves, every API reference object loads.
- Every generated block of every page (``docs/hooks/generated.py``: the settings, the
  commands, the exit codes, the wire's messages, the limits) is what the code makes now;
  the build makes the build-only ones (the API members, the source layout) itself.
- Every source path the pages name (``runtime/deskpod/...``, ``deskpod/...``, ``agentd/x.py``,
  ``controller/x.py``) exists, and every dotted ``deskpod.`` name they quote imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from deskpod.tracing.spans import ATTRIBUTES, SPANS, attribute_key

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "runtime" / "deskpod"


def generated_module() -> ModuleType:
    """``docs/hooks/generated.py``, imported by path (it is MkDocs' hook, not a package module).

    Returns:
        The module.
    """
    spec = importlib.util.spec_from_file_location("deskpod_docs_generated", DOCS / "hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[Path]:
    """Every Markdown page of the site.

    Returns:
        Their paths, sorted.
    """
    return sorted(DOCS.rglob("*.md"))


@pytest.mark.process  # mkdocstrings asks git where the sources are
def test_mkdocs_build_strict_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    build(config)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "api" / "client" / "index.html").is_file()


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_generated_block_is_current(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert generated_module().render(text) == text, (
        f"{page.relative_to(ROOT)} is stale: run python docs/hooks/generated.py --write")


def test_the_generated_blocks_hold_what_the_code_says() -> None:
    """A guard against blocks that render empty: each names what it must."""
    generated = generated_module()
    from deskpod.cli import EXIT_CODES
    from deskpod.protocol import limits

    commands = generated.cli_commands()
    for name in ("run", "mcp", "audit-key", "pool up", "verify-log"):
        assert f"| `deskpod {name}` |" in commands
    assert all(f"| `{code}` | `{name}` |" in generated.exit_codes_table() for code, (name, _) in EXIT_CODES.items())
    assert all(f"| `{name}` |" in generated.limits_table() for name in limits.__all__)
    assert "| service | `to_service` |" in generated.wire_counts()
    assert "| `deskpod.tokens` |" in generated.source_layout()
    assert "\n        - Sandbox\n" in generated.api_reference("deskpod.client")
    assert generated.render("<!-- generated: command-names -->\nold\n<!-- /generated: command-names -->").count(
        "`audit-key`") == 1
    build_only = "<!-- generated: api deskpod.errors /-->\n"
    assert generated.render(build_only) == build_only
    assert "::: deskpod.errors\n" in generated.render(build_only, build=True)


# A source path as the pages spell it: runtime/deskpod/x/y.py, deskpod/x/y.py, or agentd/x.py-style
# paths relative to the package (a first part that is one of its packages).
_PATH = re.compile(r"`((?:runtime/)?deskpod/[\w/]+(?:\.py)?|(?:[a-z_]+/)+[a-z_]+\.py)`")
_DOTTED = re.compile(r"`(deskpod(?:\.[A-Za-z_]\w*)+)(?![=\w.])")  # not a label (`deskpod.pool=NAME`)
_IMAGES = {"deskpod/sandbox", "deskpod/egress", "deskpod/hostguard", "deskpod/controller", "deskpod/demo"}


def _package_path(spelled: str) -> Path | None:
    """The file or folder of the package a spelled path names (``None``: not a package path).

    Args:
        spelled: the path as a page writes it.

    Returns:
        Where it would be under ``runtime/``.
    """
    rel = spelled.removeprefix("runtime/")
    if spelled in _IMAGES:
        return None
    if rel.startswith("deskpod/"):
        return ROOT / "runtime" / rel
    first = rel.split("/", 1)[0]
    if (PACKAGE / first).is_dir():
        return PACKAGE / rel
    return None


def _texts() -> list[tuple[str, str]]:
    """Each page's text (the generated API and layout pages left out: the code wrote them).

    Returns:
        ``(name, text)`` pairs, README.md included.
    """
    skip = {"reference/layout.md"}
    found = [(p.relative_to(DOCS).as_posix(), p.read_text(encoding="utf-8")) for p in pages()
             if p.relative_to(DOCS).as_posix() not in skip and "api" not in p.relative_to(DOCS).parts]
    return [*found, ("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))]


def test_every_source_path_the_docs_name_exists() -> None:
    missing = []
    for name, text in _texts():
        for spelled in _PATH.findall(text):
            path = _package_path(spelled)
            if path is not None and not path.exists():
                missing.append(f"{name}: {spelled}")
    assert missing == []


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of the package, or a name inside one.

    Args:
        dotted: ``deskpod.x.y``.

    Returns:
        True when the longest importable prefix holds the rest as attributes.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


TRACE_NAMES = {*SPANS, *(attribute_key(name) for name in ATTRIBUTES)}
"""The traces' span names and attribute keys (:mod:`deskpod.tracing.spans`): dotted, and not Python's."""


def test_every_dotted_name_the_docs_quote_imports() -> None:
    unknown = [f"{name}: {dotted}" for name, text in _texts() for dotted in _DOTTED.findall(text)
               if not _resolves(dotted) and dotted not in TRACE_NAMES]
    assert unknown == []


def test_the_readme_stays_short_and_keeps_the_two_commands() -> None:
    """README is the front page (at most 250 lines), the manual is the site; CI and
    ``.ci/run`` run the test command it states."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "\nscripts/up.sh        # deskpod up:" in readme
    assert "\nscripts/test.sh      # the whole test suite" in readme
    assert "exec scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
