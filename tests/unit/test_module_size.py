"""Modules of one job stay small: no Python file of the repository is over 600 lines.

``bench/structure.py`` reports the sizes; this test keeps the rule (three daemon modules
had grown past it, unnoticed, when three pieces of work each added a little)."""

from __future__ import annotations

from pathlib import Path

from bench.structure import MAX_MODULE_LINES

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("runtime", "bench", "images", "scripts", "tests", "docs")


def test_no_module_is_over_600_lines() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for folder in FOLDERS for path in (ROOT / folder).rglob("*.py") if "egg-info" not in str(path)}
    assert len(sizes) > 300 and "runtime/deskpod/agentd/observe.py" in sizes
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not over, over
