"""Scoring the injection scan's cues: which instructions a text gives, and how surely.

The cues (:mod:`.injection_cues`) are read in order with, for each category, the
latest cue seen. At each cue, each rule of the lexicon whose groups all have a cue
within the rule's span and one sentence, inside the last :data:`WINDOW_BYTES`, is *active*: an
instruction of its kind (a verb and what it acts on: "ignore" and "instructions",
"send" and "password", "open" and "terminal"). The window's score adds each active
kind's highest base and, once each, the boosts of the cues around them that make an
instruction aimed at an agent ("previous", "AI agent:", "you are now", "without telling
the user", a "SYSTEM:" line). A score of :data:`STRONG_SCORE` or more is a strong
verdict (the run pauses); below, the kinds are noted as weak. Reworded attacks are
caught as long as their verb, their target and one of these cues are in the lexicon in
some wording, in whatever order the language puts them.

Time is linear in the number of cues: each cue looks only at the rules its categories
appear in, and at all rules only when one of those is active.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from deskpod.controller.policy.injection_cues import VERBS, Cue, Lexicon, Rule

__all__ = ["STRONG_SCORE", "Verdict", "WINDOW_BYTES", "judge"]

_SENTENCE_END = re.compile("\n|[.!?;][\\s\"')\\]]|\u3002|\uff01|\uff1f|\uff1b|\u0964|\u061f|\u061b".encode())
"""A sentence's end: a verb and its target on either side of it are not one instruction."""

_HEADINGS = frozenset({"authority", "notice", "vocative"})
"""Boosts that bear on the sentences after them too (a heading, a line addressing the agent);
the others count in the instruction's sentence only."""

WINDOW_BYTES = 200
"""How far back (UTF-8 bytes of the normalized text; 200 Latin or ~66 Chinese characters)
the cues of one instruction and its boosts may lie."""

STRONG_SCORE = 3
"""The score from which a window's instructions pause the run."""


@dataclass(frozen=True)
class Verdict:
    """One kind of instruction in a text: ``kind`` (a rule's kind), ``strong`` (score at
    least :data:`STRONG_SCORE`), ``score`` and the UTF-8 byte offsets ``start``..``end``
    of the cues that made it."""

    kind: str
    strong: bool
    score: int
    start: int
    end: int


@dataclass
class _Reading:
    """What :func:`judge` knows at a cue: the latest cue of each category, the verbs since
    ``floor`` (for :func:`_rivalled`), the text."""

    data: bytes
    last: dict[str, Cue] = field(default_factory=dict)
    verbs: deque[Cue] = field(default_factory=deque)
    floor: int = 0

    def add(self, cue: Cue) -> None:
        for category in cue.categories:
            self.last[category] = cue
        self.floor = cue.end - WINDOW_BYTES
        if cue.categories & VERBS:
            self.verbs.append(cue)
        while self.verbs and self.verbs[0].start < self.floor:
            self.verbs.popleft()


def _members(rule: Rule, reading: _Reading) -> list[Cue] | None:
    """The latest cue of each of ``rule``'s groups in the window, when they lie within its
    span (:func:`_width`), in one sentence (unless the rule says otherwise) and, for a verb
    and its target, with no rival verb between them; ``None`` when the rule is not active."""
    members: list[Cue] = []
    for group in rule.need:
        best: Cue | None = None
        for category in group:
            cue = reading.last.get(category)
            if cue is not None and cue.start >= reading.floor and (best is None or cue.start > best.start):
                best = cue
        if best is None:
            return None
        members.append(best)
    if len(members) < 2:
        return members
    low, high = min(c.start for c in members), max(c.end for c in members)
    if high - low > rule.span and _width(reading.data, low, high) > rule.span:
        return None
    if rule.one_sentence and _SENTENCE_END.search(reading.data, low, high):
        return None
    if rule.rivals and _rivalled(rule, members[0], members[1], reading):
        return None
    return members


def _rivalled(rule: Rule, verb: Cue, target: Cue, reading: _Reading) -> bool:
    """Whether another verb that takes the same target stands between ``verb`` and
    ``target``: the target is that verb's ("scammers send fake alerts asking users to
    confirm their card number" asks nobody to send a card number)."""
    low, high = min(verb.end, target.end), max(verb.start, target.start)
    return any(low <= other.start and other.end <= high and other.categories & rule.rivals
               and not other.categories & rule.need[0] for other in reading.verbs)


def _width(data: bytes, low: int, high: int) -> int:
    """The width of ``data[low:high]`` in characters, a Chinese or Japanese character
    counting 3 (one of them says about as much as three Latin letters)."""
    text = data[low:high].decode("utf-8", "ignore")
    return len(text) + 2 * sum(1 for ch in text if "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")


def _boosts(booster: Cue, low: int, high: int, reading: _Reading) -> bool:
    """Whether ``booster`` bears on the instruction at ``low``..``high``: inside the window
    and in its sentence, or (a heading: "SYSTEM:", "Security check", "AI agent:") before it."""
    if booster.start < reading.floor:
        return False
    if booster.end <= low and booster.categories & _HEADINGS:
        return True
    return not _SENTENCE_END.search(reading.data, min(low, booster.start), max(high, booster.end))


def judge(cues: list[Cue], lexicon: Lexicon, data: bytes) -> list[Verdict]:
    """The kinds of instruction among ``cues``.

    Args:
        cues: cues in order of their start (:func:`~.injection_cues.find_cues`).
        lexicon: the lexicon whose rules to apply.
        data: the text the cues index (UTF-8 bytes of the match form).

    Returns:
        One :class:`Verdict` per kind found: its first strong window, else its first weak one.
    """
    reading = _Reading(data)
    found: dict[str, Verdict] = {}
    for cue in cues:
        reading.add(cue)
        candidates = [rule for category in cue.categories for rule in lexicon.rules_by_category.get(category, ())
                      if not (rule.kind in found and found[rule.kind].strong)]
        if not any(_members(rule, reading) for rule in candidates):
            continue
        for verdict in _window(lexicon.rules, reading, cue):
            if verdict.kind not in found or (verdict.strong and not found[verdict.kind].strong):
                found[verdict.kind] = verdict
    return list(found.values())


def _window(rules: tuple[Rule, ...], reading: _Reading, cue: Cue) -> list[Verdict]:
    """The verdicts of the window ending at ``cue``: each active kind, strong when the best
    rule's base and boosts, plus 1 for another kind of a base above 0, reach :data:`STRONG_SCORE`."""
    kinds: set[str] = set()
    noted: set[str] = set()
    best_kind, best_total = "", -1
    start = cue.start
    for rule in rules:
        members = _members(rule, reading)
        if members is None:
            continue
        noted.add(rule.kind)
        if rule.base:
            kinds.add(rule.kind)
        low, high = min(c.start for c in members), max(c.end for c in members)
        start = min(start, low)
        total = rule.base
        for category, weight in rule.boost.items():
            booster = reading.last.get(category)
            if booster is not None and _boosts(booster, low, high, reading):
                total += weight
                start = min(start, booster.start)
        if total > best_total:
            best_kind, best_total = rule.kind, total
    score = best_total + (1 if kinds - {best_kind} else 0)
    return [Verdict(kind, score >= STRONG_SCORE, score, start, cue.end) for kind in sorted(noted)]
