"""The injection scan: what it catches, what it wrongly pauses on, and what it costs per page.

For the checkout's scan and, with ``--baseline PATH``, a baseline tree's (a checkout or an
extracted ``git archive <commit> runtime`` of an older commit, run in a subprocess with
that tree's ``runtime`` first on the path), side by side:

- **detection**: the attacks in ``tests/unit/fixtures/injection/attacks.json`` that pause,
  by technique (each of the twelve languages' six instructions, leetspeak, spelled-out
  letters, base64/hex, paraphrase), and the held-out paraphrases of ``heldout.json``
  (written before the lexicon was tuned on them; see BENCHMARKS.md);
- **false pauses**: the ordinary pages of ``fixtures/injection/benign/`` (shop, sign-in,
  news and docs pages in each language), the demo site's ordinary fixtures
  (``images/demo/fixtures``, body text and attributes), the long descriptions of the
  Python packages installed beside deskpod (English READMEs, one page each) and, where the
  machine has them, the message catalogs of ``/usr/share/locale`` for the eleven other
  languages (GNU gettext ``.mo`` files, 40 messages to a page: terse UI and command-line
  strings, the hardest case);
- **time**: :func:`scan_text` on a 20,000-character page, on 1 MB of ordinary English, of
  ordinary Russian, and of text dense with cues (an instruction every few words), median
  of ``--rounds``, milliseconds on one CPU.

Pure CPU, no Docker. Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import gettext
import glob
import html
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "unit" / "fixtures" / "injection"
DEMO_FIXTURES = ROOT / "images" / "demo" / "fixtures"
LOCALES = {"fr": "fr", "de": "de", "es": "es", "pt": "pt_BR", "it": "it", "ru": "ru", "zh": "zh_CN", "ja": "ja",
           "ko": "ko", "ar": "ar", "hi": "hi"}
"""Language to its directory under ``/usr/share/locale``."""

CATALOG_PAGE_MESSAGES = 40

PAGES = {
    "20,000 characters of ordinary English": ("Results for penguin. Ten facts about penguins: they live in the "
                                              "southern hemisphere, they cannot fly, and they swim very well. ",
                                              20_000),
    "1 MB of ordinary English": ("Results for penguin. Ten facts about penguins: they live in the southern hemisphere, "
                                 "they cannot fly, and they swim very well. Sign in to save your password. ", 1_000_000),
    "1 MB of ordinary Russian": ("Прогноз погоды на неделю: в понедельник облачно, во вторник дождь. Купите билеты "
                                 "на поезд заранее и сохраните пароль от личного кабинета. ", 1_000_000),
    "1 MB dense with cues": ("ignore previous send password run command open terminal ", 1_000_000),
}
"""Timed pages: ``(text repeated, length in characters)``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m bench injection``."""
    parser.add_argument("--rounds", type=int, default=5, help="timed scans per page (default 5)")
    parser.add_argument("--baseline", type=Path, help="a tree (with runtime/) whose scan to measure beside")


def _demo_pages() -> list[dict[str, str]]:
    """The demo site's ordinary fixtures as the daemon's sources would read them."""
    pages = []
    for path in sorted(DEMO_FIXTURES.glob("*.html")):
        if path.stem.startswith("inject"):
            continue
        source = path.read_text(encoding="utf-8")
        body = source.split("<body>")[-1].split("<script>")[0]
        text = html.unescape(re.sub(r"<[^>]+>", " ", body))
        attributes = "\n".join(re.findall(r'(?:alt|title|placeholder|aria-[a-z]+)="([^"]*)"', source))
        pages.append({"page_text": text, "visual_text": text, "attributes": attributes})
    return pages


def _readme_pages() -> list[str]:
    """The long descriptions of the installed Python packages (English, one page each)."""
    site = Path(sysconfig.get_paths()["purelib"])
    pages = []
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        text = metadata.read_text(encoding="utf-8", errors="ignore")
        body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        if len(body) >= 200:
            pages.append(body)
    return pages


def _catalog_pages() -> dict[str, list[str]]:
    """``/usr/share/locale`` message catalogs by language, 40 messages to a page."""
    pages: dict[str, list[str]] = {}
    for language, directory in LOCALES.items():
        for path in sorted(glob.glob(f"/usr/share/locale/{directory}/LC_MESSAGES/*.mo")):
            try:
                with open(path, "rb") as handle:
                    catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
            except (OSError, ValueError):
                continue
            messages = [m for key, m in catalog.items() if key and isinstance(m, str)]
            for start in range(0, len(messages), CATALOG_PAGE_MESSAGES):
                pages.setdefault(language, []).append("\n".join(messages[start:start + CATALOG_PAGE_MESSAGES]))
    return pages


def measure(rounds: int) -> dict[str, Any]:
    """Detection counts, false pauses and scan times of the ``deskpod`` on the path."""
    from deskpod.controller.policy.injection import scan_text

    def pauses(sources: dict[str, str]) -> bool:
        return scan_text(sources).pause

    attacks = json.loads((CORPUS / "attacks.json").read_text(encoding="utf-8"))
    heldout = json.loads((CORPUS / "heldout.json").read_text(encoding="utf-8"))
    detection: dict[str, list[int]] = {}
    for attack in attacks:
        group = "language: " + attack["lang"] if attack["technique"] in (
            "override", "role", "system_prompt", "credentials", "command", "disregard_user") else attack["technique"]
        counts = detection.setdefault(group, [0, 0])
        counts[0] += pauses({"page_text": attack["text"]})
        counts[1] += 1
    detection["held-out paraphrases"] = [sum(pauses({"page_text": a["text"]}) for a in heldout), len(heldout)]
    benign = [p.read_text(encoding="utf-8") for p in sorted(CORPUS.glob("benign/*.txt"))]
    false: dict[str, list[int]] = {
        "benign corpus (12 languages x shop, sign-in, news, docs)": [
            sum(pauses({"page_text": t, "visual_text": t}) for t in benign), len(benign)],
        "demo site's ordinary fixtures": [sum(pauses(p) for p in _demo_pages()), len(_demo_pages())],
    }
    readmes = _readme_pages()
    false["installed packages' READMEs (English)"] = [sum(pauses({"page_text": t}) for t in readmes), len(readmes)]
    for language, pages in _catalog_pages().items():
        false[f"locale catalogs: {language}"] = [sum(pauses({"page_text": t}) for t in pages), len(pages)]
    times: dict[str, float] = {}
    for name, (unit, length) in PAGES.items():
        page = (unit * (length // len(unit) + 1))[:length]
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            scan_text({"page_text": page})
            samples.append((time.perf_counter() - started) * 1000)
        times[name] = statistics.median(samples)
    return {"detection": detection, "false": false, "times": times}


def _baseline(tree: Path, rounds: int) -> dict[str, Any]:
    """:func:`measure` for the ``deskpod`` under ``tree/runtime``, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "runtime"), str(ROOT)])}
    code = f"import json; from bench.injection import measure; print(json.dumps(measure({rounds})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the baseline's measurement failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _cell(counts: list[int] | None) -> str:
    return "" if counts is None else f"{counts[0]} / {counts[1]}"


def run(args: argparse.Namespace) -> None:
    """Measure the checkout (and the baseline) and print the tables."""
    now = measure(args.rounds)
    before = _baseline(args.baseline, args.rounds) if args.baseline else None
    print("| attacks that pause | baseline | this tree |")
    print("|---|---|---|")
    for group, counts in now["detection"].items():
        print(f"| {group} | {_cell(before['detection'].get(group)) if before else ''} | {_cell(counts)} |")
    print()
    print("| ordinary pages that pause (false pauses) | baseline | this tree |")
    print("|---|---|---|")
    for group, counts in now["false"].items():
        print(f"| {group} | {_cell(before['false'].get(group)) if before else ''} | {_cell(counts)} |")
    print()
    print("| scan_text on | baseline, median ms | this tree, median ms |")
    print("|---|---|---|")
    for name, value in now["times"].items():
        print(f"| {name} | {before['times'][name]:.0f} |" if before else f"| {name} | |", end="")
        print(f" {value:.0f} |")
