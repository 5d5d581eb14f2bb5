"""Code and docs cite only what a reader can open: the repository itself or a public
source, never private notes ("seed 002 §5.2", "case C-08", "DESIGN.md") or tracker
numbers in place of the rule (no Docker, no X)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["runtime", "tests", "bench", "images", "scripts", "README.md", "SECURITY.md", "seccomp/README.md",
           "compose.yaml", "docs", "mkdocs.yml"]
PRIVATE = re.compile(r"(?i:\bseed \d{3}\b|\bseed\b[^\n]{0,12}§)|\bcases? C-\d\d\b|\bC-\d\d\b|DESIGN\.md|\b[Ii]ssue \d+\b")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".html", ".js", ".json", ".txt", ".conf", ""}


def scanned_files() -> list[Path]:
    """The text files under :data:`SCANNED`, this test left out (it spells the patterns).

    Returns:
        Their paths.
    """
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in candidates:
            if file.suffix in SUFFIXES and "egg-info" not in str(file) and file != Path(__file__).resolve():
                found.append(file)
    return found


def test_the_scan_covers_the_tree() -> None:
    """A guard against scanning nothing."""
    names = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert {"README.md", "docs/index.md", "docs/hooks/generated.py", "runtime/deskpod/controller/gui/run.py",
            "tests/unit/test_layering.py"} <= names


def test_the_pattern_catches_private_citations() -> None:
    """The pattern itself: each private form is caught, plain text is not."""
    for text in ("(seed 002 §5.2)", "Seed 002 §8.3's levels", "(case C-08)", "C-21: fail fast", "see DESIGN.md",
                 "(issue 11, finding 7)"):
        assert PRIVATE.search(text), text
    assert not PRIVATE.search("the CIS Docker Benchmark §5 checks; a seed repository; C-style")


def test_no_private_citations() -> None:
    """No scanned file cites a private note or an issue number."""
    hits = []
    for path in scanned_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if PRIVATE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)
