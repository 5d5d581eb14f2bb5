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


NAMED_TEST = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+\*?))?|`(test_\w+\*?)`")
"""A test file (with ``::name``) or a test's name in backticks; ``*`` ends a name's prefix."""


def test_every_test_security_md_and_the_docs_name_exists() -> None:
    """SECURITY.md states only what a test shows: each test file and test it names exists
    (a renamed test would leave a claim standing on nothing)."""
    defined = {m for path in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M)}
    missing = []
    for doc in [ROOT / "SECURITY.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for file, in_file, bare in NAMED_TEST.findall(doc.read_text()):
            name = in_file or bare
            if file and not (ROOT / file).is_file():
                missing.append(f"{doc.name}: {file}")
                continue
            pool = re.findall(r"^(?:async )?def (test_\w+)", (ROOT / file).read_text(), re.M) if file else defined
            if name and not any(t == name or (name.endswith("*") and t.startswith(name[:-1])) for t in pool):
                missing.append(f"{doc.name}: {file}::{name}" if file else f"{doc.name}: {name}")
    assert not missing, "\n".join(sorted(set(missing)))
