"""Suspected prompt injection in what the sandbox shows.

Page text, dialogs and tab titles are third-party content: they can inform the
agent about the page, never authorize it. When that content addresses the agent
or instructs it to do what only the user may authorize (drop its instructions, run
a command, hand over a password or card, visit another site, lift a safety check,
keep something from the user), the run pauses and the human sees the quoted
evidence. Resuming authorizes nothing: every action after it is still validated and
confirmed like any other.

The detector is deterministic. It reads each text as a reader sees it
(:mod:`.text_norm`: zero-width characters, full-width letters, homoglyphs, leetspeak,
accents), finds cues in twelve languages (:mod:`.injection_cues`, phrase lists in
``injection_lexicon.toml``: English, French, German, Spanish, Portuguese, Italian,
Russian, Chinese, Japanese, Korean, Arabic, Hindi) and scores them by window
(:mod:`.injection_score`): an instruction (a verb and its target: "ignore" +
"instructions", "send" + "password", "open" + "terminal") aimed at an agent (a
"previous", an "AI agent:", a "you are now", a "SYSTEM:" line, "without telling the
user") is *strong* and pauses; an instruction alone ("enter your password", "run the
following command") is *weak*: noted, no pause. Each text is read forwards, each of its
lines backwards (for a bidi override), its spelled-out words joined (``i g n o r e``),
and its encoded runs decoded (:mod:`.encoded_runs`: base64, base64url, hex); the
evidence's source names the reading (``"page_text (decoded base64)"``). Texts come from
every source the daemon collects (:class:`~deskpod.protocol.TextSource`). Each finding
is quoted once per run, so a page the human already saw and resumed from does not pause
again for the same text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from deskpod.controller.policy.encoded_runs import decode_runs
from deskpod.controller.policy.injection_cues import find_cues, lexicon
from deskpod.controller.policy.injection_score import judge
from deskpod.controller.policy.text_norm import (
    CONFUSABLES, collapse_spaces, fold, match_form, plain_text, readable, reversed_lines, spaced_runs,
)

__all__ = ["Finding", "InjectionScan", "MAX_EVIDENCE_CHARS", "scan_text"]

MAX_EVIDENCE_CHARS = 240
"""Characters quoted around each finding."""

_LOOKALIKE_CHARS = frozenset(chr(cp) for cp in CONFUSABLES)


@dataclass(frozen=True)
class Finding:
    """One suspicious passage: ``kind`` (``override``, ``addressed_to_agent``, ``role_change``,
    ``reveal_prompt``, ``leave_browser``, ``run_command``, ``credentials``, ``visit_url``,
    ``disable_safety``, ``conceal``, ``fake_system_notice``), ``strong`` (pauses), ``source``
    (``page_text``, ``dialog``, ``title``, a :class:`~deskpod.protocol.TextSource` kind such
    as ``attributes`` or ``canvas``, or a page log: ``console``, ``network``
    (:mod:`deskpod.controller.page_logs`); with the reading appended when it was not the text as
    given: ``" (reversed)"``, ``" (letters spaced out)"``, ``" (decoded base64)"``) and ``quote``
    (the passage as read, at most :data:`MAX_EVIDENCE_CHARS` characters, whitespace
    collapsed; words mixing Latin letters with lookalikes are quoted folded to Latin)."""

    kind: str
    strong: bool
    source: str
    quote: str


@dataclass(frozen=True)
class InjectionScan:
    """The findings on one observation; ``pause`` when they call for the human."""

    findings: tuple[Finding, ...]

    @property
    def pause(self) -> bool:
        """A strong finding: an instruction aimed at the agent (see the module docstring)."""
        return any(f.strong for f in self.findings)

    def evidence(self) -> tuple[str, ...]:
        """One line per finding: ``"<kind> in <source>: <quote>"``."""
        return tuple(f"{f.kind} in {f.source}: {f.quote}" for f in self.findings)


@dataclass(frozen=True)
class _Reading:
    """One way to read a text: ``suffix`` for the evidence's source, the ``text`` as read
    (:func:`~.text_norm.readable`), ``loose`` (phrases anywhere: spelled-out letters)."""

    suffix: str
    text: str
    loose: bool = False


def _readings(raw: str) -> Iterator[_Reading]:
    plain = plain_text(raw)
    shown = collapse_spaces(plain)
    yield _Reading("", shown)
    yield _Reading(" (reversed)", reversed_lines(shown))
    joined = spaced_runs(plain)
    if joined:
        yield _Reading(" (letters spaced out)", joined, loose=True)
    for decoded in decode_runs(shown):
        yield _Reading(f" (decoded {decoded.encoding})", readable(decoded.text))


def _shown_word(word: str) -> str:
    """A word as quoted: folded to Latin when it mixes Latin letters with lookalikes."""
    if any(ch.isascii() and ch.isalpha() for ch in word) and any(ch in _LOOKALIKE_CHARS for ch in word):
        return fold(word)
    return word


def _quote(text: str, start: int, end: int, within_line: bool = False) -> str:
    """The passage around ``text[start:end]``; ``within_line``: not past its line (the
    lines around a reversed match are other lines backwards, noise to a reader)."""
    pad = max(0, (MAX_EVIDENCE_CHARS - (end - start)) // 2)
    low, high = max(0, start - pad), end + pad
    if within_line:
        line_end = text.find("\n", end)
        low, high = max(low, text.rfind("\n", 0, start) + 1), min(high, len(text) if line_end < 0 else line_end)
    return " ".join(_shown_word(word) for word in text[low:high].split())[:MAX_EVIDENCE_CHARS]


def _read(reading: _Reading) -> Iterator[tuple[str, bool, str]]:
    """``(kind, strong, quote)`` for each kind of instruction in one reading."""
    data, cues = find_cues(match_form(reading.text), loose=reading.loose)
    for verdict in judge(cues, lexicon(), data):
        start = len(data[: verdict.start].decode("utf-8", "ignore"))
        end = start + len(data[verdict.start: verdict.end].decode("utf-8", "ignore"))
        yield verdict.kind, verdict.strong, _quote(reading.text, start, end, within_line=reading.suffix == " (reversed)")


def scan_text(sources: dict[str, str | None], seen: set[str] | None = None) -> InjectionScan:
    """Look for instructions aimed at the agent in untrusted text.

    Each text is read as a reader sees it (:func:`~deskpod.controller.policy.text_norm.readable`),
    forwards, with each line reversed, with spelled-out words joined and with its encoded
    runs decoded (see the module docstring); time is linear in the text.

    Args:
        sources: text by where it came from (``{"page_text": ..., "dialog": ...}``);
            ``None`` values are skipped.
        seen: quotes already shown to the human in this run; matching findings are
            left out, and the new ones are added to it.

    Returns:
        The :class:`InjectionScan`: at most one finding per kind and source (a strong one
        before a weak one, the text as given before another reading), and one per kind
        and quote.
    """
    findings: list[Finding] = []
    quoted: set[tuple[str, str]] = set()
    for source, raw in sources.items():
        if not raw:
            continue
        best: dict[str, Finding] = {}
        for reading in _readings(raw):
            for kind, strong, quote in _read(reading):
                if kind not in best or (strong and not best[kind].strong):
                    best[kind] = Finding(kind, strong, source + reading.suffix, quote)
        for finding in best.values():
            if (seen is not None and finding.quote in seen) or (finding.kind, finding.quote) in quoted:
                continue
            quoted.add((finding.kind, finding.quote))
            findings.append(finding)
    if seen is not None:
        seen.update(f.quote for f in findings)
    return InjectionScan(tuple(findings))
